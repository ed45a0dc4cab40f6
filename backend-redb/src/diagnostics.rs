//! [`RedbDiagnostics`]: what only the redb backend reports, called on its engine so that the
//! call into redb runs with the skeleton's containment and locks.

use tidemark_disk::DiskEngine;
use tidemark_engine_api::Result;

use crate::ReleasingRedbStorage;
use crate::storage::{RedbDiskStats, RedbStorage};

/// redb's own figures of a bucket (`use` the trait to call them on a
/// [`RedbEngine`](crate::RedbEngine)); the file's path is on [`RedbStorage`].
pub trait RedbDiagnostics {
    /// redb's own storage figures, including fragmented bytes (free pages awaiting reuse).
    ///
    /// This walks every tree and briefly holds redb's write transaction (then aborts it), so it
    /// costs time proportional to the file; it is a diagnostic, which is why `Engine::stats`
    /// does not call it.
    fn disk_stats(&self) -> Result<RedbDiskStats>;
}

/// On the open file, reopening a released one.
impl RedbDiagnostics for DiskEngine<ReleasingRedbStorage> {
    fn disk_stats(&self) -> Result<RedbDiskStats> {
        self.write_storage("disk_stats", |s| s.inner()?.disk_stats())
    }
}

impl RedbDiagnostics for DiskEngine<RedbStorage> {
    fn disk_stats(&self) -> Result<RedbDiskStats> {
        self.write_storage("disk_stats", RedbStorage::disk_stats)
    }
}
