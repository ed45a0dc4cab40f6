//! [`FjallEngine`]: one bucket in two keyspaces of a shared fjall database, on the shared
//! disk-engine skeleton.
//!
//! Layout: the bucket directory holds the Tidemark marker, the high-water record and the
//! keyspace record; its data lives in the database its parent directory's buckets share (see
//! [`crate::storage`]).

use std::path::{Path, PathBuf};

use tidemark_disk::compaction_policy::FilterCounterSnapshot;
use tidemark_disk::{BackendContext, DiskEngine, StorageInit};
use tidemark_engine_api::{EngineOptions, OpenEngine, Result, forward_engine};

use crate::context::FjallContext;
use crate::storage::FjallStorage;

/// A Tidemark engine on fjall; reclaims with the watermark compaction filter.
///
/// `reclaim()` flushes, then major-compacts the bucket's `data` keyspace into its last level, so
/// everything covered when it starts is physically gone when it returns. Its report counts what
/// the filter removed during the call, exactly: the filter is armed only inside a reclaim, with
/// the threshold fixed when it started. `reclaim_below` does the same with the filter's threshold
/// replaced by `min(threshold, W)` for the duration of the call.
///
/// ```no_run
/// use tidemark_backend_fjall::{BackendContext, FjallContext, FjallContextOptions, FjallEngine};
/// use tidemark_engine_api::{Engine, EngineOptions};
///
/// let ctx = FjallContext::new(FjallContextOptions::default())?;
/// let engine = FjallEngine::open_in(&ctx, "/tmp/buckets/1".as_ref(), EngineOptions::default())?;
/// engine.put(b"k", b"v", 0)?;
/// engine.advance_watermark(1)?;
/// assert_eq!(engine.reclaim()?.values_removed, 1);
/// # Ok::<(), tidemark_engine_api::Error>(())
/// ```
#[derive(Debug)]
pub struct FjallEngine {
    inner: DiskEngine<FjallStorage>,
}

impl FjallEngine {
    /// The shared skeleton under the engine (see `DiskBackend::skeleton`).
    pub(crate) fn skeleton(&self) -> &DiskEngine<FjallStorage> {
        &self.inner
    }

    /// Opens the bucket at `path` with the settings of `context` (creating it when missing,
    /// unless `options.open_mode` says otherwise), taking a place in the context's bucket
    /// budget ([`tidemark_engine_api::Error::ResourceLimit`] beyond it, creating nothing). Its data lives
    /// in the fjall database shared by the buckets of `path`'s parent directory.
    pub fn open_in(context: &FjallContext, path: &Path, options: EngineOptions) -> Result<Self> {
        // Reserved against the shared database's directory, where the descriptors are.
        let lease = context.admit(&crate::database::shared_dir_of(path)?)?;
        let inner = DiskEngine::open(path, options, |init: StorageInit<'_>| {
            FjallStorage::open(context, init, lease)
        })?;
        Ok(FjallEngine { inner })
    }

    /// The context this engine shares resources with.
    pub fn context(&self) -> &FjallContext {
        self.inner.storage().context()
    }

    /// The directory of the fjall database this bucket's keyspaces live in.
    pub fn database_path(&self) -> Result<PathBuf> {
        self.inner.storage().database_path().map(Path::to_path_buf)
    }

    /// The bucket's keyspace name (its keyspaces are `<name>.data` and `<name>.meta`).
    pub fn keyspace_name(&self) -> &str {
        self.inner.storage().keyspace_name()
    }

    /// What the compaction filter did across *every* compaction since open, including fjall's
    /// own background compactions (`reclaim` reports only what happened during its call).
    pub fn filter_counters(&self) -> FilterCounterSnapshot {
        self.inner.storage().filter_counters().snapshot()
    }

    /// Flushes the memtables of both keyspaces into table files (no filtering: fjall filters
    /// only in compactions).
    pub fn flush_memtables(&self) -> Result<()> {
        self.inner
            .write_storage("flush_memtables", FjallStorage::flush_memtables)
    }

    /// Flushes, then compacts the whole `data` keyspace into its last level. The filter is not
    /// armed, so nothing is removed: this only places older versions below newer ones (the
    /// conformance factory's `settle`). Serialised with reclaims.
    pub fn compact_to_bottom(&self) -> Result<()> {
        self.inner
            .with_reclaimer("compact_to_bottom", FjallStorage::compact_to_bottom)
    }
}

impl OpenEngine for FjallEngine {
    /// Opens from the process-wide default context ([`FjallContext::global`]).
    fn open(path: &Path, options: EngineOptions) -> Result<Self> {
        FjallEngine::open_in(&FjallContext::global()?, path, options)
    }
}

impl tidemark_engine_api::Engine for FjallEngine {
    forward_engine!(inner);
}
