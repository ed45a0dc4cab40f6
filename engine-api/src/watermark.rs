//! The watermark arithmetic every backend shares: what is covered, how a batch is split into
//! applied / covered / already-applied records, and how a watermark request resolves.

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
