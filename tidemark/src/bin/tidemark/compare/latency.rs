//! Latency figures from every sample kept (no histogram buckets): exact nearest-rank percentiles,
//! and the p99 over consecutive windows of a run.

use std::time::Duration;

use serde::Serialize;

/// Percentiles of a set of latencies, in seconds.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
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
    /// The percentiles of `samples` (`None` when there are none).
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
fn nearest_rank(sorted: &[Duration], q: f64) -> Duration {
    let n = sorted.len();
    let rank = ((q * n as f64).ceil() as usize).clamp(1, n.max(1));
    sorted.get(rank - 1).copied().unwrap_or_default()
}

/// One point of a windowed p99 series.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct WindowP99 {
    /// End of the window, seconds since the run started.
    pub at: f64,
    /// p99 of the latencies that started in the window, seconds.
    pub p99: f64,
    /// How many there were.
    pub count: u64,
}

/// The p99 of `(start, latency)` samples over consecutive windows of `width` from time zero;
/// windows without samples are left out.
pub fn windowed_p99(samples: &[(Duration, Duration)], width: Duration) -> Vec<WindowP99> {
    let width_nanos = width.as_nanos().max(1);
    let mut windows: std::collections::BTreeMap<u128, Vec<Duration>> = Default::default();
    for &(at, latency) in samples {
        windows
            .entry(at.as_nanos() / width_nanos)
            .or_default()
            .push(latency);
    }
    windows
        .into_iter()
        .filter_map(|(index, latencies)| {
            let p = Percentiles::of(latencies)?;
            Some(WindowP99 {
                at: (index + 1) as f64 * width.as_secs_f64(),
                p99: p.p99,
                count: p.count,
            })
        })
        .collect()
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

    #[test]
    fn windows_hold_the_samples_that_started_in_them() {
        let samples = [
            (ms(10), ms(1)),
            (ms(240), ms(9)),
            (ms(260), ms(2)),
            (ms(900), ms(4)),
        ];
        let series = windowed_p99(&samples, ms(250));
        assert_eq!(
            series,
            vec![
                WindowP99 {
                    at: 0.25,
                    p99: 0.009,
                    count: 2
                },
                WindowP99 {
                    at: 0.5,
                    p99: 0.002,
                    count: 1
                },
                WindowP99 {
                    at: 1.0,
                    p99: 0.004,
                    count: 1
                },
            ]
        );
    }
}
