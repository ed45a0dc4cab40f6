//! The scheduler's decision to reclaim reads the covered estimate: it must never skip a reclaim
//! that pays for itself because the estimate read low.

use tidemark_bucket::{ReclaimScheduler, SchedulerConfig};
use tidemark_engine_api::{Engine, LocalLookup, Record, WriteBatch};

use super::support::{BUCKET, Site, fresh_with, runtime};
use crate::EngineFactory;

/// One batch of equal entries at offsets 2, 2, 3, 3, 6 and the lake at 4: four of five entries,
/// four fifths of the bytes, are covered. The *default* scheduler (RocksDB's compaction policy
/// waits for half the bytes) runs the reclaim at the first request, and the four are gone.
pub fn default_scheduler_reclaims_repeated_offsets_and_gaps<F: EngineFactory>(factory: F) {
    let site = Site::new(factory);
    runtime().block_on(async {
        let scheduler = ReclaimScheduler::new(SchedulerConfig::default()).unwrap();
        let (engine, lake, bucket) = fresh_with(&site, Some(&scheduler)).await;
        let keys = [(b"p", 2), (b"q", 2), (b"r", 3), (b"s", 3), (b"t", 6)];
        let batch: WriteBatch = keys
            .iter()
            .map(|(k, o)| Record::put(k.to_vec(), b"same".to_vec(), *o))
            .collect();
        lake.append_batch(&batch).unwrap();
        bucket.apply(batch).await.unwrap();
        bucket
            .on_lake_progress(lake.commit(4).unwrap())
            .await
            .unwrap();
        scheduler.settled(BUCKET).await;
        let stats = scheduler.stats().buckets[&BUCKET];
        assert_eq!(
            (stats.runs, stats.skipped),
            (1, 0),
            "{}: the covered estimate must not make the scheduler skip: {stats:?}, {:?}",
            F::NAME,
            engine.reclaimable().unwrap()
        );
        for (key, offset) in keys {
            let local = engine.lookup(key).unwrap();
            if offset < 4 {
                assert_eq!(local, LocalLookup::Miss, "{}: covered {offset}", F::NAME);
            } else {
                assert_eq!(local.offset(), Some(offset), "{}", F::NAME);
            }
            let expected = Some(b"same".to_vec());
            assert_eq!(bucket.lookup(key).await.unwrap(), expected, "{}", F::NAME);
        }
        bucket.close().await.unwrap();
        scheduler.shutdown().await;
    });
}
