//! [`RedbDb`]: a bucket's database file, opened the way the engine's open mode asks.

use std::fmt;
use std::path::Path;

use redb::{Builder, Database, DatabaseError, ReadOnlyDatabase, ReadTransaction, ReadableDatabase};
use tidemark_disk::StorageInit;
use tidemark_disk::layout::FileStart;
use tidemark_engine_api::{Error, Result};

use crate::error::{BACKEND, RedbResultExt};

/// The database: writable, or opened with redb's read-only open, which never writes to the file;
/// or closed ([`RedbDb::close`]).
pub(crate) enum RedbDb {
    Writable(Database),
    ReadOnly(ReadOnlyDatabase),
    Closed,
}

impl fmt::Debug for RedbDb {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            RedbDb::Writable(_) => "RedbDb::Writable",
            RedbDb::ReadOnly(_) => "RedbDb::ReadOnly",
            RedbDb::Closed => "RedbDb::Closed",
        })
    }
}

impl RedbDb {
    /// Opens `file` in the bucket directory `init.dir`, as its open mode says: checked first
    /// ([`StorageInit::require_engine_file`]), then created when the mode creates and missing;
    /// [`OpenMode::ReadOnly`](tidemark_engine_api::OpenMode::ReadOnly) opens it read-only; its page cache
    /// holds up to `cache_bytes`.
    pub(crate) fn open(init: &StorageInit<'_>, file: &Path, cache_bytes: usize) -> Result<Self> {
        let mode = init.options.open_mode;
        // Before redb could create a new, empty database where a store lived.
        init.require_engine_file(file, "redb database file", FileStart::Header)?;
        let mut builder = Builder::new();
        builder.set_cache_size(cache_bytes);
        // redb keeps a checksum of every B-tree page but trusts a cleanly closed file; a damaged
        // branch page would silently hide entries (a lookup misses them). A writable open
        // verifies every page first (reading the whole file once), so such a file is refused
        // instead of served. A read-only open cannot run the check (it commits).
        builder.set_check_integrity_on_open(mode.writes());
        if mode.creates() {
            return Ok(RedbDb::Writable(builder.create(file).redb()?));
        }
        if mode.writes() {
            return Ok(RedbDb::Writable(builder.open(file).redb()?));
        }
        match builder.open_read_only(file) {
            Ok(db) => Ok(RedbDb::ReadOnly(db)),
            // redb repairs a file that was not closed cleanly, which writes: say what to do.
            Err(DatabaseError::RepairAborted) => Err(Error::backend(
                BACKEND,
                format!(
                    "{} was not closed cleanly and needs redb's repair, which a read-only open \
                     never runs; open it read-write once (e.g. `tidemark reclaim`) to repair it",
                    file.display()
                ),
            )),
            Err(e) => Err(crate::error::redb_error(e)),
        }
    }

    /// Begins a read transaction, in either mode.
    pub(crate) fn begin_read(&self) -> Result<ReadTransaction> {
        match self {
            RedbDb::Writable(db) => db.begin_read().redb(),
            RedbDb::ReadOnly(db) => db.begin_read().redb(),
            RedbDb::Closed => Err(Error::Closed),
        }
    }

    /// The writable database, or [`Error::ReadOnly`] for `operation` on the store at `file`.
    pub(crate) fn writable(&self, file: &Path, operation: &'static str) -> Result<&Database> {
        match self {
            RedbDb::Writable(db) => Ok(db),
            RedbDb::ReadOnly(_) => Err(Error::ReadOnly {
                path: file.to_path_buf(),
                operation,
            }),
            RedbDb::Closed => Err(Error::Closed),
        }
    }

    /// Closes the database (a writable one records its allocator state and a clean shutdown,
    /// which writes to the file); it is [`RedbDb::Closed`] afterwards, even when closing failed.
    pub(crate) fn close(&mut self) -> Result<()> {
        match std::mem::replace(self, RedbDb::Closed) {
            RedbDb::Writable(db) => db.close().redb(),
            RedbDb::ReadOnly(db) => db.close().redb(),
            RedbDb::Closed => Ok(()),
        }
    }
}
