//! [`SledEngine`]: the engine contract on three sled trees.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::Instant;

use engine_api::batch::validate_key;
use engine_api::sweeper::{self, SweepTotals, index_key, index_upper_bound};
use engine_api::watermark::{plan_adopt, plan_advance, plan_apply, reclaim_threshold};
use engine_api::{
    ApplyOutcome, Counters, Engine, EngineOptions, EngineStats, Error, LocalLookup, OpenEngine,
    ReclaimReport, Result, WatermarkUpdate, WriteBatch, codec, layout,
};
use sled::transaction::{ConflictableTransactionResult, Transactional};

use crate::chunk::Chunker;
use crate::errors::{BACKEND, NoAbort, sled_error, tx_error};
use crate::meta;
use crate::registry::{self, OpenStore};

/// Subdirectory of the bucket directory that holds sled's own files (the bucket directory itself
/// holds the Tidemark marker beside it).
pub const DB_SUBDIR: &str = "sled";

/// sled's page cache per bucket. sled's default (1 GiB) is sized for one database per process;
/// a node hosts many buckets, so each gets a smaller share.
const CACHE_CAPACITY_BYTES: u64 = 64 * 1024 * 1024;

/// A bucket stored in sled, reclaimed by the shared range-scan sweeper.
///
/// `W` and the applied end live in atomics (read without locks) and in the `meta` tree; every
/// change to them happens under the writer mutex, in the same transaction (applied end) or
/// followed by a flush (watermark) that makes it durable.
pub struct SledEngine {
    path: PathBuf,
    options: EngineOptions,
    db: sled::Db,
    data: sled::Tree,
    by_offset: sled::Tree,
    meta: sled::Tree,
    /// Serialises `apply`, `advance_watermark` and `adopt_lake_watermark`.
    writer: Mutex<()>,
    /// Serialises `reclaim` calls (never held by writers), so reports are not split between two
    /// concurrent sweeps of the same rows.
    reclaimer: Mutex<()>,
    last_sweep: Mutex<Option<SweepTotals>>,
    watermark: AtomicU64,
    applied_end: AtomicU64,
    counters: Counters,
    /// Declared last so it drops after every sled handle above (fields drop in order).
    _open_store: OpenStore,
}

impl fmt::Debug for SledEngine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SledEngine")
            .field("path", &self.path)
            .field("watermark", &self.watermark.load(Ordering::Acquire))
            .field("applied_end", &self.applied_end.load(Ordering::Acquire))
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

    /// What the most recent `reclaim` did row by row (`None` before the first one): index rows
    /// visited, stale rows dropped, chunks committed. Tests use `rows_visited` to show that the
    /// sweeper's work follows the covered range, not the table size.
    pub fn last_sweep(&self) -> Option<SweepTotals> {
        self.last_sweep.lock().map(|g| *g).unwrap_or_default()
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
    pub fn insert_raw(&self, key: &[u8], stored: &[u8]) -> Result<()> {
        validate_key(key)?;
        let _writer = self.lock(&self.writer)?;
        let tag = codec::decode(key, stored).ok().map(|d| d.offset());
        (&self.data, &self.by_offset)
            .transaction(
                |(data, index)| -> ConflictableTransactionResult<(), NoAbort> {
                    let previous = data.insert(key, stored)?;
                    if tag.is_none()
                        && let Some(old) = previous.as_deref().and_then(codec::peek_tag)
                    {
                        index.remove(index_key(old, key))?;
                    }
                    index.insert(index_key(tag.unwrap_or(0), key), &[][..])?;
                    Ok(())
                },
            )
            .map_err(tx_error)?;
        self.db.flush().map_err(sled_error)?;
        Ok(())
    }

    fn lock<'a, T>(&self, mutex: &'a Mutex<T>) -> Result<MutexGuard<'a, T>> {
        // A poisoned lock means a panic mid-update elsewhere; refuse rather than guess.
        mutex.lock().map_err(|_| Error::Closed)
    }

    /// Writes `W` to `meta` and flushes: the watermark is always durable before it is published.
    fn persist_watermark(&self, update: &WatermarkUpdate) -> Result<()> {
        if update.moved {
            self.meta
                .insert(meta::WATERMARK, &update.current.to_be_bytes())
                .map_err(sled_error)?;
            self.db.flush().map_err(sled_error)?;
            self.watermark.store(update.current, Ordering::Release);
        }
        Ok(())
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
        // Makes a fresh store's format version durable; cheap when nothing changed.
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
            watermark: AtomicU64::new(restored.watermark),
            applied_end: AtomicU64::new(restored.applied_end),
            counters: Counters::default(),
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
        let applied_end = self.applied_end.load(Ordering::Acquire);
        let plan = plan_apply(batch, self.watermark.load(Ordering::Acquire), applied_end)?;
        if plan.advances(applied_end) {
            // Encoded once, outside the closure: sled may run the closure more than once.
            let rows: Vec<(&[u8], Vec<u8>, Vec<u8>)> = plan
                .writes
                .iter()
                .map(|r| (r.key(), r.encoded_value(), index_key(r.offset(), r.key())))
                .collect();
            let end = plan.outcome.applied_end.to_be_bytes();
            (&self.data, &self.by_offset, &self.meta)
                .transaction(
                    |(data, index, meta)| -> ConflictableTransactionResult<(), NoAbort> {
                        for (key, stored, index_row) in &rows {
                            data.insert(*key, stored.as_slice())?;
                            index.insert(index_row.as_slice(), &[][..])?;
                        }
                        meta.insert(meta::APPLIED_END, &end[..])?;
                        Ok(())
                    },
                )
                .map_err(tx_error)?;
            // Committed and visible: publish before the flush so memory matches the trees even
            // if the flush fails.
            self.applied_end
                .store(plan.outcome.applied_end, Ordering::Release);
            self.counters.record_apply(&plan.outcome);
            if self.options.sync_writes {
                self.db.flush().map_err(sled_error)?;
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
        let update = plan_advance(
            self.watermark.load(Ordering::Acquire),
            self.applied_end.load(Ordering::Acquire),
            w,
        );
        self.persist_watermark(&update)?;
        Ok(update)
    }

    fn adopt_lake_watermark(&self, lake_end: u64) -> Result<WatermarkUpdate> {
        let _writer = self.lock(&self.writer)?;
        let update = plan_adopt(self.watermark.load(Ordering::Acquire), lake_end);
        self.persist_watermark(&update)?;
        Ok(update)
    }

    fn watermark(&self) -> u64 {
        self.watermark.load(Ordering::Acquire)
    }

    fn applied_end(&self) -> u64 {
        self.applied_end.load(Ordering::Acquire)
    }

    fn reclaim(&self) -> Result<ReclaimReport> {
        let _reclaimer = self.lock(&self.reclaimer)?;
        let started = Instant::now();
        let threshold = reclaim_threshold(self.watermark(), self.options.retention_distance);
        let bytes_before = self.size_on_disk()?;
        let chunker = Chunker {
            data: &self.data,
            by_offset: &self.by_offset,
        };
        // Each chunk is its own short transaction, so writers wait for one chunk at most.
        let totals = sweeper::sweep(&chunker, threshold, self.options.sweep_chunk_rows)?;
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

    fn stats(&self) -> Result<EngineStats> {
        let watermark = self.watermark();
        let threshold = reclaim_threshold(watermark, self.options.retention_distance);
        Ok(EngineStats {
            watermark,
            applied_end: self.applied_end(),
            bytes_on_disk: self.size_on_disk()?,
            // sled's `len` walks the whole tree: exact, but O(table).
            live_entries: self.data.len() as u64,
            live_entries_exact: true,
            covered_estimate: self.count_index_below(threshold)?,
            counters: self.counters.snapshot(),
        })
    }

    fn flush(&self) -> Result<()> {
        self.db.flush().map_err(sled_error)?;
        Ok(())
    }
}
