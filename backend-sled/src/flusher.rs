//! One flusher thread for every sled bucket of a context, in place of sled's thread per database.
//!
//! sled 0.34 starts a flusher thread for each open database (`flush_every_ms`), so a process with
//! 1,000 buckets ran 1,000 threads that mostly sleep. Buckets written with `sync_writes = false`
//! still need a periodic flush (otherwise their writes reach disk only when sled's buffers fill),
//! so the context runs one thread that flushes each open bucket in turn. Synced writes flush
//! themselves and do not depend on it.

use std::sync::{Arc, Condvar, Mutex, MutexGuard, Weak};
use std::thread::{self, JoinHandle};
use std::time::Duration;

use tidemark_disk::contain::catch_panic;
use tidemark_engine_api::{Error, Result};

use crate::error::BACKEND;

/// The thread and the databases it flushes; dropping it stops and joins the thread.
#[derive(Debug)]
pub(crate) struct Flusher {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

#[derive(Debug)]
struct Shared {
    state: Mutex<State>,
    wake: Condvar,
    every: Duration,
    /// Makes the next flush panic and counts the passes, to test that a panic in sled does not
    /// end the thread.
    #[cfg(test)]
    test: tests::Hooks,
}

#[derive(Debug, Default)]
struct State {
    /// Weak, so an open bucket is kept alive only while it is being flushed.
    dbs: Vec<Weak<sled::Db>>,
    stopped: bool,
}

impl Shared {
    fn state(&self) -> MutexGuard<'_, State> {
        // Each critical section is a push, a retain or a flag: a poisoned state is still
        // consistent, and a background thread has nobody to return `Error::Poisoned` to.
        tidemark_engine_api::sync::lock_recovered(&self.state)
    }
}

impl Flusher {
    /// Starts the thread, flushing every registered database every `every`.
    pub(crate) fn start(every: Duration) -> Result<Self> {
        let shared = Arc::new(Shared {
            state: Mutex::new(State::default()),
            wake: Condvar::new(),
            every,
            #[cfg(test)]
            test: tests::Hooks::default(),
        });
        let thread = thread::Builder::new()
            .name("tidemark-sled-flush".into())
            .spawn({
                let shared = Arc::clone(&shared);
                move || run(&shared)
            })
            .map_err(|e| Error::backend(BACKEND, e))?;
        Ok(Flusher {
            shared,
            thread: Some(thread),
        })
    }

    /// Flushes `db` periodically from now on, until it is dropped.
    pub(crate) fn register(&self, db: &Arc<sled::Db>) {
        self.shared.state().dbs.push(Arc::downgrade(db));
    }
}

impl Drop for Flusher {
    fn drop(&mut self) {
        self.shared.state().stopped = true;
        self.shared.wake.notify_all();
        if let Some(thread) = self.thread.take() {
            // The thread holds no context, so this never runs on it; a panic in it is already
            // reported by the runtime and changes nothing here.
            let _ = thread.join();
        }
    }
}

fn run(shared: &Shared) {
    loop {
        let live: Vec<Arc<sled::Db>> = {
            let state = shared.state();
            let (mut state, _) = shared
                .wake
                .wait_timeout_while(state, shared.every, |s| !s.stopped)
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            if state.stopped {
                return;
            }
            state.dbs.retain(|db| db.strong_count() > 0);
            state.dbs.iter().filter_map(Weak::upgrade).collect()
        };
        for db in live {
            let weak = Arc::downgrade(&db);
            // sled's own code, on a store that may be damaged: a panic must not end the thread
            // that flushes every bucket of the context. The drop is contained too, but apart:
            // when the bucket closed meanwhile this is the last handle and sled flushes again as
            // it drops, and a second panic while the first unwinds would abort the process.
            let flushed = catch_panic(BACKEND, "a background flush", || {
                #[cfg(test)]
                shared.test.panic_if_armed();
                db.flush()
            });
            if let Err(e) = catch_panic(BACKEND, "dropping a flushed handle", move || drop(db)) {
                tracing::warn!(error = %e, "dropping a sled bucket's handle panicked");
            }
            match flushed {
                // A failed background flush loses nothing that was acknowledged as durable
                // (only unsynced writes wait for it, and those may be lost by contract); the
                // next flush retries, and a synced write or watermark change reports its own
                // failure.
                Ok(Ok(_)) => {}
                Ok(Err(e)) => {
                    tracing::warn!(error = %e, "background flush of a sled bucket failed");
                }
                // Not retried: it would panic every period. The bucket's synced writes and
                // watermark changes flush themselves, contained, and fail the store there.
                Err(e) => {
                    tracing::error!(error = %e,
                        "background flush of a sled bucket panicked; no longer flushed in the background");
                    shared.state().dbs.retain(|db| !db.ptr_eq(&weak));
                }
            }
        }
        #[cfg(test)]
        shared.test.passed();
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::Instant;

    use super::*;

    /// Test hooks of the flusher thread.
    #[derive(Debug, Default)]
    pub(super) struct Hooks {
        panic_next: AtomicBool,
        passes: Mutex<u64>,
        passed: Condvar,
    }

    impl Hooks {
        pub(super) fn panic_if_armed(&self) {
            if self.panic_next.swap(false, Ordering::AcqRel) {
                panic!("injected panic in a background flush");
            }
        }

        pub(super) fn passed(&self) {
            *self.passes.lock().unwrap() += 1;
            self.passed.notify_all();
        }

        /// Waits until `n` more passes over the databases have ended after the call; `false`
        /// when they have not within `limit` (the thread died).
        fn wait_passes(&self, n: u64, limit: Duration) -> bool {
            let deadline = Instant::now() + limit;
            let mut passes = self.passes.lock().unwrap();
            let target = *passes + n;
            while *passes < target {
                let left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    return false;
                }
                passes = self.passed.wait_timeout(passes, left).unwrap().0;
            }
            true
        }
    }

    #[test]
    fn a_panicking_flush_is_contained_and_the_thread_goes_on() {
        let dir = tempfile::tempdir().unwrap();
        let flusher = Flusher::start(Duration::from_millis(1)).unwrap();
        let damaged = Arc::new(
            sled::Config::new()
                .path(dir.path().join("a"))
                .open()
                .unwrap(),
        );
        flusher.register(&damaged);
        flusher
            .shared
            .test
            .panic_next
            .store(true, Ordering::Release);
        // The pass that panics, then one more: the thread survived it.
        assert!(
            flusher.shared.test.wait_passes(2, Duration::from_secs(30)),
            "the flusher thread died"
        );
        assert!(
            !flusher.shared.test.panic_next.load(Ordering::Acquire),
            "the panic was injected"
        );
        assert!(
            flusher.shared.state().dbs.is_empty(),
            "a database whose flush panicked is dropped from the thread's list"
        );
        // Other buckets are still flushed.
        let other = Arc::new(
            sled::Config::new()
                .path(dir.path().join("b"))
                .open()
                .unwrap(),
        );
        flusher.register(&other);
        assert!(flusher.shared.test.wait_passes(1, Duration::from_secs(30)));
        assert_eq!(flusher.shared.state().dbs.len(), 1);
    }

    #[test]
    fn a_dropped_database_is_released_and_the_thread_stops_on_drop() {
        let dir = tempfile::tempdir().unwrap();
        let flusher = Flusher::start(Duration::from_millis(1)).unwrap();
        let db = Arc::new(sled::Config::new().path(dir.path()).open().unwrap());
        flusher.register(&db);
        db.insert(b"k", b"v").unwrap();
        // The flusher keeps only a weak reference: this is the one strong reference, or the
        // flusher is flushing right now and holds a second one until that flush ends.
        let weak = Arc::downgrade(&db);
        drop(db);
        drop(flusher); // joins the thread, so any reference it held is gone
        assert!(weak.upgrade().is_none());
    }
}
