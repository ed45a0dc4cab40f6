//! The figures of a comparison: per run (schema `tidemark.compare/1`, `docs/CLI.md` § `tidemark compare`),
//! the targets `docs/CLI.md` states, and the tables printed at the end.

use std::fmt::Write as _;
use std::time::Duration;

use serde::Serialize;

use super::config::{CompareConfig, LakeKind, Variant};
use super::histogram;
use super::latency::WindowP99;
use super::percentiles::Percentiles;
use super::reclaims::{ReclaimRun, ReclaimTotals};
use super::run::RunOutcome;
use crate::units;

/// The JSON document's schema name.
pub const SCHEMA: &str = "tidemark.compare/1";

/// The targets docs/BENCHMARKS.md states (§ The targets), checked on every comparison.
pub mod limits {
    /// Bytes on disk at the end ÷ bytes of the uncovered window, with cleanup: at most (the
    /// target of a run with a realistic window, tens of MiB, where an engine's fixed footprint
    /// weighs little).
    pub const END_OVER_WINDOW: f64 = 2.0;
    /// Bytes on disk at the end ÷ (the uncovered window + the engine's empty-store footprint),
    /// with cleanup: at most (the target of short runs with small windows).
    pub const END_OVER_WINDOW_AND_EMPTY_STORE: f64 = 3.0;
    /// Bytes on disk at the end ÷ two thirds into the run, with cleanup: at most (a plateau).
    pub const GROWTH_LAST_THIRD: f64 = 1.1;
    /// Bytes on disk at the end, Tidemark ÷ no cleanup: at most.
    pub const TIDEMARK_OVER_NO_CLEANUP: f64 = 0.5;
    /// Bytes on disk at the end ÷ the engine's floor (a fresh store of the same engine holding
    /// exactly the window, written once), with cleanup: at most. What Tidemark adds to what the
    /// engine itself needs.
    pub const END_OVER_FLOOR: f64 = 1.5;
    /// Bytes on disk once the lake covers everything and one reclaim ran, at most this multiple
    /// of the empty store's footprint ...
    pub const DRAINED_OVER_EMPTY_STORE: u64 = 2;
    /// ... plus this many bytes.
    pub const DRAINED_SLACK: u64 = 1 << 20;
    /// Write p99 while reclaims run (Tidemark) ÷ write p99 with the scheduler off (the same
    /// watermark writes, no reclaims): at most; a diagnostic, judged only on
    /// [`DURING_RECLAIMS_MIN_APPLIES`] applies or more.
    pub const WRITE_P99_DURING_RECLAIMS: f64 = 1.5;
    /// The fewest applies that overlapped a reclaim for the figure above to be judged: below it
    /// the p99 is one of a handful of slowest applies.
    pub const DURING_RECLAIMS_MIN_APPLIES: u64 = 1_000;
    /// Whole-run write p99 and lookup p99, Tidemark ÷ scheduler off: at most.
    pub const TAIL_P99: f64 = 1.25;
    /// Whole-run write p999 and lookup p999, Tidemark ÷ scheduler off: at most.
    pub const TAIL_P999: f64 = 2.0;
    /// Bytes on disk at the end ÷ at mid-run for a store that "grows": at least (steady linear
    /// growth from empty gives 2; a plateau 1).
    pub const GROWTH: f64 = 1.25;
}

/// The whole comparison, as written to `compare.json`.
#[derive(Debug, Clone, Serialize)]
pub struct CompareReport {
    /// `SCHEMA`.
    pub schema: &'static str,
    /// `dev` (the dev profile: optimised, debug assertions on) or `release`: what the figures
    /// were measured with.
    pub build: &'static str,
    /// The workload.
    pub config: ConfigReport,
    /// Where the stores were kept (`--dir`), `null` for a temporary directory removed run by run.
    pub stores: Option<String>,
    /// One per backend and variant, in the order they ran.
    pub runs: Vec<RunReport>,
    /// The targets (`docs/CLI.md`), each evaluated.
    pub targets: Vec<Target>,
}

/// The workload, as the JSON records it.
#[derive(Debug, Clone, Serialize)]
pub struct ConfigReport {
    /// Writing time per run, seconds.
    pub duration_seconds: f64,
    /// Target write rate, records per second.
    pub rate: u64,
    /// Records per run.
    pub records: u64,
    /// Records per batch.
    pub batch: u64,
    /// Key space.
    pub keys: u64,
    /// Deletes, percent of records.
    pub delete_percent: u64,
    /// Bytes per value.
    pub value_size: usize,
    /// Range the lake's lag is drawn from at each commit, offsets.
    pub lag_min: u64,
    /// See `lag_min`.
    pub lag_max: u64,
    /// Time between lake commits, seconds.
    pub lake_interval_seconds: f64,
    /// Target lookup rate of the reader, per second.
    pub lookup_rate: u64,
    /// Time between samples of the store, seconds.
    pub sample_interval_seconds: f64,
    /// Width of the write-p99 windows, seconds.
    pub p99_window_seconds: f64,
    /// The scheduler's minimum interval between reclaims of a bucket, seconds.
    pub reclaim_interval_seconds: f64,
    /// `sync_writes` of every store.
    pub sync_writes: bool,
    /// `sweep_chunk_rows` of every store, `null` for the engine's default.
    pub sweep_chunk_rows: Option<usize>,
    /// The lake table: `memory` or `iceberg`.
    pub lake: LakeKind,
    /// Where an Iceberg table was kept when not beside its store (`warehouse`; the catalog
    /// and object store settings are not reported, as they may hold secrets).
    pub lake_site: crate::config::LakeSite,
    /// Seed of the stream, the lag and the reader.
    pub seed: u64,
    /// The most a latency percentile (not a windowed p99, not a maximum) differs from the
    /// nearest-rank sample, relative to it: the run's latencies are kept in a log-bucket
    /// histogram.
    pub percentile_relative_error: f64,
}

impl ConfigReport {
    /// The JSON view of `config`.
    pub fn new(config: &CompareConfig) -> Self {
        ConfigReport {
            duration_seconds: config.duration.as_secs_f64(),
            rate: config.rate,
            records: config.records(),
            batch: config.batch,
            keys: config.keys,
            delete_percent: config.delete_percent,
            value_size: config.value_size,
            lag_min: config.lag_min,
            lag_max: config.lag_max,
            lake_interval_seconds: config.lake_interval.as_secs_f64(),
            lookup_rate: config.lookup_rate,
            sample_interval_seconds: config.sample_interval.as_secs_f64(),
            p99_window_seconds: config.p99_window.as_secs_f64(),
            reclaim_interval_seconds: config.scheduler.min_interval.as_secs_f64(),
            sync_writes: config.sync_writes,
            sweep_chunk_rows: config.sweep_chunk_rows,
            lake: config.lake,
            lake_site: config.lake_site.clone(),
            seed: config.seed,
            percentile_relative_error: histogram::RELATIVE_ERROR,
        }
    }
}

/// The figures of one run.
#[derive(Debug, Clone, Serialize)]
pub struct RunReport {
    /// Backend name.
    pub backend: &'static str,
    /// How it cleaned up.
    pub variant: Variant,
    /// Records written.
    pub records: u64,
    /// From the first apply to the end of the last, seconds.
    pub elapsed_seconds: f64,
    /// Records ÷ elapsed: what the writer achieved against its target rate.
    pub write_throughput: f64,
    /// Records ÷ time spent inside `apply`: what the store could take.
    pub apply_capacity: f64,
    /// The furthest the writer fell behind its schedule, seconds.
    pub max_behind_seconds: f64,
    /// Every apply (percentiles from a histogram, within 0.4 % of the nearest-rank sample; the
    /// maximum exact).
    pub write_latency: Option<Percentiles>,
    /// Applies during which a reclaim ran.
    pub write_latency_during_reclaims: Option<Percentiles>,
    /// Applies during which none ran.
    pub write_latency_outside_reclaims: Option<Percentiles>,
    /// The reader's lookups through the bucket while writing.
    pub lookup_latency: Option<Percentiles>,
    /// What the lookups found.
    pub lookups: Lookups,
    /// Bytes on disk.
    pub bytes: Bytes,
    /// The reclaims the scheduler ran.
    pub reclaim: ReclaimTotals,
    /// Lake progress.
    pub lake: Lake,
    /// The store over time.
    pub series: Series,
    /// Write p99 per window of `p99_window_seconds` (exact within each window).
    pub write_p99_series: Vec<WindowP99>,
    /// Lookup p99 per window of `p99_window_seconds` (exact within each window).
    pub lookup_p99_series: Vec<WindowP99>,
    /// Every reclaim.
    pub reclaims: Vec<ReclaimRun>,
}

/// What the lookups found.
#[derive(Debug, Clone, Serialize)]
pub struct Lookups {
    /// Answers checked against the model: the reader's while writing, and every key written,
    /// once, at the end.
    pub checked: u64,
    /// Answers that were not a state the key had (must be 0).
    pub mismatches: u64,
    /// Lookups that failed (must be 0).
    pub errors: u64,
    /// Reader lookups skipped because it fell behind its rate.
    pub skipped: u64,
    /// Answered by a local value, a local tombstone, or the lake after a local miss (bucket
    /// counters when the writer finished).
    pub local_values: u64,
    /// See `local_values`.
    pub local_tombstones: u64,
    /// See `local_values`.
    pub lake_fallbacks: u64,
    /// The first mismatches and errors, described.
    pub problems: Vec<String>,
}

/// Bytes on disk, and the window the lake has not absorbed.
#[derive(Debug, Clone, Serialize)]
pub struct Bytes {
    /// Largest sample.
    pub peak: u64,
    /// When the writer finished.
    pub end: u64,
    /// Bytes of the records from the lake's end to the applied end when the writer finished
    /// (keys plus encoded values, every version: with overwrites inside the window, more than
    /// the newest versions a store must keep).
    pub window_end: u64,
    /// `end ÷ window_end`.
    pub end_over_window: Option<f64>,
    /// The sample nearest to half the run.
    pub mid: u64,
    /// `end ÷ mid`: about 2 for steady growth from empty, 1 for a plateau.
    pub growth_second_half: Option<f64>,
    /// The sample nearest to two thirds into the run.
    pub two_thirds: u64,
    /// `end ÷ two_thirds`: 1.5 for steady growth from empty, 1 for a plateau.
    pub growth_last_third: Option<f64>,
    /// The store when it was new and empty (opened, recovered, nothing written): the engine's
    /// fixed footprint.
    pub empty_store: u64,
    /// `end ÷ (window_end + empty_store)`.
    pub end_over_window_and_empty_store: Option<f64>,
    /// The engine's floor: a fresh store of the same engine, with the run's options and
    /// contexts, holding exactly the records of `window_end` (written once, in the run's
    /// batches, then flushed), built after the run (Tidemark runs; `null` otherwise).
    pub floor: Option<u64>,
    /// `end ÷ floor`: how far Tidemark stays above what the engine needs for the live data.
    pub end_over_floor: Option<f64>,
    /// `floor ÷ window_end`: the engine's own space amplification of the window.
    pub floor_over_window: Option<f64>,
    /// The engine's rebuilds that gave space back by the end (sled's fresh databases, redb's
    /// compactions).
    pub space_rebuilds: u64,
    /// Bytes on disk after the final check, once the lake covered everything, one reclaim ran
    /// and the engine's background space work finished (Tidemark runs; `null` otherwise).
    pub drained: Option<u64>,
    /// Values plus tombstones left then (an estimate on RocksDB).
    pub drained_live_entries: Option<u64>,
    /// The engine's space rebuilds from the start of the run to the end of the drain.
    pub drained_space_rebuilds: Option<u64>,
    /// What the drained store may hold: `2 × empty_store + 1 MiB`.
    pub drained_allowance: u64,
}

/// Lake progress during the run.
#[derive(Debug, Clone, Serialize)]
pub struct Lake {
    /// Snapshots committed.
    pub commits: u64,
    /// `on_lake_progress` durations (Tidemark runs: refresh, durable watermark write, reclaim
    /// request).
    pub notifications: Option<Percentiles>,
    /// All-or-nothing rebuilds (the lake end equalled the applied end).
    pub rebuilds: u64,
    /// Offsets the harness's model held in full when the writer finished (below them it keeps
    /// one per key): about the window the lake has not absorbed, whatever the run's length.
    pub unsettled_offsets: u64,
    /// The bucket's lookup calls to the lake while writing (local misses; a `lookup_many`
    /// counts once), on the run's lake.
    pub lookups: Option<Percentiles>,
    /// Keys those calls asked for.
    pub lookup_keys: u64,
    /// How long each compaction of the lake table took (`--lake iceberg`).
    pub compactions: Option<Percentiles>,
    /// Files the lake table's snapshot expiry deleted (`--lake iceberg`).
    pub files_expired: u64,
}

/// The store over time, one column per figure (same length, same order).
#[derive(Debug, Clone, Default, Serialize)]
pub struct Series {
    /// Seconds since the run started.
    pub at: Vec<f64>,
    /// Bytes on disk.
    pub bytes_on_disk: Vec<u64>,
    /// Bytes of the records the lake has not absorbed.
    pub window_bytes: Vec<u64>,
    /// `W`.
    pub watermark: Vec<u64>,
    /// The applied end.
    pub applied_end: Vec<u64>,
    /// The lake's end.
    pub lake_end: Vec<u64>,
    /// Values plus tombstones stored (an estimate on RocksDB).
    pub live_entries: Vec<u64>,
}

fn ratio(a: f64, b: f64) -> Option<f64> {
    (b > 0.0).then(|| a / b)
}

/// What a drained store may hold: [`limits::DRAINED_OVER_EMPTY_STORE`] × the empty store +
/// [`limits::DRAINED_SLACK`].
fn drained_allowance(empty_store: u64) -> u64 {
    empty_store
        .saturating_mul(limits::DRAINED_OVER_EMPTY_STORE)
        .saturating_add(limits::DRAINED_SLACK)
}

impl RunReport {
    /// The figures of `run`.
    pub fn new(run: &RunOutcome) -> Self {
        let mut series = Series::default();
        for s in &run.samples {
            series.at.push(s.at.as_secs_f64());
            series.bytes_on_disk.push(s.bytes_on_disk);
            series.window_bytes.push(s.window_bytes);
            series.watermark.push(s.watermark);
            series.applied_end.push(s.applied_end);
            series.lake_end.push(s.lake_end);
            series.live_entries.push(s.live_entries);
        }
        let end = run.samples.last();
        let end_bytes = end.map_or(0, |s| s.bytes_on_disk);
        let window_end = end.map_or(0, |s| s.window_bytes);
        let half = end.map_or(Duration::ZERO, |s| s.at / 2);
        let nearest = |at: Duration| {
            run.samples
                .iter()
                .min_by_key(|s| s.at.abs_diff(at))
                .map_or(0, |s| s.bytes_on_disk)
        };
        let mid = nearest(half);
        let two_thirds = nearest(end.map_or(Duration::ZERO, |s| s.at * 2 / 3));
        let elapsed = run.elapsed.as_secs_f64();
        RunReport {
            backend: run.backend.name(),
            variant: run.variant,
            records: run.records,
            elapsed_seconds: elapsed,
            write_throughput: ratio(run.records as f64, elapsed).unwrap_or(0.0),
            apply_capacity: ratio(run.records as f64, run.apply_time.as_secs_f64()).unwrap_or(0.0),
            max_behind_seconds: run.max_behind.as_secs_f64(),
            write_latency: run.writes.all.percentiles(),
            write_latency_during_reclaims: run.writes_during_reclaims.percentiles(),
            write_latency_outside_reclaims: run.writes_outside_reclaims.percentiles(),
            lookup_latency: run.lookups.all.percentiles(),
            lookups: Lookups {
                checked: run.checked,
                mismatches: run.mismatches,
                errors: run.lookup_errors,
                skipped: run.lookups_skipped,
                local_values: run.bucket.local_values,
                local_tombstones: run.bucket.local_tombstones,
                lake_fallbacks: run.bucket.lake_fallbacks,
                problems: run.problems.clone(),
            },
            bytes: Bytes {
                peak: run
                    .samples
                    .iter()
                    .map(|s| s.bytes_on_disk)
                    .max()
                    .unwrap_or(0),
                end: end_bytes,
                window_end,
                end_over_window: ratio(end_bytes as f64, window_end as f64),
                mid,
                growth_second_half: ratio(end_bytes as f64, mid as f64),
                two_thirds,
                growth_last_third: ratio(end_bytes as f64, two_thirds as f64),
                empty_store: run.empty_store,
                end_over_window_and_empty_store: ratio(
                    end_bytes as f64,
                    window_end.saturating_add(run.empty_store) as f64,
                ),
                floor: run.floor,
                end_over_floor: run.floor.and_then(|f| ratio(end_bytes as f64, f as f64)),
                floor_over_window: run.floor.and_then(|f| ratio(f as f64, window_end as f64)),
                space_rebuilds: end.map_or(0, |s| s.space_rebuilds),
                drained: run.drained.map(|d| d.bytes_on_disk),
                drained_live_entries: run.drained.map(|d| d.live_entries),
                drained_space_rebuilds: run.drained.map(|d| d.space_rebuilds),
                drained_allowance: drained_allowance(run.empty_store),
            },
            reclaim: ReclaimTotals::of(&run.reclaims),
            lake: Lake {
                commits: run.lake_commits,
                notifications: run.notifications.percentiles(),
                rebuilds: run.rebuilds,
                unsettled_offsets: run.unsettled_offsets,
                lookups: run.lake_lookups.percentiles(),
                lookup_keys: run.lake_lookup_keys,
                compactions: run.maintenance.compactions.percentiles(),
                files_expired: run.maintenance.files_deleted,
            },
            series,
            write_p99_series: run.writes.p99_series.clone(),
            lookup_p99_series: run.lookups.p99_series.clone(),
            reclaims: run.reclaims.clone(),
        }
    }

    /// Whether every answer was right.
    pub fn correct(&self) -> bool {
        self.lookups.mismatches == 0 && self.lookups.errors == 0
    }
}

/// One of the targets on one backend.
#[derive(Debug, Clone, Serialize)]
pub struct Target {
    /// Backend name.
    pub backend: &'static str,
    /// What is measured.
    pub target: &'static str,
    /// The measured figure (`None` when the runs it needs did not produce it).
    pub value: Option<f64>,
    /// `at most` or `at least`.
    pub comparison: &'static str,
    /// The limit.
    pub limit: f64,
    /// Whether the figure meets the limit: `None` without a figure, and for a figure stated but
    /// not judged (the note says why).
    pub met: Option<bool>,
    /// Why there is no figure, or what it rests on.
    pub note: String,
}

impl Target {
    fn new(
        backend: &'static str,
        target: &'static str,
        value: Option<f64>,
        (comparison, limit): (&'static str, f64),
        note: String,
    ) -> Self {
        let met = value.map(|v| {
            if comparison == AT_MOST {
                v <= limit
            } else {
                v >= limit
            }
        });
        Target {
            backend,
            target,
            value,
            comparison,
            limit,
            met,
            note,
        }
    }

    /// This target's figure stated but not judged, for the reason `why`.
    fn stated(self, why: &str) -> Self {
        Target {
            met: None,
            note: format!("{}; stated, not judged: {why}", self.note),
            ..self
        }
    }
}

/// The two ways a target bounds its figure (the JSON's `comparison`).
const AT_MOST: &str = "at most";
const AT_LEAST: &str = "at least";

/// Evaluates the targets for every backend that has the runs they need.
pub fn targets(runs: &[RunReport]) -> Vec<Target> {
    let mut backends: Vec<&'static str> = runs.iter().map(|r| r.backend).collect();
    backends.dedup();
    let mut out = Vec::new();
    for backend in backends {
        let find = |v: Variant| runs.iter().find(|r| r.backend == backend && r.variant == v);
        if let Some(t) = find(Variant::Tidemark) {
            let window = Target::new(
                backend,
                "bytes on disk at the end / uncovered window",
                t.bytes.end_over_window,
                (AT_MOST, limits::END_OVER_WINDOW),
                format!(
                    "{} on disk, window {}",
                    units::bytes(t.bytes.end),
                    units::bytes(t.bytes.window_end)
                ),
            );
            // An engine whose own fresh store of the window exceeds the limit cannot meet it
            // whatever reclamation does: the floor target judges Tidemark there.
            out.push(match t.bytes.floor_over_window {
                Some(floor) if floor > limits::END_OVER_WINDOW => window.stated(&format!(
                    "the engine's own floor is {floor:.2} x the window"
                )),
                _ => window,
            });
            out.push(Target::new(
                backend,
                "bytes on disk at the end / engine floor",
                t.bytes.end_over_floor,
                (AT_MOST, limits::END_OVER_FLOOR),
                format!(
                    "{} on disk, a fresh store of the window {}",
                    units::bytes(t.bytes.end),
                    t.bytes.floor.map_or("-".into(), units::bytes)
                ),
            ));
            out.push(Target::new(
                backend,
                "drained: bytes / (2 x empty store + 1 MiB)",
                t.bytes
                    .drained
                    .and_then(|d| ratio(d as f64, t.bytes.drained_allowance as f64)),
                (AT_MOST, 1.0),
                format!(
                    "{} after the lake covered everything and one reclaim ({} entries left, {} \
                     space rebuilds), allowance {}",
                    t.bytes.drained.map_or("-".into(), units::bytes),
                    t.bytes
                        .drained_live_entries
                        .map_or("-".into(), |n| n.to_string()),
                    t.bytes
                        .drained_space_rebuilds
                        .map_or("-".into(), |n| n.to_string()),
                    units::bytes(t.bytes.drained_allowance)
                ),
            ));
            out.push(Target::new(
                backend,
                "bytes at the end / (window + empty store)",
                t.bytes.end_over_window_and_empty_store,
                (AT_MOST, limits::END_OVER_WINDOW_AND_EMPTY_STORE),
                format!("an empty store takes {}", units::bytes(t.bytes.empty_store)),
            ));
            out.push(Target::new(
                backend,
                "growth over the last third: end / at 2/3",
                t.bytes.growth_last_third,
                (AT_MOST, limits::GROWTH_LAST_THIRD),
                format!(
                    "{} at two thirds, {} at the end",
                    units::bytes(t.bytes.two_thirds),
                    units::bytes(t.bytes.end)
                ),
            ));
            if let Some(none) = find(Variant::NoCleanup) {
                out.push(Target::new(
                    backend,
                    "bytes at the end: tidemark / no-cleanup",
                    ratio(t.bytes.end as f64, none.bytes.end as f64),
                    (AT_MOST, limits::TIDEMARK_OVER_NO_CLEANUP),
                    format!(
                        "{} against {}",
                        units::bytes(t.bytes.end),
                        units::bytes(none.bytes.end)
                    ),
                ));
            }
        }
        for variant in [Variant::NoCleanup, Variant::AllOrNothing] {
            if let Some(b) = find(variant) {
                out.push(Target::new(
                    backend,
                    match variant {
                        Variant::AllOrNothing => "all-or-nothing grows: end / mid-run bytes",
                        _ => "no-cleanup grows: end / mid-run bytes",
                    },
                    b.bytes.growth_second_half,
                    (AT_LEAST, limits::GROWTH),
                    format!(
                        "{} at mid-run, {} at the end, {} rebuilds",
                        units::bytes(b.bytes.mid),
                        units::bytes(b.bytes.end),
                        b.lake.rebuilds
                    ),
                ));
            }
        }
        if let (Some(t), Some(off)) = (find(Variant::Tidemark), find(Variant::SchedulerOff)) {
            type Pick = fn(&Percentiles) -> f64;
            let p99: (Pick, f64) = (|p| p.p99, limits::TAIL_P99);
            let p999: (Pick, f64) = (|p| p.p999, limits::TAIL_P999);
            let (writes, lookups) = (
                (t.write_latency, off.write_latency),
                (t.lookup_latency, off.lookup_latency),
            );
            let tails = [
                ("write p99: tidemark / scheduler off", writes, p99),
                ("write p999: tidemark / scheduler off", writes, p999),
                ("lookup p99: tidemark / scheduler off", lookups, p99),
                ("lookup p999: tidemark / scheduler off", lookups, p999),
            ];
            for (name, (mine, base), (pick, limit)) in tails {
                out.push(Target::new(
                    backend,
                    name,
                    mine.zip(base).and_then(|(m, b)| ratio(pick(&m), pick(&b))),
                    (AT_MOST, limit),
                    format!(
                        "{} against {}, over the whole run",
                        opt_secs(mine, pick),
                        opt_secs(base, pick)
                    ),
                ));
            }
            let during = t.write_latency_during_reclaims;
            let base = off.write_latency.map(|p| p.p99);
            let value = during.zip(base).and_then(|(d, b)| ratio(d.p99, b));
            let note = match during {
                None => "no apply overlapped a reclaim".to_string(),
                Some(d) => format!(
                    "{} applies overlapped a reclaim (p99 {}{}); outside reclaims p99 {}; \
                     scheduler off p99 {}",
                    d.count,
                    secs(d.p99),
                    // Nearest rank: below 100 samples the p99 is the slowest one.
                    if d.count < 100 { ", their slowest" } else { "" },
                    opt_secs(t.write_latency_outside_reclaims, |p| p.p99),
                    base.map_or("-".into(), secs)
                ),
            };
            let target = Target::new(
                backend,
                "write p99 while reclaims run / scheduler off",
                value,
                (AT_MOST, limits::WRITE_P99_DURING_RECLAIMS),
                note,
            );
            out.push(match during {
                Some(d) if d.count >= limits::DURING_RECLAIMS_MIN_APPLIES => target,
                _ => target.stated(&format!(
                    "a diagnostic, judged on {} overlapping applies or more",
                    limits::DURING_RECLAIMS_MIN_APPLIES
                )),
            });
        }
    }
    out
}

/// Seconds as the tables show them.
fn secs(s: f64) -> String {
    units::duration(Duration::from_secs_f64(s.max(0.0)))
}

fn opt_secs(p: Option<Percentiles>, pick: impl Fn(&Percentiles) -> f64) -> String {
    p.map_or("-".into(), |p| secs(pick(&p)))
}

fn opt_ratio(r: Option<f64>) -> String {
    r.map_or("-".into(), |r| format!("{r:.2}"))
}

/// The tables printed after the runs.
pub fn render(report: &CompareReport) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "\nwrites and lookups ({} build; latencies per apply of {} records and per lookup)",
        report.build, report.config.batch
    );
    let _ = writeln!(
        out,
        "{:<8} {:<15} {:>8} {:>9} {:>10} {:>9} {:>9} {:>9} {:>16} {:>9} {:>9} {:>9} {:>15}",
        "backend",
        "variant",
        "records",
        "write/s",
        "capacity/s",
        "write p50",
        "p99",
        "p999",
        "p99 in reclaims",
        "lookup p50",
        "p99",
        "p999",
        "mismatches"
    );
    for r in &report.runs {
        let during = r
            .write_latency_during_reclaims
            .map_or("-".into(), |p| format!("{} ({})", secs(p.p99), p.count));
        let _ = writeln!(
            out,
            "{:<8} {:<15} {:>8} {:>9.0} {:>10.0} {:>9} {:>9} {:>9} {:>16} {:>9} {:>9} {:>9} {:>15}",
            r.backend,
            r.variant.name(),
            r.records,
            r.write_throughput,
            r.apply_capacity,
            opt_secs(r.write_latency, |p| p.p50),
            opt_secs(r.write_latency, |p| p.p99),
            opt_secs(r.write_latency, |p| p.p999),
            during,
            opt_secs(r.lookup_latency, |p| p.p50),
            opt_secs(r.lookup_latency, |p| p.p99),
            opt_secs(r.lookup_latency, |p| p.p999),
            format!(
                "{}/{}",
                r.lookups.mismatches + r.lookups.errors,
                r.lookups.checked
            ),
        );
    }
    let _ = writeln!(
        out,
        "\nspace and reclamation (bytes on disk; window: records the lake has not absorbed)"
    );
    let _ = writeln!(
        out,
        "{:<8} {:<15} {:>10} {:>10} {:>10} {:>10} {:>10} {:>7} {:>10} {:>8} {:>9} {:>19} {:>9} {:>8}",
        "backend",
        "variant",
        "empty",
        "peak",
        "end",
        "window",
        "end/window",
        "growth",
        "last third",
        "reclaims",
        "entries",
        "duration p50 / max",
        "rewr/freed",
        "rebuilds"
    );
    for r in &report.runs {
        let durations = match (r.reclaim.duration_p50, r.reclaim.duration_max) {
            (Some(p50), Some(max)) => format!("{} / {}", secs(p50), secs(max)),
            _ => "-".into(),
        };
        let _ = writeln!(
            out,
            "{:<8} {:<15} {:>10} {:>10} {:>10} {:>10} {:>10} {:>7} {:>10} {:>8} {:>9} {:>19} {:>10} {:>8}",
            r.backend,
            r.variant.name(),
            units::bytes(r.bytes.empty_store),
            units::bytes(r.bytes.peak),
            units::bytes(r.bytes.end),
            units::bytes(r.bytes.window_end),
            opt_ratio(r.bytes.end_over_window),
            opt_ratio(r.bytes.growth_second_half),
            opt_ratio(r.bytes.growth_last_third),
            r.reclaim.runs,
            r.reclaim.entries(),
            durations,
            opt_ratio(r.reclaim.rewritten_per_freed),
            r.lake.rebuilds,
        );
    }
    let _ = writeln!(
        out,
        "\nthe engine's floor and the drained store (floor: a fresh store of the same engine \
         holding only the window; drained: after the lake covered everything and one reclaim)"
    );
    let _ = writeln!(
        out,
        "{:<8} {:<15} {:>10} {:>10} {:>12} {:>10} {:>9} {:>14} {:>10} {:>10} {:>12}",
        "backend",
        "variant",
        "window",
        "floor",
        "floor/window",
        "end",
        "end/floor",
        "space rebuilds",
        "drained",
        "allowance",
        "entries left"
    );
    for r in report.runs.iter().filter(|r| r.bytes.floor.is_some()) {
        let b = &r.bytes;
        let _ = writeln!(
            out,
            "{:<8} {:<15} {:>10} {:>10} {:>12} {:>10} {:>9} {:>14} {:>10} {:>10} {:>12}",
            r.backend,
            r.variant.name(),
            units::bytes(b.window_end),
            b.floor.map_or("-".into(), units::bytes),
            opt_ratio(b.floor_over_window),
            units::bytes(b.end),
            opt_ratio(b.end_over_floor),
            format!(
                "{} / {}",
                b.space_rebuilds,
                b.drained_space_rebuilds
                    .map_or("-".into(), |n| n.to_string())
            ),
            b.drained.map_or("-".into(), units::bytes),
            units::bytes(b.drained_allowance),
            b.drained_live_entries.map_or("-".into(), |n| n.to_string()),
        );
    }
    let _ = writeln!(
        out,
        "\nlake lookups ({} lake; calls the bucket made for local misses while writing)",
        report.config.lake
    );
    let _ = writeln!(
        out,
        "{:<8} {:<15} {:>9} {:>9} {:>9} {:>9} {:>9} {:>12} {:>9}",
        "backend", "variant", "calls", "keys", "p50", "p99", "p999", "compactions", "p50"
    );
    for r in &report.runs {
        let lake = &r.lake;
        let _ = writeln!(
            out,
            "{:<8} {:<15} {:>9} {:>9} {:>9} {:>9} {:>9} {:>12} {:>9}",
            r.backend,
            r.variant.name(),
            lake.lookups.map_or(0, |p| p.count),
            lake.lookup_keys,
            opt_secs(lake.lookups, |p| p.p50),
            opt_secs(lake.lookups, |p| p.p99),
            opt_secs(lake.lookups, |p| p.p999),
            lake.compactions.map_or(0, |p| p.count),
            opt_secs(lake.compactions, |p| p.p50),
        );
    }
    let _ = writeln!(out, "\ntargets");
    for t in &report.targets {
        let verdict = match t.met {
            Some(true) => "met",
            Some(false) => "MISSED",
            None => "no figure",
        };
        let _ = writeln!(
            out,
            "{:<8} {:<46} {:>6} ({} {:.2}) {:<9} {}",
            t.backend,
            t.target,
            opt_ratio(t.value),
            t.comparison,
            t.limit,
            verdict,
            t.note
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::histogram::Histogram;
    use crate::latency::Recorder;
    use crate::run::StateSample;
    use tidemark::{Backend, BucketStats};

    /// A run whose store had `bytes` on disk in successive samples (500 when empty), whose
    /// applies took `writes` (ms, whether a reclaim ran) and whose lookups took `lookup_ms`.
    fn outcome(
        variant: Variant,
        bytes: &[u64],
        writes: &[(u64, bool)],
        lookup_ms: u64,
    ) -> RunOutcome {
        let samples = bytes
            .iter()
            .enumerate()
            .map(|(i, &b)| StateSample {
                at: Duration::from_millis(100 * (i as u64 + 1)),
                bytes_on_disk: b,
                window_bytes: 1_000,
                watermark: 0,
                applied_end: 0,
                lake_end: 0,
                live_entries: 0,
                space_rebuilds: 0,
            })
            .collect();
        let w = Duration::from_millis(250);
        let (mut all, mut during, mut outside) =
            (Recorder::new(w), Histogram::default(), Histogram::default());
        for &(ms, reclaiming) in writes {
            let latency = Duration::from_millis(ms);
            all.record(latency, latency);
            match reclaiming {
                true => during.record(latency),
                false => outside.record(latency),
            }
        }
        let mut lookups = Recorder::new(w);
        lookups.record(Duration::ZERO, Duration::from_millis(lookup_ms));
        RunOutcome {
            backend: Backend::Memory,
            variant,
            records: 1_000,
            elapsed: Duration::from_secs(2),
            apply_time: Duration::from_millis(500),
            max_behind: Duration::ZERO,
            writes: all.finish(),
            writes_during_reclaims: during,
            writes_outside_reclaims: outside,
            lookups: lookups.finish(),
            checked: 10,
            mismatches: 0,
            lookup_errors: 0,
            problems: Vec::new(),
            lookups_skipped: 0,
            samples,
            reclaims: Vec::new(),
            lake_commits: 0,
            notifications: Histogram::default(),
            rebuilds: 0,
            unsettled_offsets: 0,
            bucket: BucketStats::default(),
            empty_store: 500,
            lake_lookups: Histogram::default(),
            lake_lookup_keys: 0,
            maintenance: Default::default(),
            drained: None,
            floor: None,
        }
    }

    #[test]
    fn figures_and_targets_follow_the_samples() {
        let tidemark = RunReport::new(&RunOutcome {
            floor: Some(2_000),
            drained: Some(crate::run::Drained {
                bytes_on_disk: 1_000_000,
                live_entries: 0,
                space_rebuilds: 1,
            }),
            ..outcome(
                Variant::Tidemark,
                &[900, 2_000, 2_100, 2_500],
                &[(1, false), (5, true)],
                3,
            )
        });
        assert_eq!(tidemark.write_throughput, 500.0);
        assert_eq!(tidemark.apply_capacity, 2_000.0);
        assert_eq!(tidemark.write_latency.unwrap().max, 0.005);
        assert_eq!(tidemark.bytes.peak, 2_500);
        assert_eq!(tidemark.bytes.end_over_window, Some(2.5));
        assert_eq!(tidemark.bytes.mid, 2_000);
        assert_eq!(tidemark.bytes.two_thirds, 2_100);
        assert_eq!(tidemark.bytes.empty_store, 500);
        assert_eq!(
            tidemark.bytes.end_over_window_and_empty_store,
            Some(2_500.0 / 1_500.0)
        );
        assert_eq!(tidemark.bytes.end_over_floor, Some(1.25));
        assert_eq!(tidemark.bytes.floor_over_window, Some(2.0));
        assert_eq!(tidemark.bytes.drained_allowance, 2 * 500 + (1 << 20));
        assert_eq!(tidemark.write_latency_during_reclaims.unwrap().count, 1);
        let off = RunReport::new(&outcome(
            Variant::SchedulerOff,
            &[1_000, 2_000, 3_000, 4_000],
            &[(2, false)],
            2,
        ));
        let grows = RunReport::new(&outcome(
            Variant::NoCleanup,
            &[1_000, 2_000, 3_000, 4_000],
            &[(9, false)],
            1,
        ));
        let flat = RunReport::new(&outcome(
            Variant::AllOrNothing,
            &[1_000, 2_000, 2_050, 2_100],
            &[(2, false)],
            1,
        ));
        let t = targets(&[tidemark, off, grows, flat]);
        let names: Vec<(&str, Option<bool>)> = t.iter().map(|t| (t.target, t.met)).collect();
        assert_eq!(
            names,
            vec![
                // 2,500 bytes against a window of 1,000: 2.5 (judged: the floor is 2.0 x the
                // window).
                ("bytes on disk at the end / uncovered window", Some(false)),
                // 2,500 against a floor of 2,000.
                ("bytes on disk at the end / engine floor", Some(true)),
                // 1,000,000 against 2 x 500 + 1 MiB.
                ("drained: bytes / (2 x empty store + 1 MiB)", Some(true)),
                // 2,500 against 1,000 + 500.
                ("bytes at the end / (window + empty store)", Some(true)),
                // 2,500 against 2,100 at two thirds.
                ("growth over the last third: end / at 2/3", Some(false)),
                // 2,500 against 4,000.
                ("bytes at the end: tidemark / no-cleanup", Some(false)),
                ("no-cleanup grows: end / mid-run bytes", Some(true)),
                ("all-or-nothing grows: end / mid-run bytes", Some(false)),
                // 5 ms against 2 ms at p99 and at p999.
                ("write p99: tidemark / scheduler off", Some(false)),
                ("write p999: tidemark / scheduler off", Some(false)),
                // 3 ms against 2 ms: over 1.25, under 2.
                ("lookup p99: tidemark / scheduler off", Some(false)),
                ("lookup p999: tidemark / scheduler off", Some(true)),
                // One apply overlapped a reclaim: stated, not judged.
                ("write p99 while reclaims run / scheduler off", None),
            ]
        );
        // Percentiles come from a histogram: within its relative error of the samples' ratio.
        let near = |v: Option<f64>, want: f64| {
            v.is_some_and(|v| (v - want).abs() <= want * 2.0 * histogram::RELATIVE_ERROR)
        };
        assert!(near(t[8].value, 2.5), "{:?}", t[8].value);
        assert!(near(t[11].value, 1.5), "{:?}", t[11].value);
        // 5 ms during reclaims against 2 ms with the scheduler off.
        assert_eq!(t[12].value, Some(2.5));
        assert!(
            t[12].note.starts_with("1 applies overlapped"),
            "{}",
            t[12].note
        );
        assert!(t[12].note.contains("stated, not judged"), "{}", t[12].note);

        // A floor above the window limit makes the window target a statement.
        let mut sled_like = RunReport::new(&RunOutcome {
            floor: Some(2_400),
            ..outcome(Variant::Tidemark, &[900, 2_500], &[(1, false)], 1)
        });
        sled_like.backend = "sled";
        let t = targets(&[sled_like]);
        assert_eq!(t[0].target, "bytes on disk at the end / uncovered window");
        assert_eq!((t[0].value, t[0].met), (Some(2.5), None));
        assert!(
            t[0].note.contains("floor is 2.40 x the window"),
            "{}",
            t[0].note
        );
        // No drain figure without a drained store.
        assert_eq!((t[2].value, t[2].met), (None, None));
    }
}
