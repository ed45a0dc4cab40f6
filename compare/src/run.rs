//! One run: a backend and a [`Variant`] take the stream for the configured duration.
//!
//! Four tasks share the bucket: the **writer** appends every batch to the [`StreamLake`] (the
//! lake's input and the model) before it applies it at the target rate (each apply timed, and
//! marked when a reclaim ran during it); the **lake** commits a snapshot every `lake_interval`,
//! trailing the acknowledged end by a lag drawn afresh each time (never zero, so the lake end never
//! equals the local end while writing) and reports it as the variant does; the **reader** looks up
//! keys written so far at its own rate and checks every answer against the model; the **sampler**
//! records bytes on disk, `W` and the ends. When the writer is done every key written is looked up
//! once more and must answer its final state.
//!
//! Nothing a run holds grows with its length but its series (one point per sample, per p99
//! window and per reclaim, and the intervals grow with `--duration`): latencies go into
//! fixed-size histograms and per-window p99s computed as each window closes, the model keeps each
//! key's newest offset plus the window the lake has not absorbed, and the window's byte counts
//! are forgotten as the lake absorbs them.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use indicatif::ProgressBar;
use tidemark::{
    Backend, BackendConfig, BucketId, BucketStats, Engine as _, EngineHandle, EngineOptions,
    HistoricalBucket, LakeLookuper, LakeSnapshot, ReclaimScheduler,
};
use tidemark_test_support::observe::{Observed, ReclaimLog};
use tidemark_test_support::rng::SplitMix64;
use tidemark_test_support::stream::{RecordStream as _, SeededStream};
use tokio::sync::{RwLock, watch};
use tokio::task::JoinHandle;

use super::config::{CompareConfig, Variant};
use super::histogram::Histogram;
use super::lake::StreamLake;
use super::latency::{Latencies, Recorder};
use super::reclaims::{self, ReclaimRun};
use super::store_dirs::remove_store;
use super::tiering::{Maintenance, Tiering};
use super::timed_lake::TimedLake;
use super::window::WindowBytes;
use crate::{Error, Result, units};

/// What a run is given.
#[derive(Clone)]
pub struct RunSetup {
    /// The backend.
    pub backend: Backend,
    /// How it cleans up.
    pub variant: Variant,
    /// The workload.
    pub config: CompareConfig,
    /// The contexts every store of the comparison opens with.
    pub backends: BackendConfig,
    /// The bucket directory (removed and created again by an all-or-nothing rebuild).
    pub dir: PathBuf,
    /// The lake table's directory (`--lake iceberg`; empty or missing).
    pub lake_dir: PathBuf,
    /// Shows the run's progress (hidden when stderr is not a terminal, and in tests).
    pub progress: ProgressBar,
    /// Wraps every engine the run opens (`None` in real runs: tests put an engine that lies
    /// under the bucket to show the checks catch it).
    pub wrap: Option<fn(EngineHandle) -> EngineHandle>,
}

/// The store at one moment.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StateSample {
    /// Since the run started.
    pub at: Duration,
    /// Bytes on disk, as the backend measures them.
    pub bytes_on_disk: u64,
    /// Bytes of the records the lake has not absorbed: offsets from the lake's end to the
    /// applied end.
    pub window_bytes: u64,
    /// `W`.
    pub watermark: u64,
    /// The applied end.
    pub applied_end: u64,
    /// The end offset of the lake's latest snapshot.
    pub lake_end: u64,
    /// Values plus tombstones stored (an estimate on RocksDB).
    pub live_entries: u64,
    /// The engine's rebuilds that gave space back so far (sled's fresh databases, redb's
    /// compactions; `CounterSnapshot::space_rebuilds`).
    pub space_rebuilds: u64,
}

/// The store once the lake has covered everything it holds and one reclaim has run (Tidemark
/// runs, after the final check).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Drained {
    /// Bytes on disk once the engine's background space work finished.
    pub bytes_on_disk: u64,
    /// Values plus tombstones left (an estimate on RocksDB).
    pub live_entries: u64,
    /// The engine's rebuilds that gave space back, from the start of the run.
    pub space_rebuilds: u64,
}

/// Everything a run measured; `report` turns it into figures.
#[derive(Debug, Clone)]
pub struct RunOutcome {
    /// The backend.
    pub backend: Backend,
    /// The variant.
    pub variant: Variant,
    /// Records written.
    pub records: u64,
    /// From the first apply to the end of the last.
    pub elapsed: Duration,
    /// Time spent inside `apply`, summed.
    pub apply_time: Duration,
    /// The furthest the writer fell behind its schedule.
    pub max_behind: Duration,
    /// Every apply (waiting for the bucket included), and the p99 per window.
    pub writes: Latencies,
    /// The applies during which a reclaim ran.
    pub writes_during_reclaims: Histogram,
    /// The applies during which none ran.
    pub writes_outside_reclaims: Histogram,
    /// Every lookup of the reader, and the p99 per window.
    pub lookups: Latencies,
    /// Lookups checked against the model, while writing and at the end.
    pub checked: u64,
    /// Answers that were not a state the key had (must be 0).
    pub mismatches: u64,
    /// Lookups that returned an error (must be 0).
    pub lookup_errors: u64,
    /// The first few mismatches and errors, described.
    pub problems: Vec<String>,
    /// Lookups the reader skipped because it fell more than its catch-up limit behind.
    pub lookups_skipped: u64,
    /// The store over time, the last sample taken when the writer finished.
    pub samples: Vec<StateSample>,
    /// Every reclaim the scheduler ran.
    pub reclaims: Vec<ReclaimRun>,
    /// Lake snapshots committed.
    pub lake_commits: u64,
    /// How long each `on_lake_progress` took (Tidemark and scheduler-off runs).
    pub notifications: Histogram,
    /// All-or-nothing rebuilds (the lake end equalled the applied end).
    pub rebuilds: u64,
    /// Offsets the model held in full when the writer finished (the rest: one per key).
    pub unsettled_offsets: u64,
    /// The bucket's counters when the writer finished, its lookup counts (local values, local
    /// tombstones, lake fallbacks) summed over every store of the run: an all-or-nothing rebuild
    /// starts a bucket with counters of its own.
    pub bucket: BucketStats,
    /// Bytes on disk of the new store before anything was written (the engine's fixed
    /// footprint).
    pub empty_store: u64,
    /// Every lookup call the bucket made to the lake (local misses; a `lookup_many` counts
    /// once), and the keys they asked for.
    pub lake_lookups: Histogram,
    /// See `lake_lookups`.
    pub lake_lookup_keys: u64,
    /// What the lake table's maintenance did (nothing for the memory lake).
    pub maintenance: Maintenance,
    /// The store drained by the lake (Tidemark runs).
    pub drained: Option<Drained>,
    /// Bytes on disk of a fresh store of the same engine holding exactly the window the lake had
    /// not absorbed when the writer finished, written once (Tidemark runs; [`crate::floor`]).
    pub floor: Option<u64>,
}

/// Problems described in full; the rest are only counted.
const PROBLEMS_KEPT: usize = 5;
/// A reader further behind its schedule than this skips ahead rather than hog a core.
const READER_CATCH_UP: Duration = Duration::from_millis(100);
/// Keys per `lookup_many` call of the final check.
const FINAL_CHECK_CHUNK: usize = 512;
/// Snapshots the lake keeps (each holds the lake's whole key → value map).
const LAKE_SNAPSHOTS_KEPT: usize = 4;
/// Salts of the lake's and the reader's generators.
const LAKE_SALT: u64 = 0x1a4e;
const READER_SALT: u64 = 0x4ead;

/// Runs one backend and variant on a runtime of its own.
pub fn run(setup: RunSetup) -> Result<RunOutcome> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| Error::Harness(format!("cannot start the run's runtime: {e}")))?;
    runtime.block_on(run_async(setup))
}

/// The offsets that are written and acknowledged, and the lake's end.
#[derive(Debug, Default)]
struct Ends {
    /// Every record below it has been applied and acknowledged.
    acked: AtomicU64,
    /// Records below it are applied or being applied.
    applying: AtomicU64,
    /// The end offset of the lake's latest snapshot.
    lake: AtomicU64,
}

/// What every task of a run shares.
struct Shared {
    setup: RunSetup,
    stream: SeededStream,
    slot: Slot,
    /// The model of the run, and its lake when the lake is the memory one.
    lake: Arc<StreamLake>,
    /// Where records go past the model (a real table for `--lake iceberg`).
    tiering: Tiering,
    /// The bucket's lake lookuper, timed.
    lookuper: Arc<TimedLake>,
    log: Arc<ReclaimLog>,
    ends: Ends,
    /// Bytes of the records from the lake's end on (written by the writer, read and trimmed by
    /// one sample at a time).
    window_bytes: Mutex<WindowBytes>,
    origin: Instant,
}

impl Shared {
    fn window_bytes(&self) -> MutexGuard<'_, WindowBytes> {
        // Nothing panics while it is held; poisoned sums are still whole.
        self.window_bytes
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

async fn run_async(setup: RunSetup) -> Result<RunOutcome> {
    let config = setup.config.clone();
    let stream = SeededStream::new(
        config.seed,
        config.keys,
        config.delete_percent,
        config.value_size,
    );
    let lake = Arc::new(StreamLake::new(stream.clone(), LAKE_SNAPSHOTS_KEPT));
    let tiering = Tiering::open(
        config.lake,
        &setup.lake_dir,
        &config.lake_site,
        LAKE_SNAPSHOTS_KEPT,
    )
    .await?;
    let lookuper = Arc::new(TimedLake::new(tiering.lookuper(&lake)));
    let scheduler = match setup.variant {
        Variant::Tidemark => Some(ReclaimScheduler::new(config.scheduler.clone())?),
        Variant::SchedulerOff | Variant::NoCleanup | Variant::AllOrNothing => None,
    };
    let log = Arc::new(ReclaimLog::default());
    let slot = Slot {
        bucket: RwLock::new(None),
        backend: setup.backend,
        dir: setup.dir.clone(),
        options: match config.sweep_chunk_rows {
            Some(rows) => EngineOptions::default().with_sweep_chunk_rows(rows),
            None => EngineOptions::default(),
        }
        .with_sync_writes(config.sync_writes),
        backends: setup.backends.clone(),
        lookuper: lookuper.clone(),
        log: Arc::clone(&log),
        scheduler: scheduler.clone(),
        wrap: setup.wrap,
        retired: Mutex::new(RetiredLookups::default()),
    };
    let bucket = slot.open().await?;
    bucket.recover(LakeSnapshot::default()).await?;
    let engine = bucket.engine().clone();
    let empty_store = joined(tokio::task::spawn_blocking(move || {
        Ok(engine.stats()?.bytes_on_disk)
    }))
    .await?;
    *slot.bucket.write().await = Some(bucket);
    // Times count from here: opening and recovering the store is not part of the run.
    let origin = Instant::now();

    let shared = Arc::new(Shared {
        stream,
        setup,
        slot,
        lake,
        tiering,
        lookuper,
        log,
        ends: Ends::default(),
        window_bytes: Mutex::new(WindowBytes::default()),
        origin,
    });
    let (stop, stopped) = watch::channel(false);
    let (stop_sampler, sampler_stopped) = watch::channel(false);
    let lake_task = tokio::spawn(lake_loop(Arc::clone(&shared), stopped.clone()));
    let reader_task = tokio::spawn(reader_loop(Arc::clone(&shared), stopped));
    let sampler_task = tokio::spawn(sampler_loop(Arc::clone(&shared), sampler_stopped));
    let maintenance_task = shared
        .tiering
        .maintain(config.lake_maintenance_interval, stop.subscribe());

    let written = write_stream(&shared).await;
    // The sampler stops first: samples are taken one at a time (each forgets the window bytes
    // below the lake end it read).
    let _ = stop_sampler.send(true);
    let samples = joined(sampler_task).await;
    // The store as the writer left it: the "end" of the run.
    let last_sample = match (&written, &samples) {
        (Ok(_), Ok(_)) => Some(sample(&shared).await),
        _ => None,
    };
    let bucket_stats = shared
        .slot
        .read(async |b| Ok::<_, Error>(shared.slot.run_stats(b)))
        .await;
    let unsettled_offsets = shared.lake.unsettled();
    // Stop the other tasks whatever happened, then report the first failure.
    let _ = stop.send(true);
    let lake_outcome = joined(lake_task).await;
    let reader_outcome = joined(reader_task).await;
    let maintenance = joined(maintenance_task).await;
    let lake_lookups_while_writing = (shared.lookuper.calls(), shared.lookuper.keys());
    let mut samples = samples?;
    let written = written?;
    let (lake_outcome, mut reader_outcome) = (lake_outcome?, reader_outcome?);
    let maintenance = maintenance?;
    samples.push(
        last_sample
            .transpose()?
            .ok_or_else(|| Error::Harness("the writer finished without a final sample".into()))?,
    );
    let bucket_stats = bucket_stats?;

    final_check(&shared, &mut reader_outcome).await?;
    // The final check's lookups are not the run's: the lake lookups reported are those made
    // while writing.
    let (lake_lookups, lake_lookup_keys) = lake_lookups_while_writing;
    let reclaims = reclaims::runs(&shared.log, shared.origin);
    // After the run's figures are taken: the drain's reclaim is not one of the run's.
    let drained = match shared.setup.variant {
        Variant::Tidemark => Some(drain(&shared).await?),
        Variant::SchedulerOff | Variant::NoCleanup | Variant::AllOrNothing => None,
    };
    close(&shared, scheduler).await?;
    let end = samples.last().copied();
    let floor = match (shared.setup.variant, end) {
        (Variant::Tidemark, Some(end)) => {
            Some(floor(&shared, end.lake_end, end.applied_end).await?)
        }
        _ => None,
    };

    Ok(RunOutcome {
        backend: shared.setup.backend,
        variant: shared.setup.variant,
        records: written.records,
        elapsed: written.elapsed,
        apply_time: written.apply_time,
        max_behind: written.max_behind,
        writes: written.latencies.finish(),
        writes_during_reclaims: written.during_reclaims,
        writes_outside_reclaims: written.outside_reclaims,
        lookups: reader_outcome.latencies.finish(),
        checked: reader_outcome.checked,
        mismatches: reader_outcome.mismatches,
        lookup_errors: reader_outcome.errors,
        problems: reader_outcome.problems,
        lookups_skipped: reader_outcome.skipped,
        samples,
        reclaims,
        lake_commits: lake_outcome.commits,
        notifications: lake_outcome.notifications,
        rebuilds: lake_outcome.rebuilds,
        unsettled_offsets,
        bucket: bucket_stats,
        empty_store,
        lake_lookups,
        lake_lookup_keys,
        maintenance,
        drained,
        floor,
    })
}

/// The lake catches up with everything applied, the bucket is notified (as the lake task does),
/// and one reclaim runs directly; then the engine's background space work is waited for and the
/// store measured.
async fn drain(shared: &Shared) -> Result<Drained> {
    let end = shared.ends.acked.load(Ordering::SeqCst);
    if end > shared.ends.lake.load(Ordering::SeqCst) {
        let snapshot = shared.tiering.commit(shared.lake.commit(end)?).await?;
        shared.ends.lake.store(end, Ordering::SeqCst);
        shared
            .slot
            .read(async |b| b.on_lake_progress(snapshot).await)
            .await?;
    }
    let engine = shared
        .slot
        .read(async |b| Ok::<_, Error>(b.engine().clone()))
        .await?;
    joined(tokio::task::spawn_blocking(move || {
        engine.reclaim()?;
        engine.wait_for_background_work()?;
        let stats = engine.stats()?;
        Ok(Drained {
            bytes_on_disk: stats.bytes_on_disk,
            live_entries: stats.live_entries,
            space_rebuilds: stats.counters.space_rebuilds,
        })
    }))
    .await
}

/// The engine's floor for the window `from..to` ([`crate::floor::measure`]), built once the run's
/// store is closed, so the two never share a machine's time or a context's budget.
async fn floor(shared: &Shared, from: u64, to: u64) -> Result<u64> {
    let setup = &shared.setup;
    let (backend, root, options, backends, stream, batch) = (
        setup.backend,
        crate::floor::floor_root(&setup.dir),
        shared.slot.options.clone(),
        setup.backends.clone(),
        shared.stream.clone(),
        setup.config.batch,
    );
    joined(tokio::task::spawn_blocking(move || {
        crate::floor::measure(
            backend,
            &root,
            options,
            &backends,
            &stream,
            (from, to),
            batch,
        )
    }))
    .await
}

/// A task's result, its panic or cancellation turned into an error.
async fn joined<T>(task: JoinHandle<Result<T>>) -> Result<T> {
    task.await
        .map_err(|e| Error::Harness(format!("a compare task did not complete: {e}")))?
}

/// The bucket of a run, replaced whole by an all-or-nothing rebuild (writers and readers hold
/// it shared; a rebuild holds it alone, so writes wait for the rebuild, as they would in that
/// design).
struct Slot {
    bucket: RwLock<Option<HistoricalBucket>>,
    backend: Backend,
    dir: PathBuf,
    options: EngineOptions,
    backends: BackendConfig,
    lookuper: Arc<TimedLake>,
    log: Arc<ReclaimLog>,
    scheduler: Option<ReclaimScheduler>,
    wrap: Option<fn(EngineHandle) -> EngineHandle>,
    /// The lookup counts of the buckets rebuilds have closed.
    retired: Mutex<RetiredLookups>,
}

/// Lookup counts of the buckets an all-or-nothing run has closed.
#[derive(Debug, Default, Clone, Copy)]
struct RetiredLookups {
    local_values: u64,
    local_tombstones: u64,
    lake_fallbacks: u64,
}

/// The scheduler's id of the one bucket of a run.
const BUCKET: BucketId = BucketId(0);

impl Slot {
    /// Opens (or creates) the store and wraps it in a bucket, its reclaims logged and, for
    /// Tidemark, scheduled.
    async fn open(&self) -> Result<HistoricalBucket> {
        let (backend, dir, options, backends) = (
            self.backend,
            self.dir.clone(),
            self.options.clone(),
            self.backends.clone(),
        );
        let engine =
            tokio::task::spawn_blocking(move || backend.open_with(&dir, options, &backends))
                .await
                .map_err(|e| {
                    Error::Harness(format!("opening the store did not complete: {e}"))
                })??;
        let engine = match self.wrap {
            Some(wrap) => wrap(engine),
            None => engine,
        };
        let engine = Observed::wrap(engine, Arc::clone(&self.log));
        let lake: Arc<dyn LakeLookuper> = self.lookuper.clone();
        let bucket = HistoricalBucket::new(engine, lake);
        match &self.scheduler {
            Some(scheduler) => Ok(bucket.with_scheduler(scheduler, BUCKET)?),
            None => Ok(bucket),
        }
    }

    /// Adds the lookup counts of `stats`, a bucket about to be closed, to the retired ones.
    fn retire(&self, stats: &BucketStats) {
        // Only these additions happen under the lock, so poisoned counts are still whole.
        let mut retired = self.retired.lock().unwrap_or_else(PoisonError::into_inner);
        retired.local_values += stats.local_values;
        retired.local_tombstones += stats.local_tombstones;
        retired.lake_fallbacks += stats.lake_fallbacks;
    }

    /// `bucket`'s counters, with the lookups of the buckets rebuilds closed added in.
    fn run_stats(&self, bucket: &HistoricalBucket) -> BucketStats {
        let retired = *self.retired.lock().unwrap_or_else(PoisonError::into_inner);
        let mut stats = bucket.stats();
        stats.local_values += retired.local_values;
        stats.local_tombstones += retired.local_tombstones;
        stats.lake_fallbacks += retired.lake_fallbacks;
        stats
    }

    /// Runs `call` on the current bucket, shared with the other tasks.
    async fn read<T, E>(
        &self,
        call: impl AsyncFnOnce(&HistoricalBucket) -> std::result::Result<T, E>,
    ) -> Result<T>
    where
        Error: From<E>,
    {
        let guard = self.bucket.read().await;
        let bucket = guard.as_ref().ok_or_else(no_bucket)?;
        Ok(call(bucket).await?)
    }

    /// The all-or-nothing cleanup: when the lake holds everything applied (`snapshot` ends at
    /// the applied end), drops the store and starts an empty one that serves every older key
    /// from the lake. `Ok(false)` when the lake is behind (always, while writes continue).
    async fn rebuild_if_caught_up(&self, snapshot: LakeSnapshot) -> Result<bool> {
        let mut guard = self.bucket.write().await;
        let caught_up =
            guard.as_ref().ok_or_else(no_bucket)?.engine().applied_end() == snapshot.end_offset;
        if !caught_up {
            return Ok(false);
        }
        if let Some(old) = guard.take() {
            self.retire(&old.stats());
            old.close().await?;
        }
        let dir = self.dir.clone();
        tokio::task::spawn_blocking(move || remove_store(&dir))
            .await
            .map_err(|e| Error::Harness(format!("removing the store did not complete: {e}")))??;
        let fresh = self.open().await?;
        // Adopts the lake's end as W: every record below it is the lake's to answer.
        fresh.recover(snapshot).await?;
        *guard = Some(fresh);
        Ok(true)
    }
}

fn no_bucket() -> Error {
    Error::Harness("the run's bucket is gone (a rebuild failed)".into())
}

struct Written {
    records: u64,
    elapsed: Duration,
    apply_time: Duration,
    max_behind: Duration,
    latencies: Recorder,
    during_reclaims: Histogram,
    outside_reclaims: Histogram,
}

/// The writer: `records()` records in batches, batch `i` due at `i × batch_interval`.
async fn write_stream(shared: &Shared) -> Result<Written> {
    let config = &shared.setup.config;
    let records = config.records();
    let interval = config.batch_interval();
    let progress = &shared.setup.progress;
    progress.set_length(records);
    let started = tokio::time::Instant::from_std(shared.origin);
    let mut latencies = Recorder::new(config.p99_window);
    let (mut during_reclaims, mut outside_reclaims) = (Histogram::default(), Histogram::default());
    let (mut apply_time, mut max_behind) = (Duration::ZERO, Duration::ZERO);
    let mut offset = 0u64;
    for i in 0u32.. {
        if offset >= records {
            break;
        }
        let due = started + interval.saturating_mul(i);
        tokio::time::sleep_until(due).await;
        max_behind = max_behind.max(tokio::time::Instant::now().saturating_duration_since(due));
        let end = offset.saturating_add(config.batch).min(records);
        let batch = shared.stream.batch(offset, end);
        // The WAL record reaches the lake's input as soon as it is committed.
        shared.lake.append(offset, end)?;
        shared.tiering.append(batch.records()).await?;
        shared.window_bytes().push(batch.records());
        shared.ends.applying.store(end, Ordering::SeqCst);
        let mark = shared.log.mark();
        let began = Instant::now();
        shared.slot.read(async |b| b.apply(batch).await).await?;
        let latency = began.elapsed();
        latencies.record(began.duration_since(shared.origin), latency);
        if shared.log.overlapped_since(mark) {
            during_reclaims.record(latency);
        } else {
            outside_reclaims.record(latency);
        }
        apply_time += latency;
        shared.ends.acked.store(end, Ordering::SeqCst);
        progress.set_position(end);
        offset = end;
    }
    Ok(Written {
        records,
        elapsed: started.elapsed(),
        apply_time,
        max_behind,
        latencies,
        during_reclaims,
        outside_reclaims,
    })
}

#[derive(Default)]
struct LakeOutcome {
    commits: u64,
    notifications: Histogram,
    rebuilds: u64,
}

/// The lake: every `lake_interval`, a snapshot trailing the acknowledged end by a fresh lag,
/// reported as the variant does.
async fn lake_loop(shared: Arc<Shared>, mut stopped: watch::Receiver<bool>) -> Result<LakeOutcome> {
    let config = &shared.setup.config;
    let mut rng = SplitMix64::new(config.seed ^ LAKE_SALT);
    let mut ticker = tokio::time::interval(config.lake_interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut outcome = LakeOutcome::default();
    let mut end = 0u64;
    loop {
        tokio::select! {
            _ = ticker.tick() => {}
            _ = stopped.changed() => break,
        }
        let acked = shared.ends.acked.load(Ordering::SeqCst);
        let lag = config.lag_min + rng.below((config.lag_max - config.lag_min).saturating_add(1));
        let next = acked.saturating_sub(lag).max(end);
        if next == end {
            continue;
        }
        end = next;
        let snapshot = shared.tiering.commit(shared.lake.commit(end)?).await?;
        shared.ends.lake.store(end, Ordering::SeqCst);
        outcome.commits += 1;
        match shared.setup.variant {
            Variant::Tidemark | Variant::SchedulerOff => {
                let began = Instant::now();
                shared
                    .slot
                    .read(async |b| b.on_lake_progress(snapshot).await)
                    .await?;
                outcome.notifications.record(began.elapsed());
            }
            Variant::AllOrNothing => {
                if shared.slot.rebuild_if_caught_up(snapshot).await? {
                    outcome.rebuilds += 1;
                } else {
                    // The design's lake view follows the lake (old snapshots expire), though it
                    // is consulted only for keys the store has dropped: every key written since
                    // the last rebuild is local, and no newer snapshot changes an older key.
                    shared.lookuper.refresh(snapshot).await?;
                }
            }
            Variant::NoCleanup => {}
        }
    }
    Ok(outcome)
}

struct ReaderOutcome {
    latencies: Recorder,
    checked: u64,
    mismatches: u64,
    errors: u64,
    skipped: u64,
    problems: Vec<String>,
}

impl ReaderOutcome {
    fn new(p99_window: Duration) -> Self {
        ReaderOutcome {
            latencies: Recorder::new(p99_window),
            checked: 0,
            mismatches: 0,
            errors: 0,
            skipped: 0,
            problems: Vec::new(),
        }
    }

    fn problem(&mut self, describe: impl FnOnce() -> String) {
        if self.problems.len() < PROBLEMS_KEPT {
            self.problems.push(describe());
        }
    }
}

/// The reader: lookups of keys written so far, at `lookup_rate`, each checked against the
/// history.
async fn reader_loop(
    shared: Arc<Shared>,
    mut stopped: watch::Receiver<bool>,
) -> Result<ReaderOutcome> {
    let config = &shared.setup.config;
    let mut outcome = ReaderOutcome::new(config.p99_window);
    let result = read_and_check(&shared, &mut stopped, &mut outcome).await;
    // No check is pending any more: the model may settle up to the lake's oldest snapshot.
    shared.lake.end_checks();
    result.map(|()| outcome)
}

async fn read_and_check(
    shared: &Shared,
    stopped: &mut watch::Receiver<bool>,
    outcome: &mut ReaderOutcome,
) -> Result<()> {
    let config = &shared.setup.config;
    if config.lookup_rate == 0 {
        return Ok(());
    }
    let mut rng = SplitMix64::new(config.seed ^ READER_SALT);
    let interval = Duration::from_secs_f64(1.0 / config.lookup_rate as f64);
    let mut due = tokio::time::Instant::now();
    loop {
        tokio::select! {
            _ = tokio::time::sleep_until(due) => {}
            _ = stopped.changed() => break,
        }
        let now = tokio::time::Instant::now();
        if now.saturating_duration_since(due) > READER_CATCH_UP {
            let missed = now.saturating_duration_since(due).as_secs_f64() / interval.as_secs_f64();
            outcome.skipped += missed as u64;
            due = now;
        }
        due += interval;
        let acked = shared.ends.acked.load(Ordering::SeqCst);
        if acked == 0 {
            continue;
        }
        let key = shared.stream.key_index(rng.below(acked));
        let name = SeededStream::key(key);
        shared.lake.begin_check(acked);
        let began = Instant::now();
        let answer = shared.slot.read(async |b| b.lookup(&name).await).await;
        let latency = began.elapsed();
        let applying = shared.ends.applying.load(Ordering::SeqCst);
        outcome
            .latencies
            .record(began.duration_since(shared.origin), latency);
        outcome.checked += 1;
        match answer {
            Ok(answer) => {
                if !shared.lake.check(key, answer.as_deref(), acked, applying)? {
                    outcome.mismatches += 1;
                    outcome.problem(|| {
                        format!(
                            "key {key}: answered {} while the acknowledged end was {acked}",
                            describe(answer.as_deref())
                        )
                    });
                }
            }
            Err(e) => {
                outcome.errors += 1;
                outcome.problem(|| format!("key {key}: lookup failed: {e}"));
            }
        }
    }
    Ok(())
}

/// An answer as a problem report names it: the offset a value names, or absent.
pub(crate) fn describe(answer: Option<&[u8]>) -> String {
    match answer {
        Some(value) => match SeededStream::offset_of(value) {
            Some(offset) => format!("the value written at offset {offset}"),
            None => format!("a {}-byte value naming no offset", value.len()),
        },
        None => "absent".into(),
    }
}

/// After writing: every key written, looked up once more, must answer its final state.
async fn final_check(shared: &Shared, outcome: &mut ReaderOutcome) -> Result<()> {
    let end = shared.ends.acked.load(Ordering::SeqCst);
    let keys = shared.lake.keys();
    for chunk in keys.chunks(FINAL_CHECK_CHUNK) {
        let names: Vec<Vec<u8>> = chunk.iter().map(|&k| SeededStream::key(k)).collect();
        let answers = shared
            .slot
            .read(async |b| b.lookup_many(&names).await)
            .await?;
        for (&key, answer) in chunk.iter().zip(answers) {
            outcome.checked += 1;
            let expected = shared.lake.state_at(key, end)?;
            if answer != expected {
                outcome.mismatches += 1;
                outcome.problem(|| {
                    format!(
                        "key {key} at the end: answered {}, expected {}",
                        describe(answer.as_deref()),
                        describe(expected.as_deref())
                    )
                });
            }
        }
    }
    Ok(())
}

/// The sampler: the store every `sample_interval`, and the progress line.
async fn sampler_loop(
    shared: Arc<Shared>,
    mut stopped: watch::Receiver<bool>,
) -> Result<Vec<StateSample>> {
    let mut ticker = tokio::time::interval(shared.setup.config.sample_interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut samples = Vec::new();
    loop {
        tokio::select! {
            _ = ticker.tick() => {}
            _ = stopped.changed() => break,
        }
        let s = sample(&shared).await?;
        shared.setup.progress.set_message(format!(
            "{:>10} on disk, W {}, lake end {}",
            units::bytes(s.bytes_on_disk),
            s.watermark,
            s.lake_end
        ));
        samples.push(s);
    }
    Ok(samples)
}

/// The store now (its statistics read on a blocking thread: sizes may read the directory).
async fn sample(shared: &Shared) -> Result<StateSample> {
    let at = shared.origin.elapsed();
    let lake_end = shared.ends.lake.load(Ordering::SeqCst);
    let stats = shared
        .slot
        .read(async |b| {
            let engine = b.engine().clone();
            let stats = tokio::task::spawn_blocking(move || engine.stats())
                .await
                .map_err(|e| Error::Harness(format!("reading statistics did not complete: {e}")))?;
            Ok::<_, Error>(stats?)
        })
        .await?;
    let window_bytes = {
        let mut bytes = shared.window_bytes();
        let window = bytes.window(lake_end, stats.applied_end);
        // Later samples read a lake end at least this one.
        bytes.forget_below(lake_end);
        window
    };
    Ok(StateSample {
        at,
        bytes_on_disk: stats.bytes_on_disk,
        window_bytes,
        watermark: stats.watermark,
        applied_end: stats.applied_end,
        lake_end,
        live_entries: stats.live_entries,
        space_rebuilds: stats.counters.space_rebuilds,
    })
}

/// Closes the bucket (waiting for a running reclaim) and stops the scheduler.
async fn close(shared: &Shared, scheduler: Option<ReclaimScheduler>) -> Result<()> {
    if let Some(bucket) = shared.slot.bucket.write().await.take() {
        bucket.close().await?;
    }
    if let Some(scheduler) = scheduler {
        scheduler.shutdown().await;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use tidemark::ReclaimCost;
    use tidemark::bucket::ReclaimPolicy;
    use tidemark::{Engine, SchedulerConfig};

    /// A short, quick workload: overwrites and deletes on a small key space, a lake trailing by
    /// 100 to 300 offsets, and a scheduler that reclaims as soon as anything is covered.
    fn quick() -> CompareConfig {
        CompareConfig {
            duration: Duration::from_millis(400),
            rate: 2_000,
            batch: 10,
            keys: 500,
            delete_percent: 20,
            value_size: 24,
            lag_min: 100,
            lag_max: 300,
            lake_interval: Duration::from_millis(20),
            lookup_rate: 500,
            sample_interval: Duration::from_millis(20),
            scheduler: SchedulerConfig::default()
                .with_min_interval(Duration::ZERO)
                .with_policy(ReclaimCost::Rewrite, ReclaimPolicy::SWEEP),
            ..CompareConfig::default()
        }
    }

    fn setup(backend: Backend, variant: Variant, config: CompareConfig, dir: &Path) -> RunSetup {
        RunSetup {
            backend,
            variant,
            config,
            backends: BackendConfig::default()
                .with_budget(backend, 4)
                .expect("a context"),
            dir: dir.join(format!("{backend}-{variant}")),
            lake_dir: dir.join(format!("{backend}-{variant}.lake")),
            progress: ProgressBar::hidden(),
            wrap: None,
        }
    }

    /// An engine that loses every key ending in an even digit: its lookups miss them.
    struct Forgetful {
        inner: EngineHandle,
    }

    impl Forgetful {
        fn forgets(key: &[u8]) -> bool {
            key.last().is_some_and(|b| b % 2 == 0)
        }
    }

    impl Engine for Forgetful {
        tidemark::forward_engine!(inner; backend_name reclaim_cost apply advance_watermark adopt_lake_watermark
            watermark applied_end reclaim reclaim_below stats flush reclaimable verify wait_for_background_work);
        fn lookup(&self, key: &[u8]) -> tidemark::Result<tidemark::LocalLookup> {
            if Self::forgets(key) {
                return Ok(tidemark::LocalLookup::Miss);
            }
            self.inner.lookup(key)
        }
        fn lookup_inline(&self, key: &[u8]) -> tidemark::Result<Option<tidemark::LocalLookup>> {
            if Self::forgets(key) {
                return Ok(Some(tidemark::LocalLookup::Miss));
            }
            self.inner.lookup_inline(key)
        }
    }

    #[test]
    fn a_store_that_loses_data_is_caught_by_the_reader_and_the_final_check() {
        let tmp = tempfile::tempdir().unwrap();
        let mut lying = setup(Backend::Memory, Variant::NoCleanup, quick(), tmp.path());
        lying.wrap = Some(|inner| EngineHandle::new(Forgetful { inner }));
        let run = run(lying).unwrap();
        assert!(run.mismatches > 0, "{:?}", run.problems);
        assert!(
            run.problems.iter().any(|p| p.contains("answered absent")),
            "{:?}",
            run.problems
        );
        assert_eq!(run.problems.len(), PROBLEMS_KEPT);
    }

    use std::path::Path;

    #[test]
    fn every_backend_and_variant_answers_every_lookup_right() {
        let tmp = tempfile::tempdir().unwrap();
        let config = quick();
        for backend in Backend::compiled() {
            for variant in Variant::ALL {
                let run = run(setup(backend, variant, config.clone(), tmp.path())).unwrap();
                let what = format!("{backend} {variant}: {:?}", run.problems);
                assert_eq!((run.mismatches, run.lookup_errors), (0, 0), "{what}");
                assert_eq!(run.records, config.records(), "{what}");
                assert_eq!(run.writes.all.count(), config.records() / config.batch);
                assert_eq!(
                    run.writes_during_reclaims.count() + run.writes_outside_reclaims.count(),
                    run.writes.all.count()
                );
                assert_eq!(
                    run.writes.p99_series.iter().map(|w| w.count).sum::<u64>(),
                    run.writes.all.count(),
                    "{what}: every apply in one window"
                );
                // The reader's lookups, and every key written once more at the end.
                assert!(run.lookups.all.count() > 0, "{what}");
                assert!(run.checked > run.lookups.all.count(), "{what}");
                assert_eq!(
                    run.lookups.p99_series.iter().map(|w| w.count).sum::<u64>(),
                    run.lookups.all.count(),
                    "{what}"
                );
                let end = run.samples.last().expect("a final sample");
                assert_eq!(end.applied_end, config.records(), "{what}");
                assert!(end.lake_end < end.applied_end, "{what}: the lake trails");
                assert!(end.window_bytes > 0, "{what}");
                // The model settled what the lake absorbed: it holds less than every offset.
                assert!(run.unsettled_offsets < run.records, "{what}");
                match variant {
                    Variant::Tidemark => {
                        assert!(end.watermark > 0, "{what}");
                        assert!(!run.reclaims.is_empty(), "{what}: reclaims ran");
                        assert_eq!(run.notifications.count(), run.lake_commits, "{what}");
                        let drained = run.drained.expect("a drained store");
                        assert!(
                            drained.bytes_on_disk <= 2 * run.empty_store + (1 << 20),
                            "{what}: the drained store is small ({drained:?})"
                        );
                        assert!(drained.space_rebuilds >= end.space_rebuilds, "{what}");
                        let floor = run.floor.expect("a floor");
                        assert!(floor > 0, "{what}: the floor holds the window");
                    }
                    Variant::SchedulerOff => {
                        assert!(end.watermark > 0, "{what}");
                        assert!(run.reclaims.is_empty(), "{what}");
                        assert!(run.drained.is_none() && run.floor.is_none(), "{what}");
                    }
                    Variant::NoCleanup | Variant::AllOrNothing => {
                        assert_eq!(end.watermark, 0, "{what}");
                        assert!(run.reclaims.is_empty() && run.notifications.count() == 0);
                        assert_eq!(run.rebuilds, 0, "{what}: the lake never caught up");
                    }
                }
            }
        }
    }

    /// The runs against a real Iceberg table: every answer right, local misses read the table,
    /// and the table is compacted and expired while the run goes on.
    #[cfg(feature = "iceberg")]
    #[test]
    fn runs_against_an_iceberg_table_answer_every_lookup_right() {
        let tmp = tempfile::tempdir().unwrap();
        runs_against_an_iceberg_table(tmp.path(), crate::config::LakeSite::default());
        let tables = std::fs::read_dir(tmp.path())
            .unwrap()
            .filter_map(|e| e.ok())
            .filter(|e| e.file_name().to_string_lossy().ends_with(".lake"));
        for table in tables {
            let parquet = std::fs::read_dir(table.path().join("data"))
                .unwrap()
                .count();
            assert!(parquet > 0, "{:?} has data files", table.path());
        }
    }

    /// The same, with each run's table named in a PostgreSQL catalog and kept on an S3-protocol
    /// server (the ones `scripts/lake-servers.sh` starts, which test.sh runs).
    #[cfg(feature = "iceberg")]
    #[test]
    fn runs_against_an_iceberg_table_on_postgres_and_s3_answer_every_lookup_right() {
        let var = |name: &str| {
            std::env::var(name).unwrap_or_else(|_| {
                panic!("{name} is not set: run ./scripts/test.sh, which starts the lake servers")
            })
        };
        let tmp = tempfile::tempdir().unwrap();
        let site = crate::config::LakeSite {
            catalog: Some(var("TIDEMARK_TEST_POSTGRES_URL")),
            warehouse: Some(format!("s3://{}/compare", var("TIDEMARK_TEST_S3_BUCKET"))),
            storage: [
                ("s3.endpoint", var("TIDEMARK_TEST_S3_ENDPOINT")),
                ("s3.access-key-id", var("TIDEMARK_TEST_S3_ACCESS_KEY")),
                ("s3.secret-access-key", var("TIDEMARK_TEST_S3_SECRET_KEY")),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v))
            .collect(),
        };
        runs_against_an_iceberg_table(tmp.path(), site);
    }

    #[cfg(feature = "iceberg")]
    fn runs_against_an_iceberg_table(dir: &Path, lake_site: crate::config::LakeSite) {
        let config = CompareConfig {
            lake: crate::config::LakeKind::Iceberg,
            lake_maintenance_interval: Duration::from_millis(100),
            lake_site,
            ..quick()
        };
        config.validate().unwrap();
        for variant in [Variant::Tidemark, Variant::AllOrNothing] {
            let setup = setup(Backend::Memory, variant, config.clone(), dir);
            let run = run(setup).unwrap();
            let what = format!("{variant}: {:?}", run.problems);
            assert_eq!((run.mismatches, run.lookup_errors), (0, 0), "{what}");
            assert!(run.checked > run.lookups.all.count(), "{what}");
            assert!(run.maintenance.compactions.count() > 0, "{what}");
            if variant == Variant::Tidemark {
                assert!(
                    run.lake_lookups.count() > 0,
                    "{what}: local misses read the table"
                );
                assert!(run.lake_lookup_keys >= run.lake_lookups.count(), "{what}");
                assert!(
                    run.maintenance.files_deleted > 0,
                    "{what}: expiry deleted files"
                );
            }
        }
    }

    #[test]
    fn all_or_nothing_rebuilds_whenever_the_lake_catches_up_and_stays_right() {
        let tmp = tempfile::tempdir().unwrap();
        // No lag: the lake commits the acknowledged end, and between two batches the store holds
        // nothing the lake lacks, so it is dropped; the lake then answers every older key.
        let config = CompareConfig {
            lag_min: 0,
            lag_max: 0,
            rate: 500,
            lake_interval: Duration::from_millis(5),
            ..quick()
        };
        for backend in Backend::compiled() {
            let run = run(setup(
                backend,
                Variant::AllOrNothing,
                config.clone(),
                tmp.path(),
            ))
            .unwrap();
            let what = format!("{backend}: {:?}", run.problems);
            assert!(run.rebuilds > 0, "{what}");
            assert_eq!((run.mismatches, run.lookup_errors), (0, 0), "{what}");
            assert!(run.bucket.lake_fallbacks > 0, "{what}: the lake answered");
        }
    }

    #[test]
    fn a_rebuild_waits_for_the_lake_and_then_starts_empty() {
        let tmp = tempfile::tempdir().unwrap();
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        for backend in Backend::compiled() {
            runtime.block_on(async {
                let stream = SeededStream::new(3, 50, 20, 16);
                let lake = Arc::new(StreamLake::new(stream.clone(), 4));
                let slot = Slot {
                    bucket: RwLock::new(None),
                    backend,
                    dir: tmp.path().join(format!("rebuild-{backend}")),
                    options: EngineOptions::default().with_sync_writes(false),
                    backends: BackendConfig::default().with_budget(backend, 4).unwrap(),
                    lookuper: Arc::new(TimedLake::new(lake.clone())),
                    log: Arc::new(ReclaimLog::default()),
                    scheduler: None,
                    wrap: None,
                    retired: Mutex::new(RetiredLookups::default()),
                };
                let bucket = slot.open().await.unwrap();
                bucket.recover(LakeSnapshot::default()).await.unwrap();
                *slot.bucket.write().await = Some(bucket);
                let batch = stream.batch(0, 100);
                lake.append(0, 100).unwrap();
                slot.read(async |b| b.apply(batch).await).await.unwrap();

                let behind = lake.commit(99).unwrap();
                assert!(!slot.rebuild_if_caught_up(behind).await.unwrap());
                assert_eq!(
                    slot.read(async |b| Ok::<_, Error>(b.engine().applied_end()))
                        .await
                        .unwrap(),
                    100
                );

                let caught_up = lake.commit(100).unwrap();
                assert!(slot.rebuild_if_caught_up(caught_up).await.unwrap());
                let stats = slot.read(async |b| b.engine().stats()).await.unwrap();
                assert_eq!((stats.watermark, stats.live_entries), (100, 0), "{backend}");
                for key in 0..50 {
                    let answer = slot
                        .read(async |b| b.lookup(&SeededStream::key(key)).await)
                        .await
                        .unwrap();
                    assert_eq!(answer, lake.state_at(key, 100).unwrap(), "{backend} {key}");
                }
                if let Some(b) = slot.bucket.write().await.take() {
                    b.close().await.unwrap();
                }
            });
        }
    }
}
