//! The soak's concurrent parts: writers behind one offset sequencer, readers checking every
//! answer against the model, and the tiering service moving the lake.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use tidemark_bucket::Progress;
use tidemark_bucket::lake::MemoryLake;
use tidemark_engine_api::{Engine, WriteBatch};
use tokio::sync::{Mutex, watch};

use super::super::support::{Bucket, Rng, is_lake_error, show};
use super::model::Model;

/// The lake commits only this many offsets past its previous snapshot, which bounds the number
/// of (durable, hence slow on disk) watermark advances.
const MIN_STEP: u64 = 12;
/// The lake trails the acknowledged end by `0..=MAX_LAG` offsets, drawn afresh each time.
const MAX_LAG: u64 = 40;
/// One in this many lake looks commits a compaction (a new snapshot at the same end) instead.
const COMPACT_ONE_IN: u64 = 16;
/// Each reader makes at least this many lookups, however fast the writers finish.
const MIN_LOOKUPS: u64 = 200;

/// What every task shares.
pub struct Shared {
    /// The bucket under test.
    pub bucket: Arc<Bucket>,
    /// The lake its lookuper reads.
    pub lake: Arc<MemoryLake>,
    /// Every write handed out, and the published WAL ends.
    pub model: Model,
    /// The next offset; held across the apply, so batches are applied in offset order (the
    /// contract: the host applies its WAL in order, and a record below the applied end is
    /// skipped as already applied).
    pub sequencer: Mutex<u64>,
    /// Raised when every writer is done.
    pub done: AtomicBool,
    /// Keys each writer owns (writer `w` owns ids `w * keys_per_writer ..`).
    pub keys_per_writer: usize,
    /// Every key id, and one past it the never-written one.
    pub keys: usize,
}

/// Writes `records` records in batches of 1 to 8 over its own keys, each through the sequencer
/// (offsets handed out, written to the model, then to the lake's WAL, then applied), and after
/// each acknowledgement reads one key it just wrote: the newest acknowledged write is readable.
/// Returns the batches applied.
pub async fn write(
    shared: Arc<Shared>,
    writer: usize,
    records: u64,
    seed: u64,
    acked: Arc<watch::Sender<u64>>,
) -> u64 {
    let mut rng = Rng::new(seed);
    let first_key = writer * shared.keys_per_writer;
    let mut written = 0;
    let mut batches = 0;
    while written < records {
        let n = (1 + rng.below(8)).min(records - written);
        let picks: Vec<(usize, bool)> = (0..n)
            .map(|_| {
                let id = first_key + rng.below(shared.keys_per_writer as u64) as usize;
                (id, rng.below(6) != 0)
            })
            .collect();
        let mut next = shared.sequencer.lock().await;
        let first = *next;
        let writes: Vec<(usize, u64, bool)> = picks
            .iter()
            .zip(first..)
            .map(|(&(id, put), offset)| (id, offset, put))
            .collect();
        let end = first + n;
        let mut batch = WriteBatch::new();
        for &(id, offset, put) in &writes {
            if put {
                batch.put(Model::key(id), Model::value(id, offset), offset);
            } else {
                batch.delete(Model::key(id), offset);
            }
        }
        shared.model.begin(&writes, end);
        shared.lake.append_batch(&batch).unwrap();
        let outcome = shared.bucket.apply(batch).await.unwrap();
        assert_eq!(
            (outcome.applied, outcome.applied_end),
            (n, end),
            "{outcome:?}"
        );
        shared.model.acknowledge(end);
        acked.send_replace(end);
        *next = end;
        drop(next);
        written += n;
        batches += 1;

        // Read-your-writes: nobody else writes this key, so its answer is exact.
        let (id, offset, _) = writes[rng.below(n) as usize];
        let got = shared.bucket.lookup(&Model::key(id)).await.unwrap();
        let newest = shared.model.answer_at(id, end);
        assert_eq!(
            got.as_deref().map(show),
            newest.as_deref().map(show),
            "writer {writer}: key {id} right after its write at {offset}"
        );
    }
    batches
}

/// What a reader did.
#[derive(Debug, Default, Clone, Copy)]
pub struct ReadCounts {
    /// Keys looked up (through `lookup` and `lookup_many`).
    pub keys: u64,
    /// `lookup_many` calls among them.
    pub batched: u64,
    /// Lookups refused because the snapshot they read had just expired (the lake's retention;
    /// a contract outcome, § Bucket layer / Lake lookuper).
    pub expired: u64,
    /// Watermark samples taken (one after each lookup).
    pub watermark_samples: u64,
}

/// Looks random keys up (one in eight calls a `lookup_many` of up to six) until the writers are
/// done, checking each answer against the model and every sampled `W` against the last one.
pub async fn read(shared: Arc<Shared>, seed: u64) -> ReadCounts {
    let mut rng = Rng::new(seed);
    let mut floors = vec![0u64; shared.keys + 1];
    let mut counts = ReadCounts::default();
    let mut last_w = 0;
    while !shared.done.load(Ordering::SeqCst) || counts.keys < MIN_LOOKUPS {
        let batched = rng.below(8) == 0;
        let n = if batched { 1 + rng.below(6) } else { 1 };
        // Now and then the never-written key.
        let ids: Vec<usize> = (0..n)
            .map(|_| rng.below(shared.keys as u64 + 1) as usize)
            .collect();
        let keys: Vec<Vec<u8>> = ids.iter().map(|&id| Model::key(id)).collect();
        let lo = shared.model.acked();
        let answers = if batched {
            shared.bucket.lookup_many(&keys).await
        } else {
            shared.bucket.lookup(&keys[0]).await.map(|a| vec![a])
        };
        let hi = shared.model.applying();
        let answers = match answers {
            Ok(answers) => answers,
            Err(e) if is_lake_error(&e) && e.to_string().contains("expired") => {
                counts.expired += 1;
                continue;
            }
            Err(e) => panic!("lookup of {ids:?}: {e}"),
        };
        for (&id, answer) in ids.iter().zip(&answers) {
            if let Err(e) = shared
                .model
                .check(id, lo, hi, answer.as_deref(), &mut floors[id])
            {
                panic!("{e}; W = {}", shared.bucket.watermark());
            }
        }
        counts.keys += n;
        counts.batched += u64::from(batched);
        let w = shared.bucket.watermark();
        let applied_end = shared.bucket.engine().applied_end();
        assert!(w >= last_w, "W went back from {last_w} to {w}");
        assert!(
            w <= applied_end,
            "W {w} beyond the applied end {applied_end}"
        );
        last_w = w;
        counts.watermark_samples += 1;
    }
    counts
}

/// What the tiering service did.
#[derive(Debug, Default, Clone, Copy)]
pub struct TierCounts {
    /// Snapshots committed with new records and published.
    pub commits: u64,
    /// Compactions (same end, new snapshot) published.
    pub compactions: u64,
}

/// The tiering service: at every acknowledged end it looks at, commits a snapshot trailing it by
/// a lag drawn afresh (at least [`MIN_STEP`] past the last one), or now and then a compaction,
/// and notifies the bucket. Each notification must publish: `W` becomes exactly the snapshot's
/// end (never beyond the applied end, never back), the lookuper serves it.
pub async fn tier(shared: Arc<Shared>, mut acked: watch::Receiver<u64>, seed: u64) -> TierCounts {
    let mut rng = Rng::new(seed);
    let mut counts = TierCounts::default();
    while acked.changed().await.is_ok() {
        let acked_end = *acked.borrow_and_update();
        let latest = shared.lake.latest().map_or(0, |s| s.end_offset);
        let end = acked_end.saturating_sub(rng.below(MAX_LAG + 1));
        let snapshot = if rng.below(COMPACT_ONE_IN) == 0 {
            counts.compactions += 1;
            shared.lake.compact().unwrap()
        } else if end >= latest + MIN_STEP {
            counts.commits += 1;
            shared.lake.commit(end).unwrap()
        } else {
            continue;
        };
        let w_before = shared.bucket.watermark();
        let progress = shared.bucket.on_lake_progress(snapshot).await.unwrap();
        let Progress::Published {
            refreshed, update, ..
        } = progress
        else {
            panic!("lake progress to {snapshot:?} ignored: {progress:?}");
        };
        assert!(refreshed, "{snapshot:?} not refreshed");
        let w = shared.bucket.watermark();
        assert!(w >= w_before, "W went back from {w_before} to {w}");
        assert_eq!(w, snapshot.end_offset.max(w_before), "{update:?}");
        assert_eq!(shared.bucket.served_snapshot(), snapshot);
    }
    counts
}
