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

use engine_api::{Error, Result};

use crate::errors::BACKEND;

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
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl Flusher {
    /// Starts the thread, flushing every registered database every `every`.
    pub(crate) fn start(every: Duration) -> Result<Self> {
        let shared = Arc::new(Shared {
            state: Mutex::new(State::default()),
            wake: Condvar::new(),
            every,
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
            // A failed background flush loses nothing that was acknowledged as durable (only
            // unsynced writes wait for it, and those may be lost by contract); the next flush
            // retries, and a synced write or watermark change reports its own failure.
            if let Err(e) = db.flush() {
                tracing::warn!(error = %e, "background flush of a sled bucket failed");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

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
