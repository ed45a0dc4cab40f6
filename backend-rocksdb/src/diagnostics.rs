//! [`RocksDbDiagnostics`]: what only the RocksDB backend reports or does, called on its engine
//! so that each call into RocksDB runs with the skeleton's containment and locks.

use tidemark_disk::DiskEngine;
use tidemark_engine_api::Result;

use crate::storage::RocksDbStorage;

/// RocksDB's own figures and operations of a bucket (`use` the trait to call them on a
/// [`RocksDbEngine`](crate::RocksDbEngine)); paths, the context and the filter's counters are
/// on [`RocksDbStorage`].
pub trait RocksDbDiagnostics {
    /// Table files per level of the `data` column family (index = level).
    fn data_files_per_level(&self) -> Result<Vec<u64>>;

    /// Live table-file bytes of the `data` column family.
    fn live_sst_bytes(&self) -> Result<u64>;

    /// Flushes the memtables of both column families into table files (no compaction, so no
    /// filtering: RocksDB filters only in compactions).
    fn flush_memtables(&self) -> Result<()>;

    /// Flushes, then compacts the whole `data` column family down to the bottom level, so
    /// everything written so far sits as deep as it goes. The compaction filter runs as in any
    /// compaction, so entries covered by `W − D` go without being counted in any reclaim's
    /// report. Serialised with reclaims (tests use it to place older versions of a key below
    /// newer ones).
    fn compact_to_bottom(&self) -> Result<()>;
}

impl RocksDbDiagnostics for DiskEngine<RocksDbStorage> {
    fn data_files_per_level(&self) -> Result<Vec<u64>> {
        self.read_storage("data_files_per_level", RocksDbStorage::data_files_per_level)
    }

    fn live_sst_bytes(&self) -> Result<u64> {
        self.read_storage("live_sst_bytes", RocksDbStorage::live_sst_bytes)
    }

    fn flush_memtables(&self) -> Result<()> {
        self.write_storage("flush_memtables", RocksDbStorage::flush_memtables)
    }

    fn compact_to_bottom(&self) -> Result<()> {
        self.with_reclaimer("compact_to_bottom", RocksDbStorage::compact_to_bottom)
    }
}
