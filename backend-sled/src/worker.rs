//! The context's rebuild thread: a queue of buckets to rebuild ([`Rebuild`]), run one at a time.
//!
//! Why a thread: a rebuild copies the live rows into a fresh database ([`crate::rebuild`]), which
//! costs what is live; run inside the reclaim that found it due, it made that reclaim cost the
//! whole bucket instead of what it reclaimed. So a reclaim only queues the rebuild and returns
//! after its sweep; one thread per context runs the queued rebuilds one at a time (the extra
//! database a rebuild opens stays bounded to one per context). The thread starts with the first
//! rebuild a context queues: a context that never rebuilds never runs it. The flusher thread is
//! not reused: a rebuild takes seconds, and every bucket's periodic flush would wait for it.

use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, Weak};
use std::thread::{self, JoinHandle};

use tidemark_disk::contain::catch_panic;
use tidemark_engine_api::{Error, Result};

use crate::error::BACKEND;
use crate::progress::Progress;

/// What the rebuild thread rebuilds: a bucket, seen only through what the thread needs of it.
pub(crate) trait Rebuild: Send + Sync + 'static {
    /// Where its rebuild is.
    fn progress(&self) -> &Arc<Progress>;

    /// Whether a rebuild is due now.
    fn due(&self) -> Result<bool>;

    /// Rebuilds it once (a failure is logged and counted where it happens).
    fn rebuild(&self) -> Result<()>;

    /// A rebuild panicked somewhere, its switch perhaps included: the store must fail.
    fn panicked(&self, error: &Error);
}

/// A queued rebuild: the bucket (weakly: the queue must not keep a closed bucket open) and its
/// progress.
struct Queued {
    bucket: Weak<dyn Rebuild>,
    progress: Arc<Progress>,
    /// Queued again after a rebuild during which a reclaim found one due: run only if one is
    /// still due (the rebuild that ended may have taken care of it).
    recheck: bool,
}

#[derive(Default)]
struct QueueState {
    jobs: VecDeque<Queued>,
    stopped: bool,
}

#[derive(Default)]
struct Queue {
    state: Mutex<QueueState>,
    wake: Condvar,
}

impl Queue {
    fn state(&self) -> MutexGuard<'_, QueueState> {
        // A push, a pop or a flag: consistent even if poisoned.
        tidemark_engine_api::sync::lock_recovered(&self.state)
    }
}

/// The context's rebuild thread and its queue; dropping it stops and joins the thread.
#[derive(Default)]
pub(crate) struct Rebuilder {
    queue: Arc<Queue>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl std::fmt::Debug for Rebuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Rebuilder").finish_non_exhaustive()
    }
}

impl Rebuilder {
    /// Queues a rebuild of `bucket`, whose progress the caller has marked queued; starts the
    /// thread if it is not running yet. An error when the thread cannot be started (nothing is
    /// queued then).
    pub(crate) fn submit<B: Rebuild>(&self, bucket: &Arc<B>) -> Result<()> {
        let mut thread = tidemark_engine_api::sync::lock_recovered(&self.thread);
        if thread.is_none() {
            let queue = Arc::clone(&self.queue);
            *thread = Some(
                thread::Builder::new()
                    .name("tidemark-sled-rebuild".into())
                    .spawn(move || run(&queue))
                    .map_err(|e| Error::backend(BACKEND, e))?,
            );
        }
        let weak: Weak<B> = Arc::downgrade(bucket);
        self.queue.state().jobs.push_back(Queued {
            bucket: weak,
            progress: Arc::clone(bucket.progress()),
            recheck: false,
        });
        self.queue.wake.notify_all();
        Ok(())
    }

    /// Whether the thread has been started.
    pub(crate) fn started(&self) -> bool {
        tidemark_engine_api::sync::lock_recovered(&self.thread).is_some()
    }
}

impl Drop for Rebuilder {
    fn drop(&mut self) {
        self.queue.state().stopped = true;
        self.queue.wake.notify_all();
        let thread = self
            .thread
            .get_mut()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .take();
        if let Some(thread) = thread {
            // The thread lets go of every bucket (and so of the context) before it reports a
            // rebuild over, and a closing bucket waits for that report, so the context is never
            // dropped on the thread itself; were it, joining itself would deadlock.
            if thread.thread().id() != thread::current().id() {
                let _ = thread.join();
            }
        }
    }
}

fn run(queue: &Queue) {
    loop {
        let job = {
            let state = queue.state();
            let mut state = queue
                .wake
                .wait_while(state, |s| s.jobs.is_empty() && !s.stopped)
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            if state.stopped {
                // No bucket of the context is open any more (each holds the context), so
                // nobody waits for what is still queued; it is released all the same.
                for job in state.jobs.drain(..) {
                    job.progress.finish();
                }
                return;
            }
            match state.jobs.pop_front() {
                Some(job) => job,
                None => continue,
            }
        };
        if !job.progress.start() {
            continue;
        }
        if let Some(bucket) = job.bucket.upgrade() {
            // sled's code on files that may be damaged: a panic must not end the thread that
            // rebuilds every bucket of the context. What it leaves is the rebuild's own
            // business: before the switch nothing of it is used, at the switch the store fails.
            // Again while a reclaim found one due during the last (each a rebuild that would
            // free something, so this ends).
            match catch_panic(BACKEND, "a background rebuild", || {
                if job.recheck && !bucket.due()? {
                    return Ok(());
                }
                let mut done = bucket.rebuild();
                while done.is_ok() && job.progress.take_again() && bucket.due()? {
                    done = bucket.rebuild();
                }
                done
            }) {
                Ok(Ok(_)) => {}
                // Logged (and counted) where it failed.
                Ok(Err(_)) => {}
                // Where it panicked is unknown, the switch included: the store fails (a reopen
                // finds whichever generation the pointer names, complete either way).
                Err(e) => bucket.panicked(&e),
            }
            // Let go of the bucket before reporting the rebuild over: a closing bucket waits
            // for that report and must then hold the last reference to its databases.
            drop(bucket);
        }
        if job.progress.finish_unless_again() {
            queue.state().jobs.push_back(Queued {
                recheck: true,
                ..job
            });
        }
    }
}
