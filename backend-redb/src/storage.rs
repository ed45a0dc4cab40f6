//! [`RedbStorage`]: the redb primitives behind the shared disk-engine skeleton.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{RwLock, RwLockReadGuard, TryLockError};

use redb::{Durability, ReadableTable, ReadableTableMetadata, WriteTransaction};
use tidemark_disk::budget::BucketLease;
use tidemark_disk::contain::{catch_panic, contained};
use tidemark_disk::offset_index::{VerifyIndex, index_key};
use tidemark_disk::sweeper::{self, ChunkSizer};
use tidemark_disk::{
    CommitRequest, LiveEntries, MetaKey, ReadStored, ReclaimRequest, ReclaimWork, Storage,
    StorageInit,
};
use tidemark_engine_api::Verifier;
use tidemark_engine_api::covered::MetaRow;
use tidemark_engine_api::{EngineOptions, ReclaimCost, Result, sync};

use crate::context::RedbContext;
use crate::db::RedbDb;
use crate::error::{BACKEND, RedbResultExt, redb_error};
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

/// A file at most this large is never compacted: the slack the space target allows above twice
/// the empty store (an empty bucket's file is 53 KiB, about 100 KiB once written).
pub(crate) const COMPACT_ABOVE_BYTES: u64 = 1 << 20;

/// A file at least this many times the pages its tables hold is mostly garbage, and compacted
/// (when [`MAX_COMPACT_LIVE_BYTES`] allows). redb grows its file in doubling steps and reuses
/// freed pages, so a file with a steady window stays within about twice its live pages (three
/// times after a burst of non-durable commits): 4 leaves such a bucket alone, and a bucket whose
/// live data shrank to a quarter of its file gives the rest back.
pub(crate) const GARBAGE_FACTOR: u64 = 4;

/// Compaction holds every reader and writer off while it moves the live pages (redb's
/// `Database::compact` needs the database to itself), for about the time it takes to copy them:
/// measured in the dev profile on the 2-core sandbox, 80 ms for a drained 55 MB file, 444 ms
/// for one holding 29 MB of live pages. It runs only when the live pages are at most this
/// large, which bounds the stall near 150 ms; a bucket with more live data keeps its file until
/// it holds less.
pub(crate) const MAX_COMPACT_LIVE_BYTES: u64 = 8 << 20;

/// Bytes of live pages per stored entry assumed until a measurement says otherwise (a 150-byte
/// entry in both tables takes about 200): low enough that a mostly-garbage file is measured,
/// high enough that a full one is not.
const ASSUMED_ENTRY_BYTES: u64 = 512;

/// One bucket's database file.
#[derive(Debug)]
pub struct RedbStorage {
    /// Every transaction runs under a read lock of it; a compaction takes it for writing, so it
    /// starts with no transaction live, as `Database::compact` requires.
    db: RwLock<RedbDb>,
    file: PathBuf,
    /// Records committed since the last durable commit (see [`DURABLE_EVERY_RECORDS`]).
    unsynced_records: AtomicU64,
    /// Set while a sweep runs: the sweep makes the writers' commits durable when they are due
    /// (between two chunks, its file written back first outside redb's lock), so that a
    /// writer's apply does not fsync the sweep's pages.
    sweeping: AtomicBool,
    /// How each sweep sizes its chunks (`sweep_chunk_rows`, `sweep_chunk_time`).
    chunks: ChunkSizer,
    /// Live-page bytes per stored entry, as last measured (see [`ASSUMED_ENTRY_BYTES`]): the
    /// cheap estimate that decides whether measuring the tables is worth it.
    entry_bytes: AtomicU64,
    /// Compactions since open that gave space back ([`Storage::space_rebuilds`]).
    compactions: AtomicU64,
    /// Live-page bytes right after the last compaction, raised to the most estimated since
    /// (`u64::MAX` before the first): the next one needs the live data to have halved from it,
    /// so a steady window, whose file redb's churn fills again, is compacted at most once, and a
    /// bucket that refilled and drained again is compacted again.
    live_after_compaction: AtomicU64,
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
            // Read through poisoning (a panic in a compaction): redb's commits are atomic, so
            // the file is whole, and closing it is what redb's own drop would do anyway.
            self.db
                .get_mut()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .close()
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
            db: RwLock::new(db),
            file,
            unsynced_records: AtomicU64::new(0),
            sweeping: AtomicBool::new(false),
            chunks: ChunkSizer::for_options(options, usize::MAX),
            entry_bytes: AtomicU64::new(ASSUMED_ENTRY_BYTES),
            compactions: AtomicU64::new(0),
            live_after_compaction: AtomicU64::new(u64::MAX),
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

    /// Path of the database file (`<bucket>/bucket.redb`).
    pub fn file(&self) -> &Path {
        &self.file
    }

    fn file_bytes(&self) -> Result<u64> {
        Ok(std::fs::metadata(&self.file)?.len())
    }

    /// An empty durable commit: makes earlier non-durable commits durable and lets redb reuse
    /// the pages they freed.
    fn durable_barrier(&self) -> Result<()> {
        let db = self.db()?;
        let mut txn = db.writable(&self.file, "flush")?.begin_write().redb()?;
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

    /// The database, read-locked: every transaction lives inside such a guard (declared before
    /// it, so dropped after it), which keeps a compaction from starting under it.
    pub(crate) fn db(&self) -> Result<RwLockReadGuard<'_, RedbDb>> {
        sync::read(&self.db, "redb database")
    }

    /// Compacts the file when it is mostly garbage and the live pages are few enough to move
    /// quickly (see [`GARBAGE_FACTOR`], [`MAX_COMPACT_LIVE_BYTES`]); whether it did. Called at
    /// the end of a reclaim, under the engine's reclaimer lock.
    ///
    /// Deciding costs a file size and an entry count (both O(1)) on every call; the tables are
    /// walked (time proportional to their pages, at most [`MAX_COMPACT_LIVE_BYTES`] of them)
    /// only when that estimate says a compaction is due, and the walk corrects the estimate, so
    /// a bucket whose file is not mostly garbage is not walked again and again.
    fn compact_if_garbage(&self) -> Result<bool> {
        let file = self.file_bytes()?;
        if file <= COMPACT_ABOVE_BYTES {
            return Ok(false);
        }
        let entries = self.live_entries()?.count;
        let estimate = self.note_live_estimate(entries);
        if !self.worth_compacting(file, estimate) {
            return Ok(false);
        }
        let live = self.live_page_bytes()?;
        if let Some(per_entry) = live.checked_div(entries) {
            self.entry_bytes.store(per_entry.max(1), Ordering::Relaxed);
        }
        if !self.worth_compacting(file, live) {
            return Ok(false);
        }
        if !self.compact()? {
            return Ok(false);
        }
        self.live_after_compaction
            .store(self.live_page_bytes()?, Ordering::Relaxed);
        tracing::debug!(file = %self.file.display(), before = file, live,
            after = self.file_bytes().unwrap_or(0), "compacted the redb file");
        Ok(true)
    }

    /// The live-page bytes `entries` stored entries take by the last measurement (O(1)), also
    /// raising the most seen since the last compaction to it: a bucket that refilled since may
    /// be drained again, and the halving rule counts from the most it held.
    fn note_live_estimate(&self, entries: u64) -> u64 {
        let estimate = entries.saturating_mul(self.entry_bytes.load(Ordering::Relaxed));
        self.live_after_compaction
            .fetch_max(estimate, Ordering::Relaxed);
        estimate
    }

    /// Whether a file of `file` bytes whose tables need `live` bytes is worth compacting: mostly
    /// garbage, quick to compact, and the live data has halved since the last compaction.
    fn worth_compacting(&self, file: u64, live: u64) -> bool {
        live <= MAX_COMPACT_LIVE_BYTES
            && file >= GARBAGE_FACTOR.saturating_mul(live)
            && live <= self.live_after_compaction.load(Ordering::Relaxed) / 2
    }

    /// Bytes of the pages the three tables hold (leaves and branches), walked in one read
    /// transaction; redb's own system tables (a few pages) are not counted.
    fn live_page_bytes(&self) -> Result<u64> {
        let db = self.db()?;
        let txn = db.begin_read()?;
        let data = txn.open_table(DATA).redb()?.stats().redb()?;
        let index = txn.open_table(BY_OFFSET).redb()?.stats().redb()?;
        let meta = txn.open_table(META).redb()?.stats().redb()?;
        // What the pages hold plus the slack inside them: the bytes of the pages themselves,
        // however large (a big value's leaf spans several).
        Ok([data, index, meta]
            .iter()
            .map(|s| s.stored_bytes() + s.metadata_bytes() + s.fragmented_bytes())
            .fold(0u64, u64::saturating_add))
    }

    /// `Database::compact`, with the database to itself: the write lock waits for the
    /// transactions in progress to end and holds new ones off until the compaction is done.
    /// redb compacts in a series of ordinary commits (two-phase, each durable), so a crash
    /// anywhere in it leaves the file at its last commit, with every row in place.
    ///
    /// A storage error is returned (redb latches a failed durable commit: every later
    /// transaction fails until a reopen, which the caller must hear of); a refusal (a
    /// transaction or savepoint still alive) is not an error, and the next reclaim tries again.
    fn compact(&self) -> Result<bool> {
        let mut db = sync::write(&self.db, "redb database")?;
        let RedbDb::Writable(db) = &mut *db else {
            return Ok(false);
        };
        // Contained here, under the guard: a panic unwinding through it would poison the lock
        // every transaction takes, and the lookups of a store whose commits are atomic must go
        // on working.
        match catch_panic(BACKEND, "compacting the database", || db.compact())? {
            Ok(true) => {
                self.compactions.fetch_add(1, Ordering::Relaxed);
                Ok(true)
            }
            Ok(false) => Ok(false),
            Err(redb::CompactionError::Storage(e)) => Err(redb_error(e)),
            Err(refused) => {
                tracing::debug!(file = %self.file.display(), reason = %refused,
                    "redb refused to compact; the next reclaim tries again");
                Ok(false)
            }
        }
    }

    /// redb's own storage figures, including fragmented bytes (free pages awaiting reuse).
    ///
    /// This walks every tree and briefly holds the write lock, so it costs time proportional to
    /// the file; it is a diagnostic, which is why `Engine::stats` does not call it. It takes
    /// redb's write transaction (then aborts it): call it through
    /// [`DiskEngine::write_storage`](tidemark_disk::DiskEngine::write_storage).
    pub(crate) fn disk_stats(&self) -> Result<RedbDiskStats> {
        let db = self.db()?;
        let txn = db
            .writable(&self.file, "disk_stats")?
            .begin_write()
            .redb()?;
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
    meta.insert(
        key.name(),
        tidemark_disk::meta::encode_u64(value).as_slice(),
    )
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

/// Name of the database file inside the bucket directory.
pub const DB_FILE: &str = "bucket.redb";

/// Storage figures that only redb can report; see [`RedbDiagnostics::disk_stats`](crate::RedbDiagnostics::disk_stats).
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

impl Storage for RedbStorage {
    const BACKEND: &'static str = BACKEND;
    /// A sweep visits only the covered index rows.
    const RECLAIM_COST: ReclaimCost = ReclaimCost::Proportional;
    type Context = RedbContext;

    /// Opens (by default creating) `<bucket>/bucket.redb` with a page cache of
    /// [`RedbContext::cache_bytes_per_bucket`].
    fn open(context: &RedbContext, init: StorageInit<'_>, lease: BucketLease) -> Result<Self> {
        let cache = usize::try_from(context.cache_bytes_per_bucket()).unwrap_or(usize::MAX);
        let file: PathBuf = init.dir.join(DB_FILE);
        let db = RedbDb::open(&init, &file, cache)?;
        RedbStorage::new(db, file, init.options, lease)
    }

    fn read_meta(&self, key: MetaKey) -> Result<Option<Vec<u8>>> {
        let db = self.db()?;
        let txn = db.begin_read()?;
        let meta = txn.open_table(META).redb()?;
        Ok(meta.get(key.name()).redb()?.map(|v| v.value().to_vec()))
    }

    fn persist_meta(&self, key: MetaKey, value: u64) -> Result<()> {
        // Durability::Immediate is redb's default.
        let db = self.db()?;
        let txn = db
            .writable(&self.file, "persist_meta")?
            .begin_write()
            .redb()?;
        put_meta(&txn, key, value)?;
        txn.commit().redb()
    }

    fn holds_data(&self) -> Result<bool> {
        let db = self.db()?;
        let txn = db.begin_read()?;
        let data = txn.open_table(DATA).redb()?;
        let index = txn.open_table(BY_OFFSET).redb()?;
        Ok(!data.is_empty().redb()? || !index.is_empty().redb()?)
    }

    fn read_meta_rows(&self, prefix: &str) -> Result<Vec<(String, Vec<u8>)>> {
        let db = self.db()?;
        let txn = db.begin_read()?;
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
        let db = self.db()?;
        let mut txn = db
            .writable(&self.file, "write metadata rows")?
            .begin_write()
            .redb()?;
        txn.set_durability(Durability::None).redb()?;
        put_rows(&txn, rows)?;
        txn.commit().redb()
    }

    fn commit(&self, commit: CommitRequest<'_>) -> Result<()> {
        // Commits run under the engine's writer lock; a sweep's durable commit between this
        // load and the store below only makes the next durable commit come early.
        let unsynced = self.unsynced_records.load(Ordering::Relaxed) + commit.writes.len() as u64;
        let durable = commit.sync
            || (unsynced >= DURABLE_EVERY_RECORDS && !self.sweeping.load(Ordering::Acquire));
        let db = self.db()?;
        let mut txn = db.writable(&self.file, "apply")?.begin_write().redb()?;
        txn.set_durability(durability(durable)).redb()?;
        {
            let mut data = txn.open_table(DATA).redb()?;
            let mut index = txn.open_table(BY_OFFSET).redb()?;
            for record in commit.writes {
                let key = record.key();
                data.insert(key, record.encoded_value().as_slice()).redb()?;
                index
                    .insert(index_key(record.offset(), key).as_slice(), ())
                    .redb()?;
            }
        }
        // Same transaction as the rows: a crash can never separate them.
        put_meta(&txn, MetaKey::AppliedEnd, commit.applied_end)?;
        put_rows(&txn, commit.rows)?;
        txn.commit().redb()?;
        let unsynced = if durable { 0 } else { unsynced };
        self.unsynced_records.store(unsynced, Ordering::Relaxed);
        Ok(())
    }

    /// Inline unless a compaction holds the database: redb reads pages through its page cache;
    /// a point read is a few page reads of one B-tree path, from the cache when the bucket is
    /// warm, so it never blocks for long, but a compaction would hold it for its whole length.
    fn get_inline<T>(&self, key: &[u8], read: impl ReadStored<T>) -> Result<Option<T>> {
        let db = match self.db.try_read() {
            Ok(db) => db,
            Err(TryLockError::WouldBlock) => return Ok(None),
            Err(TryLockError::Poisoned(_)) => {
                return Err(tidemark_engine_api::Error::Poisoned {
                    what: "redb database",
                });
            }
        };
        let txn = db.begin_read()?;
        let data = txn.open_table(DATA).redb()?;
        let stored = data.get(key).redb()?;
        read(stored.as_ref().map(|guard| guard.value())).map(Some)
    }

    fn get<T>(&self, key: &[u8], read: impl ReadStored<T>) -> Result<T> {
        let db = self.db()?;
        let txn = db.begin_read()?;
        let data = txn.open_table(DATA).redb()?;
        let stored = data.get(key).redb()?;
        read(stored.as_ref().map(|guard| guard.value()))
    }

    fn reclaim(&self, request: ReclaimRequest<'_>) -> Result<ReclaimWork> {
        let bytes_before = self.file_bytes()?;
        self.db()?.writable(&self.file, "reclaim")?;
        // What the bucket holds before the sweep empties it, for the compaction's halving rule.
        self.note_live_estimate(self.live_entries()?.count);
        let before_chunk = || self.durable_if_due();
        let chunker = RedbChunker {
            db: &self.db,
            file: &self.file,
            before_chunk: &before_chunk,
        };
        self.sweeping.store(true, Ordering::Release);
        let swept = sweeper::sweep(
            &chunker,
            request.threshold,
            self.chunks,
            request.turns,
            request.on_chunk,
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
        // The removals are durable: a compaction that fails leaves them in place. Its error is
        // the reclaim's (a failed durable commit latches redb: the host must hear of it), and
        // the next reclaim tries again; a refusal is no error (`compact`).
        self.compact_if_garbage()?;
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

    /// Compactions run inside the reclaim that finds them due (see
    /// `RedbStorage::compact_if_garbage`): none is ever left to the background, so the default
    /// `wait_for_background_work` (return at once) is exact.
    fn space_rebuilds(&self) -> u64 {
        self.compactions.load(Ordering::Relaxed)
    }

    fn live_entries(&self) -> Result<LiveEntries> {
        let db = self.db()?;
        let txn = db.begin_read()?;
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
        let db = self.db()?;
        let txn = db.begin_read()?;
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

/// Nothing runs in the background: an idle file can always be closed.
impl tidemark_disk::release::Releasable for RedbStorage {}

#[cfg(feature = "testing")]
impl tidemark_disk::testing::StorageHooks for RedbStorage {
    /// Stores the bytes verbatim and indexes them like any write: at their tag when they
    /// decode, at offset 0 (below every non-zero threshold) when they do not.
    fn insert_raw(&self, key: &[u8], stored: &[u8]) -> Result<()> {
        let tag = tidemark_engine_api::codec::checked_tag(key, stored).unwrap_or(0);
        let db = self.db()?;
        let txn = db
            .writable(&self.file, "insert_raw")?
            .begin_write()
            .redb()?;
        {
            let mut data = txn.open_table(DATA).redb()?;
            data.insert(key, stored).redb()?;
            let mut index = txn.open_table(BY_OFFSET).redb()?;
            index.insert(index_key(tag, key).as_slice(), ()).redb()?;
        }
        txn.commit().redb()
    }

    fn insert_index_row(&self, row: &[u8]) -> Result<()> {
        let db = self.db()?;
        let txn = db
            .writable(&self.file, "insert_index_row")?
            .begin_write()
            .redb()?;
        txn.open_table(BY_OFFSET).redb()?.insert(row, ()).redb()?;
        txn.commit().redb()
    }

    fn remove_index_row(&self, row: &[u8]) -> Result<bool> {
        let db = self.db()?;
        let txn = db
            .writable(&self.file, "remove_index_row")?
            .begin_write()
            .redb()?;
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

#[cfg(test)]
mod tests {
    use tidemark_engine_api::{Engine, EngineOptions, OpenEngine};

    use crate::RedbEngine;

    /// Unsynced writes become durable every `DURABLE_EVERY_RECORDS` records, so the pages
    /// their commits freed become reusable; synced writes leave nothing pending.
    #[test]
    fn unsynced_writes_commit_durably_every_so_many_records() {
        use super::DURABLE_EVERY_RECORDS;
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
            let unsynced = engine.storage().inner().unwrap().unsynced_records();
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
        assert_eq!(synced.storage().inner().unwrap().unsynced_records(), 0);
    }

    /// redb writes when it closes its file; a panic there (as on a damaged file) is contained
    /// in the drop, and the store opens again afterwards.
    #[test]
    fn a_panic_while_closing_stays_inside_the_drop() {
        let dir = tempfile::tempdir().unwrap();
        let engine = RedbEngine::open(dir.path(), EngineOptions::default()).unwrap();
        engine.put(b"k", b"v", 0).unwrap();
        engine.storage().inner().unwrap().panic_on_close();
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
