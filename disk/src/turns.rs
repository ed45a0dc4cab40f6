//! Turns between writers and a long background job (a sweep), so the job cannot starve them.
//!
//! A sweep is many short transactions. A storage's write lock is rarely fair: the sweeping
//! thread releases it after a chunk and, still running, takes it again before a writer that was
//! waiting for it has been scheduled, so one reclaim could hold every `apply` until it ends
//! (`tidemark compare` measured writes waiting a whole 100 ms redb sweep of 64-row chunks).
//! A writer therefore announces itself as soon as it holds the engine's writer lock (only that
//! writer competes with the sweep for the storage; one queued behind `verify` must not hold a
//! sweep up), and the sweep, between two chunks, waits until every writer announced by then has
//! finished: the writer waits for at most the chunk in flight. The turns are the engine's own:
//! writers of *other* buckets that share a process-wide lock (sled's) get none.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Condvar, Mutex, PoisonError};
use std::time::{Duration, Instant};

/// How long a job waits for writers at one yield at most. Writers never wait for the job while
/// announced (they wait only for the storage's own lock, released between chunks), so this only
/// bounds a stall nobody foresaw: the job then goes on rather than hang.
pub const MAX_YIELD: Duration = Duration::from_millis(100);

/// Announced and finished writers, and a way to wait for them.
///
/// ```
/// use tidemark_disk::turns::{MAX_YIELD, WriterTurns};
///
/// let turns = WriterTurns::default();
/// let turn = turns.announce(); // a writer, before it takes the write lock
/// assert_eq!(turns.waiting(), 1);
/// drop(turn); // done writing
/// assert!(!turns.yield_to_writers(MAX_YIELD)); // nobody to wait for
/// ```
#[derive(Debug, Default)]
pub struct WriterTurns {
    announced: AtomicU64,
    finished: AtomicU64,
    /// Jobs inside [`WriterTurns::yield_to_writers`]: a finishing writer wakes them only when
    /// there are any (every `apply` finishes a turn; almost none has a sweep to wake).
    yielding: AtomicU64,
    /// Guards nothing but the wake-ups, so a poisoned lock is harmless to read through.
    wake: Mutex<()>,
    done: Condvar,
}

/// A writer's turn: finished when dropped (also when the writer fails or panics).
#[derive(Debug)]
#[must_use = "the turn ends when it is dropped"]
pub struct WriterTurn<'a> {
    turns: &'a WriterTurns,
}

impl WriterTurns {
    /// Announces a writer; hold the turn until its write is done.
    pub fn announce(&self) -> WriterTurn<'_> {
        self.announced.fetch_add(1, Ordering::SeqCst);
        WriterTurn { turns: self }
    }

    /// Writers announced and not finished yet.
    pub fn waiting(&self) -> u64 {
        let finished = self.finished.load(Ordering::SeqCst);
        self.announced
            .load(Ordering::SeqCst)
            .saturating_sub(finished)
    }

    /// Jobs waiting in [`Self::yield_to_writers`] now.
    pub fn yielding(&self) -> u64 {
        self.yielding.load(Ordering::SeqCst)
    }

    /// Waits until every writer announced before this call has finished, or `limit` has passed.
    /// Returns whether it waited at all.
    pub fn yield_to_writers(&self, limit: Duration) -> bool {
        let target = self.announced.load(Ordering::SeqCst);
        if self.finished.load(Ordering::SeqCst) >= target {
            return false;
        }
        let deadline = Instant::now() + limit;
        let mut guard = self.wake.lock().unwrap_or_else(PoisonError::into_inner);
        // Counted before `finished` is read again (both SeqCst): a writer finishing now either
        // sees the count and wakes this job, or its finish is seen by the check below.
        self.yielding.fetch_add(1, Ordering::SeqCst);
        let _counted = Yielding(&self.yielding);
        while self.finished.load(Ordering::SeqCst) < target {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            guard = self
                .done
                .wait_timeout(guard, left)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
        true
    }
}

/// Uncounts a job when it leaves `yield_to_writers`.
struct Yielding<'a>(&'a AtomicU64);

impl Drop for Yielding<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Drop for WriterTurn<'_> {
    fn drop(&mut self) {
        self.turns.finished.fetch_add(1, Ordering::SeqCst);
        if self.turns.yielding.load(Ordering::SeqCst) == 0 {
            return;
        }
        // Taken so the wake-up cannot fall between a waiter's check and its wait.
        let _guard = self
            .turns
            .wake
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        self.turns.done.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Barrier, mpsc};

    #[test]
    fn a_yield_waits_for_the_writers_announced_before_it() {
        let turns = Arc::new(WriterTurns::default());
        let (announced, ready) = (Arc::new(Barrier::new(2)), Arc::new(Barrier::new(2)));
        let (finish_tx, finish_rx) = mpsc::channel::<()>();
        let writer = {
            let (turns, announced) = (Arc::clone(&turns), Arc::clone(&announced));
            std::thread::spawn(move || {
                let turn = turns.announce();
                announced.wait();
                finish_rx.recv().unwrap();
                drop(turn);
            })
        };
        announced.wait();
        assert_eq!(turns.waiting(), 1);
        let yielder = {
            let (turns, ready) = (Arc::clone(&turns), Arc::clone(&ready));
            std::thread::spawn(move || {
                ready.wait();
                let started = Instant::now();
                // Far longer than the test: returns because the writer finished.
                let waited = turns.yield_to_writers(Duration::from_secs(600));
                (waited, started.elapsed())
            })
        };
        ready.wait();
        // The writer finishes only once the job is waiting for it.
        while turns.yielding() == 0 {
            std::thread::yield_now();
        }
        finish_tx.send(()).unwrap();
        writer.join().unwrap();
        let (waited, took) = yielder.join().unwrap();
        assert!(waited);
        assert!(took < Duration::from_secs(600));
        assert_eq!((turns.waiting(), turns.yielding()), (0, 0));
        // A writer announced after the yield began is not waited for by the next one either
        // once it has finished.
        drop(turns.announce());
        assert!(!turns.yield_to_writers(Duration::from_secs(600)));
    }

    #[test]
    fn a_yield_gives_up_at_its_limit() {
        let turns = WriterTurns::default();
        let _stuck = turns.announce();
        let started = Instant::now();
        assert!(turns.yield_to_writers(Duration::from_millis(20)));
        assert!(started.elapsed() >= Duration::from_millis(20));
        assert_eq!(turns.waiting(), 1);
    }
}
