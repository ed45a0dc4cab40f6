//! The per-bucket worker task: waits for a request, honours `min_interval`, takes a concurrency
//! permit, skips buckets with too little to reclaim, and runs the reclaim on a blocking thread
//! with retries.

use std::sync::Arc;

use tokio::sync::{OwnedSemaphorePermit, Semaphore, watch};
use tokio::time::Instant;

use super::config::SchedulerConfig;
use super::policy::Verdict;
use super::slot::Slot;
use super::stats::Event;
use crate::error::Error;
use tidemark_engine_api::Engine;

/// Decrements the live-worker count when the worker ends, however it ends.
pub(crate) struct AliveGuard(pub(crate) Arc<watch::Sender<usize>>);

impl Drop for AliveGuard {
    fn drop(&mut self) {
        self.0.send_modify(|n| *n = n.saturating_sub(1));
    }
}

/// Everything one bucket's worker needs.
pub(crate) struct Worker {
    pub(crate) slot: Arc<Slot>,
    pub(crate) config: Arc<SchedulerConfig>,
    pub(crate) permits: Arc<Semaphore>,
    pub(crate) stop: watch::Receiver<bool>,
    pub(crate) alive: AliveGuard,
}

enum Flow {
    Continue,
    Stop,
}

/// Resolves once the worker must stop: asked to, or the scheduler is gone (sender dropped).
async fn stopped(stop: &mut watch::Receiver<bool>) {
    // An error means the sender was dropped with the scheduler, which is a stop too.
    let _ = stop.wait_for(|s| *s).await;
}

impl Worker {
    pub(crate) async fn run(self) {
        let Worker {
            slot,
            config,
            permits,
            mut stop,
            alive: _alive,
        } = self;
        let mut last_start: Option<Instant> = None;
        loop {
            slot.settle();
            tokio::select! {
                biased;
                () = stopped(&mut stop) => break,
                () = slot.woken() => {}
            }
            if let Some(previous) = last_start {
                // Requests arriving during this wait coalesce into the one already waiting.
                let due = previous.checked_add(config.min_interval);
                tokio::select! {
                    biased;
                    () = stopped(&mut stop) => break,
                    () = sleep_until(due) => {}
                }
            }
            if !slot.take_pending() {
                // A stale wake-up: the request it announced was served by an earlier run.
                continue;
            }
            // Decided before taking a permit: a skipped bucket never holds up the others.
            if not_worth_it(&slot, &config) {
                continue;
            }
            let permit = tokio::select! {
                biased;
                () = stopped(&mut stop) => break,
                permit = Arc::clone(&permits).acquire_owned() => permit,
            };
            let Ok(permit) = permit else { break };
            last_start = Some(Instant::now());
            if let Flow::Stop = reclaim(&slot, &config, &permits, &mut stop, permit).await {
                break;
            }
        }
        if slot.take_pending() {
            slot.tally.count(Event::Dropped);
            tracing::debug!(bucket = %slot.id, "waiting reclaim dropped: worker stopped");
        }
        slot.stopped();
        tracing::debug!(bucket = %slot.id, "reclaim worker stopped");
    }
}

async fn sleep_until(due: Option<Instant>) {
    match due {
        Some(due) => tokio::time::sleep_until(due).await,
        // `min_interval` so large the instant overflows: never due again.
        None => std::future::pending().await,
    }
}

/// Whether the bucket's reclaim would not pay for itself under its backend's policy (counted as
/// skipped). Reads the engine's O(1) estimate inline: `Engine::reclaimable` does no I/O.
fn not_worth_it(slot: &Slot, config: &SchedulerConfig) -> bool {
    let policy = config.policy_for(slot.engine.reclaim_cost());
    if policy.never_skips() {
        return false;
    }
    let reclaimable = match slot.engine.reclaimable() {
        Ok(r) => r,
        Err(e) => {
            tracing::warn!(bucket = %slot.id, error = %e, "reclaim estimate failed; reclaiming anyway");
            return false;
        }
    };
    let verdict = policy.verdict(&reclaimable);
    if verdict == Verdict::Run {
        return false;
    }
    slot.tally.count(Event::Skipped);
    tracing::debug!(
        bucket = %slot.id,
        covered_entries = reclaimable.covered.entries,
        covered_bytes = reclaimable.covered.bytes,
        stored_bytes = reclaimable.stored.bytes,
        min_entries = policy.min_entries,
        min_garbage_ratio = policy.min_garbage_ratio,
        ?verdict,
        "reclaim skipped: it would not pay for itself yet"
    );
    true
}

/// One reclaim run: attempts on a blocking thread, retried with exponential backoff. The permit
/// is released during backoff so other buckets are not held up by a failing one.
async fn reclaim(
    slot: &Slot,
    config: &SchedulerConfig,
    permits: &Arc<Semaphore>,
    stop: &mut watch::Receiver<bool>,
    permit: OwnedSemaphorePermit,
) -> Flow {
    let mut permit = Some(permit);
    let mut retry: u32 = 0;
    loop {
        let held = match permit.take() {
            Some(p) => p,
            None => {
                let acquired = tokio::select! {
                    biased;
                    () = stopped(stop) => None,
                    p = Arc::clone(permits).acquire_owned() => p.ok(),
                };
                match acquired {
                    Some(p) => p,
                    None => {
                        slot.tally.count(Event::GaveUp);
                        return Flow::Stop;
                    }
                }
            }
        };
        let started = Instant::now();
        let engine = slot.engine.clone();
        let result = tokio::task::spawn_blocking(move || engine.reclaim()).await;
        drop(held);
        let error = match result {
            Ok(Ok(report)) => {
                let took = started.elapsed();
                slot.tally.run(report.removed(), took);
                tracing::info!(
                    bucket = %slot.id,
                    threshold = report.threshold,
                    values_removed = report.values_removed,
                    tombstones_removed = report.tombstones_removed,
                    bytes_before = report.bytes_before,
                    bytes_after = report.bytes_after,
                    took_ms = took.as_millis(),
                    "reclaim finished"
                );
                return Flow::Continue;
            }
            Ok(Err(e)) => Error::Engine(e),
            Err(join) => Error::Internal(format!(
                "the blocking reclaim task did not complete: {join}"
            )),
        };
        slot.tally.count(Event::Failed);
        if retry >= config.max_retries {
            slot.tally.count(Event::GaveUp);
            tracing::error!(
                bucket = %slot.id,
                error = %error,
                retries = retry,
                "reclaim failed; giving up until the next request"
            );
            return Flow::Continue;
        }
        let wait = config.backoff(retry);
        tracing::warn!(
            bucket = %slot.id,
            error = %error,
            retry = retry + 1,
            backoff_ms = wait.as_millis(),
            "reclaim failed; retrying"
        );
        tokio::select! {
            biased;
            () = stopped(stop) => {
                slot.tally.count(Event::GaveUp);
                return Flow::Stop;
            }
            () = tokio::time::sleep(wait) => {}
        }
        retry += 1;
        slot.tally.count(Event::Retry);
    }
}
