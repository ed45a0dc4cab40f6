//! Injected storage faults, for tests: the [`Chaos`](super::Chaos) layer consults a [`Faults`]
//! plan at each [`FaultPoint`] of the storage it wraps, so tests can make a commit, a watermark
//! write, a flush or a reclaim fail on any disk backend and check what the engine, the bucket and
//! the scheduler do about it.
//!
//! The plan is also where a test observes a reclaim: [`Faults::on_chunk_committed`] installs a
//! callback the layer hands the shared sweeper for every committed chunk, run outside any
//! transaction, so a test can pause a reclaim between two chunks and show what writers do
//! meanwhile (sweeping backends only: an LSM reclaims in one compaction and has no chunks).
//!
//! A fault is an I/O error ([`Faults::fail_next`]) or a panic ([`Faults::panic_next`]). A panic
//! strikes where the storage would run, inside the skeleton's containment of the storage call,
//! as an engine panicking on its damaged files does: the call must return an error, lock nothing
//! up, and (a panic in a call that writes) fail the store until it is reopened.
//!
//! - [`FaultPoint::Commit`]: the commit of an `apply` fails as a full disk would, before the
//!   storage writes anything; the engine must publish nothing and count nothing.
//! - [`FaultPoint::Watermark`]: the durable write of a watermark change fails; `W` must not move.
//! - [`FaultPoint::Reclaim`]: a reclaim fails **midway**: the storage first really removes the
//!   entries below half the threshold (the chunks or the compaction that ran before the fault),
//!   then the call returns the error; every entry at or above that point must be intact, and
//!   what was removed was covered.
//! - [`FaultPoint::Flush`]: an explicit `flush` fails before the storage flushes.
//!
//! A failed high-water record needs no hook: a directory where its temporary file goes makes
//! the real write fail (the conformance case `failed_writes_change_nothing` does that).

use std::sync::atomic::{AtomicU64, Ordering};

use tidemark_engine_api::Error;
use tidemark_engine_api::Result;

use crate::sweeper::SweepTotals;

/// Where a fault strikes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FaultPoint {
    /// The atomic commit of an `apply`.
    Commit,
    /// The durable write of `W`.
    Watermark,
    /// A reclaim, after part of its work.
    Reclaim,
    /// An explicit `flush`.
    Flush,
}

impl FaultPoint {
    /// Every point, in declaration order (the index of each counter).
    const ALL: [FaultPoint; 4] = [
        FaultPoint::Commit,
        FaultPoint::Watermark,
        FaultPoint::Reclaim,
        FaultPoint::Flush,
    ];
}

/// How many of the next calls at each point fail, and how many panic; all zero by default.
#[derive(Default)]
pub struct Faults {
    errors: [AtomicU64; FaultPoint::ALL.len()],
    panics: [AtomicU64; FaultPoint::ALL.len()],
    chunk_hook: std::sync::Mutex<Option<ChunkHook>>,
}

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
pub type ChunkHook = std::sync::Arc<dyn Fn(&SweepTotals) + Send + Sync>;

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
        *tidemark_engine_api::sync::lock_recovered(&self.chunk_hook) = hook;
    }

    /// Runs the installed chunk hook, if any, with `chunk`.
    pub fn chunk_committed(&self, chunk: &SweepTotals) {
        let hook = tidemark_engine_api::sync::lock_recovered(&self.chunk_hook).clone();
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
