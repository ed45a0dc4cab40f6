//! Nearest-rank percentiles of latencies, in seconds: how the report sums up each kind of
//! latency, exactly for a small set of samples, within a histogram's error for a whole run's.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Percentiles of a set of latencies, in seconds.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Percentiles {
    /// Samples summarised.
    pub count: u64,
    /// Median.
    pub p50: f64,
    /// 99th percentile.
    pub p99: f64,
    /// 99.9th percentile.
    pub p999: f64,
    /// Largest sample.
    pub max: f64,
}

impl Percentiles {
    /// The exact percentiles of `samples` (`None` when there are none); for small sets (a run's
    /// reclaims), since every sample is held while they are computed.
    pub fn of(samples: impl IntoIterator<Item = Duration>) -> Option<Percentiles> {
        let mut sorted: Vec<Duration> = samples.into_iter().collect();
        sorted.sort_unstable();
        let max = *sorted.last()?;
        Some(Percentiles {
            count: sorted.len() as u64,
            p50: nearest_rank(&sorted, 0.50).as_secs_f64(),
            p99: nearest_rank(&sorted, 0.99).as_secs_f64(),
            p999: nearest_rank(&sorted, 0.999).as_secs_f64(),
            max: max.as_secs_f64(),
        })
    }
}

/// The smallest sample at or above the fraction `q` of `sorted` (nearest-rank definition), so a
/// percentile is always a latency that was observed.
pub fn nearest_rank(sorted: &[Duration], q: f64) -> Duration {
    let n = sorted.len();
    let rank = ((q * n as f64).ceil() as usize).clamp(1, n.max(1));
    sorted.get(rank - 1).copied().unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn percentiles_are_observed_samples_by_nearest_rank() {
        // 1..=1000 ms, shuffled by a stride coprime to 1000.
        let samples = (0..1_000u64).map(|i| ms((i * 7) % 1_000 + 1));
        let p = Percentiles::of(samples).unwrap();
        assert_eq!(p.count, 1_000);
        assert_eq!(p.p50, 0.500);
        assert_eq!(p.p99, 0.990);
        assert_eq!(p.p999, 0.999);
        assert_eq!(p.max, 1.000);
        let one = Percentiles::of([ms(3)]).unwrap();
        assert_eq!((one.p50, one.p99, one.p999), (0.003, 0.003, 0.003));
        assert_eq!(Percentiles::of(Vec::new()), None);
    }
}
