//! The in-memory reference engine: a `BTreeMap` with exact contract semantics, used as the oracle
//! in property tests and as the simplest backend.

use std::collections::BTreeMap;
use std::sync::{PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::Instant;

use crate::batch::{WriteBatch, validate_key};
use crate::codec::{self, Decoded};
use crate::covered::CoveredRuns;
use crate::engine::Engine;
use crate::error::Result;
use crate::options::EngineOptions;
use crate::outcome::{ApplyOutcome, LocalLookup, ReclaimReport, WatermarkUpdate};
use crate::stats::{EngineCounters, EngineStats, Reclaimable};
use crate::sync;
use crate::verify::{Verifier, VerifyReport};
use crate::watermark::{plan_adopt, plan_advance, plan_apply, reclaim_threshold};

#[derive(Debug, Default)]
struct State {
    /// key → encoded stored value (the same bytes a disk backend would hold).
    data: BTreeMap<Vec<u8>, Vec<u8>>,
    watermark: u64,
    applied_end: u64,
    /// The same incremental accounting the disk engines keep, for `reclaimable`.
    covered: CoveredRuns,
}

/// The reference engine. Nothing is persisted: it cannot be reopened.
///
/// ```
/// use tidemark_engine_api::{Engine, EngineOptions, LocalLookup, MemoryEngine};
///
/// let engine = MemoryEngine::new(EngineOptions::default());
/// engine.put(b"k", b"v1", 0)?;
/// engine.put(b"k", b"v2", 5)?;
/// engine.advance_watermark(5)?;
/// assert_eq!(engine.reclaim()?.removed(), 0); // k@5 is not covered by W = 5
/// assert_eq!(engine.lookup(b"k")?, LocalLookup::Value { offset: 5, bytes: b"v2".to_vec() });
/// # Ok::<(), tidemark_engine_api::Error>(())
/// ```
#[derive(Debug, Default)]
pub struct MemoryEngine {
    state: RwLock<State>,
    options: EngineOptions,
    counters: EngineCounters,
}

impl MemoryEngine {
    /// An empty engine. `options.open_mode` does not apply: there is never a store to find or
    /// protect (the `tidemark` facade refuses the modes that need an existing store).
    pub fn new(options: EngineOptions) -> Self {
        MemoryEngine {
            state: RwLock::default(),
            options,
            counters: EngineCounters::default(),
        }
    }

    /// The options it was created with.
    pub fn options(&self) -> &EngineOptions {
        &self.options
    }

    /// Stores raw bytes under `key`, bypassing the codec. For tests of corruption handling only
    /// (cargo feature `testing`).
    #[cfg(any(test, feature = "testing"))]
    pub fn insert_raw(&self, key: &[u8], stored: &[u8]) -> Result<()> {
        validate_key(key)?;
        self.write()?.data.insert(key.to_vec(), stored.to_vec());
        Ok(())
    }

    /// Every stored key with its decoded lookup, in key order (corrupt entries are errors).
    pub fn entries(&self) -> Result<Vec<(Vec<u8>, LocalLookup)>> {
        let state = self.read()?;
        state
            .data
            .iter()
            .map(|(k, v)| Ok((k.clone(), LocalLookup::from_decoded(codec::decode(k, v)?))))
            .collect()
    }

    /// Removes every entry below the threshold `threshold_of(W)`, under the write lock so the
    /// threshold and the removal see one state.
    fn reclaim_at(&self, threshold_of: impl FnOnce(u64) -> u64) -> Result<ReclaimReport> {
        let started = Instant::now();
        let mut state = self.write()?;
        let threshold = threshold_of(state.watermark);
        let bytes_before = stored_bytes(&state.data);
        let mut report = ReclaimReport {
            threshold,
            bytes_before,
            ..ReclaimReport::default()
        };
        state
            .data
            .retain(|key, bytes| match codec::decode(key, bytes) {
                Ok(d) if d.offset() < threshold => {
                    match d {
                        Decoded::Value { .. } => report.values_removed += 1,
                        Decoded::Tombstone { .. } => report.tombstones_removed += 1,
                    }
                    false
                }
                Ok(_) => true,
                Err(_) => {
                    report.corrupt_kept += 1;
                    true
                }
            });
        report.bytes_after = stored_bytes(&state.data);
        // Nothing persists here: the rows the disk engines write are dropped.
        let _rows = state.covered.reclaimed(threshold);
        report.duration = started.elapsed();
        self.counters.record_reclaim(&report);
        Ok(report)
    }

    fn read(&self) -> Result<RwLockReadGuard<'_, State>> {
        sync::read(&self.state, "memory engine state")
    }

    fn write(&self) -> Result<RwLockWriteGuard<'_, State>> {
        sync::write(&self.state, "memory engine state")
    }

    /// The state for reading `W` and the applied end, even from a poisoned lock: each is a
    /// single `u64` store, so it always holds the last value published, and reading 0 instead
    /// would claim nothing is covered or applied (a host would replay from 0; a bucket would
    /// skip its lake check).
    fn positions(&self) -> RwLockReadGuard<'_, State> {
        self.state.read().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Engine for MemoryEngine {
    fn backend_name(&self) -> &'static str {
        "memory"
    }

    /// Removing covered entries from the map visits only them.
    fn reclaim_cost(&self) -> crate::ReclaimCost {
        crate::ReclaimCost::Proportional
    }

    fn apply(&self, batch: &WriteBatch) -> Result<ApplyOutcome> {
        let mut state = self.write()?;
        let plan = plan_apply(batch, state.watermark, state.applied_end)?;
        for record in &plan.writes {
            state
                .data
                .insert(record.key().to_vec(), record.encoded_value());
        }
        state.applied_end = plan.outcome.applied_end;
        let _rows = state.covered.record_writes(&plan.writes);
        self.counters.record_apply(&plan.outcome);
        Ok(plan.outcome)
    }

    fn lookup(&self, key: &[u8]) -> Result<LocalLookup> {
        validate_key(key)?;
        let state = self.read()?;
        match state.data.get(key) {
            Some(bytes) => Ok(LocalLookup::from_decoded(codec::decode_applied(
                key,
                bytes,
                state.applied_end,
            )?)),
            None => Ok(LocalLookup::Miss),
        }
    }

    fn advance_watermark(&self, w: u64) -> Result<WatermarkUpdate> {
        let mut state = self.write()?;
        let update = plan_advance(state.watermark, state.applied_end, w);
        state.watermark = update.current;
        Ok(update)
    }

    fn adopt_lake_watermark(&self, lake_end: u64) -> Result<WatermarkUpdate> {
        let mut state = self.write()?;
        let update = plan_adopt(state.watermark, lake_end);
        state.watermark = update.current;
        Ok(update)
    }

    fn watermark(&self) -> u64 {
        self.positions().watermark
    }

    fn applied_end(&self) -> u64 {
        self.positions().applied_end
    }

    fn reclaim(&self) -> Result<ReclaimReport> {
        self.reclaim_at(|watermark| reclaim_threshold(watermark, self.options.retention_distance))
    }

    fn reclaim_below(&self, threshold: u64) -> Result<ReclaimReport> {
        self.reclaim_at(|watermark| threshold.min(watermark))
    }

    fn stats(&self) -> Result<EngineStats> {
        let state = self.read()?;
        let threshold = reclaim_threshold(state.watermark, self.options.retention_distance);
        // The same accounting as `reclaimable` (and the disk engines): counted per version
        // written, so overwritten versions count until a reclaim passes them.
        let covered_estimate = state.covered.below(threshold).entries;
        Ok(EngineStats {
            watermark: state.watermark,
            applied_end: state.applied_end,
            bytes_on_disk: stored_bytes(&state.data),
            live_entries: state.data.len() as u64,
            live_entries_exact: true,
            covered_estimate,
            counters: self.counters.snapshot(),
        })
    }

    fn reclaimable(&self) -> Result<Reclaimable> {
        let state = self.read()?;
        let threshold = reclaim_threshold(state.watermark, self.options.retention_distance);
        Ok(state.covered.reclaimable(threshold))
    }

    fn lookup_inline(&self, key: &[u8]) -> Result<Option<LocalLookup>> {
        // Memory never blocks on storage.
        self.lookup(key).map(Some)
    }

    fn flush(&self) -> Result<()> {
        Ok(())
    }

    /// Every entry decodes and is tagged below the applied end (no offset index to check).
    fn verify(&self) -> Result<VerifyReport> {
        let state = self.read()?;
        let mut verifier = Verifier::new("memory", state.watermark, state.applied_end);
        for (key, stored) in &state.data {
            verifier.data_row(key, stored);
        }
        Ok(verifier.finish())
    }
    /// Reclaims remove entries in place: there is never background work.
    fn wait_for_background_work(&self) -> Result<()> {
        Ok(())
    }
}

fn stored_bytes(data: &BTreeMap<Vec<u8>, Vec<u8>>) -> u64 {
    data.iter().map(|(k, v)| (k.len() + v.len()) as u64).sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn watermark_and_applied_end_survive_a_poisoned_lock() {
        let engine = MemoryEngine::new(EngineOptions::default());
        engine.put(b"k", b"v", 7).unwrap();
        engine.advance_watermark(5).unwrap();
        let poisoned = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let _guard = engine.state.write().unwrap();
            panic!("poison the state lock");
        }));
        assert!(poisoned.is_err());
        assert!(engine.state.is_poisoned());
        assert_eq!((engine.watermark(), engine.applied_end()), (5, 8));
        // Everything that could serve torn data still refuses.
        assert!(matches!(
            engine.lookup(b"k"),
            Err(crate::Error::Poisoned { .. })
        ));
        assert!(matches!(
            engine.reclaim(),
            Err(crate::Error::Poisoned { .. })
        ));
    }
}
