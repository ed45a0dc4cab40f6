//! The sled implementation of one sweeper chunk ([`SweepChunk`]).
//!
//! A sled transaction cannot range-scan, so a chunk has two steps: pick at most `limit` index rows
//! below the threshold with a plain range scan over `by_offset` (outside any transaction), then
//! plan and apply every row inside **one** transaction over `data`, `by_offset` and `meta`. The
//! data row is re-read inside the transaction, so an overwrite that committed between the two
//! steps is seen and the newer value is never removed: its tag no longer equals the index row's
//! offset. The same transaction lowers the persisted live-entry count by the rows it removed and
//! takes them out of the live-row digest ([`crate::digest`]).

use std::ops::Bound;
use std::sync::atomic::{AtomicU64, Ordering};

use disk::sweeper::{ChunkResult, SweepChunk, SweepTotals, index_upper_bound, plan_row};
use engine_api::{Error, Result};
use sled::IVec;
use sled::transaction::{ConflictableTransactionResult, Transactional};

use crate::error::{sled_error, tx_error};
use crate::{digest, meta};

/// The trees and in-memory state a chunk touches.
pub(crate) struct SledChunker<'a> {
    pub(crate) data: &'a sled::Tree,
    pub(crate) by_offset: &'a sled::Tree,
    pub(crate) meta: &'a sled::Tree,
    /// The engine's in-memory copy of the live-entry count, lowered after each commit.
    pub(crate) live_entries: &'a AtomicU64,
}

impl SledChunker<'_> {
    /// Index keys `> resume_after` and `< index_upper_bound(threshold)`, at most `limit` of them.
    /// Only `by_offset` is read, never `data`, so the cost follows the covered range.
    fn pick(&self, threshold: u64, limit: usize, resume_after: Option<&[u8]>) -> Result<Vec<IVec>> {
        let upper = index_upper_bound(threshold);
        let lower = match resume_after {
            Some(after) => Bound::Excluded(after),
            None => Bound::Unbounded,
        };
        self.by_offset
            .range::<&[u8], _>((lower, Bound::Excluded(&upper[..])))
            .keys()
            .take(limit)
            .collect::<std::result::Result<Vec<_>, _>>()
            .map_err(sled_error)
    }
}

impl SweepChunk for SledChunker<'_> {
    fn sweep_chunk(
        &self,
        threshold: u64,
        limit: usize,
        resume_after: Option<&[u8]>,
    ) -> Result<ChunkResult> {
        let rows = self.pick(threshold, limit, resume_after)?;
        let Some(last) = rows.last() else {
            return Ok(ChunkResult::default());
        };
        // Set when the closure first runs, i.e. once sled's transaction lock is held.
        let holding: std::cell::Cell<Option<std::time::Instant>> = std::cell::Cell::new(None);
        let (mut totals, removed) = (self.data, self.by_offset, self.meta)
            .transaction(
                |(data, index, meta)| -> ConflictableTransactionResult<(SweepTotals, u64), Error> {
                    if holding.get().is_none() {
                        holding.set(Some(std::time::Instant::now()));
                    }
                    // Built afresh on every attempt: sled may re-run the closure.
                    let mut totals = SweepTotals::default();
                    let (mut removed, mut delta) = (0u64, digest::Delta::default());
                    for row in &rows {
                        // The shared rule, unreadable index rows included (kept and counted).
                        let plan = plan_row(row, |key| data.get(key))?;
                        if let Some(key) = plan.remove_data
                            && let Some(gone) = data.remove(key)?
                        {
                            removed += 1;
                            delta.remove(key, &gone);
                        }
                        if plan.remove_index {
                            index.remove(row.clone())?;
                        }
                        totals.count(plan.action);
                    }
                    if removed > 0 {
                        meta::adjust_live(meta, 0, removed)?;
                        digest::apply(meta, delta)?;
                    }
                    Ok((totals, removed))
                },
            )
            .map_err(tx_error)?;
        // Deltas commute, so concurrent applies updating the same counter cannot reorder it.
        let _ = self
            .live_entries
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                Some(n.saturating_sub(removed))
            });
        totals.chunks = 1;
        Ok(ChunkResult {
            totals,
            last_index_key: Some(last.to_vec()),
            busy: holding.get().map(|t| t.elapsed()),
        })
    }
}
