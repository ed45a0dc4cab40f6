//! The one skeleton every disk backend shares: [`DiskEngine`] implements the whole [`Engine`]
//! contract over a backend's [`Storage`] primitives.
//!
//! What lives here once: the writer lock (apply and watermark changes see one `W` and applied
//! end from plan to publish), the reclaimer lock (one reclaim at a time, so reports are not split
//! between two sweeps of the same rows), the [`ProgressCell`] that publishes `W` only once it is
//! durable, restoring and checking the metadata at open, the counters, report and statistics
//! assembly, and the containment of every storage call (a panic of the storage engine is an
//! error, never an unwind through a lock; one in a call that writes fails the store). A backend
//! supplies only how to store (see [`Storage`]).

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::Instant;

use crate::contain::{catch_panic, contained};
use crate::context::BackendContext;
use crate::layout;
use crate::sweeper::SweepTotals;
use crate::turns::WriterTurns;
use tidemark_engine_api::EngineOptions;
use tidemark_engine_api::codec;
use tidemark_engine_api::covered::{self, CoveredRuns};
use tidemark_engine_api::sync;
use tidemark_engine_api::watermark::{self, ProgressCell, reclaim_threshold};
use tidemark_engine_api::{ApplyOutcome, LocalLookup, ReclaimReport, WatermarkUpdate};
use tidemark_engine_api::{CounterSnapshot, EngineCounters, EngineStats, Reclaimable};
use tidemark_engine_api::{Engine, OpenEngine};
use tidemark_engine_api::{Error, Result};
use tidemark_engine_api::{Verifier, VerifyReport};
use tidemark_engine_api::{WriteBatch, validate_key};

use crate::layout::high_water::{self, HighWater};
use crate::meta::{self, MetaKey};
use crate::storage::{CommitRequest, ReclaimRequest, Storage, StorageInit};

/// The [`Engine`] contract over a backend's [`Storage`]: the engine of every disk backend.
///
/// A backend's own diagnostics are methods of its storage, reached with
/// [`DiskEngine::storage`].
///
/// Every call into the storage runs contained ([`crate::contain`]), inside the locks it needs,
/// so a panic of the storage engine never unwinds through a lock guard (nothing is poisoned)
/// and never reaches the caller: a read that panics is [`Error::Backend`]; a call that may
/// write and panics may have left its write half done, so the engine *fails*: that call and
/// every later write, watermark change, reclaim and flush return [`Error::StoreFailed`] until
/// the store is reopened, while lookups and statistics keep working. Backend diagnostics reach
/// the storage the same way, through [`DiskEngine::read_storage`] and
/// [`DiskEngine::write_storage`].
pub struct DiskEngine<S: Storage> {
    storage: S,
    dir: PathBuf,
    options: EngineOptions,
    progress: ProgressCell,
    /// Serialises `apply`, `advance_watermark`, `adopt_lake_watermark` and raw writes: a plan
    /// reads `W` and the applied end, which must not change before it is committed.
    writer: Mutex<()>,
    /// Serialises reclaims (never held by writers).
    reclaimer: Mutex<()>,
    /// Writers announce themselves here once they hold `writer`, so a sweep lets them commit
    /// between two of its chunks instead of starving them (see [`crate::turns`]).
    turns: WriterTurns,
    last_sweep: Mutex<Option<SweepTotals>>,
    /// Covered entries and bytes, kept incrementally and persisted with the commits (see
    /// [`tidemark_engine_api::covered`]).
    covered: Mutex<CoveredRuns>,
    /// The last high-water record written (or found at open); its lock also serialises the
    /// writes of the record file.
    high_water: Mutex<HighWater>,
    /// At least `1 +` every tag stored: raised *before* a commit can make a write visible, so a
    /// lookup that reads the bound after the value never sees a tag above it unless the entry
    /// is damaged (the applied end itself is published only after the commit).
    tag_bound: AtomicU64,
    /// Set when the storage panicked during a call that may write: see [`Error::StoreFailed`].
    failed: AtomicBool,
    counters: EngineCounters,
}

impl<S: Storage> fmt::Debug for DiskEngine<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DiskEngine")
            .field("backend", &S::BACKEND)
            .field("dir", &self.dir)
            .field("watermark", &self.progress.watermark())
            .field("applied_end", &self.progress.applied_end())
            .finish_non_exhaustive()
    }
}

impl<S: Storage> DiskEngine<S> {
    /// Opens the bucket at `path` with the settings of `context` (creating it when missing,
    /// unless `options.open_mode` says otherwise), taking a place in the context's bucket
    /// budget first ([`BackendContext::admit`]: beyond it
    /// [`Error::ResourceLimit`], and nothing is created), then the storage with
    /// [`Storage::open`]: claims the directory for `S::BACKEND` (creating it when missing; another
    /// backend's directory, a foreign one or a newer format is refused before anything is
    /// written), opens the storage, then checks the format version (or writes it, durably, for a
    /// new store) and restores `W` and the applied end.
    ///
    /// With an [`OpenMode`](tidemark_engine_api::OpenMode) that does not create, the
    /// directory must already hold a store of `S::BACKEND` ([`layout::check_directory`]: nothing is
    /// created); with [`OpenMode::ReadOnly`](tidemark_engine_api::OpenMode::ReadOnly)
    /// nothing is written, not even the format version of a store that lacks one, and every write
    /// is refused with [`Error::ReadOnly`].
    pub fn open_in(context: &S::Context, path: &Path, options: EngineOptions) -> Result<Self> {
        let lease = context.admit(path)?;
        Self::open_with(path, options, |init| S::open(context, init, lease))
    }

    /// Removes the closed bucket at `path` for good: what its storage keeps outside the
    /// directory ([`Storage::remove`]: its rows in a shared instance), then the directory. A
    /// directory that is not a store of `S::BACKEND` is refused and left as it is. An
    /// interrupted removal leaves a bucket that no longer opens ([`Error::Damaged`]) and that a
    /// second removal finishes.
    pub fn remove_in(context: &S::Context, path: &Path) -> Result<()> {
        layout::check_directory(path, S::BACKEND)?;
        S::remove(context, path)?;
        std::fs::remove_dir_all(path)?;
        Ok(())
    }

    /// [`DiskEngine::open_in`] with the storage opened by `open`; an engine that panics on its
    /// own damaged files fails the open with an error.
    fn open_with(
        dir: &Path,
        options: EngineOptions,
        open: impl FnOnce(StorageInit<'_>) -> Result<S>,
    ) -> Result<Self> {
        contained(S::BACKEND, "open", || {
            Self::open_contained(dir, options, open)
        })
    }

    fn open_contained(
        dir: &Path,
        options: EngineOptions,
        open: impl FnOnce(StorageInit<'_>) -> Result<S>,
    ) -> Result<Self> {
        layout::open_directory(dir, S::BACKEND, options.open_mode)?;
        let recorded = high_water::read(dir)?;
        let progress = ProgressCell::default();
        let storage = open(StorageInit {
            dir,
            options: &options,
            recorded,
            watermark: progress.watermark_handle(),
        })?;
        let read = |key: MetaKey| -> Result<Option<u64>> {
            storage
                .read_meta(key)?
                .map(|bytes| meta::decode_u64(key, &bytes))
                .transpose()
        };
        let restored = meta::restore(
            dir,
            read(MetaKey::FormatVersion)?,
            read(MetaKey::Watermark)?,
            read(MetaKey::AppliedEnd)?,
            storage.holds_data()?,
        )?;
        let reached = HighWater {
            watermark: restored.watermark,
            applied_end: restored.applied_end,
        };
        if let Some(record) = &recorded {
            record.check(dir, &reached)?;
        }
        let writes = options.open_mode.writes();
        if writes && restored.format < u64::from(codec::FORMAT_VERSION) {
            // A new store, or one an older build wrote (its entries stay readable): from here
            // on it holds this build's format, and an older build refuses it.
            // The marker first: a crash in between leaves the meta version to upgrade again.
            if !restored.fresh {
                layout::upgrade_marker(dir, S::BACKEND)?;
            }
            storage.persist_meta(MetaKey::FormatVersion, u64::from(codec::FORMAT_VERSION))?;
        }
        if writes && recorded.is_none_or(|r| r != reached) {
            // Recorded only once the engine holds it durably (a restored state may have been
            // replayed from a log that was never synced).
            storage.flush()?;
            high_water::write(dir, &reached)?;
        }
        // Nothing reads the cell before `open` returns but the storage's own readers, which
        // must see the restored (durable) watermark from here on.
        progress.restore(restored.watermark, restored.applied_end);
        let covered = restore_covered(&storage, dir, restored.applied_end, writes)?;
        Ok(DiskEngine {
            storage,
            dir: dir.to_path_buf(),
            options,
            progress,
            writer: Mutex::new(()),
            turns: WriterTurns::default(),
            reclaimer: Mutex::new(()),
            last_sweep: Mutex::new(None),
            covered: Mutex::new(covered),
            high_water: Mutex::new(recorded.unwrap_or_default().max(&reached)),
            tag_bound: AtomicU64::new(restored.applied_end),
            failed: AtomicBool::new(false),
            counters: EngineCounters::default(),
        })
    }

    /// Writes the high-water record for `reached`, a state the storage holds durably, unless
    /// the record already covers it (it never moves back).
    fn record_high_water(&self, reached: HighWater) -> Result<()> {
        let mut last = sync::lock(&self.high_water, "engine high-water record")?;
        if last.covers(&reached) {
            return Ok(());
        }
        let next = last.max(&reached);
        high_water::write(&self.dir, &next)?;
        *last = next;
        Ok(())
    }

    /// The positions the engine has published (every one of them durable once the storage has
    /// been flushed or `W` persisted).
    fn reached(&self) -> HighWater {
        HighWater {
            watermark: self.progress.watermark(),
            applied_end: self.progress.applied_end(),
        }
    }

    /// The local lookup of `key` from its stored bytes: decoded, checksum verified, and a tag at
    /// or above every applied end refused as [`Error::Corrupt`]. The bound is read after the
    /// value, so a value just committed is always below it.
    fn decode_lookup(&self, key: &[u8], stored: Option<&[u8]>) -> Result<LocalLookup> {
        match stored {
            Some(bytes) => {
                let bound = self.tag_bound.load(Ordering::SeqCst);
                Ok(LocalLookup::from_decoded(codec::decode_applied(
                    key, bytes, bound,
                )?))
            }
            None => Ok(LocalLookup::Miss),
        }
    }

    /// The backend's storage, for what a backend reads of its own (paths, counters, its
    /// context). A call into the storage engine goes through [`DiskEngine::read_storage`] or
    /// [`DiskEngine::write_storage`] instead, so that its panic is contained.
    pub fn storage(&self) -> &S {
        &self.storage
    }

    /// The bucket directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The options the engine was opened with.
    pub fn options(&self) -> &EngineOptions {
        &self.options
    }

    /// Whether the store has failed (its storage panicked during a write, or refuses writes
    /// itself, [`Storage::check_usable`]): every write is [`Error::StoreFailed`] until it is
    /// reopened.
    pub fn is_failed(&self) -> bool {
        self.check_usable().is_err()
    }

    /// Row-level detail of the most recent reclaim of a sweeper storage (`None` before the first
    /// one, and always on storages that do not sweep): index rows visited, stale rows dropped,
    /// chunks committed.
    pub fn last_sweep(&self) -> Option<SweepTotals> {
        self.last_sweep.lock().ok().and_then(|g| *g)
    }

    /// Runs `f`, a backend's `operation` that writes (a manual compaction, for example), on the
    /// storage under the reclaimer lock, so it never interleaves with a reclaim; as
    /// [`DiskEngine::write_storage`].
    pub fn with_reclaimer<T>(
        &self,
        operation: &'static str,
        f: impl FnOnce(&S) -> Result<T>,
    ) -> Result<T> {
        let _reclaimer = self.lock_reclaimer()?;
        self.write_storage(operation, f)
    }

    /// Runs `f`, a backend's `operation` that only reads its storage (a diagnostic), contained:
    /// a panic of the storage engine is [`Error::Backend`].
    pub fn read_storage<T>(
        &self,
        operation: &'static str,
        f: impl FnOnce(&S) -> Result<T>,
    ) -> Result<T> {
        contained(S::BACKEND, operation, || f(&self.storage))
    }

    /// Runs `f`, a backend's `operation` that may write to its storage, as the skeleton runs its
    /// own writes: refused on a read-only or failed store ([`Error::ReadOnly`],
    /// [`Error::StoreFailed`]), and contained: a panic of the storage engine fails the store.
    pub fn write_storage<T>(
        &self,
        operation: &'static str,
        f: impl FnOnce(&S) -> Result<T>,
    ) -> Result<T> {
        self.check_writable(operation)?;
        self.contain_write(operation, f)
    }

    /// A storage call of the skeleton's that may write: contained, and a panic fails the store
    /// (that call returns [`Error::StoreFailed`] with the panic as its cause). The caller has
    /// checked [`DiskEngine::check_writable`] and holds whatever lock the call needs: the panic
    /// is caught before the unwind reaches the guard.
    pub(crate) fn contain_write<T>(
        &self,
        operation: &'static str,
        f: impl FnOnce(&S) -> Result<T>,
    ) -> Result<T> {
        match catch_panic(S::BACKEND, operation, || f(&self.storage)) {
            Ok(result) => result,
            Err(panic) => Err(self.fail(operation, panic)),
        }
    }

    /// Fails the store after its storage panicked during `operation` (a call that may have left
    /// a write half done): every later write, watermark change, reclaim and flush is refused
    /// until the store is reopened. Returns the error of the call that failed it.
    fn fail(&self, operation: &'static str, panic: Error) -> Error {
        if !self.failed.swap(true, Ordering::AcqRel) {
            tracing::error!(backend = S::BACKEND, dir = %self.dir.display(), operation,
                error = %panic,
                "the storage engine panicked during a write; the store must be reopened");
        }
        Error::store_failed(&self.dir, Some(Box::new(panic)))
    }

    /// Makes `watermark` durable in the storage (with every earlier commit). Called under the
    /// writer lock, so the applied end cannot move meanwhile.
    fn persist_watermark(&self, watermark: u64) -> Result<()> {
        self.contain_write("the watermark write", |s| {
            s.persist_meta(MetaKey::Watermark, watermark)
        })
    }

    /// A watermark change, `change` run under the writer lock (announced to a sweep in progress,
    /// so it waits for one chunk at most). Before the lock, when `plan` (the change's own
    /// arithmetic, over `W` and the applied end as they are now) says `W` will move, the storage
    /// writes back what it buffered ([`Storage::prepare_durable`]) while writers go on; after
    /// it, the high-water record is written, so its two fsyncs do not hold writers up either.
    fn change_watermark(
        &self,
        operation: &'static str,
        plan: impl FnOnce(u64, u64) -> WatermarkUpdate,
        change: impl FnOnce() -> Result<WatermarkUpdate>,
    ) -> Result<WatermarkUpdate> {
        self.check_writable(operation)?;
        if plan(self.progress.watermark(), self.progress.applied_end()).moved
            && let Err(e) = self.contain_write("writing back before a watermark change", |s| {
                s.prepare_durable()
            })
        {
            // A panic there failed the store: the caller gets the error that carries it.
            if matches!(e, Error::StoreFailed { .. }) {
                return Err(e);
            }
            tracing::debug!(backend = S::BACKEND, dir = %self.dir.display(), error = %e,
                "writing back before a watermark change failed; the durable write will retry");
        }
        let (update, applied_end) = {
            let _writer = self.lock_writer()?;
            let _turn = self.turns.announce();
            self.check_writable(operation)?;
            let applied_end = self.progress.applied_end();
            (change()?, applied_end)
        };
        if update.moved {
            // `W` is durable in the store now (and every commit below `applied_end` with it), so
            // the call must report it moved and publish it (a failure here would tell the caller
            // "not moved" about a `W` a reopen shows, and let a smaller advance write it
            // backwards). The record is only a lower bound checked at open: a failed write keeps
            // the previous one, and the next watermark change, flush or close writes it again. A
            // concurrent change that recorded a higher state first makes this one a no-op.
            let recorded = self.record_high_water(HighWater {
                watermark: update.current,
                applied_end,
            });
            if let Err(e) = recorded {
                tracing::warn!(backend = S::BACKEND, dir = %self.dir.display(), error = %e,
                    "could not write the high-water record after a watermark change; kept the previous one");
            }
        }
        Ok(update)
    }

    /// Refuses `operation` on a store opened read-only, one whose storage panicked during a
    /// write, or one whose storage can no longer promise durability ([`Storage::check_usable`]).
    pub(crate) fn check_writable(&self, operation: &'static str) -> Result<()> {
        if !self.options.open_mode.writes() {
            return Err(Error::ReadOnly {
                path: self.dir.clone(),
                operation,
            });
        }
        self.check_usable()
    }

    /// Refuses with [`Error::StoreFailed`] once the store has failed, here or in its storage.
    fn check_usable(&self) -> Result<()> {
        if self.failed.load(Ordering::Acquire) {
            return Err(Error::store_failed(&self.dir, None));
        }
        contained(S::BACKEND, "a usability check", || {
            self.storage.check_usable()
        })
    }

    pub(crate) fn lock_writer(&self) -> Result<MutexGuard<'_, ()>> {
        sync::lock(&self.writer, "engine writer")
    }

    fn lock_reclaimer(&self) -> Result<MutexGuard<'_, ()>> {
        sync::lock(&self.reclaimer, "engine reclaimer")
    }

    fn lock_covered(&self) -> Result<MutexGuard<'_, CoveredRuns>> {
        sync::lock(&self.covered, "engine covered runs")
    }

    fn threshold(&self) -> u64 {
        reclaim_threshold(self.progress.watermark(), self.options.retention_distance)
    }

    /// The reclaim shared by `reclaim` and `reclaim_below`: the threshold is fixed when the call
    /// starts (entries covered later wait for the next reclaim).
    fn reclaim_at(
        &self,
        purge: bool,
        threshold_of: impl FnOnce(u64) -> u64,
    ) -> Result<ReclaimReport> {
        self.check_writable(if purge { "reclaim_below" } else { "reclaim" })?;
        let _reclaimer = self.lock_reclaimer()?;
        let started = Instant::now();
        let threshold = threshold_of(self.progress.watermark());
        let work = self.contain_write("reclaim", |s| {
            s.reclaim(ReclaimRequest {
                threshold,
                purge,
                turns: &self.turns,
                on_chunk: None,
            })
        })?;
        let rows = self.lock_covered()?.reclaimed(threshold);
        if let Err(e) =
            self.contain_write("trimming the covered runs", |s| s.write_meta_rows(&rows))
        {
            // A panic there failed the store: the caller gets the error that carries it.
            if matches!(e, Error::StoreFailed { .. }) {
                return Err(e);
            }
            // The reclaim itself succeeded; stale rows only make the estimate high after a
            // reopen, until the next reclaim trims them again.
            tracing::warn!(backend = S::BACKEND, dir = %self.dir.display(), error = %e,
                "could not trim the persisted covered runs");
        }
        let report = ReclaimReport {
            threshold,
            values_removed: work.values_removed,
            tombstones_removed: work.tombstones_removed,
            corrupt_kept: work.corrupt_kept,
            bytes_before: work.bytes_before,
            bytes_after: work.bytes_after,
            bytes_rewritten: work.bytes_rewritten,
            duration: started.elapsed(),
        };
        self.counters.record_reclaim(&report);
        if work.sweep.is_some() {
            *sync::lock(&self.last_sweep, "last sweep")? = work.sweep;
        }
        tracing::debug!(
            backend = S::BACKEND,
            dir = %self.dir.display(),
            threshold,
            purge,
            removed = report.removed(),
            corrupt_kept = report.corrupt_kept,
            rows_visited = work.sweep.map(|s| s.rows_visited),
            stale_dropped = work.sweep.map(|s| s.stale_dropped),
            took_ms = report.duration.as_millis(),
            "reclaim finished"
        );
        Ok(report)
    }
}

impl<S: Storage> Drop for DiskEngine<S> {
    /// Closes a writable store cleanly: [`Storage::close`] (RocksDB flushes its memtables, so a
    /// clean close does not depend on its log), then the high-water record. Failures are logged:
    /// the store then reopens from what was durable, which the record still bounds.
    fn drop(&mut self) {
        if !self.options.open_mode.writes() || self.check_usable().is_err() {
            return;
        }
        let reached = self.reached();
        if let Err(e) = self
            .contain_write("close", |s| s.close())
            .and_then(|()| self.record_high_water(reached))
        {
            tracing::warn!(backend = S::BACKEND, dir = %self.dir.display(), error = %e,
                "closing the store: flush or high-water record failed");
        }
    }
}

impl<S: Storage> OpenEngine for DiskEngine<S> {
    /// Opens from the backend's process-wide default context ([`BackendContext::global`]).
    fn open(path: &Path, options: EngineOptions) -> Result<Self> {
        Self::open_in(&S::Context::global()?, path, options)
    }
}

impl<S: Storage> Engine for DiskEngine<S> {
    fn backend_name(&self) -> &'static str {
        S::BACKEND
    }

    fn reclaim_cost(&self) -> tidemark_engine_api::ReclaimCost {
        S::RECLAIM_COST
    }

    fn apply(&self, batch: &WriteBatch) -> Result<ApplyOutcome> {
        let _writer = self.lock_writer()?;
        // Announced once it holds the lock: only the holder competes with a sweep for the
        // storage, and a writer queued behind `verify` must not hold a sweep up.
        let _turn = self.turns.announce();
        // Before planning: once a storage cannot promise durability, "already applied" cannot be
        // trusted to mean "durable".
        self.check_writable("apply")?;
        let applied_end = self.progress.applied_end();
        let plan = self.progress.plan_apply(batch)?;
        if plan.advances(applied_end) {
            let sync = self.options.sync_writes;
            // Recorded before the commit: if the commit fails the estimate is high, never low.
            let rows = self.lock_covered()?.record_writes(&plan.writes);
            self.tag_bound
                .fetch_max(plan.outcome.applied_end, Ordering::SeqCst);
            self.contain_write("commit", |s| {
                s.commit(CommitRequest {
                    writes: &plan.writes,
                    applied_end: plan.outcome.applied_end,
                    rows: &rows,
                    sync,
                })
            })?;
            // Committed and visible: publish before `after_commit`, so memory matches storage
            // even when making it durable fails (which then fails the storage).
            self.progress.publish_applied_end(plan.outcome.applied_end);
            self.counters.record_apply(&plan.outcome);
            self.contain_write("the flush after a commit", |s| s.after_commit(sync))?;
        } else {
            // Every record was covered or already applied: nothing to write.
            self.counters.record_apply(&plan.outcome);
        }
        Ok(plan.outcome)
    }

    fn lookup(&self, key: &[u8]) -> Result<LocalLookup> {
        validate_key(key)?;
        contained(S::BACKEND, "lookup", || {
            self.storage
                .get(key, |stored| self.decode_lookup(key, stored))
        })
    }

    fn lookup_inline(&self, key: &[u8]) -> Result<Option<LocalLookup>> {
        validate_key(key)?;
        contained(S::BACKEND, "lookup", || {
            self.storage
                .get_inline(key, |stored| self.decode_lookup(key, stored))
        })
    }

    fn advance_watermark(&self, w: u64) -> Result<WatermarkUpdate> {
        // Durable before the cell publishes it (and before any filter or sweep can act on it),
        // and recorded outside the engine once durable.
        self.change_watermark(
            "advance_watermark",
            |current, applied_end| watermark::plan_advance(current, applied_end, w),
            || self.progress.advance(w, |v| self.persist_watermark(v)),
        )
    }

    fn adopt_lake_watermark(&self, lake_end: u64) -> Result<WatermarkUpdate> {
        self.change_watermark(
            "adopt_lake_watermark",
            |current, _| watermark::plan_adopt(current, lake_end),
            || self.progress.adopt(lake_end, |v| self.persist_watermark(v)),
        )
    }

    fn watermark(&self) -> u64 {
        self.progress.watermark()
    }

    fn applied_end(&self) -> u64 {
        self.progress.applied_end()
    }

    fn reclaim(&self) -> Result<ReclaimReport> {
        let distance = self.options.retention_distance;
        self.reclaim_at(false, |w| reclaim_threshold(w, distance))
    }

    fn reclaim_below(&self, threshold: u64) -> Result<ReclaimReport> {
        self.reclaim_at(true, |w| threshold.min(w))
    }

    fn stats(&self) -> Result<EngineStats> {
        let watermark = self.progress.watermark();
        let (live, bytes_on_disk) = contained(S::BACKEND, "stats", || {
            Ok((self.storage.live_entries()?, self.storage.bytes_on_disk()?))
        })?;
        Ok(EngineStats {
            watermark,
            applied_end: self.progress.applied_end(),
            bytes_on_disk,
            live_entries: live.count,
            live_entries_exact: live.exact,
            covered_estimate: self.lock_covered()?.below(self.threshold()).entries,
            counters: CounterSnapshot {
                space_rebuilds: self.storage.space_rebuilds(),
                ..self.counters.snapshot()
            },
        })
    }

    fn reclaimable(&self) -> Result<Reclaimable> {
        let threshold = self.threshold();
        Ok(self.lock_covered()?.reclaimable(threshold))
    }

    fn flush(&self) -> Result<()> {
        self.check_writable("flush")?;
        // Read before the flush: what it makes durable.
        let reached = self.reached();
        self.contain_write("flush", |s| s.flush())?;
        self.record_high_water(reached)
    }

    fn wait_for_background_work(&self) -> Result<()> {
        contained(S::BACKEND, "wait_for_background_work", || {
            self.storage.wait_for_background_work()
        })
    }

    fn verify(&self) -> Result<VerifyReport> {
        // Both locks, so no apply, watermark change or sweep chunk commits between the rows the
        // storage reads: a live engine is checked as one consistent state, not a mix.
        let _writer = self.lock_writer()?;
        let _reclaimer = self.lock_reclaimer()?;
        let mut verifier = Verifier::new(
            S::BACKEND,
            self.progress.watermark(),
            self.progress.applied_end(),
        );
        contained(S::BACKEND, "verify", || self.storage.verify(&mut verifier))?;
        Ok(verifier.finish())
    }
}

/// The covered runs of a store being opened: its persisted rows, or, when it has none (written
/// before runs were persisted) or a damaged one, an upper bound over `[0, applied end)` that is
/// persisted at once (unless the store is opened read-only: then it is only held in memory).
fn restore_covered<S: Storage>(
    storage: &S,
    dir: &Path,
    applied_end: u64,
    writes: bool,
) -> Result<CoveredRuns> {
    let rows = storage.read_meta_rows(covered::ROW_PREFIX)?;
    let names: Vec<String> = rows.iter().map(|(name, _)| name.clone()).collect();
    if let Some(runs) = CoveredRuns::restore(rows) {
        if !names.is_empty() || applied_end == 0 {
            return Ok(runs);
        }
    } else {
        tracing::warn!(backend = S::BACKEND, dir = %dir.display(),
            "damaged covered-run rows; estimating covered entries from the store's size");
    }
    let live = storage.live_entries()?;
    let (runs, mut rows) = CoveredRuns::seeded(applied_end, live.count, storage.bytes_on_disk()?);
    if !writes {
        return Ok(runs);
    }
    // Replace whatever rows were there (damaged ones included) with the seed.
    rows.splice(
        0..0,
        names
            .into_iter()
            .map(|name| covered::MetaRow { name, value: None }),
    );
    storage.write_meta_rows(&rows)?;
    Ok(runs)
}
