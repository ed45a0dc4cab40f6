//! A whole comparison: every backend and variant of a selection, one run after another, then
//! the JSON report and the two charts written into the output directory.

use std::io::IsTerminal as _;
use std::path::{Path, PathBuf};

use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};
use tidemark::{Backend, BackendConfig};

use crate::config::{CompareConfig, Selection, Variant};
use crate::report::{self, CompareReport};
use crate::store_dirs::{lake_dir, remove_store, run_dir};
use crate::{Error, Result, chart, run, units};

/// Buckets the comparison's contexts are sized for: one run's bucket at a time, with room for
/// an all-or-nothing rebuild to open the new store while the old one's share is returned.
const CONTEXT_BUCKETS: usize = 4;

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
            for taken in [lake_dir(&run), run] {
                if std::fs::read_dir(&taken).is_ok_and(|mut entries| entries.next().is_some()) {
                    return Err(Error::Config(format!(
                        "{} is not empty (a store of an earlier comparison?): give --dir an \
                         empty or new directory",
                        taken.display()
                    )));
                }
            }
        }
    }
    // Created first, so an unwritable output directory fails before a minute of runs.
    std::fs::create_dir_all(out)
        .map_err(|e| Error::io("cannot create the output directory", out, e))?;
    let temp = match stores {
        Some(_) => None,
        None => Some(
            tempfile::tempdir().map_err(|e| Error::io("cannot create", std::env::temp_dir(), e))?,
        ),
    };
    let root = match (&temp, stores) {
        (Some(t), _) => t.path().to_path_buf(),
        (None, Some(dir)) => dir.to_path_buf(),
        (None, None) => return Err(Error::Harness("no directory for the stores".into())),
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
            lake_dir: lake_dir(&dir),
            progress: bar.clone(),
            wrap: None,
        })?;
        let figures = report::RunReport::new(&outcome);
        let summary = format!(
            "{} at the end, {} reclaims, {} space rebuilds, {} all-or-nothing rebuilds, {} wrong \
             answers of {}",
            units::bytes(figures.bytes.end),
            figures.reclaim.runs,
            figures.bytes.space_rebuilds,
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
            remove_store(&dir)?;
            remove_store(&lake_dir(&dir))?;
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
        .map_err(|e| Error::Harness(format!("cannot render the JSON report: {e}")))?;
    std::fs::write(&outputs.json, json + "\n")
        .map_err(|e| Error::io("cannot write", &outputs.json, e))?;
    chart::bytes_on_disk(&report, &outputs.bytes_chart)?;
    chart::write_p99(&report, &outputs.p99_chart)?;
    Ok((report, outputs))
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
    use std::time::Duration;

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
        assert_eq!(targets.len(), 13, "{targets:?}");
        let bytes = &runs[0]["bytes"];
        for field in [
            "empty_store",
            "two_thirds",
            "growth_last_third",
            "floor",
            "end_over_floor",
            "drained",
            "drained_allowance",
        ] {
            assert!(!bytes[field].is_null(), "{field}: {bytes}");
        }
        // The floor and the drain are the Tidemark run's.
        for run in &runs[1..] {
            assert!(run["bytes"]["floor"].is_null() && run["bytes"]["drained"].is_null());
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
}
