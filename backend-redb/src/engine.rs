//! [`RedbEngine`]: the shared disk-engine skeleton over one redb database file per bucket.

use std::path::{Path, PathBuf};
use tidemark_disk::BackendContext;

use tidemark_disk::{DiskEngine, StorageInit};
use tidemark_engine_api::{EngineOptions, OpenEngine, Result, forward_engine};

use crate::context::RedbContext;
use crate::db::RedbDb;
use crate::storage::RedbStorage;

/// Name of the database file inside the bucket directory.
pub const DB_FILE: &str = "bucket.redb";

/// Storage figures that only redb can report; see [`RedbEngine::disk_stats`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RedbDiskStats {
    /// Size of the database file.
    pub file_bytes: u64,
    /// Bytes of keys and values stored in leaf pages.
    pub stored_bytes: u64,
    /// Bytes of branch pages and redb's own metadata tables.
    pub metadata_bytes: u64,
    /// Bytes lost to fragmentation plus free pages waiting for reuse.
    pub fragmented_bytes: u64,
    /// Pages currently allocated.
    pub allocated_pages: u64,
    /// redb's page size.
    pub page_size: u64,
}

/// A bucket stored in one redb file (`<dir>/bucket.redb`) with tables `data`, `by_offset` and
/// `meta`.
///
/// * `apply` writes the batch's data rows, their index rows and the new applied end in one write
///   transaction, committed with `Durability::Immediate` when `sync_writes` is true and
///   `Durability::None` otherwise (a non-durable commit may be lost on a crash, but it is never
///   torn: redb commits are atomic).
/// * `advance_watermark` / `adopt_lake_watermark` always commit durably before returning.
/// * `options.open_mode` decides whether the file is created (`Database::create`), must exist
///   (`Database::open`), or is opened with redb's read-only open (`ReadOnlyDatabase`), which
///   never writes to it.
/// * `reclaim` runs the shared sweeper with one write transaction per chunk of
///   `sweep_chunk_rows` index rows, so writers wait for at most one chunk, and ends with one
///   durable commit; then, when the file is mostly garbage and its live pages are few, with a
///   `Database::compact` that gives the space back (see the crate README).
#[derive(Debug)]
pub struct RedbEngine {
    inner: DiskEngine<RedbStorage>,
}

impl RedbEngine {
    /// The shared skeleton under the engine (see `DiskBackend::skeleton`).
    pub(crate) fn skeleton(&self) -> &DiskEngine<RedbStorage> {
        &self.inner
    }

    /// Path of the database file.
    pub fn file_path(&self) -> &Path {
        self.inner.storage().file()
    }

    /// redb's own storage figures, including fragmented bytes (free pages awaiting reuse).
    ///
    /// This walks every tree and briefly holds the write lock, so it costs time proportional to
    /// the file; it is a diagnostic, which is why `Engine::stats` does not call it.
    pub fn disk_stats(&self) -> Result<RedbDiskStats> {
        // It takes redb's write transaction (then aborts it): run as a write.
        self.inner
            .write_storage("disk_stats", RedbStorage::disk_stats)
    }
}

impl RedbEngine {
    /// Opens (by default creating) the bucket at `path`, taking its share of `context`: a page
    /// cache of [`RedbContext::cache_bytes_per_bucket`] and a place in its bucket budget (an open
    /// beyond it, or beyond the process's descriptor limit, is
    /// [`tidemark_engine_api::Error::ResourceLimit`] and creates nothing). The share is given back when
    /// the engine is dropped.
    pub fn open_in(context: &RedbContext, path: &Path, options: EngineOptions) -> Result<Self> {
        let lease = context.admit(path)?;
        let cache = usize::try_from(context.cache_bytes_per_bucket()).unwrap_or(usize::MAX);
        let inner = DiskEngine::open(path, options, |init: StorageInit<'_>| {
            let file: PathBuf = init.dir.join(DB_FILE);
            let db = RedbDb::open(&init, &file, cache)?;
            RedbStorage::new(db, file, init.options, lease)
        })?;
        Ok(RedbEngine { inner })
    }
}

impl OpenEngine for RedbEngine {
    /// Opens from the process-wide default context ([`RedbContext::global`]).
    fn open(path: &Path, options: EngineOptions) -> Result<Self> {
        Self::open_in(&RedbContext::global()?, path, options)
    }
}

impl tidemark_engine_api::Engine for RedbEngine {
    forward_engine!(inner);
}

#[cfg(test)]
mod tests {
    use tidemark_engine_api::Engine;

    use super::*;

    /// Unsynced writes become durable every `DURABLE_EVERY_RECORDS` records, so the pages
    /// their commits freed become reusable; synced writes leave nothing pending.
    #[test]
    fn unsynced_writes_commit_durably_every_so_many_records() {
        use crate::storage::DURABLE_EVERY_RECORDS;
        let dir = tempfile::tempdir().unwrap();
        let open = |name: &str, sync: bool| {
            let options = EngineOptions::default().with_sync_writes(sync);
            RedbEngine::open(&dir.path().join(name), options).unwrap()
        };
        let engine = open("unsynced", false);
        let batch = 100u64;
        let mut offset = 0u64;
        let mut pending = Vec::new();
        while offset < 3 * DURABLE_EVERY_RECORDS {
            let mut writes = tidemark_engine_api::WriteBatch::new();
            for _ in 0..batch {
                writes.put(offset.to_be_bytes().to_vec(), b"value".to_vec(), offset);
                offset += 1;
            }
            engine.apply(&writes).unwrap();
            let unsynced = engine.inner.storage().unsynced_records();
            assert!(
                unsynced < DURABLE_EVERY_RECORDS,
                "{unsynced} records never made durable"
            );
            pending.push(unsynced);
        }
        // The count went back to zero at least twice: durable commits happened in between.
        assert!(
            pending.iter().filter(|&&n| n == 0).count() >= 2,
            "{pending:?}"
        );
        let synced = open("synced", true);
        synced.put(b"k", b"v", 0).unwrap();
        assert_eq!(synced.inner.storage().unsynced_records(), 0);
    }

    /// redb writes when it closes its file; a panic there (as on a damaged file) is contained
    /// in the drop, and the store opens again afterwards.
    #[test]
    fn a_panic_while_closing_stays_inside_the_drop() {
        let dir = tempfile::tempdir().unwrap();
        let engine = RedbEngine::open(dir.path(), EngineOptions::default()).unwrap();
        engine.put(b"k", b"v", 0).unwrap();
        engine.inner.storage().panic_on_close();
        let dropped = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| drop(engine)));
        assert!(dropped.is_ok(), "the panic escaped the drop");
        let engine = RedbEngine::open(dir.path(), EngineOptions::default()).unwrap();
        assert_eq!(engine.applied_end(), 1);
        assert_eq!(
            engine.lookup(b"k").unwrap(),
            tidemark_engine_api::LocalLookup::Value {
                offset: 0,
                bytes: b"v".to_vec()
            }
        );
    }
}
