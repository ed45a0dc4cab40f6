//! `tidemark compare`: every chosen backend takes the same continuously written bucket, with
//! Tidemark's incremental reclamation and with the two designs it replaces (no cleanup at all;
//! drop and rebuild only when the lake has caught up), one run at a time so no run disturbs
//! another's timings. Prints the figures, and writes the two charts and `compare.json` (schema
//! `tidemark.compare/1`, `docs/CLI.md` § `tidemark compare`).

mod chart;
mod config;
mod histogram;
mod history;
mod lake;
mod latency;
mod reclaims;
mod report;
mod run;
mod stream;

use std::io::IsTerminal as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::Args;
use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};
use tidemark::{Backend, BackendConfig, Error, Result};

pub use config::{CompareConfig, Selection, Variant};
pub use report::CompareReport;

use crate::units;

/// Buckets the comparison's contexts are sized for: one run's bucket at a time, with room for
/// an all-or-nothing rebuild to open the new store while the old one's share is returned.
const CONTEXT_BUCKETS: usize = 4;

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
}

impl CompareArgs {
    /// The workload and the selection these arguments describe, checked.
    pub fn config(&self) -> Result<(CompareConfig, Selection)> {
        let (lag_min, lag_max) = config::lag_range(self.lag);
        if self.lag == 0 {
            return Err(Error::invalid(
                "--lag must be at least 1: a lake at the local end is what never happens while \
                 writes continue",
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
}

/// Where a comparison's files went.
#[derive(Debug, Clone)]
pub struct Outputs {
    /// Every figure and series.
    pub json: PathBuf,
    /// Bytes on disk over time, a panel per backend.
    pub bytes_chart: PathBuf,
    /// Write and lookup p99 over time, a panel per backend.
    pub p99_chart: PathBuf,
}

/// Runs every backend and variant of `selection`, one after another, writes the outputs into
/// `out` and returns the report. Stores go to `stores` (kept) or a temporary directory.
pub fn compare(
    config: &CompareConfig,
    selection: &Selection,
    out: &Path,
    stores: Option<&Path>,
) -> Result<(CompareReport, Outputs)> {
    config.validate()?;
    let plan: Vec<(Backend, Variant)> = selection
        .backends
        .iter()
        .flat_map(|&b| selection.variants.iter().map(move |&v| (b, v)))
        .collect();
    if let Some(dir) = stores {
        // A store left by an earlier comparison would hold that run's records and watermark:
        // every record would be "already applied", and the figures and answers wrong.
        for &(b, v) in &plan {
            let run = run_dir(dir, b, v);
            if std::fs::read_dir(&run).is_ok_and(|mut entries| entries.next().is_some()) {
                return Err(Error::invalid(format!(
                    "{} is not empty (a store of an earlier comparison?): give --dir an empty or \
                     new directory",
                    run.display()
                )));
            }
        }
    }
    // Created first, so an unwritable output directory fails before a minute of runs.
    std::fs::create_dir_all(out).map_err(|e| {
        Error::invalid(format!(
            "cannot create the output directory {}: {e}",
            out.display()
        ))
    })?;
    let temp = match stores {
        Some(_) => None,
        None => Some(tempfile::tempdir()?),
    };
    let root = match (&temp, stores) {
        (Some(t), _) => t.path().to_path_buf(),
        (None, Some(dir)) => dir.to_path_buf(),
        (None, None) => return Err(Error::Internal("no directory for the stores".into())),
    };
    let backends = selection
        .backends
        .iter()
        .try_fold(BackendConfig::default(), |c, &b| {
            c.with_budget(b, CONTEXT_BUCKETS)
        })?;
    let progress = MultiProgress::with_draw_target(ProgressDrawTarget::stderr());
    let plain = !std::io::stderr().is_terminal();
    let bars: Vec<ProgressBar> = plan
        .iter()
        .map(|(b, v)| {
            let bar = progress.add(ProgressBar::new(config.records()));
            bar.set_style(bar_style());
            bar.set_prefix(format!("{b} {v}"));
            bar.set_message("waiting");
            bar
        })
        .collect();
    eprintln!(
        "tidemark compare: {} runs of {} at {} records/s ({} records each), lake lag {}..{} \
         offsets",
        plan.len(),
        units::duration(config.duration),
        config.rate,
        config.records(),
        config.lag_min,
        config.lag_max
    );
    let mut runs = Vec::with_capacity(plan.len());
    for ((backend, variant), bar) in plan.into_iter().zip(bars) {
        let dir = run_dir(&root, backend, variant);
        let outcome = run::run(run::RunSetup {
            backend,
            variant,
            config: config.clone(),
            backends: backends.clone(),
            dir: dir.clone(),
            progress: bar.clone(),
            wrap: None,
        })?;
        let figures = report::RunReport::new(&outcome);
        let summary = format!(
            "{} at the end, {} reclaims, {} rebuilds, {} wrong answers of {}",
            units::bytes(figures.bytes.end),
            figures.reclaim.runs,
            figures.lake.rebuilds,
            figures.lookups.mismatches + figures.lookups.errors,
            figures.lookups.checked
        );
        bar.finish_with_message(summary.clone());
        if plain {
            eprintln!("  {backend} {variant}: {summary}");
        }
        if temp.is_some() {
            // Runs one after another need disk for one store at a time.
            run::remove_store(&dir)?;
        }
        runs.push(figures);
    }
    let targets = report::targets(&runs);
    let report = CompareReport {
        schema: report::SCHEMA,
        build: if cfg!(debug_assertions) {
            "dev"
        } else {
            "release"
        },
        config: report::ConfigReport::new(config),
        stores: stores.map(|d| d.display().to_string()),
        runs,
        targets,
    };
    let outputs = Outputs {
        json: out.join("compare.json"),
        bytes_chart: out.join("bytes-on-disk.svg"),
        p99_chart: out.join("write-p99.svg"),
    };
    let json = serde_json::to_string_pretty(&report)
        .map_err(|e| Error::Internal(format!("cannot render the JSON report: {e}")))?;
    std::fs::write(&outputs.json, json + "\n")?;
    chart::bytes_on_disk(&report, &outputs.bytes_chart)?;
    chart::write_p99(&report, &outputs.p99_chart)?;
    Ok((report, outputs))
}

/// The store directory of one run.
fn run_dir(root: &Path, backend: Backend, variant: Variant) -> PathBuf {
    root.join(format!("{backend}-{variant}"))
}

fn bar_style() -> ProgressStyle {
    ProgressStyle::with_template("{prefix:>24} [{bar:30}] {pos:>7}/{len:7} {msg}")
        .unwrap_or_else(|_| ProgressStyle::default_bar())
        .progress_chars("=> ")
}

/// The tables, and where the files are.
pub fn render(report: &CompareReport, outputs: &Outputs) -> String {
    let mut text = report::render(report);
    text.push_str(&format!(
        "\nwritten: {} (bytes on disk over time), {} (write and lookup p99 over time), {} (every figure \
         and series)\n",
        outputs.bytes_chart.display(),
        outputs.p99_chart.display(),
        outputs.json.display()
    ));
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_comparison_writes_its_charts_and_every_figure() {
        let tmp = tempfile::tempdir().unwrap();
        let out = tmp.path().join("out");
        let config = CompareConfig {
            duration: Duration::from_millis(300),
            rate: 2_000,
            keys: 300,
            lag_min: 50,
            lag_max: 150,
            lake_interval: Duration::from_millis(20),
            sample_interval: Duration::from_millis(20),
            p99_window: Duration::from_millis(50),
            ..CompareConfig::default()
        };
        let selection = Selection::new(vec![Backend::Memory], vec![]).unwrap();
        let (report, outputs) = compare(&config, &selection, &out, None).unwrap();
        assert_eq!(report.runs.len(), Variant::ALL.len());
        assert!(report.runs.iter().all(|r| r.correct()), "{report:?}");

        let json: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&outputs.json).unwrap()).unwrap();
        assert_eq!(json["schema"], "tidemark.compare/1");
        assert_eq!(json["config"]["records"], config.records());
        let runs = json["runs"].as_array().unwrap();
        let variants: Vec<&str> = runs
            .iter()
            .map(|r| r["variant"].as_str().unwrap())
            .collect();
        assert_eq!(
            variants,
            ["tidemark", "scheduler-off", "no-cleanup", "all-or-nothing"]
        );
        for run in runs {
            let series = &run["series"];
            let n = series["at"].as_array().unwrap().len();
            assert!(n > 1, "{run}");
            for column in ["bytes_on_disk", "window_bytes", "watermark", "applied_end"] {
                assert_eq!(series[column].as_array().unwrap().len(), n, "{column}");
            }
            assert_eq!(run["lookups"]["mismatches"], 0);
            assert!(run["write_latency"]["p99"].as_f64().unwrap() > 0.0);
        }
        let targets = json["targets"].as_array().unwrap();
        assert_eq!(targets.len(), 8, "{targets:?}");
        let bytes = &runs[0]["bytes"];
        for field in ["empty_store", "two_thirds", "growth_last_third"] {
            assert!(!bytes[field].is_null(), "{field}: {bytes}");
        }

        for run in runs {
            for column in ["write_p99_series", "lookup_p99_series"] {
                let series = run[column].as_array().unwrap();
                assert!(!series.is_empty(), "{column}: {run}");
                assert!(series.iter().all(|w| w["p99"].as_f64().unwrap() > 0.0));
            }
        }
        // A panel per backend: its caption, each variant's line and the window (plotters puts
        // each text on a line of its own).
        for (chart, labels) in [
            (
                &outputs.bytes_chart,
                &["\nmemory\n", "\nuncovered window\n"][..],
            ),
            (
                &outputs.p99_chart,
                &["memory: write p99", "memory: lookup p99"][..],
            ),
        ] {
            let svg = std::fs::read_to_string(chart).unwrap();
            assert!(svg.starts_with("<svg"), "{}", chart.display());
            for label in labels.iter().chain(&["\ntidemark\n", "\nall-or-nothing\n"]) {
                assert!(svg.contains(label), "{label} in {}", chart.display());
            }
        }
        let text = render(&report, &outputs);
        assert!(
            text.contains("targets") && text.contains("compare.json"),
            "{text}"
        );
    }

    #[test]
    fn a_store_left_by_an_earlier_comparison_is_refused_not_reused() {
        let tmp = tempfile::tempdir().unwrap();
        let (stores, out) = (tmp.path().join("stores"), tmp.path().join("out"));
        let selection = Selection::new(vec![Backend::Memory], vec![Variant::Tidemark]).unwrap();
        let left = run_dir(&stores, Backend::Memory, Variant::Tidemark);
        std::fs::create_dir_all(&left).unwrap();
        std::fs::write(left.join("TIDEMARK"), "backend=memory\n").unwrap();
        let err = compare(&CompareConfig::default(), &selection, &out, Some(&stores))
            .unwrap_err()
            .to_string();
        assert!(err.contains("is not empty"), "{err}");
        assert!(
            !out.exists(),
            "nothing is written before the runs can start"
        );
    }

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
        for (args, named) in [
            (&["--lag", "0"][..], "--lag"),
            (&["--value-size", "4"][..], "--value-size"),
            (&["--rate", "0"][..], "--rate"),
            (&["--variants", "tidemark,tidemark"][..], "named twice"),
        ] {
            let err = parse(args).unwrap_err().to_string();
            assert!(err.contains(named), "{args:?}: {err}");
        }
    }
}
