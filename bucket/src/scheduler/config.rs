//! Scheduler configuration and the retry backoff it implies.

use std::time::Duration;

/// How the [`super::ReclaimScheduler`] paces reclaims. `Default` gives the documented defaults.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct SchedulerConfig {
    /// A bucket is reclaimed at most once per this interval, measured between run starts.
    /// Default 1 s.
    pub min_interval: Duration,
    /// At most this many reclaims run at once across all buckets (at least 1). Default 2.
    pub max_concurrent: usize,
    /// A request for a bucket whose `stats().covered_estimate` is below this is served by
    /// skipping the reclaim (counted as `skipped`); the bucket is looked at again on its next
    /// request, which the next watermark move makes. 0 never skips (and never asks for stats).
    /// Default 1.
    pub min_reclaimable: u64,
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
            min_reclaimable: 1,
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

    /// Sets the covered-entry estimate below which a bucket is skipped.
    pub fn with_min_reclaimable(mut self, entries: u64) -> Self {
        self.min_reclaimable = entries;
        self
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
}
