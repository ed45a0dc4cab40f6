//! The context's rebuild thread, and each bucket's view of its rebuild ([`Progress`]).
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
use crate::storage::Bucket;

/// Where a bucket's rebuild is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
enum Job {
    #[default]
    Idle,
    /// Waiting in the context's queue.
    Queued,
    /// Taken by the rebuild thread (or run inline).
    Running,
}

#[derive(Debug, Default)]
struct ProgressState {
    job: Job,
    /// Set when the bucket closes: a queued rebuild never starts, a running one stops at its
    /// next step (before its switch) and removes what it copied.
    cancelled: bool,
    /// Set when a reclaim found a rebuild due while one was running: the rows it swept meanwhile
    /// may have left the running copy mostly garbage too (a bucket drained during a copy), so
    /// the rebuild thread checks again when the running one ends.
    again: bool,
    /// Test hook: a running copy waits at its next step while this is set.
    #[cfg(feature = "testing")]
    hold: bool,
    /// Test hook: a copy is waiting at a step because of `hold`.
    #[cfg(feature = "testing")]
    held: bool,
}

/// One bucket's rebuild: queued, running or idle, and whether the bucket is closing. Shared by
/// the bucket and the queue entry, so the rebuild thread can report the end of a rebuild after it
/// has let go of the bucket itself.
#[derive(Debug, Default)]
pub(crate) struct Progress {
    state: Mutex<ProgressState>,
    changed: Condvar,
}

impl Progress {
    fn state(&self) -> MutexGuard<'_, ProgressState> {
        // Flags only, each changed in one statement: a poisoned state is still consistent, and
        // the bucket's `Drop` and the rebuild thread have nobody to return an error to.
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn wait<'a>(
        &self,
        state: MutexGuard<'a, ProgressState>,
        until: impl FnMut(&mut ProgressState) -> bool,
    ) -> MutexGuard<'a, ProgressState> {
        let mut until = until;
        self.changed
            .wait_while(state, |s| !until(s))
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Marks a rebuild queued; `false` when one is already queued or running, or the bucket is
    /// closing (nothing to queue then).
    pub(crate) fn try_queue(&self) -> bool {
        let mut state = self.state();
        if state.job == Job::Running {
            state.again = true;
        }
        if state.job != Job::Idle || state.cancelled {
            return false;
        }
        state.job = Job::Queued;
        true
    }

    /// Whether a reclaim found a rebuild due while this one ran (and the bucket is not
    /// closing); clears the mark.
    pub(crate) fn take_again(&self) -> bool {
        let mut state = self.state();
        std::mem::take(&mut state.again) && !state.cancelled
    }

    /// Marks a rebuild running (inline, or taken from the queue); `false` when the bucket is
    /// closing, and then the rebuild is idle again.
    pub(crate) fn start(&self) -> bool {
        let mut state = self.state();
        if state.cancelled {
            state.job = Job::Idle;
            self.changed.notify_all();
            return false;
        }
        state.job = Job::Running;
        state.again = false;
        true
    }

    /// The rebuild thread's end of a rebuild: when a reclaim found another one due meanwhile
    /// (and the bucket is not closing), the job stays queued and `true` says to queue it again;
    /// otherwise the rebuild is over, as [`Self::finish`]. Decided under one lock, so a reclaim's
    /// mark set after the thread's last look is never lost.
    pub(crate) fn finish_unless_again(&self) -> bool {
        let mut state = self.state();
        if std::mem::take(&mut state.again) && !state.cancelled {
            state.job = Job::Queued;
            return true;
        }
        state.job = Job::Idle;
        self.changed.notify_all();
        false
    }

    /// Marks the rebuild over (done, failed or cancelled) and wakes whoever waits for it.
    pub(crate) fn finish(&self) {
        self.state().job = Job::Idle;
        self.changed.notify_all();
    }

    /// Whether the bucket is closing.
    pub(crate) fn is_cancelled(&self) -> bool {
        self.state().cancelled
    }

    /// Called by a copy between two of its steps: an error when the bucket is closing (the
    /// rebuild is then abandoned before its switch), otherwise `Ok` (after waiting while a test
    /// holds copies).
    pub(crate) fn step(&self) -> Result<()> {
        let state = self.state();
        #[cfg(feature = "testing")]
        let state = self.wait_while_held(state);
        if state.cancelled {
            return Err(Error::backend(
                BACKEND,
                std::io::Error::new(
                    std::io::ErrorKind::Interrupted,
                    "the bucket is closing: the rebuild was abandoned",
                ),
            ));
        }
        Ok(())
    }

    /// Waits until no rebuild is queued or running.
    pub(crate) fn settle(&self) {
        drop(self.wait(self.state(), |s| s.job == Job::Idle));
    }

    /// The bucket is closing: a queued rebuild will not start, and a running one stops at its
    /// next step; returns once none runs, so no rebuild holds the bucket's databases after it.
    pub(crate) fn cancel(&self) {
        let mut state = self.state();
        state.cancelled = true;
        if state.job == Job::Queued {
            // The queue entry finds it cancelled and drops it without touching the bucket.
            state.job = Job::Idle;
        }
        self.changed.notify_all();
        drop(self.wait(state, |s| s.job != Job::Running));
    }

    /// Test hook: a copy at a step waits here while [`Self::hold`] is set.
    #[cfg(feature = "testing")]
    fn wait_while_held<'a>(
        &self,
        mut state: MutexGuard<'a, ProgressState>,
    ) -> MutexGuard<'a, ProgressState> {
        if state.hold && !state.cancelled {
            state.held = true;
            self.changed.notify_all();
            state = self.wait(state, |s| !s.hold || s.cancelled);
            state.held = false;
        }
        state
    }

    /// Test hook: makes every copy of this bucket wait at its next step until released.
    #[cfg(feature = "testing")]
    pub(crate) fn hold(&self, hold: bool) {
        self.state().hold = hold;
        self.changed.notify_all();
    }

    /// Test hook: waits until a copy is waiting at a step held by [`Self::hold`]; `false` when
    /// the rebuild ended (or never ran) instead.
    #[cfg(feature = "testing")]
    pub(crate) fn wait_held(&self) -> bool {
        let state = self.wait(self.state(), |s| s.held || s.job == Job::Idle);
        state.held
    }
}

/// A queued rebuild: the bucket (weakly: the queue must not keep a closed bucket open) and its
/// progress.
struct Queued {
    bucket: Weak<Bucket>,
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
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
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
    pub(crate) fn submit(&self, bucket: &Arc<Bucket>) -> Result<()> {
        let mut thread = self
            .thread
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if thread.is_none() {
            let queue = Arc::clone(&self.queue);
            *thread = Some(
                thread::Builder::new()
                    .name("tidemark-sled-rebuild".into())
                    .spawn(move || run(&queue))
                    .map_err(|e| Error::backend(BACKEND, e))?,
            );
        }
        self.queue.state().jobs.push_back(Queued {
            bucket: Arc::downgrade(bucket),
            progress: Arc::clone(&bucket.progress),
            recheck: false,
        });
        self.queue.wake.notify_all();
        Ok(())
    }

    /// Whether the thread has been started.
    pub(crate) fn started(&self) -> bool {
        self.thread
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .is_some()
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
                if job.recheck && !bucket.rebuild_due()? {
                    return Ok(None);
                }
                let mut done = crate::rebuild::run(&bucket);
                while done.is_ok() && job.progress.take_again() && bucket.rebuild_due()? {
                    done = crate::rebuild::run(&bucket);
                }
                done
            }) {
                Ok(Ok(_)) => {}
                // Logged (and counted) where it failed.
                Ok(Err(_)) => {}
                // Where it panicked is unknown, the switch included: the store fails (a reopen
                // finds whichever generation the pointer names, complete either way).
                Err(e) => {
                    bucket.count_failed_rebuild();
                    bucket.fail(&e);
                }
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
