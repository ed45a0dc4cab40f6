//! A log-bucket latency histogram of fixed size, so a run of any length summarises its latencies
//! in the same memory (about 58 KiB per histogram).
//!
//! Latencies are counted in nanoseconds. Below 2^([`SUB_BITS`] + 1) = 256 ns every value has its
//! own bucket; above, each power of two is split into 2^[`SUB_BITS`] equal buckets, so a bucket is at
//! most 1/2^[`SUB_BITS`] of its lower bound wide. A percentile is the midpoint of the bucket that
//! holds the nearest-rank sample, clamped to the smallest and largest samples seen: within
//! [`RELATIVE_ERROR`] of that sample.

use std::time::Duration;

use super::percentiles::Percentiles;

/// Bits of the sub-buckets each power of two is split into.
const SUB_BITS: u32 = 7;
const SUB_BUCKETS: u64 = 1 << SUB_BITS;
/// Buckets that cover every `u64`: the exact ones, then 2^SUB_BITS per power of two above them.
const BUCKETS: usize = ((64 - SUB_BITS + 1) as usize) << SUB_BITS;

/// The most a reported percentile differs from the nearest-rank sample, relative to it:
/// half a bucket's width over its lower bound, 1/2^(SUB_BITS+1) = 1/256 (0.39 %).
pub const RELATIVE_ERROR: f64 = 1.0 / (2u64 << SUB_BITS) as f64;

/// Counts of latencies in logarithmic buckets, with the exact count, minimum and maximum.
#[derive(Debug, Clone, PartialEq)]
pub struct Histogram {
    counts: Vec<u64>,
    count: u64,
    min: u64,
    max: u64,
}

impl Default for Histogram {
    fn default() -> Self {
        Histogram {
            counts: vec![0; BUCKETS],
            count: 0,
            min: u64::MAX,
            max: 0,
        }
    }
}

/// The bucket of `nanos`.
fn index(nanos: u64) -> usize {
    if nanos < SUB_BUCKETS {
        return nanos as usize;
    }
    let exponent = 63 - nanos.leading_zeros();
    let shift = exponent - SUB_BITS;
    let sub = (nanos >> shift) - SUB_BUCKETS;
    (((shift + 1) as u64) << SUB_BITS | sub) as usize
}

/// The lowest value of bucket `index`, and its width.
fn bounds(index: usize) -> (u64, u64) {
    let index = index as u64;
    if index < SUB_BUCKETS {
        return (index, 1);
    }
    let shift = (index >> SUB_BITS) - 1;
    let sub = index & (SUB_BUCKETS - 1);
    ((SUB_BUCKETS + sub) << shift, 1 << shift)
}

impl Histogram {
    /// Counts one latency.
    pub fn record(&mut self, latency: Duration) {
        let nanos = u64::try_from(latency.as_nanos()).unwrap_or(u64::MAX);
        if let Some(slot) = self.counts.get_mut(index(nanos)) {
            *slot += 1;
        }
        self.count += 1;
        self.min = self.min.min(nanos);
        self.max = self.max.max(nanos);
    }

    /// Adds every latency `other` counted, as if each had been recorded here.
    pub fn merge(&mut self, other: &Histogram) {
        for (mine, &theirs) in self.counts.iter_mut().zip(&other.counts) {
            *mine += theirs;
        }
        self.count += other.count;
        self.min = self.min.min(other.min);
        self.max = self.max.max(other.max);
    }

    /// Latencies counted.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// The nearest-rank `q` quantile (0 < q ≤ 1), within [`RELATIVE_ERROR`] of the sample at
    /// that rank; `None` when empty.
    pub fn quantile(&self, q: f64) -> Option<Duration> {
        if self.count == 0 {
            return None;
        }
        let rank = ((q * self.count as f64).ceil() as u64).clamp(1, self.count);
        let mut seen = 0u64;
        for (i, &n) in self.counts.iter().enumerate() {
            seen += n;
            if seen >= rank {
                let (low, width) = bounds(i);
                let mid = low + (width - 1) / 2;
                return Some(Duration::from_nanos(mid.clamp(self.min, self.max)));
            }
        }
        Some(Duration::from_nanos(self.max))
    }

    /// p50, p99, p999 (each within [`RELATIVE_ERROR`]) and the exact maximum; `None` when empty.
    pub fn percentiles(&self) -> Option<Percentiles> {
        let at = |q| self.quantile(q).map(|d| d.as_secs_f64());
        Some(Percentiles {
            count: self.count(),
            p50: at(0.50)?,
            p99: at(0.99)?,
            p999: at(0.999)?,
            max: Duration::from_nanos(self.max).as_secs_f64(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tidemark_test_support::rng::SplitMix64;

    /// The exact nearest-rank quantile of `sorted`.
    fn exact(sorted: &[u64], q: f64) -> u64 {
        let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
        sorted[rank - 1]
    }

    #[test]
    fn quantiles_stay_within_the_stated_relative_error_of_the_nearest_rank_sample() {
        let mut rng = SplitMix64::new(0xb0c4);
        for n in [1usize, 7, 100, 1_000, 25_000] {
            let mut h = Histogram::default();
            // Log-uniform from 1 ns to about 70 s: every scale a latency here can have.
            let mut samples: Vec<u64> = (0..n)
                .map(|_| {
                    let bits = rng.below(37);
                    (1u64 << bits) + rng.below(1u64 << bits)
                })
                .collect();
            for &s in &samples {
                h.record(Duration::from_nanos(s));
            }
            samples.sort_unstable();
            assert_eq!(h.count(), n as u64);
            for q in [0.001, 0.25, 0.5, 0.9, 0.99, 0.999, 1.0] {
                let want = exact(&samples, q) as f64;
                let got = h.quantile(q).unwrap().as_nanos() as f64;
                assert!(
                    (got - want).abs() <= want * RELATIVE_ERROR,
                    "n {n}, q {q}: {got} against {want}"
                );
            }
            let p = h.percentiles().unwrap();
            assert_eq!(p.max, Duration::from_nanos(samples[n - 1]).as_secs_f64());
        }
    }

    #[test]
    fn small_values_are_exact_and_buckets_tile_every_value() {
        let mut h = Histogram::default();
        for ns in 1..=255u64 {
            h.record(Duration::from_nanos(ns));
        }
        assert_eq!(h.quantile(0.5), Some(Duration::from_nanos(128)));
        // Each bucket starts where the one before it ends, up to u64::MAX.
        let mut next = 0u64;
        for i in 0..BUCKETS {
            let (low, width) = bounds(i);
            assert_eq!(low, next, "bucket {i}");
            assert_eq!(index(low), i);
            assert_eq!(index(low + (width - 1)), i);
            next = low.wrapping_add(width);
        }
        assert_eq!(next, 0, "the last bucket ends at u64::MAX");
        assert_eq!(Histogram::default().percentiles(), None);
    }

    #[test]
    fn merged_histograms_are_the_histogram_of_every_latency() {
        let (mut a, mut b, mut both) = (
            Histogram::default(),
            Histogram::default(),
            Histogram::default(),
        );
        for ns in [5u64, 900, 70_000] {
            a.record(Duration::from_nanos(ns));
            both.record(Duration::from_nanos(ns));
        }
        for ns in [3u64, 1_000_000] {
            b.record(Duration::from_nanos(ns));
            both.record(Duration::from_nanos(ns));
        }
        a.merge(&b);
        assert_eq!(a, both);
        a.merge(&Histogram::default());
        assert_eq!(a, both, "an empty histogram adds nothing");
    }
}
