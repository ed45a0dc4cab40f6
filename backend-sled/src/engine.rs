//! [`SledEngine`]: the engine contract on three sled trees.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::Instant;

use engine_api::batch::validate_key;
use engine_api::sweeper::{self, SweepTotals, index_key, index_upper_bound};
use engine_api::watermark::{ProgressCell, reclaim_threshold};
use engine_api::{
    ApplyOutcome, Engine, EngineCounters, EngineOptions, EngineStats, Error, LocalLookup,
    OpenEngine, ReclaimReport, Result, WatermarkUpdate, WriteBatch, codec, layout,
};
use sled::transaction::{ConflictableTransactionResult, Transactional};

use crate::chunk::{ChunkHook, Chunker};
use crate::errors::{BACKEND, sled_error, store_failed, tx_error};
use crate::meta;
use crate::registry::{self, OpenStore};

/// Subdirectory of the bucket directory that holds sled's own files (the bucket directory itself
/// holds the Tidemark marker beside it).
pub const DB_SUBDIR: &str = "sled";

/// The most index rows one sweep chunk visits, whatever `sweep_chunk_rows` asks for.
///
/// A sled 0.34 transaction holds a **process-wide** lock for its whole closure: while a chunk
/// runs, every transaction and every plain read or write of *every* sled store in the process
/// waits (sled takes the shared side of that lock for ordinary operations once any transaction
/// has run). A chunk of the default 4096 rows would stall all sled buckets, not just this one, so
/// sled chunks are capped well below it; reclaiming takes a few more, shorter transactions.
pub const MAX_SWEEP_CHUNK_ROWS: usize = 256;

/// sled's page cache per bucket. sled's default (1 GiB) is sized for one database per process;
/// a node hosts many buckets, so each gets a smaller share.
const CACHE_CAPACITY_BYTES: u64 = 64 * 1024 * 1024;

/// A bucket stored in sled, reclaimed by the shared range-scan sweeper.
///
/// `W`, the applied end and the live-entry count live in atomics (read without locks) and in the
/// `meta` tree; every change to them happens in the same transaction as the rows it describes
/// (applied end, live count) or is followed by a flush (watermark) that makes it durable.
///
/// If a flush that follows a committed write fails, the engine is marked failed: from then on
/// every write, watermark change, reclaim and flush returns [`Error::StoreFailed`] until the store is
/// reopened (see there why a retry must not simply succeed).
pub struct SledEngine {
    path: PathBuf,
    options: EngineOptions,
    db: sled::Db,
    data: sled::Tree,
    by_offset: sled::Tree,
    meta: sled::Tree,
    /// Serialises `apply`, `advance_watermark` and `adopt_lake_watermark`.
    writer: Mutex<()>,
    /// Serialises reclaims (never held by writers), so reports are not split between two
    /// concurrent sweeps of the same rows.
    reclaimer: Mutex<()>,
    last_sweep: Mutex<Option<SweepTotals>>,
    chunk_hook: Mutex<Option<ChunkHook>>,
    progress: ProgressCell,
    /// Rows in `data`, mirrored from `meta` (see [`meta::LIVE_ENTRIES`]).
    live_entries: AtomicU64,
    /// Set when a flush after a committed write failed; see [`Error::StoreFailed`].
    failed: AtomicBool,
    /// Makes the next flush fail, to test the failed state without a failing disk.
    #[cfg(test)]
    fail_next_flush: AtomicBool,
    counters: EngineCounters,
    /// Declared last so it drops after every sled handle above (fields drop in order).
    _open_store: OpenStore,
}

impl fmt::Debug for SledEngine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SledEngine")
            .field("path", &self.path)
            .field("watermark", &self.progress.watermark())
            .field("applied_end", &self.progress.applied_end())
            .field("failed", &self.failed.load(Ordering::Acquire))
            .finish_non_exhaustive()
    }
}

impl SledEngine {
    /// The bucket directory this engine was opened at.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The options it was opened with.
    pub fn options(&self) -> &EngineOptions {
        &self.options
    }

    /// The rows per sweep chunk actually used: `sweep_chunk_rows` capped at
    /// [`MAX_SWEEP_CHUNK_ROWS`].
    pub fn sweep_chunk_rows(&self) -> usize {
        self.options.sweep_chunk_rows.clamp(1, MAX_SWEEP_CHUNK_ROWS)
    }

    /// What the most recent reclaim did row by row (`None` before the first one): index rows
    /// visited, stale rows dropped, chunks committed. Tests use `rows_visited` to show that the
    /// sweeper's work follows the covered range, not the table size.
    pub fn last_sweep(&self) -> Option<SweepTotals> {
        self.last_sweep.lock().map(|g| *g).unwrap_or_default()
    }

    /// Installs (or, with `None`, removes) a callback that every reclaim runs after each chunk it
    /// commits, with that chunk's totals. It runs on the reclaiming thread, outside any
    /// transaction and without the writer lock, so writers proceed while it runs; a callback that
    /// blocks holds up only the reclaim. Meant for progress diagnostics and for tests that need a
    /// reclaim paused between two chunks.
    #[cfg(any(test, feature = "testing"))]
    pub fn on_chunk_committed(&self, hook: Option<ChunkHook>) -> Result<()> {
        *self.lock(&self.chunk_hook)? = hook;
        Ok(())
    }

    /// sled's own figure for the bytes its files occupy.
    pub fn size_on_disk(&self) -> Result<u64> {
        self.db.size_on_disk().map_err(sled_error)
    }

    /// Stores `stored` verbatim under `key`, bypassing the codec. **For corruption tests only.**
    ///
    /// The entry is indexed so that reclamation meets it exactly once per sweep: bytes that decode
    /// are indexed at their tag, like any write; undecodable bytes are indexed at offset 0 (below
    /// every non-zero threshold), and the index row of the entry they replace is moved there
    /// rather than left behind to meet the same entry a second time.
    #[cfg(any(test, feature = "testing"))]
    pub fn insert_raw(&self, key: &[u8], stored: &[u8]) -> Result<()> {
        validate_key(key)?;
        let _writer = self.lock(&self.writer)?;
        self.check_usable()?;
        let tag = codec::decode(key, stored).ok().map(|d| d.offset());
        let added = (&self.data, &self.by_offset, &self.meta)
            .transaction(
                |(data, index, meta)| -> ConflictableTransactionResult<u64, Error> {
                    let previous = data.insert(key, stored)?;
                    if tag.is_none()
                        && let Some(old) = previous.as_deref().and_then(codec::peek_tag)
                    {
                        index.remove(index_key(old, key))?;
                    }
                    index.insert(index_key(tag.unwrap_or(0), key), &[][..])?;
                    let added = u64::from(previous.is_none());
                    meta::adjust_live(meta, added, 0)?;
                    Ok(added)
                },
            )
            .map_err(tx_error)?;
        self.live_entries.fetch_add(added, Ordering::AcqRel);
        self.flush_committed()
    }

    fn lock<'a, T>(&self, mutex: &'a Mutex<T>) -> Result<MutexGuard<'a, T>> {
        // A poisoned lock means a panic mid-update elsewhere; refuse rather than guess.
        engine_api::sync::lock(mutex, "sled engine")
    }

    /// Refuses once a flush after a committed write has failed.
    fn check_usable(&self) -> Result<()> {
        if self.failed.load(Ordering::Acquire) {
            return Err(store_failed(&self.path, None));
        }
        Ok(())
    }

    /// Flushes after a committed write. On failure the write is visible but maybe not durable,
    /// and nothing would stop a retry from being acknowledged without a flush, so the engine is
    /// marked failed before the error is returned.
    fn flush_committed(&self) -> Result<()> {
        if let Err(e) = self.flush_db() {
            self.failed.store(true, Ordering::Release);
            tracing::error!(path = %self.path.display(), error = %e,
                "sled flush after a committed write failed; the store must be reopened");
            return Err(store_failed(&self.path, Some(e)));
        }
        Ok(())
    }

    fn flush_db(&self) -> sled::Result<()> {
        #[cfg(test)]
        if self.fail_next_flush.swap(false, Ordering::AcqRel) {
            return Err(sled::Error::Io(std::io::Error::other(
                "injected flush failure",
            )));
        }
        self.db.flush().map(drop)
    }

    /// Writes `W` to `meta` and flushes: the watermark is durable before [`ProgressCell`]
    /// publishes it.
    fn persist_watermark(&self, watermark: u64) -> Result<()> {
        self.meta
            .insert(meta::WATERMARK, &watermark.to_be_bytes())
            .map_err(sled_error)?;
        // `meta` now holds a watermark memory does not: a failed flush fails the engine.
        self.flush_committed()
    }

    /// Sweeps every index row below `threshold_of(W)`, reading `W` once under the reclaimer lock.
    /// Both [`Engine::reclaim`] and [`Engine::reclaim_below`] are this with a different threshold.
    fn reclaim_at(&self, threshold_of: impl FnOnce(u64) -> u64) -> Result<ReclaimReport> {
        self.check_usable()?;
        let _reclaimer = self.lock(&self.reclaimer)?;
        let started = Instant::now();
        let threshold = threshold_of(self.watermark());
        let bytes_before = self.size_on_disk()?;
        let hook = self.lock(&self.chunk_hook)?.clone();
        let chunker = Chunker {
            data: &self.data,
            by_offset: &self.by_offset,
            meta: &self.meta,
            live_entries: &self.live_entries,
            hook: hook.as_ref(),
        };
        // Each chunk is its own short transaction, so writers wait for one chunk at most.
        let totals = sweeper::sweep(&chunker, threshold, self.sweep_chunk_rows())?;
        let report = ReclaimReport {
            threshold,
            values_removed: totals.values_removed,
            tombstones_removed: totals.tombstones_removed,
            corrupt_kept: totals.corrupt_kept,
            bytes_before,
            bytes_after: self.size_on_disk()?,
            duration: started.elapsed(),
        };
        self.counters.record_reclaim(&report);
        *self.lock(&self.last_sweep)? = Some(totals);
        tracing::debug!(
            threshold,
            rows_visited = totals.rows_visited,
            removed = report.removed(),
            stale_dropped = totals.stale_dropped,
            corrupt_kept = totals.corrupt_kept,
            chunks = totals.chunks,
            "sled reclaim finished"
        );
        Ok(report)
    }

    /// Index rows below `threshold`: covered entries plus stale rows not yet dropped.
    fn count_index_below(&self, threshold: u64) -> Result<u64> {
        let upper = index_upper_bound(threshold);
        let mut count = 0u64;
        for row in self.by_offset.range(..&upper[..]).keys() {
            row.map_err(sled_error)?;
            count += 1;
        }
        Ok(count)
    }
}

/// The live-entry count of a store opened without one (older stores): counted once, then kept
/// exact by every transaction.
fn count_live_entries(data: &sled::Tree, meta: &sled::Tree) -> Result<u64> {
    let mut count = 0u64;
    for row in data.iter().keys() {
        row.map_err(sled_error)?;
        count += 1;
    }
    meta.insert(meta::LIVE_ENTRIES, &count.to_be_bytes())
        .map_err(sled_error)?;
    Ok(count)
}

impl OpenEngine for SledEngine {
    fn open(path: &Path, options: EngineOptions) -> Result<Self> {
        // The marker first: a directory of another backend (or a newer build) is refused before
        // sled creates anything in it.
        layout::claim_directory(path, BACKEND)?;
        let db_dir = path.join(DB_SUBDIR);
        let config = sled::Config::new()
            .path(&db_dir)
            .cache_capacity(CACHE_CAPACITY_BYTES);
        let (db, open_store) = registry::open(path, &db_dir, &config)?;
        let tree = |name: &str| db.open_tree(name).map_err(sled_error);
        let data = tree("data")?;
        let by_offset = tree("by_offset")?;
        let meta = tree("meta")?;
        let restored = meta::restore(&meta, path)?;
        // Nothing else can write yet: the registry refuses a second open in this process.
        let live_entries = match restored.live_entries {
            Some(count) => count,
            None => count_live_entries(&data, &meta)?,
        };
        // Makes a fresh store's format version (and a first count) durable; cheap otherwise.
        db.flush().map_err(sled_error)?;
        Ok(SledEngine {
            path: path.to_path_buf(),
            options,
            db,
            data,
            by_offset,
            meta,
            writer: Mutex::new(()),
            reclaimer: Mutex::new(()),
            last_sweep: Mutex::new(None),
            chunk_hook: Mutex::new(None),
            progress: ProgressCell::new(restored.watermark, restored.applied_end),
            live_entries: AtomicU64::new(live_entries),
            failed: AtomicBool::new(false),
            #[cfg(test)]
            fail_next_flush: AtomicBool::new(false),
            counters: EngineCounters::default(),
            _open_store: open_store,
        })
    }
}

impl Engine for SledEngine {
    fn backend_name(&self) -> &'static str {
        BACKEND
    }

    fn apply(&self, batch: &WriteBatch) -> Result<ApplyOutcome> {
        let _writer = self.lock(&self.writer)?;
        // Before planning: after a failed flush the "already applied" answer cannot be trusted
        // to mean "durable".
        self.check_usable()?;
        let applied_end = self.progress.applied_end();
        let plan = self.progress.plan_apply(batch)?;
        if plan.advances(applied_end) {
            // Encoded once, outside the closure: sled may run the closure more than once.
            let rows: Vec<(&[u8], Vec<u8>, Vec<u8>)> = plan
                .writes
                .iter()
                .map(|r| (r.key(), r.encoded_value(), index_key(r.offset(), r.key())))
                .collect();
            let end = plan.outcome.applied_end.to_be_bytes();
            let added = (&self.data, &self.by_offset, &self.meta)
                .transaction(
                    |(data, index, meta)| -> ConflictableTransactionResult<u64, Error> {
                        // `insert` returns the previous value (this transaction's own writes
                        // included), so a key new to `data` is counted exactly once.
                        let mut added = 0u64;
                        for (key, stored, index_row) in &rows {
                            if data.insert(*key, stored.as_slice())?.is_none() {
                                added += 1;
                            }
                            index.insert(index_row.as_slice(), &[][..])?;
                        }
                        meta.insert(meta::APPLIED_END, &end[..])?;
                        meta::adjust_live(meta, added, 0)?;
                        Ok(added)
                    },
                )
                .map_err(tx_error)?;
            // Committed and visible: publish before the flush so memory matches the trees even
            // if the flush fails (which then fails the engine, see `flush_committed`).
            self.live_entries.fetch_add(added, Ordering::AcqRel);
            self.progress.publish_applied_end(plan.outcome.applied_end);
            self.counters.record_apply(&plan.outcome);
            if self.options.sync_writes {
                self.flush_committed()?;
            }
        } else {
            // Every record was covered or already applied: nothing to write.
            self.counters.record_apply(&plan.outcome);
        }
        Ok(plan.outcome)
    }

    fn lookup(&self, key: &[u8]) -> Result<LocalLookup> {
        validate_key(key)?;
        match self.data.get(key).map_err(sled_error)? {
            Some(bytes) => Ok(LocalLookup::from_decoded(codec::decode(key, &bytes)?)),
            None => Ok(LocalLookup::Miss),
        }
    }

    fn advance_watermark(&self, w: u64) -> Result<WatermarkUpdate> {
        let _writer = self.lock(&self.writer)?;
        self.check_usable()?;
        self.progress.advance(w, |v| self.persist_watermark(v))
    }

    fn adopt_lake_watermark(&self, lake_end: u64) -> Result<WatermarkUpdate> {
        let _writer = self.lock(&self.writer)?;
        self.check_usable()?;
        self.progress.adopt(lake_end, |v| self.persist_watermark(v))
    }

    fn watermark(&self) -> u64 {
        self.progress.watermark()
    }

    fn applied_end(&self) -> u64 {
        self.progress.applied_end()
    }

    fn reclaim(&self) -> Result<ReclaimReport> {
        self.reclaim_at(|w| reclaim_threshold(w, self.options.retention_distance))
    }

    fn reclaim_below(&self, threshold: u64) -> Result<ReclaimReport> {
        self.reclaim_at(|w| threshold.min(w))
    }

    fn stats(&self) -> Result<EngineStats> {
        let watermark = self.watermark();
        let threshold = reclaim_threshold(watermark, self.options.retention_distance);
        Ok(EngineStats {
            watermark,
            applied_end: self.applied_end(),
            bytes_on_disk: self.size_on_disk()?,
            // Maintained by every transaction that adds or removes a `data` row: exact and O(1).
            live_entries: self.live_entries.load(Ordering::Acquire),
            live_entries_exact: true,
            covered_estimate: self.count_index_below(threshold)?,
            counters: self.counters.snapshot(),
        })
    }

    fn flush(&self) -> Result<()> {
        self.check_usable()?;
        self.flush_db().map_err(sled_error)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

    use super::*;

    fn assert_store_failed(err: Error) {
        assert!(matches!(err, Error::StoreFailed { .. }), "{err}");
        assert!(err.to_string().contains("must be reopened"), "{err}");
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

        engine.fail_next_flush.store(true, Ordering::Release);
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
        engine.fail_next_flush.store(true, Ordering::Release);
        assert_store_failed(engine.advance_watermark(1).unwrap_err());
        // Not published: memory never claims a watermark that may not be durable.
        assert_eq!(engine.watermark(), 0);
        assert_store_failed(engine.advance_watermark(1).unwrap_err());
    }

    #[test]
    fn unsynced_applies_do_not_flush_and_an_explicit_flush_failure_can_be_retried() {
        let tmp = tempfile::tempdir().unwrap();
        let options = EngineOptions::default().with_sync_writes(false);
        let engine = SledEngine::open(tmp.path(), options).unwrap();
        engine.fail_next_flush.store(true, Ordering::Release);
        // No flush on this path, so the injected failure is still pending afterwards.
        engine.apply(&batch(0)).unwrap();
        // `flush` promises nothing it has not done: a failure is returned and a retry flushes.
        assert!(engine.flush().is_err());
        engine.flush().unwrap();
        engine.apply(&batch(1)).unwrap();
    }
}
