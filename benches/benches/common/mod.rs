//! What the criterion benchmarks share.

use std::time::Duration;

use criterion::Criterion;

/// The criterion settings of every benchmark group: a short warm-up, then `measurement` of
/// sampling per benchmark.
pub fn criterion(measurement: Duration) -> Criterion {
    Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(measurement)
}
