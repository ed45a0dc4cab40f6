//! The lookuper refresh happens before the watermark that relies on it is published.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tidemark_bucket::HistoricalBucket;
use tidemark_bucket::lake::{LakeSnapshot, MemoryLake};
use tidemark_engine_api::{Engine, LocalLookup};

use super::support::{self, Wal, show};
use crate::EngineFactory;

const RACERS: usize = 3;

/// Lookups of every key in a loop until `stop`; each must be the model's answer at `end`.
async fn race<F: EngineFactory>(
    bucket: Arc<support::Bucket>,
    wal: Arc<Wal>,
    end: u64,
    stop: Arc<AtomicBool>,
) -> u64 {
    let mut lookups = 0;
    while !stop.load(Ordering::SeqCst) || lookups == 0 {
        for key in wal.keys() {
            let got = bucket.lookup(&key).await.unwrap();
            support::assert_answer::<F>(&bucket, &wal, &key, got, end, "racing lookup");
            lookups += 1;
        }
    }
    lookups
}

/// A refresh held open (the lookuper still serves the old snapshot, which has stale answers for
/// keys rewritten since) must not let `W` move: while it is held, lookups and even a reclaim see
/// the old `W`, and every answer is still right. Lookups racing the whole publish (slow lake
/// lookups, concurrent reclaims) always return the model's answer. Finally, a watermark
/// published *without* a refresh (bypassing the bucket) is caught: a local miss is refused
/// rather than answered from the stale lake, until lake progress brings the lookuper up.
pub fn refresh_ordering_under_slow_refresh<F: EngineFactory>(factory: F) {
    let site = support::Site::new(factory);
    let wal = Arc::new(Wal::generate(0x5_10E, 280, 32, 8));
    support::runtime().block_on(async {
        let engine = site.open();
        let lake = Arc::new(MemoryLake::new());
        let bucket = Arc::new(HistoricalBucket::new(Arc::clone(&engine), lake.clone()));
        bucket.recover(LakeSnapshot::default()).await.unwrap();
        let s1 = support::write_all_and_reclaim::<F>(&bucket, &lake, &wal, 100).await;

        // Keys whose answer in the old snapshot is stale: exactly what a premature W would expose.
        let stale: Vec<Vec<u8>> = wal
            .keys()
            .into_iter()
            .filter(|k| lake.value_at(s1.id, k).unwrap() != wal.answer_at(k, 280))
            .collect();
        assert!(!stale.is_empty());

        let s2 = lake.commit(250).unwrap();
        lake.set_lookup_delay(Duration::from_micros(200));
        let stop = Arc::new(AtomicBool::new(false));
        let racers: Vec<_> = (0..RACERS)
            .map(|_| {
                tokio::spawn(race::<F>(
                    Arc::clone(&bucket),
                    Arc::clone(&wal),
                    280,
                    Arc::clone(&stop),
                ))
            })
            .collect();

        lake.hold_refreshes();
        let publish = tokio::spawn({
            let bucket = Arc::clone(&bucket);
            async move { bucket.on_lake_progress(s2).await }
        });
        lake.wait_for_held_refreshes(1).await.unwrap();
        // Held: the lookuper serves s1, so W must still be 100.
        for _ in 0..3 {
            assert_eq!(engine.watermark(), 100);
            assert_eq!(lake.served(), Some(s1));
            assert_eq!(support::reclaim::<F>(&bucket).await.removed(), 0);
            support::assert_model::<F>(&bucket, &wal, 280, "refresh held").await;
        }
        for key in &stale {
            assert_ne!(engine.lookup(key).unwrap(), LocalLookup::Miss);
        }
        lake.release_refreshes();
        publish.await.unwrap().unwrap();
        assert_eq!(engine.watermark(), 250);
        // Reclaims racing the lookups.
        for _ in 0..3 {
            support::reclaim::<F>(&bucket).await;
            tokio::task::yield_now().await;
        }
        stop.store(true, Ordering::SeqCst);
        for racer in racers {
            assert!(racer.await.unwrap() > 0);
        }
        lake.set_lookup_delay(Duration::ZERO);
        support::assert_model::<F>(&bucket, &wal, 280, "after the publish").await;

        // A watermark published behind the bucket's back, without a refresh: the lookuper still
        // serves s2 (end 250) while W = 280. Local misses are refused, never answered stale.
        engine.advance_watermark(280).unwrap();
        support::reclaim::<F>(&bucket).await;
        let mut refused = 0;
        for key in wal.keys() {
            match bucket.lookup(&key).await {
                Ok(v) => assert_eq!(v, wal.answer_at(&key, 280), "{}", show(&key)),
                Err(e) => {
                    assert!(support::is_lake_error(&e), "{e}");
                    refused += 1;
                }
            }
        }
        assert!(refused > 0);
        assert_eq!(bucket.stats().lake_behind, refused);
        // Lake progress at W (not beyond it) still brings the lookuper up to date.
        let s3 = lake.commit(280).unwrap();
        let p = bucket.on_lake_progress(s3).await.unwrap();
        assert!(matches!(
            p,
            tidemark_bucket::Progress::Published {
                refreshed: true,
                ..
            }
        ));
        support::assert_model::<F>(&bucket, &wal, 280, "after the lake caught up").await;
    });
}
