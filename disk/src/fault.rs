//! Injected storage faults, for tests: the disk skeleton consults a [`Faults`] plan at each
//! [`FaultPoint`] around its storage calls, so tests can make a commit, a watermark write, a flush
//! or a reclaim fail on any disk backend and check what the engine, the bucket and the scheduler
//! do about it (`DiskEngine::faults`).
//!
//! The plan is also where a test observes a reclaim: `Faults::on_chunk_committed` installs a
//! callback the shared sweeper runs after every committed chunk, outside any transaction, so a
//! test can pause a reclaim between two chunks and show what writers do meanwhile (sweeping
//! backends only: an LSM reclaims in one compaction and has no chunks).
//!
//! The fault points cost nothing in production: with the cargo feature `testing`
//! a plan holds counters that tests arm; without it [`Faults`] is an empty type whose
//! [`Faults::check`] is always `Ok` and [`Faults::armed`] always 0, so the skeleton's fault points
//! compile to nothing and production paths carry no test branches.
//!
//! A fault is an I/O error (`Faults::fail_next`) or a panic (`Faults::panic_next`). A panic
//! strikes inside the skeleton's containment of the storage call, right where the storage would
//! run, as an engine panicking on its damaged files does: the call must return an error, lock
//! nothing up, and (a panic in a call that writes) fail the store until it is reopened.
//!
//! - [`FaultPoint::Commit`]: the commit of an `apply` fails as a full disk would, before the
//!   storage writes anything; the engine must publish nothing and count nothing.
//! - [`FaultPoint::Watermark`]: the durable write of a watermark change fails; `W` must not move.
//! - [`FaultPoint::HighWater`]: the high-water record after a durable watermark change fails to
//!   be written; the change must still be reported and published (the record is a lower bound).
//!   Not a storage call: an armed panic there is contained into an error like any other fault.
//! - [`FaultPoint::Reclaim`]: a reclaim fails **midway**: the storage first really removes the
//!   entries below half the threshold (the chunks or the compaction that ran before the fault),
//!   then the call returns the error; every entry at or above that point must be intact, and
//!   what was removed was covered.
//! - [`FaultPoint::Flush`]: an explicit `flush` fails before the storage flushes.

#[cfg(any(test, feature = "testing"))]
use std::sync::atomic::{AtomicU64, Ordering};

#[cfg(any(test, feature = "testing"))]
use tidemark_engine_api::error::Error;
use tidemark_engine_api::error::Result;

use crate::sweeper::SweepTotals;

/// Where a fault strikes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FaultPoint {
    /// The atomic commit of an `apply`.
    Commit,
    /// The durable write of `W`.
    Watermark,
    /// The high-water record written after a watermark change (once `W` is durable in the
    /// store): the change must still be reported and published.
    HighWater,
    /// A reclaim, after part of its work.
    Reclaim,
    /// An explicit `flush`.
    Flush,
}

#[cfg(any(test, feature = "testing"))]
impl FaultPoint {
    /// Every point, in declaration order (the index of each counter).
    const ALL: [FaultPoint; 5] = [
        FaultPoint::Commit,
        FaultPoint::Watermark,
        FaultPoint::HighWater,
        FaultPoint::Reclaim,
        FaultPoint::Flush,
    ];
}

/// How many of the next calls at each point fail, and how many panic; all zero by default.
#[cfg(any(test, feature = "testing"))]
#[derive(Default)]
pub struct Faults {
    errors: [AtomicU64; FaultPoint::ALL.len()],
    panics: [AtomicU64; FaultPoint::ALL.len()],
    chunk_hook: std::sync::Mutex<Option<ChunkHook>>,
}

#[cfg(any(test, feature = "testing"))]
impl std::fmt::Debug for Faults {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Faults")
            .field("errors", &self.errors)
            .field("panics", &self.panics)
            .finish_non_exhaustive()
    }
}

/// A callback run after every committed sweep chunk, with that chunk's totals
/// ([`Faults::on_chunk_committed`]).
#[cfg(any(test, feature = "testing"))]
pub type ChunkHook = std::sync::Arc<dyn Fn(&SweepTotals) + Send + Sync>;

/// Without the `testing` feature: no fault can be armed, and every point passes.
#[cfg(not(any(test, feature = "testing")))]
#[derive(Debug, Default)]
pub struct Faults;

#[cfg(not(any(test, feature = "testing")))]
impl Faults {
    /// The plan of a new engine: nothing armed.
    pub fn new() -> Self {
        Faults
    }

    /// Always 0: nothing can be armed without the `testing` feature.
    #[inline(always)]
    pub fn armed(&self, point: FaultPoint) -> u64 {
        let _ = point;
        0
    }

    /// Always `Ok`: nothing can be armed without the `testing` feature.
    #[inline(always)]
    pub fn check(&self, point: FaultPoint) -> Result<()> {
        let _ = point;
        Ok(())
    }

    /// Nothing: no chunk hook can be installed without the `testing` feature.
    #[inline(always)]
    pub fn chunk_committed(&self, chunk: &SweepTotals) {
        let _ = chunk;
    }
}

#[cfg(any(test, feature = "testing"))]
impl Faults {
    /// The plan of a new engine: nothing armed.
    pub fn new() -> Self {
        Faults::default()
    }

    /// Makes the next `n` calls at `point` fail with an I/O error (replacing any count armed
    /// before).
    pub fn fail_next(&self, point: FaultPoint, n: u64) {
        self.errors[point as usize].store(n, Ordering::SeqCst);
    }

    /// Makes the next `n` calls at `point` panic, as a storage engine does on damaged files
    /// (replacing any count armed before). Errors armed at the same point strike first.
    pub fn panic_next(&self, point: FaultPoint, n: u64) {
        self.panics[point as usize].store(n, Ordering::SeqCst);
    }

    /// Installs `hook` (or, with `None`, removes the one installed): the shared sweeper runs it
    /// after every chunk it committed, with that chunk's totals, outside any transaction and
    /// without the writer lock, so writers and other buckets proceed while it runs.
    pub fn on_chunk_committed(&self, hook: Option<ChunkHook>) {
        *self.chunk_hook.lock().unwrap_or_else(|p| p.into_inner()) = hook;
    }

    /// Runs the installed chunk hook, if any, with `chunk`.
    pub fn chunk_committed(&self, chunk: &SweepTotals) {
        let hook = self
            .chunk_hook
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        if let Some(hook) = hook {
            hook(chunk);
        }
    }

    /// Faults (errors and panics) still armed at `point`.
    pub fn armed(&self, point: FaultPoint) -> u64 {
        let i = point as usize;
        self.errors[i].load(Ordering::SeqCst) + self.panics[i].load(Ordering::SeqCst)
    }

    /// Consumes one armed fault at `point`: the injected I/O error, `Ok` when none is armed, or,
    /// for an armed panic, a panic (callers consult it where the storage call would run, inside
    /// its containment).
    pub fn check(&self, point: FaultPoint) -> Result<()> {
        let consume = |counter: &AtomicU64| {
            counter
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                .is_ok()
        };
        if consume(&self.errors[point as usize]) {
            return Err(Error::Io(std::io::Error::other(format!(
                "injected fault at {point:?}"
            ))));
        }
        if consume(&self.panics[point as usize]) {
            #[allow(clippy::panic, reason = "the injected fault is a panic")]
            {
                panic!("injected panic at {point:?}");
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn armed_faults_fire_once_each_then_stop() {
        let faults = Faults::default();
        faults.check(FaultPoint::Commit).unwrap();
        faults.fail_next(FaultPoint::Commit, 2);
        assert!(
            faults.check(FaultPoint::Watermark).is_ok(),
            "other points unaffected"
        );
        let err = faults.check(FaultPoint::Commit).unwrap_err();
        assert!(
            err.to_string().contains("injected fault at Commit"),
            "{err}"
        );
        assert!(faults.check(FaultPoint::Commit).is_err());
        assert!(faults.check(FaultPoint::Commit).is_ok());
        assert_eq!(faults.armed(FaultPoint::Commit), 0);
    }

    #[test]
    fn armed_panics_panic_once_each_after_the_errors() {
        let faults = Faults::default();
        faults.panic_next(FaultPoint::Flush, 1);
        faults.fail_next(FaultPoint::Flush, 1);
        assert_eq!(faults.armed(FaultPoint::Flush), 2);
        assert!(faults.check(FaultPoint::Flush).is_err());
        let panicked = std::panic::catch_unwind(|| faults.check(FaultPoint::Flush));
        let message = panicked
            .err()
            .and_then(|p| p.downcast_ref::<String>().cloned());
        assert_eq!(message.as_deref(), Some("injected panic at Flush"));
        assert!(faults.check(FaultPoint::Flush).is_ok());
        assert!(faults.check(FaultPoint::Commit).is_ok());
    }
}
