//! Reclaim scheduler behaviour under tokio's paused clock, with a fake engine that counts
//! reclaims, records when each started, can fail on demand, and can hold reclaims running.
//!
//! Time only moves when every task is idle (auto-advance), and tokio does not auto-advance while
//! a `spawn_blocking` task runs, so the instants recorded below are exact and deterministic. The
//! tests never sleep while a reclaim is held at the gate (time could not move); they wait on
//! watch channels instead.

// Test helpers (gates, fake engines) should fail the test loudly on a poisoned lock.
#![allow(clippy::unwrap_used)]

use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use tidemark_bucket::scheduler::Requested;
use tidemark_bucket::{
    BucketId, Error as BucketError, ReclaimPolicy, ReclaimScheduler, ReclaimStats, SchedulerConfig,
};
use tidemark_engine_api::{
    Engine, EngineOptions, Error, MemoryEngine, ReclaimCost, ReclaimReport, Result, WriteBatch,
    forward_engine,
};
use tokio::sync::watch;
use tokio::time::Instant;

/// Blocks reclaims (on their blocking thread) until opened or given passes.
#[derive(Default)]
struct Gate {
    state: Mutex<GateState>,
    changed: Condvar,
}

#[derive(Default)]
struct GateState {
    held: bool,
    passes: usize,
}

impl Gate {
    fn hold(&self) {
        self.state.lock().unwrap().held = true;
    }
    fn open(&self) {
        self.state.lock().unwrap().held = false;
        self.changed.notify_all();
    }
    fn allow(&self, n: usize) {
        self.state.lock().unwrap().passes += n;
        self.changed.notify_all();
    }
    fn pass(&self) {
        let mut state = self.state.lock().unwrap();
        while state.held && state.passes == 0 {
            state = self.changed.wait(state).unwrap();
        }
        if state.held {
            state.passes -= 1;
        }
    }
}

/// Shared by every fake engine of a test: concurrency tracking and the gate.
struct Probe {
    in_flight: AtomicUsize,
    max_in_flight: AtomicUsize,
    entered: watch::Sender<usize>,
    gate: Gate,
}

impl Probe {
    fn new() -> Arc<Self> {
        Arc::new(Probe {
            in_flight: AtomicUsize::new(0),
            max_in_flight: AtomicUsize::new(0),
            entered: watch::Sender::new(0),
            gate: Gate::default(),
        })
    }

    /// Waits until `n` reclaim attempts (over all engines) have started.
    async fn entered(&self, n: usize) {
        self.entered
            .subscribe()
            .wait_for(|e| *e >= n)
            .await
            .unwrap();
    }
}

/// A memory engine whose `reclaim` is observable, can fail, and can be held at the gate.
struct FakeEngine {
    inner: MemoryEngine,
    probe: Arc<Probe>,
    fail_next: AtomicU32,
    starts: Mutex<Vec<Instant>>,
    /// What its reclaim declares to cost (the scheduler's policy follows it).
    cost: ReclaimCost,
}

impl FakeEngine {
    fn new(probe: &Arc<Probe>) -> Arc<Self> {
        Self::costing(probe, ReclaimCost::Proportional)
    }

    fn costing(probe: &Arc<Probe>, cost: ReclaimCost) -> Arc<Self> {
        Arc::new(FakeEngine {
            inner: MemoryEngine::new(EngineOptions::default()),
            probe: Arc::clone(probe),
            fail_next: AtomicU32::new(0),
            starts: Mutex::new(Vec::new()),
            cost,
        })
    }

    /// `n` keys at offsets `0..n`, with `W = covered`.
    fn filled(probe: &Arc<Probe>, n: u64, covered: u64) -> Arc<Self> {
        Self::filled_costing(probe, n, covered, ReclaimCost::Proportional)
    }

    /// [`Self::filled`], its reclaims declared to cost `cost`.
    fn filled_costing(probe: &Arc<Probe>, n: u64, covered: u64, cost: ReclaimCost) -> Arc<Self> {
        let engine = Self::costing(probe, cost);
        let batch: WriteBatch = (0..n)
            .map(|i| tidemark_engine_api::Record::put(format!("k{i:03}"), format!("v{i}"), i))
            .collect();
        engine.inner.apply(&batch).unwrap();
        engine.inner.advance_watermark(covered).unwrap();
        engine
    }

    fn attempts(&self) -> usize {
        self.starts.lock().unwrap().len()
    }

    /// Start instants of every reclaim attempt, relative to `t0`.
    fn starts_since(&self, t0: Instant) -> Vec<Duration> {
        self.starts
            .lock()
            .unwrap()
            .iter()
            .map(|s| *s - t0)
            .collect()
    }
}

impl Engine for FakeEngine {
    forward_engine!(inner; apply lookup advance_watermark adopt_lake_watermark watermark
        applied_end reclaim_below stats flush reclaimable verify wait_for_background_work);
    fn backend_name(&self) -> &'static str {
        "fake"
    }
    fn reclaim_cost(&self) -> ReclaimCost {
        self.cost
    }
    fn reclaim(&self) -> Result<ReclaimReport> {
        self.starts.lock().unwrap().push(Instant::now());
        let now = self.probe.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        self.probe.max_in_flight.fetch_max(now, Ordering::SeqCst);
        self.probe.entered.send_modify(|e| *e += 1);
        self.probe.gate.pass();
        let failing = self
            .fail_next
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok();
        let result = if failing {
            Err(Error::Io(std::io::Error::other("injected reclaim failure")))
        } else {
            self.inner.reclaim()
        };
        self.probe.in_flight.fetch_sub(1, Ordering::SeqCst);
        result
    }
}

fn config() -> SchedulerConfig {
    SchedulerConfig::default()
        .with_min_interval(Duration::from_secs(1))
        .with_min_reclaimable(0)
}

fn scheduler(config: SchedulerConfig) -> ReclaimScheduler {
    ReclaimScheduler::new(config).unwrap()
}

/// Lets the workers run everything they have (auto-advancing the paused clock).
async fn settle() {
    tokio::time::sleep(Duration::from_secs(3600)).await;
}

const A: BucketId = BucketId(1);

/// Bucket [`A`] over a fake engine of 10 entries, 5 of them covered, registered with a new
/// scheduler of `config`: where most tests start.
fn bucket_a(config: SchedulerConfig) -> (Arc<Probe>, Arc<FakeEngine>, ReclaimScheduler) {
    let probe = Probe::new();
    let engine = FakeEngine::filled(&probe, 10, 5);
    let sched = scheduler(config);
    sched.register(A, engine.clone()).unwrap();
    (probe, engine, sched)
}

/// [`bucket_a`] whose next `failures` reclaims fail, under a scheduler that retries after
/// `backoff` (initial, maximum) at most `max_retries` times.
fn failing_a(
    failures: u32,
    backoff: (Duration, Duration),
    max_retries: u32,
) -> (Arc<Probe>, Arc<FakeEngine>, ReclaimScheduler) {
    let a = bucket_a(
        config()
            .with_retry_backoff(backoff.0, backoff.1)
            .with_max_retries(max_retries),
    );
    a.1.fail_next.store(failures, Ordering::SeqCst);
    a
}

/// Requests a reclaim of [`A`], lets the workers run everything, and returns `A`'s stats.
async fn request_settled(sched: &ReclaimScheduler) -> ReclaimStats {
    sched.request(A).unwrap();
    settle().await;
    sched.bucket_stats(A).unwrap()
}

#[tokio::test(start_paused = true)]
async fn burst_of_1000_requests_runs_at_most_two_reclaims() {
    let (probe, engine, sched) = bucket_a(config());

    // The first request starts a run; the other 999 arrive while it runs or waits out
    // min_interval, so they all fold into the single waiting reclaim.
    assert_eq!(sched.request(A).unwrap(), Requested::Queued);
    probe.entered(1).await;
    for i in 0..999 {
        let r = sched.request(A).unwrap();
        assert_eq!(r == Requested::Queued, i == 0, "request {i}");
        if i % 100 == 0 {
            tokio::task::yield_now().await;
        }
    }
    settle().await;

    let s = sched.bucket_stats(A).unwrap();
    assert_eq!(s.requests, 1000);
    assert_eq!(s.runs, 2);
    assert_eq!(s.coalesced, 998);
    assert_eq!(engine.attempts(), 2);
    assert_eq!(sched.stats().total, s);
}

#[tokio::test(start_paused = true)]
async fn burst_before_the_worker_wakes_runs_once() {
    let (_, engine, sched) = bucket_a(config());
    for _ in 0..1000 {
        sched.request(A).unwrap();
    }
    settle().await;
    let s = sched.bucket_stats(A).unwrap();
    assert_eq!((s.requests, s.coalesced, s.runs), (1000, 999, 1));
    assert_eq!(engine.attempts(), 1);
    assert_eq!(s.entries_removed, 5);
    assert!(s.last_duration.is_some());
}

#[tokio::test(start_paused = true)]
async fn min_interval_is_respected_exactly() {
    let interval = Duration::from_secs(10);
    let (probe, engine, sched) = bucket_a(config().with_min_interval(interval));
    let t0 = Instant::now();

    sched.request(A).unwrap();
    probe.entered(1).await;
    // Immediately again: waits until exactly t0 + interval.
    sched.request(A).unwrap();
    probe.entered(2).await;
    // 3 s later (t = 13 s): due at 20 s; a second request meanwhile coalesces.
    tokio::time::sleep(Duration::from_secs(3)).await;
    sched.request(A).unwrap();
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(sched.request(A).unwrap(), Requested::Coalesced);
    probe.entered(3).await;
    // Long idle: the next request runs at once.
    tokio::time::sleep(Duration::from_secs(45)).await;
    let requested_at = Instant::now() - t0;
    sched.request(A).unwrap();
    probe.entered(4).await;

    let secs = |s: u64| Duration::from_secs(s);
    assert_eq!(requested_at, secs(65));
    assert_eq!(
        engine.starts_since(t0),
        vec![secs(0), secs(10), secs(20), secs(65)]
    );
    settle().await;
    let s = sched.bucket_stats(A).unwrap();
    assert_eq!((s.requests, s.coalesced, s.runs), (5, 1, 4));
}

#[tokio::test(start_paused = true)]
async fn max_concurrent_is_never_exceeded_across_50_buckets() {
    const BUCKETS: usize = 50;
    const MAX: usize = 4;
    let probe = Probe::new();
    let sched = scheduler(config().with_max_concurrent(MAX));
    let engines: Vec<_> = (0..BUCKETS)
        .map(|i| {
            let engine = FakeEngine::filled(&probe, 4, 2);
            sched.register(BucketId(i as u64), engine.clone()).unwrap();
            engine
        })
        .collect();

    probe.gate.hold();
    for i in 0..BUCKETS {
        sched.request(BucketId(i as u64)).unwrap();
    }
    // Exactly MAX reclaims get in; each one let through admits exactly one more.
    probe.entered(MAX).await;
    assert_eq!(probe.in_flight.load(Ordering::SeqCst), MAX);
    for released in 1..=BUCKETS - MAX {
        probe.gate.allow(1);
        probe.entered(MAX + released).await;
        assert!(probe.in_flight.load(Ordering::SeqCst) <= MAX);
    }
    probe.gate.open();
    settle().await;

    assert_eq!(probe.max_in_flight.load(Ordering::SeqCst), MAX);
    assert!(engines.iter().all(|e| e.attempts() == 1));
    let total = sched.stats().total;
    assert_eq!(
        (total.requests, total.runs, total.entries_removed),
        (50, 50, 100)
    );
    assert_eq!(sched.stats().buckets.len(), BUCKETS);
}

#[tokio::test(start_paused = true)]
async fn buckets_below_min_reclaimable_are_skipped() {
    let probe = Probe::new();
    let engine = FakeEngine::filled(&probe, 10, 3);
    let sched = scheduler(config().with_min_reclaimable(5));
    sched.register(A, engine.clone()).unwrap();

    let s = request_settled(&sched).await;
    assert_eq!((s.skipped, s.runs), (1, 0));
    assert_eq!(engine.attempts(), 0);
    assert_eq!(engine.stats().unwrap().covered_estimate, 3);

    // More accumulates: the next request runs.
    engine.advance_watermark(8).unwrap();
    let s = request_settled(&sched).await;
    assert_eq!((s.skipped, s.runs, s.entries_removed), (1, 1, 8));
    assert_eq!(engine.stats().unwrap().covered_estimate, 0);
}

#[tokio::test(start_paused = true)]
async fn compaction_policy_waits_for_the_garbage_ratio() {
    let probe = Probe::new();
    // Ten equal-sized entries, three covered: a garbage ratio of 0.3. The engine declares a
    // rewriting reclaim, so the default configuration applies the compaction policy to it.
    let engine = FakeEngine::filled_costing(&probe, 10, 3, ReclaimCost::Rewrite);
    let sched = scheduler(config());
    sched.register(A, engine.clone()).unwrap();
    let r = engine.reclaimable().unwrap();
    assert!((r.garbage_ratio() - 0.3).abs() < 1e-9, "{r:?}");

    assert_eq!(request_settled(&sched).await.skipped, 1);
    assert_eq!(engine.attempts(), 0, "below the ratio: no reclaim");

    // Half the bytes covered: the ratio is reached and the reclaim runs.
    engine.advance_watermark(5).unwrap();
    let s = request_settled(&sched).await;
    assert_eq!((s.skipped, s.runs, s.entries_removed), (1, 1, 5));
    assert_eq!(engine.reclaimable().unwrap().covered.entries, 0);
    // A sweeping backend keeps the sweeping default.
    assert_eq!(
        SchedulerConfig::default().policy_for(ReclaimCost::Proportional),
        ReclaimPolicy::SWEEP
    );
}

#[tokio::test(start_paused = true)]
async fn failed_reclaims_are_retried_with_backoff_and_data_is_untouched() {
    let ms = Duration::from_millis;
    let (probe, engine, sched) = failing_a(3, (ms(100), ms(250)), 5);
    let t0 = Instant::now();
    let before = engine.inner.entries().unwrap();

    sched.request(A).unwrap();
    probe.entered(1).await;
    // Half-way through the first backoff: one failure, nothing removed.
    tokio::time::sleep(Duration::from_millis(50)).await;
    let s = sched.bucket_stats(A).unwrap();
    assert_eq!((s.failed, s.runs), (1, 0));
    assert_eq!(engine.inner.entries().unwrap(), before);

    settle().await;
    // Backoff 100 ms, 200 ms, then capped at 250 ms.
    assert_eq!(
        engine.starts_since(t0),
        vec![ms(0), ms(100), ms(300), ms(550)]
    );
    let s = sched.bucket_stats(A).unwrap();
    assert_eq!((s.failed, s.retries, s.gave_up, s.runs), (3, 3, 0, 1));
    // Exactly the covered entries went; the rest is intact.
    let after = engine.inner.entries().unwrap();
    assert_eq!(after, before[5..]);
}

#[tokio::test(start_paused = true)]
async fn reclaim_gives_up_after_max_retries_until_the_next_request() {
    let (_, engine, sched) = failing_a(100, (Duration::from_millis(10), Duration::from_secs(1)), 2);
    let before = engine.inner.entries().unwrap();

    let s = request_settled(&sched).await;
    assert_eq!((s.failed, s.retries, s.gave_up, s.runs), (3, 2, 1, 0));
    assert_eq!(engine.inner.entries().unwrap(), before);

    engine.fail_next.store(0, Ordering::SeqCst);
    let s = request_settled(&sched).await;
    assert_eq!((s.failed, s.gave_up, s.runs), (3, 1, 1));
    assert_eq!(engine.inner.entries().unwrap(), before[5..]);
}

#[tokio::test(start_paused = true)]
async fn shutdown_waits_for_running_reclaims_and_refuses_new_requests() {
    let probe = Probe::new();
    let a = FakeEngine::filled(&probe, 10, 5);
    let b = FakeEngine::filled(&probe, 10, 5);
    let sched = scheduler(config());
    sched.register(A, a.clone()).unwrap();
    sched.register(BucketId(2), b.clone()).unwrap();

    probe.gate.hold();
    sched.request(A).unwrap();
    probe.entered(1).await;
    // A waiting reclaim behind the running one; it is dropped by shutdown.
    assert_eq!(sched.request(A).unwrap(), Requested::Queued);

    let shutdown = tokio::spawn({
        let sched = sched.clone();
        async move { sched.shutdown().await }
    });
    for _ in 0..20 {
        tokio::task::yield_now().await;
    }
    assert!(
        !shutdown.is_finished(),
        "shutdown returned while a reclaim was running"
    );
    assert!(sched.is_shut_down());
    assert!(matches!(sched.request(A), Err(BucketError::Closed)));
    assert!(matches!(
        sched.request(BucketId(2)),
        Err(BucketError::Closed)
    ));
    let c = FakeEngine::new(&probe);
    assert!(matches!(
        sched.register(BucketId(3), c),
        Err(BucketError::Closed)
    ));

    probe.gate.open();
    shutdown.await.unwrap();
    // A second call returns at once; everything has stopped.
    sched.shutdown().await;

    let stats = sched.stats();
    assert_eq!((stats.total.runs, stats.total.dropped), (1, 1));
    assert_eq!(stats.rejected, 2);
    assert!(stats.buckets.is_empty());
    assert_eq!((a.attempts(), b.attempts()), (1, 0));
    // The scheduler let go of the engines.
    assert_eq!(Arc::strong_count(&a), 1);
    assert_eq!(Arc::strong_count(&b), 1);
}

#[tokio::test(start_paused = true)]
async fn unregister_releases_the_engine_and_unknown_buckets_are_rejected() {
    let (_, engine, sched) = bucket_a(config());
    assert!(matches!(
        sched.register(A, engine.clone()),
        Err(BucketError::InvalidInput(_))
    ));
    sched.request(A).unwrap();
    settle().await;
    assert!(sched.unregister(A).await);
    assert_eq!(Arc::strong_count(&engine), 1);
    assert!(matches!(
        sched.request(A),
        Err(BucketError::InvalidInput(_))
    ));
    assert!(!sched.unregister(A).await);
    let stats = sched.stats();
    assert_eq!((stats.total.runs, stats.rejected), (1, 1));
    assert!(stats.buckets.is_empty());
}

#[test]
fn new_outside_a_runtime_is_an_error() {
    assert!(matches!(
        ReclaimScheduler::new(SchedulerConfig::default()),
        Err(BucketError::Unsupported(_))
    ));
}

#[tokio::test(start_paused = true)]
async fn forget_frees_the_id_at_once_and_the_worker_lets_go_after_its_reclaim() {
    let (probe, engine, sched) = bucket_a(config());
    probe.gate.hold();
    sched.request(A).unwrap();
    probe.entered(1).await;
    assert_eq!(sched.request(A).unwrap(), Requested::Queued);

    // Returns without waiting for the held reclaim (a sync call: nothing to await).
    assert!(sched.forget(A));
    assert!(!sched.forget(A));
    assert!(sched.bucket_stats(A).is_none());
    assert!(matches!(
        sched.request(A),
        Err(BucketError::InvalidInput(_))
    ));
    let successor = FakeEngine::filled(&probe, 10, 5);
    sched.register(A, successor.clone()).unwrap();
    assert!(
        Arc::strong_count(&engine) > 1,
        "the running reclaim still uses the engine"
    );

    probe.gate.open();
    // Shutdown waits for every worker, forgotten ones included.
    sched.shutdown().await;
    assert_eq!(Arc::strong_count(&engine), 1);
    assert_eq!(Arc::strong_count(&successor), 1);
    assert_eq!((engine.attempts(), successor.attempts()), (1, 0));
    let total = sched.stats().total;
    assert_eq!(
        (total.runs, total.dropped),
        (1, 1),
        "the running reclaim finished; the waiting one was dropped"
    );
}

#[tokio::test(start_paused = true)]
async fn settled_waits_for_the_running_and_the_waiting_reclaim() {
    use std::future::Future;
    use std::task::{Context, Poll, Waker};

    let (probe, _engine, sched) = bucket_a(config().with_min_interval(Duration::ZERO));
    // Nothing requested yet: settled at once.
    sched.settled(A).await;

    probe.gate.hold();
    sched.request(A).unwrap();
    probe.entered(1).await;
    sched.request(A).unwrap(); // waits behind the running one
    let mut settled = std::pin::pin!(sched.settled(A));
    let mut cx = Context::from_waker(Waker::noop());
    assert!(
        settled.as_mut().poll(&mut cx).is_pending(),
        "settled while a reclaim runs and another waits"
    );
    probe.gate.open();
    settled.await;
    let s = sched.bucket_stats(A).unwrap();
    assert_eq!((s.requests, s.runs), (2, 2), "{s:?}");
    assert!(matches!(
        std::pin::pin!(sched.settled(A)).as_mut().poll(&mut cx),
        Poll::Ready(())
    ));
    // An unknown bucket has nothing to wait for.
    sched.settled(BucketId(99)).await;
}
