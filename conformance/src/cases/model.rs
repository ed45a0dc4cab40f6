//! The model-based property test: random operation sequences run against the backend and
//! against [`MemoryEngine`] step by step, every outcome compared.

use std::sync::Arc;

use proptest::collection::vec;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestError, TestRunner};
use tidemark_engine_api::watermark::reclaim_threshold;
use tidemark_engine_api::{
    CounterSnapshot, Engine, EngineOptions, Error, LocalLookup, MemoryEngine, ReclaimReport,
    Record, WriteBatch,
};

use crate::{EngineFactory, Harness};

/// Environment variable overriding the number of generated sequences (default 256).
pub const CASES_ENV: &str = "TIDEMARK_PROPTEST_CASES";
/// Default number of generated sequences per backend.
pub const DEFAULT_CASES: u32 = 256;
/// Size of the key space the sequences write to (small, so keys collide often).
const KEY_SPACE: u8 = 6;

/// Where an `Apply`'s first offset lies, relative to the model's applied end.
#[derive(Debug, Clone, Copy)]
pub enum Start {
    /// `applied end + gap`: fresh offsets.
    Next(u8),
    /// `applied end - back` (saturating): a WAL replay, partly already applied or covered.
    Replay(u8),
}

/// One record of an `Apply`: `step` is added to the offset before it (0 = same offset as the
/// previous record, so offsets never decrease).
#[derive(Debug, Clone, Copy)]
pub struct Rec {
    /// Key index in the small key space.
    pub key: u8,
    /// `Some(v)` puts value `v`, `None` deletes.
    pub put: Option<u8>,
    /// Offset increment before this record.
    pub step: u8,
}

/// The watermark requested by `Advance`, relative to the model's state.
#[derive(Debug, Clone, Copy)]
pub enum Target {
    /// `applied end - n`.
    BelowEnd(u8),
    /// Exactly the applied end.
    AtEnd,
    /// `applied end + n` (clamped by the engine).
    AboveEnd(u8),
    /// The current watermark again (a repeated notification).
    Repeat,
    /// `W - n`: a stale notification.
    Stale(u8),
}

/// One step of a generated sequence.
#[derive(Debug, Clone)]
pub enum Op {
    /// Apply a batch.
    Apply {
        /// First offset.
        start: Start,
        /// Records, in order.
        records: Vec<Rec>,
    },
    /// `advance_watermark`.
    Advance(Target),
    /// `adopt_lake_watermark(applied end + n)` (recovery; rare).
    Adopt(u8),
    /// `reclaim`.
    Reclaim,
    /// `reclaim_below(W + 3 - n)` (saturating): recovery's purge, with thresholds below, at and
    /// above `W`.
    ReclaimBelow(u8),
    /// Flush, close and reopen the backend (only generated for backends that can reopen; the
    /// model just continues).
    Reopen,
    /// `lookup` of one key.
    Lookup(u8),
    /// `flush`.
    Flush,
}

fn op_strategy(reopen: bool) -> BoxedStrategy<Op> {
    let rec = (
        0..KEY_SPACE,
        prop::option::weighted(0.8, any::<u8>()),
        0u8..3,
    )
        .prop_map(|(key, put, step)| Rec { key, put, step });
    let start = prop_oneof![
        4 => (0u8..3).prop_map(Start::Next),
        1 => (1u8..24).prop_map(Start::Replay),
    ];
    let target = prop_oneof![
        3 => (0u8..12).prop_map(Target::BelowEnd),
        1 => Just(Target::AtEnd),
        1 => (1u8..10).prop_map(Target::AboveEnd),
        1 => Just(Target::Repeat),
        1 => (1u8..6).prop_map(Target::Stale),
    ];
    let apply = (start, vec(rec, 0..6)).prop_map(|(start, records)| Op::Apply { start, records });
    let reopen_weight = if reopen { 1 } else { 0 };
    prop_oneof![
        8 => apply,
        3 => target.prop_map(Op::Advance),
        1 => (0u8..8).prop_map(Op::Adopt),
        3 => Just(Op::Reclaim),
        1 => (0u8..8).prop_map(Op::ReclaimBelow),
        reopen_weight => Just(Op::Reopen),
        2 => (0..KEY_SPACE).prop_map(Op::Lookup),
        1 => Just(Op::Flush),
    ]
    .boxed()
}

fn key_bytes(k: u8) -> Vec<u8> {
    vec![b'k', k]
}

fn build_batch(model: &MemoryEngine, start: Start, records: &[Rec]) -> WriteBatch {
    let end = model.applied_end();
    let mut offset = match start {
        Start::Next(gap) => end + u64::from(gap),
        Start::Replay(back) => end.saturating_sub(u64::from(back)),
    };
    records
        .iter()
        .map(|r| {
            offset += u64::from(r.step);
            match r.put {
                Some(v) => {
                    Record::put(key_bytes(r.key), vec![r.key, v, b'@', offset as u8], offset)
                }
                None => Record::delete(key_bytes(r.key), offset),
            }
        })
        .collect()
}

fn resolve(model: &MemoryEngine, target: Target) -> u64 {
    let (w, end) = (model.watermark(), model.applied_end());
    match target {
        Target::BelowEnd(n) => end.saturating_sub(u64::from(n)),
        Target::AtEnd => end,
        Target::AboveEnd(n) => end + u64::from(n),
        Target::Repeat => w,
        Target::Stale(n) => w.saturating_sub(u64::from(n)),
    }
}

macro_rules! check_eq {
    ($step:expr, $what:expr, $backend:expr, $model:expr) => {{
        let (b, m) = (&$backend, &$model);
        if b != m {
            return Err(TestCaseError::fail(format!(
                "step {}: {}: backend {:?} != model {:?}",
                $step, $what, b, m
            )));
        }
    }};
}

fn ok<T>(step: usize, what: &str, r: tidemark_engine_api::Result<T>) -> Result<T, TestCaseError> {
    r.map_err(|e| TestCaseError::fail(format!("step {step}: {what} failed: {e}")))
}

fn reclaim_view(r: &ReclaimReport) -> (u64, u64, u64, u64) {
    (
        r.threshold,
        r.values_removed,
        r.tombstones_removed,
        r.corrupt_kept,
    )
}

/// Whether a backend's reclaim report agrees with the model's. Exact, except that a backend
/// reclaiming in the background may find fewer entries left to remove (never more).
fn reclaim_agrees(got: &ReclaimReport, want: &ReclaimReport, background: bool) -> bool {
    if !background {
        return reclaim_view(got) == reclaim_view(want);
    }
    got.threshold == want.threshold
        && got.corrupt_kept == want.corrupt_kept
        && got.values_removed <= want.values_removed
        && got.tombstones_removed <= want.tombstones_removed
}

/// Whether a backend's lookup agrees with the model's. Exact, except that on a backend that
/// reclaims in the background an entry the model still holds may already be gone when it is
/// covered (`offset < removable_below`).
fn lookup_agrees(
    got: &LocalLookup,
    want: &LocalLookup,
    background: bool,
    removable_below: u64,
) -> bool {
    got == want
        || (background
            && *got == LocalLookup::Miss
            && want.offset().is_some_and(|o| o < removable_below))
}

/// Counter agreement: exact, except the reclaimed counts on a background-reclaiming backend,
/// which may only be lower (compactions outside `reclaim` removed the rest).
fn counters_agree(got: CounterSnapshot, want: CounterSnapshot, background: bool) -> bool {
    // Bytes (and the rebuilds that return them) are each backend's own measure of its storage:
    // the model cannot predict them (the stats case checks that they add up the reports).
    let bytes = |c: CounterSnapshot| CounterSnapshot {
        reclaim_bytes_rewritten: 0,
        reclaim_bytes_freed: 0,
        space_rebuilds: 0,
        ..c
    };
    let (got, want) = (bytes(got), bytes(want));
    if !background {
        return got == want;
    }
    let strip = |c: CounterSnapshot| CounterSnapshot {
        reclaimed_values: 0,
        reclaimed_tombstones: 0,
        ..c
    };
    strip(got) == strip(want)
        && got.reclaimed_values <= want.reclaimed_values
        && got.reclaimed_tombstones <= want.reclaimed_tombstones
}

/// Runs one generated sequence against a fresh backend engine and a fresh model.
fn run_sequence<F: EngineFactory>(
    factory: &Arc<F>,
    distance: u64,
    ops: &[Op],
) -> Result<(), TestCaseError> {
    // Speed: no per-apply sync; the sequence flushes before every reopen instead.
    let options = EngineOptions::default()
        .with_retention_distance(distance)
        .with_sync_writes(false)
        .with_sweep_chunk_rows(3);
    let mut h = Harness::shared(Arc::clone(factory), options.clone());
    let model = MemoryEngine::new(options);
    let exact = h.capabilities().declared.exact_live_entries;
    let background = h.capabilities().declared.background_reclaim;
    // The highest threshold any removal may have used so far: `W - D`, or a `reclaim_below`
    // limit above it (background compactions during that call may use it too).
    let mut purged_below = 0u64;
    // Counters are per open engine; the model's never reset, so compare deltas since the last
    // (re)open.
    let mut base = CounterSnapshot::default();

    for (step, op) in ops.iter().enumerate() {
        let e = h.engine();
        match op {
            Op::Apply { start, records } => {
                let b = build_batch(&model, *start, records);
                match (e.apply(&b), model.apply(&b)) {
                    (Ok(got), Ok(want)) => check_eq!(step, "apply outcome", got, want),
                    (Err(Error::InvalidInput(_)), Err(Error::InvalidInput(_))) => {}
                    (got, want) => {
                        check_eq!(step, "apply", format!("{got:?}"), format!("{want:?}"))
                    }
                }
            }
            Op::Advance(target) => {
                let w = resolve(&model, *target);
                let got = ok(step, "advance_watermark", e.advance_watermark(w))?;
                let want = ok(step, "model advance", model.advance_watermark(w))?;
                check_eq!(step, format!("advance_watermark({w})"), got, want);
            }
            Op::Adopt(n) => {
                let w = model.applied_end() + u64::from(*n);
                let got = ok(step, "adopt_lake_watermark", e.adopt_lake_watermark(w))?;
                let want = ok(step, "model adopt", model.adopt_lake_watermark(w))?;
                check_eq!(step, format!("adopt_lake_watermark({w})"), got, want);
            }
            Op::Reclaim => {
                let got = ok(step, "reclaim", e.reclaim())?;
                let want = ok(step, "model reclaim", model.reclaim())?;
                if !reclaim_agrees(&got, &want, background) {
                    check_eq!(
                        step,
                        "reclaim (threshold, values, tombstones, corrupt)",
                        reclaim_view(&got),
                        reclaim_view(&want)
                    );
                }
            }
            Op::ReclaimBelow(n) => {
                let t = model
                    .watermark()
                    .saturating_add(3)
                    .saturating_sub(u64::from(*n));
                let got = ok(step, "reclaim_below", e.reclaim_below(t))?;
                let want = ok(step, "model reclaim_below", model.reclaim_below(t))?;
                purged_below = purged_below.max(want.threshold);
                if !reclaim_agrees(&got, &want, background) {
                    check_eq!(
                        step,
                        format!("reclaim_below({t}) (threshold, values, tombstones, corrupt)"),
                        reclaim_view(&got),
                        reclaim_view(&want)
                    );
                }
            }
            Op::Reopen => {
                ok(step, "flush before reopen", e.flush())?;
                h.reopen();
                base = ok(step, "model stats", model.stats())?.counters;
            }
            Op::Lookup(k) => {
                let got = ok(step, "lookup", e.lookup(&key_bytes(*k)))?;
                let want = ok(step, "model lookup", model.lookup(&key_bytes(*k)))?;
                let removable = purged_below.max(reclaim_threshold(model.watermark(), distance));
                if !lookup_agrees(&got, &want, background, removable) {
                    check_eq!(step, format!("lookup(k{k})"), got, want);
                }
            }
            Op::Flush => ok(step, "flush", e.flush())?,
        }

        // After every step: the whole visible state and the stats agree.
        let e = h.engine();
        check_eq!(step, "watermark", e.watermark(), model.watermark());
        check_eq!(step, "applied end", e.applied_end(), model.applied_end());
        let removable = purged_below.max(reclaim_threshold(model.watermark(), distance));
        for k in 0..KEY_SPACE {
            let got = ok(step, "lookup", e.lookup(&key_bytes(k)))?;
            let want = ok(step, "model lookup", model.lookup(&key_bytes(k)))?;
            if !lookup_agrees(&got, &want, background, removable) {
                check_eq!(step, format!("state of k{k}"), got, want);
            }
        }
        let got = ok(step, "stats", e.stats())?;
        let want = ok(step, "model stats", model.stats())?;
        check_eq!(step, "stats watermark", got.watermark, want.watermark);
        check_eq!(step, "stats applied end", got.applied_end, want.applied_end);
        let want_counters = want.counters.since(&base);
        if !counters_agree(got.counters, want_counters, background) {
            check_eq!(step, "counters since open", got.counters, want_counters);
        }
        if exact {
            check_eq!(step, "live entries", got.live_entries, want.live_entries);
        }
        // The covered estimate never reads low (§ Backends / Disk-engine skeleton / Covered
        // estimate): against the entries the model holds below the threshold.
        let threshold = reclaim_threshold(model.watermark(), distance);
        let covered = covered_in(&model, threshold, step)?;
        let reclaimable = ok(step, "reclaimable", e.reclaimable())?;
        if got.covered_estimate < covered.entries
            || reclaimable.covered.entries < covered.entries
            || reclaimable.covered.bytes < covered.bytes
        {
            return Err(TestCaseError::fail(format!(
                "step {step}: covered estimate {} / reclaimable {reclaimable:?} below the {covered:?} \
                 covered at threshold {threshold}",
                got.covered_estimate
            )));
        }
    }
    Ok(())
}

/// The entries (and their stored bytes) the model holds below `threshold`.
fn covered_in(
    model: &MemoryEngine,
    threshold: u64,
    step: usize,
) -> Result<tidemark_engine_api::Covered, TestCaseError> {
    let mut covered = tidemark_engine_api::Covered::default();
    for k in 0..KEY_SPACE {
        let key = key_bytes(k);
        let (offset, value_len) = match ok(step, "model lookup", model.lookup(&key))? {
            LocalLookup::Value { offset, bytes } => (offset, bytes.len()),
            LocalLookup::Tombstone { offset } => (offset, 0),
            LocalLookup::Miss => continue,
        };
        if offset < threshold {
            covered.entries += 1;
            covered.bytes +=
                (key.len() + tidemark_engine_api::codec::HEADER_LEN + value_len) as u64;
        }
    }
    Ok(covered)
}

/// The number of sequences to generate: `TIDEMARK_PROPTEST_CASES`, or 256.
pub fn configured_cases() -> u32 {
    match std::env::var(CASES_ENV) {
        Ok(v) => v
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("{CASES_ENV}={v:?} is not a number")),
        Err(_) => DEFAULT_CASES,
    }
}

/// Random sequences of apply (puts and deletes over a small key space, with replays of old and
/// covered offsets) / advance / adopt / reclaim / reclaim_below / reopen (where the backend can) / lookup /
/// flush, executed on the backend and on `MemoryEngine` step by step, comparing every outcome,
/// the whole key space, the watermark, the applied end, the counters and (where exact) the live
/// entries. A failure shrinks to a minimal sequence, printed in the panic message.
pub fn model_based<F: EngineFactory>(factory: F) {
    let factory = Arc::new(factory);
    let cases = configured_cases();
    let mut runner = TestRunner::new(Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    });
    let strategy = (
        0u64..4,
        vec(op_strategy(factory.capabilities().reopen), 1..40),
    );
    let result = runner.run(&strategy, |(distance, ops)| {
        run_sequence(&factory, distance, &ops)
    });
    match result {
        Ok(()) => crate::skip::notice(&format!(
            "PROPTEST {}::model_based: {cases} sequences passed (set {CASES_ENV} to change)",
            F::NAME
        )),
        Err(TestError::Fail(reason, (distance, ops))) => panic!(
            "{}::model_based failed: {reason}\nminimal sequence (retention distance {distance}, {} ops):\n{ops:#?}",
            F::NAME,
            ops.len()
        ),
        Err(TestError::Abort(reason)) => panic!("{}::model_based aborted: {reason}", F::NAME),
    }
}
