//! # Tidemark RocksDB backend
//!
//! [`RocksDbEngine`] stores one bucket in one RocksDB database and reclaims covered entries with a
//! general **tag-threshold compaction filter** ([`filter`]): an entry is removed when
//! `tag + distance <= supplier()`, the supplier being read once per compaction. The watermark is
//! one supplier and a wall-clock TTL another ([`suppliers`]). `reclaim()` flushes and compacts the
//! whole `data` column family down to the bottom level, so everything covered when it starts is
//! physically gone when it returns; `reclaim_below` does the same with a temporary purge threshold
//! that ignores the retention distance ([`suppliers::WatermarkThreshold::purge_below`]).
//!
//! The engine is the shared [`DiskEngine`](disk::DiskEngine) skeleton over
//! [`RocksDbStorage`], which supplies only RocksDB's primitives.
//!
//! Many buckets in one process share a [`RocksDbContext`]: one block cache, one memtable budget,
//! one rate limiter and bounded background thread pools.

mod compact;
pub mod context;
pub mod engine;
pub mod filter;
pub mod storage;
pub mod suppliers;
#[cfg(feature = "testing")]
pub mod testing;

pub use context::{
    ContextOptions, FIXED_FDS_PER_BUCKET, MEMORY_PER_BUCKET, MIN_OPEN_FILES, NON_TABLE_FILES,
    RETIRED_LOGS_PER_BUCKET, ROCKSDB_SERVICE_THREADS, ROLLOVER_FDS_PER_BUCKET, RocksDbContext,
};
pub use engine::RocksDbEngine;
pub use filter::{
    FilterCounterSnapshot, FilterCounters, TagThresholdFilter, TagThresholdFilterFactory,
    ThresholdSupplier,
};
pub use storage::RocksDbStorage;

/// Wraps a RocksDB error as [`engine_api::Error::Backend`].
pub(crate) fn rocks_err(e: rocksdb::Error) -> engine_api::Error {
    engine_api::Error::backend(engine::BACKEND, e)
}
