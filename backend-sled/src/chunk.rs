//! The sled implementation of one sweeper chunk ([`SweepChunk`]).
//!
//! A sled transaction cannot range-scan, so a chunk has two steps: pick at most `limit` index rows
//! below the threshold with a plain range scan over `by_offset` (outside any transaction), then
//! decide and apply every row inside **one** transaction over `data` and `by_offset`. The data row
//! is re-read inside the transaction, so an overwrite that committed between the two steps is seen
//! and the newer value is never removed: its tag no longer equals the index row's offset.

use std::ops::Bound;

use engine_api::Result;
use engine_api::sweeper::{
    ChunkResult, SweepAction, SweepChunk, SweepTotals, decide, index_upper_bound, parse_index_key,
};
use sled::IVec;
use sled::transaction::{ConflictableTransactionResult, Transactional};

use crate::errors::{NoAbort, sled_error, tx_error};

/// The two trees a chunk touches.
pub(crate) struct Chunker<'a> {
    pub(crate) data: &'a sled::Tree,
    pub(crate) by_offset: &'a sled::Tree,
}

impl Chunker<'_> {
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

impl SweepChunk for Chunker<'_> {
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
        let mut totals = (self.data, self.by_offset)
            .transaction(
                |(data, index)| -> ConflictableTransactionResult<SweepTotals, NoAbort> {
                    // Built afresh on every attempt: sled may re-run the closure.
                    let mut totals = SweepTotals::default();
                    for row in &rows {
                        let Some((offset, key)) = parse_index_key(row) else {
                            // An index key shorter than its 8-byte offset cannot be read;
                            // like a corrupt value, it is kept and counted, never guessed at.
                            totals.count(SweepAction::KeepCorrupt);
                            continue;
                        };
                        let current = data.get(key)?;
                        let action = decide(offset, key, current.as_deref());
                        match action {
                            SweepAction::RemoveValue | SweepAction::RemoveTombstone => {
                                data.remove(key)?;
                                index.remove(row.clone())?;
                            }
                            SweepAction::DropStaleIndex => {
                                index.remove(row.clone())?;
                            }
                            SweepAction::KeepCorrupt => {}
                        }
                        totals.count(action);
                    }
                    Ok(totals)
                },
            )
            .map_err(tx_error)?;
        totals.chunks = 1;
        Ok(ChunkResult {
            totals,
            last_index_key: Some(last.to_vec()),
        })
    }
}
