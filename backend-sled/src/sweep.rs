//! The sled implementation of one sweeper chunk ([`SweepChunk`]).
//!
//! A sled transaction cannot range-scan, so a chunk has two steps: pick at most `limit` index rows
//! below the threshold with a plain range scan over `by_offset` (outside any transaction), then
//! plan and apply every row inside **one** transaction over `data`, `by_offset` and `meta`. The
//! data row is re-read inside the transaction, so an overwrite that committed between the two
//! steps is seen and the newer value is never removed: its tag no longer equals the index row's
//! offset. The same transaction lowers the persisted live-entry count by the rows it removed and
//! takes them out of the live-row digest ([`crate::digest`]).
//!
//! A chunk holds the bucket's switch lock (shared) from its pick to its commit, so it works on
//! one generation, and a rebuild switches only between two chunks; while a rebuild copies, the
//! chunk hands it the rows it removed, which the copy then removes from itself.

use std::ops::Bound;
use std::sync::atomic::Ordering;

use sled::IVec;
use sled::transaction::{ConflictableTransactionResult, Transactional};
use tidemark_disk::offset_index::index_upper_bound;
use tidemark_disk::sweeper::{ChunkRequest, ChunkResult, SweepChunk, SweepTotals, plan_row};
use tidemark_engine_api::{Error, Result};

use crate::bucket::Bucket;
use crate::error::{sled_error, tx_error};
use crate::generation::Generation;
use crate::{digest, meta};

/// The bucket a chunk sweeps: its current generation's trees, its in-memory live-entry count
/// (lowered after each commit) and the removals a running rebuild wants to hear of.
pub(crate) struct SledChunker<'a> {
    pub(crate) bucket: &'a Bucket,
}

impl SledChunker<'_> {
    /// Index keys `> resume_after` and `< index_upper_bound(threshold)`, at most `limit` of them.
    /// Only `by_offset` is read, never `data`, so the cost follows the covered range.
    fn pick(
        store: &Generation,
        threshold: u64,
        limit: usize,
        resume_after: Option<&[u8]>,
    ) -> Result<Vec<IVec>> {
        let upper = index_upper_bound(threshold);
        let lower = match resume_after {
            Some(after) => Bound::Excluded(after),
            None => Bound::Unbounded,
        };
        store
            .by_offset
            .range::<&[u8], _>((lower, Bound::Excluded(&upper[..])))
            .keys()
            .take(limit)
            .collect::<std::result::Result<Vec<_>, _>>()
            .map_err(sled_error)
    }
}

impl SweepChunk for SledChunker<'_> {
    fn sweep_chunk(&self, chunk: ChunkRequest<'_>) -> Result<ChunkResult> {
        // Held to the end of the chunk: see the module documentation.
        let (_switch, store) = self.bucket.writing()?;
        let rows = Self::pick(&store, chunk.threshold, chunk.limit, chunk.resume_after)?;
        let Some(last) = rows.last() else {
            return Ok(ChunkResult::default());
        };
        // Set when the closure first runs, i.e. once sled's transaction lock is held.
        let holding: std::cell::Cell<Option<std::time::Instant>> = std::cell::Cell::new(None);
        type Removed = (SweepTotals, Vec<(IVec, IVec)>, Vec<IVec>);
        let (mut totals, gone_rows, gone_index) = (&store.data, &store.by_offset, &store.meta)
            .transaction(
                |(data, index, meta)| -> ConflictableTransactionResult<Removed, Error> {
                    if holding.get().is_none() {
                        holding.set(Some(std::time::Instant::now()));
                    }
                    // Built afresh on every attempt: sled may re-run the closure.
                    let mut totals = SweepTotals::default();
                    let (mut gone_rows, mut gone_index) = (Vec::new(), Vec::new());
                    let mut delta = digest::Delta::default();
                    for row in &rows {
                        // The shared rule, unreadable index rows included (kept and counted).
                        let plan = plan_row(row, |key| data.get(key))?;
                        if let Some(key) = plan.remove_data
                            && let Some(gone) = data.remove(key)?
                        {
                            delta.remove(key, &gone);
                            gone_rows.push((IVec::from(key), gone));
                        }
                        if plan.remove_index {
                            index.remove(row.clone())?;
                            gone_index.push(row.clone());
                        }
                        totals.count(plan.action);
                    }
                    if !gone_rows.is_empty() {
                        meta::adjust_live(meta, 0, gone_rows.len() as u64)?;
                        digest::apply(meta, delta)?;
                    }
                    Ok((totals, gone_rows, gone_index))
                },
            )
            .map_err(tx_error)?;
        let removed = gone_rows.len() as u64;
        // Still under the switch lock, so a rebuild's last round (which holds it exclusively)
        // hears of every chunk that committed before it.
        if let Some(removals) =
            tidemark_engine_api::sync::lock(&self.bucket.removals, "sled removals")?.as_mut()
        {
            removals.data.extend(gone_rows);
            removals.index.extend(gone_index);
        }
        // Deltas commute, so concurrent applies updating the same counter cannot reorder it.
        let _ = self
            .bucket
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
