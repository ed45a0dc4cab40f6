//! [`Storage`]: the primitives a disk backend supplies to [`DiskEngine`](crate::DiskEngine).

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;

use crate::layout::FileStart;
use crate::layout::high_water::HighWater;
use crate::sweeper::SweepTotals;
use crate::turns::WriterTurns;
use tidemark_engine_api::EngineOptions;
use tidemark_engine_api::Record;
use tidemark_engine_api::Result;
use tidemark_engine_api::Verifier;
use tidemark_engine_api::covered::MetaRow;

use crate::budget::BucketLease;
use crate::context::BackendContext;
use crate::meta::MetaKey;

/// What [`Storage::open`] gets from [`DiskEngine::open_in`](crate::DiskEngine::open_in).
#[derive(Debug)]
pub struct StorageInit<'a> {
    /// The bucket directory (already claimed with the backend's marker, or checked to hold one
    /// when the open mode does not create).
    pub dir: &'a Path,
    /// The options the engine is opened with. A storage follows `options.open_mode`: it
    /// checks its files with [`StorageInit::require_engine_file`] before its engine may create
    /// them, and opens them read-only where its engine can when the mode does not write.
    pub options: &'a EngineOptions,
    /// The directory's high-water record, when it has one: a store lived here, so its engine
    /// files must be there.
    pub recorded: Option<HighWater>,
    /// The engine's published watermark, for readers outside the engine (a compaction filter's
    /// supplier). It holds the restored `W` once the engine is open; it only ever holds durable
    /// values.
    pub watermark: Arc<AtomicU64>,
}

impl StorageInit<'_> {
    /// Checks the engine's main file (or directory) `path`, named `what` in errors, before the
    /// engine opens it ([`crate::layout::check_engine_file`]): missing or blank when the directory has
    /// a high-water record is [`Error::Damaged`](tidemark_engine_api::Error::Damaged); missing otherwise is created only when the
    /// open mode creates ([`Error::NoStore`](tidemark_engine_api::Error::NoStore) otherwise).
    pub fn require_engine_file(&self, path: &Path, what: &str, start: FileStart) -> Result<()> {
        crate::layout::check_engine_file(
            self.dir,
            path,
            what,
            start,
            self.options.open_mode,
            self.recorded.is_some(),
        )
    }
}

/// What one commit writes ([`Storage::commit`]).
#[derive(Debug, Clone, Copy)]
pub struct CommitRequest<'a> {
    /// The records to store, in batch order.
    pub writes: &'a [&'a Record],
    /// The applied end the commit moves to.
    pub applied_end: u64,
    /// The covered-run rows this commit changes.
    pub rows: &'a [MetaRow],
    /// Whether the write must be durable when the commit returns (or after
    /// [`Storage::after_commit`]).
    pub sync: bool,
}

/// Which reclaim the engine asks its storage for.
#[derive(Clone, Copy)]
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
    /// Run after every chunk a sweeping storage committed, with that chunk's totals, outside
    /// any transaction ([`crate::sweeper::sweep`]); an LSM storage, which reclaims in one
    /// compaction, never calls it. The engine passes `None`; a layer around the storage may
    /// observe a reclaim's progress with it.
    pub on_chunk: Option<&'a (dyn Fn(&SweepTotals) + Sync)>,
}

impl std::fmt::Debug for ReclaimRequest<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReclaimRequest")
            .field("threshold", &self.threshold)
            .field("purge", &self.purge)
            .field("on_chunk", &self.on_chunk.is_some())
            .finish_non_exhaustive()
    }
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

/// What a storage lends a key's stored bytes to (`None` when the key is absent), without
/// copying them: [`Storage::get`] and [`Storage::get_inline`].
pub trait ReadStored<T>: FnOnce(Option<&[u8]>) -> Result<T> {}

impl<T, F: FnOnce(Option<&[u8]>) -> Result<T>> ReadStored<T> for F {}

/// A disk backend's storage primitives. [`DiskEngine`](crate::DiskEngine) holds the locks, the
/// watermark and applied end, the counters and the contract's arithmetic; a storage only stores.
///
/// Calls that change data are made under the engine's writer lock (`commit`, `persist_meta`,
/// `after_commit`, and the test hooks of `testing::StorageHooks`) or its reclaimer lock (`reclaim`); `get` and the statistics run
/// concurrently with both.
pub trait Storage: Sized + Send + Sync + 'static {
    /// The backend's name: in the directory marker, errors and `Engine::backend_name`.
    const BACKEND: &'static str;

    /// What a reclaim of this storage costs (the engine declares it to the scheduler).
    const RECLAIM_COST: tidemark_engine_api::ReclaimCost;

    /// The per-process resources every bucket of the backend shares.
    type Context: BackendContext;

    /// Opens the storage of one bucket in the directory the skeleton prepared
    /// ([`DiskEngine::open_in`](crate::DiskEngine::open_in)), holding `lease`, its place in
    /// `context`'s budget, until dropped.
    fn open(context: &Self::Context, init: StorageInit<'_>, lease: BucketLease) -> Result<Self>;

    /// Removes what the closed bucket at `dir` keeps outside its directory (its rows in an
    /// instance it shares with other buckets), before
    /// [`DiskEngine::remove_in`](crate::DiskEngine::remove_in) deletes the directory. Refuses a
    /// bucket open in this process where the storage can tell. The default keeps nothing outside
    /// the directory, so it has nothing to remove.
    fn remove(context: &Self::Context, dir: &Path) -> Result<()> {
        let _ = (context, dir);
        Ok(())
    }

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

    /// Writes the request's records (their encoded values, and whatever index rows the storage
    /// keeps), the new applied end and the metadata rows (the covered runs this commit changes)
    /// in **one atomic write**: after a crash either all of it is there or none. With `sync` the
    /// write is durable when this returns, unless the storage makes it durable in
    /// [`Self::after_commit`].
    fn commit(&self, commit: CommitRequest<'_>) -> Result<()>;

    /// Called after a commit that succeeded, once the engine has published its applied end. A
    /// storage whose commit becomes visible before it is durable (sled) makes it durable here
    /// when `sync` is set. The default does nothing.
    fn after_commit(&self, sync: bool) -> Result<()> {
        let _ = sync;
        Ok(())
    }

    /// Calls `read` with the stored bytes of `key` (`None` when absent), without copying them.
    fn get<T>(&self, key: &[u8], read: impl ReadStored<T>) -> Result<T>;

    /// [`get`](Self::get), but only if the read cannot block for long (it is served from memory
    /// or a cache); `Ok(None)` when it might have to wait for storage, and then `read` is not
    /// called. The default always says `None` (every read goes to a blocking thread).
    fn get_inline<T>(&self, key: &[u8], read: impl ReadStored<T>) -> Result<Option<T>> {
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

    /// Feeds every stored data row to `verifier` (with [`VerifyIndex::indexed_data_row`](crate::offset_index::VerifyIndex::indexed_data_row) where the
    /// storage keeps an offset index, [`Verifier::data_row`] otherwise), every offset-index row
    /// ([`VerifyIndex::index_rows`](crate::offset_index::VerifyIndex::index_rows)), and runs the engine's own checks where it offers one that only
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
