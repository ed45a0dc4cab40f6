//! One backend's run of the historical-partitions scenario.
//!
//! `--buckets` buckets are opened as siblings under one root through the facade
//! (`BackendConfig::with_budget` once, `Backend::open_with` per bucket), each a
//! `HistoricalBucket` with its own stream, its own lake (the harness's [`StreamLake`], which is
//! also the bucket's model) and the one `ReclaimScheduler`. Every bucket gets a first batch
//! before the clock starts, so each holds state. Then:
//!
//! - `--active` **writers**, one per slot of the active set, each at `rate ÷ active`: slot `j`
//!   writes the bucket [`BucketsConfig::active_bucket`] names at its batch's due time, so every
//!   `--rotate` the set moves on to the next buckets and the ones before sit idle;
//! - the **lake** trails every bucket by time, not offsets: every `lake_interval` it commits, for
//!   each bucket, the end that bucket had acknowledged a lag ago (the lag drawn afresh at each
//!   commit, `--lag` offsets read at `--rate`), and notifies the bucket. A bucket that went idle
//!   is caught up with once the lag has passed: its watermark reaches its applied end and its
//!   reclaim runs while it is idle;
//! - the **reader** looks up, alternately, a key of a bucket being written and a key of any
//!   bucket (most of them idle, answering from local state or their lake), each checked against
//!   that bucket's model;
//! - the **sampler** records the bytes of every file under the root (shared engine instances
//!   included), the bytes of every bucket's records at or above its `W`, and the process's
//!   threads, descriptors and resident memory.
//!
//! When the writers are done every key of every bucket is looked up once more and must answer
//! its final state.

use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use indicatif::ProgressBar;
use tidemark::{
    Backend, BackendConfig, BucketId, Engine as _, EngineOptions, HistoricalBucket, LakeLookuper,
    LakeSnapshot, ReclaimScheduler,
};
use tidemark_disk::process::ProcessUsage;
use tidemark_test_support::observe::{Observed, ReclaimLog};
use tidemark_test_support::rng::SplitMix64;
use tidemark_test_support::stream::{RecordStream as _, SeededStream};
use tokio::sync::{Semaphore, watch};
use tokio::task::{JoinHandle, JoinSet};

use crate::config::{BucketsConfig, CompareConfig};
use crate::histogram::Histogram;
use crate::lake::StreamLake;
use crate::reclaims::{self, ReclaimRun};
use crate::run::describe;
use crate::store_dirs::{TreeBytes, tree_bytes};
use crate::window::WindowBytes;
use crate::{Error, Result, units};

/// What a run is given.
#[derive(Clone)]
pub struct Setup {
    /// The backend.
    pub backend: Backend,
    /// The workload: `rate` and `lookup_rate` are totals over the buckets.
    pub config: CompareConfig,
    /// Buckets, active set and rotation.
    pub scenario: BucketsConfig,
    /// The parent of every bucket directory (new or empty).
    pub root: PathBuf,
    /// Shows the run's progress (hidden when stderr is not a terminal, and in tests).
    pub progress: ProgressBar,
}

/// The whole root and the process at one moment.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sample {
    /// Since the run started.
    pub at: Duration,
    /// Bytes of every file under the root (their lengths).
    pub bytes_on_disk: u64,
    /// Bytes of the blocks allocated to them.
    pub allocated_bytes: u64,
    /// Bytes of the records at or above each bucket's `W`, summed over the buckets.
    pub window_bytes: u64,
    /// Threads, descriptors and resident memory of the process.
    pub usage: ProcessUsage,
}

/// Lookups answered locally or by the lake, summed over the buckets when the writers finished.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LookupCounts {
    /// Answered by a local value.
    pub local_values: u64,
    /// Answered by a local tombstone.
    pub local_tombstones: u64,
    /// Answered by the lake after a local miss.
    pub lake_fallbacks: u64,
}

/// Everything a run measured; the report turns it into figures.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// The backend.
    pub backend: Backend,
    /// Buckets, active set and rotation.
    pub scenario: BucketsConfig,
    /// Opening and recovering every bucket.
    pub open_time: Duration,
    /// Writing every bucket's first batch.
    pub seed_time: Duration,
    /// Records of those first batches.
    pub seed_records: u64,
    /// Records the writers wrote (after the first batches).
    pub records: u64,
    /// From the start of the run to the end of the last writer's last apply.
    pub elapsed: Duration,
    /// The furthest a writer fell behind its schedule.
    pub max_behind: Duration,
    /// Active sets the writers' batches were due in.
    pub rotations: u64,
    /// Distinct buckets the writers wrote (the rest had their first batch only).
    pub buckets_written: usize,
    /// Every apply of the writers.
    pub writes: Histogram,
    /// Every lookup of the reader.
    pub lookups: Histogram,
    /// The reader's lookups of a bucket in the active set.
    pub lookups_active: Histogram,
    /// The reader's lookups of a bucket outside it.
    pub lookups_idle: Histogram,
    /// Lookups checked against the model, while writing and at the end.
    pub checked: u64,
    /// Answers that were not a state the key had (must be 0).
    pub mismatches: u64,
    /// Lookups that returned an error (must be 0).
    pub lookup_errors: u64,
    /// Lookups the reader skipped because it fell more than its catch-up limit behind.
    pub lookups_skipped: u64,
    /// The first few mismatches and errors, described.
    pub problems: Vec<String>,
    /// What answered the lookups, when the writers finished.
    pub counts: LookupCounts,
    /// The process before the backend's context was created.
    pub before: ProcessUsage,
    /// Bytes under the root once every bucket was open, before anything was written.
    pub empty: TreeBytes,
    /// The root and the process over time, the last sample taken when the writers finished.
    pub samples: Vec<Sample>,
    /// Every reclaim of every bucket, by start.
    pub reclaims: Vec<ReclaimRun>,
    /// Reclaims that started while their bucket was outside the active set.
    pub reclaims_while_idle: u64,
    /// Buckets reclaimed at least once.
    pub buckets_reclaimed: usize,
    /// Buckets whose `W` had reached their applied end when the writers finished: the lake held
    /// everything they had.
    pub buckets_drained: usize,
    /// Lake snapshots committed, over every bucket.
    pub lake_commits: u64,
    /// How long each `on_lake_progress` took.
    pub notifications: Histogram,
}

/// Problems described in full; the rest are only counted.
const PROBLEMS_KEPT: usize = 5;
/// A reader further behind its schedule than this skips ahead rather than hog a core.
const READER_CATCH_UP: Duration = Duration::from_millis(100);
/// Keys per `lookup_many` call of the final check.
const FINAL_CHECK_CHUNK: usize = 512;
/// Snapshots each bucket's lake keeps.
const LAKE_SNAPSHOTS_KEPT: usize = 4;
/// Lake notifications under way at once: a lake that catches up with hundreds of idle buckets
/// at one commit notifies them a few at a time, each a durable watermark write.
const NOTIFY_CONCURRENCY: usize = 8;
/// The blocking threads the run's runtime may start (every engine call of a bucket runs on
/// one): a known, bounded share of the process's threads.
pub const BLOCKING_THREADS: usize = 32;
/// Worker threads of the run's runtime.
pub const WORKER_THREADS: usize = 2;
/// Salts of the buckets' streams, the lake's and the reader's generators.
const BUCKET_SALT: u64 = 0xb0c7_e75a;
const LAKE_SALT: u64 = 0x1a4e;
const READER_SALT: u64 = 0x4ead;

/// Runs the scenario on one backend, on a runtime of its own.
pub fn run(setup: Setup) -> Result<Outcome> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(WORKER_THREADS)
        .max_blocking_threads(BLOCKING_THREADS)
        .enable_all()
        .build()
        .map_err(|e| Error::Harness(format!("cannot start the run's runtime: {e}")))?;
    runtime.block_on(run_async(setup))
}

/// One bucket of the run with its lake, its model and the ends the tasks share.
struct Bucket {
    index: usize,
    bucket: HistoricalBucket,
    stream: SeededStream,
    /// The bucket's lake, and the model its answers are checked against.
    lake: Arc<StreamLake>,
    /// The bucket's reclaims.
    log: Arc<ReclaimLog>,
    /// The next offset to write, held for a whole write: across a rotation two writers may take
    /// the same bucket, and its records must reach the lake and the engine in order.
    next: tokio::sync::Mutex<u64>,
    /// Every record below it has been applied and acknowledged.
    acked: AtomicU64,
    /// Records below it are applied or being applied.
    applying: AtomicU64,
    /// The end offset of the bucket's latest lake snapshot.
    lake_end: AtomicU64,
    /// Bytes of the records from `W` on.
    window: Mutex<WindowBytes>,
    /// Whether a writer (not the first batch) wrote it.
    written: AtomicBool,
}

impl Bucket {
    fn window(&self) -> MutexGuard<'_, WindowBytes> {
        // Nothing panics while it is held; poisoned sums are still whole.
        self.window.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Appends the bucket's next `len` records to its lake's input and applies them; returns
    /// the apply's latency.
    async fn write(&self, len: u64) -> Result<Duration> {
        let mut next = self.next.lock().await;
        let (from, to) = (*next, next.saturating_add(len));
        let batch = self.stream.batch(from, to);
        // The WAL record reaches the lake's input as soon as it is committed.
        self.lake.append(from, to)?;
        self.window().push(batch.records());
        self.applying.store(to, Ordering::SeqCst);
        let began = Instant::now();
        self.bucket.apply(batch).await?;
        let latency = began.elapsed();
        self.acked.store(to, Ordering::SeqCst);
        *next = to;
        Ok(latency)
    }
}

/// What every task of a run shares.
struct Shared {
    setup: Setup,
    buckets: Vec<Bucket>,
    origin: Instant,
}

async fn run_async(setup: Setup) -> Result<Outcome> {
    let before = ProcessUsage::current();
    let backend = setup.backend;
    let config = setup.config.clone();
    let scenario = setup.scenario;
    let backends = BackendConfig::default().with_budget(setup.backend, scenario.buckets)?;
    let scheduler = ReclaimScheduler::new(config.scheduler.clone())?;
    std::fs::create_dir_all(&setup.root).map_err(|e| Error::io("cannot create", &setup.root, e))?;
    let options = match config.sweep_chunk_rows {
        Some(rows) => EngineOptions::default().with_sweep_chunk_rows(rows),
        None => EngineOptions::default(),
    }
    .with_sync_writes(config.sync_writes);

    let progress = &setup.progress;
    let began = Instant::now();
    let mut buckets = Vec::with_capacity(scenario.buckets);
    for index in 0..scenario.buckets {
        if index % 100 == 0 {
            progress.set_message(format!("opening bucket {index} of {}", scenario.buckets));
        }
        buckets.push(open(&setup, &backends, &scheduler, &options, index).await?);
    }
    let open_time = began.elapsed();
    let root = setup.root.clone();
    let empty = joined(tokio::task::spawn_blocking(move || tree_bytes(&root))).await?;

    // Every bucket holds state before the clock starts: its first batch.
    let began = Instant::now();
    progress.set_message("writing every bucket's first batch");
    for bucket in &buckets {
        bucket.write(config.batch).await?;
    }
    let seed_time = began.elapsed();
    let seed_records = buckets.iter().map(|b| b.acked.load(Ordering::SeqCst)).sum();

    // Times count from here.
    let origin = Instant::now();
    let shared = Arc::new(Shared {
        setup,
        buckets,
        origin,
    });
    shared.setup.progress.set_length(config.records());
    let (stop, stopped) = watch::channel(false);
    let (stop_sampler, sampler_stopped) = watch::channel(false);
    let lake_task = tokio::spawn(lake_loop(Arc::clone(&shared), stopped.clone()));
    let reader_task = tokio::spawn(reader_loop(Arc::clone(&shared), stopped));
    let sampler_task = tokio::spawn(sampler_loop(Arc::clone(&shared), sampler_stopped));
    let writer_tasks: Vec<JoinHandle<Result<Written>>> = (0..scenario.active)
        .map(|slot| tokio::spawn(writer(Arc::clone(&shared), slot)))
        .collect();
    let mut written = Vec::with_capacity(writer_tasks.len());
    for task in writer_tasks {
        written.push(joined(task).await);
    }
    // The sampler stops first: samples are taken one at a time (each forgets the window bytes
    // below the watermarks it read).
    let _ = stop_sampler.send(true);
    let samples = joined(sampler_task).await;
    let writers_ok = written.iter().all(Result::is_ok);
    let last_sample = match (writers_ok, &samples) {
        (true, Ok(_)) => Some(sample(&shared).await),
        _ => None,
    };
    let counts = lookup_counts(&shared);
    let buckets_drained = shared
        .buckets
        .iter()
        .filter(|b| {
            let applied = b.bucket.engine().applied_end();
            applied > 0 && b.bucket.watermark() >= applied
        })
        .count();
    // Stop the other tasks whatever happened, then report the first failure.
    let _ = stop.send(true);
    let lake_outcome = joined(lake_task).await;
    let reader_outcome = joined(reader_task).await;
    let written = written.into_iter().collect::<Result<Vec<_>>>()?;
    let mut samples = samples?;
    let (lake_outcome, mut reader_outcome) = (lake_outcome?, reader_outcome?);
    samples.push(
        last_sample
            .transpose()?
            .ok_or_else(|| Error::Harness("the writers finished without a final sample".into()))?,
    );

    final_check(&shared, &mut reader_outcome).await?;

    let elapsed = written.iter().map(|w| w.elapsed).max().unwrap_or_default();
    let mut writes = Histogram::default();
    for w in &written {
        writes.merge(&w.latencies);
    }
    let (mut reclaim_runs, mut while_idle, mut buckets_reclaimed) = (Vec::new(), 0u64, 0usize);
    for bucket in &shared.buckets {
        let runs = reclaims::runs(&bucket.log, shared.origin);
        for run in &runs {
            let at = Duration::try_from_secs_f64(run.start).unwrap_or(Duration::MAX);
            if at >= elapsed || !scenario.is_active(bucket.index, at) {
                while_idle += 1;
            }
        }
        buckets_reclaimed += usize::from(!runs.is_empty());
        reclaim_runs.extend(runs);
    }
    reclaim_runs.sort_by(|a, b| a.start.total_cmp(&b.start));
    let buckets_written = shared
        .buckets
        .iter()
        .filter(|b| b.written.load(Ordering::SeqCst))
        .count();

    close(shared, scheduler).await?;
    // The backend's context (its threads, its caches) goes with the run.
    drop(backends);

    Ok(Outcome {
        backend,
        scenario,
        open_time,
        seed_time,
        seed_records,
        records: written.iter().map(|w| w.records).sum(),
        elapsed,
        max_behind: written
            .iter()
            .map(|w| w.max_behind)
            .max()
            .unwrap_or_default(),
        // The active sets the batches were due in, whatever the writers' delays.
        rotations: written
            .iter()
            .map(|w| scenario.rotation(w.last_due))
            .max()
            .unwrap_or(0)
            + 1,
        buckets_written,
        writes,
        lookups: reader_outcome.all,
        lookups_active: reader_outcome.active,
        lookups_idle: reader_outcome.idle,
        checked: reader_outcome.checked,
        mismatches: reader_outcome.mismatches,
        lookup_errors: reader_outcome.errors,
        lookups_skipped: reader_outcome.skipped,
        problems: reader_outcome.problems,
        counts,
        before,
        empty,
        samples,
        reclaims: reclaim_runs,
        reclaims_while_idle: while_idle,
        buckets_reclaimed,
        buckets_drained,
        lake_commits: lake_outcome.commits,
        notifications: lake_outcome.notifications,
    })
}

/// Opens bucket `index` under the root, wraps it in a `HistoricalBucket` with its own lake and
/// the scheduler, and recovers it.
async fn open(
    setup: &Setup,
    backends: &BackendConfig,
    scheduler: &ReclaimScheduler,
    options: &EngineOptions,
    index: usize,
) -> Result<Bucket> {
    let config = &setup.config;
    let (backend, dir, options, contexts) = (
        setup.backend,
        setup.root.join(format!("bucket-{index}")),
        options.clone(),
        backends.clone(),
    );
    let engine = joined(tokio::task::spawn_blocking(move || {
        Ok(backend.open_with(&dir, options, &contexts)?)
    }))
    .await?;
    let log = Arc::new(ReclaimLog::default());
    let engine = Observed::wrap(engine, Arc::clone(&log));
    // Each bucket its own stream: buckets share key names, not records.
    let seed = config.seed ^ BUCKET_SALT.wrapping_mul(index as u64 + 1);
    let stream = SeededStream::new(seed, config.keys, config.delete_percent, config.value_size);
    let lake = Arc::new(StreamLake::new(stream.clone(), LAKE_SNAPSHOTS_KEPT));
    let lookuper: Arc<dyn LakeLookuper> = lake.clone();
    let bucket = HistoricalBucket::new(engine, lookuper)
        .with_scheduler(scheduler, BucketId(index as u64))?;
    bucket.recover(LakeSnapshot::default()).await?;
    Ok(Bucket {
        index,
        bucket,
        stream,
        lake,
        log,
        next: tokio::sync::Mutex::new(0),
        acked: AtomicU64::new(0),
        applying: AtomicU64::new(0),
        lake_end: AtomicU64::new(0),
        window: Mutex::new(WindowBytes::default()),
        written: AtomicBool::new(false),
    })
}

/// Closes every bucket (each waits for its running reclaim) and stops the scheduler.
async fn close(shared: Arc<Shared>, scheduler: ReclaimScheduler) -> Result<()> {
    let shared = Arc::into_inner(shared)
        .ok_or_else(|| Error::Harness("a task of the run still holds its buckets".into()))?;
    for bucket in shared.buckets {
        bucket.bucket.close().await?;
    }
    scheduler.shutdown().await;
    Ok(())
}

/// What answered the lookups so far, over every bucket.
fn lookup_counts(shared: &Shared) -> LookupCounts {
    shared
        .buckets
        .iter()
        .map(|b| b.bucket.stats())
        .fold(LookupCounts::default(), |sum, s| LookupCounts {
            local_values: sum.local_values + s.local_values,
            local_tombstones: sum.local_tombstones + s.local_tombstones,
            lake_fallbacks: sum.lake_fallbacks + s.lake_fallbacks,
        })
}

/// A task's result, its panic or cancellation turned into an error.
async fn joined<T>(task: JoinHandle<Result<T>>) -> Result<T> {
    task.await
        .map_err(|e| Error::Harness(format!("a compare task did not complete: {e}")))?
}

struct Written {
    records: u64,
    elapsed: Duration,
    /// The due time of its last batch, since the start.
    last_due: Duration,
    max_behind: Duration,
    latencies: Histogram,
}

/// Writer `slot` of the active set: its share of the records, in batches at `rate ÷ active`,
/// each into the bucket the rotation gives the slot at the batch's due time.
async fn writer(shared: Arc<Shared>, slot: usize) -> Result<Written> {
    let config = &shared.setup.config;
    let scenario = shared.setup.scenario;
    let k = scenario.active as u64;
    let total = config.records();
    let quota = total / k + u64::from((slot as u64) < total % k);
    // Each writer takes a share of the rate: a batch every `active` batch intervals, the
    // writers staggered across one.
    let period = config.batch_interval().as_secs_f64() * k as f64;
    let phase = period * slot as f64 / k as f64;
    let started = tokio::time::Instant::from_std(shared.origin);
    let mut out = Written {
        records: 0,
        elapsed: Duration::ZERO,
        last_due: Duration::ZERO,
        max_behind: Duration::ZERO,
        latencies: Histogram::default(),
    };
    for i in 0u64.. {
        if out.records >= quota {
            break;
        }
        let due_in = Duration::try_from_secs_f64(phase + period * i as f64)
            .map_err(|e| Error::Harness(format!("a batch's due time: {e}")))?;
        let due = started + due_in;
        out.last_due = due_in;
        tokio::time::sleep_until(due).await;
        out.max_behind = out
            .max_behind
            .max(tokio::time::Instant::now().saturating_duration_since(due));
        let bucket = shared
            .buckets
            .get(scenario.active_bucket(due_in, slot))
            .ok_or_else(|| Error::Harness("the rotation named no bucket".into()))?;
        bucket.written.store(true, Ordering::SeqCst);
        let len = config.batch.min(quota - out.records);
        out.latencies.record(bucket.write(len).await?);
        out.records += len;
        shared.setup.progress.inc(len);
    }
    out.elapsed = started.elapsed();
    Ok(out)
}

#[derive(Default)]
struct LakeOutcome {
    commits: u64,
    notifications: Histogram,
}

/// The lake: every `lake_interval`, for each bucket, a snapshot at the end the bucket had
/// acknowledged a lag ago (drawn afresh at each tick), and the bucket notified.
async fn lake_loop(shared: Arc<Shared>, mut stopped: watch::Receiver<bool>) -> Result<LakeOutcome> {
    let config = &shared.setup.config;
    let mut rng = SplitMix64::new(config.seed ^ LAKE_SALT);
    let mut ticker = tokio::time::interval(config.lake_interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // Per bucket, `(when, acknowledged end)` each time the end was seen to move, oldest first;
    // an idle bucket keeps one.
    let mut seen: Vec<VecDeque<(Duration, u64)>> = vec![VecDeque::new(); shared.buckets.len()];
    let permits = Arc::new(Semaphore::new(NOTIFY_CONCURRENCY));
    let mut outcome = LakeOutcome::default();
    loop {
        tokio::select! {
            _ = ticker.tick() => {}
            _ = stopped.changed() => break,
        }
        let now = shared.origin.elapsed();
        let lag = config.lag_min + rng.below((config.lag_max - config.lag_min).saturating_add(1));
        // `--lag` counts offsets at the configured rate: the lake trails by that much time.
        let lag = Duration::try_from_secs_f64(lag as f64 / config.rate.max(1) as f64)
            .unwrap_or(Duration::MAX);
        let cutoff = now.checked_sub(lag);
        let mut notifying = JoinSet::new();
        for (index, (bucket, seen)) in shared.buckets.iter().zip(&mut seen).enumerate() {
            let acked = bucket.acked.load(Ordering::SeqCst);
            if seen.back().is_none_or(|&(_, end)| end != acked) {
                seen.push_back((now, acked));
            }
            let Some(cutoff) = cutoff else { continue };
            // The newest end seen at or before the cutoff; older ones are never needed again,
            // since the lake's end only moves forward.
            while seen.get(1).is_some_and(|&(at, _)| at <= cutoff) {
                seen.pop_front();
            }
            let Some(&(at, end)) = seen.front() else {
                continue;
            };
            if at > cutoff || end <= bucket.lake_end.load(Ordering::SeqCst) {
                continue;
            }
            let snapshot = bucket.lake.commit(end)?;
            bucket.lake_end.store(end, Ordering::SeqCst);
            outcome.commits += 1;
            let permit = Arc::clone(&permits)
                .acquire_owned()
                .await
                .map_err(|e| Error::Harness(format!("the lake's permits: {e}")))?;
            let shared = Arc::clone(&shared);
            notifying.spawn(async move {
                let _permit = permit;
                let began = Instant::now();
                let bucket = shared
                    .buckets
                    .get(index)
                    .ok_or_else(|| Error::Harness("the lake notified no bucket".into()))?;
                bucket.bucket.on_lake_progress(snapshot).await?;
                Ok::<_, Error>(began.elapsed())
            });
        }
        // A tick's notifications end before the next tick commits: each bucket hears of its
        // snapshots in order.
        while let Some(took) = notifying.join_next().await {
            let took = took.map_err(|e| {
                Error::Harness(format!("a lake notification did not complete: {e}"))
            })??;
            outcome.notifications.record(took);
        }
    }
    Ok(outcome)
}

struct ReaderOutcome {
    all: Histogram,
    active: Histogram,
    idle: Histogram,
    checked: u64,
    mismatches: u64,
    errors: u64,
    skipped: u64,
    problems: Vec<String>,
}

impl ReaderOutcome {
    fn problem(&mut self, describe: impl FnOnce() -> String) {
        if self.problems.len() < PROBLEMS_KEPT {
            self.problems.push(describe());
        }
    }
}

/// The reader: lookups at `lookup_rate`, alternately of a bucket being written and of any
/// bucket, each checked against that bucket's model.
async fn reader_loop(
    shared: Arc<Shared>,
    mut stopped: watch::Receiver<bool>,
) -> Result<ReaderOutcome> {
    let mut outcome = ReaderOutcome {
        all: Histogram::default(),
        active: Histogram::default(),
        idle: Histogram::default(),
        checked: 0,
        mismatches: 0,
        errors: 0,
        skipped: 0,
        problems: Vec::new(),
    };
    let result = read_and_check(&shared, &mut stopped, &mut outcome).await;
    // No check is pending any more: the models may settle up to their lakes' oldest snapshots.
    for bucket in &shared.buckets {
        bucket.lake.end_checks();
    }
    result.map(|()| outcome)
}

async fn read_and_check(
    shared: &Shared,
    stopped: &mut watch::Receiver<bool>,
    outcome: &mut ReaderOutcome,
) -> Result<()> {
    let config = &shared.setup.config;
    let scenario = shared.setup.scenario;
    if config.lookup_rate == 0 {
        return Ok(());
    }
    let mut rng = SplitMix64::new(config.seed ^ READER_SALT);
    let interval = Duration::from_secs_f64(1.0 / config.lookup_rate as f64);
    let mut due = tokio::time::Instant::now();
    for n in 0u64.. {
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
        let at = shared.origin.elapsed();
        let index = if n % 2 == 0 {
            scenario.active_bucket(at, rng.below(scenario.active as u64) as usize)
        } else {
            rng.below(scenario.buckets as u64) as usize
        };
        let Some(bucket) = shared.buckets.get(index) else {
            continue;
        };
        let acked = bucket.acked.load(Ordering::SeqCst);
        if acked == 0 {
            continue;
        }
        let key = bucket.stream.key_index(rng.below(acked));
        let name = SeededStream::key(key);
        bucket.lake.begin_check(acked);
        let began = Instant::now();
        let answer = bucket.bucket.lookup(&name).await;
        let latency = began.elapsed();
        let applying = bucket.applying.load(Ordering::SeqCst);
        outcome.all.record(latency);
        match scenario.is_active(index, at) {
            true => outcome.active.record(latency),
            false => outcome.idle.record(latency),
        }
        outcome.checked += 1;
        match answer {
            Ok(answer) => {
                if !bucket.lake.check(key, answer.as_deref(), acked, applying)? {
                    outcome.mismatches += 1;
                    outcome.problem(|| {
                        format!(
                            "bucket {index}, key {key}: answered {} while the acknowledged end \
                             was {acked}",
                            describe(answer.as_deref())
                        )
                    });
                }
            }
            Err(e) => {
                outcome.errors += 1;
                outcome.problem(|| format!("bucket {index}, key {key}: lookup failed: {e}"));
            }
        }
    }
    Ok(())
}

/// After writing: every key of every bucket, looked up once more, must answer its final state.
async fn final_check(shared: &Shared, outcome: &mut ReaderOutcome) -> Result<()> {
    for bucket in &shared.buckets {
        let end = bucket.acked.load(Ordering::SeqCst);
        let keys = bucket.lake.keys();
        for chunk in keys.chunks(FINAL_CHECK_CHUNK) {
            let names: Vec<Vec<u8>> = chunk.iter().map(|&k| SeededStream::key(k)).collect();
            let answers = bucket.bucket.lookup_many(&names).await?;
            for (&key, answer) in chunk.iter().zip(answers) {
                outcome.checked += 1;
                let expected = bucket.lake.state_at(key, end)?;
                if answer != expected {
                    outcome.mismatches += 1;
                    outcome.problem(|| {
                        format!(
                            "bucket {}, key {key} at the end: answered {}, expected {}",
                            bucket.index,
                            describe(answer.as_deref()),
                            describe(expected.as_deref())
                        )
                    });
                }
            }
        }
    }
    Ok(())
}

/// The sampler: the root and the process every `sample_interval`, and the progress line.
async fn sampler_loop(
    shared: Arc<Shared>,
    mut stopped: watch::Receiver<bool>,
) -> Result<Vec<Sample>> {
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
            "{:>10} on disk, window {}, RSS {}",
            units::bytes(s.bytes_on_disk),
            units::bytes(s.window_bytes),
            s.usage.rss_bytes.map_or("?".into(), units::bytes)
        ));
        samples.push(s);
    }
    Ok(samples)
}

/// The root and the process now (the walk of the root on a blocking thread).
async fn sample(shared: &Shared) -> Result<Sample> {
    let at = shared.origin.elapsed();
    let root = shared.setup.root.clone();
    let (on_disk, usage) = joined(tokio::task::spawn_blocking(move || {
        Ok((tree_bytes(&root)?, ProcessUsage::current()))
    }))
    .await?;
    let mut window_bytes = 0u64;
    for bucket in &shared.buckets {
        let watermark = bucket.bucket.watermark();
        let applied = bucket.bucket.engine().applied_end();
        let mut bytes = bucket.window();
        window_bytes = window_bytes.saturating_add(bytes.window(watermark, applied));
        // Later samples read a watermark at least this one.
        bytes.forget_below(watermark);
    }
    Ok(Sample {
        at,
        bytes_on_disk: on_disk.length,
        allocated_bytes: on_disk.allocated,
        window_bytes,
        usage,
    })
}
