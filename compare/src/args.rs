//! The command line of `tidemark compare`, as clap fills it, and the checked workload and
//! selection it describes.

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use tidemark::Backend;

use crate::config::{self, BucketsConfig, CompareConfig, LakeKind, Selection, Variant};
use crate::{Error, Result};

/// The command line of `tidemark compare`.
#[derive(Debug, Args)]
pub struct CompareArgs {
    /// How long each run writes (e.g. 10s, 500ms, 10m). Twelve runs of 10 s take about two
    /// minutes. The harness's memory grows with the keys written, not with the run's length
    /// (longer runs sample less often).
    #[arg(long, default_value = "10s", value_parser = config::parse_duration)]
    pub duration: Duration,
    /// Records per second the writer aims at.
    #[arg(long, default_value_t = CompareConfig::default().rate)]
    pub rate: u64,
    /// Size of the key space (the default is far larger than a run writes, so state that is
    /// not cleaned up keeps growing, as with ever-new event keys).
    #[arg(long, default_value_t = CompareConfig::default().keys)]
    pub keys: u64,
    /// Mean lag of the lake behind the acknowledged end, in offsets; each lake commit draws it
    /// afresh from half to one and a half times this, never 0.
    #[arg(long, default_value_t = config::DEFAULT_LAG)]
    pub lag: u64,
    /// Backends (default: every compiled-in disk backend), e.g. `--backends sled,redb`.
    #[arg(long, value_delimiter = ',')]
    pub backends: Vec<Backend>,
    /// Variants (default: all): tidemark, scheduler-off (the control: watermark written, nothing
    /// reclaimed), no-cleanup, all-or-nothing.
    #[arg(long, value_delimiter = ',')]
    pub variants: Vec<Variant>,
    /// Bytes per value (at least 8).
    #[arg(long, default_value_t = CompareConfig::default().value_size)]
    pub value_size: usize,
    /// Directory for the charts and compare.json (created if missing).
    #[arg(long, default_value = "tidemark-compare")]
    pub out: PathBuf,
    /// Percentage of records that delete a key written earlier.
    #[arg(long, default_value_t = CompareConfig::default().delete_percent)]
    pub delete_percent: u64,
    /// Records per applied batch.
    #[arg(long, default_value_t = CompareConfig::default().batch)]
    pub batch: u64,
    /// Lookups per second checked while writing (0: none; every key is still checked at the end).
    #[arg(long, default_value_t = CompareConfig::default().lookup_rate)]
    pub lookup_rate: u64,
    /// The scheduler reclaims a bucket at most once per this interval.
    #[arg(long, default_value = "1s", value_parser = config::parse_duration)]
    pub reclaim_interval: Duration,
    /// Make every apply durable (fsync) before it returns. Off by default: the host's WAL makes
    /// local state replayable, and fsync latency would hide what reclamation costs.
    #[arg(long)]
    pub sync_writes: bool,
    /// Index rows per sweep transaction of sled and redb (default: the engine's).
    #[arg(long)]
    pub sweep_chunk_rows: Option<usize>,
    /// Seed of the stream, the lake's lag and the reader.
    #[arg(long, default_value_t = CompareConfig::default().seed)]
    pub seed: u64,
    /// Keep the stores in this directory (default: a temporary one, removed run by run).
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// The lake table: memory (the model answers lake lookups) or iceberg (a real Apache Iceberg
    /// table beside each store, written by a tiering writer, compacted and expired; lake lookups
    /// read Parquet; needs the `iceberg` feature).
    #[arg(long, default_value = "memory")]
    pub lake: LakeKind,
    /// With --lake iceberg: name each run's table in this catalog (postgres://user:password@host:port/db)
    /// instead of an SQLite file beside it.
    #[arg(long, value_name = "URI")]
    pub lake_catalog: Option<String>,
    /// With --lake iceberg: keep each run's table under this location (s3://bucket/prefix, or a
    /// directory) instead of beside its store.
    #[arg(long, value_name = "LOCATION")]
    pub lake_warehouse: Option<String>,
    /// With --lake iceberg: an object store setting, as an Iceberg file IO property
    /// (s3.endpoint=http://127.0.0.1:9000, s3.access-key-id=…, s3.region=…); repeatable. Unset
    /// ones come from AWS_ENDPOINT_URL, AWS_REGION, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY.
    #[arg(long, value_name = "KEY=VALUE", value_parser = parse_setting)]
    pub lake_storage: Vec<(String, String)>,
    /// The historical-partitions scenario: this many buckets (at least 2) per backend, siblings
    /// under one root, each trailed by its own lake, a few written at a time (--active) while the
    /// rest sit idle; one Tidemark run per backend instead of the variants. --rate and
    /// --lookup-rate are totals over the buckets; --lag is read as time at --rate.
    #[arg(long)]
    pub buckets: Option<usize>,
    /// With --buckets: buckets written at any moment (default 4, or --buckets when fewer).
    #[arg(long, requires = "buckets")]
    pub active: Option<usize>,
    /// With --buckets: how long one set of active buckets is written before the next takes over
    /// (default: --duration ÷ 5).
    #[arg(long, requires = "buckets", value_parser = config::parse_duration)]
    pub rotate: Option<Duration>,
    /// Internal (with --buckets): run the scenario on BACKEND alone, in this process, and write
    /// its figures to FILE; `compare --buckets` runs each backend so, in a child process.
    #[arg(long, hide = true, requires = "buckets", num_args = 2, value_names = ["BACKEND", "FILE"])]
    pub buckets_child: Vec<String>,
}

impl CompareArgs {
    /// The workload and the selection these arguments describe, checked.
    pub fn config(&self) -> Result<(CompareConfig, Selection)> {
        let (lag_min, lag_max) = config::lag_range(self.lag);
        if self.lag == 0 {
            return Err(Error::Config(
                "--lag must be at least 1: a lake at the local end is what never happens while \
                 writes continue"
                    .into(),
            ));
        }
        let defaults = CompareConfig::default();
        let config = CompareConfig {
            rate: self.rate,
            batch: self.batch,
            keys: self.keys,
            delete_percent: self.delete_percent,
            value_size: self.value_size,
            lag_min,
            lag_max,
            lookup_rate: self.lookup_rate,
            seed: self.seed,
            sync_writes: self.sync_writes,
            sweep_chunk_rows: self.sweep_chunk_rows,
            lake: self.lake,
            lake_site: crate::config::LakeSite {
                catalog: self.lake_catalog.clone(),
                warehouse: self.lake_warehouse.clone(),
                storage: self.lake_storage.iter().cloned().collect(),
            },
            scheduler: defaults
                .scheduler
                .clone()
                .with_min_interval(self.reclaim_interval),
            ..defaults
        }
        .with_duration(self.duration);
        config.validate()?;
        let selection = Selection::new(self.backends.clone(), self.variants.clone())?;
        Ok((config, selection))
    }

    /// The historical-partitions scenario these arguments describe, checked; `None` without
    /// `--buckets`.
    pub fn buckets_config(&self) -> Result<Option<BucketsConfig>> {
        let Some(buckets) = self.buckets else {
            return Ok(None);
        };
        if let Some(v) = self.variants.iter().find(|&&v| v != Variant::Tidemark) {
            return Err(Error::Config(format!(
                "--buckets runs the tidemark variant only (scheduler on); --variants {v} cannot \
                 run with it"
            )));
        }
        if self.lake != LakeKind::Memory {
            return Err(Error::Config(format!(
                "--buckets runs against the in-memory lake only (--lake {} would create a table \
                 per bucket)",
                self.lake
            )));
        }
        BucketsConfig::new(buckets, self.active, self.rotate, self.duration).map(Some)
    }
}

/// `KEY=VALUE` as its key and value.
fn parse_setting(s: &str) -> std::result::Result<(String, String), String> {
    match s.split_once('=') {
        Some((key, value)) if !key.is_empty() => Ok((key.to_owned(), value.to_owned())),
        _ => Err(format!("expected KEY=VALUE, got {s:?}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arguments_that_cannot_run_are_refused_before_anything_is_created() {
        use clap::Parser;
        #[derive(Parser)]
        struct Cli {
            #[command(flatten)]
            args: CompareArgs,
        }
        let parse = |args: &[&str]| {
            Cli::try_parse_from(std::iter::once("compare").chain(args.iter().copied()))
                .unwrap()
                .args
                .config()
        };
        let (config, selection) =
            parse(&["--duration", "2s", "--rate", "100", "--lag", "40"]).unwrap();
        assert_eq!(
            (config.records(), config.lag_min, config.lag_max),
            (200, 20, 60)
        );
        assert_eq!(selection.variants, Variant::ALL.to_vec());
        if cfg!(feature = "iceberg") {
            let (config, _) = parse(&[
                "--lake",
                "iceberg",
                "--lake-catalog",
                "postgres://h/db",
                "--lake-warehouse",
                "s3://b/p",
                "--lake-storage",
                "s3.endpoint=http://127.0.0.1:9000",
            ])
            .unwrap();
            assert_eq!(config.lake_site.warehouse.as_deref(), Some("s3://b/p"));
            assert_eq!(
                config.lake_site.storage["s3.endpoint"],
                "http://127.0.0.1:9000"
            );
            // Not reported: a catalog URI and storage settings may hold secrets.
            let json = serde_json::to_string(&crate::report::ConfigReport::new(&config)).unwrap();
            assert!(
                !json.contains("postgres://") && !json.contains("9000"),
                "{json}"
            );
        }
        assert!(parse_setting("novalue").is_err() && parse_setting("=v").is_err());
        for (args, named) in [
            (&["--lag", "0"][..], "--lag"),
            (&["--value-size", "4"][..], "--value-size"),
            (&["--rate", "0"][..], "--rate"),
            (&["--variants", "tidemark,tidemark"][..], "named twice"),
            (&["--lake-catalog", "postgres://h/db"][..], "--lake iceberg"),
            (&["--lake-warehouse", "s3://b/p"][..], "--lake iceberg"),
        ] {
            let err = parse(args).unwrap_err().to_string();
            assert!(err.contains(named), "{args:?}: {err}");
        }
    }

    #[test]
    fn the_buckets_scenario_takes_its_flags_and_refuses_what_it_cannot_run() {
        use clap::Parser;
        #[derive(Parser)]
        struct Cli {
            #[command(flatten)]
            args: CompareArgs,
        }
        let parse = |args: &[&str]| {
            Cli::try_parse_from(std::iter::once("compare").chain(args.iter().copied()))
                .map(|cli| cli.args)
        };
        assert_eq!(parse(&[]).unwrap().buckets_config().unwrap(), None);
        let scenario = parse(&["--buckets", "6", "--active", "2", "--duration", "2s"])
            .unwrap()
            .buckets_config()
            .unwrap()
            .unwrap();
        assert_eq!(
            (scenario.buckets, scenario.active, scenario.rotate),
            (6, 2, Duration::from_millis(400))
        );
        let rotate = parse(&["--buckets", "1000", "--rotate", "3s"]).unwrap();
        let scenario = rotate.buckets_config().unwrap().unwrap();
        assert_eq!(
            (scenario.active, scenario.rotate),
            (4, Duration::from_secs(3))
        );
        // --active and --rotate mean nothing without --buckets.
        assert!(parse(&["--active", "2"]).is_err());
        assert!(parse(&["--rotate", "1s"]).is_err());
        for (args, named) in [
            (&["--buckets", "1"][..], "--buckets"),
            (&["--buckets", "4", "--active", "5"][..], "--active"),
            (
                &["--buckets", "4", "--variants", "no-cleanup"][..],
                "tidemark variant",
            ),
            (
                &["--buckets", "4", "--lake", "iceberg"][..],
                "in-memory lake",
            ),
        ] {
            let err = parse(args)
                .unwrap()
                .buckets_config()
                .unwrap_err()
                .to_string();
            assert!(err.contains(named), "{args:?}: {err}");
        }
        assert!(
            parse(&["--buckets", "4", "--variants", "tidemark"])
                .unwrap()
                .buckets_config()
                .is_ok()
        );
    }
}
