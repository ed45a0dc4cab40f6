//! The figures of the historical-partitions scenario (schema `tidemark.compare.buckets/1`), per
//! backend, and the tables printed at the end.

use std::fmt::Write as _;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tidemark_disk::process::ProcessUsage;

use super::run::{self, Outcome};
use crate::config::{BucketsConfig, CompareConfig};
use crate::percentiles::Percentiles;
use crate::reclaims::{ReclaimRun, ReclaimTotals};
use crate::report::ConfigReport;
use crate::units;

/// The JSON document's schema name.
pub const SCHEMA: &str = "tidemark.compare.buckets/1";

/// The whole scenario, as written to `compare.json`.
#[derive(Debug, Clone, Serialize)]
pub struct BucketsReport {
    /// The schema name, `tidemark.compare.buckets/1`.
    pub schema: &'static str,
    /// `dev` or `release`: what the figures were measured with.
    pub build: &'static str,
    /// The workload, as the variants' report records it: `rate`, `records` and `lookup_rate`
    /// are totals over the buckets.
    pub config: ConfigReport,
    /// Buckets, active set, rotation and the lake's lag in time.
    pub scenario: ScenarioReport,
    /// Where the stores were kept (`--dir`), `null` for a temporary directory.
    pub stores: Option<String>,
    /// One per backend, in the order they ran.
    pub runs: Vec<BucketsRun>,
}

/// The scenario, as the JSON records it.
#[derive(Debug, Clone, Serialize)]
pub struct ScenarioReport {
    /// Buckets opened per backend.
    pub buckets: usize,
    /// Buckets written at any moment.
    pub active: usize,
    /// How long one active set is written, seconds.
    pub rotate_seconds: f64,
    /// Active sets a run of `duration_seconds` goes through.
    pub rotations: u64,
    /// Range the lake's lag behind each bucket is drawn from at each commit, seconds (`--lag`
    /// offsets at `--rate`).
    pub lag_seconds_min: f64,
    /// See `lag_seconds_min`.
    pub lag_seconds_max: f64,
    /// Worker threads of the harness's runtime (part of the threads counted).
    pub runtime_workers: usize,
    /// The most blocking threads the harness's runtime starts (part of the threads counted).
    pub runtime_blocking_threads_max: usize,
}

impl ScenarioReport {
    /// The JSON view of `scenario` under `config`.
    pub fn new(config: &CompareConfig, scenario: &BucketsConfig) -> Self {
        let seconds = |offsets: u64| offsets as f64 / config.rate.max(1) as f64;
        ScenarioReport {
            buckets: scenario.buckets,
            active: scenario.active,
            rotate_seconds: scenario.rotate.as_secs_f64(),
            rotations: scenario.rotations(config.duration),
            lag_seconds_min: seconds(config.lag_min),
            lag_seconds_max: seconds(config.lag_max),
            runtime_workers: run::WORKER_THREADS,
            runtime_blocking_threads_max: run::BLOCKING_THREADS,
        }
    }
}

/// The figures of one backend's run.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BucketsRun {
    /// Backend name.
    pub backend: String,
    /// Buckets opened.
    pub buckets: usize,
    /// Buckets written at any moment.
    pub active: usize,
    /// Opening and recovering every bucket, seconds.
    pub open_seconds: f64,
    /// Writing every bucket's first batch, seconds (before the run's clock starts).
    pub first_writes_seconds: f64,
    /// Records of the first batches.
    pub first_write_records: u64,
    /// Records the writers wrote after the first batches.
    pub records: u64,
    /// From the start to the end of the last apply, seconds.
    pub elapsed_seconds: f64,
    /// Records ÷ elapsed.
    pub write_throughput: f64,
    /// The furthest a writer fell behind its schedule, seconds.
    pub max_behind_seconds: f64,
    /// Active sets the run went through.
    pub rotations: u64,
    /// Distinct buckets the writers wrote (every bucket had its first batch).
    pub buckets_written: usize,
    /// Every apply of the writers (whole run).
    pub write_latency: Option<Percentiles>,
    /// Every lookup of the reader (whole run).
    pub lookup_latency: Option<Percentiles>,
    /// The reader's lookups of a bucket being written.
    pub lookup_latency_active: Option<Percentiles>,
    /// The reader's lookups of an idle bucket.
    pub lookup_latency_idle: Option<Percentiles>,
    /// What the lookups found.
    pub lookups: Lookups,
    /// Bytes of the whole root and the buckets' windows.
    pub bytes: Bytes,
    /// The process: before the backend's context, the most seen and at the end.
    pub process: Process,
    /// The reclaims of every bucket.
    pub reclaim: Reclaims,
    /// Lake progress over every bucket.
    pub lake: Lake,
    /// The root and the process over time.
    pub series: Series,
    /// Every reclaim, by start.
    pub reclaims: Vec<ReclaimRun>,
}

/// What the lookups found.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Lookups {
    /// Answers checked against the models: the reader's while writing, and every key of every
    /// bucket, once, at the end.
    pub checked: u64,
    /// Answers that were not a state the key had (must be 0).
    pub mismatches: u64,
    /// Lookups that failed (must be 0).
    pub errors: u64,
    /// Reader lookups skipped because it fell behind its rate.
    pub skipped: u64,
    /// The reader's lookups of a bucket being written.
    pub active: u64,
    /// The reader's lookups of an idle bucket.
    pub idle: u64,
    /// Answered by a local value, a local tombstone, or the lake after a local miss (the
    /// buckets' counters when the writers finished).
    pub local_values: u64,
    /// See `local_values`.
    pub local_tombstones: u64,
    /// See `local_values`.
    pub lake_fallbacks: u64,
    /// The first mismatches and errors, described.
    pub problems: Vec<String>,
}

/// Bytes of every file under the root (every bucket directory and the engine instances they
/// share), and the uncovered window: the records at or above each bucket's `W`, summed. The
/// root is counted twice: by the files' lengths and by the blocks allocated to them (what the
/// disk gives up; a preallocated sparse file is long but takes almost nothing, a file of a few
/// bytes takes a block).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Bytes {
    /// Once every bucket was open, before anything was written.
    pub empty: u64,
    /// `empty ÷ buckets`.
    pub empty_per_bucket: u64,
    /// Largest sample.
    pub peak: u64,
    /// When the writers finished.
    pub end: u64,
    /// `end ÷ buckets`.
    pub end_per_bucket: u64,
    /// The uncovered window when the writers finished.
    pub window_end: u64,
    /// `end ÷ window_end`.
    pub end_over_window: Option<f64>,
    /// `empty`, in allocated blocks.
    pub empty_allocated: u64,
    /// `end`, in allocated blocks.
    pub end_allocated: u64,
    /// `end_allocated ÷ window_end`.
    pub end_allocated_over_window: Option<f64>,
}

/// A figure of the process: the last read and the most any sample read.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize)]
pub struct Usage {
    /// Threads of the process (the harness's runtime included).
    pub threads: Option<u64>,
    /// Open file descriptors.
    pub open_fds: Option<u64>,
    /// Resident memory, bytes.
    pub rss_bytes: Option<u64>,
}

impl From<ProcessUsage> for Usage {
    fn from(u: ProcessUsage) -> Self {
        Usage {
            threads: u.threads,
            open_fds: u.open_fds,
            rss_bytes: u.rss_bytes,
        }
    }
}

/// The process during the run (the harness's own share included: its runtime, and the models
/// of every bucket, which hold each key's newest offset).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Process {
    /// Before the backend's context was created and its buckets opened.
    pub before: Usage,
    /// The most each figure read in any sample.
    pub max: Usage,
    /// When the writers finished.
    pub end: Usage,
}

/// The reclaims of every bucket.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Reclaims {
    /// Totals over every reclaim.
    #[serde(flatten)]
    pub totals: ReclaimTotals,
    /// Reclaims that started while their bucket was outside the active set.
    pub while_idle: u64,
    /// Buckets reclaimed at least once.
    pub buckets_reclaimed: usize,
    /// Buckets whose `W` had reached their applied end when the writers finished.
    pub buckets_drained: usize,
}

/// Lake progress over every bucket.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Lake {
    /// Snapshots committed, over every bucket.
    pub commits: u64,
    /// `on_lake_progress` durations.
    pub notifications: Option<Percentiles>,
}

/// The root and the process over time, one column per figure (same length, same order).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Series {
    /// Seconds since the run started.
    pub at: Vec<f64>,
    /// Bytes of every file under the root (their lengths).
    pub bytes_on_disk: Vec<u64>,
    /// Bytes of the blocks allocated to them.
    pub allocated_bytes: Vec<u64>,
    /// The uncovered window, summed over the buckets.
    pub window_bytes: Vec<u64>,
    /// `bytes_on_disk ÷ window_bytes` (`null` while the window is empty).
    pub bytes_over_window: Vec<Option<f64>>,
    /// Resident memory, bytes.
    pub rss_bytes: Vec<Option<u64>>,
    /// Open file descriptors.
    pub open_fds: Vec<Option<u64>>,
    /// Threads.
    pub threads: Vec<Option<u64>>,
}

fn ratio(a: u64, b: u64) -> Option<f64> {
    (b > 0).then(|| a as f64 / b as f64)
}

fn max_of(a: Option<u64>, b: Option<u64>) -> Option<u64> {
    a.max(b)
}

impl BucketsRun {
    /// The figures of `run`.
    pub fn new(run: &Outcome) -> Self {
        let mut series = Series::default();
        let mut max = Usage::default();
        for s in &run.samples {
            series.at.push(s.at.as_secs_f64());
            series.bytes_on_disk.push(s.bytes_on_disk);
            series.allocated_bytes.push(s.allocated_bytes);
            series.window_bytes.push(s.window_bytes);
            series
                .bytes_over_window
                .push(ratio(s.bytes_on_disk, s.window_bytes));
            series.rss_bytes.push(s.usage.rss_bytes);
            series.open_fds.push(s.usage.open_fds);
            series.threads.push(s.usage.threads);
            max = Usage {
                threads: max_of(max.threads, s.usage.threads),
                open_fds: max_of(max.open_fds, s.usage.open_fds),
                rss_bytes: max_of(max.rss_bytes, s.usage.rss_bytes),
            };
        }
        let end = run.samples.last();
        let end_bytes = end.map_or(0, |s| s.bytes_on_disk);
        let end_allocated = end.map_or(0, |s| s.allocated_bytes);
        let window_end = end.map_or(0, |s| s.window_bytes);
        let n = run.scenario.buckets.max(1) as u64;
        let elapsed = run.elapsed.as_secs_f64();
        BucketsRun {
            backend: run.backend.name().to_string(),
            buckets: run.scenario.buckets,
            active: run.scenario.active,
            open_seconds: run.open_time.as_secs_f64(),
            first_writes_seconds: run.seed_time.as_secs_f64(),
            first_write_records: run.seed_records,
            records: run.records,
            elapsed_seconds: elapsed,
            write_throughput: if elapsed > 0.0 {
                run.records as f64 / elapsed
            } else {
                0.0
            },
            max_behind_seconds: run.max_behind.as_secs_f64(),
            rotations: run.rotations,
            buckets_written: run.buckets_written,
            write_latency: run.writes.percentiles(),
            lookup_latency: run.lookups.percentiles(),
            lookup_latency_active: run.lookups_active.percentiles(),
            lookup_latency_idle: run.lookups_idle.percentiles(),
            lookups: Lookups {
                checked: run.checked,
                mismatches: run.mismatches,
                errors: run.lookup_errors,
                skipped: run.lookups_skipped,
                active: run.lookups_active.count(),
                idle: run.lookups_idle.count(),
                local_values: run.counts.local_values,
                local_tombstones: run.counts.local_tombstones,
                lake_fallbacks: run.counts.lake_fallbacks,
                problems: run.problems.clone(),
            },
            bytes: Bytes {
                empty: run.empty.length,
                empty_per_bucket: run.empty.length / n,
                peak: run
                    .samples
                    .iter()
                    .map(|s| s.bytes_on_disk)
                    .max()
                    .unwrap_or(0),
                end: end_bytes,
                end_per_bucket: end_bytes / n,
                window_end,
                end_over_window: ratio(end_bytes, window_end),
                empty_allocated: run.empty.allocated,
                end_allocated,
                end_allocated_over_window: ratio(end_allocated, window_end),
            },
            process: Process {
                before: run.before.into(),
                max,
                end: end.map(|s| s.usage.into()).unwrap_or_default(),
            },
            reclaim: Reclaims {
                totals: ReclaimTotals::of(&run.reclaims),
                while_idle: run.reclaims_while_idle,
                buckets_reclaimed: run.buckets_reclaimed,
                buckets_drained: run.buckets_drained,
            },
            lake: Lake {
                commits: run.lake_commits,
                notifications: run.notifications.percentiles(),
            },
            series,
            reclaims: run.reclaims.clone(),
        }
    }

    /// Whether every answer was right: no mismatch, no failed lookup.
    pub fn correct(&self) -> bool {
        self.lookups.mismatches == 0 && self.lookups.errors == 0
    }
}

/// Seconds as the tables show them.
fn secs(s: f64) -> String {
    units::duration(Duration::from_secs_f64(s.max(0.0)))
}

fn opt_secs(p: Option<Percentiles>, pick: impl Fn(&Percentiles) -> f64) -> String {
    p.map_or("-".into(), |p| secs(pick(&p)))
}

fn opt_count(n: Option<u64>) -> String {
    n.map_or("?".into(), |n| n.to_string())
}

fn opt_bytes(n: Option<u64>) -> String {
    n.map_or("?".into(), units::bytes)
}

/// The tables printed after the runs.
pub fn render(report: &BucketsReport) -> String {
    let mut out = String::new();
    let s = &report.scenario;
    let _ = writeln!(
        out,
        "\nhistorical partitions ({} build): {} buckets per backend, {} written at a time, the \
         next {} every {}; {} records/s in all, the lake {}..{} behind each bucket",
        report.build,
        s.buckets,
        s.active,
        s.active,
        secs(s.rotate_seconds),
        report.config.rate,
        secs(s.lag_seconds_min),
        secs(s.lag_seconds_max),
    );
    let _ = writeln!(
        out,
        "{:<8} {:>8} {:>8} {:>8} {:>9} {:>9} {:>9} {:>10} {:>10} {:>10} {:>15}",
        "backend",
        "open",
        "records",
        "written",
        "write/s",
        "write p99",
        "lookup p99",
        "active p99",
        "idle p99",
        "lake share",
        "wrong"
    );
    for r in &report.runs {
        let lake_share = {
            let l = &r.lookups;
            let all = l.local_values + l.local_tombstones + l.lake_fallbacks;
            if all == 0 {
                "-".into()
            } else {
                format!("{:.0} %", 100.0 * l.lake_fallbacks as f64 / all as f64)
            }
        };
        let _ = writeln!(
            out,
            "{:<8} {:>8} {:>8} {:>8} {:>9.0} {:>9} {:>9} {:>10} {:>10} {:>10} {:>15}",
            r.backend,
            secs(r.open_seconds),
            r.records,
            r.buckets_written,
            r.write_throughput,
            opt_secs(r.write_latency, |p| p.p99),
            opt_secs(r.lookup_latency, |p| p.p99),
            opt_secs(r.lookup_latency_active, |p| p.p99),
            opt_secs(r.lookup_latency_idle, |p| p.p99),
            lake_share,
            format!(
                "{}/{}",
                r.lookups.mismatches + r.lookups.errors,
                r.lookups.checked
            ),
        );
    }
    let _ = writeln!(
        out,
        "\nspace and process (bytes: the lengths of every file under the root, shared instances \
         included; allocated: the blocks the file system gave them; window: records at or above \
         each bucket's W, summed; process: max / at the end)"
    );
    let _ = writeln!(
        out,
        "{:<8} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10} {:>21} {:>13} {:>11}",
        "backend",
        "empty",
        "peak",
        "end",
        "per bucket",
        "window",
        "end/window",
        "allocated",
        "alloc/win",
        "RSS",
        "descriptors",
        "threads"
    );
    for r in &report.runs {
        let b = &r.bytes;
        let p = &r.process;
        let _ = writeln!(
            out,
            "{:<8} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10} {:>21} {:>13} {:>11}",
            r.backend,
            units::bytes(b.empty),
            units::bytes(b.peak),
            units::bytes(b.end),
            units::bytes(b.end_per_bucket),
            units::bytes(b.window_end),
            b.end_over_window.map_or("-".into(), |r| format!("{r:.1}")),
            units::bytes(b.end_allocated),
            b.end_allocated_over_window
                .map_or("-".into(), |r| format!("{r:.1}")),
            format!(
                "{} / {}",
                opt_bytes(p.max.rss_bytes),
                opt_bytes(p.end.rss_bytes)
            ),
            format!(
                "{} / {}",
                opt_count(p.max.open_fds),
                opt_count(p.end.open_fds)
            ),
            format!(
                "{} / {}",
                opt_count(p.max.threads),
                opt_count(p.end.threads)
            ),
        );
    }
    let _ = writeln!(
        out,
        "\nreclaims (while idle: started while the bucket was outside the active set; drained: W \
         at the applied end when the writers finished)"
    );
    let _ = writeln!(
        out,
        "{:<8} {:>8} {:>10} {:>10} {:>8} {:>9} {:>19} {:>12} {:>14}",
        "backend",
        "reclaims",
        "while idle",
        "buckets",
        "drained",
        "entries",
        "duration p50 / max",
        "lake commits",
        "notify p99"
    );
    for r in &report.runs {
        let t = &r.reclaim.totals;
        let durations = match (t.duration_p50, t.duration_max) {
            (Some(p50), Some(max)) => format!("{} / {}", secs(p50), secs(max)),
            _ => "-".into(),
        };
        let _ = writeln!(
            out,
            "{:<8} {:>8} {:>10} {:>10} {:>8} {:>9} {:>19} {:>12} {:>14}",
            r.backend,
            t.runs,
            r.reclaim.while_idle,
            r.reclaim.buckets_reclaimed,
            r.reclaim.buckets_drained,
            t.entries(),
            durations,
            r.lake.commits,
            opt_secs(r.lake.notifications, |p| p.p99),
        );
    }
    let _ = writeln!(
        out,
        "\nthe process before each backend's context (threads / descriptors / RSS): {}",
        report
            .runs
            .iter()
            .map(|r| format!(
                "{} {} / {} / {}",
                r.backend,
                opt_count(r.process.before.threads),
                opt_count(r.process.before.open_fds),
                opt_bytes(r.process.before.rss_bytes)
            ))
            .collect::<Vec<_>>()
            .join(", ")
    );
    out
}
