//! [`RocksDbEngine`]: one bucket in one RocksDB database, on the shared disk-engine skeleton.
//!
//! Layout: the bucket directory holds the Tidemark marker and a `db/` subdirectory with the
//! RocksDB database (see [`crate::storage`] for its column families).

use std::path::Path;
use tidemark_disk::BackendContext;

use rocksdb::properties;
use tidemark_disk::{DiskEngine, StorageInit};
use tidemark_engine_api::{EngineOptions, OpenEngine, Result, forward_engine};

use crate::context::RocksDbContext;
use crate::storage::RocksDbStorage;
use tidemark_disk::compaction_policy::FilterCounterSnapshot;

pub(crate) use crate::error::BACKEND;

/// A Tidemark engine on RocksDB; reclaims with the watermark compaction filter.
///
/// `reclaim()` flushes, then compacts the whole `data` column family down to the bottom level,
/// so everything covered when it starts is physically gone when it returns. Its report counts
/// what the filter removed during the call: exact for a bucket whose background compactions do
/// not interleave, approximate otherwise (see the crate README). `reclaim_below` does the same
/// with the filter's threshold replaced by `min(threshold, W)` for the duration of the call.
///
/// ```no_run
/// use tidemark_backend_rocksdb::{BackendContext, RocksDbContext, RocksDbContextOptions, RocksDbEngine};
/// use tidemark_engine_api::{Engine, EngineOptions};
///
/// let ctx = RocksDbContext::new(RocksDbContextOptions::default())?;
/// let engine = RocksDbEngine::open_in(&ctx, "/tmp/bucket-1".as_ref(), EngineOptions::default())?;
/// engine.put(b"k", b"v", 0)?;
/// engine.advance_watermark(1)?;
/// assert_eq!(engine.reclaim()?.values_removed, 1);
/// # Ok::<(), tidemark_engine_api::Error>(())
/// ```
#[derive(Debug)]
pub struct RocksDbEngine {
    inner: DiskEngine<RocksDbStorage>,
}

impl RocksDbEngine {
    /// The shared skeleton under the engine (see `DiskBackend::skeleton`).
    pub(crate) fn skeleton(&self) -> &DiskEngine<RocksDbStorage> {
        &self.inner
    }

    /// Opens the bucket at `path` with the shared resources of `context` (creating it when
    /// missing, unless `options.open_mode` says otherwise), taking a place in the context's
    /// bucket budget: an open beyond it, or beyond the process's file-descriptor limit, is
    /// [`tidemark_engine_api::Error::ResourceLimit`] and creates nothing. The place is given back when
    /// the engine is dropped.
    pub fn open_in(context: &RocksDbContext, path: &Path, options: EngineOptions) -> Result<Self> {
        let lease = context.admit(path)?;
        let inner = DiskEngine::open(path, options, |init: StorageInit<'_>| {
            RocksDbStorage::open(context, init, lease)
        })?;
        Ok(RocksDbEngine { inner })
    }

    /// The context this engine shares resources with.
    pub fn context(&self) -> &RocksDbContext {
        self.inner.storage().context()
    }

    /// The RocksDB database directory (`<bucket>/db`).
    pub fn db_path(&self) -> &Path {
        self.inner.storage().db_path()
    }

    /// What the compaction filter did across *every* compaction since open, including RocksDB's
    /// own background compactions (which also remove covered entries; `reclaim` reports only what
    /// happened during its call).
    pub fn filter_counters(&self) -> FilterCounterSnapshot {
        self.inner.storage().filter_counters().snapshot()
    }

    /// Flushes the memtables of both column families into table files (no compaction, so no
    /// filtering: RocksDB filters only in compactions).
    pub fn flush_memtables(&self) -> Result<()> {
        self.inner
            .write_storage("flush_memtables", RocksDbStorage::flush_memtables)
    }

    /// Flushes the memtables, then compacts the whole `data` column family down to the bottom
    /// level, so everything written so far sits as deep as it goes.
    ///
    /// The compaction filter runs as in any compaction, so entries covered by `W − D` go (that
    /// is always allowed) without being counted in any [`ReclaimReport`](tidemark_engine_api::ReclaimReport).
    /// Tests use it to place older versions of a key below newer ones (the conformance factory's
    /// `settle`). Serialised with reclaims, so its removals never land in a reclaim's counts.
    pub fn compact_to_bottom(&self) -> Result<()> {
        self.inner
            .with_reclaimer("compact_to_bottom", RocksDbStorage::compact_to_bottom)
    }

    /// Table files per level of the `data` column family (index = level).
    pub fn data_files_per_level(&self) -> Result<Vec<u64>> {
        self.inner.read_storage("data_files_per_level", |storage| {
            (0..7)
                .map(|level| storage.data_property(properties::num_files_at_level(level)))
                .collect()
        })
    }

    /// Live table-file bytes of the `data` column family.
    pub fn live_sst_bytes(&self) -> Result<u64> {
        self.inner
            .read_storage("live_sst_bytes", RocksDbStorage::live_sst_bytes)
    }
}

impl OpenEngine for RocksDbEngine {
    /// Opens from the process-wide default context ([`RocksDbContext::global`]).
    fn open(path: &Path, options: EngineOptions) -> Result<Self> {
        RocksDbEngine::open_in(&RocksDbContext::global()?, path, options)
    }
}

impl tidemark_engine_api::Engine for RocksDbEngine {
    forward_engine!(inner);
}
