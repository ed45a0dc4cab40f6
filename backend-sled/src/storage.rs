//! [`SledStorage`]: the sled primitives behind the shared disk-engine skeleton
//! ([`tidemark_disk::DiskEngine`]).
//!
//! The skeleton holds the writer and reclaimer locks, `W` and the applied end, the counters and
//! the report arithmetic; this module only stores: one multi-tree transaction per commit, the
//! flush that follows it (whose failure fails the store), the chunked sweep and the maintained
//! live-entry count.

use std::fmt;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use sled::transaction::{ConflictableTransactionResult, Transactional};
use tidemark_disk::BackendContext;
use tidemark_disk::budget::BucketLease;
use tidemark_disk::layout::FileStart;
use tidemark_disk::meta::{decode_u64, encode_u64};
use tidemark_disk::offset_index::{VerifyIndex, index_key};
use tidemark_disk::sweeper::{self, ChunkSizer};
use tidemark_disk::{
    CommitRequest, LiveEntries, MetaKey, ReadStored, ReclaimRequest, ReclaimWork, Storage,
    StorageInit,
};
use tidemark_engine_api::Verifier;
use tidemark_engine_api::covered::MetaRow;
use tidemark_engine_api::{Error, ReclaimCost, Result};

use crate::bucket::Bucket;
use crate::context::SledContext;
use crate::digest;
use crate::error::{BACKEND, sled_error, store_failed, tx_error};
use crate::generation::{self, Generation};
use crate::generation::{SLED_DB_FILE, sled_config};
use crate::meta;
use crate::progress::Progress;
use crate::registry::{self, OpenStore};
use crate::scan::for_each_chunk;
use crate::sweep::SledChunker;

/// The most index rows one sweep chunk visits, whatever `sweep_chunk_rows` asks for.
///
/// A sled 0.34 transaction holds a **process-wide** lock for its whole closure: while a chunk
/// runs, every transaction and every plain read or write of *every* sled store in the process
/// waits (sled takes the shared side of that lock for ordinary operations once any transaction
/// has run). A chunk of the default 4096 rows would stall all sled buckets, not just this one, so
/// sled chunks are capped well below it; reclaiming takes a few more, shorter transactions.
pub const MAX_SWEEP_CHUNK_ROWS: usize = 256;

/// One bucket's sled database, its current generation: trees `data`, `by_offset` and `meta`. A
/// reclaim may have it rebuilt into a fresh one (the crate README's *Rebuilds*), in the
/// background, and switched to.
///
/// If a flush that follows a committed write fails, the storage is marked failed: from then on
/// [`Storage::check_usable`] refuses with [`Error::StoreFailed`], so every write, watermark
/// change, reclaim and flush does, until the store is reopened (a retry must not simply
/// succeed: the write it retries may not be durable).
pub struct SledStorage {
    /// What a background rebuild shares with the engine. Declared first so its sled handles
    /// drop before the lease and the registry entry below (fields drop in order); a closing
    /// storage first waits for its rebuild to let go of it ([`Drop`]).
    bucket: Arc<Bucket>,
    /// How each sweep sizes its chunks: `sweep_chunk_rows` already capped at
    /// [`MAX_SWEEP_CHUNK_ROWS`], and `sweep_chunk_time`.
    chunks: ChunkSizer,
    /// This bucket's share of the context's budget, given back when the storage drops (sled's
    /// background threads, and the flusher through one flush, may hold the log a moment longer;
    /// a reopen waits for it, see the `registry` module).
    _lease: BucketLease,
    /// Declared last so it drops after every sled handle above.
    _open_store: OpenStore,
}

impl std::ops::Deref for SledStorage {
    type Target = Bucket;

    fn deref(&self) -> &Bucket {
        &self.bucket
    }
}

impl fmt::Debug for SledStorage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SledStorage")
            .field("dir", &self.dir)
            .field("live_entries", &self.live_entries.load(Ordering::Acquire))
            .field("failed", &self.is_failed())
            .finish_non_exhaustive()
    }
}

impl Drop for SledStorage {
    /// Stops a queued or running rebuild and waits until it has let go of the bucket, so the
    /// sled handles drop here, before the registry marks the store closed.
    fn drop(&mut self) {
        self.progress.cancel();
    }
}

impl SledStorage {
    /// Opens sled's database in `db_dir` (inside the bucket directory `dir`, already claimed by
    /// the skeleton) with `config`, and its three trees, and restores the live-entry count; the
    /// bucket holds `lease`, its share of `context`'s budget, and is flushed by its flusher
    /// thread.
    ///
    /// Every row of `data` is read and hashed: rows that do not add up to the live-row digest
    /// recorded with them (sled restored some of them older, or lost them) are
    /// [`Error::Damaged`], in every mode. A store without a (readable) count or a current digest
    /// gets them from that scan and, when `writes`, persisted. That is a write, so the metadata
    /// the skeleton checks next is checked first: a store the skeleton will refuse (a newer
    /// format, damaged metadata) is never written to.
    #[allow(clippy::too_many_arguments)]
    fn open_generation(
        context: &SledContext,
        lease: BucketLease,
        dir: &Path,
        number: u64,
        db_dir: &Path,
        chunks: ChunkSizer,
        writes: bool,
    ) -> Result<Self> {
        let config = sled_config(db_dir, context.cache_bytes_per_bucket());
        let (db, open_store) = registry::open(dir, db_dir, &config)?;
        let current = Generation::new(number, db)?;
        let storage = SledStorage {
            bucket: Arc::new(Bucket {
                dir: dir.to_path_buf(),
                current: Mutex::new(Arc::new(current)),
                switch: RwLock::new(()),
                retired: Mutex::new(Vec::new()),
                rebuilt: Mutex::new(crate::rebuild_rule::Rebuilt::default()),
                rebuilds: AtomicU64::new(0),
                failed_rebuilds: AtomicU64::new(0),
                unreported_rewrite: AtomicU64::new(0),
                live_entries: AtomicU64::new(0),
                failed: AtomicBool::new(false),
                #[cfg(test)]
                fail_next_flush: AtomicBool::new(false),
                progress: Arc::new(Progress::default()),
                removals: Mutex::new(None),
                context: context.clone(),
            }),
            chunks,
            _lease: lease,
            _open_store: open_store,
        };
        // Read again now that sled's lock on this generation is held: a pointer that moved
        // meanwhile means another process has the bucket open and rebuilt it.
        if generation::current(dir)? != number {
            return Err(Error::backend(
                BACKEND,
                std::io::Error::new(
                    std::io::ErrorKind::WouldBlock,
                    format!(
                        "{} switched to another sled generation while it was being opened: \
                         another process has it open",
                        dir.display()
                    ),
                ),
            ));
        }
        storage.check_meta()?;
        let store = storage.generation()?;
        let restored_live = meta::restore_live(&store.meta, dir)?;
        let restored_digest = digest::restore(&store.meta)?;
        // Every row, hashed: what sled actually restored (see `digest` for why sled needs it).
        let rows = digest::scan(&store.data)?;
        if let digest::Restored::Current(recorded) = restored_digest
            && recorded != rows.digest
        {
            return Err(digest_mismatch(dir, db_dir, recorded, rows));
        }
        if writes {
            // The current generation is open under sled's lock and its rows add up: what a
            // rebuild left behind goes (a half-built copy, a generation switched away from).
            let removed = generation::remove_others(dir, number)?;
            if removed > 0 {
                tracing::debug!(path = %dir.display(), removed, "removed stale sled generations");
            }
        }
        let missing = restored_live.is_none() || restored_digest == digest::Restored::Missing;
        if writes && missing {
            // Nothing else can write yet: the registry refuses a second open in this process.
            if restored_live.is_none() {
                meta::persist_live(&store.meta, rows.rows)?;
            }
            digest::persist(&store.meta, rows)?;
            store.db.flush().map_err(sled_error)?;
        }
        // A read-only open of a store without a current digest has nothing to compare the rows
        // with: it checks nothing and writes nothing (its count is kept in memory only).
        storage
            .live_entries
            .store(restored_live.unwrap_or(rows.rows), Ordering::Release);
        context.register(&store.db);
        Ok(storage)
    }

    /// The same check the skeleton runs at open (format version, watermark, applied end), run
    /// before this storage writes anything at open.
    fn check_meta(&self) -> Result<()> {
        let read = |key: MetaKey| -> Result<Option<u64>> {
            self.read_meta(key)?
                .map(|bytes| decode_u64(key, &bytes))
                .transpose()
        };
        tidemark_disk::meta::restore(
            &self.dir,
            read(MetaKey::FormatVersion)?,
            read(MetaKey::Watermark)?,
            read(MetaKey::AppliedEnd)?,
            self.holds_data()?,
        )
        .map(drop)
    }

    /// The rows per sweep chunk actually used: `sweep_chunk_rows` capped at
    /// [`MAX_SWEEP_CHUNK_ROWS`].
    pub fn sweep_chunk_rows(&self) -> usize {
        self.chunks.max_rows()
    }

    /// Rebuilds into a fresh database this bucket has switched to since it was opened (see
    /// [`crate::REBUILD_GROWTH`]).
    pub fn rebuilds(&self) -> u64 {
        self.bucket.rebuilds()
    }

    /// Rebuilds that failed since the bucket was opened (logged where they failed; one that
    /// failed before its switch left the store as it was).
    pub fn failed_rebuilds(&self) -> u64 {
        self.bucket.failed_rebuilds.load(Ordering::Acquire)
    }

    /// The generation of the sled database in use: 0 until the bucket's first rebuild, then one
    /// more with each ([`crate::GENERATION_FILE`] names it on disk).
    pub(crate) fn generation_number(&self) -> Result<u64> {
        Ok(self.bucket.generation()?.number)
    }

    /// sled's own figure for the bytes its files occupy (with those of a generation switched
    /// away from that a reader still held).
    pub(crate) fn size_on_disk(&self) -> Result<u64> {
        self.bucket.size_on_disk()
    }

    /// Test hook: while `hold` is set, this bucket's rebuild copies wait between two chunks
    /// (before their switch), so a test can act while one is in progress; closing the engine
    /// releases them (and abandons the rebuild).
    #[cfg(feature = "testing")]
    pub fn hold_rebuilds(&self, hold: bool) {
        self.bucket.progress.hold(hold);
    }

    /// Test hook: waits until a rebuild copy of this bucket waits at
    /// [`SledStorage::hold_rebuilds`]; `false` when no rebuild runs or it ended first.
    #[cfg(feature = "testing")]
    pub fn wait_rebuild_held(&self) -> bool {
        self.bucket.progress.wait_held()
    }

    /// After a sweep: has the bucket rebuilt when [`crate::rebuild_rule::due`], in the background
    /// (or inline, when the context says so or its thread cannot be started); returns the
    /// bytes a rebuild wrote that no reclaim reported yet.
    fn rebuild_if_due(&self) -> Result<Option<u64>> {
        crate::rebuild::remove_retired(&self.bucket)?;
        let settings = self.context.settings();
        if self.rebuild_due()? && self.progress.try_queue() {
            let inline = !settings.rebuild_in_background
                || match self.context.submit_rebuild(&self.bucket) {
                    Ok(()) => false,
                    Err(e) => {
                        tracing::warn!(path = %self.dir.display(), error = %e,
                            "could not start the sled rebuild thread; rebuilding inline");
                        true
                    }
                };
            if inline && self.progress.start() {
                let done = crate::rebuild::run(&self.bucket);
                self.progress.finish();
                done?;
            }
        }
        let unreported = self.unreported_rewrite.swap(0, Ordering::AcqRel);
        Ok((unreported > 0).then_some(unreported))
    }
}

/// The refusal of a store whose rows do not add up to the digest its commits recorded.
fn digest_mismatch(dir: &Path, db_dir: &Path, recorded: u64, rows: digest::Scan) -> Error {
    Error::Damaged {
        path: dir.to_path_buf(),
        reason: format!(
            "the {} rows sled restored from {} hash to {:016x}, but the live-row digest its \
             commits recorded is {recorded:016x}: sled's recovery served some rows older than \
             the metadata (or lost them), which no lookup could tell; restore the bucket from \
             a copy, or delete it and rebuild it from the lake and the WAL",
            rows.rows,
            db_dir.join(SLED_DB_FILE).display(),
            rows.digest,
        ),
    }
}

impl Storage for SledStorage {
    const BACKEND: &'static str = BACKEND;
    /// A sweep visits only the covered index rows.
    const RECLAIM_COST: ReclaimCost = ReclaimCost::Proportional;
    type Context = SledContext;

    /// Opens (by default creating) the sled database of the generation the bucket's pointer
    /// names, with a page cache of [`SledContext::cache_bytes_per_bucket`]; the bucket is flushed
    /// by the context's flusher thread.
    fn open(context: &SledContext, init: StorageInit<'_>, lease: BucketLease) -> Result<Self> {
        // The generation the pointer names (a store never rebuilt: `DB_SUBDIR`).
        let number = crate::generation::current(init.dir)?;
        let db_dir = crate::generation::db_dir(init.dir, number);
        // sled creates a missing database; it must not where a store lived, nor for an open of
        // an existing store.
        init.require_engine_file(&db_dir.join(SLED_DB_FILE), "sled database", FileStart::Log)?;
        let chunks = ChunkSizer::for_options(init.options, MAX_SWEEP_CHUNK_ROWS);
        SledStorage::open_generation(
            context,
            lease,
            init.dir,
            number,
            &db_dir,
            chunks,
            init.options.open_mode.writes(),
        )
    }

    fn read_meta(&self, key: MetaKey) -> Result<Option<Vec<u8>>> {
        Ok(self
            .generation()?
            .meta
            .get(key.bytes())
            .map_err(sled_error)?
            .map(|bytes| bytes.to_vec()))
    }

    /// Writes the value to `meta` and flushes: this is how `W` becomes durable before the
    /// skeleton publishes it.
    fn persist_meta(&self, key: MetaKey, value: u64) -> Result<()> {
        let (_switch, store) = self.writing()?;
        store
            .meta
            .insert(key.bytes(), &encode_u64(value)[..])
            .map_err(sled_error)?;
        // `meta` now holds a value memory does not: a failed flush fails the store.
        self.flush_committed(&store)
    }

    fn holds_data(&self) -> Result<bool> {
        let store = self.generation()?;
        Ok(store.data.first().map_err(sled_error)?.is_some()
            || store.by_offset.first().map_err(sled_error)?.is_some())
    }

    /// One transaction over the three trees: data rows, index rows, the applied end and the
    /// live-count delta. Durable only after [`Storage::after_commit`] flushes.
    fn read_meta_rows(&self, prefix: &str) -> Result<Vec<(String, Vec<u8>)>> {
        self.generation()?
            .meta
            .scan_prefix(prefix.as_bytes())
            .map(|row| {
                let (name, value) = row.map_err(sled_error)?;
                let name = String::from_utf8(name.to_vec()).map_err(|_| {
                    Error::corrupt(&name, "metadata row name is not UTF-8".to_owned())
                })?;
                Ok((name, value.to_vec()))
            })
            .collect()
    }

    /// Not flushed: sled makes them durable with the next flush.
    fn write_meta_rows(&self, rows: &[MetaRow]) -> Result<()> {
        let mut batch = sled::Batch::default();
        for row in rows {
            match &row.value {
                Some(value) => batch.insert(row.name.as_bytes(), value.as_slice()),
                None => batch.remove(row.name.as_bytes()),
            }
        }
        let (_switch, store) = self.writing()?;
        store.meta.apply_batch(batch).map_err(sled_error)
    }

    fn commit(&self, commit: CommitRequest<'_>) -> Result<()> {
        // Encoded once, outside the closure: sled may run the closure more than once.
        let rows: Vec<(&[u8], Vec<u8>, Vec<u8>)> = commit
            .writes
            .iter()
            .map(|r| (r.key(), r.encoded_value(), index_key(r.offset(), r.key())))
            .collect();
        let end = encode_u64(commit.applied_end);
        let (_switch, store) = self.writing()?;
        let added = (&store.data, &store.by_offset, &store.meta)
            .transaction(
                |(data, index, meta)| -> ConflictableTransactionResult<u64, Error> {
                    // `insert` returns the previous value (this transaction's own writes
                    // included), so a key new to `data` is counted exactly once, and the row
                    // it replaces leaves the digest.
                    let (mut added, mut delta) = (0u64, digest::Delta::default());
                    for (key, stored, index_row) in &rows {
                        match data.insert(*key, stored.as_slice())? {
                            Some(previous) => delta.remove(key, &previous),
                            None => added += 1,
                        }
                        delta.add(key, stored);
                        index.insert(index_row.as_slice(), &[][..])?;
                    }
                    meta.insert(MetaKey::AppliedEnd.bytes(), &end[..])?;
                    for row in commit.rows {
                        match &row.value {
                            Some(value) => meta.insert(row.name.as_bytes(), value.as_slice())?,
                            None => meta.remove(row.name.as_bytes())?,
                        };
                    }
                    meta::adjust_live(meta, added, 0)?;
                    digest::apply(meta, delta)?;
                    Ok(added)
                },
            )
            .map_err(tx_error)?;
        self.live_entries.fetch_add(added, Ordering::AcqRel);
        Ok(())
    }

    /// The commit is visible (and the skeleton has published its applied end); with `sync` it
    /// is made durable here, and a failure fails the store.
    fn after_commit(&self, sync: bool) -> Result<()> {
        if sync {
            // The generation current now: if a rebuild switched since the commit, the commit
            // was copied and the new generation flushed before the switch.
            let (_switch, store) = self.writing()?;
            self.flush_committed(&store)?;
        }
        Ok(())
    }

    /// Always inline: sled serves reads from its in-memory page cache; a point read faults in at most one B-tree path, so it never blocks for long.
    fn get_inline<T>(&self, key: &[u8], read: impl ReadStored<T>) -> Result<Option<T>> {
        self.get(key, read).map(Some)
    }

    fn get<T>(&self, key: &[u8], read: impl ReadStored<T>) -> Result<T> {
        let stored = self.generation()?.data.get(key).map_err(sled_error)?;
        read(stored.as_deref())
    }

    /// The shared sweeper in chunks of at most `MAX_SWEEP_CHUNK_ROWS` rows, each its own short
    /// transaction, so writers wait for one chunk at most; then, when a rebuild is due
    /// (the database has grown to [`crate::REBUILD_GROWTH`] times a fresh copy of its rows,
    /// or is mostly garbage), the rebuild is queued for the
    /// context's rebuild thread and the reclaim returns: it pays for its sweep only. The bytes
    /// a background rebuild wrote are reported by the next reclaim as its bytes rewritten. A
    /// reclaim does not flush its sweep: losing its removals in a crash only means the same
    /// covered entries are removed again.
    fn reclaim(&self, request: ReclaimRequest<'_>) -> Result<ReclaimWork> {
        let bytes_before = self.size_on_disk()?;
        let chunker = SledChunker {
            bucket: &self.bucket,
        };
        let totals = sweeper::sweep(
            &chunker,
            request.threshold,
            self.chunks,
            request.turns,
            request.on_chunk,
        )?;
        let bytes_rewritten = self.rebuild_if_due()?;
        Ok(ReclaimWork {
            values_removed: totals.values_removed,
            tombstones_removed: totals.tombstones_removed,
            corrupt_kept: totals.corrupt_kept,
            bytes_before,
            bytes_after: self.size_on_disk()?,
            bytes_rewritten,
            sweep: Some(totals),
        })
    }

    /// Waits for the bucket's queued or running rebuild, then removes the generations it
    /// switched away from. An error when the store failed (a rebuild's switch may have).
    fn wait_for_background_work(&self) -> Result<()> {
        self.progress.settle();
        crate::rebuild::remove_retired(&self.bucket)?;
        if self.is_failed() {
            return Err(store_failed(&self.dir, None));
        }
        Ok(())
    }

    fn space_rebuilds(&self) -> u64 {
        self.rebuilds()
    }

    /// Stops a queued or running rebuild (it removes what it copied; the next reclaim queues
    /// it again), then flushes.
    fn close(&self) -> Result<()> {
        self.progress.cancel();
        self.flush()
    }

    fn bytes_on_disk(&self) -> Result<u64> {
        self.size_on_disk()
    }

    /// Maintained by every transaction that adds or removes a `data` row: exact and O(1).
    fn live_entries(&self) -> Result<LiveEntries> {
        Ok(LiveEntries {
            count: self.live_entries.load(Ordering::Acquire),
            exact: true,
        })
    }

    /// An explicit flush promises nothing it has not done: a failure is returned and does not
    /// fail the store (a retry flushes).
    fn flush(&self) -> Result<()> {
        let (_switch, store) = self.writing()?;
        self.flush_db(&store).map_err(sled_error)
    }

    /// Walks `data` (each row's index row looked up in `by_offset`, each row hashed into the
    /// live-row digest), then `by_offset` (each row's data row looked up in `data`), and
    /// compares the digest with the one the commits recorded (a read-only open of a store
    /// without a current one has none to compare). sled has no check of its own beyond the log
    /// checksums it verifies when it opens.
    fn verify(&self, verifier: &mut Verifier) -> Result<()> {
        let store = self.generation()?;
        let mut scan = digest::Scan::default();
        // In chunks: a lookup while an iterator is alive can deadlock (see `crate::scan`).
        for_each_chunk(&store.data, &[], None, |rows| {
            for (key, stored) in rows {
                scan.row(key, stored);
                verifier.indexed_data_row(key, stored, |row| {
                    store.by_offset.contains_key(row).map_err(sled_error)
                })?;
            }
            Ok(())
        })?;
        if let digest::Restored::Current(recorded) = digest::restore(&store.meta)? {
            digest::verify(verifier, recorded, scan.digest, scan.rows);
        }
        // One call per chunk: the verifier adds them up.
        for_each_chunk(&store.by_offset, &[], None, |rows| {
            verifier.index_rows(rows.iter().map(|(row, _)| Ok(row)), |key| {
                store.data.get(key).map_err(sled_error)
            })
        })
    }

    fn check_usable(&self) -> Result<()> {
        if self.is_failed() {
            return Err(store_failed(&self.dir, None));
        }
        Ok(())
    }
}

/// A queued or running rebuild holds the bucket: closing would abandon it, so the store is not
/// released until it is over.
impl tidemark_disk::release::Releasable for SledStorage {
    fn background_work_pending(&self) -> bool {
        self.progress.is_pending()
    }
}

#[cfg(feature = "testing")]
impl tidemark_disk::testing::StorageHooks for SledStorage {
    /// Stores `stored` verbatim under `key`. Bytes that decode are indexed at their tag, like any
    /// write; undecodable bytes are indexed at offset 0 (below every non-zero threshold), and the
    /// index row of the entry they replace is moved there rather than left behind to meet the
    /// same entry a second time. Always flushed; a failed flush fails the store.
    fn insert_raw(&self, key: &[u8], stored: &[u8]) -> Result<()> {
        let tag = tidemark_engine_api::codec::decode(key, stored)
            .ok()
            .map(|d| d.offset());
        let (_switch, store) = self.writing()?;
        let added = (&store.data, &store.by_offset, &store.meta)
            .transaction(
                |(data, index, meta)| -> ConflictableTransactionResult<u64, Error> {
                    let previous = data.insert(key, stored)?;
                    if tag.is_none()
                        && let Some(old) = previous
                            .as_deref()
                            .and_then(tidemark_engine_api::codec::peek_tag)
                    {
                        index.remove(index_key(old, key))?;
                    }
                    index.insert(index_key(tag.unwrap_or(0), key), &[][..])?;
                    let added = u64::from(previous.is_none());
                    meta::adjust_live(meta, added, 0)?;
                    // Injected bytes are rows like any other: the digest keeps them.
                    let mut delta = digest::Delta::default();
                    if let Some(previous) = &previous {
                        delta.remove(key, previous);
                    }
                    delta.add(key, stored);
                    digest::apply(meta, delta)?;
                    Ok(added)
                },
            )
            .map_err(tx_error)?;
        self.live_entries.fetch_add(added, Ordering::AcqRel);
        self.flush_committed(&store)
    }

    /// Writes `row` verbatim into `by_offset` and flushes (tests of unreadable index rows).
    fn insert_index_row(&self, row: &[u8]) -> Result<()> {
        let (_switch, store) = self.writing()?;
        store.by_offset.insert(row, &[][..]).map_err(sled_error)?;
        self.flush_db(&store).map_err(sled_error)
    }

    /// Removes `row` from `by_offset` and flushes; whether it was there (tests of data rows
    /// missing their index row).
    fn remove_index_row(&self, row: &[u8]) -> Result<bool> {
        let (_switch, store) = self.writing()?;
        let removed = store.by_offset.remove(row).map_err(sled_error)?.is_some();
        self.flush_db(&store).map_err(sled_error)?;
        Ok(removed)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

    use std::sync::atomic::Ordering;

    use tidemark_engine_api::{Error, WriteBatch};

    use tidemark_engine_api::{Engine, EngineOptions, OpenEngine};

    use crate::SledEngine;

    fn assert_store_failed(err: Error) {
        assert!(matches!(err, Error::StoreFailed { .. }), "{err}");
        assert!(err.to_string().contains("must be reopened"), "{err}");
    }

    /// Makes the engine's next flush fail, as a failing disk would.
    fn fail_next_flush(engine: &SledEngine) {
        engine
            .storage()
            .inner()
            .unwrap()
            .fail_next_flush
            .store(true, Ordering::Release);
    }

    fn batch(first: u64) -> WriteBatch {
        let mut batch = WriteBatch::new();
        batch.put(format!("k{first}"), "v", first);
        batch
    }

    #[test]
    fn a_failed_flush_after_a_synced_apply_fails_the_engine_until_reopened() {
        let tmp = tempfile::tempdir().unwrap();
        let engine = SledEngine::open(tmp.path(), EngineOptions::default()).unwrap();
        engine.apply(&batch(0)).unwrap();
        fail_next_flush(&engine);
        let err = engine.apply(&batch(1)).unwrap_err();
        assert_store_failed(err);
        // The batch committed (visible, applied end moved) but may not be durable...
        assert_eq!(engine.applied_end(), 2);
        assert!(engine.lookup(b"k1").unwrap().offset().is_some());
        // ...so the host's retry must not be acknowledged as "already applied".
        assert_store_failed(engine.apply(&batch(1)).unwrap_err());
        assert_store_failed(engine.apply(&batch(2)).unwrap_err());
        assert_store_failed(engine.advance_watermark(1).unwrap_err());
        assert_store_failed(engine.adopt_lake_watermark(1).unwrap_err());
        assert_store_failed(engine.reclaim().unwrap_err());
        assert_store_failed(engine.reclaim_below(1).unwrap_err());
        assert_store_failed(engine.flush().unwrap_err());
        assert_store_failed(engine.insert_raw(b"raw", b"\xff").unwrap_err());
        assert_eq!(engine.watermark(), 0);
        assert_eq!(engine.stats().unwrap().live_entries, 2);
        drop(engine);

        // Reopening restores exactly what is durable and the engine works again.
        let engine = SledEngine::open(tmp.path(), EngineOptions::default()).unwrap();
        let end = engine.applied_end();
        assert!(end == 1 || end == 2, "applied end {end}");
        engine.apply(&batch(1)).unwrap();
        engine.apply(&batch(2)).unwrap();
        assert_eq!(engine.applied_end(), 3);
        assert_eq!(engine.stats().unwrap().live_entries, 3);
    }

    #[test]
    fn a_failed_watermark_flush_fails_the_engine() {
        let tmp = tempfile::tempdir().unwrap();
        let engine = SledEngine::open(tmp.path(), EngineOptions::default()).unwrap();
        engine.apply(&batch(0)).unwrap();
        fail_next_flush(&engine);
        assert_store_failed(engine.advance_watermark(1).unwrap_err());
        // Not published: memory never claims a watermark that may not be durable.
        assert_eq!(engine.watermark(), 0);
        assert_store_failed(engine.advance_watermark(1).unwrap_err());
    }

    #[test]
    fn verify_finds_rows_that_changed_behind_the_digest() {
        let tmp = tempfile::tempdir().unwrap();
        let engine = SledEngine::open(tmp.path(), EngineOptions::default()).unwrap();
        engine.apply(&batch(0)).unwrap();
        engine.apply(&batch(1)).unwrap();
        let mut again = WriteBatch::new();
        again.put("k1", "v2", 2);
        engine.apply(&again).unwrap();
        let report = engine.verify().unwrap();
        assert!(report.is_clean(), "{report:?}");
        assert_eq!(report.engine_checks, ["live-row digest (every data row)"]);
        // k1's older version, as sled serves it from an older page: it decodes, its tag is
        // below the applied end and its (stale) index row is there.
        let older = tidemark_engine_api::codec::encode_value(b"k1", 1, b"v");
        engine
            .storage()
            .inner()
            .unwrap()
            .data()
            .unwrap()
            .insert(b"k1", older)
            .unwrap();
        let report = engine.verify().unwrap();
        let finding = report
            .finding(tidemark_engine_api::Damage::DigestMismatch)
            .unwrap_or_else(|| panic!("{report:?}"));
        assert_eq!(finding.examples[0].key, b"live_digest");
        assert!(
            finding.examples[0].detail.contains("the 2 rows read"),
            "{finding:?}"
        );
        // Here the newer write's index row survived and names it too; an older `by_offset`
        // page would not.
        assert!(
            report
                .finding(tidemark_engine_api::Damage::IndexRowWithoutData)
                .is_some()
        );
        assert_eq!(report.damaged(), 2, "{report:?}");
    }

    #[test]
    fn unsynced_applies_do_not_flush_and_an_explicit_flush_failure_can_be_retried() {
        let tmp = tempfile::tempdir().unwrap();
        let options = EngineOptions::default().with_sync_writes(false);
        let engine = SledEngine::open(tmp.path(), options).unwrap();
        fail_next_flush(&engine);
        // No flush on this path, so the injected failure is still pending afterwards.
        engine.apply(&batch(0)).unwrap();
        // `flush` promises nothing it has not done: a failure is returned and a retry flushes.
        assert!(engine.flush().is_err());
        engine.flush().unwrap();
        engine.apply(&batch(1)).unwrap();
    }
}
