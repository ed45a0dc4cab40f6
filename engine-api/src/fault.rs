//! Injected storage faults, for tests: with the cargo feature `testing` the disk skeleton consults
//! a [`Faults`] plan around its storage calls (`DiskEngine::faults`; without the feature no plan
//! exists and nothing is consulted), so tests can make a commit, a watermark write or a reclaim
//! fail on any disk backend and check what the engine, the bucket and the scheduler do about it.
//!
//! - [`FaultPoint::Commit`]: the commit of an `apply` fails as a full disk would, before the
//!   storage writes anything; the engine must publish nothing and count nothing.
//! - [`FaultPoint::Watermark`]: the durable write of a watermark change fails; `W` must not move.
//! - [`FaultPoint::HighWater`]: the high-water record after a durable watermark change fails to
//!   be written; the change must still be reported and published (the record is a lower bound).
//! - [`FaultPoint::Reclaim`]: a reclaim fails **midway**: the storage first really removes the
//!   entries below half the threshold (the chunks or the compaction that ran before the fault),
//!   then the call returns the error; every entry at or above that point must be intact, and
//!   what was removed was covered.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::error::{Error, Result};

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
}

/// How many of the next calls at each point fail; all zero by default.
#[derive(Debug, Default)]
pub struct Faults {
    commit: AtomicU64,
    watermark: AtomicU64,
    high_water: AtomicU64,
    reclaim: AtomicU64,
}

impl Faults {
    /// Makes the next `n` calls at `point` fail (replacing any count armed before).
    pub fn fail_next(&self, point: FaultPoint, n: u64) {
        self.counter(point).store(n, Ordering::SeqCst);
    }

    /// Failures still armed at `point`.
    pub fn armed(&self, point: FaultPoint) -> u64 {
        self.counter(point).load(Ordering::SeqCst)
    }

    /// Consumes one armed failure at `point`: the injected I/O error, or `Ok` when none is armed.
    pub fn check(&self, point: FaultPoint) -> Result<()> {
        let fired = self
            .counter(point)
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok();
        if fired {
            Err(Error::Io(std::io::Error::other(format!(
                "injected fault at {point:?}"
            ))))
        } else {
            Ok(())
        }
    }

    fn counter(&self, point: FaultPoint) -> &AtomicU64 {
        match point {
            FaultPoint::Commit => &self.commit,
            FaultPoint::Watermark => &self.watermark,
            FaultPoint::HighWater => &self.high_water,
            FaultPoint::Reclaim => &self.reclaim,
        }
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
}
