//! HistoricalBucket paths the backend scenarios do not reach: scheduler wiring under a paused
//! clock, a lagging replica with a retention distance, repeated recovery, serving before
//! recovery, and closing.

// Test helpers (gates, fake engines) should fail the test loudly on a poisoned lock.
#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::time::Duration;

use tidemark_bucket::scheduler::Requested;
use tidemark_bucket::{
    BucketId, Error, HistoricalBucket, LakeSnapshot, LakeTimeouts, MemoryLake, Progress,
    ReclaimScheduler, SchedulerConfig,
};
use tidemark_engine_api::{Engine, EngineOptions, LocalLookup, MemoryEngine, Record, WriteBatch};

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

/// A memory engine with retention distance `distance` that applied `wal`, and a new lake whose
/// log holds `wal`.
fn applied(distance: u64, wal: WriteBatch) -> (Arc<MemoryEngine>, Arc<MemoryLake>) {
    let engine = memory(distance);
    let lake = Arc::new(MemoryLake::new());
    lake.append_batch(&wal).unwrap();
    engine.apply(&wal).unwrap();
    (engine, lake)
}

/// Bucket `id` over a new memory engine and a new lake, registered with a new scheduler (at
/// most one reclaim a second) and recovered from the empty lake, holding `puts(0..n)` (also in
/// the lake's log). Call inside a runtime.
async fn scheduled(
    id: BucketId,
    n: u64,
) -> (
    Arc<MemoryEngine>,
    Arc<MemoryLake>,
    ReclaimScheduler,
    HistoricalBucket,
) {
    let engine = memory(0);
    let lake = Arc::new(MemoryLake::new());
    let sched =
        ReclaimScheduler::new(SchedulerConfig::default().with_min_interval(Duration::from_secs(1)))
            .unwrap();
    let bucket = HistoricalBucket::new(engine.clone(), lake.clone())
        .with_scheduler(&sched, id)
        .unwrap();
    bucket.recover(LakeSnapshot::default()).await.unwrap();
    let b = puts(0..n);
    lake.append_batch(&b).unwrap();
    bucket.apply(b).await.unwrap();
    (engine, lake, sched, bucket)
}

#[tokio::test(start_paused = true)]
async fn lake_progress_requests_a_reclaim_that_the_scheduler_runs() {
    let (engine, lake, sched, bucket) = scheduled(BucketId(3), 20).await;
    assert_eq!(bucket.bucket_id(), Some(BucketId(3)));

    let s = lake.commit(15).unwrap();
    let p = bucket.on_lake_progress(s).await.unwrap();
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
        bucket.on_lake_progress(s).await.unwrap(),
        Progress::Ignored { watermark: 15 }
    ));
    assert_eq!(bucket.stats().reclaim_requests, 1);
    bucket.close().await.unwrap();
    assert_eq!(Arc::strong_count(&engine), 1, "close released the engine");
    sched.shutdown().await;
}

/// A WAL whose first two records a lagging replica applied (applied end 26) before the lake
/// committed up to 37: `k@25` is overtaken by `k@35`, and `old-only@22` is deleted at 36.
fn lagging_replica(distance: u64) -> (Arc<MemoryEngine>, Arc<MemoryLake>, LakeSnapshot) {
    let engine = memory(distance);
    let lake = Arc::new(MemoryLake::new());
    let wal = batch([
        Record::put("old-only", "old-only@22", 22),
        Record::put("k", "k@25 (overtaken)", 25),
        Record::put("k", "k@35", 35),
        Record::delete("old-only", 36),
    ]);
    lake.append_batch(&wal).unwrap();
    engine.apply(&batch(wal.records()[..2].to_vec())).unwrap();
    assert_eq!(engine.applied_end(), 26);
    let committed = lake.commit(37).unwrap();
    (engine, lake, committed)
}

#[tokio::test]
async fn lagging_replica_with_retention_distance_never_serves_overtaken_versions() {
    // D = 20 would keep local entries in [W - 20, W) after an ordinary reclaim.
    let (engine, lake, s) = lagging_replica(20);
    let bucket = HistoricalBucket::new(engine.clone(), lake.clone());
    assert_eq!(
        bucket.recover(s).await.unwrap(),
        37,
        "replay from the lake end"
    );
    assert_eq!(engine.watermark(), 37);
    // Both old versions are physically gone despite D: they are older than the lake's.
    assert_eq!(engine.lookup(b"k").unwrap(), LocalLookup::Miss);
    assert_eq!(engine.lookup(b"old-only").unwrap(), LocalLookup::Miss);
    assert_eq!(bucket.lookup(b"k").await.unwrap(), Some(b"k@35".to_vec()));
    assert_eq!(bucket.lookup(b"old-only").await.unwrap(), None);

    // Records applied after recovery are authoritative again.
    bucket
        .apply(batch([Record::put("k", "k@40", 40)]))
        .await
        .unwrap();
    assert_eq!(bucket.lookup(b"k").await.unwrap(), Some(b"k@40".to_vec()));
}

/// The review's restart scenario: after the lagging replica recovered and replayed past the
/// lake end (applied end 41 > W = 37), a restart (a new bucket over the same engine) recovers
/// with `W < applied end`. A key the lake deleted must still read as deleted, not as the
/// replica's own older value that the retention distance would have kept.
#[tokio::test]
async fn lagging_replica_with_retention_distance_after_a_restart_never_serves_deleted_keys() {
    let (engine, lake, s) = lagging_replica(20);
    let bucket = HistoricalBucket::new(engine.clone(), lake.clone());
    assert_eq!(bucket.recover(s).await.unwrap(), 37);
    let replay = batch([Record::put("k", "k@40", 40)]);
    lake.append_batch(&replay).unwrap();
    bucket.apply(replay).await.unwrap();
    assert_eq!(engine.applied_end(), 41);
    drop(bucket);

    let restarted = HistoricalBucket::new(engine.clone(), lake.clone());
    assert_eq!(restarted.recover(s).await.unwrap(), 41);
    assert_eq!(engine.watermark(), 37);
    assert_eq!(restarted.lookup(b"old-only").await.unwrap(), None);
    assert_eq!(engine.lookup(b"old-only").unwrap(), LocalLookup::Miss);
    assert_eq!(
        restarted.lookup(b"k").await.unwrap(),
        Some(b"k@40".to_vec())
    );
}

/// A recovery that stopped after the durable adopt but before the purge leaves `W` above the
/// applied end with the stale entries still stored. A new bucket does not trust them even
/// before recovering, and its recovery purges them although the adopt does not move `W` now.
#[tokio::test]
async fn lagging_recovery_interrupted_before_the_purge_purges_on_the_next_recovery() {
    let (engine, lake, s) = lagging_replica(20);
    // The interrupted recovery: W adopted and durable, nothing purged.
    assert!(engine.adopt_lake_watermark(37).unwrap().moved);
    assert!(matches!(
        engine.lookup(b"old-only").unwrap(),
        LocalLookup::Value { offset: 22, .. }
    ));

    let bucket = HistoricalBucket::new(engine.clone(), lake.clone());
    // Not the stale local value: the lookuper is not refreshed yet, so the answer is refused.
    assert!(matches!(
        bucket.lookup(b"old-only").await,
        Err(Error::Lake { .. })
    ));
    assert!(matches!(bucket.lookup(b"k").await, Err(Error::Lake { .. })));

    assert_eq!(bucket.recover(s).await.unwrap(), 37);
    assert_eq!(bucket.stats().watermark_advances, 0, "W did not move now");
    assert_eq!(engine.lookup(b"old-only").unwrap(), LocalLookup::Miss);
    assert_eq!(engine.lookup(b"k").unwrap(), LocalLookup::Miss);
    assert_eq!(bucket.lookup(b"old-only").await.unwrap(), None);
    assert_eq!(bucket.lookup(b"k").await.unwrap(), Some(b"k@35".to_vec()));
}

/// A replica that does not lag keeps its retention margin through recovery: the purge is only
/// for entries the lake may have overtaken.
#[tokio::test]
async fn recovery_of_an_up_to_date_replica_keeps_the_retention_margin() {
    let (engine, lake) = applied(5, puts(0..20));
    let bucket = HistoricalBucket::new(engine.clone(), lake.clone());
    assert_eq!(bucket.recover(lake.commit(12).unwrap()).await.unwrap(), 20);
    assert_eq!(engine.watermark(), 12);
    for i in 0..20 {
        assert!(
            matches!(
                engine.lookup(format!("k{i}").as_bytes()).unwrap(),
                LocalLookup::Value { .. }
            ),
            "k{i} kept: recovery does not reclaim an up-to-date replica"
        );
    }
    assert_eq!(engine.reclaim().unwrap().removed(), 7, "D = 5 keeps 7..12");
}

/// Dropping a bucket without `close` deregisters it from the scheduler synchronously: the id
/// is free at once (a reopened bucket can register again) and the scheduler lets go of the
/// engine.
#[tokio::test(start_paused = true)]
async fn dropping_a_bucket_without_close_deregisters_it() {
    let id = BucketId(9);
    let (engine, lake, sched, bucket) = scheduled(id, 10).await;
    let s = lake.commit(5).unwrap();
    bucket.on_lake_progress(s).await.unwrap();

    drop(bucket);
    assert!(sched.bucket_stats(id).is_none(), "deregistered by drop");
    assert!(matches!(sched.request(id), Err(Error::InvalidInput(_))));
    // The same id registers again straight away (what an in-process reopen does).
    let reopened = HistoricalBucket::new(engine.clone(), lake.clone())
        .with_scheduler(&sched, id)
        .unwrap();
    drop(reopened);

    // The stopped workers end on their own; then nothing but this test holds the engine.
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(Arc::strong_count(&engine), 1);
    assert!(sched.stats().buckets.is_empty());
    sched.shutdown().await;
}

#[tokio::test]
async fn a_second_recovery_never_moves_the_lookuper_backwards() {
    let (engine, lake) = applied(
        0,
        batch([Record::put("a", "a0", 0), Record::put("a", "a1", 1)]),
    );
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
    assert!(matches!(
        bucket.lookup(b"k2").await,
        Err(Error::Lake { .. })
    ));
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
        Err(Error::Engine(tidemark_engine_api::Error::InvalidInput(_)))
    ));
    assert_eq!(lake.counters().lookups, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_storm_of_notifications_coalesces_to_the_latest() {
    const STORM: u64 = 10;
    let (engine, lake) = applied(0, puts(0..100));
    let bucket = Arc::new(HistoricalBucket::new(engine.clone(), lake.clone()));
    let snapshots: Vec<LakeSnapshot> = (1..=STORM + 1)
        .map(|i| lake.commit(i * 5).unwrap())
        .collect();

    // The first notification is held inside its refresh; the storm queues behind it.
    lake.hold_refreshes();
    let first = tokio::spawn({
        let bucket = Arc::clone(&bucket);
        let s = snapshots[0];
        async move { bucket.on_lake_progress(s).await }
    });
    lake.wait_for_held_refreshes(1).await.unwrap();
    let storm: Vec<_> = snapshots[1..]
        .iter()
        .map(|s| {
            let bucket = Arc::clone(&bucket);
            let s = *s;
            tokio::spawn(async move { bucket.on_lake_progress(s).await })
        })
        .collect();
    // Every notification has offered its snapshot once it is counted.
    while bucket.stats().notifications < STORM + 1 {
        tokio::task::yield_now().await;
    }
    lake.release_refreshes();
    assert!(matches!(
        first.await.unwrap().unwrap(),
        Progress::Published { .. }
    ));
    let last = *snapshots.last().unwrap();
    let mut outcomes = Vec::new();
    for handle in storm {
        outcomes.push(handle.await.unwrap().unwrap());
    }
    // The newest snapshot's own caller learns that it was published, whoever processed it.
    assert!(
        matches!(outcomes.last(), Some(Progress::Published { snapshot, .. }) if *snapshot == last),
        "{outcomes:?}"
    );
    assert_eq!(engine.watermark(), last.end_offset);
    assert_eq!(lake.served(), Some(last));
    let stats = bucket.stats();
    // The held one, then the newest offered: two refreshes and two watermark writes for eleven.
    assert_eq!(stats.refreshes, 2, "{stats:?}");
    assert_eq!(stats.watermark_advances, 2, "{stats:?}");
    // 1 unless the first to run after the held one happened to be the newest one's own caller;
    // every other caller processed its own, stale, snapshot.
    assert!(stats.coalesced_notifications <= 1, "{stats:?}");
    assert_eq!(
        stats.ignored_notifications + stats.coalesced_notifications,
        STORM - 1,
        "{stats:?}"
    );
}

/// A bucket whose lookuper serves the lake's first snapshot (ending at 10) over 100 applied
/// records, with snapshots ending at 40 and 45 committed; the one ending at 40 is being
/// processed by a call held inside its refresh when this returns.
async fn held_in_refresh() -> (
    Arc<HistoricalBucket>,
    Arc<MemoryLake>,
    [LakeSnapshot; 2],
    tokio::task::JoinHandle<Result<Progress, Error>>,
) {
    let (engine, lake) = applied(0, puts(0..100));
    let bucket = Arc::new(HistoricalBucket::new(engine, lake.clone()));
    bucket
        .on_lake_progress(lake.commit(10).unwrap())
        .await
        .unwrap();
    let (at_40, at_45) = (lake.commit(40).unwrap(), lake.commit(45).unwrap());
    lake.hold_refreshes();
    let held = tokio::spawn({
        let bucket = Arc::clone(&bucket);
        async move { bucket.on_lake_progress(at_40).await }
    });
    lake.wait_for_held_refreshes(1).await.unwrap();
    (bucket, lake, [at_40, at_45], held)
}

/// Spawns a lake-progress call and waits until it has offered its snapshot (or finished).
async fn notify(
    bucket: &Arc<HistoricalBucket>,
    snapshot: LakeSnapshot,
) -> tokio::task::JoinHandle<Result<Progress, Error>> {
    let counted = bucket.stats().notifications + 1;
    let handle = tokio::spawn({
        let bucket = Arc::clone(bucket);
        async move { bucket.on_lake_progress(snapshot).await }
    });
    while bucket.stats().notifications < counted && !handle.is_finished() {
        tokio::task::yield_now().await;
    }
    handle
}

/// While the snapshot ending at 40 is processed, a valid snapshot ending at 45 and then `bad`
/// are notified: the valid one's caller gets the publication of its own snapshot, `bad`'s
/// caller alone gets an `Error::Lake`, and `W` ends at 45.
async fn bad_snapshot_fails_only_its_own_caller(bad: LakeSnapshot) -> Arc<HistoricalBucket> {
    let (bucket, lake, [at_40, at_45], held) = held_in_refresh().await;
    let valid = notify(&bucket, at_45).await;
    let bad = notify(&bucket, bad).await;
    lake.release_refreshes();
    assert!(matches!(
        held.await.unwrap().unwrap(),
        Progress::Published { snapshot, .. } if snapshot == at_40
    ));
    let valid = valid.await.unwrap();
    assert!(
        matches!(valid, Ok(Progress::Published { snapshot, .. }) if snapshot == at_45),
        "a valid notification answered with another caller's outcome: {valid:?}"
    );
    let bad = bad.await.unwrap();
    assert!(matches!(bad, Err(Error::Lake { .. })), "{bad:?}");
    assert_eq!(bucket.watermark(), 45);
    bucket
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_snapshot_out_of_order_with_one_in_flight_fails_its_own_caller_only() {
    // Newer id than the snapshot being processed, earlier end: the lake's order is broken.
    let bucket = bad_snapshot_fails_only_its_own_caller(LakeSnapshot::new(1_000_001, 27)).await;
    assert_eq!(bucket.served_snapshot(), LakeSnapshot::new(3, 45));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_newer_snapshot_that_fails_returns_its_error_to_its_own_caller() {
    // A newer snapshot the lake cannot refresh to (it never committed it): whichever call
    // processes it, the failure is its caller's.
    bad_snapshot_fails_only_its_own_caller(LakeSnapshot::new(99, 60)).await;
}

/// `notifications` counts every `on_lake_progress` call: published, ignored as stale, and refused
/// as out of order alike.
#[tokio::test]
async fn every_notification_is_counted_refused_ones_included() {
    let (engine, lake) = applied(0, puts(0..100));
    let bucket = HistoricalBucket::new(engine, lake.clone());
    let at_40 = lake.commit(40).unwrap();
    assert!(matches!(
        bucket.on_lake_progress(at_40).await.unwrap(),
        Progress::Published { .. }
    ));
    assert!(matches!(
        bucket.on_lake_progress(at_40).await.unwrap(),
        Progress::Ignored { .. }
    ));
    // A newer id that ends before the served snapshot: refused before it joins the queue.
    let out_of_order = LakeSnapshot::new(at_40.id + 10, 20);
    let refused = bucket.on_lake_progress(out_of_order).await;
    assert!(matches!(refused, Err(Error::Lake { .. })), "{refused:?}");
    let stats = bucket.stats();
    assert_eq!(stats.notifications, 3, "{stats:?}");
    assert_eq!(stats.ignored_notifications, 2, "{stats:?}");
    assert_eq!(bucket.watermark(), 40);
}

#[test]
fn lake_calls_on_a_runtime_without_timers_are_an_error_not_a_panic() {
    // A runtime without tokio's time driver: timed lake calls cannot run there.
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    rt.block_on(async {
        let lake = Arc::new(MemoryLake::new());
        let bucket = HistoricalBucket::new(memory(0), lake.clone());
        let err = bucket.recover(LakeSnapshot::default()).await;
        // The empty lake needs no refresh; a local miss asks the lake, which needs a timer.
        assert!(err.is_ok(), "{err:?}");
        let err = bucket.lookup(b"absent").await.unwrap_err();
        assert!(matches!(err, Error::Unsupported(_)), "{err}");
        assert!(err.to_string().contains("enable_time"), "{err}");
        // Unbounded timeouts need no timer.
        let unbounded = LakeTimeouts::default()
            .with_refresh(Duration::MAX)
            .with_lookup(Duration::MAX);
        let bucket = HistoricalBucket::new(memory(0), lake.clone())
            .with_lake_timeouts(unbounded)
            .unwrap();
        bucket.recover(LakeSnapshot::default()).await.unwrap();
        assert_eq!(bucket.lookup(b"absent").await.unwrap(), None);
    });
}
