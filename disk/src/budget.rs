//! The per-process admission budget one backend's buckets share: how many may be open at once,
//! and the file descriptors each may come to hold, reserved against the process's limit before
//! an open.
//!
//! A host with a thousand buckets must learn at open, with a message that says what to change,
//! that it is about to run out, rather than see a storage engine fail deep inside with "too many
//! open files" (or worse, a background flush or compaction of a bucket it opened long ago). Every
//! disk backend's context owns one [`BucketBudget`]; an open engine holds a [`BucketLease`] and
//! gives it back when it is dropped, so a closed bucket's share is free again at once.
//!
//! Each admitted bucket reserves its backend's descriptor *ceiling*, the most it may come to
//! hold (a RocksDB bucket gains table files, logs and a new manifest after its open), in one
//! reservation of the whole process that every budget of every backend shares (see
//! `reservation`): a bucket is admitted only while what the process holds outside its buckets,
//! every admitted bucket's ceiling, its own and [`FD_RESERVE`] fit under the soft limit.
//!
//! ```
//! use tidemark_disk::budget::BucketBudget;
//!
//! let budget = BucketBudget::new("example", 2, 1);
//! let dir = std::path::Path::new("/tmp/bucket");
//! let a = budget.admit(dir)?;
//! let b = budget.admit(dir)?;
//! assert!(budget.admit(dir).is_err()); // a third bucket exceeds the budget
//! drop(a);
//! let c = budget.admit(dir)?; // a closed bucket's share is free at once
//! assert_eq!(budget.open_buckets(), 2);
//! # drop((b, c));
//! # Ok::<(), tidemark_engine_api::Error>(())
//! ```

use std::fmt;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use tidemark_engine_api::{Error, Result};

mod reservation;

use reservation::{Admission, ProcessProbe, Refusal, Request, SharedRequest};

/// Descriptors kept free beyond every admitted bucket's ceiling: files an engine opens and closes
/// within one call on the caller's thread (the high-water record and its directory, redb's
/// descriptor for an early fsync, a sled snapshot or blob file, a directory listing), which
/// follow the calls in flight rather than the buckets, and the host's own files opened after
/// the last admission.
pub const FD_RESERVE: u64 = 16;

/// The resources a backend promises a number of open buckets stays within, on top of what the
/// process held before (the scale test checks every figure).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResourceBounds {
    /// Threads the backend adds, whatever the number of buckets.
    pub threads: u64,
    /// File descriptors the buckets hold in all, each as small as the caller states (a RocksDB
    /// bucket: given its table files).
    pub fds: u64,
    /// File descriptors admission reserves for them: each bucket's ceiling, the most it may come
    /// to hold however it grows (at least `fds`).
    pub fds_reserved: u64,
    /// Resident memory they may hold in all: the shared caches plus a per-bucket overhead, bytes.
    pub memory_bytes: u64,
}

/// How the descriptors of buckets that share engine instances grow: each instance of
/// `buckets_per_instance` buckets may hold up to `per_instance` descriptors, whoever of its
/// buckets opened them, so a bucket that joins an instance adds nothing
/// ([`BucketBudget::sharing`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SharedCeiling {
    /// The most descriptors one shared instance may come to hold.
    pub per_instance: u64,
    /// The most buckets one instance serves (`usize::MAX`: one instance for all).
    pub buckets_per_instance: usize,
}

impl SharedCeiling {
    /// The most descriptors the instances of `buckets` buckets may hold.
    pub fn total(&self, buckets: usize) -> u64 {
        (buckets.div_ceil(self.buckets_per_instance.max(1)) as u64)
            .saturating_mul(self.per_instance)
    }
}

/// What one admitted bucket reserves: a ceiling of its own, or a share of its instances'.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ceiling {
    PerBucket(u64),
    Shared(SharedCeiling),
}

impl Ceiling {
    /// The most descriptors `buckets` buckets may hold.
    fn total(&self, buckets: usize) -> u64 {
        match self {
            Ceiling::PerBucket(ceiling) => (buckets as u64).saturating_mul(*ceiling),
            Ceiling::Shared(shared) => shared.total(buckets),
        }
    }
}

/// A bucket budget whose page-cache budget is split evenly among the buckets it admits: the
/// sizes of a sled or redb context. `Default` admits 1,024 buckets sharing 1 GiB (the engines'
/// own default for one database), 1 MiB each.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CacheBudget {
    /// The most buckets open at once; an open beyond it is [`Error::ResourceLimit`].
    pub max_buckets: usize,
    /// Page-cache budget of all buckets together, in bytes: each bucket gets
    /// `cache_bytes / max_buckets`.
    pub cache_bytes: u64,
}

impl Default for CacheBudget {
    fn default() -> Self {
        CacheBudget {
            max_buckets: 1024,
            cache_bytes: 1 << 30,
        }
    }
}

impl CacheBudget {
    /// The default budget admitting `buckets` buckets: the default cache budget, or `min_share`
    /// for each bucket when that is more.
    pub fn for_buckets(buckets: usize, min_share: u64) -> Self {
        let buckets = buckets.max(1);
        CacheBudget {
            max_buckets: buckets,
            cache_bytes: Self::default()
                .cache_bytes
                .max(min_share.saturating_mul(buckets as u64)),
        }
    }

    /// Each bucket's cache share, or [`Error::InvalidInput`] when it would be below `min_share`
    /// (or no bucket is admitted); `backend` names the context in the message.
    pub fn share(&self, backend: &'static str, min_share: u64) -> Result<u64> {
        if self.max_buckets == 0 {
            return Err(Error::invalid(format!(
                "a {backend} context must admit at least one bucket"
            )));
        }
        let share = self.cache_bytes / self.max_buckets as u64;
        if share < min_share {
            return Err(Error::invalid(format!(
                "a {backend} cache budget of {} bytes for {} buckets leaves {share} bytes each, \
                 below the minimum of {min_share}; raise cache_bytes or lower max_buckets",
                self.cache_bytes, self.max_buckets
            )));
        }
        Ok(share)
    }
}

/// How many buckets of one backend may be open at once and the most descriptors each may hold;
/// cheap to clone (shared).
#[derive(Clone)]
pub struct BucketBudget {
    inner: Arc<Inner>,
}

struct Inner {
    /// Tells this budget's reservations from other budgets' in the process's reservation.
    id: u64,
    backend: &'static str,
    max_buckets: usize,
    ceiling: Ceiling,
    open: AtomicUsize,
}

impl fmt::Debug for BucketBudget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BucketBudget")
            .field("backend", &self.inner.backend)
            .field("max_buckets", &self.inner.max_buckets)
            .field("ceiling", &self.inner.ceiling)
            .field("open", &self.open_buckets())
            .finish()
    }
}

impl BucketBudget {
    /// A budget of at most `max_buckets` open buckets (at least 1) of `backend`, each of which
    /// may hold up to `fd_ceiling` file descriptors while open.
    pub fn new(backend: &'static str, max_buckets: usize, fd_ceiling: u64) -> Self {
        Self::with_ceiling(backend, max_buckets, Ceiling::PerBucket(fd_ceiling))
    }

    /// A budget of at most `max_buckets` open buckets (at least 1) of `backend` that share
    /// engine instances: the buckets admitted under one directory (the instances' own, which
    /// [`BucketBudget::admit`] is then given) reserve `ceiling` together, so a bucket that
    /// joins an instance reserves nothing more.
    pub fn sharing(backend: &'static str, max_buckets: usize, ceiling: SharedCeiling) -> Self {
        Self::with_ceiling(backend, max_buckets, Ceiling::Shared(ceiling))
    }

    fn with_ceiling(backend: &'static str, max_buckets: usize, ceiling: Ceiling) -> Self {
        static NEXT_ID: AtomicU64 = AtomicU64::new(0);
        BucketBudget {
            inner: Arc::new(Inner {
                id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
                backend,
                max_buckets: max_buckets.max(1),
                ceiling,
                open: AtomicUsize::new(0),
            }),
        }
    }

    /// The most buckets that may be open at once.
    pub fn max_buckets(&self) -> usize {
        self.inner.max_buckets
    }

    /// The most descriptors one open bucket may hold (the backend's ceiling), which admission
    /// reserves for it; for buckets sharing instances, what the first bucket of an instance
    /// reserves (the instance's ceiling).
    pub fn fd_ceiling(&self) -> u64 {
        self.inner.ceiling.total(1)
    }

    /// The most descriptors `buckets` open buckets of this budget may hold, which admission
    /// reserves for them when they share one directory.
    pub fn fds_reserved(&self, buckets: usize) -> u64 {
        self.inner.ceiling.total(buckets)
    }

    /// Buckets open now.
    pub fn open_buckets(&self) -> usize {
        self.inner.open.load(Ordering::Acquire)
    }

    /// Admits one more bucket, to be opened at `path` (for a [`BucketBudget::sharing`] budget,
    /// the directory of the instances it joins), or refuses with
    /// [`Error::ResourceLimit`] when the budget is full or the process's soft file-descriptor
    /// limit has no room for the bucket's ceiling beside what the process holds outside its
    /// buckets, the ceilings of every bucket it has admitted (of any backend) and
    /// [`FD_RESERVE`]. Nothing is opened here; the share and the reservation are held by the
    /// returned lease until it is dropped.
    pub fn admit(&self, path: &Path) -> Result<BucketLease> {
        match self.admit_within_bound(path)? {
            Some(lease) => Ok(lease),
            None => {
                let inner = &self.inner;
                Err(Error::ResourceLimit {
                    path: path.to_path_buf(),
                    message: format!(
                        "{max} {} buckets are open, the most its context admits \
                         (max_buckets = {max}); close one, or create the context with a larger \
                         max_buckets (and cache budget)",
                        inner.backend,
                        max = inner.max_buckets
                    ),
                })
            }
        }
    }

    /// [`BucketBudget::admit`], except that a full budget is `Ok(None)` rather than an error:
    /// a caller that waits for a place (the release layer's open stores) tells "wait" from
    /// "refused by the descriptor limit" without racing a place given back in between.
    pub(crate) fn admit_within_bound(&self, path: &Path) -> Result<Option<BucketLease>> {
        let inner = &self.inner;
        let admitted = inner
            .open
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |open| {
                (open < inner.max_buckets).then_some(open + 1)
            });
        if admitted.is_err() {
            return Ok(None);
        }
        let mut lease = BucketLease {
            inner: Arc::clone(inner),
            reservation: None,
        };
        let admission = match inner.ceiling {
            Ceiling::PerBucket(ceiling) => reservation::PROCESS.reserve(
                &ProcessProbe,
                Request {
                    budget: inner.id,
                    dir: path,
                    ceiling,
                },
            )?,
            Ceiling::Shared(ceiling) => reservation::PROCESS.reserve_shared(
                &ProcessProbe,
                SharedRequest {
                    budget: inner.id,
                    dir: path,
                    ceiling,
                },
            )?,
        };
        match admission {
            Admission::Reserved(id) => {
                lease.reservation = Some(id);
                Ok(Some(lease))
            }
            Admission::Refused(refusal) => Err(Error::ResourceLimit {
                path: path.to_path_buf(),
                message: self.refusal_message(&refusal),
            }),
        }
    }

    /// What a descriptor refusal says: the figures, and the limit that admits this budget's
    /// every bucket beside what else the process holds and reserves.
    fn refusal_message(&self, r: &Refusal) -> String {
        let inner = &self.inner;
        let (backend, max) = (inner.backend, inner.max_buckets);
        let suggested =
            reservation::limit_for(r.outside, r.reserved_by_others, inner.ceiling.total(max));
        let ceiling = match inner.ceiling {
            Ceiling::PerBucket(ceiling) => format!("{ceiling} for a {backend} bucket"),
            Ceiling::Shared(shared) => format!(
                "{} for an instance of up to {} {backend} buckets",
                shared.per_instance, shared.buckets_per_instance
            ),
        };
        let how = match r.limit.hard {
            Some(hard) if suggested > hard => format!(
                "above the hard limit of {hard}, which needs the privilege to raise it: \
                 `ulimit -n {suggested}` as root in the shell that starts the process, \
                 LimitNOFILE={suggested} in its systemd unit, or \
                 `tidemark::process::set_fd_limit({suggested})` at start-up \
                 (CAP_SYS_RESOURCE)"
            ),
            _ => format!(
                "`ulimit -n {suggested}` in the shell that starts the process, \
                 LimitNOFILE={suggested} in its systemd unit, or \
                 `tidemark::process::set_fd_soft_limit({suggested})` at start-up"
            ),
        };
        format!(
            "no room for one more {backend} bucket under the soft file-descriptor limit \
             (RLIMIT_NOFILE) of {}: the process has {} descriptors open, {} of them outside its \
             buckets; its {} admitted buckets reserve {} (the most they may come to hold, \
             {ceiling}) and {FD_RESERVE} are kept in reserve. Raise the limit to at least {suggested} for {max} {backend} buckets: {how}",
            r.soft, r.open, r.outside, r.buckets, r.reserved
        )
    }
}

/// One admitted bucket's share of a [`BucketBudget`] and its descriptor reservation; dropping
/// it frees both (after the engine has closed its files: an engine drops its lease last).
pub struct BucketLease {
    inner: Arc<Inner>,
    reservation: Option<u64>,
}

impl fmt::Debug for BucketLease {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BucketLease")
            .field("backend", &self.inner.backend)
            .finish()
    }
}

impl Drop for BucketLease {
    fn drop(&mut self) {
        if let Some(id) = self.reservation {
            reservation::PROCESS.release(id);
        }
        self.inner.open.fetch_sub(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_budget_refuses_with_a_message_naming_it() {
        let budget = BucketBudget::new("sled", 1, 1);
        let path = Path::new("/srv/buckets/7");
        let lease = budget.admit(path).unwrap();
        let err = budget.admit(path).unwrap_err();
        assert!(matches!(err, Error::ResourceLimit { .. }), "{err}");
        let text = err.to_string();
        assert!(
            text.contains("/srv/buckets/7") && text.contains("max_buckets = 1"),
            "{text}"
        );
        assert_eq!(
            budget.open_buckets(),
            1,
            "a refused admission holds no share"
        );
        drop(lease);
        assert_eq!(budget.open_buckets(), 0);
        drop(budget.admit(path).unwrap());
    }

    #[test]
    fn cache_shares_split_the_budget_and_refuse_a_share_below_the_minimum() {
        let budget = |max_buckets, cache_bytes| CacheBudget {
            max_buckets,
            cache_bytes,
        };
        assert_eq!(budget(4, 1 << 20).share("sled", 1 << 10).unwrap(), 1 << 18);
        let err = budget(1000, 1 << 20).share("sled", 64 << 10).unwrap_err();
        assert!(matches!(err, Error::InvalidInput(_)), "{err}");
        assert!(err.to_string().contains("1048 bytes each"), "{err}");
        assert!(budget(0, 1 << 30).share("redb", 1).is_err());
        // Sized for the buckets: the default unless the minimum shares need more.
        assert_eq!(CacheBudget::for_buckets(10, 64 << 10), budget(10, 1 << 30));
        assert_eq!(
            CacheBudget::for_buckets(100_000, 64 << 10),
            budget(100_000, 100_000 * (64 << 10))
        );
    }

    #[test]
    fn clones_share_one_count() {
        let budget = BucketBudget::new("redb", 3, 1);
        let other = budget.clone();
        let leases: Vec<_> = (0..3)
            .map(|_| other.admit(Path::new("b")).unwrap())
            .collect();
        assert_eq!(budget.open_buckets(), 3);
        assert!(budget.admit(Path::new("b")).is_err());
        drop(leases);
        assert_eq!(other.open_buckets(), 0);
    }

    #[test]
    fn a_refusal_names_the_limit_that_admits_the_whole_budget() {
        let budget = BucketBudget::new("rocksdb", 36, 28);
        let refusal = |hard| Refusal {
            limit: crate::process::FdLimit {
                soft: Some(1024),
                hard: Some(hard),
            },
            soft: 1024,
            open: 900,
            outside: 10,
            buckets: 33,
            reserved: 30 * 28 + 3,
            reserved_by_others: 3,
        };
        // 10 outside + 3 reserved by other backends + 36 buckets of 28 + 16 in reserve.
        let text = budget.refusal_message(&refusal(1 << 20));
        assert!(
            text.contains("to at least 1037 for 36 rocksdb buckets")
                && text.contains("ulimit -n 1037")
                && text.contains("set_fd_soft_limit(1037)")
                && text.contains("(RLIMIT_NOFILE) of 1024")
                && text.contains("28 for a rocksdb bucket"),
            "{text}"
        );
        // Above the hard limit, raising the soft limit alone cannot do.
        let text = budget.refusal_message(&refusal(1030));
        assert!(
            text.contains("above the hard limit of 1030") && text.contains("set_fd_limit(1037)"),
            "{text}"
        );
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn descriptors_beyond_the_soft_limit_are_refused_with_how_to_raise_it() {
        // A bucket needing more descriptors than any soft limit allows is always refused: the
        // check reads the real limit and the real count.
        let budget = BucketBudget::new("rocksdb", 10, u64::MAX / 4);
        let err = budget.admit(Path::new("/srv/b")).unwrap_err();
        let text = err.to_string();
        assert!(matches!(err, Error::ResourceLimit { .. }), "{text}");
        assert!(
            text.contains("RLIMIT_NOFILE") && text.contains("ulimit -n"),
            "{text}"
        );
        assert_eq!(budget.open_buckets(), 0, "the refused lease was returned");
    }
}
