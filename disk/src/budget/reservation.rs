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

use super::{FD_RESERVE, SharedCeiling};
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
    /// For buckets sharing engine instances under `dir`: how their ceiling grows, and how many
    /// hold this reservation.
    shared: Option<(SharedCeiling, usize)>,
}

impl State {
    /// Why `ceiling` more descriptors for `budget` do not fit, or `None` when they do.
    fn refusal(&mut self, probe: &impl Probe, budget: u64, ceiling: u64) -> Option<Refusal> {
        let reserved: u64 = self.held.values().map(|h| h.ceiling).sum();
        let limit = probe.limit();
        let (Some(soft), Some(open)) = (limit.soft, probe.open_fds()) else {
            return None;
        };
        if fits(open, reserved, ceiling, soft) {
            return None;
        }
        for held in self.held.values_mut().filter(|h| h.canonical.is_none()) {
            // A directory not created yet holds nothing.
            held.canonical = held.dir.canonicalize().ok();
        }
        let dirs: Vec<&Path> = (self.held.values())
            .filter_map(|h| h.canonical.as_deref())
            .collect();
        let count = probe.fds_under(&dirs).unwrap_or(FdCount { open, under: 0 });
        let outside = count.open.saturating_sub(count.under);
        if fits(outside, reserved, ceiling, soft) {
            return None;
        }
        let own: u64 = (self.held.values())
            .filter(|h| h.budget == budget)
            .map(|h| h.ceiling)
            .sum();
        Some(Refusal {
            limit,
            soft,
            open: count.open,
            outside,
            buckets: self.held.values().map(Held::buckets).sum(),
            reserved,
            reserved_by_others: reserved - own,
        })
    }

    /// Records a reservation; returns its id.
    fn insert(
        &mut self,
        budget: u64,
        dir: &Path,
        ceiling: u64,
        shared: Option<(SharedCeiling, usize)>,
    ) -> u64 {
        let id = self.next;
        self.next += 1;
        self.held.insert(
            id,
            Held {
                budget,
                dir: dir.to_path_buf(),
                canonical: None,
                ceiling,
                shared,
            },
        );
        id
    }
}

impl Held {
    /// Buckets holding this reservation.
    fn buckets(&self) -> usize {
        self.shared.map_or(1, |(_, buckets)| buckets)
    }
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

/// One bucket asking to be admitted beside the buckets that share engine instances with it
/// under `dir`: it adds what their ceiling grows by with one more bucket, often nothing.
pub(crate) struct SharedRequest<'a> {
    /// The budget it belongs to.
    pub budget: u64,
    /// The directory of the shared instances: what they open lies under it.
    pub dir: &'a Path,
    /// How the shared instances' ceiling grows with their buckets.
    pub ceiling: SharedCeiling,
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

/// The soft limit under which buckets whose ceilings total `ceilings` fit beside `outside` and
/// the ceilings `others` reserve.
pub(crate) fn limit_for(outside: u64, others: u64, ceilings: u64) -> u64 {
    outside
        .saturating_add(others)
        .saturating_add(ceilings)
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
        if let Some(refusal) = state.refusal(probe, request.budget, request.ceiling) {
            return Ok(Admission::Refused(refusal));
        }
        Ok(Admission::Reserved(state.insert(
            request.budget,
            request.dir,
            request.ceiling,
            None,
        )))
    }

    /// Reserves for one more bucket sharing the instances under `request.dir`: what their
    /// ceiling grows by, when that fits (nothing to check when it does not grow). Every bucket
    /// of one budget under one directory holds the same reservation, released by the last.
    pub(crate) fn reserve_shared(
        &self,
        probe: &impl Probe,
        request: SharedRequest<'_>,
    ) -> Result<Admission> {
        let mut state = sync::lock(&self.state, "descriptor reservation")?;
        let joined = state.held.iter().find_map(|(id, held)| {
            (held.budget == request.budget && held.dir == request.dir)
                .then_some(held.shared.map(|(_, buckets)| (*id, buckets)))
                .flatten()
        });
        let buckets = joined.map_or(0, |(_, buckets)| buckets);
        let growth = request
            .ceiling
            .total(buckets + 1)
            .saturating_sub(request.ceiling.total(buckets));
        if growth > 0
            && let Some(refusal) = state.refusal(probe, request.budget, growth)
        {
            return Ok(Admission::Refused(refusal));
        }
        let total = request.ceiling.total(buckets + 1);
        Ok(Admission::Reserved(match joined {
            Some((id, _)) => {
                if let Some(held) = state.held.get_mut(&id) {
                    held.ceiling = total;
                    held.shared = Some((request.ceiling, buckets + 1));
                }
                id
            }
            None => state.insert(
                request.budget,
                request.dir,
                total,
                Some((request.ceiling, 1)),
            ),
        }))
    }

    /// Gives back reservation `id`. Never fails: a lock poisoned by a panic elsewhere still
    /// holds a consistent map (every change to it is one call).
    pub(crate) fn release(&self, id: u64) {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(held) = state.held.get_mut(&id)
            && let Some((ceiling, buckets)) = held.shared
            && buckets > 1
        {
            held.ceiling = ceiling.total(buckets - 1);
            held.shared = Some((ceiling, buckets - 1));
            return;
        }
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
        assert_eq!(limit_for(10, 100, 36 * 28), 10 + 100 + 36 * 28 + FD_RESERVE);
        assert_eq!(limit_for(1, 0, u64::MAX), u64::MAX);
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

    fn shared(budget: u64, ceiling: SharedCeiling) -> SharedRequest<'static> {
        SharedRequest {
            budget,
            dir: Path::new("/srv/buckets/.shared"),
            ceiling,
        }
    }

    #[test]
    fn buckets_sharing_instances_reserve_what_the_instances_grow_by() {
        let reservations = Reservations::new();
        // Instances of 40 descriptors, 3 buckets each; room for two instances beside 10 outside.
        let ceiling = SharedCeiling {
            per_instance: 40,
            buckets_per_instance: 3,
        };
        let probe = fixed(Some(10 + 2 * 40 + FD_RESERVE), Some(10), 0);
        let ids: Vec<u64> = (0..6)
            .map(|_| {
                reserved(
                    reservations
                        .reserve_shared(&probe, shared(1, ceiling))
                        .unwrap(),
                )
            })
            .collect();
        assert_eq!(reservations.reserved(), 80, "six buckets, two instances");
        assert!(ids.iter().all(|id| *id == ids[0]), "one reservation");
        let Admission::Refused(refusal) = reservations
            .reserve_shared(&probe, shared(1, ceiling))
            .unwrap()
        else {
            panic!("a seventh bucket needs a third instance, which does not fit");
        };
        assert_eq!((refusal.buckets, refusal.reserved), (6, 80));
        // A bucket closing frees its instance's share once the instance would hold none.
        reservations.release(ids[0]);
        assert_eq!(reservations.reserved(), 80);
        reservations.release(ids[0]);
        reservations.release(ids[0]);
        assert_eq!(reservations.reserved(), 40);
        for _ in 0..3 {
            reservations.release(ids[0]);
        }
        assert_eq!(reservations.reserved(), 0, "the last bucket releases it");
    }

    #[test]
    fn a_bucket_that_adds_no_descriptor_is_admitted_under_a_full_limit() {
        let reservations = Reservations::new();
        let one_instance = SharedCeiling {
            per_instance: 40,
            buckets_per_instance: usize::MAX,
        };
        let probe = fixed(Some(10 + 40 + FD_RESERVE), Some(10), 0);
        reserved(
            reservations
                .reserve_shared(&probe, shared(1, one_instance))
                .unwrap(),
        );
        // The process is now at its limit, yet ten thousand more buckets add nothing.
        let full = fixed(Some(10 + 40 + FD_RESERVE), Some(10 + 40 + FD_RESERVE), 0);
        for _ in 0..10_000 {
            reserved(
                reservations
                    .reserve_shared(&full, shared(1, one_instance))
                    .unwrap(),
            );
        }
        assert_eq!(reservations.reserved(), 40);
        // Another budget's instances under the same directory are its own.
        let Admission::Refused(_) = reservations
            .reserve_shared(&full, shared(2, one_instance))
            .unwrap()
        else {
            panic!("another budget's instance shared a reservation it does not hold");
        };
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
