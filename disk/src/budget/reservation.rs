//! The process-wide descriptor reservation every bucket budget shares: each admitted bucket of
//! every backend and context reserves its backend's *ceiling* (the most descriptors it may come
//! to hold), and a bucket is admitted only while what the process holds outside its buckets, the
//! ceilings reserved and the new one, and [`FD_RESERVE`] fit under the soft limit.
//!
//! What the process holds outside its buckets is counted in two steps. First cheaply: the open
//! descriptors as a whole, which also counts what the admitted buckets hold now, already covered
//! by their reservation. That over-counts, so when it fits the bucket certainly does. When it does
//! not, the descriptors whose files lie under an admitted bucket's directory are told apart
//! (`/proc/self/fd`), and only the rest counts as outside: the check then refuses only what
//! really does not fit, and never counts the host's own files low.
//!
//! Admission and release take one lock, so two opens racing for the last descriptors cannot
//! both pass.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};

use super::FD_RESERVE;
use crate::process::{self, FdCount, FdLimit};
use tidemark_engine_api::Result;
use tidemark_engine_api::sync;

/// What admission reads of the process: the real one reads `getrlimit` and `/proc/self/fd`;
/// tests give numbers.
pub(crate) trait Probe {
    /// The descriptor limits.
    fn limit(&self) -> FdLimit;
    /// The open descriptors, counted cheaply.
    fn open_fds(&self) -> Option<u64>;
    /// The open descriptors and how many lie under one of `dirs`.
    fn fds_under(&self, dirs: &[&Path]) -> Option<FdCount>;
}

/// The process itself.
pub(crate) struct ProcessProbe;

impl Probe for ProcessProbe {
    fn limit(&self) -> FdLimit {
        process::fd_limit()
    }

    fn open_fds(&self) -> Option<u64> {
        process::open_fds()
    }

    fn fds_under(&self, dirs: &[&Path]) -> Option<FdCount> {
        process::fds_under(dirs)
    }
}

/// The reservation of every bucket the process has admitted.
pub(crate) static PROCESS: Reservations = Reservations::new();

/// The ceilings reserved by admitted buckets, each under the directory it was admitted for.
pub(crate) struct Reservations {
    state: Mutex<State>,
}

struct State {
    next: u64,
    held: BTreeMap<u64, Held>,
}

struct Held {
    budget: u64,
    dir: PathBuf,
    /// `dir` as the kernel names the files under it, once it exists.
    canonical: Option<PathBuf>,
    ceiling: u64,
}

/// One bucket asking to be admitted.
pub(crate) struct Request<'a> {
    /// The budget it belongs to (to tell its own reservations from other budgets').
    pub budget: u64,
    /// Its directory: what its engine opens lies under it.
    pub dir: &'a Path,
    /// The most descriptors it may come to hold.
    pub ceiling: u64,
}

/// The outcome of [`Reservations::reserve`].
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Admission {
    /// Reserved under this id, to be released with [`Reservations::release`].
    Reserved(u64),
    /// It does not fit.
    Refused(Refusal),
}

/// The figures of a refusal, for its message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Refusal {
    /// The soft and hard limits.
    pub limit: FdLimit,
    /// Soft limit in force (`limit.soft`, known when there is a refusal).
    pub soft: u64,
    /// Descriptors open in the process.
    pub open: u64,
    /// Of those, held outside any admitted bucket (all of them when they cannot be told apart).
    pub outside: u64,
    /// Buckets admitted in the process, of every budget.
    pub buckets: usize,
    /// Ceilings they reserve, in all.
    pub reserved: u64,
    /// Of those, reserved by other budgets than the request's.
    pub reserved_by_others: u64,
}

/// Whether a bucket of `ceiling` fits under `soft` beside what the process holds `outside` its
/// buckets, the ceilings `reserved` by those admitted, and [`FD_RESERVE`].
pub(crate) fn fits(outside: u64, reserved: u64, ceiling: u64, soft: u64) -> bool {
    outside
        .saturating_add(reserved)
        .saturating_add(ceiling)
        .saturating_add(FD_RESERVE)
        <= soft
}

/// The soft limit under which `buckets` buckets of `ceiling` fit beside `outside` and the
/// ceilings `others` reserve.
pub(crate) fn limit_for(outside: u64, others: u64, ceiling: u64, buckets: usize) -> u64 {
    outside
        .saturating_add(others)
        .saturating_add((buckets as u64).saturating_mul(ceiling))
        .saturating_add(FD_RESERVE)
}

impl Reservations {
    /// No bucket admitted.
    pub(crate) const fn new() -> Self {
        Reservations {
            state: Mutex::new(State {
                next: 0,
                held: BTreeMap::new(),
            }),
        }
    }

    /// Reserves `request.ceiling` when it fits (see the module documentation); a limit or a count
    /// the probe cannot read admits (the check cannot be made, it is not guessed).
    pub(crate) fn reserve(&self, probe: &impl Probe, request: Request<'_>) -> Result<Admission> {
        let mut state = sync::lock(&self.state, "descriptor reservation")?;
        let reserved: u64 = state.held.values().map(|h| h.ceiling).sum();
        let limit = probe.limit();
        if let (Some(soft), Some(open)) = (limit.soft, probe.open_fds())
            && !fits(open, reserved, request.ceiling, soft)
        {
            for held in state.held.values_mut().filter(|h| h.canonical.is_none()) {
                // A directory not created yet holds nothing.
                held.canonical = held.dir.canonicalize().ok();
            }
            let dirs: Vec<&Path> = state
                .held
                .values()
                .filter_map(|h| h.canonical.as_deref())
                .collect();
            let count = probe.fds_under(&dirs).unwrap_or(FdCount { open, under: 0 });
            let outside = count.open.saturating_sub(count.under);
            if !fits(outside, reserved, request.ceiling, soft) {
                let own: u64 = (state.held.values())
                    .filter(|h| h.budget == request.budget)
                    .map(|h| h.ceiling)
                    .sum();
                return Ok(Admission::Refused(Refusal {
                    limit,
                    soft,
                    open: count.open,
                    outside,
                    buckets: state.held.len(),
                    reserved,
                    reserved_by_others: reserved - own,
                }));
            }
        }
        let id = state.next;
        state.next += 1;
        state.held.insert(
            id,
            Held {
                budget: request.budget,
                dir: request.dir.to_path_buf(),
                canonical: None,
                ceiling: request.ceiling,
            },
        );
        Ok(Admission::Reserved(id))
    }

    /// Gives back reservation `id`. Never fails: a lock poisoned by a panic elsewhere still
    /// holds a consistent map (every change to it is one call).
    pub(crate) fn release(&self, id: u64) {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        state.held.remove(&id);
    }

    /// The ceilings reserved now, in all.
    #[cfg(test)]
    pub(crate) fn reserved(&self) -> u64 {
        let state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        state.held.values().map(|h| h.ceiling).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A process with fixed figures: `open` descriptors, `under` of them in bucket directories.
    struct Fixed {
        soft: Option<u64>,
        open: Option<u64>,
        under: u64,
    }

    impl Probe for Fixed {
        fn limit(&self) -> FdLimit {
            FdLimit {
                soft: self.soft,
                hard: Some(4096),
            }
        }
        fn open_fds(&self) -> Option<u64> {
            self.open
        }
        fn fds_under(&self, _dirs: &[&Path]) -> Option<FdCount> {
            Some(FdCount {
                open: self.open?,
                under: self.under,
            })
        }
    }

    fn fixed(soft: Option<u64>, open: Option<u64>, under: u64) -> Fixed {
        Fixed { soft, open, under }
    }

    fn request(budget: u64, ceiling: u64) -> Request<'static> {
        Request {
            budget,
            dir: Path::new("/srv/buckets/b"),
            ceiling,
        }
    }

    fn reserved(admission: Admission) -> u64 {
        match admission {
            Admission::Reserved(id) => id,
            Admission::Refused(r) => panic!("refused: {r:?}"),
        }
    }

    #[test]
    fn the_arithmetic_counts_outside_reserved_ceiling_and_reserve() {
        // 100 outside + 800 reserved + 28 + 16 = 944.
        assert!(fits(100, 800, 28, 944));
        assert!(!fits(100, 800, 28, 943));
        assert!(
            !fits(u64::MAX, 1, 1, u64::MAX - 1),
            "saturates, never wraps"
        );
        // Enough for 36 buckets of 28 beside 10 outside and 100 reserved elsewhere.
        assert_eq!(limit_for(10, 100, 28, 36), 10 + 100 + 36 * 28 + FD_RESERVE);
        assert_eq!(limit_for(1, 0, u64::MAX, 2), u64::MAX);
    }

    #[test]
    fn ceilings_add_up_until_the_soft_limit() {
        let reservations = Reservations::new();
        // 10 descriptors outside the buckets; the buckets hold nothing yet.
        let probe = fixed(Some(10 + 3 * 20 + FD_RESERVE), Some(10), 0);
        let ids: Vec<u64> = (0..3)
            .map(|_| reserved(reservations.reserve(&probe, request(1, 20)).unwrap()))
            .collect();
        assert_eq!(reservations.reserved(), 60);
        let Admission::Refused(refusal) = reservations.reserve(&probe, request(1, 20)).unwrap()
        else {
            panic!("a fourth bucket of 20 fits in 86 descriptors");
        };
        assert_eq!(
            (refusal.outside, refusal.buckets, refusal.reserved),
            (10, 3, 60)
        );
        assert_eq!(reservations.reserved(), 60, "a refusal reserves nothing");
        reservations.release(ids[0]);
        reserved(reservations.reserve(&probe, request(1, 20)).unwrap());
    }

    #[test]
    fn what_buckets_hold_is_not_counted_twice() {
        let reservations = Reservations::new();
        let empty = fixed(Some(100), Some(10), 0);
        reserved(reservations.reserve(&empty, request(1, 40)).unwrap());
        // The bucket now holds 30 of its 40. The cheap count (40 open + 40 reserved + 40 + 16 =
        // 136) counts those 30 twice and does not fit 106; the attributed one (10 outside + 40
        // + 40 + 16 = 106) does…
        let grown = fixed(Some(106), Some(40), 30);
        reserved(reservations.reserve(&grown, request(1, 40)).unwrap());
        // …and one more bucket is refused on what is outside, not on what the buckets hold.
        let Admission::Refused(refusal) = reservations.reserve(&grown, request(1, 40)).unwrap()
        else {
            panic!("three buckets of 40 beside 10 do not fit 106");
        };
        assert_eq!((refusal.open, refusal.outside), (40, 10));
    }

    #[test]
    fn files_outside_the_buckets_are_never_counted_low() {
        let reservations = Reservations::new();
        let probe = fixed(Some(200), Some(10), 0);
        reserved(reservations.reserve(&probe, request(1, 50)).unwrap());
        // The host opened 120 files of its own: 130 open, none under the bucket. Counting the
        // reservation as if the bucket held it (130 - 50 = 80 outside) would admit 80 + 50 + 50
        // + 16 = 196; the host's 130 leave no room.
        let busy = fixed(Some(200), Some(130), 0);
        let Admission::Refused(refusal) = reservations.reserve(&busy, request(1, 50)).unwrap()
        else {
            panic!("admitted beside 130 descriptors of the host's own");
        };
        assert_eq!(refusal.outside, 130);
    }

    #[test]
    fn every_budget_shares_one_reservation() {
        let reservations = Reservations::new();
        let probe = fixed(Some(5 + 28 + 1 + FD_RESERVE), Some(5), 0);
        reserved(reservations.reserve(&probe, request(1, 28)).unwrap());
        reserved(reservations.reserve(&probe, request(2, 1)).unwrap());
        let Admission::Refused(refusal) = reservations.reserve(&probe, request(2, 1)).unwrap()
        else {
            panic!("a budget ignored another budget's reservation");
        };
        assert_eq!((refusal.reserved, refusal.reserved_by_others), (29, 28));
    }

    #[test]
    fn unknown_limits_or_counts_admit() {
        let reservations = Reservations::new();
        for probe in [fixed(None, Some(10), 0), fixed(Some(1), None, 0)] {
            reserved(reservations.reserve(&probe, request(1, 1000)).unwrap());
        }
        assert_eq!(reservations.reserved(), 2000);
    }
}
