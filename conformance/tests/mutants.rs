//! The suite checks itself.
//!
//! 1. **The suite can fail.** Test-only mutant engines wrap [`MemoryEngine`] and break one clause
//!    of the contract each: a reclaim (and a recovery purge) that also drops an uncovered entry,
//!    a watermark that can go backwards, an apply that rewrites already-applied records. For
//!    each, the case functions that check the clause are called directly and must panic. The
//!    same wrappers with the mutation switched off must pass the same cases, so the failure
//!    comes from the mutation and not from the wrapper.
//! 2. **The persistence cases are right.** `reopenable_memory` runs the whole suite on a memory
//!    engine that *can* be reopened (the factory keeps each directory's engine), so the cases
//!    the plain memory backend skips are exercised here too.

// Test-only engines: a poisoned lock or failed call here should fail the test loudly.
#![allow(clippy::unwrap_used)]

use std::collections::{BTreeSet, HashMap};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use tidemark_conformance::factories::MemoryFactory;
use tidemark_conformance::{Capabilities, EngineFactory};
use tidemark_disk::layout;
use tidemark_engine_api::{
    ApplyOutcome, CounterSnapshot, Engine, EngineOptions, EngineStats, LocalLookup, MemoryEngine,
    ReclaimReport, Record, Result, WatermarkUpdate, WriteBatch, forward_engine,
};

// ---------------------------------------------------------------------------------------------
// A memory engine that can be reopened: the control backend for the persistence cases.

/// The engine a [`ReopenableMemoryFactory`] hands out: the directory's shared [`MemoryEngine`],
/// with counters reported since this open (counters are per open engine, as on disk backends).
struct Reopened {
    inner: Arc<MemoryEngine>,
    base: CounterSnapshot,
}

/// Keeps one memory engine per directory, so opening a directory again "restores" it.
#[derive(Default)]
struct ReopenableMemoryFactory {
    stores: Mutex<HashMap<PathBuf, Arc<MemoryEngine>>>,
}

impl EngineFactory for ReopenableMemoryFactory {
    type Engine = Reopened;
    const NAME: &'static str = "memory";

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            reopen: true,
            ..MemoryFactory::CAPABILITIES
        }
    }

    fn open(&self, dir: &Path, options: EngineOptions) -> Result<Reopened> {
        layout::claim_directory(dir, "memory")?;
        let mut stores = self.stores.lock().unwrap();
        let inner = stores
            .entry(dir.to_path_buf())
            .or_insert_with(|| Arc::new(MemoryEngine::new(options)))
            .clone();
        let base = inner.stats()?.counters;
        Ok(Reopened { inner, base })
    }

    fn inject_raw(&self, engine: &Reopened, key: &[u8], stored: &[u8]) -> Result<()> {
        engine.inner.insert_raw(key, stored)
    }
}

impl Engine for Reopened {
    forward_engine!(inner; backend_name reclaim_cost apply lookup advance_watermark adopt_lake_watermark
        watermark applied_end reclaim reclaim_below flush lookup_inline reclaimable verify wait_for_background_work);
    fn stats(&self) -> Result<EngineStats> {
        let mut stats = self.inner.stats()?;
        stats.counters = stats.counters.since(&self.base);
        Ok(stats)
    }
}

mod reopenable_memory {
    tidemark_conformance::engine_cases!(super::ReopenableMemoryFactory::default());
    // The restart and leader-change scenarios, proven on the reference engine too.
    mod bucket {
        tidemark_conformance::bucket_cases!(super::super::ReopenableMemoryFactory::default());
    }
}

// ---------------------------------------------------------------------------------------------
// Mutants.

/// Which clause a [`Mutant`] breaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mutation {
    /// Reclaim also drops entries tagged exactly at the threshold (`<=` instead of `<`): one
    /// uncovered entry per reclaim.
    GreedyReclaim,
    /// `advance_watermark(w)` with `w < W` lowers the watermark.
    BackwardsWatermark,
    /// Records below the applied end (but not covered) are written again instead of skipped.
    NoReplaySkip,
}

/// A memory engine with one mutation, switched on or off.
struct Mutant {
    inner: MemoryEngine,
    mutation: Mutation,
    enabled: bool,
    /// GreedyReclaim: keys the mutant "removed" although they were not covered.
    dropped: Mutex<BTreeSet<Vec<u8>>>,
    /// BackwardsWatermark: the lowered watermark, when lowered.
    lowered: Mutex<Option<u64>>,
    /// Every key ever written (GreedyReclaim looks them up).
    written: Mutex<BTreeSet<Vec<u8>>>,
    /// Serialises apply so the wrappers' bookkeeping matches the inner engine's.
    writer: Mutex<()>,
}

impl Mutant {
    fn on(&self, m: Mutation) -> bool {
        self.enabled && self.mutation == m
    }

    /// Bookkeeping after the inner engine reclaimed (`reclaim` or `reclaim_below`), and the
    /// greedy mutation, which also drops what sits exactly at the report's threshold.
    fn after_reclaim(&self, mut report: ReclaimReport) -> Result<ReclaimReport> {
        let mut dropped = self.dropped.lock().unwrap();
        // What the inner engine reclaimed itself is gone anyway.
        dropped.retain(|k| !matches!(self.inner.lookup(k), Ok(LocalLookup::Miss)));
        if self.on(Mutation::GreedyReclaim) {
            for key in self.written.lock().unwrap().iter() {
                // The mutation: `<=` where the contract says `<`.
                let Ok(entry) = self.inner.lookup(key) else {
                    continue;
                };
                if entry.offset() == Some(report.threshold) && dropped.insert(key.clone()) {
                    match entry {
                        LocalLookup::Tombstone { .. } => report.tombstones_removed += 1,
                        _ => report.values_removed += 1,
                    }
                }
            }
        }
        Ok(report)
    }
}

impl Engine for Mutant {
    fn backend_name(&self) -> &'static str {
        "memory"
    }

    fn apply(&self, batch: &WriteBatch) -> Result<ApplyOutcome> {
        let _w = self.writer.lock().unwrap();
        let (w, end) = (self.inner.watermark(), self.inner.applied_end());
        let mut forwarded = WriteBatch::new();
        let mut rewritten = 0;
        batch.validate()?;
        for record in batch.records() {
            let o = record.offset();
            if self.on(Mutation::NoReplaySkip) && o >= w && o < end {
                // The mutation: an already-applied record is written again.
                self.inner
                    .insert_raw(record.key(), &record.encoded_value())?;
                rewritten += 1;
            } else {
                forwarded.push(record.clone());
            }
        }
        let mut out = self.inner.apply(&forwarded)?;
        out.applied += rewritten;
        let mut dropped = self.dropped.lock().unwrap();
        let mut written = self.written.lock().unwrap();
        for record in batch.records() {
            written.insert(record.key().to_vec());
            if record.offset() >= w.max(end) {
                dropped.remove(record.key());
            }
        }
        Ok(out)
    }

    fn lookup(&self, key: &[u8]) -> Result<LocalLookup> {
        if self.dropped.lock().unwrap().contains(key) {
            return Ok(LocalLookup::Miss);
        }
        self.inner.lookup(key)
    }

    fn advance_watermark(&self, w: u64) -> Result<WatermarkUpdate> {
        let mut lowered = self.lowered.lock().unwrap();
        let current = lowered.unwrap_or_else(|| self.inner.watermark());
        if self.on(Mutation::BackwardsWatermark) && w < current {
            *lowered = Some(w);
            return Ok(WatermarkUpdate {
                previous: current,
                requested: w,
                current: w,
                moved: true,
            });
        }
        *lowered = None;
        self.inner.advance_watermark(w)
    }

    forward_engine!(inner; reclaim_cost adopt_lake_watermark applied_end flush reclaimable verify wait_for_background_work);

    /// Through the (possibly mutated) `lookup`: the wrapped memory engine never blocks.
    fn lookup_inline(&self, key: &[u8]) -> Result<Option<LocalLookup>> {
        self.lookup(key).map(Some)
    }

    fn watermark(&self) -> u64 {
        self.lowered
            .lock()
            .unwrap()
            .unwrap_or_else(|| self.inner.watermark())
    }

    fn reclaim(&self) -> Result<ReclaimReport> {
        self.after_reclaim(self.inner.reclaim()?)
    }

    fn reclaim_below(&self, threshold: u64) -> Result<ReclaimReport> {
        self.after_reclaim(self.inner.reclaim_below(threshold)?)
    }

    fn stats(&self) -> Result<EngineStats> {
        let mut stats = self.inner.stats()?;
        stats.watermark = self.watermark();
        stats.live_entries -= self.dropped.lock().unwrap().len() as u64;
        Ok(stats)
    }
}

/// Opens [`Mutant`]s (no reopen: like the memory backend).
struct MutantFactory {
    mutation: Mutation,
    enabled: bool,
}

impl EngineFactory for MutantFactory {
    type Engine = Mutant;
    const NAME: &'static str = "memory";

    fn capabilities(&self) -> Capabilities {
        MemoryFactory::CAPABILITIES
    }

    fn open(&self, _dir: &Path, options: EngineOptions) -> Result<Mutant> {
        Ok(Mutant {
            inner: MemoryEngine::new(options),
            mutation: self.mutation,
            enabled: self.enabled,
            dropped: Mutex::default(),
            lowered: Mutex::default(),
            written: Mutex::default(),
            writer: Mutex::default(),
        })
    }

    fn inject_raw(&self, engine: &Mutant, key: &[u8], stored: &[u8]) -> Result<()> {
        engine.inner.insert_raw(key, stored)
    }
}

type Case = fn(MutantFactory);

/// Runs `case` on the mutant, with the mutation on or off; `true` when it panicked (failed).
fn fails(mutation: Mutation, enabled: bool, case: Case) -> bool {
    catch_unwind(AssertUnwindSafe(|| {
        case(MutantFactory { mutation, enabled })
    }))
    .is_err()
}

/// Runs the whole suite on the wrapper twice: with the mutation off every case must pass (the
/// wrapper itself is sound); with it on, every case named in `killers` must fail. Prints every
/// case that caught the mutant.
fn assert_killed(mutation: Mutation, killers: &[&str]) {
    let mut caught = Vec::new();
    let caps = MutantFactory {
        mutation,
        enabled: false,
    }
    .capabilities();
    for (info, case) in tidemark_conformance::all_cases::<MutantFactory>() {
        if info.unmet(caps).is_some() {
            continue;
        }
        assert!(
            !fails(mutation, false, case),
            "{} fails on the {mutation:?} wrapper even with the mutation off",
            info.name
        );
        if fails(mutation, true, case) {
            caught.push(info.name);
        }
    }
    tidemark_conformance::skip::notice(&format!(
        "MUTANT {mutation:?} caught by {} cases: {}",
        caught.len(),
        caught.join(", ")
    ));
    for name in killers {
        assert!(
            tidemark_conformance::CASES.iter().any(|c| c.name == *name),
            "{name} is not a case"
        );
        assert!(
            caught.contains(name),
            "{name} did not catch the {mutation:?} mutant"
        );
    }
}

#[test]
fn mutant_greedy_reclaim_is_caught() {
    assert_killed(
        Mutation::GreedyReclaim,
        &[
            "reclaim_removes_exactly_covered",
            "reclaim_is_incremental",
            "retention_distance_keeps_margin",
            "reclaim_below_removes_exactly_below_threshold",
            "reclaim_below_purges_a_lagging_replica",
            "concurrent_apply_reclaim_lookup",
            "model_based",
        ],
    );
}

#[test]
fn mutant_backwards_watermark_is_caught() {
    assert_killed(
        Mutation::BackwardsWatermark,
        &[
            "watermark_repeat_and_stale_are_noops",
            "adopt_lake_watermark_unclamped",
            "model_based",
        ],
    );
}

#[test]
fn mutant_no_replay_skip_is_caught() {
    assert_killed(
        Mutation::NoReplaySkip,
        &[
            "already_applied_skipped_and_counted",
            "covered_skipped_and_counted",
            "wal_replay_is_idempotent",
            "model_based",
        ],
    );
}

/// The mutants' bookkeeping is sound: an engine that writes a value, then has it dropped by the
/// greedy reclaim, shows a miss, and a newer write brings the key back.
#[test]
fn greedy_mutant_drops_only_at_the_threshold() {
    let f = MutantFactory {
        mutation: Mutation::GreedyReclaim,
        enabled: true,
    };
    let e = f
        .open(Path::new("unused"), EngineOptions::default())
        .unwrap();
    e.apply(
        &[
            Record::put(b"a".to_vec(), b"1".to_vec(), 0),
            Record::put(b"b".to_vec(), b"2".to_vec(), 1),
        ]
        .into_iter()
        .collect(),
    )
    .unwrap();
    e.advance_watermark(1).unwrap();
    let r = e.reclaim().unwrap();
    assert_eq!(r.values_removed, 2);
    assert_eq!(e.lookup(b"b").unwrap(), LocalLookup::Miss);
    e.put(b"b", b"3", 2).unwrap();
    assert_eq!(
        e.lookup(b"b").unwrap(),
        LocalLookup::Value {
            offset: 2,
            bytes: b"3".to_vec()
        }
    );
}

/// A model-based failure shrinks to a short sequence and prints it.
#[test]
fn model_based_failure_shrinks_to_a_minimal_sequence() {
    let payload = catch_unwind(AssertUnwindSafe(|| {
        tidemark_conformance::cases::model_based(MutantFactory {
            mutation: Mutation::GreedyReclaim,
            enabled: true,
        })
    }))
    .expect_err("model_based must catch the greedy reclaim");
    let message = payload
        .downcast_ref::<String>()
        .cloned()
        .unwrap_or_default();
    assert!(message.contains("minimal sequence"), "{message}");
    let ops: usize = message
        .split_once(" ops):")
        .and_then(|(head, _)| head.rsplit(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no op count in {message}"));
    tidemark_conformance::skip::notice(&format!(
        "SHRUNK GreedyReclaim model failure to {ops} ops: {}",
        message.lines().next().unwrap_or_default()
    ));
    // A write and a reclaim (maybe an advance between) suffice to show the greedy reclaim.
    assert!(ops <= 6, "shrunk only to {ops} ops:\n{message}");
}
