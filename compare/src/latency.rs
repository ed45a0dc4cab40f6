//! A run's latencies: the p99 over consecutive windows (exact within each window, computed as
//! the window closes), and every latency in a bounded [`Histogram`].

use std::time::Duration;

use serde::Serialize;

use super::histogram::Histogram;
use super::percentiles::nearest_rank;

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

/// The p99 over consecutive windows of `width` from time zero, each computed (exactly, by
/// nearest rank) when the next sample falls past it, so only the open window's latencies are
/// held. Samples come in order of their start (one writer, one reader); windows without samples
/// are left out.
#[derive(Debug, Clone)]
pub struct WindowedP99 {
    width: Duration,
    open: Option<u128>,
    latencies: Vec<Duration>,
    points: Vec<WindowP99>,
}

impl WindowedP99 {
    /// Windows `width` wide.
    pub fn new(width: Duration) -> Self {
        WindowedP99 {
            width: width.max(Duration::from_nanos(1)),
            open: None,
            latencies: Vec::new(),
            points: Vec::new(),
        }
    }

    /// A latency of something that started at `at` since the run started.
    pub fn record(&mut self, at: Duration, latency: Duration) {
        let window = at.as_nanos() / self.width.as_nanos();
        if self.open != Some(window) {
            self.close();
            self.open = Some(window);
        }
        self.latencies.push(latency);
    }

    fn close(&mut self) {
        let Some(window) = self.open.take() else {
            return;
        };
        self.latencies.sort_unstable();
        if let Some(&max) = self.latencies.last() {
            let p99 = nearest_rank(&self.latencies, 0.99).min(max);
            self.points.push(WindowP99 {
                at: (window + 1) as f64 * self.width.as_secs_f64(),
                p99: p99.as_secs_f64(),
                count: self.latencies.len() as u64,
            });
        }
        // The buffer is kept: its capacity is one window's samples at most.
        self.latencies.clear();
    }

    /// The series, the last window closed.
    pub fn finish(mut self) -> Vec<WindowP99> {
        self.close();
        self.points
    }
}

/// Latencies of one kind over a run: every one in a [`Histogram`], and the p99 per window.
#[derive(Debug, Clone)]
pub struct Recorder {
    all: Histogram,
    windows: WindowedP99,
}

/// What a [`Recorder`] measured.
#[derive(Debug, Clone)]
pub struct Latencies {
    /// Every latency.
    pub all: Histogram,
    /// p99 per window.
    pub p99_series: Vec<WindowP99>,
}

impl Recorder {
    /// A recorder with p99 windows `width` wide.
    pub fn new(width: Duration) -> Self {
        Recorder {
            all: Histogram::default(),
            windows: WindowedP99::new(width),
        }
    }

    /// One latency of something that started at `at` since the run started.
    pub fn record(&mut self, at: Duration, latency: Duration) {
        self.all.record(latency);
        self.windows.record(at, latency);
    }

    /// The histogram and the windowed series.
    pub fn finish(self) -> Latencies {
        Latencies {
            all: self.all,
            p99_series: self.windows.finish(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn windows_hold_the_samples_that_started_in_them() {
        let samples = [
            (ms(10), ms(1)),
            (ms(240), ms(9)),
            (ms(260), ms(2)),
            (ms(900), ms(4)),
        ];
        let mut windows = WindowedP99::new(ms(250));
        for (at, latency) in samples {
            windows.record(at, latency);
        }
        let series = windows.finish();
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
