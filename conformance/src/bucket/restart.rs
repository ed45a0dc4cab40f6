//! Restarts and leader changes: a new bucket instance on the same directory recovers from the
//! committed lake snapshot and replays the WAL from the offset it returns.

use std::sync::Arc;

use tidemark_bucket::HistoricalBucket;
use tidemark_bucket::lake::LakeSnapshot;
use tidemark_bucket::{Progress, ReclaimScheduler};
use tidemark_engine_api::{Engine, LocalLookup};

use super::lakes::TestLake;
use super::support::{self, Wal};
use crate::EngineFactory;

/// Opens a bucket instance on the site's directory with a fresh lookuper over `lake`.
fn open<F: EngineFactory, L: TestLake>(
    site: &support::Site<F>,
    lake: &L,
    sched: &ReclaimScheduler,
) -> (support::Bucket, Arc<L::Reader>) {
    let lookuper = lake.reader();
    let bucket = HistoricalBucket::new(site.open(), lookuper.clone())
        .with_scheduler(sched, support::BUCKET)
        .unwrap();
    (bucket, lookuper)
}

/// Writes `from..to` while the lake trails by a lag that changes every few batches.
async fn write_trailing<F: EngineFactory>(
    bucket: &support::Bucket,
    lake: &impl TestLake,
    wal: &Wal,
    from: u64,
    to: u64,
) {
    for (i, batch) in wal.batches(from, to).into_iter().enumerate() {
        lake.append(batch.records()).await;
        bucket.apply(batch).await.unwrap();
        if i % 5 == 4 {
            let lag = 3 + (i as u64 * 11) % 23;
            let end = bucket.engine().applied_end().saturating_sub(lag);
            if end > lake.latest().await.end_offset {
                support::progress::<F>(bucket, lake, end).await;
            }
        }
    }
}

/// Closes the instance: unregisters it (waiting for a running reclaim), flushes, and drops every
/// reference to the engine so the directory can be opened again.
async fn close(bucket: support::Bucket) {
    bucket.close().await.unwrap();
}

/// Runs `scenario` on the runtime with a new lake of kind `L` and an eager scheduler, which is
/// shut down after the scenario.
fn run<L: TestLake>(scenario: impl AsyncFnOnce(&L, &ReclaimScheduler)) {
    support::runtime().block_on(async {
        let lake = L::create().await;
        let sched = support::scheduler();
        scenario(&lake, &sched).await;
        sched.shutdown().await;
    });
}

/// Leader A: a bucket over the site's new directory applies `0..300` of `wal`, hears of lake
/// progress to `confirmed`, reclaims and closes; returns its watermark at the close.
async fn first_leader<F: EngineFactory, L: TestLake>(
    site: &support::Site<F>,
    lake: &L,
    sched: &ReclaimScheduler,
    wal: &Wal,
    confirmed: u64,
) -> u64 {
    let (a, _) = open(site, lake, sched);
    a.recover(LakeSnapshot::default()).await.unwrap();
    support::write::<F>(&a, lake, wal, 0, 300).await;
    support::progress::<F>(&a, lake, confirmed).await;
    support::reclaim::<F>(&a).await;
    let watermark = a.watermark();
    close(a).await;
    watermark
}

/// Writes half the WAL with a trailing lake and reclaims, closes the bucket (the lake commits
/// one more snapshot the bucket never hears about), reopens the directory, recovers from the
/// committed snapshot, replays the WAL from the returned offset (plus some already-applied
/// records, which are skipped), writes the rest, and answers the model throughout.
pub fn restart_mid_stream<F: EngineFactory, L: TestLake>(factory: F) {
    let site = support::Site::new(factory);
    let wal = Wal::generate(0x4E57, 900, 40, 10);
    run::<L>(async |lake, sched| {
        let (bucket, _) = open(&site, lake, sched);
        assert_eq!(bucket.recover(LakeSnapshot::default()).await.unwrap(), 0);
        write_trailing::<F>(&bucket, lake, &wal, 0, 500).await;
        support::reclaim_and_assert_model::<F>(&bucket, &wal, 500, "before the restart").await;
        let persisted_w = bucket.watermark();
        assert!(persisted_w > 0 && persisted_w < 500);
        close(bucket).await;
        // The lake commits beyond what the bucket was told, still below the applied end.
        let committed = lake.commit(499).await;
        assert!(committed.end_offset > persisted_w);

        let (bucket, lookuper) = open(&site, lake, sched);
        assert_eq!(bucket.watermark(), persisted_w, "W restored");
        assert_eq!(bucket.engine().applied_end(), 500, "applied end restored");
        let replay_from = bucket.recover(committed).await.unwrap();
        assert_eq!(replay_from, 500);
        assert_eq!(bucket.watermark(), 499);
        assert_eq!(L::served(&lookuper), Some(committed));
        support::reclaim_and_assert_model::<F>(&bucket, &wal, 500, "after recovery").await;

        // Replaying a little before the returned offset changes nothing.
        for batch in wal.batches(replay_from - 40, replay_from) {
            let outcome = bucket.apply(batch).await.unwrap();
            assert_eq!(outcome.applied, 0);
        }
        write_trailing::<F>(&bucket, lake, &wal, replay_from, wal.len()).await;
        support::reclaim_and_assert_model::<F>(&bucket, &wal, wal.len(), "after the restart").await;
        assert!(bucket.stats().lake_fallbacks > 0);
        close(bucket).await;
    });
}

/// Leader change to an instance whose persisted `W` is older than the committed lake snapshot:
/// it adopts the lake's end (never more, never less than it had). Then a replica that lags
/// the lake (committed end beyond its applied end) takes over: `W` becomes exactly the lake end,
/// its older local versions of keys the lake has newer versions of are not served, and it
/// replays from the lake end.
pub fn leader_change_with_newer_lake_snapshot<F: EngineFactory, L: TestLake>(factory: F) {
    let site = support::Site::new(factory);
    let wal = Wal::generate(0x1EAD, 400, 30, 6);
    run::<L>(async |lake, sched| {
        let mut last_w = 0;

        // Leader A applies 0..300 but hears only of the snapshot ending at 100.
        let a_watermark = first_leader(&site, lake, sched, &wal, 100).await;
        assert_eq!(a_watermark, 100);

        // The rest of the WAL exists (another replica wrote it); the lake commits up to 250.
        lake.append(wal.records(300, 400)).await;
        let s2 = lake.commit(250).await;

        // B: persisted W = 100 is older than the committed snapshot.
        let (b, _) = open(&site, lake, sched);
        assert_eq!(b.watermark(), 100);
        let replay_from = b.recover(s2).await.unwrap();
        assert_eq!(b.watermark(), 250, "W adopts the lake end");
        assert!(b.watermark() >= last_w);
        last_w = b.watermark();
        assert_eq!(replay_from, 300, "replay from the applied end");
        support::reclaim_and_assert_model::<F>(&b, &wal, 300, "B after recovery").await;
        close(b).await;

        // C: the lake is now beyond this replica's applied end (it lags the lake).
        let s3 = lake.commit(350).await;
        // Keys this replica holds an older version of than the lake's.
        let overtaken: Vec<Vec<u8>> = wal
            .keys()
            .into_iter()
            .filter(|k| {
                wal.last_write_below(k, 350).is_some_and(|o| {
                    o >= 300 && wal.last_write_below(k, 300).is_some_and(|p| p >= 250)
                })
            })
            .collect();
        assert!(!overtaken.is_empty());
        let (c, _) = open(&site, lake, sched);
        assert_eq!(c.engine().applied_end(), 300);
        let replay_from = c.recover(s3).await.unwrap();
        assert_eq!(
            c.watermark(),
            350,
            "W is the lake end, beyond the applied end"
        );
        assert!(c.watermark() >= last_w);
        assert_eq!(replay_from, 350);
        for key in &overtaken {
            assert_eq!(c.engine().lookup(key).unwrap(), LocalLookup::Miss);
        }
        support::assert_model::<F>(&c, &wal, 350, "C after recovery, before replay").await;
        support::replay::<F>(&c, &wal, replay_from, 400).await;
        support::reclaim_and_assert_model::<F>(&c, &wal, 400, "C after replay").await;
        assert!(c.watermark() <= lake.latest().await.end_offset);
        close(c).await;
    });
}

/// A lagging replica with a retention distance (`D = 200`, so an ordinary reclaim would keep most
/// of its entries) takes over when the lake is past its applied end: recovery adopts the lake
/// end and removes every local entry below it. It replays part of the WAL (so its applied end
/// passes `W`) and restarts: the new instance recovers with `W` below the applied end, and still
/// serves no version the lake overtook or deleted, then replays the rest.
pub fn lagging_replica_restart_with_retention_distance<F: EngineFactory, L: TestLake>(factory: F) {
    let site = support::Site::with_retention_distance(factory, 200);
    let wal = Wal::generate(0x1A66, 400, 30, 6);
    run::<L>(async |lake, sched| {
        // Leader A applies 0..300; the lake confirms 100 (D keeps everything local).
        first_leader(&site, lake, sched, &wal, 100).await;

        // Another replica wrote the rest; the lake commits beyond this replica's applied end.
        lake.append(wal.records(300, 400)).await;
        let committed = lake.commit(350).await;
        // Keys whose local version (kept by D) the lake overtook or deleted in 300..350.
        let overtaken: Vec<Vec<u8>> = wal
            .keys()
            .into_iter()
            .filter(|k| {
                wal.last_write_below(k, 350).is_some_and(|o| o >= 300)
                    && wal.last_write_below(k, 300).is_some_and(|p| p >= 150)
            })
            .collect();
        assert!(!overtaken.is_empty());
        assert!(
            overtaken.iter().any(|k| wal.answer_at(k, 350).is_none()),
            "some overtaken key is deleted in the lake"
        );

        let (b, _) = open(&site, lake, sched);
        assert_eq!(b.engine().applied_end(), 300);
        assert_eq!(b.recover(committed).await.unwrap(), 350);
        assert_eq!(b.watermark(), 350);
        for key in wal.keys() {
            assert_eq!(
                b.engine().lookup(&key).unwrap(),
                LocalLookup::Miss,
                "{}: {} purged despite D",
                F::NAME,
                support::show(&key)
            );
        }
        support::assert_model::<F>(&b, &wal, 350, "B after recovery").await;
        support::replay::<F>(&b, &wal, 350, 380).await;
        support::assert_model::<F>(&b, &wal, 380, "B after a partial replay").await;
        close(b).await;

        // Restart: W = 350 is now below the applied end 380.
        let (c, _) = open(&site, lake, sched);
        assert_eq!((c.watermark(), c.engine().applied_end()), (350, 380));
        assert_eq!(c.recover(committed).await.unwrap(), 380);
        support::assert_model::<F>(&c, &wal, 380, "C after the restart").await;
        support::replay::<F>(&c, &wal, 380, 400).await;
        support::progress::<F>(&c, lake, 400).await;
        support::reclaim_and_assert_model::<F>(&c, &wal, 400, "C after replay").await;
        close(c).await;
    });
}

/// Leader change to an instance handed a committed lake snapshot *older* than its persisted
/// `W`: `W` does not regress (and stays within the lake's real end), the replay starts at the
/// applied end, local answers are served, and a local miss is refused rather than answered
/// from the stale snapshot until lake progress brings the lookuper up to `W`.
pub fn leader_change_with_older_lake_snapshot<F: EngineFactory, L: TestLake>(factory: F) {
    let site = support::Site::new(factory);
    let wal = Wal::generate(0x01D, 350, 30, 6);
    run::<L>(async |lake, sched| {
        let (a, _) = open(&site, lake, sched);
        a.recover(LakeSnapshot::default()).await.unwrap();
        support::write::<F>(&a, lake, &wal, 0, 300).await;
        let s1 = lake.commit(100).await;
        let s2 = support::progress::<F>(&a, lake, 250).await;
        support::reclaim::<F>(&a).await;
        assert_eq!(a.watermark(), 250);
        close(a).await;

        let (b, lookuper) = open(&site, lake, sched);
        let replay_from = b.recover(s1).await.unwrap();
        assert_eq!(b.watermark(), 250, "W never regresses");
        assert!(b.watermark() <= lake.latest().await.end_offset);
        assert_eq!(replay_from, 300);
        assert_eq!(L::served(&lookuper), Some(s1));
        let mut refused = 0;
        for key in wal.keys() {
            match b.lookup(&key).await {
                Ok(v) => assert_eq!(v, wal.answer_at(&key, 300), "{}", support::show(&key)),
                Err(e) => {
                    assert!(support::is_lake_error(&e), "{e}");
                    assert_eq!(b.engine().lookup(&key).unwrap(), LocalLookup::Miss);
                    refused += 1;
                }
            }
        }
        assert!(refused > 0, "{}: some keys live only in the lake", F::NAME);

        // Progress to the snapshot that fed W refreshes the lookuper without moving W.
        let p = b.on_lake_progress(s2).await.unwrap();
        assert!(matches!(
            p,
            Progress::Published {
                refreshed: true,
                ..
            }
        ));
        assert_eq!(b.watermark(), 250);
        support::assert_model::<F>(&b, &wal, 300, "B after the lake caught up").await;
        support::write::<F>(&b, lake, &wal, 300, 350).await;
        support::progress::<F>(&b, lake, 320).await;
        support::reclaim_and_assert_model::<F>(&b, &wal, 350, "B after more writes").await;
        assert!(b.stats().lake_behind > 0);
        close(b).await;
    });
}
