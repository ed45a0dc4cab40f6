//! The soak: every moving part of a bucket at once, with the invariants checked continuously.
//!
//! Several writers (each owning its keys) apply batches through one offset sequencer, readers look
//! keys up through the bucket (`lookup` and `lookup_many`), a tiering task commits lake snapshots
//! trailing the acknowledged end by a moving lag (and compactions) and notifies the bucket, and
//! the reclaim scheduler reclaims what each watermark advance covers. Checked all along:
//!
//! - every answer is the key's state at some WAL end the lookup could observe (from the
//!   acknowledged end before it to the end being applied after it): a local entry, or the lake's
//!   answer, per the contract. So an acknowledged write is never lost: a lookup that starts after
//!   it was acknowledged answers it or something newer;
//! - a writer reads the key it just wrote back exactly (read-your-writes);
//! - a reader never sees an older version of a key after a newer one;
//! - `W` (sampled after every lookup, and at every notification) never decreases, never passes
//!   the applied end, and becomes exactly each snapshot's end.
//!
//! The run is bounded by a record count, never by time: `TIDEMARK_SOAK_OPS` records (default
//! [`DEFAULT_RECORDS`]), seeded by `TIDEMARK_SOAK_SEED` (default drawn from the clock); the seed
//! and the counts are printed.

mod model;
mod tasks;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use tidemark_bucket::HistoricalBucket;
use tidemark_bucket::lake::{LakeSnapshot, MemoryLake};
use tidemark_engine_api::Engine;
use tokio::sync::{Mutex, watch};

use super::support::{self, Rng};
use crate::EngineFactory;
use crate::skip::notice;
use model::Model;
use tasks::Shared;

/// Records written per backend by default: a few seconds on a two-core debug build.
pub const DEFAULT_RECORDS: u64 = 6_000;
const WRITERS: usize = 3;
const READERS: u64 = 2;
const KEYS_PER_WRITER: usize = 24;
/// Snapshots the lake keeps: bounds its memory over a long run. A lookup through a snapshot that
/// expires under it is refused (a contract outcome, counted and printed).
const RETAINED_SNAPSHOTS: usize = 64;

/// `TIDEMARK_SOAK_OPS` and `TIDEMARK_SOAK_SEED`, or the defaults.
fn config() -> (u64, u64) {
    let var = |name: &str| std::env::var(name).ok()?.trim().parse::<u64>().ok();
    let records = var("TIDEMARK_SOAK_OPS").unwrap_or(DEFAULT_RECORDS);
    let seed = var("TIDEMARK_SOAK_SEED").unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64)
    });
    (records, seed)
}

/// Writers, readers, lake progress and the scheduler at once on one bucket, every answer and
/// every sampled watermark checked as it happens (see the module docs); at the end the lake
/// catches up, everything covered is reclaimed, and every key answers the final model.
pub fn soak<F: EngineFactory>(factory: F) {
    let (records, seed) = config();
    let test = format!("{}::bucket::soak", F::NAME);
    notice(&format!(
        "{test}: {records} records (TIDEMARK_SOAK_OPS), TIDEMARK_SOAK_SEED={seed}"
    ));
    let site = support::Site::new(factory);
    support::runtime().block_on(async {
        let engine = site.open();
        let lake = Arc::new(MemoryLake::new());
        lake.retain_snapshots(RETAINED_SNAPSHOTS).unwrap();
        let sched = support::scheduler();
        let bucket = HistoricalBucket::new(Arc::clone(&engine), lake.clone())
            .with_scheduler(&sched, support::BUCKET)
            .unwrap();
        assert_eq!(bucket.recover(LakeSnapshot::default()).await.unwrap(), 0);
        let keys = WRITERS * KEYS_PER_WRITER;
        let shared = Arc::new(Shared {
            bucket: Arc::new(bucket),
            lake,
            model: Model::new(),
            sequencer: Mutex::new(0),
            done: AtomicBool::new(false),
            keys_per_writer: KEYS_PER_WRITER,
            keys,
        });
        let mut seeds = Rng::new(seed);
        let (acked_tx, acked_rx) = watch::channel(0u64);
        let acked_tx = Arc::new(acked_tx);
        let tiering = tokio::spawn(tasks::tier(Arc::clone(&shared), acked_rx, seeds.next_u64()));
        let readers: Vec<_> = (0..READERS)
            .map(|_| tokio::spawn(tasks::read(Arc::clone(&shared), seeds.next_u64())))
            .collect();
        let share = records / WRITERS as u64;
        let writers: Vec<_> = (0..WRITERS)
            .map(|w| {
                let quota = if w == 0 { records - share * (WRITERS as u64 - 1) } else { share };
                let task = tasks::write(Arc::clone(&shared), w, quota, seeds.next_u64(), Arc::clone(&acked_tx));
                tokio::spawn(task)
            })
            .collect();
        drop(acked_tx);
        let mut batches = 0;
        for writer in writers {
            batches += writer.await.unwrap();
        }
        shared.done.store(true, Ordering::SeqCst);
        let tier = tiering.await.unwrap();
        let mut reads = tasks::ReadCounts::default();
        for reader in readers {
            let r = reader.await.unwrap();
            reads.keys += r.keys;
            reads.batched += r.batched;
            reads.expired += r.expired;
            reads.watermark_samples += r.watermark_samples;
        }

        // The lake catches up with everything; whatever the scheduler had not reclaimed yet is.
        let bucket = &shared.bucket;
        let end = engine.applied_end();
        assert_eq!(end, records);
        support::progress::<F>(bucket, &shared.lake, end).await;
        assert_eq!(bucket.watermark(), end);
        sched.shutdown().await;
        support::reclaim::<F>(bucket).await;
        let all: Vec<Vec<u8>> = (0..=keys).map(Model::key).collect();
        let answers = bucket.lookup_many(&all).await.unwrap();
        for (id, answer) in answers.iter().enumerate() {
            assert_eq!(*answer, shared.model.answer_at(id, end), "{test}: key {id} at the end");
        }

        let b = bucket.stats();
        let s = sched.stats().total;
        let e = engine.stats().unwrap().counters;
        let reclaimed = e.reclaimed_values + e.reclaimed_tombstones;
        notice(&format!(
            "{test}: seed {seed}: {records} records in {batches} batches by {WRITERS} writers; \
             {} keys read by {READERS} readers ({} lookup_many calls, {} refused on an expired \
             snapshot), {} from the lake; {} W samples; {} lake commits, {} compactions, {} \
             watermark advances; scheduler: {} requests, {} runs, {} skipped, {} failed; {reclaimed} \
             entries reclaimed; final W {}",
            reads.keys,
            reads.batched,
            reads.expired,
            b.lake_fallbacks,
            reads.watermark_samples,
            tier.commits,
            tier.compactions,
            b.watermark_advances,
            s.requests,
            s.runs,
            s.skipped,
            s.failed,
            bucket.watermark(),
        ));
        // The run exercised what it claims to.
        assert!(reads.keys >= READERS * 200 && reads.watermark_samples > 0, "{test}: {reads:?}");
        assert!(tier.commits > 0 && b.watermark_advances >= tier.commits, "{test}: {tier:?} {b:?}");
        assert!(b.lake_fallbacks > 0, "{test}: the lake never answered");
        assert!(s.requests > 0 && s.runs + s.skipped > 0, "{test}: {s:?}");
        assert!(reclaimed > 0, "{test}: nothing was reclaimed");
        assert_eq!((b.refresh_failures, b.lake_behind, b.lake_timeouts), (0, 0, 0), "{test}: {b:?}");
    });
}
