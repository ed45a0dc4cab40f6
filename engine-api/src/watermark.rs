//! The watermark arithmetic every backend shares: what is covered, how a batch is split into
//! applied / covered / already-applied records, and how a watermark request resolves.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::batch::{Record, WriteBatch};
use crate::error::Result;
use crate::outcome::{ApplyOutcome, WatermarkUpdate};

/// The exclusive reclaim threshold `W - D` (saturating): entries with `offset < threshold` are
/// covered and may be removed.
pub fn reclaim_threshold(watermark: u64, retention_distance: u64) -> u64 {
    watermark.saturating_sub(retention_distance)
}

/// Whether an entry tagged `offset` is covered under `threshold`.
pub fn is_covered(offset: u64, threshold: u64) -> bool {
    offset < threshold
}

/// A validated batch split into the records to write and the outcome to report.
#[derive(Debug)]
pub struct ApplyPlan<'a> {
    /// Records to write, in batch order.
    pub writes: Vec<&'a Record>,
    /// Counts and the applied end after the batch.
    pub outcome: ApplyOutcome,
}

impl ApplyPlan<'_> {
    /// Whether the applied end moves (so it must be persisted with the writes).
    pub fn advances(&self, applied_end: u64) -> bool {
        self.outcome.applied_end != applied_end
    }
}

/// Validates `batch` and decides, against the current watermark and applied end, which records
/// to write. A record with `offset < watermark` is *covered*; otherwise one with
/// `offset < applied_end` is *already applied*. The caller must hold its writer lock between
/// reading `watermark`/`applied_end` and committing the plan.
pub fn plan_apply(batch: &WriteBatch, watermark: u64, applied_end: u64) -> Result<ApplyPlan<'_>> {
    batch.validate()?;
    let mut outcome = ApplyOutcome {
        applied_end,
        ..ApplyOutcome::default()
    };
    let mut writes = Vec::with_capacity(batch.len());
    for record in batch.records() {
        let offset = record.offset();
        if offset < watermark {
            outcome.covered += 1;
        } else if offset < applied_end {
            outcome.already_applied += 1;
        } else {
            outcome.applied += 1;
            // `validate` rejected u64::MAX, so `offset + 1` cannot overflow.
            outcome.applied_end = outcome.applied_end.max(offset + 1);
            writes.push(record);
        }
    }
    Ok(ApplyPlan { writes, outcome })
}

/// Resolves `advance_watermark(requested)`: a request at or below the current watermark is a
/// no-op; otherwise the watermark becomes `min(requested, applied_end)` (never lower than now).
pub fn plan_advance(current: u64, applied_end: u64, requested: u64) -> WatermarkUpdate {
    let target = requested.min(applied_end);
    if requested <= current || target <= current {
        return WatermarkUpdate::unchanged(current, requested);
    }
    WatermarkUpdate {
        previous: current,
        requested,
        current: target,
        moved: true,
    }
}

/// Resolves a recovery-time adoption of the lake's committed end offset: the watermark becomes
/// `max(current, lake_end)` *without* clamping to the applied end, because everything below
/// `lake_end` is in the lake whether or not this replica applied it.
pub fn plan_adopt(current: u64, lake_end: u64) -> WatermarkUpdate {
    if lake_end <= current {
        return WatermarkUpdate::unchanged(current, lake_end);
    }
    WatermarkUpdate {
        previous: current,
        requested: lake_end,
        current: lake_end,
        moved: true,
    }
}

/// The watermark and applied end of one disk engine as readers see them: read without locks,
/// changed only by the engine's writer (under its writer lock) once the write holding the new
/// value has committed — and the watermark only once it is **durable**, so no reader (a
/// compaction filter least of all) ever acts on a watermark a crash could take back.
#[derive(Debug, Default)]
pub struct ProgressCell {
    /// Shared so a compaction filter's supplier can read `W` (see [`Self::watermark_handle`]).
    watermark: Arc<AtomicU64>,
    applied_end: AtomicU64,
}

impl ProgressCell {
    /// A cell holding restored values.
    pub fn new(watermark: u64, applied_end: u64) -> Self {
        ProgressCell {
            watermark: Arc::new(AtomicU64::new(watermark)),
            applied_end: AtomicU64::new(applied_end),
        }
    }

    /// The published watermark `W`.
    pub fn watermark(&self) -> u64 {
        self.watermark.load(Ordering::Acquire)
    }

    /// The published applied end.
    pub fn applied_end(&self) -> u64 {
        self.applied_end.load(Ordering::Acquire)
    }

    /// The published `W` itself, for readers outside the engine (a compaction filter supplier).
    pub fn watermark_handle(&self) -> Arc<AtomicU64> {
        Arc::clone(&self.watermark)
    }

    /// Publishes values restored from disk (at open, before the engine serves anything).
    pub fn restore(&self, watermark: u64, applied_end: u64) {
        self.watermark.store(watermark, Ordering::Release);
        self.applied_end.store(applied_end, Ordering::Release);
    }

    /// [`plan_apply`] against the published values. Hold the writer lock until the plan is
    /// committed and [`Self::publish_applied_end`] has run.
    pub fn plan_apply<'a>(&self, batch: &'a WriteBatch) -> Result<ApplyPlan<'a>> {
        plan_apply(batch, self.watermark(), self.applied_end())
    }

    /// Publishes the applied end of a committed batch.
    pub fn publish_applied_end(&self, applied_end: u64) {
        self.applied_end.store(applied_end, Ordering::Release);
    }

    /// `advance_watermark(requested)`: resolves it with [`plan_advance`]; when `W` moves, calls
    /// `persist` with the new value and publishes it only once `persist` succeeded. Hold the
    /// writer lock.
    pub fn advance(
        &self,
        requested: u64,
        persist: impl FnOnce(u64) -> Result<()>,
    ) -> Result<WatermarkUpdate> {
        self.publish(
            plan_advance(self.watermark(), self.applied_end(), requested),
            persist,
        )
    }

    /// `adopt_lake_watermark(lake_end)`: like [`Self::advance`], resolved with [`plan_adopt`].
    pub fn adopt(
        &self,
        lake_end: u64,
        persist: impl FnOnce(u64) -> Result<()>,
    ) -> Result<WatermarkUpdate> {
        self.publish(plan_adopt(self.watermark(), lake_end), persist)
    }

    fn publish(
        &self,
        update: WatermarkUpdate,
        persist: impl FnOnce(u64) -> Result<()>,
    ) -> Result<WatermarkUpdate> {
        if update.moved {
            persist(update.current)?;
            self.watermark.store(update.current, Ordering::Release);
        }
        Ok(update)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn threshold_saturates() {
        assert_eq!(reclaim_threshold(10, 3), 7);
        assert_eq!(reclaim_threshold(2, 3), 0);
        assert!(is_covered(6, 7));
        assert!(!is_covered(7, 7));
    }

    #[test]
    fn plan_splits_covered_already_applied_and_new() {
        let mut b = WriteBatch::new();
        b.put("a", "1", 3)
            .put("b", "1", 5)
            .put("c", "1", 8)
            .delete("d", 9);
        let plan = plan_apply(&b, 4, 7).unwrap();
        assert_eq!(plan.outcome.covered, 1);
        assert_eq!(plan.outcome.already_applied, 1);
        assert_eq!(plan.outcome.applied, 2);
        assert_eq!(plan.outcome.applied_end, 10);
        assert_eq!(plan.writes.len(), 2);
        assert!(plan.advances(7));
    }

    #[test]
    fn cell_publishes_only_after_persist_succeeds() {
        let cell = ProgressCell::new(2, 10);
        let err = cell.advance(8, |_| Err(crate::Error::Closed));
        assert!(err.is_err());
        assert_eq!(cell.watermark(), 2);
        let mut persisted = Vec::new();
        let up = cell
            .advance(20, |w| {
                persisted.push(w);
                Ok(())
            })
            .unwrap();
        assert_eq!(
            (up.current, cell.watermark(), persisted),
            (10, 10, vec![10])
        );
        // No-ops never call persist.
        cell.advance(5, |_| panic!("persisted a no-op")).unwrap();
        assert_eq!(cell.adopt(30, |_| Ok(())).unwrap().current, 30);
        assert_eq!(cell.watermark_handle().load(Ordering::Acquire), 30);
    }

    #[test]
    fn advance_is_monotonic_and_clamped() {
        assert!(!plan_advance(5, 10, 5).moved);
        assert!(!plan_advance(5, 10, 3).moved);
        let up = plan_advance(5, 10, 20);
        assert_eq!((up.previous, up.current, up.moved), (5, 10, true));
        assert!(!plan_advance(10, 10, 20).moved);
        assert_eq!(plan_adopt(5, 20).current, 20);
        assert!(!plan_adopt(5, 4).moved);
    }
}
