//! [`FjallDiagnostics`]: what only the fjall backend does, called on its engine so that each
//! call into fjall runs with the skeleton's containment and locks.

use tidemark_disk::DiskEngine;
use tidemark_engine_api::Result;

use crate::storage::FjallStorage;

/// fjall's own operations on a bucket (`use` the trait to call them on a
/// [`FjallEngine`](crate::FjallEngine)); paths, the keyspace name, the context and the filter's
/// counters are on [`FjallStorage`].
pub trait FjallDiagnostics {
    /// Flushes the memtables of both keyspaces into table files (no filtering: fjall filters
    /// only in compactions).
    fn flush_memtables(&self) -> Result<()>;

    /// Flushes, then compacts the whole `data` keyspace into its last level. The filter is not
    /// armed, so nothing is removed: this only places older versions below newer ones.
    /// Serialised with reclaims.
    fn compact_to_bottom(&self) -> Result<()>;
}

impl FjallDiagnostics for DiskEngine<FjallStorage> {
    fn flush_memtables(&self) -> Result<()> {
        self.write_storage("flush_memtables", FjallStorage::flush_memtables)
    }

    fn compact_to_bottom(&self) -> Result<()> {
        self.with_reclaimer("compact_to_bottom", FjallStorage::compact_to_bottom)
    }
}
