//! [`RedbEngine`]: one redb database file per bucket, reclaimed by the shared range-scan sweeper.

use std::ops::Bound;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};
use std::time::Instant;

use engine_api::batch::validate_key;
use engine_api::codec::{self, FORMAT_VERSION};
use engine_api::sweeper::{self, SweepTotals, index_key, index_upper_bound};
use engine_api::watermark::{ProgressCell, reclaim_threshold};
use engine_api::{
    ApplyOutcome, Counters, Engine, EngineOptions, EngineStats, Error, LocalLookup, OpenEngine,
    ReclaimReport, Result, WatermarkUpdate, WriteBatch, layout,
};
use redb::{
    Builder, Database, Durability, ReadableDatabase, ReadableTable, ReadableTableMetadata,
    WriteTransaction,
};

use crate::error::{BACKEND, RedbResultExt};
use crate::sweep::RedbChunker;
use crate::tables::{
    BY_OFFSET, DATA, META, META_APPLIED_END, META_FORMAT, META_WATERMARK, decode_u64, encode_u64,
};

/// Name of the database file inside the bucket directory.
pub const DB_FILE: &str = "bucket.redb";

/// redb page cache per bucket. redb's own default (1 GiB) assumes one database per process;
/// a host runs many buckets, so each gets a modest cache.
pub const CACHE_BYTES: usize = 64 * 1024 * 1024;

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
///   transaction, committed with [`Durability::Immediate`] when `sync_writes` is true and
///   [`Durability::None`] otherwise (a non-durable commit may be lost on a crash, but it is never
///   torn: redb commits are atomic).
/// * `advance_watermark` / `adopt_lake_watermark` always commit durably before returning.
/// * `reclaim` runs the shared sweeper with one write transaction per chunk of
///   `sweep_chunk_rows` index rows, so writers wait for at most one chunk.
pub struct RedbEngine {
    db: Database,
    file: PathBuf,
    options: EngineOptions,
    /// Serialises `apply` and watermark changes: the watermark and applied end read by a plan
    /// must not change before its transaction commits.
    writer: Mutex<()>,
    /// Serialises `reclaim` calls so that `last_sweep` describes one whole sweep.
    reclaimer: Mutex<()>,
    /// What the most recent sweep did (see [`RedbEngine::last_sweep`]).
    last_sweep: Mutex<Option<SweepTotals>>,
    progress: ProgressCell,
    counters: Counters,
}

impl std::fmt::Debug for RedbEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedbEngine")
            .field("file", &self.file)
            .field("watermark", &self.watermark())
            .field("applied_end", &self.applied_end())
            .finish_non_exhaustive()
    }
}

impl RedbEngine {
    /// Path of the database file.
    pub fn file_path(&self) -> &Path {
        &self.file
    }

    /// The options the engine was opened with.
    pub fn options(&self) -> &EngineOptions {
        &self.options
    }

    /// What the most recent `reclaim` did, row by row (`None` before the first one). Tests use
    /// `rows_visited` to show that a sweep's work is proportional to what is covered.
    pub fn last_sweep(&self) -> Option<SweepTotals> {
        self.last_sweep.lock().ok().and_then(|g| *g)
    }

    /// redb's own storage figures, including fragmented bytes (free pages awaiting reuse).
    ///
    /// This walks every tree and briefly holds the write lock, so it costs time proportional to
    /// the file; it is a diagnostic, which is why [`Engine::stats`] does not call it.
    pub fn disk_stats(&self) -> Result<RedbDiskStats> {
        let txn = self.db.begin_write().redb()?;
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

    /// Stores `stored` verbatim under `key`, bypassing the codec. **For corruption tests only.**
    ///
    /// The row is indexed at offset 0 — as if it had been written first and damaged since — so
    /// that any sweep with a non-zero threshold meets it, keeps it and counts it.
    #[cfg(any(test, feature = "testing"))]
    pub fn insert_raw(&self, key: &[u8], stored: &[u8]) -> Result<()> {
        validate_key(key)?;
        let mut txn = self.db.begin_write().redb()?;
        txn.set_durability(self.apply_durability()).redb()?;
        {
            let mut data = txn.open_table(DATA).redb()?;
            data.insert(key, stored).redb()?;
            let mut index = txn.open_table(BY_OFFSET).redb()?;
            index.insert(index_key(0, key).as_slice(), ()).redb()?;
        }
        txn.commit().redb()
    }

    fn file_bytes(&self) -> Result<u64> {
        Ok(std::fs::metadata(&self.file)?.len())
    }

    fn apply_durability(&self) -> Durability {
        if self.options.sync_writes {
            Durability::Immediate
        } else {
            Durability::None
        }
    }

    fn lock_writer(&self) -> Result<MutexGuard<'_, ()>> {
        // A poisoned lock means a panic mid-update; refuse rather than risk torn in-memory state.
        self.writer
            .lock()
            .map_err(|_| Error::Poisoned { what: "engine" })
    }

    /// Persists the watermark with an fsync before returning.
    fn persist_watermark(&self, w: u64) -> Result<()> {
        let txn = self.db.begin_write().redb()?; // Durability::Immediate is redb's default.
        put_meta(&txn, META_WATERMARK, w)?;
        txn.commit().redb()
    }

    /// An empty durable commit: makes earlier non-durable commits durable and lets redb reuse
    /// the pages they freed.
    fn durable_barrier(&self) -> Result<()> {
        let mut txn = self.db.begin_write().redb()?;
        txn.set_durability(Durability::Immediate).redb()?;
        txn.commit().redb()
    }

    /// Sweeps every index row below `threshold_of(W)`, reading `W` once under the reclaimer lock.
    /// Both [`Engine::reclaim`] and [`Engine::reclaim_below`] are this with a different threshold.
    fn reclaim_at(&self, threshold_of: impl FnOnce(u64) -> u64) -> Result<ReclaimReport> {
        let started = Instant::now();
        let _reclaimer = self
            .reclaimer
            .lock()
            .map_err(|_| Error::Poisoned { what: "engine" })?;
        // The threshold is fixed when the call starts; entries covered later wait for the next
        // reclaim. Writers are not held off: each chunk is its own short transaction.
        let threshold = threshold_of(self.watermark());
        let bytes_before = self.file_bytes()?;
        let chunker = RedbChunker { db: &self.db };
        let totals = sweeper::sweep(&chunker, threshold, self.options.sweep_chunk_rows)?;
        if totals.chunks > 0 {
            // One fsync for the whole sweep, which also releases the freed pages for reuse.
            self.durable_barrier()?;
        }
        let report = ReclaimReport {
            threshold,
            values_removed: totals.values_removed,
            tombstones_removed: totals.tombstones_removed,
            corrupt_kept: totals.corrupt_kept,
            bytes_before,
            bytes_after: self.file_bytes()?,
            duration: started.elapsed(),
        };
        if let Ok(mut last) = self.last_sweep.lock() {
            *last = Some(totals);
        }
        self.counters.record_reclaim(&report);
        tracing::debug!(
            file = %self.file.display(),
            threshold,
            rows_visited = totals.rows_visited,
            removed = report.removed(),
            stale_dropped = totals.stale_dropped,
            corrupt_kept = totals.corrupt_kept,
            "redb sweep finished"
        );
        Ok(report)
    }

    /// Index rows below `threshold`: an upper bound on covered entries (stale rows count too).
    fn count_index_below(&self, threshold: u64) -> Result<u64> {
        let txn = self.db.begin_read().redb()?;
        let index = txn.open_table(BY_OFFSET).redb()?;
        let upper = index_upper_bound(threshold);
        let mut count = 0u64;
        for row in index
            .range::<&[u8]>((Bound::Unbounded, Bound::Excluded(upper.as_slice())))
            .redb()?
        {
            row.redb()?;
            count += 1;
        }
        Ok(count)
    }
}

fn put_meta(txn: &WriteTransaction, name: &str, value: u64) -> Result<()> {
    let mut meta = txn.open_table(META).redb()?;
    meta.insert(name, encode_u64(value).as_slice()).redb()?;
    Ok(())
}

/// Reads a `meta` row; `None` when absent.
fn get_meta(txn: &WriteTransaction, name: &str) -> Result<Option<u64>> {
    let meta = txn.open_table(META).redb()?;
    let value = meta.get(name).redb()?;
    value.map(|v| decode_u64(name, v.value())).transpose()
}

/// State restored (or initialised) at open.
struct Restored {
    watermark: u64,
    applied_end: u64,
}

/// Creates the tables when missing, checks the format version and reads `W` and the applied end,
/// in one write transaction.
fn restore(db: &Database, file: &Path) -> Result<Restored> {
    let txn = db.begin_write().redb()?;
    // Opening the tables in a write transaction creates them on a fresh file.
    let fresh = {
        let data = txn.open_table(DATA).redb()?;
        let index = txn.open_table(BY_OFFSET).redb()?;
        data.is_empty().redb()? && index.is_empty().redb()?
    };
    match get_meta(&txn, META_FORMAT)? {
        Some(found) if found == 0 || found > u64::from(FORMAT_VERSION) => {
            return Err(Error::UnsupportedFormat {
                path: file.to_path_buf(),
                found: u32::try_from(found).unwrap_or(u32::MAX),
                supported: FORMAT_VERSION,
            });
        }
        Some(_) => {}
        None if fresh => put_meta(&txn, META_FORMAT, u64::from(FORMAT_VERSION))?,
        None => {
            return Err(Error::corrupt(
                format!("meta/{META_FORMAT}").as_bytes(),
                "the file holds data but no format version",
            ));
        }
    }
    let restored = Restored {
        watermark: get_meta(&txn, META_WATERMARK)?.unwrap_or(0),
        applied_end: get_meta(&txn, META_APPLIED_END)?.unwrap_or(0),
    };
    txn.commit().redb()?;
    Ok(restored)
}

impl OpenEngine for RedbEngine {
    fn open(path: &Path, options: EngineOptions) -> Result<Self> {
        // The marker check comes first so that a sled or RocksDB directory is reported as such
        // instead of redb creating its file beside the other engine's.
        layout::claim_directory(path, BACKEND)?;
        let file = path.join(DB_FILE);
        let db = Builder::new()
            .set_cache_size(CACHE_BYTES)
            .create(&file)
            .redb()?;
        let restored = restore(&db, &file)?;
        Ok(RedbEngine {
            db,
            file,
            options,
            writer: Mutex::new(()),
            reclaimer: Mutex::new(()),
            last_sweep: Mutex::new(None),
            progress: ProgressCell::new(restored.watermark, restored.applied_end),
            counters: Counters::default(),
        })
    }
}

impl Engine for RedbEngine {
    fn backend_name(&self) -> &'static str {
        BACKEND
    }

    fn apply(&self, batch: &WriteBatch) -> Result<ApplyOutcome> {
        let _writer = self.lock_writer()?;
        let applied_end = self.progress.applied_end();
        let plan = self.progress.plan_apply(batch)?;
        if !plan.writes.is_empty() || plan.advances(applied_end) {
            let mut txn = self.db.begin_write().redb()?;
            txn.set_durability(self.apply_durability()).redb()?;
            {
                let mut data = txn.open_table(DATA).redb()?;
                let mut index = txn.open_table(BY_OFFSET).redb()?;
                for record in &plan.writes {
                    let key = record.key();
                    data.insert(key, record.encoded_value().as_slice()).redb()?;
                    index
                        .insert(index_key(record.offset(), key).as_slice(), ())
                        .redb()?;
                }
            }
            // Same transaction as the rows: a crash can never separate them.
            put_meta(&txn, META_APPLIED_END, plan.outcome.applied_end)?;
            txn.commit().redb()?;
            self.progress.publish_applied_end(plan.outcome.applied_end);
        }
        self.counters.record_apply(&plan.outcome);
        Ok(plan.outcome)
    }

    fn lookup(&self, key: &[u8]) -> Result<LocalLookup> {
        validate_key(key)?;
        let txn = self.db.begin_read().redb()?;
        let data = txn.open_table(DATA).redb()?;
        match data.get(key).redb()? {
            Some(stored) => Ok(LocalLookup::from_decoded(codec::decode(
                key,
                stored.value(),
            )?)),
            None => Ok(LocalLookup::Miss),
        }
    }

    fn advance_watermark(&self, w: u64) -> Result<WatermarkUpdate> {
        let _writer = self.lock_writer()?;
        self.progress.advance(w, |v| self.persist_watermark(v))
    }

    fn adopt_lake_watermark(&self, lake_end: u64) -> Result<WatermarkUpdate> {
        let _writer = self.lock_writer()?;
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
        let live_entries = {
            let txn = self.db.begin_read().redb()?;
            let data = txn.open_table(DATA).redb()?;
            data.len().redb()?
        };
        Ok(EngineStats {
            watermark,
            applied_end: self.applied_end(),
            bytes_on_disk: self.file_bytes()?,
            live_entries,
            live_entries_exact: true,
            covered_estimate: self.count_index_below(threshold)?,
            counters: self.counters.snapshot(),
        })
    }

    fn flush(&self) -> Result<()> {
        // Always cheap enough, and it also covers the sweeper's and `insert_raw`'s commits.
        self.durable_barrier()
    }
}
