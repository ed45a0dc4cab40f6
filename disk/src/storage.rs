//! [`Storage`]: the primitives a disk backend supplies to [`DiskEngine`](crate::DiskEngine).

use crate::sweeper::SweepTotals;
use crate::turns::WriterTurns;
use tidemark_engine_api::batch::Record;
use tidemark_engine_api::covered::MetaRow;
use tidemark_engine_api::error::Result;
use tidemark_engine_api::verify::Verifier;

use crate::meta::MetaKey;

/// Which reclaim the engine asks its storage for.
#[derive(Debug, Clone, Copy)]
pub struct ReclaimRequest<'a> {
    /// Remove every entry with `offset < threshold`, and nothing else.
    pub threshold: u64,
    /// `true` for [`Engine::reclaim_below`](tidemark_engine_api::Engine::reclaim_below): the threshold ignores
    /// the retention distance. A storage whose reclamation reads its threshold from elsewhere (a
    /// compaction filter reading `W − D`) must put `threshold` in force for this call.
    pub purge: bool,
    /// The engine's writers: a storage that reclaims in many transactions yields to them between
    /// two ([`crate::sweeper::sweep`] does), so a reclaim never holds writes for longer than one.
    pub turns: &'a WriterTurns,
    /// The engine's test hooks, passed on to [`crate::sweeper::sweep`] (empty without the
    /// `testing` feature).
    pub faults: &'a crate::fault::Faults,
}

/// What one reclaim did in storage; the engine adds the threshold and the duration.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReclaimWork {
    /// Values removed.
    pub values_removed: u64,
    /// Tombstones removed.
    pub tombstones_removed: u64,
    /// Unreadable entries met and kept.
    pub corrupt_kept: u64,
    /// Bytes on disk before (as the storage measures what a reclaim changes).
    pub bytes_before: u64,
    /// Bytes on disk after.
    pub bytes_after: u64,
    /// Bytes the reclaim wrote, when the storage measures it (see
    /// [`ReclaimReport::bytes_rewritten`](tidemark_engine_api::ReclaimReport::bytes_rewritten)).
    pub bytes_rewritten: Option<u64>,
    /// Row-level detail when the storage reclaims with the shared sweeper.
    pub sweep: Option<SweepTotals>,
}

/// The live-entry count of a store.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LiveEntries {
    /// Values plus tombstones stored.
    pub count: u64,
    /// Whether `count` is exact (an LSM store only estimates it).
    pub exact: bool,
}

/// A disk backend's storage primitives. [`DiskEngine`](crate::DiskEngine) holds the locks, the
/// watermark and applied end, the counters and the contract's arithmetic; a storage only stores.
///
/// Calls that change data are made under the engine's writer lock (`commit`, `persist_meta`,
/// `after_commit`, and the test hooks of `testing::StorageHooks`) or its reclaimer lock (`reclaim`); `get` and the statistics run
/// concurrently with both.
pub trait Storage: Send + Sync + 'static {
    /// The backend's name: in the directory marker, errors and `Engine::backend_name`.
    const BACKEND: &'static str;

    /// What a reclaim of this storage costs (the engine declares it to the scheduler).
    const RECLAIM_COST: tidemark_engine_api::ReclaimCost;

    /// The stored bytes of a metadata value, `None` when absent.
    fn read_meta(&self, key: MetaKey) -> Result<Option<Vec<u8>>>;

    /// Writes a metadata value and makes it (and every earlier commit) durable before returning.
    fn persist_meta(&self, key: MetaKey, value: u64) -> Result<()>;

    /// Whether any data row is stored (at open: a store with data but no format version is
    /// damaged).
    fn holds_data(&self) -> Result<bool>;

    /// The metadata rows whose names start with `prefix`, in name order (the covered runs).
    fn read_meta_rows(&self, prefix: &str) -> Result<Vec<(String, Vec<u8>)>>;

    /// Writes (or, for `value: None`, deletes) metadata rows, without making them durable: the
    /// rows a reclaim trims from the covered runs, whose loss only makes the estimate high.
    fn write_meta_rows(&self, rows: &[MetaRow]) -> Result<()>;

    /// Writes `writes` (their encoded values, and whatever index rows the storage keeps), the
    /// new `applied_end` and the metadata `rows` (the covered runs this commit changes) in **one
    /// atomic write**: after a crash either all of it is there or none. With `sync` the write is
    /// durable when this returns, unless the storage makes it durable in [`Self::after_commit`].
    fn commit(
        &self,
        writes: &[&Record],
        applied_end: u64,
        rows: &[MetaRow],
        sync: bool,
    ) -> Result<()>;

    /// Called after a commit that succeeded, once the engine has published its applied end. A
    /// storage whose commit becomes visible before it is durable (sled) makes it durable here
    /// when `sync` is set. The default does nothing.
    fn after_commit(&self, sync: bool) -> Result<()> {
        let _ = sync;
        Ok(())
    }

    /// Calls `read` with the stored bytes of `key` (`None` when absent), without copying them.
    fn get<T>(&self, key: &[u8], read: impl FnOnce(Option<&[u8]>) -> Result<T>) -> Result<T>;

    /// [`get`](Self::get), but only if the read cannot block for long (it is served from memory
    /// or a cache); `Ok(None)` when it might have to wait for storage, and then `read` is not
    /// called. The default always says `None` (every read goes to a blocking thread).
    fn get_inline<T>(
        &self,
        key: &[u8],
        read: impl FnOnce(Option<&[u8]>) -> Result<T>,
    ) -> Result<Option<T>> {
        let _ = (key, read);
        Ok(None)
    }

    /// Physically removes every entry below `request.threshold` (values and tombstones, never an
    /// unreadable entry, never one at or above the threshold).
    fn reclaim(&self, request: ReclaimRequest<'_>) -> Result<ReclaimWork>;

    /// Bytes the store occupies on disk.
    fn bytes_on_disk(&self) -> Result<u64>;

    /// Entries stored.
    fn live_entries(&self) -> Result<LiveEntries>;

    /// Makes every write returned so far durable.
    fn flush(&self) -> Result<()>;

    /// Called before a durable write the engine makes under its writer lock (a watermark change
    /// that moves `W`): writes back what the storage has buffered, *without* blocking writers,
    /// so that the durable write which follows has little left to sync and holds writers up
    /// briefly. It promises nothing: a failure is ignored (the durable write does the work and
    /// reports its own failure). The default does nothing.
    fn prepare_durable(&self) -> Result<()> {
        Ok(())
    }

    /// Called once when a writable engine is dropped: makes everything durable so that the
    /// store reopens without replaying a log (RocksDB flushes its memtables). The default is
    /// [`Self::flush`].
    fn close(&self) -> Result<()> {
        self.flush()
    }

    /// Feeds every stored data row to `verifier` (with [`Verifier::indexed_data_row`] where the
    /// storage keeps an offset index, [`Verifier::data_row`] otherwise), every offset-index row
    /// ([`Verifier::index_rows`]), and runs the engine's own checks where it offers one that only
    /// reads ([`Verifier::engine_check`]). Never writes. The engine holds its writer and
    /// reclaimer locks meanwhile, so the rows are one consistent state.
    fn verify(&self, verifier: &mut Verifier) -> Result<()>;

    /// Refuses with an error when the storage can no longer promise durability (sled after a
    /// failed post-commit flush). Checked before every write, watermark change, reclaim and flush.
    fn check_usable(&self) -> Result<()> {
        Ok(())
    }

    /// Waits until the space work this storage's reclaims left to the background has finished
    /// ([`Engine::wait_for_background_work`](tidemark_engine_api::Engine::wait_for_background_work)).
    /// The default has none to wait for.
    fn wait_for_background_work(&self) -> Result<()> {
        Ok(())
    }

    /// Rebuilds since open that gave the store's space back to the file system
    /// ([`CounterSnapshot::space_rebuilds`](tidemark_engine_api::CounterSnapshot::space_rebuilds)). The
    /// default has none.
    fn space_rebuilds(&self) -> u64 {
        0
    }
}
