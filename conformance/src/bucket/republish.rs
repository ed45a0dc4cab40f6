//! A lake that commits a new snapshot at the same end offset (a compaction, a rewrite, a schema
//! change) and expires old snapshots: the lookuper must follow the newest snapshot, while `W`
//! moves only with the end offset.

use std::sync::Arc;

use tidemark_bucket::Error;
use tidemark_bucket::lake::{LakeLookuper, LakeSnapshot, MemoryLake};
use tidemark_bucket::{HistoricalBucket, Progress};
use tidemark_engine_api::Engine;

use super::lakes::TestLake;
use super::support::{self, Rng, Wal, key, published, show};
use crate::EngineFactory;

/// Snapshot 1 ends at 20 and publishes `W = 20`; snapshot 2 ends at 20 too: it refreshes the
/// lookuper without moving `W`; older and repeated snapshots are then ignored and counted. With
/// the lake keeping only its newest snapshot, the bucket is never left on an expired one.
pub fn republish_same_end_refreshes_lookuper<F: EngineFactory, L: TestLake>(factory: F) {
    let wal = Wal::generate(0x5A_11E, 40, 12, 4);
    support::run_fresh_on::<F, L>(factory, async |engine, lake, reader, bucket| {
        support::write::<F>(&bucket, &lake, &wal, 0, 40).await;
        let s1 = lake.commit(20).await;
        assert_eq!(
            published(bucket.on_lake_progress(s1).await.unwrap()),
            (true, 20, true)
        );
        support::reclaim::<F>(&bucket).await;

        lake.retain_snapshots(1).await;
        let s2 = lake.compact().await;
        assert_eq!(s2.end_offset, s1.end_offset);
        // The lookuper still serves the expired snapshot 1: lake answers fail until the bucket
        // hears of snapshot 2, or the lookuper moves to it by itself.
        let answer = reader.lookup(support::ABSENT).await;
        if L::MOVES_FORWARD_ON_EXPIRY {
            assert_eq!(answer.unwrap(), None, "{} on the {}", F::NAME, L::NAME);
        } else {
            assert!(answer.is_err(), "{} on the {}", F::NAME, L::NAME);
        }
        assert_eq!(
            published(bucket.on_lake_progress(s2).await.unwrap()),
            (true, 20, false),
            "{}: a newer snapshot at the same end refreshes without moving W",
            F::NAME
        );
        assert_eq!(L::served(&reader), Some(s2));
        assert_eq!(bucket.served_snapshot(), s2);
        assert_eq!(engine.watermark(), 20);
        support::assert_model::<F>(&bucket, &wal, 40, "after the republish").await;

        // Repeated and older snapshots are ignored and counted; nothing is refreshed.
        let refreshes = L::refreshes(&reader);
        let ignored = bucket.stats().ignored_notifications;
        for stale in [s2, s1] {
            let p = bucket.on_lake_progress(stale).await.unwrap();
            assert_eq!(p, Progress::Ignored { watermark: 20 }, "{}", F::NAME);
        }
        assert_eq!(L::refreshes(&reader), refreshes);
        assert_eq!(bucket.stats().ignored_notifications, ignored + 2);
        assert_eq!(L::served(&reader), Some(s2));

        // A newer snapshot id that ends earlier breaks the lake's commit order: refused.
        let bogus = LakeSnapshot::new(s2.id + 1, 10);
        let err = bucket.on_lake_progress(bogus).await.unwrap_err();
        assert!(matches!(err, Error::Lake { .. }), "{}: {err}", F::NAME);
        assert_eq!((engine.watermark(), bucket.served_snapshot()), (20, s2));

        // The end moves again: refresh and publish as usual.
        let s3 = lake.commit(30).await;
        assert_eq!(
            published(bucket.on_lake_progress(s3).await.unwrap()),
            (true, 30, true)
        );
        support::reclaim_and_assert_model::<F>(&bucket, &wal, 40, "after the end moved").await;
    });
}

/// A republish whose refresh fails: the old snapshot stays served, nothing is published, the
/// error surfaces and is counted; the retried notification goes through.
pub fn republish_with_failing_refresh<F: EngineFactory>(factory: F) {
    let wal = Wal::generate(0xFA_11ED, 40, 12, 4);
    support::run_fresh(factory, async |engine, lake, bucket| {
        let s1 = support::write_all_and_reclaim::<F>(&bucket, &lake, &wal, 25).await;

        let s2 = MemoryLake::compact(&lake).unwrap();
        lake.fail_next_refreshes(1);
        let err = bucket.on_lake_progress(s2).await.unwrap_err();
        assert!(matches!(err, Error::Lake { .. }), "{}: {err}", F::NAME);
        assert_eq!(lake.served(), Some(s1));
        assert_eq!(bucket.served_snapshot(), s1);
        assert_eq!(engine.watermark(), 25);
        assert_eq!(bucket.stats().refresh_failures, 1);
        support::assert_model::<F>(&bucket, &wal, 40, "after the failed republish").await;

        assert_eq!(
            published(bucket.on_lake_progress(s2).await.unwrap()),
            (true, 25, false)
        );
        assert_eq!(bucket.served_snapshot(), s2);
        support::assert_model::<F>(&bucket, &wal, 40, "after the retried republish").await;
    });
}

const EXPIRY_RECORDS: u64 = 800;
const EXPIRY_KEYS: u64 = 32;
/// The lake keeps this many snapshots.
const RETAINED: usize = 2;

/// A bucket written without pause while the lake commits, compacts between commits (one or more
/// new snapshots at the same end) and keeps only its newest snapshots; every snapshot is
/// announced to the bucket, reclaims run, and every lookup along the way is answered (never an
/// expired-snapshot error) with the model's answer.
pub fn snapshot_expiry_under_continuous_writes<F: EngineFactory, L: TestLake>(factory: F) {
    let site = support::Site::new(factory);
    let wal = Wal::generate(0xE_C0DE, EXPIRY_RECORDS, EXPIRY_KEYS, 6);
    support::runtime().block_on(async {
        let engine = site.open();
        let lake = L::create().await;
        lake.retain_snapshots(RETAINED).await;
        let sched = support::scheduler();
        let bucket = HistoricalBucket::new(Arc::clone(&engine), lake.reader())
            .with_scheduler(&sched, support::BUCKET)
            .unwrap();
        bucket.recover(LakeSnapshot::default()).await.unwrap();
        let mut rng = Rng::new(0xE1);
        let (mut applied, mut compactions) = (0u64, 0u64);
        while applied < wal.len() {
            let to = (applied + 8 + rng.below(24)).min(wal.len());
            support::write::<F>(&bucket, &lake, &wal, applied, to).await;
            applied = to;
            let latest = lake.latest().await.end_offset;
            let end = applied.saturating_sub(rng.below(10)).max(latest);
            support::progress::<F>(&bucket, &lake, end).await;
            // The lake compacts: as many new snapshots at the same end as it keeps, or more, so
            // every earlier snapshot expires.
            for _ in 0..1 + rng.below(RETAINED as u64 + 1) {
                let snapshot = lake.compact().await;
                bucket.on_lake_progress(snapshot).await.unwrap();
                compactions += 1;
            }
            assert_eq!(bucket.served_snapshot(), lake.latest().await);
            for _ in 0..8 {
                let k = key(rng.below(EXPIRY_KEYS));
                let got = bucket.lookup(&k).await.unwrap_or_else(|e| {
                    panic!("{}: lookup {} at {applied}: {e}", F::NAME, show(&k))
                });
                support::assert_answer::<F>(&bucket, &wal, &k, got, applied, "expiring lake");
            }
        }
        sched.shutdown().await;
        support::reclaim_and_assert_model::<F>(&bucket, &wal, wal.len(), "after the run").await;
        let stats = bucket.stats();
        assert_eq!(stats.lake_failures, 0, "{}", F::NAME);
        assert!(
            stats.lake_fallbacks > 0,
            "{}: the lake never answered",
            F::NAME
        );
        assert_eq!(stats.refreshes, stats.notifications, "{}", F::NAME);
        assert!(compactions > 0);
        // Every snapshot but the newest RETAINED has expired.
        let latest = lake.latest().await;
        assert!(!lake.keeps(latest.id - RETAINED as u64).await);
        assert!(lake.keeps(latest.id).await);
    });
}
