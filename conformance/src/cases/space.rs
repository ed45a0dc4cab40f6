//! Space on disk under a trailing lake: a disk backend's bytes stay within the multiple of the
//! uncovered window it declares (`window_multiple` of [`crate::Capabilities::declared`]), and a bucket
//! the lake has wholly absorbed gives its space back.

use std::collections::HashMap;

use tidemark_engine_api::{Engine, EngineOptions, LocalLookup, Record, WriteBatch};

use super::util::{SplitMix64, assert_lookup, tombstone, value};
use crate::{EngineFactory, Harness};

/// Records the lake trails the applied end by: the uncovered window.
const LAG: u64 = 10_000;
/// Records in the stream: ten windows, so the last half turns the window over five times.
const RECORDS: u64 = 10 * LAG;
/// Records per applied batch.
const BATCH: u64 = 100;
/// Records between two watermark advances (each followed by a reclaim and, over the last half of
/// the stream, a sample of the bytes on disk).
const RECLAIM_EVERY: u64 = 2_000;
/// Key space: large enough that almost every put writes a new key, as in `tidemark compare`'s
/// default workload, so the store's size follows the window and not a bounded key set.
const KEYS: u64 = 10_000_000;
/// Bytes of each value (incompressible after the 8-byte offset it starts with).
const VALUE_LEN: usize = 150;
/// Share of records that delete a key an earlier record put, in percent.
const DELETE_PERCENT: u64 = 5;
/// Seed of the stream: fixed, so every run of every backend writes the same records.
const SEED: u64 = 0x5ace_5eed;

/// The value a put at `offset` writes: the offset, then incompressible bytes.
fn payload(offset: u64) -> Vec<u8> {
    let mut bytes = offset.to_be_bytes().to_vec();
    bytes.extend(
        SplitMix64::new(SEED ^ offset.wrapping_mul(0x9e37_79b9_7f4a_7c15)).bytes(VALUE_LEN - 8),
    );
    bytes
}

/// The key of index `i` (fixed width, like `tidemark compare`'s keys).
fn key(i: u64) -> Vec<u8> {
    format!("key-{i:012}").into_bytes()
}

/// The stream as it is written: each offset's key and whether it deletes, and the running sum of
/// the records' stored bytes (key plus encoded value, `Record::stored_len`), from which the
/// window's bytes are one subtraction.
struct Written {
    /// `(key index, is a delete)` per offset.
    records: Vec<(u64, bool)>,
    /// `sums[o]` = stored bytes of the records below offset `o`.
    sums: Vec<u64>,
    rng: SplitMix64,
}

impl Written {
    fn new() -> Self {
        Written {
            records: Vec::new(),
            sums: vec![0],
            rng: SplitMix64::new(SEED),
        }
    }

    /// The next `n` records, at consecutive offsets from the end written so far.
    fn next_batch(&mut self, n: u64) -> WriteBatch {
        let mut batch = Vec::new();
        for _ in 0..n {
            let offset = self.records.len() as u64;
            let delete = offset > 0 && self.rng.below(100) < DELETE_PERCENT;
            let (index, record) = if delete {
                // A key some earlier record wrote (or deleted already: deleting it again is a
                // valid record too).
                let index = self.records[self.rng.below(offset) as usize].0;
                (index, Record::delete(key(index), offset))
            } else {
                let index = self.rng.below(KEYS);
                (index, Record::put(key(index), payload(offset), offset))
            };
            let total = self.sums[offset as usize] + record.stored_len();
            self.sums.push(total);
            self.records.push((index, delete));
            batch.push(record);
        }
        batch.into_iter().collect()
    }

    /// Stored bytes of the records at `from..to`: the uncovered window when `from` is `W` and
    /// `to` the applied end (`tidemark compare`'s definition: every record, overwritten or not).
    fn window(&self, from: u64, to: u64) -> u64 {
        self.sums[to as usize] - self.sums[from as usize]
    }
}

/// One sample of the bytes on disk after a reclaim.
#[derive(Debug, Clone, Copy)]
struct Sample {
    applied_end: u64,
    watermark: u64,
    bytes_on_disk: u64,
    window: u64,
}

impl Sample {
    /// Bytes above the empty store per byte of the window.
    fn multiple(&self, empty_store: u64) -> f64 {
        self.bytes_on_disk.saturating_sub(empty_store) as f64 / self.window.max(1) as f64
    }
}

/// A long stream with a trailing lake: 100,000 records (150-byte values over ten million keys, so
/// almost every put writes a new key; 5 % deletes), in batches of 100 at consecutive offsets;
/// every 2,000 records `W` moves to 10,000 records behind the applied end and `reclaim` runs,
/// directly (no scheduler: which reclaims run is then fixed, and only the engine's own background
/// work varies). At the end, bytes on disk must be at most the backend's stated multiple of the
/// window's stored bytes plus the empty store's footprint, and after every reclaim over the last
/// half at most its stated peak multiple of them. Then every key written answers exactly: its latest record when the window holds
/// it, a miss when the lake covers it (the last reclaim removed it).
pub fn bytes_on_disk_bounded_by_the_window<F: EngineFactory>(factory: F) {
    let declared = factory.capabilities().declared;
    let (multiple, peak) = (declared.window_multiple, declared.window_peak_multiple);
    // Unsynced writes, as the suite's other long workloads use: durability is not what is
    // measured, and a watermark change makes everything before it durable anyway.
    let h = Harness::with_options(factory, EngineOptions::default().with_sync_writes(false));
    let e = h.engine();
    let empty_store = e.stats().unwrap().bytes_on_disk;

    let mut written = Written::new();
    let mut samples = Vec::new();
    let mut end = 0u64;
    while end < RECORDS {
        let outcome = e.apply(&written.next_batch(BATCH)).unwrap();
        end += BATCH;
        assert_eq!((outcome.applied, outcome.applied_end), (BATCH, end));
        if !end.is_multiple_of(RECLAIM_EVERY) {
            continue;
        }
        e.advance_watermark(end.saturating_sub(LAG)).unwrap();
        e.reclaim().unwrap();
        if end > RECORDS / 2 {
            let stats = e.stats().unwrap();
            samples.push(Sample {
                applied_end: stats.applied_end,
                watermark: stats.watermark,
                bytes_on_disk: stats.bytes_on_disk,
                window: written.window(stats.watermark, stats.applied_end),
            });
        }
    }

    let last = *samples.last().expect("samples over the last half");
    assert_eq!((last.watermark, last.applied_end), (RECORDS - LAG, RECORDS));
    let worst = samples
        .iter()
        .copied()
        .max_by(|a, b| a.multiple(empty_store).total_cmp(&b.multiple(empty_store)))
        .expect("samples over the last half");
    for (what, s, multiple) in [
        ("at the end", last, multiple),
        ("the most over the last half", worst, peak),
    ] {
        assert!(
            s.bytes_on_disk as f64 <= multiple * s.window as f64 + empty_store as f64,
            "{}: {what} (applied end {}, W {}): {} bytes on disk, above {multiple} x the window \
             ({} bytes) + the empty store ({empty_store} bytes): {:.2} x the window",
            F::NAME,
            s.applied_end,
            s.watermark,
            s.bytes_on_disk,
            s.window,
            s.multiple(empty_store)
        );
    }

    // Zero wrong answers: every key's latest record, exactly, when the window holds it; a miss
    // when the lake covers it (the last reclaim removed every entry below W).
    let mut latest: HashMap<u64, (u64, bool)> = HashMap::new();
    for (offset, &(index, delete)) in written.records.iter().enumerate() {
        latest.insert(index, (offset as u64, delete));
    }
    for (index, (offset, delete)) in latest {
        let expected = if offset < last.watermark {
            LocalLookup::Miss
        } else if delete {
            tombstone(offset)
        } else {
            value(offset, payload(offset))
        };
        assert_lookup(e, &key(index), &expected);
    }
}

/// Records of the bucket the lake absorbs whole: tens of MiB on disk at its peak on every
/// backend, far above what it may keep once drained.
const DRAINED_RECORDS: u64 = 60_000;
/// Watermark steps the lake takes to absorb it, a reclaim after each.
const DRAIN_STEPS: u64 = 10;
/// What a drained store may keep: this multiple of the empty store's footprint ...
const DRAINED_OVER_EMPTY_STORE: u64 = 2;
/// ... plus this many bytes.
const DRAINED_SLACK: u64 = 1 << 20;

/// A bucket written with ever-new keys (the long stream above, 60,000 records), then absorbed by
/// the lake in ten watermark steps with a reclaim after each, the last covering everything: once
/// `wait_for_background_work` returns, its bytes on disk are at most twice the empty store's plus
/// 1 MiB, and no key answers. The bucket then still takes writes, and (where it reopens) keeps
/// `W`, its applied end, the new writes and its small size across a reopen.
pub fn covered_bucket_gives_its_space_back<F: EngineFactory>(factory: F) {
    let mut h = Harness::with_options(factory, EngineOptions::default().with_sync_writes(false));
    let empty_store = h.engine().stats().unwrap().bytes_on_disk;
    let allowance = empty_store * DRAINED_OVER_EMPTY_STORE + DRAINED_SLACK;
    let mut written = Written::new();
    let mut end = 0u64;
    while end < DRAINED_RECORDS {
        h.engine().apply(&written.next_batch(BATCH)).unwrap();
        end += BATCH;
    }
    let e = h.engine();
    e.flush().unwrap();
    let peak = e.stats().unwrap().bytes_on_disk;
    assert!(
        peak > 4 * allowance,
        "{}: the written bucket ({peak} bytes) must dwarf what a drained one may keep \
         ({allowance} bytes), or the case proves nothing",
        F::NAME
    );
    for step in 1..=DRAIN_STEPS {
        e.advance_watermark(DRAINED_RECORDS * step / DRAIN_STEPS)
            .unwrap();
        e.reclaim().unwrap();
    }
    e.wait_for_background_work().unwrap();
    let drained = e.stats().unwrap();
    assert_eq!(drained.watermark, DRAINED_RECORDS);
    if h.capabilities().declared.exact_live_entries {
        assert_eq!(drained.live_entries, 0, "{}", F::NAME);
    }
    assert!(
        drained.bytes_on_disk <= allowance,
        "{}: a bucket the lake absorbed whole keeps {} bytes on disk ({} at its peak), above \
         {DRAINED_OVER_EMPTY_STORE} x the empty store ({empty_store} bytes) + {DRAINED_SLACK}; \
         space rebuilds: {}",
        F::NAME,
        drained.bytes_on_disk,
        peak,
        drained.counters.space_rebuilds
    );
    for (index, _) in written.records.iter().step_by(97) {
        assert_lookup(e, &key(*index), &LocalLookup::Miss);
    }

    // Still a working store: new writes land and answer.
    let fresh = [(DRAINED_RECORDS, 1u64), (DRAINED_RECORDS + 1, 2)];
    let batch: WriteBatch = fresh
        .iter()
        .map(|&(offset, index)| Record::put(key(KEYS + index), payload(offset), offset))
        .collect();
    e.apply(&batch).unwrap();
    for &(offset, index) in &fresh {
        assert_lookup(e, &key(KEYS + index), &value(offset, payload(offset)));
    }
    if !h.capabilities().reopen {
        return;
    }
    let e = h.reopen();
    let reopened = e.stats().unwrap();
    assert_eq!(
        (reopened.watermark, reopened.applied_end),
        (DRAINED_RECORDS, DRAINED_RECORDS + 2),
        "{}",
        F::NAME
    );
    assert!(
        reopened.bytes_on_disk <= allowance,
        "{}: {} bytes on disk after a reopen, above {allowance}",
        F::NAME,
        reopened.bytes_on_disk
    );
    for &(offset, index) in &fresh {
        assert_lookup(e, &key(KEYS + index), &value(offset, payload(offset)));
    }
    for (index, _) in written.records.iter().step_by(97) {
        assert_lookup(e, &key(*index), &LocalLookup::Miss);
    }
}
