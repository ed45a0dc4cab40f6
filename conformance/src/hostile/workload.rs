//! The seeded workload a hostile-file case writes, and the model of what each key must read
//! back at any applied end the damaged store may reopen with.

use std::collections::BTreeMap;

use engine_api::rng::SplitMix64;
use engine_api::{Engine, LocalLookup, Record, WriteBatch};

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

impl Workload {
    /// The workload of `seed`.
    pub fn new(seed: u64) -> Self {
        let mut rng = SplitMix64::new(seed);
        let (mut steps, mut records) = (Vec::new(), Vec::new());
        let (mut offset, mut watermark, mut applied_end) = (0u64, 0u64, 0u64);
        let mut last_advance = (0, 0);
        for round in 0..BATCHES {
            let mut batch = WriteBatch::new();
            for _ in 0..=rng.below(6) {
                let key = format!("key-{:03}", rng.below(KEYS)).into_bytes();
                let record = if rng.below(8) == 0 {
                    Record::delete(key, offset)
                } else {
                    let len = rng.below(3072) as usize;
                    Record::put(key, SplitMix64::new(seed ^ offset).bytes(len), offset)
                };
                batch.push(record.clone());
                records.push(record);
                applied_end = offset + 1;
                // Sometimes skip an offset (a record of another bucket in the host's WAL).
                offset += 1 + rng.below(3) / 2;
            }
            steps.push(Step::Apply(batch));
            // Advance every few batches (never on the last ones, so the crash variant has
            // acknowledged writes after its last record); reclaim once, halfway.
            let w = applied_end.saturating_sub(rng.below(12));
            if round % 7 == 6 && round + 4 < BATCHES && w > watermark {
                // Only advances that move W write a high-water record.
                watermark = w;
                steps.push(Step::Advance(w));
                last_advance = (w, applied_end);
            }
            if round == BATCHES / 2 {
                steps.push(Step::Reclaim);
            }
        }
        Workload {
            steps,
            records,
            final_state: (watermark, applied_end),
            last_advance,
        }
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
