//! Lake-progress notifications that repeat, arrive out of order, or fail to refresh.

use std::sync::Arc;

use tidemark_bucket::Error;
use tidemark_bucket::HistoricalBucket;
use tidemark_bucket::Progress;
use tidemark_bucket::lake::{LakeLookuper, LakeSnapshot};
use tidemark_engine_api::Engine;

use super::support::{self, Wal, ignored, published};
use crate::EngineFactory;

/// Repeated and stale notifications are ignored and counted without refreshing the lookuper or
/// touching `W`; newer ones advance it; a notification beyond the applied end is clamped and,
/// repeated after more records are applied, advances `W` again without a second refresh. `W`
/// never decreases, and the bucket answers the model at the end.
pub fn repeated_and_out_of_order_notifications<F: EngineFactory>(factory: F) {
    let wal = Wal::generate(0x0DD, 150, 24, 6);
    support::run_fresh(factory, async |engine, lake, bucket| {
        support::write::<F>(&bucket, &lake, &wal, 0, 100).await;
        let s1 = lake.commit(40).unwrap();
        let s2 = lake.commit(60).unwrap();
        let s3 = lake.commit(80).unwrap();
        let refreshes = || lake.counters().refreshes;
        let base = refreshes();

        let on = |s: LakeSnapshot| bucket.on_lake_progress(s);
        assert_eq!(published(on(s2).await.unwrap()), (true, 60, true));
        assert_eq!(ignored(on(s2).await.unwrap()), 60);
        assert_eq!(ignored(on(s1).await.unwrap()), 60);
        assert_eq!(engine.watermark(), 60);
        assert_eq!(refreshes(), base + 1);
        assert_eq!(published(on(s3).await.unwrap()), (true, 80, true));
        assert_eq!(ignored(on(s1).await.unwrap()), 80);
        assert_eq!(ignored(on(s2).await.unwrap()), 80);
        assert_eq!(ignored(on(s3).await.unwrap()), 80);
        assert_eq!(refreshes(), base + 2);
        assert_eq!(lake.served(), Some(s3));
        support::reclaim_and_assert_model::<F>(&bucket, &wal, 100, "after stale notifications")
            .await;

        // The lake is ahead of this replica: W is clamped to the applied end.
        lake.append(wal.records(100, 150).iter().cloned()).unwrap();
        let s4 = lake.commit(150).unwrap();
        assert_eq!(published(on(s4).await.unwrap()), (true, 100, true));
        assert_eq!(published(on(s4).await.unwrap()), (false, 100, false));
        support::replay::<F>(&bucket, &wal, 100, 130).await;
        assert_eq!(published(on(s4).await.unwrap()), (false, 130, true));
        assert_eq!(ignored(on(s3).await.unwrap()), 130);
        support::replay::<F>(&bucket, &wal, 130, 150).await;
        assert_eq!(published(on(s4).await.unwrap()), (false, 150, true));
        assert_eq!(ignored(on(s4).await.unwrap()), 150);
        assert_eq!(refreshes(), base + 3);

        let stats = bucket.stats();
        assert_eq!(stats.notifications, 13);
        assert_eq!(stats.ignored_notifications, 7);
        assert_eq!(stats.watermark_advances, 5);
        support::reclaim_and_assert_model::<F>(
            &bucket,
            &wal,
            150,
            "after the clamped notifications",
        )
        .await;
    });
}

/// A refresh that fails publishes nothing: `W`, the served snapshot and the local data stay as
/// they were, the failure is counted and returned, and the same notification succeeds when
/// retried. A failed refresh during recovery changes nothing either, and a failing lake lookup
/// is an error, never "absent".
pub fn failed_refresh_leaves_watermark<F: EngineFactory>(factory: F) {
    let wal = Wal::generate(0xFA11, 100, 20, 5);
    support::run_fresh(factory, async |engine, lake, bucket| {
        let s1 = support::write_all_and_reclaim::<F>(&bucket, &lake, &wal, 40).await;

        let s2 = lake.commit(80).unwrap();
        lake.fail_next_refreshes(1);
        let err = bucket.on_lake_progress(s2).await.unwrap_err();
        assert!(matches!(err, Error::Lake { .. }), "{err}");
        assert_eq!(engine.watermark(), 40);
        assert_eq!(bucket.lake_end(), 40);
        assert_eq!(lake.served(), Some(s1));
        assert_eq!(bucket.stats().refresh_failures, 1);
        // Nothing above the old W is covered, so a reclaim now removes nothing.
        assert_eq!(support::reclaim::<F>(&bucket).await.removed(), 0);
        support::assert_model::<F>(&bucket, &wal, 100, "after the failed refresh").await;

        // The same notification, retried, goes through.
        let p = bucket.on_lake_progress(s2).await.unwrap();
        assert!(matches!(p, Progress::Published { .. }));
        assert_eq!(engine.watermark(), 80);
        support::reclaim_and_assert_model::<F>(&bucket, &wal, 100, "after the retried refresh")
            .await;

        // A second bucket instance whose lookuper fails recovery changes nothing.
        let reader = Arc::new(lake.reader());
        reader.fail_refreshes(true);
        let other = HistoricalBucket::new(Arc::clone(&engine), reader.clone());
        let s3 = lake.commit(100).unwrap();
        assert!(other.recover(s3).await.is_err());
        assert_eq!(engine.watermark(), 80);
        assert_eq!(other.stats().refresh_failures, 1);
        assert_eq!(other.stats().recoveries, 0);
        drop(other);

        // A failing lake lookup is an error; local answers do not need the lake.
        lake.fail_lookups(true);
        let mut lake_errors = 0;
        for key in wal.keys() {
            match bucket.lookup(&key).await {
                Ok(v) => assert_eq!(v, wal.answer_at(&key, 100)),
                Err(e) => {
                    assert!(matches!(e, Error::Lake { .. }), "{e}");
                    assert_eq!(
                        engine.lookup(&key).unwrap(),
                        tidemark_engine_api::LocalLookup::Miss
                    );
                    lake_errors += 1;
                }
            }
        }
        assert!(lake_errors > 0);
        assert_eq!(bucket.stats().lake_failures, lake_errors);
        lake.fail_lookups(false);
        assert!(lake.lookup(support::ABSENT).await.unwrap().is_none());
    });
}
