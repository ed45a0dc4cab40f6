//! A bucket that is written without pause while the lake trails it and reclaims run.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use tidemark_bucket::HistoricalBucket;
use tidemark_bucket::Progress;
use tidemark_bucket::lake::{LakeSnapshot, MemoryLake};
use tidemark_engine_api::Engine;
use tokio::sync::watch;

use super::support::{self, Rng, Wal, key, show};
use crate::EngineFactory;

const RECORDS: u64 = 2_400;
const KEYS: u64 = 48;
const COLD: u64 = 12;
const READERS: u64 = 2;
/// Every this many batches the writer waits until the tiering task has looked at its progress,
/// so lake progress really interleaves with writing however fast the backend is.
const CHECKPOINT: usize = 16;
/// The lag is at most this many offsets.
const MAX_LAG: u64 = 37;
/// A snapshot is committed only this many offsets past the previous one, which bounds the
/// number of (durable, hence slow) watermark advances on disk backends.
const MIN_STEP: u64 = 8;

/// Shared progress of the writer: `applying` is raised before a batch is applied and `applied`
/// after, so a reader knows the range of WAL ends its lookup may have observed.
#[derive(Default)]
struct Writer {
    applying: AtomicU64,
    applied: AtomicU64,
    done: AtomicBool,
}

/// One writer applies a continuous stream of batches; a tiering task commits lake snapshots
/// trailing the applied end by a lag that keeps changing (the two ends are never equal) and
/// notifies the bucket, whose scheduler reclaims covered entries; two readers look keys up the
/// whole time. Every lookup must return the model's answer at some WAL end between the start and
/// the end of the lookup; at the end every key answers the final model, entries were really
/// reclaimed and the lake really answered lookups.
pub fn continuous_writer_with_trailing_lake<F: EngineFactory>(factory: F) {
    let site = support::Site::new(factory);
    let wal = Arc::new(Wal::generate(0xC0_FFEE, RECORDS, KEYS, COLD));
    support::runtime().block_on(async {
        let engine = site.open();
        let lake = Arc::new(MemoryLake::new());
        let sched = support::scheduler();
        let bucket = Arc::new(
            HistoricalBucket::new(Arc::clone(&engine), lake.clone())
                .with_scheduler(&sched, support::BUCKET)
                .unwrap(),
        );
        assert_eq!(bucket.recover(LakeSnapshot::default()).await.unwrap(), 0);

        let writer = Arc::new(Writer::default());
        let (applied_tx, applied_rx) = watch::channel(0u64);
        let (seen_tx, mut seen_rx) = watch::channel(0u64);

        let tiering = tokio::spawn(tier::<F>(
            Arc::clone(&bucket),
            Arc::clone(&lake),
            applied_rx,
            seen_tx,
        ));
        let readers: Vec<_> = (0..READERS)
            .map(|r| {
                tokio::spawn(read::<F>(
                    Arc::clone(&bucket),
                    Arc::clone(&wal),
                    Arc::clone(&writer),
                    r,
                ))
            })
            .collect();

        let mut checkpoints = 0;
        for (i, batch) in wal.batches(0, wal.len()).into_iter().enumerate() {
            let end = batch.records().last().map_or(0, |r| r.offset() + 1);
            lake.append_batch(&batch).unwrap();
            writer.applying.store(end, Ordering::SeqCst);
            bucket.apply(batch).await.unwrap();
            writer.applied.store(end, Ordering::SeqCst);
            applied_tx.send_replace(end);
            if i % CHECKPOINT == CHECKPOINT - 1 {
                checkpoints += 1;
                // An error means the tiering task died; awaiting it below reports why.
                if seen_rx.wait_for(|seen| *seen >= end).await.is_err() {
                    break;
                }
            }
        }
        writer.done.store(true, Ordering::SeqCst);
        drop(applied_tx);

        let notifications = tiering.await.unwrap();
        let mut lookups = 0;
        for reader in readers {
            lookups += reader.await.unwrap();
        }
        // Each checkpoint is at least CHECKPOINT offsets past the previous one, so within any
        // three the applied end outruns the largest lag by MIN_STEP and a snapshot is committed.
        assert!(3 * CHECKPOINT as u64 >= MAX_LAG + MIN_STEP);
        assert!(
            notifications >= checkpoints / 3,
            "{}: {notifications} lake notifications over {checkpoints} checkpoints",
            F::NAME
        );
        assert!(lookups > 0);

        // The first watermark advance covered offset 0 (a key never rewritten), so the scheduler
        // had a reclaim to run: wait for it (generously; this is not a timing check), stop the
        // scheduler, and reclaim whatever it had not got to yet.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
        while sched.stats().total.runs == 0 && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        sched.shutdown().await;
        support::reclaim::<F>(&bucket).await;

        let stats = engine.stats().unwrap();
        let end = wal.len();
        assert_eq!(stats.applied_end, end);
        assert!(stats.watermark > 0 && stats.watermark < end);
        assert!(stats.watermark <= lake.latest().unwrap().end_offset);
        assert!(
            stats.counters.reclaimed_values + stats.counters.reclaimed_tombstones > 0,
            "{}: nothing was reclaimed",
            F::NAME
        );
        assert!(
            sched.stats().total.runs > 0,
            "{}: the scheduler never ran",
            F::NAME
        );
        support::assert_model::<F>(&bucket, &wal, end, "after the run").await;
        let b = bucket.stats();
        assert!(b.lake_fallbacks > 0, "{}: the lake never answered", F::NAME);
        assert_eq!(b.refresh_failures, 0);
        assert_eq!(b.lake_behind, 0);
    });
}

/// The tiering service: after each applied batch, commits a snapshot trailing the applied end by
/// 1..=MAX_LAG offsets (changing every time), at least MIN_STEP past the previous snapshot, and
/// notifies the bucket. Reports every applied end it has looked at on `seen`. Returns the
/// notifications sent.
async fn tier<F: EngineFactory>(
    bucket: Arc<support::Bucket>,
    lake: Arc<MemoryLake>,
    mut applied: watch::Receiver<u64>,
    seen: watch::Sender<u64>,
) -> u64 {
    let mut notifications = 0;
    let mut round = 0u64;
    let mut last_w = 0;
    while applied.changed().await.is_ok() {
        let applied_end = *applied.borrow_and_update();
        round += 1;
        let lag = 1 + (round * 7) % MAX_LAG;
        let end = applied_end.saturating_sub(lag);
        let latest = lake.latest().map_or(0, |s| s.end_offset);
        if end < latest + MIN_STEP {
            seen.send_replace(applied_end);
            continue;
        }
        let snapshot = lake.commit(end).unwrap();
        // The lake never reaches the applied end: the writer is always ahead.
        assert!(snapshot.end_offset < bucket.engine().applied_end());
        let progress = bucket.on_lake_progress(snapshot).await.unwrap();
        notifications += 1;
        let w = bucket.watermark();
        assert!(matches!(progress, Progress::Published { .. }));
        assert!(w >= last_w, "{}: W went back from {last_w} to {w}", F::NAME);
        assert!(
            w <= snapshot.end_offset,
            "{}: W {w} beyond the lake",
            F::NAME
        );
        last_w = w;
        seen.send_replace(applied_end);
    }
    notifications
}

/// A reader: random keys until the writer is done; each answer must be the model's at some WAL
/// end the lookup could have observed. Returns the lookups made.
async fn read<F: EngineFactory>(
    bucket: Arc<support::Bucket>,
    wal: Arc<Wal>,
    writer: Arc<Writer>,
    seed: u64,
) -> u64 {
    let mut rng = Rng::new(seed + 1);
    let mut lookups = 0;
    // At least a few lookups each, even if the writer finishes first on a fast backend.
    while !writer.done.load(Ordering::SeqCst) || lookups < 50 {
        let k = key(rng.below(KEYS));
        let lo = writer.applied.load(Ordering::SeqCst);
        let got = bucket.lookup(&k).await.unwrap();
        let hi = writer.applying.load(Ordering::SeqCst);
        let allowed = wal.answers_between(&k, lo, hi);
        assert!(
            allowed.contains(&got),
            "{}: key {} answered {:?}, the model allows {:?} (WAL end {lo}..={hi}, W = {})",
            F::NAME,
            show(&k),
            got.as_deref().map(show),
            allowed
                .iter()
                .map(|v| v.as_deref().map(show))
                .collect::<Vec<_>>(),
            bucket.watermark()
        );
        lookups += 1;
    }
    lookups
}
