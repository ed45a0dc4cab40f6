//! Engine statistics and the lock-free counters every backend shares.

use std::sync::atomic::{AtomicU64, Ordering};

/// Counters since the engine was opened (they are not persisted).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CounterSnapshot {
    /// Records written by `apply`.
    pub applied: u64,
    /// Records skipped as covered (`offset < W`).
    pub covered: u64,
    /// Records skipped as already applied.
    pub already_applied: u64,
    /// Values physically removed by reclamation.
    pub reclaimed_values: u64,
    /// Tombstones physically removed by reclamation.
    pub reclaimed_tombstones: u64,
    /// Completed `reclaim` calls.
    pub reclaim_runs: u64,
    /// Corrupt entries reclamation met and kept.
    pub corrupt_kept: u64,
    /// Bytes reclaims wrote, where the backend measures it (RocksDB: the table files its
    /// reclaim compactions wrote; see `ReclaimReport::bytes_rewritten`). 0 elsewhere.
    pub reclaim_bytes_rewritten: u64,
    /// Bytes on disk reclaims freed (the sum of `bytes_before − bytes_after`, where positive).
    pub reclaim_bytes_freed: u64,
    /// Rebuilds that gave the store's space back to the file system: sled's switches to a fresh
    /// database, redb's file compactions. 0 on the LSM backends, whose reclaim compactions do it.
    pub space_rebuilds: u64,
}

impl CounterSnapshot {
    /// What was counted after `base` was taken (each field `self - base`, saturating at 0), e.g.
    /// to compare an engine reopened mid-run with a model that never reset.
    pub fn since(&self, base: &CounterSnapshot) -> CounterSnapshot {
        CounterSnapshot {
            applied: self.applied.saturating_sub(base.applied),
            covered: self.covered.saturating_sub(base.covered),
            already_applied: self.already_applied.saturating_sub(base.already_applied),
            reclaimed_values: self.reclaimed_values.saturating_sub(base.reclaimed_values),
            reclaimed_tombstones: self
                .reclaimed_tombstones
                .saturating_sub(base.reclaimed_tombstones),
            reclaim_runs: self.reclaim_runs.saturating_sub(base.reclaim_runs),
            corrupt_kept: self.corrupt_kept.saturating_sub(base.corrupt_kept),
            reclaim_bytes_rewritten: self
                .reclaim_bytes_rewritten
                .saturating_sub(base.reclaim_bytes_rewritten),
            reclaim_bytes_freed: self
                .reclaim_bytes_freed
                .saturating_sub(base.reclaim_bytes_freed),
            space_rebuilds: self.space_rebuilds.saturating_sub(base.space_rebuilds),
        }
    }
}

/// Atomic counters shared by an engine's writer, reader and reclaimer.
#[derive(Debug, Default)]
pub struct EngineCounters {
    applied: AtomicU64,
    covered: AtomicU64,
    already_applied: AtomicU64,
    reclaimed_values: AtomicU64,
    reclaimed_tombstones: AtomicU64,
    reclaim_runs: AtomicU64,
    corrupt_kept: AtomicU64,
    reclaim_bytes_rewritten: AtomicU64,
    reclaim_bytes_freed: AtomicU64,
}

impl EngineCounters {
    /// Adds an apply outcome.
    pub fn record_apply(&self, outcome: &crate::ApplyOutcome) {
        self.applied.fetch_add(outcome.applied, Ordering::Relaxed);
        self.covered.fetch_add(outcome.covered, Ordering::Relaxed);
        self.already_applied
            .fetch_add(outcome.already_applied, Ordering::Relaxed);
    }

    /// Adds a finished reclaim run.
    pub fn record_reclaim(&self, report: &crate::ReclaimReport) {
        self.reclaimed_values
            .fetch_add(report.values_removed, Ordering::Relaxed);
        self.reclaimed_tombstones
            .fetch_add(report.tombstones_removed, Ordering::Relaxed);
        self.corrupt_kept
            .fetch_add(report.corrupt_kept, Ordering::Relaxed);
        self.reclaim_runs.fetch_add(1, Ordering::Relaxed);
        self.reclaim_bytes_rewritten
            .fetch_add(report.bytes_rewritten.unwrap_or(0), Ordering::Relaxed);
        self.reclaim_bytes_freed.fetch_add(
            report.bytes_before.saturating_sub(report.bytes_after),
            Ordering::Relaxed,
        );
    }

    /// A consistent-enough copy for reporting. `space_rebuilds` is the storage's to count: 0
    /// here, filled in by the disk skeleton.
    pub fn snapshot(&self) -> CounterSnapshot {
        CounterSnapshot {
            applied: self.applied.load(Ordering::Relaxed),
            covered: self.covered.load(Ordering::Relaxed),
            already_applied: self.already_applied.load(Ordering::Relaxed),
            reclaimed_values: self.reclaimed_values.load(Ordering::Relaxed),
            reclaimed_tombstones: self.reclaimed_tombstones.load(Ordering::Relaxed),
            reclaim_runs: self.reclaim_runs.load(Ordering::Relaxed),
            corrupt_kept: self.corrupt_kept.load(Ordering::Relaxed),
            reclaim_bytes_rewritten: self.reclaim_bytes_rewritten.load(Ordering::Relaxed),
            reclaim_bytes_freed: self.reclaim_bytes_freed.load(Ordering::Relaxed),
            space_rebuilds: 0,
        }
    }
}

/// A point-in-time view of an engine.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EngineStats {
    /// Watermark `W` (exclusive).
    pub watermark: u64,
    /// Applied end (exclusive).
    pub applied_end: u64,
    /// Bytes the store occupies on disk (0 for the memory engine: it reports encoded bytes held).
    pub bytes_on_disk: u64,
    /// Live entries (values plus tombstones). Exact unless
    /// [`EngineStats::live_entries_exact`] is false.
    pub live_entries: u64,
    /// Whether `live_entries` is exact (RocksDB only estimates it).
    pub live_entries_exact: bool,
    /// Estimate of covered entries not yet reclaimed (an upper bound on the B-tree backends,
    /// which count stale index rows too).
    pub covered_estimate: u64,
    /// Counters since open.
    pub counters: CounterSnapshot,
}

/// Entries and their stored bytes (what [`Reclaimable`] reports; the incremental accounting in
/// [`covered`](crate::covered) produces it).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Covered {
    /// Entries (values and tombstones, counted once per version written).
    pub entries: u64,
    /// Bytes of their keys and encoded values.
    pub bytes: u64,
}

/// What a reclaim would find now, read in O(1) from state the engine keeps incrementally (see
/// [`Engine::reclaimable`](crate::Engine::reclaimable)).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Reclaimable {
    /// The threshold `reclaim()` would apply now (`W − D`).
    pub threshold: u64,
    /// Entries below the threshold not yet reclaimed, and their bytes (never low).
    pub covered: Covered,
    /// `covered` plus what the offsets at or above the threshold certainly hold (lower
    /// bounds): the denominator of [`garbage_ratio`](Self::garbage_ratio), which therefore never
    /// reads low. Not an upper bound of everything stored.
    pub stored: Covered,
}

impl Reclaimable {
    /// Covered bytes ÷ stored bytes (0 for an empty store): the share of the store a reclaim
    /// would remove, which bounds the bytes an LSM compaction rewrites per byte it reclaims.
    pub fn garbage_ratio(&self) -> f64 {
        if self.stored.bytes == 0 {
            return 0.0;
        }
        // u64 → f64 loses precision only beyond 2^53 bytes, irrelevant for a ratio.
        self.covered.bytes as f64 / self.stored.bytes as f64
    }
}
