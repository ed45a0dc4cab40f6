//! The seeded workload a hostile-file case writes, and the model of what each key must read
//! back at any applied end the damaged store may reopen with.

use std::collections::BTreeMap;

use tidemark_engine_api::{Engine, LocalLookup, Record, WriteBatch};
use tidemark_test_support::rng::SplitMix64;

/// One step of the workload.
#[derive(Debug, Clone)]
pub enum Step {
    /// Apply a batch.
    Apply(WriteBatch),
    /// Advance the watermark to the given offset.
    Advance(u64),
    /// Reclaim everything covered.
    Reclaim,
}

/// The workload of one seed and what it leaves behind.
#[derive(Debug, Clone)]
pub struct Workload {
    /// The steps, in order.
    pub steps: Vec<Step>,
    /// Every record, in offset order.
    records: Vec<Record>,
    /// `W` and the applied end once every step ran.
    pub final_state: (u64, u64),
    /// `W` and the applied end right after the last watermark advance: what the high-water
    /// record holds when the writer dies without closing.
    pub last_advance: (u64, u64),
}

/// Keys the workload writes: few enough that most are overwritten, values large enough (up to
/// 3 KiB) that the data spans many pages, blocks and log segments.
const KEYS: u64 = 48;
const BATCHES: u64 = 60;

/// Keys [`Workload::layered`] writes twice: with values of 1 to 3 KiB, about 800 KiB per
/// version, more than one 512 KiB sled log segment.
const LAYERED_KEYS: u64 = 400;
/// Value bytes [`Workload::layered`] then writes to its few hot keys, so the newest metadata
/// moves on to later parts of the engine's files than the newest versions of the other keys.
const HOT_BYTES: u64 = 600 * 1024;
/// Hot keys of [`Workload::layered`].
const HOT_KEYS: u64 = 8;

impl Workload {
    /// The workload of `seed`.
    pub fn new(seed: u64) -> Self {
        let mut rng = SplitMix64::new(seed);
        let mut build = Builder::default();
        let mut offset = 0u64;
        for round in 0..BATCHES {
            for _ in 0..=rng.below(6) {
                let key = format!("key-{:03}", rng.below(KEYS)).into_bytes();
                build.push(if rng.below(8) == 0 {
                    Record::delete(key, offset)
                } else {
                    Record::put(key, value(seed, offset, rng.below(3072)), offset)
                });
                // Sometimes skip an offset (a record of another bucket in the host's WAL).
                offset += 1 + rng.below(3) / 2;
            }
            build.apply();
            // Advance every few batches (never on the last ones, so the crash variant has
            // acknowledged writes after its last record); reclaim once, halfway.
            let w = build.applied_end.saturating_sub(rng.below(12));
            if round % 7 == 6 && round + 4 < BATCHES {
                build.advance(w);
            }
            if round == BATCHES / 2 {
                build.steps.push(Step::Reclaim);
            }
        }
        build.finish()
    }

    /// The workload of `seed` that leaves old data under newer writes: `LAYERED_KEYS` keys
    /// written twice, `W` then covering the first versions only (so each of these keys must
    /// read exactly its second version: a miss or the first version is an older state), then
    /// a few hot keys overwritten until `HOT_BYTES` more went through.
    ///
    /// An engine that appends to a log keeps the second versions in older parts of its files
    /// than the newest metadata: damage there that its recovery skips without an error serves
    /// those keys older while `W` and the applied end stay the newest (sled 0.34 skips the rest
    /// of an old log segment at a damaged message).
    pub fn layered(seed: u64) -> Self {
        let mut rng = SplitMix64::new(seed);
        let mut build = Builder::default();
        for _version in 0..2 {
            let first = build.applied_end;
            for key in 0..LAYERED_KEYS {
                let offset = build.applied_end;
                let len = 1024 + rng.below(2048);
                build.push(Record::put(
                    format!("key-{key:04}"),
                    value(seed, offset, len),
                    offset,
                ));
                if key % 4 == 3 {
                    build.apply();
                }
            }
            build.apply();
            // Covers the versions before this one.
            build.advance(first);
        }
        let mut written = 0;
        while written < HOT_BYTES {
            for _ in 0..4 {
                let offset = build.applied_end;
                let len = 2048 + rng.below(1024);
                let key = format!("hot-{}", rng.below(HOT_KEYS));
                build.push(Record::put(key, value(seed, offset, len), offset));
                written += len;
            }
            build.apply();
        }
        build.finish()
    }

    /// Runs every step on `engine`, asserting each succeeds.
    pub fn run<E: Engine + ?Sized>(&self, engine: &E) {
        for step in &self.steps {
            match step {
                Step::Apply(batch) => {
                    engine.apply(batch).unwrap();
                }
                Step::Advance(w) => {
                    engine.advance_watermark(*w).unwrap();
                }
                Step::Reclaim => {
                    engine.reclaim().unwrap();
                }
            }
        }
        assert_eq!((engine.watermark(), engine.applied_end()), self.final_state);
    }

    /// Every key the workload writes, with its newest record below `applied_end` (`None` for
    /// a key not written below it).
    pub fn state_at(&self, applied_end: u64) -> BTreeMap<Vec<u8>, Option<LocalLookup>> {
        let mut state: BTreeMap<Vec<u8>, Option<LocalLookup>> = BTreeMap::new();
        for record in &self.records {
            let entry = state.entry(record.key().to_vec()).or_insert(None);
            if record.offset() < applied_end {
                *entry = Some(match record {
                    Record::Put { value, offset, .. } => LocalLookup::Value {
                        offset: *offset,
                        bytes: value.clone(),
                    },
                    Record::Delete { offset, .. } => LocalLookup::Tombstone { offset: *offset },
                });
            }
        }
        state
    }
}

/// The value a workload of `seed` writes at `offset`: `len` bytes a reader can regenerate.
fn value(seed: u64, offset: u64, len: u64) -> Vec<u8> {
    SplitMix64::new(seed ^ offset).bytes(len as usize)
}

/// Builds a workload step by step, keeping its model: every record, `W` and the applied end.
#[derive(Debug, Default)]
struct Builder {
    steps: Vec<Step>,
    records: Vec<Record>,
    /// The batch being built.
    batch: WriteBatch,
    watermark: u64,
    applied_end: u64,
    last_advance: (u64, u64),
}

impl Builder {
    /// Adds `record` to the batch being built.
    fn push(&mut self, record: Record) {
        self.applied_end = record.offset() + 1;
        self.batch.push(record.clone());
        self.records.push(record);
    }

    /// Ends the batch being built (if it holds anything): one apply.
    fn apply(&mut self) {
        if !self.batch.is_empty() {
            self.steps
                .push(Step::Apply(std::mem::take(&mut self.batch)));
        }
    }

    /// Advances `W` to `w`, when that moves it (only advances that move `W` write a high-water
    /// record).
    fn advance(&mut self, w: u64) {
        if w > self.watermark {
            self.watermark = w;
            self.steps.push(Step::Advance(w));
            self.last_advance = (w, self.applied_end);
        }
    }

    fn finish(mut self) -> Workload {
        self.apply();
        Workload {
            steps: self.steps,
            records: self.records,
            final_state: (self.watermark, self.applied_end),
            last_advance: self.last_advance,
        }
    }
}

/// Whether `got` is an acceptable local lookup of a key whose newest record below the restored
/// applied end is `expected`, in a store restored with watermark `watermark`: exactly that
/// record, or, when it is covered (a reclaim may have removed it), a miss. Never another
/// version, never other bytes.
pub fn acceptable(expected: Option<&LocalLookup>, got: &LocalLookup, watermark: u64) -> bool {
    match expected {
        None => *got == LocalLookup::Miss,
        Some(want) => {
            got == want
                || (*got == LocalLookup::Miss && want.offset().is_some_and(|o| o < watermark))
        }
    }
}
