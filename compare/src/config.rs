//! What `tidemark compare` runs: the stream, the lake's moving lag, the reader, and which backends
//! and cleanup designs ([`Variant`]) run it. Checked once, before anything is created.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use serde::Serialize;
use tidemark::{Backend, MAX_VALUE_LEN, SchedulerConfig};

use crate::{Error, Result};

/// How a run keeps its local state in check: Tidemark, Tidemark with its reclaims switched off
/// (the control that shows what reclaiming itself costs), or one of the two designs it replaces.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Variant {
    /// Lake progress publishes the watermark and the scheduler reclaims what it covers.
    Tidemark,
    /// Lake progress publishes the watermark (durably, as with Tidemark), but no scheduler runs,
    /// so nothing is reclaimed (except what RocksDB's own compactions drop through its filter).
    SchedulerOff,
    /// Nothing is ever removed: the state grows with every record.
    NoCleanup,
    /// The store is dropped and rebuilt empty only when the lake's end equals the local applied
    /// end, which never happens while writes continue.
    AllOrNothing,
}

impl Variant {
    /// Every variant, in the order runs and tables list them.
    pub const ALL: [Variant; 4] = [
        Variant::Tidemark,
        Variant::SchedulerOff,
        Variant::NoCleanup,
        Variant::AllOrNothing,
    ];

    /// The name used on the command line, in tables, charts and JSON.
    pub fn name(self) -> &'static str {
        match self {
            Variant::Tidemark => "tidemark",
            Variant::SchedulerOff => "scheduler-off",
            Variant::NoCleanup => "no-cleanup",
            Variant::AllOrNothing => "all-or-nothing",
        }
    }
}

impl fmt::Display for Variant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Variant {
    type Err = String;

    fn from_str(s: &str) -> std::result::Result<Self, Self::Err> {
        Variant::ALL
            .into_iter()
            .find(|v| v.name() == s)
            .ok_or_else(|| {
                format!(
                    "unknown variant {s:?} (expected tidemark, scheduler-off, no-cleanup or \
                     all-or-nothing)"
                )
            })
    }
}

/// The lake table of the runs: the in-memory model, or a real Apache Iceberg table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum LakeKind {
    /// The model itself answers lake lookups, from memory.
    #[default]
    Memory,
    /// A tiering writer commits the records to an Iceberg table beside the store, which is
    /// compacted and expired as the run goes; lake lookups read its Parquet files (cargo feature
    /// `iceberg`).
    Iceberg,
}

impl LakeKind {
    /// The name used on the command line, in tables and JSON.
    pub fn name(self) -> &'static str {
        match self {
            LakeKind::Memory => "memory",
            LakeKind::Iceberg => "iceberg",
        }
    }
}

impl fmt::Display for LakeKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for LakeKind {
    type Err = String;

    fn from_str(s: &str) -> std::result::Result<Self, Self::Err> {
        match s {
            "memory" => Ok(LakeKind::Memory),
            "iceberg" => Ok(LakeKind::Iceberg),
            _ => Err(format!("unknown lake {s:?} (expected memory or iceberg)")),
        }
    }
}

/// The workload of every run. [`Default`] finishes all twelve runs (three backends, four
/// variants) in about two minutes on two cores: 10 s each at 10,000 records/s, the lake a second
/// behind, so each Tidemark run reaches its window within about two seconds and holds it for the
/// rest, while the baselines grow the whole time.
#[derive(Debug, Clone)]
pub struct CompareConfig {
    /// How long each run writes.
    pub duration: Duration,
    /// Records per second the writer aims at (it catches up without sleeping when behind).
    pub rate: u64,
    /// Records per applied batch.
    pub batch: u64,
    /// Size of the key space; a put picks a key uniformly from it.
    pub keys: u64,
    /// Percentage of records that delete a key written earlier.
    pub delete_percent: u64,
    /// Bytes per value (at least 8: a value starts with the offset that wrote it, so a reader
    /// can tell which version it was served).
    pub value_size: usize,
    /// The lake's lag behind the acknowledged end, in offsets, is drawn afresh at every commit
    /// from `lag_min..=lag_max`; `lag_min >= 1` keeps the two end offsets apart while writing.
    pub lag_min: u64,
    /// See `lag_min`.
    pub lag_max: u64,
    /// How often the lake commits a snapshot and reports its progress.
    pub lake_interval: Duration,
    /// Lookups per second the reader aims at (0: no reader while writing).
    pub lookup_rate: u64,
    /// How often bytes on disk, `W` and the ends are sampled.
    pub sample_interval: Duration,
    /// Width of the windows the write-p99 time series is computed over.
    pub p99_window: Duration,
    /// Seed of the stream, the lag and the reader's keys.
    pub seed: u64,
    /// `EngineOptions::sync_writes` of every store.
    pub sync_writes: bool,
    /// `EngineOptions::sweep_chunk_rows` of every store (`None`: the engine's default).
    pub sweep_chunk_rows: Option<usize>,
    /// The scheduler of the Tidemark runs.
    pub scheduler: SchedulerConfig,
    /// The lake table.
    pub lake: LakeKind,
    /// How often a real lake table is compacted and its old snapshots expired.
    pub lake_maintenance_interval: Duration,
    /// Where a real lake table is kept (default: beside each store, embedded catalog).
    pub lake_site: LakeSite,
}

/// Where `--lake iceberg` keeps each run's table: by default a directory beside the store with
/// its embedded SQLite catalog; with a catalog URI, named in that (PostgreSQL) catalog; with a
/// warehouse, under that location (`s3://bucket/prefix` or a directory). Each run's table is
/// its own (its own catalog name and location below the warehouse).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct LakeSite {
    /// The catalog URI (`postgres://…`); not reported, as it may hold a password.
    #[serde(skip)]
    pub catalog: Option<String>,
    /// The warehouse the runs' tables go under.
    pub warehouse: Option<String>,
    /// Object store settings (Iceberg file IO properties: `s3.endpoint`, `s3.access-key-id`, …);
    /// not reported, as they may hold secrets. Unset ones come from the `AWS_*` environment.
    #[serde(skip)]
    pub storage: std::collections::BTreeMap<String, String>,
}

/// The most records per batch (`--batch`).
pub const MAX_BATCH: u64 = 1_000_000;
/// The highest write or lookup rate, per second (far above what any backend here sustains).
pub const MAX_RATE: u64 = 100_000_000;

/// Mean lake lag by default: one second of records at the default rate.
pub const DEFAULT_LAG: u64 = 10_000;

/// The most samples of the store a run takes: a longer run samples less often, so the series it
/// keeps do not grow with its length.
pub const MAX_SAMPLES: u32 = 1_000;
/// The most p99 windows a run has: a longer run has wider windows.
pub const MAX_P99_WINDOWS: u32 = 500;

impl Default for CompareConfig {
    fn default() -> Self {
        let (lag_min, lag_max) = lag_range(DEFAULT_LAG);
        CompareConfig {
            duration: Duration::from_secs(10),
            rate: 10_000,
            batch: 20,
            keys: 10_000_000,
            delete_percent: 10,
            value_size: 128,
            lag_min,
            lag_max,
            lake_interval: Duration::from_millis(100),
            lookup_rate: 2_000,
            sample_interval: Duration::from_millis(100),
            p99_window: Duration::from_millis(250),
            seed: 0x71de_4a11,
            sync_writes: false,
            sweep_chunk_rows: None,
            scheduler: SchedulerConfig::default(),
            lake: LakeKind::Memory,
            lake_maintenance_interval: Duration::from_secs(2),
            lake_site: LakeSite::default(),
        }
    }
}

/// The moving lag around a mean of `lag` offsets: from half of it to one and a half times it,
/// never below 1.
pub fn lag_range(lag: u64) -> (u64, u64) {
    let min = (lag / 2).max(1);
    let max = lag.saturating_add(lag / 2).max(min);
    (min, max)
}

impl CompareConfig {
    /// This workload written for `duration`, the sample interval and the p99 windows widened
    /// (never narrowed) to at most `MAX_SAMPLES` samples and `MAX_P99_WINDOWS` windows.
    pub fn with_duration(self, duration: Duration) -> Self {
        CompareConfig {
            duration,
            sample_interval: self.sample_interval.max(duration / MAX_SAMPLES),
            p99_window: self.p99_window.max(duration / MAX_P99_WINDOWS),
            ..self
        }
    }

    /// Records each run writes: `rate × duration`, whole batches.
    pub fn records(&self) -> u64 {
        let exact = self.rate as f64 * self.duration.as_secs_f64();
        // A float above u64::MAX saturates; validate() refuses such a run first.
        let records = exact.round() as u64;
        records.max(1)
    }

    /// Time between the starts of two batches at the target rate.
    pub fn batch_interval(&self) -> Duration {
        Duration::from_secs_f64(self.batch as f64 / self.rate.max(1) as f64)
    }

    /// Refuses a workload that cannot run as described, saying which setting and why.
    pub fn validate(&self) -> Result<()> {
        let fail = |msg: String| Err(Error::Config(msg));
        if self.duration.is_zero() {
            return fail("--duration must be above zero".into());
        }
        if self.rate == 0 {
            return fail("--rate must be at least 1 record per second".into());
        }
        if self.batch == 0 || self.batch > MAX_BATCH {
            return fail(format!(
                "--batch must be between 1 and {MAX_BATCH} records (got {})",
                self.batch
            ));
        }
        if self.rate > MAX_RATE || self.lookup_rate > MAX_RATE {
            return fail(format!(
                "--rate and --lookup-rate are at most {MAX_RATE} per second (got {} and {})",
                self.rate, self.lookup_rate
            ));
        }
        if self.keys == 0 {
            return fail("--keys must be at least 1".into());
        }
        if self.lake == LakeKind::Iceberg && !cfg!(feature = "iceberg") {
            return fail(
                "--lake iceberg needs a build with the `iceberg` feature: run \
                 ./scripts/compare.sh --lake iceberg, or cargo run -p tidemark-cli --features \
                 iceberg -- compare --lake iceberg"
                    .into(),
            );
        }
        let site = &self.lake_site;
        if self.lake != LakeKind::Iceberg
            && (site.catalog.is_some() || site.warehouse.is_some() || !site.storage.is_empty())
        {
            return fail(
                "--lake-catalog, --lake-warehouse and --lake-storage place an Iceberg table: \
                 they need --lake iceberg"
                    .into(),
            );
        }
        if self.delete_percent > 100 {
            return fail(format!(
                "--delete-percent is a percentage, at most 100 (got {})",
                self.delete_percent
            ));
        }
        if self.value_size < 8 || self.value_size > MAX_VALUE_LEN {
            return fail(format!(
                "--value-size must be between 8 (each value starts with the offset that wrote it) \
                 and {MAX_VALUE_LEN} bytes (got {})",
                self.value_size
            ));
        }
        if self.lag_min > self.lag_max {
            return fail(format!(
                "the lake lag range is empty ({}..={})",
                self.lag_min, self.lag_max
            ));
        }
        for (name, d) in [
            ("lake interval", self.lake_interval),
            ("sample interval", self.sample_interval),
            ("p99 window", self.p99_window),
        ] {
            if d.is_zero() {
                return fail(format!("the {name} must be above zero"));
            }
        }
        let records = self.rate as f64 * self.duration.as_secs_f64();
        // The model keeps the newest offset of every key written, at most one per record (a few
        // tens of bytes each): a cap on records caps it, whatever the key space.
        const MAX_RECORDS: f64 = 1e8;
        if records > MAX_RECORDS {
            return fail(format!(
                "--rate × --duration is {records:.0} records; at most {MAX_RECORDS:.0} per run"
            ));
        }
        Ok(())
    }
}

/// The historical-partitions scenario (`--buckets`): many buckets as siblings under one root,
/// each with its own lake, a few written at a time while the rest sit idle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BucketsConfig {
    /// Buckets opened (at least 2).
    pub buckets: usize,
    /// Buckets written at any moment (`--active`, at most `buckets`).
    pub active: usize,
    /// How long a set of active buckets is written before the next takes over (`--rotate`).
    pub rotate: Duration,
}

/// Buckets written at once by default (`--active`).
pub const DEFAULT_ACTIVE: usize = 4;
/// The most buckets one run opens (`--buckets`): far beyond what a process's descriptors admit
/// on most backends, so the backends' own admission is what refuses a large count.
pub const MAX_BUCKETS: usize = 1_000_000;
/// Rotations in a run by default: `--rotate` is the duration over this.
pub const DEFAULT_ROTATIONS: u32 = 5;

impl BucketsConfig {
    /// `buckets` with `active` (default `DEFAULT_ACTIVE`, or `buckets` when fewer) written at a
    /// time, moving on every `rotate` (default `duration` ÷ `DEFAULT_ROTATIONS`); checked.
    pub fn new(
        buckets: usize,
        active: Option<usize>,
        rotate: Option<Duration>,
        duration: Duration,
    ) -> Result<Self> {
        let config = BucketsConfig {
            buckets,
            active: active.unwrap_or(DEFAULT_ACTIVE.min(buckets)),
            rotate: rotate.unwrap_or(duration / DEFAULT_ROTATIONS),
        };
        config.validate()?;
        Ok(config)
    }

    /// Refuses a scenario that cannot run as described, saying which setting and why.
    pub fn validate(&self) -> Result<()> {
        let fail = |msg: String| Err(Error::Config(msg));
        if !(2..=MAX_BUCKETS).contains(&self.buckets) {
            return fail(format!(
                "--buckets must be between 2 and {MAX_BUCKETS} (got {}); without it compare runs \
                 one bucket per backend and variant",
                self.buckets
            ));
        }
        if self.active == 0 || self.active > self.buckets {
            return fail(format!(
                "--active must be between 1 and --buckets ({}) (got {})",
                self.buckets, self.active
            ));
        }
        if self.rotate.is_zero() {
            return fail("--rotate must be above zero".into());
        }
        Ok(())
    }

    /// The rotation under way `at` into the run (0 for the first `rotate`).
    pub fn rotation(&self, at: Duration) -> u64 {
        u64::try_from(at.as_nanos() / self.rotate.as_nanos().max(1)).unwrap_or(u64::MAX)
    }

    /// The bucket that active slot `slot` (below `active`) writes `at` into the run: rotation
    /// `r` writes buckets `r × active .. (r + 1) × active`, modulo `buckets`.
    pub fn active_bucket(&self, at: Duration, slot: usize) -> usize {
        let (n, k) = (self.buckets as u128, self.active as u128);
        let first = (u128::from(self.rotation(at)) * k) % n;
        // Below `buckets`, so it fits.
        ((first + slot as u128) % n) as usize
    }

    /// Whether `bucket` is one of the active set `at` into the run.
    pub fn is_active(&self, bucket: usize, at: Duration) -> bool {
        let (n, k) = (self.buckets as u128, self.active as u128);
        let first = (u128::from(self.rotation(at)) * k) % n;
        (bucket as u128 + n - first) % n < k
    }

    /// Rotations a run of `duration` goes through (the last one may be cut short).
    pub fn rotations(&self, duration: Duration) -> u64 {
        let whole = self.rotation(duration);
        if duration
            .as_nanos()
            .is_multiple_of(self.rotate.as_nanos().max(1))
        {
            whole.max(1)
        } else {
            whole.saturating_add(1)
        }
    }
}

/// The backends and variants to run, checked against what this build has.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Selection {
    /// Backends, in the order given.
    pub backends: Vec<Backend>,
    /// Variants, in the order given.
    pub variants: Vec<Variant>,
}

impl Selection {
    /// `backends` (empty: every compiled-in disk backend) and `variants` (empty: all three).
    /// A backend that is not compiled in, or one named twice, is an error.
    pub fn new(backends: Vec<Backend>, variants: Vec<Variant>) -> Result<Self> {
        let backends = if backends.is_empty() {
            Backend::compiled()
                .into_iter()
                .filter(|b| b.is_persistent())
                .collect()
        } else {
            backends
        };
        for (i, b) in backends.iter().enumerate() {
            if !b.is_compiled() {
                return Err(Error::Unsupported(format!(
                    "backend {b} is not compiled into this build (enable its cargo feature)"
                )));
            }
            if backends[..i].contains(b) {
                return Err(Error::Config(format!("backend {b} is named twice")));
            }
        }
        if backends.is_empty() {
            return Err(Error::Unsupported(
                "no disk backend is compiled into this build".into(),
            ));
        }
        let variants = if variants.is_empty() {
            Variant::ALL.to_vec()
        } else {
            variants
        };
        for (i, v) in variants.iter().enumerate() {
            if variants[..i].contains(v) {
                return Err(Error::Config(format!("variant {v} is named twice")));
            }
        }
        Ok(Selection { backends, variants })
    }
}

/// Parses a duration as the command line writes it: `5s`, `500ms`, `1.5s`, `2m`, or plain
/// seconds (`90`).
pub fn parse_duration(text: &str) -> std::result::Result<Duration, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let value: f64 = number
        .parse()
        .map_err(|_| format!("{text:?} is not a duration (e.g. 5s, 500ms, 2m)"))?;
    let seconds = match unit.trim() {
        "" | "s" => value,
        "ms" => value / 1_000.0,
        "m" | "min" => value * 60.0,
        other => {
            return Err(format!(
                "unknown unit {other:?} in {text:?} (use ms, s or m)"
            ));
        }
    };
    Duration::try_from_secs_f64(seconds).map_err(|e| format!("{text:?} is not a duration: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_in_their_units() {
        assert_eq!(parse_duration("5s"), Ok(Duration::from_secs(5)));
        assert_eq!(parse_duration("90"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1_500)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert!(parse_duration("5h").is_err());
        assert!(parse_duration("fast").is_err());
        assert!(parse_duration("").is_err());
    }

    #[test]
    fn long_runs_sample_less_often_and_short_ones_as_configured() {
        let short = CompareConfig::default().with_duration(Duration::from_secs(10));
        assert_eq!(short.sample_interval, Duration::from_millis(100));
        assert_eq!(short.p99_window, Duration::from_millis(250));
        let long = CompareConfig::default().with_duration(Duration::from_secs(600));
        assert_eq!(long.duration, Duration::from_secs(600));
        assert_eq!(long.sample_interval, Duration::from_millis(600));
        assert_eq!(long.p99_window, Duration::from_millis(1_200));
    }

    #[test]
    fn the_lag_moves_around_its_mean_and_never_reaches_zero() {
        assert_eq!(lag_range(10_000), (5_000, 15_000));
        assert_eq!(lag_range(1), (1, 1));
        assert_eq!(lag_range(0), (1, 1));
        assert_eq!(lag_range(u64::MAX).1, u64::MAX);
    }

    #[test]
    fn bad_workloads_are_refused_with_the_setting_named() {
        let ok = CompareConfig::default();
        ok.validate().unwrap();
        assert_eq!(ok.records(), 100_000);
        let cases: [(CompareConfig, &str); 9] = [
            (
                CompareConfig {
                    value_size: 4,
                    ..ok.clone()
                },
                "--value-size",
            ),
            (
                CompareConfig {
                    rate: 0,
                    ..ok.clone()
                },
                "--rate",
            ),
            (
                CompareConfig {
                    keys: 0,
                    ..ok.clone()
                },
                "--keys",
            ),
            (
                CompareConfig {
                    delete_percent: 101,
                    ..ok.clone()
                },
                "--delete-percent",
            ),
            (
                CompareConfig {
                    duration: Duration::ZERO,
                    ..ok.clone()
                },
                "--duration",
            ),
            (
                CompareConfig {
                    rate: MAX_RATE,
                    ..ok.clone()
                },
                "records",
            ),
            (
                CompareConfig {
                    rate: u64::MAX,
                    ..ok.clone()
                },
                "--rate",
            ),
            (
                CompareConfig {
                    batch: u64::MAX,
                    rate: 1,
                    ..ok.clone()
                },
                "--batch",
            ),
            (
                CompareConfig {
                    lookup_rate: u64::MAX,
                    ..ok.clone()
                },
                "--lookup-rate",
            ),
        ];
        for (config, named) in cases {
            let err = config.validate().unwrap_err().to_string();
            assert!(err.contains(named), "{err}");
        }
    }

    #[test]
    fn the_active_set_moves_on_by_whole_sets_and_wraps_around() {
        let c = BucketsConfig::new(6, Some(2), None, Duration::from_secs(2)).unwrap();
        assert_eq!(c.rotate, Duration::from_millis(400));
        assert_eq!(c.rotations(Duration::from_secs(2)), 5);
        assert_eq!(c.rotations(Duration::from_millis(2_100)), 6);
        let at = |ms| Duration::from_millis(ms);
        let set = |ms| {
            (0..2)
                .map(|s| c.active_bucket(at(ms), s))
                .collect::<Vec<_>>()
        };
        assert_eq!(set(0), [0, 1]);
        assert_eq!(set(399), [0, 1]);
        assert_eq!(set(400), [2, 3]);
        assert_eq!(set(800), [4, 5]);
        assert_eq!(set(1_200), [0, 1], "wraps around");
        for ms in (0..2_000).step_by(50) {
            for b in 0..6 {
                assert_eq!(c.is_active(b, at(ms)), set(ms).contains(&b), "{b} at {ms}");
            }
        }
        // A set that does not divide the buckets still takes distinct buckets at each moment.
        let odd = BucketsConfig::new(5, Some(3), Some(at(100)), at(1_000)).unwrap();
        for ms in (0..1_000).step_by(100) {
            let mut set: Vec<usize> = (0..3).map(|s| odd.active_bucket(at(ms), s)).collect();
            assert!(set.iter().all(|&b| odd.is_active(b, at(ms))));
            set.sort_unstable();
            set.dedup();
            assert_eq!(set.len(), 3);
        }
        assert_eq!(
            BucketsConfig::new(3, None, None, at(1_000)).unwrap().active,
            3,
            "the default is 4, or every bucket when fewer"
        );
    }

    #[test]
    fn bad_scenarios_are_refused_with_the_setting_named() {
        let d = Duration::from_secs(1);
        for (buckets, active, rotate, named) in [
            (1, None, None, "--buckets"),
            (MAX_BUCKETS + 1, None, None, "--buckets"),
            (4, Some(0), None, "--active"),
            (4, Some(5), None, "--active"),
            (4, None, Some(Duration::ZERO), "--rotate"),
        ] {
            let err = BucketsConfig::new(buckets, active, rotate, d)
                .unwrap_err()
                .to_string();
            assert!(err.contains(named), "{err}");
        }
    }

    #[test]
    fn selections_default_to_every_disk_backend_and_refuse_repeats() {
        let all = Selection::new(vec![], vec![]).unwrap();
        assert!(all.backends.iter().all(|b| b.is_persistent()));
        assert_eq!(all.variants, Variant::ALL.to_vec());
        let b = all.backends[0];
        assert!(Selection::new(vec![b, b], vec![]).is_err());
        assert!(Selection::new(vec![], vec![Variant::Tidemark, Variant::Tidemark]).is_err());
        assert_eq!("no-cleanup".parse::<Variant>(), Ok(Variant::NoCleanup));
        assert!("cleanup".parse::<Variant>().is_err());
    }
}
