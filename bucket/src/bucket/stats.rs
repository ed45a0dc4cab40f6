//! Bucket-layer counters.

use std::sync::atomic::{AtomicU64, Ordering};

/// What a [`super::HistoricalBucket`] has done since it was created.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BucketStats {
    /// `on_lake_progress` calls, every one: those refused (out of order, or with the bucket's
    /// state unreadable) and those ignored included.
    pub notifications: u64,
    /// Notifications ignored as stale or repeated: an older or the same snapshot that would not
    /// move `W`.
    pub ignored_notifications: u64,
    /// Notifications that processed a newer snapshot offered by a notification still waiting
    /// (that one then finds it served and is ignored): the latest wins.
    pub coalesced_notifications: u64,
    /// Successful lookuper refreshes (progress and recovery).
    pub refreshes: u64,
    /// Failed lookuper refreshes; each published nothing.
    pub refresh_failures: u64,
    /// Notifications or recoveries that moved the watermark.
    pub watermark_advances: u64,
    /// Reclaims requested from the scheduler.
    pub reclaim_requests: u64,
    /// `recover` calls that succeeded.
    pub recoveries: u64,
    /// Lookups answered by a local value.
    pub local_values: u64,
    /// Lookups answered by a local tombstone (authoritative: no lake lookup).
    pub local_tombstones: u64,
    /// Lookups that missed locally and were answered by the lake.
    pub lake_fallbacks: u64,
    /// Lake lookups that failed (the error is returned, never turned into "absent").
    pub lake_failures: u64,
    /// Lake calls (refresh, lookup, lookup_many) abandoned at their [`super::LakeTimeouts`]; each
    /// is also counted as a refresh failure or as lake failures.
    pub lake_timeouts: u64,
    /// Local misses refused because the lookuper serves a snapshot behind the watermark.
    pub lake_behind: u64,
    /// Lookups whose local entry was not served because the lake may hold a newer version (the
    /// lake is ahead of the applied end, or a lagging replica's purge is pending); the lake
    /// answered instead.
    pub distrusted_local: u64,
}

#[derive(Debug, Default)]
pub(crate) struct BucketCounters {
    pub(crate) notifications: AtomicU64,
    pub(crate) ignored_notifications: AtomicU64,
    pub(crate) coalesced_notifications: AtomicU64,
    pub(crate) refreshes: AtomicU64,
    pub(crate) refresh_failures: AtomicU64,
    pub(crate) watermark_advances: AtomicU64,
    pub(crate) reclaim_requests: AtomicU64,
    pub(crate) recoveries: AtomicU64,
    pub(crate) local_values: AtomicU64,
    pub(crate) local_tombstones: AtomicU64,
    pub(crate) lake_fallbacks: AtomicU64,
    pub(crate) lake_failures: AtomicU64,
    pub(crate) lake_timeouts: AtomicU64,
    pub(crate) lake_behind: AtomicU64,
    pub(crate) distrusted_local: AtomicU64,
}

/// Bumps a counter by one.
pub(crate) fn bump(counter: &AtomicU64) {
    counter.fetch_add(1, Ordering::Relaxed);
}

impl BucketCounters {
    pub(crate) fn snapshot(&self) -> BucketStats {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        BucketStats {
            notifications: get(&self.notifications),
            ignored_notifications: get(&self.ignored_notifications),
            coalesced_notifications: get(&self.coalesced_notifications),
            refreshes: get(&self.refreshes),
            refresh_failures: get(&self.refresh_failures),
            watermark_advances: get(&self.watermark_advances),
            reclaim_requests: get(&self.reclaim_requests),
            recoveries: get(&self.recoveries),
            local_values: get(&self.local_values),
            local_tombstones: get(&self.local_tombstones),
            lake_fallbacks: get(&self.lake_fallbacks),
            lake_failures: get(&self.lake_failures),
            lake_timeouts: get(&self.lake_timeouts),
            lake_behind: get(&self.lake_behind),
            distrusted_local: get(&self.distrusted_local),
        }
    }
}
