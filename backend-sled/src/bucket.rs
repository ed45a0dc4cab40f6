//! [`Bucket`]: the state of one bucket that its storage, its sweeps and the context's rebuild
//! thread share.

use std::fmt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock, RwLockReadGuard};

use sled::IVec;
use tidemark_disk::BackendContext;
use tidemark_engine_api::Result;

use crate::context::SledContext;
use crate::error::store_failed;
use crate::generation::Generation;
use crate::progress::Progress;
use crate::rebuild_rule::Rebuilt;

/// The state of a bucket that its storage and the context's rebuild thread share.
pub struct Bucket {
    /// The bucket directory (named in [`Error::StoreFailed`](tidemark_engine_api::Error::StoreFailed)).
    pub(crate) dir: PathBuf,
    /// The current generation. Writers and sweep chunks hold `switch` (shared) while they use
    /// it, so a rebuild swaps it only between two of them; readers clone it and never wait for
    /// a rebuild.
    pub(crate) current: Mutex<Arc<Generation>>,
    /// Shared by every write and sweep chunk for its whole duration, exclusive for a rebuild's
    /// switch.
    pub(crate) switch: RwLock<()>,
    /// Generations switched away from whose files are still there because a reader held them;
    /// removed by the next reclaim or settle (or the next writable open).
    pub(crate) retired: Mutex<Vec<Arc<Generation>>>,
    /// The database's size and rows right after the last rebuild (zeros before any): see
    /// [`crate::rebuild_rule::due`].
    pub(crate) rebuilt: Mutex<Rebuilt>,
    /// Rebuilds switched to since open.
    pub(crate) rebuilds: AtomicU64,
    /// Rebuilds that failed (and were dropped, or failed the store) since open.
    pub(crate) failed_rebuilds: AtomicU64,
    /// Bytes written by background rebuilds that no reclaim has reported yet (the next one
    /// reports them as its `bytes_rewritten`).
    pub(crate) unreported_rewrite: AtomicU64,
    /// Rows in `data`, mirrored from `meta` (see [`crate::meta::LIVE_ENTRIES`]).
    pub(crate) live_entries: AtomicU64,
    /// Set when a flush after a committed write failed; see [`Error::StoreFailed`](tidemark_engine_api::Error::StoreFailed).
    pub(crate) failed: AtomicBool,
    /// Makes the next flush fail, to test the failed state without a failing disk.
    #[cfg(test)]
    pub(crate) fail_next_flush: AtomicBool,
    /// Whether a rebuild is queued or running, and whether the bucket is closing.
    pub(crate) progress: Arc<Progress>,
    /// What sweep chunks removed while a rebuild copies (`None` otherwise): the copy removes
    /// the same rows from itself (see [`crate::rebuild`]).
    pub(crate) removals: Mutex<Option<Removals>>,
    /// Keeps the flusher and rebuild threads (and the budget) alive while the bucket is open;
    /// rebuilds take its rebuild slot and register the new database with its flusher.
    pub(crate) context: SledContext,
}

/// Rows sweep chunks removed while a rebuild copies.
#[derive(Debug, Default)]
pub(crate) struct Removals {
    /// `data` rows removed, with the stored value each held.
    pub(crate) data: Vec<(IVec, IVec)>,
    /// `by_offset` rows removed.
    pub(crate) index: Vec<IVec>,
}

impl Bucket {
    /// Whether a rebuild is due now ([`crate::rebuild_rule::due`]).
    pub(crate) fn rebuild_due(&self) -> Result<bool> {
        let settings = self.context.settings();
        let rebuilt = *tidemark_engine_api::sync::lock(&self.rebuilt, "sled rebuild sizes")?;
        Ok(crate::rebuild_rule::due(
            self.size_on_disk()?,
            rebuilt,
            self.live_entries.load(Ordering::Acquire),
            settings.rebuild_min_bytes,
            settings.rebuild_growth,
        ))
    }

    /// The current generation (a clone: a rebuild may switch to another meanwhile).
    pub(crate) fn generation(&self) -> Result<Arc<Generation>> {
        Ok(Arc::clone(&*tidemark_engine_api::sync::lock(
            &self.current,
            "sled generation",
        )?))
    }

    /// The current generation for a write, and the shared side of the switch lock, held until
    /// the write is done so a rebuild cannot switch away in the middle of it.
    pub(crate) fn writing(&self) -> Result<(RwLockReadGuard<'_, ()>, Arc<Generation>)> {
        let guard = tidemark_engine_api::sync::read(&self.switch, "sled generation switch")?;
        Ok((guard, self.generation()?))
    }

    /// sled's own figure for the bytes its files occupy: the current generation's, plus those of
    /// generations switched away from whose files are still there.
    pub(crate) fn size_on_disk(&self) -> Result<u64> {
        let mut total = self.generation()?.size_on_disk()?;
        for old in
            tidemark_engine_api::sync::lock(&self.retired, "sled retired generations")?.iter()
        {
            total = total.saturating_add(old.size_on_disk()?);
        }
        Ok(total)
    }

    /// The `data` tree, for tests that change rows behind the engine's back.
    #[cfg(test)]
    pub(crate) fn data(&self) -> Result<sled::Tree> {
        Ok(self.generation()?.data.clone())
    }

    /// Marks the storage failed after a write whose durability is unknown (see
    /// [`Error::StoreFailed`](tidemark_engine_api::Error::StoreFailed)).
    pub(crate) fn fail(&self, cause: &dyn fmt::Display) {
        self.failed.store(true, Ordering::Release);
        tracing::error!(path = %self.dir.display(), error = %cause,
            "a sled write whose durability is unknown failed; the store must be reopened");
    }

    /// Rebuilds switched to since open.
    pub(crate) fn rebuilds(&self) -> u64 {
        self.rebuilds.load(Ordering::Acquire)
    }

    /// Counts a rebuild that failed.
    pub(crate) fn count_failed_rebuild(&self) {
        self.failed_rebuilds.fetch_add(1, Ordering::AcqRel);
    }

    /// Whether a flush after a committed write has failed.
    pub(crate) fn is_failed(&self) -> bool {
        self.failed.load(Ordering::Acquire)
    }

    /// Flushes after a committed write. On failure the write is visible but maybe not durable,
    /// and nothing would stop a retry from being acknowledged without a flush, so the storage is
    /// marked failed before the error is returned.
    pub(crate) fn flush_committed(&self, store: &Generation) -> Result<()> {
        if let Err(e) = self.flush_db(store) {
            self.fail(&e);
            return Err(store_failed(&self.dir, Some(e)));
        }
        Ok(())
    }

    pub(crate) fn flush_db(&self, store: &Generation) -> sled::Result<()> {
        #[cfg(test)]
        if self.fail_next_flush.swap(false, Ordering::AcqRel) {
            return Err(sled::Error::Io(std::io::Error::other(
                "injected flush failure",
            )));
        }
        store.db.flush().map(drop)
    }
}
