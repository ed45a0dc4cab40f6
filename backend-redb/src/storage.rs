//! [`RedbStorage`]: the redb primitives behind the shared disk-engine skeleton.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use disk::budget::BucketLease;
use disk::contain::contained;
use disk::sweeper::{self, ChunkSizer, index_key};
use disk::{LiveEntries, MetaKey, ReclaimRequest, ReclaimWork, Storage};
use engine_api::batch::Record;
use engine_api::covered::MetaRow;
use engine_api::verify::Verifier;
use engine_api::{EngineOptions, Result};
use redb::{Database, Durability, ReadableTable, ReadableTableMetadata, WriteTransaction};

use crate::db::RedbDb;
use crate::engine::RedbDiskStats;
use crate::error::{BACKEND, RedbResultExt};
use crate::sweep::RedbChunker;
use crate::tables::{BY_OFFSET, DATA, META};

/// Records written by non-durable commits after which the next commit is made durable.
///
/// redb reuses a page freed by a commit only once a later commit is durable; until then every
/// non-durable commit's copy-on-write pages come from fresh space, and redb grows its file in
/// doubling steps, which it never gives back. Measured with a stream of 1.5 M records of 150
/// bytes, a trailing window of 300,000 records and a sweep every 10,000 (a scratch program on
/// the 2-core sandbox): a durable commit only after each sweep ended the file at 6.4× the
/// window; one every 1,000, 2,600 or 5,000 records, or after every commit, at 3.2× (redb's
/// doubling from the live pages sets that floor). 2,560 records is under 1 % of the commits at
/// the default batch of 20, so the fsync it adds stays out of the writers' p99.
pub(crate) const DURABLE_EVERY_RECORDS: u64 = 2_560;

/// One bucket's database file.
#[derive(Debug)]
pub struct RedbStorage {
    db: RedbDb,
    file: PathBuf,
    /// Records committed since the last durable commit (see [`DURABLE_EVERY_RECORDS`]).
    unsynced_records: AtomicU64,
    /// Set while a sweep runs: the sweep makes the writers' commits durable when they are due
    /// (between two chunks, its file written back first outside redb's lock), so that a
    /// writer's apply does not fsync the sweep's pages.
    sweeping: AtomicBool,
    /// How each sweep sizes its chunks (`sweep_chunk_rows`, `sweep_chunk_time`).
    chunks: ChunkSizer,
    /// Makes the close at drop panic, to test that the panic stays inside.
    #[cfg(test)]
    panic_on_close: std::sync::atomic::AtomicBool,
    /// This bucket's share of its context's budget, given back after the file is closed.
    _lease: BucketLease,
}

impl Drop for RedbStorage {
    /// Closes the database here rather than in redb's own drop: closing writes to the file (the
    /// allocator state, a clean-shutdown header), which on a damaged file may panic, and a panic
    /// must not escape a drop. A failed close is logged; the next open recovers the file.
    fn drop(&mut self) {
        let closed = contained(BACKEND, "closing the database", || {
            #[cfg(test)]
            self.panic_if_armed();
            self.db.close()
        });
        if let Err(e) = closed {
            tracing::warn!(file = %self.file.display(), error = %e,
                "closing the redb database failed; its next open recovers it");
        }
    }
}

impl RedbStorage {
    /// Wraps an open database, creating its tables when missing (in one write transaction) when
    /// it is writable. A read-only database is left as it is: a file this engine created always
    /// holds the three tables.
    pub(crate) fn new(
        db: RedbDb,
        file: PathBuf,
        options: &EngineOptions,
        lease: BucketLease,
    ) -> Result<Self> {
        if let RedbDb::Writable(db) = &db {
            let txn = db.begin_write().redb()?;
            // Opening the tables in a write transaction creates them on a fresh file.
            txn.open_table(DATA).redb()?;
            txn.open_table(BY_OFFSET).redb()?;
            txn.open_table(META).redb()?;
            txn.commit().redb()?;
        }
        Ok(RedbStorage {
            db,
            file,
            unsynced_records: AtomicU64::new(0),
            sweeping: AtomicBool::new(false),
            chunks: ChunkSizer::for_options(options, usize::MAX),
            #[cfg(test)]
            panic_on_close: std::sync::atomic::AtomicBool::new(false),
            _lease: lease,
        })
    }

    /// Makes the close at drop panic (inside its containment), as redb may on a damaged file.
    #[cfg(test)]
    pub(crate) fn panic_on_close(&self) {
        self.panic_on_close
            .store(true, std::sync::atomic::Ordering::Release);
    }

    #[cfg(test)]
    fn panic_if_armed(&self) {
        #[allow(clippy::panic, reason = "the injected fault is a panic")]
        if self
            .panic_on_close
            .load(std::sync::atomic::Ordering::Acquire)
        {
            panic!("injected panic while closing");
        }
    }

    /// Records committed since the last durable commit.
    #[cfg(test)]
    pub(crate) fn unsynced_records(&self) -> u64 {
        self.unsynced_records.load(Ordering::Relaxed)
    }

    pub(crate) fn file(&self) -> &Path {
        &self.file
    }

    fn file_bytes(&self) -> Result<u64> {
        Ok(std::fs::metadata(&self.file)?.len())
    }

    /// An empty durable commit: makes earlier non-durable commits durable and lets redb reuse
    /// the pages they freed.
    fn durable_barrier(&self) -> Result<()> {
        let mut txn = self.writable("flush")?.begin_write().redb()?;
        txn.set_durability(Durability::Immediate).redb()?;
        txn.commit().redb()?;
        self.unsynced_records.store(0, Ordering::Relaxed);
        Ok(())
    }

    /// During a sweep: the durable commit the writers' records are due (see
    /// [`DURABLE_EVERY_RECORDS`]), its pages written back first without redb's lock, so the
    /// commit holds writers for a short fsync only.
    fn durable_if_due(&self) -> Result<()> {
        if self.unsynced_records.load(Ordering::Relaxed) < DURABLE_EVERY_RECORDS {
            return Ok(());
        }
        // Promises nothing: the durable commit syncs anyway and reports its own failure.
        let _ = self.prepare_durable();
        self.durable_barrier()
    }

    /// The writable database, or [`engine_api::Error::ReadOnly`] for `operation`.
    fn writable(&self, operation: &'static str) -> Result<&Database> {
        self.db.writable(&self.file, operation)
    }

    pub(crate) fn disk_stats(&self) -> Result<RedbDiskStats> {
        let txn = self.writable("disk_stats")?.begin_write().redb()?;
        let stats = txn.stats().redb()?;
        txn.abort().redb()?;
        Ok(RedbDiskStats {
            file_bytes: self.file_bytes()?,
            stored_bytes: stats.stored_bytes(),
            metadata_bytes: stats.metadata_bytes(),
            fragmented_bytes: stats.fragmented_bytes(),
            allocated_pages: stats.allocated_pages(),
            page_size: stats.page_size() as u64,
        })
    }
}

fn put_meta(txn: &WriteTransaction, key: MetaKey, value: u64) -> Result<()> {
    let mut meta = txn.open_table(META).redb()?;
    meta.insert(key.name(), disk::meta::encode_u64(value).as_slice())
        .redb()?;
    Ok(())
}

fn put_rows(txn: &WriteTransaction, rows: &[MetaRow]) -> Result<()> {
    let mut meta = txn.open_table(META).redb()?;
    for row in rows {
        match &row.value {
            Some(value) => {
                meta.insert(row.name.as_str(), value.as_slice()).redb()?;
            }
            None => {
                meta.remove(row.name.as_str()).redb()?;
            }
        }
    }
    Ok(())
}

fn durability(sync: bool) -> Durability {
    if sync {
        Durability::Immediate
    } else {
        Durability::None
    }
}

impl Storage for RedbStorage {
    const BACKEND: &'static str = BACKEND;
    /// A sweep visits only the covered index rows.
    const RECLAIM_COST: engine_api::ReclaimCost = engine_api::ReclaimCost::Proportional;

    fn read_meta(&self, key: MetaKey) -> Result<Option<Vec<u8>>> {
        let txn = self.db.begin_read()?;
        let meta = txn.open_table(META).redb()?;
        Ok(meta.get(key.name()).redb()?.map(|v| v.value().to_vec()))
    }

    fn persist_meta(&self, key: MetaKey, value: u64) -> Result<()> {
        // Durability::Immediate is redb's default.
        let txn = self.writable("persist_meta")?.begin_write().redb()?;
        put_meta(&txn, key, value)?;
        txn.commit().redb()
    }

    fn holds_data(&self) -> Result<bool> {
        let txn = self.db.begin_read()?;
        let data = txn.open_table(DATA).redb()?;
        let index = txn.open_table(BY_OFFSET).redb()?;
        Ok(!data.is_empty().redb()? || !index.is_empty().redb()?)
    }

    fn read_meta_rows(&self, prefix: &str) -> Result<Vec<(String, Vec<u8>)>> {
        let txn = self.db.begin_read()?;
        let meta = txn.open_table(META).redb()?;
        let mut rows = Vec::new();
        for row in meta.range(prefix..).redb()? {
            let (name, value) = row.redb()?;
            if !name.value().starts_with(prefix) {
                break;
            }
            rows.push((name.value().to_owned(), value.value().to_vec()));
        }
        Ok(rows)
    }

    fn write_meta_rows(&self, rows: &[MetaRow]) -> Result<()> {
        if rows.is_empty() {
            return Ok(());
        }
        let mut txn = self.writable("write metadata rows")?.begin_write().redb()?;
        txn.set_durability(Durability::None).redb()?;
        put_rows(&txn, rows)?;
        txn.commit().redb()
    }

    fn commit(
        &self,
        writes: &[&Record],
        applied_end: u64,
        rows: &[MetaRow],
        sync: bool,
    ) -> Result<()> {
        // Commits run under the engine's writer lock; a sweep's durable commit between this
        // load and the store below only makes the next durable commit come early.
        let unsynced = self.unsynced_records.load(Ordering::Relaxed) + writes.len() as u64;
        let durable =
            sync || (unsynced >= DURABLE_EVERY_RECORDS && !self.sweeping.load(Ordering::Acquire));
        let mut txn = self.writable("apply")?.begin_write().redb()?;
        txn.set_durability(durability(durable)).redb()?;
        {
            let mut data = txn.open_table(DATA).redb()?;
            let mut index = txn.open_table(BY_OFFSET).redb()?;
            for record in writes {
                let key = record.key();
                data.insert(key, record.encoded_value().as_slice()).redb()?;
                index
                    .insert(index_key(record.offset(), key).as_slice(), ())
                    .redb()?;
            }
        }
        // Same transaction as the rows: a crash can never separate them.
        put_meta(&txn, MetaKey::AppliedEnd, applied_end)?;
        put_rows(&txn, rows)?;
        txn.commit().redb()?;
        let unsynced = if durable { 0 } else { unsynced };
        self.unsynced_records.store(unsynced, Ordering::Relaxed);
        Ok(())
    }

    /// Always inline: redb reads pages through its page cache; a point read is a few page reads of one B-tree path, from the cache when the bucket is warm, so it never blocks for long.
    fn get_inline<T>(
        &self,
        key: &[u8],
        read: impl FnOnce(Option<&[u8]>) -> Result<T>,
    ) -> Result<Option<T>> {
        self.get(key, read).map(Some)
    }

    fn get<T>(&self, key: &[u8], read: impl FnOnce(Option<&[u8]>) -> Result<T>) -> Result<T> {
        let txn = self.db.begin_read()?;
        let data = txn.open_table(DATA).redb()?;
        let stored = data.get(key).redb()?;
        read(stored.as_ref().map(|guard| guard.value()))
    }

    fn reclaim(&self, request: ReclaimRequest<'_>) -> Result<ReclaimWork> {
        let bytes_before = self.file_bytes()?;
        let before_chunk = || self.durable_if_due();
        let chunker = RedbChunker {
            db: self.writable("reclaim")?,
            before_chunk: &before_chunk,
        };
        self.sweeping.store(true, Ordering::Release);
        let swept = sweeper::sweep(
            &chunker,
            request.threshold,
            self.chunks,
            request.turns,
            request.faults,
        );
        self.sweeping.store(false, Ordering::Release);
        let totals = swept?;
        if totals.chunks > 0 {
            // One durable commit for the whole sweep, which also releases the freed pages for
            // reuse; its pages written back first, so writers wait for a short fsync only.
            // Promises nothing: the commit syncs anyway and reports its own failure.
            let _ = self.prepare_durable();
            self.durable_barrier()?;
        }
        Ok(ReclaimWork {
            values_removed: totals.values_removed,
            tombstones_removed: totals.tombstones_removed,
            corrupt_kept: totals.corrupt_kept,
            bytes_before,
            bytes_after: self.file_bytes()?,
            bytes_rewritten: None,
            sweep: Some(totals),
        })
    }

    fn bytes_on_disk(&self) -> Result<u64> {
        self.file_bytes()
    }

    fn live_entries(&self) -> Result<LiveEntries> {
        let txn = self.db.begin_read()?;
        let data = txn.open_table(DATA).redb()?;
        Ok(LiveEntries {
            count: data.len().redb()?,
            exact: true,
        })
    }

    fn flush(&self) -> Result<()> {
        // Always cheap enough, and it also covers the sweeper's and `insert_raw`'s commits.
        self.durable_barrier()
    }

    /// Syncs the file through a descriptor of its own, outside redb's write lock: the pages
    /// written since the last durable commit reach the disk while writers go on, so the durable
    /// commit that follows (which holds that lock through its own fsync) is short.
    fn prepare_durable(&self) -> Result<()> {
        Ok(std::fs::File::open(&self.file)?.sync_data()?)
    }

    /// Both tables in one read transaction: every data row decodes below the applied end and
    /// has its index row, every index row names a data row. redb verifies its page checksums
    /// only in its repair path (`Database::check_integrity`, which writes), so no engine check
    /// runs here.
    fn verify(&self, verifier: &mut Verifier) -> Result<()> {
        let txn = self.db.begin_read()?;
        let data = txn.open_table(DATA).redb()?;
        let index = txn.open_table(BY_OFFSET).redb()?;
        for row in data.iter().redb()? {
            let (key, stored) = row.redb()?;
            verifier.indexed_data_row(key.value(), stored.value(), |row| {
                index.get(row).map(|found| found.is_some()).redb()
            })?;
        }
        let rows = index
            .iter()
            .redb()?
            .map(|row| row.map(|(k, _)| k.value().to_vec()).redb());
        verifier.index_rows(rows, |key| {
            data.get(key)
                .map(|found| found.map(|g| g.value().to_vec()))
                .redb()
        })
    }
}

#[cfg(feature = "testing")]
impl disk::testing::StorageHooks for RedbStorage {
    /// Stores the bytes verbatim and indexes them like any write: at their tag when they
    /// decode, at offset 0 (below every non-zero threshold) when they do not.
    fn insert_raw(&self, key: &[u8], stored: &[u8]) -> Result<()> {
        let tag = engine_api::codec::checked_tag(key, stored).unwrap_or(0);
        let txn = self.writable("insert_raw")?.begin_write().redb()?;
        {
            let mut data = txn.open_table(DATA).redb()?;
            data.insert(key, stored).redb()?;
            let mut index = txn.open_table(BY_OFFSET).redb()?;
            index.insert(index_key(tag, key).as_slice(), ()).redb()?;
        }
        txn.commit().redb()
    }

    fn insert_index_row(&self, row: &[u8]) -> Result<()> {
        let txn = self.writable("insert_index_row")?.begin_write().redb()?;
        txn.open_table(BY_OFFSET).redb()?.insert(row, ()).redb()?;
        txn.commit().redb()
    }

    fn remove_index_row(&self, row: &[u8]) -> Result<bool> {
        let txn = self.writable("remove_index_row")?.begin_write().redb()?;
        let removed = txn
            .open_table(BY_OFFSET)
            .redb()?
            .remove(row)
            .redb()?
            .is_some();
        txn.commit().redb()?;
        Ok(removed)
    }
}
