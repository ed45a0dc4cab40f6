//! redb's implementation of the shared sweeper chunk: one write transaction per bounded chunk.
//!
//! The loop itself (`tidemark_disk::sweeper::sweep`) is shared with sled; this module only knows how
//! to run one chunk inside a redb write transaction.

use std::ops::Bound;

use redb::{AccessGuard, Durability, ReadableTable};
use tidemark_disk::offset_index::index_upper_bound;
use tidemark_disk::sweeper::{ChunkRequest, ChunkResult, SweepChunk, plan_row};
use tidemark_engine_api::Result;

use std::path::Path;
use std::sync::RwLock;

use tidemark_engine_api::sync;

use crate::db::RedbDb;
use crate::error::RedbResultExt;
use crate::tables::{BY_OFFSET, DATA};

/// Runs sweeper chunks against one bucket's database.
pub(crate) struct RedbChunker<'a> {
    /// The bucket's database: each chunk read-locks it for its transaction only (a compaction
    /// takes it for writing; see `RedbStorage::db`).
    pub(crate) db: &'a RwLock<RedbDb>,
    /// The database file, for errors.
    pub(crate) file: &'a Path,
    /// Called before each chunk: makes the writers' commits durable when they are due (see
    /// `RedbStorage::durable_if_due`), here rather than in a writer's apply while a sweep runs.
    pub(crate) before_chunk: &'a dyn Fn() -> Result<()>,
}

impl SweepChunk for RedbChunker<'_> {
    fn sweep_chunk(&self, chunk: ChunkRequest<'_>) -> Result<ChunkResult> {
        (self.before_chunk)()?;
        let upper = index_upper_bound(chunk.threshold);
        let db = sync::read(self.db, "redb database")?;
        let mut txn = db.writable(self.file, "reclaim")?.begin_write().redb()?;
        // The write lock is held from here: what writers wait for.
        let holding = std::time::Instant::now();
        // Chunks commit without an fsync each; `RedbStorage::reclaim` ends the sweep with one
        // durable commit (`durable_barrier`). A crash in between only loses removals, which the
        // next sweep redoes.
        txn.set_durability(Durability::None).redb()?;
        let mut result = ChunkResult::default();
        {
            let mut index = txn.open_table(BY_OFFSET).redb()?;
            let mut data = txn.open_table(DATA).redb()?;
            let lower = match chunk.resume_after {
                Some(after) => Bound::Excluded(after),
                None => Bound::Unbounded,
            };
            // Collect the chunk's index keys first: the range borrows the table, and the rows are
            // removed below. `chunk.limit` bounds this buffer.
            let rows = index
                .range::<&[u8]>((lower, Bound::Excluded(upper.as_slice())))
                .redb()?
                .take(chunk.limit)
                .map(|row| row.map(|(k, _)| k.value().to_vec()))
                .collect::<std::result::Result<Vec<_>, _>>()
                .redb()?;
            for row in rows {
                // The shared rule, unreadable index rows included (kept and counted).
                let plan = plan_row(&row, |key| data.get(key).map(|g| g.map(Stored))).redb()?;
                if let Some(key) = plan.remove_data {
                    data.remove(key).redb()?;
                }
                if plan.remove_index {
                    index.remove(row.as_slice()).redb()?;
                }
                result.totals.count(plan.action);
                result.last_index_key = Some(row);
            }
        }
        if result.totals.rows_visited == 0 {
            // Nothing below the threshold: skip the commit entirely.
            txn.abort().redb()?;
            return Ok(result);
        }
        txn.commit().redb()?;
        result.totals.chunks = 1;
        result.busy = Some(holding.elapsed());
        Ok(result)
    }
}

/// A data row read inside the chunk's transaction, viewed as bytes for [`plan_row`].
struct Stored<'a>(AccessGuard<'a, &'static [u8]>);

impl AsRef<[u8]> for Stored<'_> {
    fn as_ref(&self) -> &[u8] {
        self.0.value()
    }
}
