//! HistoricalBucket paths the backend scenarios do not reach: scheduler wiring under a paused
//! clock, a lagging replica with a retention distance, repeated recovery, serving before
//! recovery, and closing.

// Test helpers (gates, fake engines) should fail the test loudly on a poisoned lock.
#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::time::Duration;

use engine_api::bucket::{HistoricalBucket, Progress};
use engine_api::lake::{LakeSnapshot, MemoryLake};
use engine_api::scheduler::Requested;
use engine_api::{
    BucketId, Engine, EngineOptions, Error, LocalLookup, MemoryEngine, ReclaimScheduler, Record,
    SchedulerConfig, WriteBatch,
};

fn batch(records: impl IntoIterator<Item = Record>) -> WriteBatch {
    records.into_iter().collect()
}

/// `n` puts of keys `k0..k{n}` at offsets `0..n`.
fn puts(range: std::ops::Range<u64>) -> WriteBatch {
    batch(range.map(|i| Record::put(format!("k{i}"), format!("v{i}"), i)))
}

fn memory(distance: u64) -> Arc<MemoryEngine> {
    Arc::new(MemoryEngine::new(
        EngineOptions::default().with_retention_distance(distance),
    ))
}

#[tokio::test(start_paused = true)]
async fn lake_progress_requests_a_reclaim_that_the_scheduler_runs() {
    let engine = memory(0);
    let lake = Arc::new(MemoryLake::new());
    let sched =
        ReclaimScheduler::new(SchedulerConfig::default().with_min_interval(Duration::from_secs(1)))
            .unwrap();
    let bucket = HistoricalBucket::new(engine.clone(), lake.clone())
        .with_scheduler(&sched, BucketId(3))
        .unwrap();
    assert_eq!(bucket.bucket_id(), Some(BucketId(3)));
    bucket.recover(LakeSnapshot::default()).await.unwrap();
    let b = puts(0..20);
    lake.append_batch(&b).unwrap();
    bucket.apply(b).await.unwrap();

    let s = lake.commit(15).unwrap();
    let p = bucket.on_lake_progress(s.id, s.end_offset).await.unwrap();
    assert!(matches!(
        p,
        Progress::Published {
            refreshed: true,
            reclaim: Some(Requested::Queued),
            ..
        }
    ));
    tokio::time::sleep(Duration::from_secs(60)).await;
    let stats = sched.bucket_stats(BucketId(3)).unwrap();
    assert_eq!((stats.runs, stats.entries_removed), (1, 15));
    assert_eq!(engine.lookup(b"k3").unwrap(), LocalLookup::Miss);
    assert_eq!(bucket.lookup(b"k3").await.unwrap(), Some(b"v3".to_vec()));
    assert_eq!(bucket.lookup(b"k17").await.unwrap(), Some(b"v17".to_vec()));
    let b = bucket.stats();
    assert_eq!(
        (b.lake_fallbacks, b.local_values, b.reclaim_requests),
        (1, 1, 1)
    );

    // A stale repeat requests nothing.
    assert!(matches!(
        bucket.on_lake_progress(s.id, s.end_offset).await.unwrap(),
        Progress::Ignored { watermark: 15 }
    ));
    assert_eq!(bucket.stats().reclaim_requests, 1);
    bucket.close().await.unwrap();
    assert_eq!(Arc::strong_count(&engine), 1, "close released the engine");
    sched.shutdown().await;
}

#[tokio::test]
async fn lagging_replica_with_retention_distance_never_serves_overtaken_versions() {
    // D = 20 keeps local entries in [W - 20, W) after the recovery reclaim.
    let engine = memory(20);
    let lake = Arc::new(MemoryLake::new());
    let wal = batch([
        Record::put("old-only", "old-only@22", 22),
        Record::put("k", "k@25 (overtaken)", 25),
        Record::put("k", "k@35", 35),
        Record::delete("old-only", 36),
    ]);
    lake.append_batch(&wal).unwrap();
    // This replica applied only the first two records (applied end 26).
    engine.apply(&batch(wal.records()[..2].to_vec())).unwrap();
    assert_eq!(engine.applied_end(), 26);

    let bucket = HistoricalBucket::new(engine.clone(), lake.clone());
    let s = lake.commit(37).unwrap();
    assert_eq!(
        bucket.recover(s).await.unwrap(),
        37,
        "replay from the lake end"
    );
    assert_eq!(engine.watermark(), 37);
    // Both old versions survive locally (kept by D) but are older than the lake's.
    assert!(matches!(
        engine.lookup(b"k").unwrap(),
        LocalLookup::Value { offset: 25, .. }
    ));
    assert_eq!(bucket.lookup(b"k").await.unwrap(), Some(b"k@35".to_vec()));
    assert_eq!(bucket.lookup(b"old-only").await.unwrap(), None);

    // Records applied after recovery are authoritative again.
    bucket
        .apply(batch([Record::put("k", "k@40", 40)]))
        .await
        .unwrap();
    assert_eq!(bucket.lookup(b"k").await.unwrap(), Some(b"k@40".to_vec()));
}

#[tokio::test]
async fn a_second_recovery_never_moves_the_lookuper_backwards() {
    let engine = memory(0);
    let lake = Arc::new(MemoryLake::new());
    let b = batch([Record::put("a", "a0", 0), Record::put("a", "a1", 1)]);
    lake.append_batch(&b).unwrap();
    engine.apply(&b).unwrap();
    let s1 = lake.commit(1).unwrap();
    let s2 = lake.commit(2).unwrap();
    let bucket = HistoricalBucket::new(engine.clone(), lake.clone());
    assert_eq!(bucket.recover(s2).await.unwrap(), 2);
    engine.reclaim().unwrap();
    assert_eq!(bucket.recover(s1).await.unwrap(), 2);
    assert_eq!(lake.served(), Some(s2));
    assert_eq!(bucket.lake_end(), 2);
    assert_eq!(engine.watermark(), 2);
    assert_eq!(bucket.lookup(b"a").await.unwrap(), Some(b"a1".to_vec()));
    assert_eq!(bucket.stats().recoveries, 2);
}

#[tokio::test]
async fn a_local_miss_before_recovery_is_refused_when_w_is_persisted() {
    let engine = memory(0);
    engine.apply(&puts(0..10)).unwrap();
    engine.advance_watermark(5).unwrap();
    engine.reclaim().unwrap();
    let lake = Arc::new(MemoryLake::new());
    lake.append_batch(&puts(0..10)).unwrap();
    let bucket = HistoricalBucket::new(engine.clone(), lake.clone());
    assert_eq!(bucket.lookup(b"k7").await.unwrap(), Some(b"v7".to_vec()));
    assert!(matches!(bucket.lookup(b"k2").await, Err(Error::Lake(_))));
    assert_eq!(bucket.stats().lake_behind, 1);
    bucket.recover(lake.commit(5).unwrap()).await.unwrap();
    assert_eq!(bucket.lookup(b"k2").await.unwrap(), Some(b"v2".to_vec()));
}

#[tokio::test]
async fn invalid_keys_are_rejected_before_the_lake_is_asked() {
    let lake = Arc::new(MemoryLake::new());
    let bucket = HistoricalBucket::new(memory(0), lake.clone());
    bucket.recover(LakeSnapshot::default()).await.unwrap();
    assert!(matches!(
        bucket.lookup(b"").await,
        Err(Error::InvalidInput(_))
    ));
    assert_eq!(lake.counters().lookups, 0);
}
