//! [`Progress`]: where a bucket's rebuild is (queued, running, held, cancelled), shared by the
//! bucket, its reclaims and the context's rebuild thread.

use std::sync::{Condvar, Mutex, MutexGuard};

use tidemark_engine_api::{Error, Result};

use crate::error::BACKEND;

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
        tidemark_engine_api::sync::lock_recovered(&self.state)
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

    /// Whether a rebuild is queued or running.
    pub(crate) fn is_pending(&self) -> bool {
        self.state().job != Job::Idle
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
