//! Scheduler configuration and the retry backoff it implies.

use std::time::Duration;

#[cfg(doc)]
use tidemark_engine_api::Engine;
use tidemark_engine_api::ReclaimCost;

use super::policy::ReclaimPolicy;

/// How the [`super::ReclaimScheduler`] paces reclaims. `Default` gives the documented defaults.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct SchedulerConfig {
    /// A bucket is reclaimed at most once per this interval, measured between run starts.
    /// Default 1 s.
    pub min_interval: Duration,
    /// At most this many reclaims run at once across all buckets (at least 1). Default 2.
    pub max_concurrent: usize,
    /// When a reclaim pays for itself on a backend whose reclaim visits only what is covered
    /// ([`ReclaimCost::Proportional`], declared by [`Engine::reclaim_cost`]): a request whose
    /// [`Engine::reclaimable`] estimate fails the policy is served by skipping the reclaim
    /// (counted as `skipped`); the bucket is looked at again on its next request, which the next
    /// watermark move makes. Default [`ReclaimPolicy::SWEEP`] (run once one entry is covered).
    pub proportional_policy: ReclaimPolicy,
    /// The same for a backend whose reclaim rewrites the bucket's live data
    /// ([`ReclaimCost::Rewrite`]: RocksDB's compaction). Default [`ReclaimPolicy::COMPACTION`]
    /// (run once half the bucket's bytes are covered).
    pub rewrite_policy: ReclaimPolicy,
    /// Backoff before the first retry of a failed reclaim; doubled for each further retry.
    /// Default 100 ms.
    pub retry_backoff_base: Duration,
    /// Upper bound of the retry backoff. Default 10 s.
    pub retry_backoff_max: Duration,
    /// Retries after a failed attempt before the run is given up (the next request starts
    /// afresh). Default 5.
    pub max_retries: u32,
}

impl Default for SchedulerConfig {
    fn default() -> Self {
        SchedulerConfig {
            min_interval: Duration::from_secs(1),
            max_concurrent: 2,
            proportional_policy: ReclaimPolicy::SWEEP,
            rewrite_policy: ReclaimPolicy::COMPACTION,
            retry_backoff_base: Duration::from_millis(100),
            retry_backoff_max: Duration::from_secs(10),
            max_retries: 5,
        }
    }
}

impl SchedulerConfig {
    /// Sets the minimum interval between two reclaims of one bucket.
    pub fn with_min_interval(mut self, interval: Duration) -> Self {
        self.min_interval = interval;
        self
    }

    /// Sets the maximum number of concurrent reclaims (clamped to at least 1).
    pub fn with_max_concurrent(mut self, n: usize) -> Self {
        self.max_concurrent = n.max(1);
        self
    }

    /// Sets the covered-entry count below which a bucket is skipped, in every policy. Only the
    /// count: a policy with a garbage ratio (RocksDB's [`ReclaimPolicy::COMPACTION`]) still
    /// skips below its ratio, so `with_min_reclaimable(0)` does not mean "never skip" there;
    /// [`never_skip`](Self::never_skip) does.
    pub fn with_min_reclaimable(mut self, entries: u64) -> Self {
        self.proportional_policy.min_entries = entries;
        self.rewrite_policy.min_entries = entries;
        self
    }

    /// Reclaims at every request on every backend: each policy becomes
    /// [`ReclaimPolicy::ALWAYS`] (no entry minimum, no garbage ratio, the estimate not read).
    /// For hosts that want space back as soon as the lake confirms it, whatever a compaction
    /// rewrites for it.
    pub fn never_skip(mut self) -> Self {
        self.proportional_policy = ReclaimPolicy::ALWAYS;
        self.rewrite_policy = ReclaimPolicy::ALWAYS;
        self
    }

    /// Sets the policy of the backends whose reclaims cost `cost`.
    pub fn with_policy(mut self, cost: ReclaimCost, policy: ReclaimPolicy) -> Self {
        match cost {
            ReclaimCost::Proportional => self.proportional_policy = policy,
            ReclaimCost::Rewrite => self.rewrite_policy = policy,
        }
        self
    }

    /// The policy of a backend whose reclaims cost `cost`.
    pub fn policy_for(&self, cost: ReclaimCost) -> ReclaimPolicy {
        match cost {
            ReclaimCost::Proportional => self.proportional_policy,
            ReclaimCost::Rewrite => self.rewrite_policy,
        }
    }

    /// Sets the retry backoff: `base * 2^retry`, capped at `max`.
    pub fn with_retry_backoff(mut self, base: Duration, max: Duration) -> Self {
        self.retry_backoff_base = base;
        self.retry_backoff_max = max;
        self
    }

    /// Sets how many times a failed reclaim is retried.
    pub fn with_max_retries(mut self, retries: u32) -> Self {
        self.max_retries = retries;
        self
    }

    /// The wait before retry number `retry` (0-based): `base * 2^retry`, capped at the maximum.
    pub fn backoff(&self, retry: u32) -> Duration {
        let factor = 1u32.checked_shl(retry).unwrap_or(u32::MAX);
        self.retry_backoff_base
            .checked_mul(factor)
            .unwrap_or(self.retry_backoff_max)
            .min(self.retry_backoff_max)
    }

    pub(crate) fn permits(&self) -> usize {
        self.max_concurrent.max(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_and_caps() {
        let c = SchedulerConfig::default()
            .with_retry_backoff(Duration::from_millis(100), Duration::from_millis(350));
        let waits: Vec<_> = (0..4).map(|r| c.backoff(r).as_millis()).collect();
        assert_eq!(waits, [100, 200, 350, 350]);
        assert_eq!(c.backoff(200), Duration::from_millis(350));
        assert_eq!(
            SchedulerConfig::default().with_max_concurrent(0).permits(),
            1
        );
    }

    #[test]
    fn policies_by_reclaim_cost() {
        use ReclaimCost::{Proportional, Rewrite};
        let c = SchedulerConfig::default();
        assert_eq!(c.policy_for(Rewrite), ReclaimPolicy::COMPACTION);
        assert_eq!(c.policy_for(Proportional), ReclaimPolicy::SWEEP);
        let c = c.with_min_reclaimable(0);
        assert_eq!(c.policy_for(Rewrite).min_entries, 0);
        assert!(c.policy_for(Proportional).never_skips());
        // Only the count: the compaction policy still waits for its garbage ratio.
        assert!(!c.policy_for(Rewrite).never_skips());
        let c = c.with_policy(Proportional, ReclaimPolicy::COMPACTION);
        assert_eq!(c.policy_for(Proportional), ReclaimPolicy::COMPACTION);
        let c = c.never_skip();
        for cost in [Proportional, Rewrite] {
            assert!(c.policy_for(cost).never_skips(), "{cost:?}");
        }
    }
}
