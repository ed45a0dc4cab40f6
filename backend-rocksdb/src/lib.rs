//! # Tidemark RocksDB backend
//!
//! [`RocksDbEngine`] stores one bucket under a key prefix of the RocksDB instance its directory's
//! siblings share, and reclaims covered entries with a
//! general **tag-threshold compaction filter** ([`TagThresholdFilter`]): an entry is removed when
//! `tag + distance <= supplier()`, the supplier being read once per compaction. The watermark is
//! one supplier and a wall-clock TTL another ([`watermark_supplier`], [`ttl_filter_factory`]); in a
//! shared instance each key's filter is its bucket's, found by the key's prefix. `reclaim()`
//! flushes and compacts the bucket's key range of the `data` column family down to the bottom
//! level, so everything covered when it starts is
//! physically gone when it returns; `reclaim_below` does the same with a temporary purge threshold
//! that ignores the retention distance ([`WatermarkThreshold::purge_below`]).
//!
//! The engine is the shared [`DiskEngine`] skeleton over the RocksDB storage
//! ([`RocksDbStorage`]), which supplies only RocksDB's primitives and diagnostics.
//!
//! Many buckets in one process share a [`RocksDbContext`]: one block cache, one memtable budget,
//! one rate limiter and bounded background thread pools; sibling bucket directories share one
//! instance under `<parent>/.tidemark-rocksdb` (one log, one table cache, one set of memtables).

mod compact;
mod compaction_filter;
mod context;
#[cfg(feature = "testing")]
mod declared;
mod diagnostics;
mod error;
mod instance;
mod storage;
mod suppliers;
#[cfg(feature = "testing")]
pub mod testing;

pub use compaction_filter::{TagThresholdFilter, TagThresholdFilterFactory};
pub use context::{
    FIXED_FDS_PER_INSTANCE, MEMORY_PER_BUCKET, MEMORY_PER_INSTANCE, MIN_OPEN_FILES,
    NON_TABLE_FILES, RETIRED_LOGS_PER_INSTANCE, ROCKSDB_SERVICE_THREADS, ROLLOVER_FDS_PER_INSTANCE,
    RocksDbContext, RocksDbContextOptions,
};
#[cfg(feature = "testing")]
pub use declared::ROCKSDB_WINDOW_MULTIPLE;
pub use diagnostics::RocksDbDiagnostics;
pub use instance::{BucketPrefix, DATA_CF, INSTANCE_PREFIX, META_CF, PREFIX_LEN, SHARED_DIR};
pub use storage::{BUCKET_RECORD, RocksDbStorage};

/// A Tidemark engine on RocksDB: the shared disk-engine skeleton over [`RocksDbStorage`] (one
/// key prefix of the instance shared by the bucket directory's siblings,
/// `<parent>/.tidemark-rocksdb`); reclaims with the watermark compaction filter.
/// Its plain figures are the storage's ([`DiskEngine::storage`]: paths, the filter's counters);
/// what calls into RocksDB is [`RocksDbDiagnostics`].
///
/// `reclaim()` flushes, then compacts the bucket's key range of `data` down to the bottom level,
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
/// assert_eq!(engine.storage().filter_counters().snapshot().removed_values, 1);
/// # Ok::<(), tidemark_engine_api::Error>(())
/// ```
pub type RocksDbEngine = DiskEngine<RocksDbStorage>;
pub use suppliers::{
    PurgeGuard, WatermarkThreshold, now_ms, ttl_filter_factory, wall_clock_ms_supplier,
    watermark_filter_factory, watermark_supplier, watermark_threshold_filter_factory,
};
/// The shared tag-threshold decision's counters and supplier type (from the disk toolkit, so
/// every LSM backend counts and reads its limit the same way).
pub use tidemark_disk::compaction_policy::{
    FilterCounterSnapshot, FilterCounters, ThresholdSupplier,
};
/// The toolkit's context trait (import it to call `new`, `global`, `for_buckets`, `settings`,
/// `bounds`) and the engine every backend's is.
pub use tidemark_disk::{BackendContext, DiskEngine};

pub(crate) use error::rocks_err;
