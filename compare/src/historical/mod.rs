//! `tidemark compare --buckets N`: the historical-partitions scenario. A streaming store's
//! historical partitions leave thousands of buckets per server, most of them idle and a few
//! written at any moment, the lake trailing each. Per backend, one Tidemark run opens `N`
//! sibling buckets under one root, writes `--active` of them at a time, moves on every
//! `--rotate`, and measures what the whole root holds against the uncovered window, what the
//! process holds (threads, descriptors, resident memory), the write and lookup tails, and the
//! answers ([`run`]). The result is a set of tables, two SVG charts and `compare.json` (schema
//! `tidemark.compare.buckets/1`).

pub mod report;
pub mod run;

use std::ffi::OsString;
use std::io::IsTerminal as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};
use tidemark::Backend;

use crate::config::{BucketsConfig, CompareConfig};
use crate::report::ConfigReport;
use crate::store_dirs::{buckets_root, remove_store};
use crate::{Error, Result, chart, units};
pub use report::{BucketsReport, BucketsRun, ScenarioReport};

/// Where the scenario's files went.
#[derive(Debug, Clone)]
pub struct BucketsOutputs {
    /// Every figure and series.
    pub json: PathBuf,
    /// Bytes on disk and bytes ÷ the uncovered window over time, a row per backend.
    pub bytes_chart: PathBuf,
    /// Resident memory, descriptors and threads over time, a line per backend.
    pub process_chart: PathBuf,
}

/// Where each backend's run of the scenario takes place.
#[derive(Debug, Clone)]
pub enum Isolation {
    /// In this process, one after another: a backend's process figures then include what the
    /// backends before it left behind (their threads, the memory the allocator kept).
    InProcess,
    /// Each in a child process of its own, so its threads, descriptors and memory are its own:
    /// `program` with `args`, then `--buckets-child BACKEND FILE`, runs the backend alone and
    /// writes its figures to `FILE`.
    Children {
        /// The program to run.
        program: PathBuf,
        /// Its arguments, before `--buckets-child`.
        args: Vec<OsString>,
    },
}

impl Isolation {
    /// Children that run this process's own program and command line (what `tidemark compare
    /// --buckets` does: its command line describes the scenario).
    pub fn this_program() -> Result<Self> {
        let program = std::env::current_exe()
            .map_err(|e| Error::io("cannot find the running program", "/proc/self/exe", e))?;
        Ok(Isolation::Children {
            program,
            args: std::env::args_os().skip(1).collect(),
        })
    }
}

/// Runs the scenario on every backend of `backends`, one after another (each in a child process
/// with [`Isolation::Children`]), writes the outputs into `out` and returns the report. Stores go
/// to `stores` (kept) or a temporary directory.
pub fn compare(
    config: &CompareConfig,
    scenario: &BucketsConfig,
    backends: &[Backend],
    out: &Path,
    stores: Option<&Path>,
    isolation: &Isolation,
) -> Result<(BucketsReport, BucketsOutputs)> {
    config.validate()?;
    scenario.validate()?;
    for &backend in backends {
        if let Some(dir) = stores {
            refuse_used(&buckets_root(dir, backend))?;
        }
    }
    // Created first, so an unwritable output directory fails before the runs.
    std::fs::create_dir_all(out)
        .map_err(|e| Error::io("cannot create the output directory", out, e))?;
    // The stores (without --dir), and the children's figures.
    let temp =
        tempfile::tempdir().map_err(|e| Error::io("cannot create", std::env::temp_dir(), e))?;
    let root = stores.unwrap_or(temp.path());
    let progress = MultiProgress::with_draw_target(ProgressDrawTarget::stderr());
    let plain = !std::io::stderr().is_terminal();
    eprintln!(
        "tidemark compare --buckets {}: {} runs of {} at {} records/s in all ({} records), {} \
         buckets written at a time, the next every {}{}",
        scenario.buckets,
        backends.len(),
        units::duration(config.duration),
        config.rate,
        config.records(),
        scenario.active,
        units::duration(scenario.rotate),
        match isolation {
            Isolation::InProcess => "",
            Isolation::Children { .. } => "; each backend in a process of its own",
        }
    );
    let mut runs = Vec::with_capacity(backends.len());
    for &backend in backends {
        let figures = match isolation {
            Isolation::InProcess => {
                let bar = progress.add(new_bar(config, scenario, backend));
                let figures = run_here(config, scenario, backend, root, stores.is_none(), &bar)?;
                bar.finish_with_message(summary(&figures));
                figures
            }
            Isolation::Children { program, args } => {
                let file = temp.path().join(format!("{backend}.json"));
                let status = Command::new(program)
                    .args(args)
                    .arg("--buckets-child")
                    .arg(backend.name())
                    .arg(&file)
                    // Its tables are the parent's to print; its progress and errors show.
                    .stdout(Stdio::null())
                    .stderr(Stdio::inherit())
                    .status()
                    .map_err(|e| Error::io("cannot start a child process", program, e))?;
                let text = std::fs::read_to_string(&file).map_err(|_| {
                    Error::Harness(format!(
                        "the {backend} run (a child process) failed ({status}); its error is above"
                    ))
                })?;
                serde_json::from_str(&text).map_err(|e| {
                    Error::Harness(format!("the {backend} run's figures do not parse: {e}"))
                })?
            }
        };
        if plain || matches!(isolation, Isolation::Children { .. }) {
            eprintln!("  {backend}: {}", summary(&figures));
        }
        runs.push(figures);
    }
    let report = BucketsReport {
        schema: report::SCHEMA,
        build: if cfg!(debug_assertions) {
            "dev"
        } else {
            "release"
        },
        config: ConfigReport::new(config),
        scenario: ScenarioReport::new(config, scenario),
        stores: stores.map(|d| d.display().to_string()),
        runs,
    };
    let outputs = BucketsOutputs {
        json: out.join("compare.json"),
        bytes_chart: out.join("buckets-bytes.svg"),
        process_chart: out.join("buckets-process.svg"),
    };
    let json = serde_json::to_string_pretty(&report)
        .map_err(|e| Error::Harness(format!("cannot render the JSON report: {e}")))?;
    std::fs::write(&outputs.json, json + "\n")
        .map_err(|e| Error::io("cannot write", &outputs.json, e))?;
    chart::buckets_bytes(&report, &outputs.bytes_chart)?;
    chart::buckets_process(&report, &outputs.process_chart)?;
    Ok((report, outputs))
}

/// The child side of [`Isolation::Children`]: runs the scenario on `backend` alone, in this
/// process, and writes its figures (JSON) to `file`. Its stores go to `stores` (kept) or a
/// temporary directory.
pub fn child(
    config: &CompareConfig,
    scenario: &BucketsConfig,
    backend: Backend,
    file: &Path,
    stores: Option<&Path>,
) -> Result<BucketsRun> {
    config.validate()?;
    scenario.validate()?;
    if let Some(dir) = stores {
        refuse_used(&buckets_root(dir, backend))?;
    }
    let temp =
        tempfile::tempdir().map_err(|e| Error::io("cannot create", std::env::temp_dir(), e))?;
    let bar = ProgressBar::with_draw_target(Some(config.records()), ProgressDrawTarget::stderr());
    bar.set_style(bar_style());
    bar.set_prefix(format!("{backend} {} buckets", scenario.buckets));
    let figures = run_here(
        config,
        scenario,
        backend,
        stores.unwrap_or(temp.path()),
        stores.is_none(),
        &bar,
    )?;
    bar.finish_with_message(summary(&figures));
    let json = serde_json::to_string(&figures)
        .map_err(|e| Error::Harness(format!("cannot render the run's figures: {e}")))?;
    std::fs::write(file, json).map_err(|e| Error::io("cannot write", file, e))?;
    Ok(figures)
}

/// Refuses a root that holds buckets of an earlier comparison (their records and watermarks
/// would make every figure and answer wrong).
fn refuse_used(root: &Path) -> Result<()> {
    if std::fs::read_dir(root).is_ok_and(|mut entries| entries.next().is_some()) {
        return Err(Error::Config(format!(
            "{} is not empty (buckets of an earlier comparison?): give --dir an empty or new \
             directory",
            root.display()
        )));
    }
    Ok(())
}

/// Runs `backend` in this process under `root`, removing its buckets afterwards when
/// `temporary`.
fn run_here(
    config: &CompareConfig,
    scenario: &BucketsConfig,
    backend: Backend,
    root: &Path,
    temporary: bool,
    bar: &ProgressBar,
) -> Result<BucketsRun> {
    let dir = buckets_root(root, backend);
    let outcome = run::run(run::Setup {
        backend,
        config: config.clone(),
        scenario: *scenario,
        root: dir.clone(),
        progress: bar.clone(),
    })?;
    if temporary {
        remove_store(&dir)?;
    }
    Ok(BucketsRun::new(&outcome))
}

fn new_bar(config: &CompareConfig, scenario: &BucketsConfig, backend: Backend) -> ProgressBar {
    let bar = ProgressBar::new(config.records());
    bar.set_style(bar_style());
    bar.set_prefix(format!("{backend} {} buckets", scenario.buckets));
    bar.set_message("waiting");
    bar
}

/// A finished run in one line.
fn summary(figures: &BucketsRun) -> String {
    format!(
        "{} at the end over a window of {}, {} reclaims ({} while idle), {} wrong answers of {}",
        units::bytes(figures.bytes.end),
        units::bytes(figures.bytes.window_end),
        figures.reclaim.totals.runs,
        figures.reclaim.while_idle,
        figures.lookups.mismatches + figures.lookups.errors,
        figures.lookups.checked
    )
}

fn bar_style() -> ProgressStyle {
    ProgressStyle::with_template("{prefix:>24} [{bar:30}] {pos:>7}/{len:7} {msg}")
        .unwrap_or_else(|_| ProgressStyle::default_bar())
        .progress_chars("=> ")
}

/// The tables, and where the files are.
pub fn render(report: &BucketsReport, outputs: &BucketsOutputs) -> String {
    let mut text = report::render(report);
    text.push_str(&format!(
        "\nwritten: {} (bytes on disk and bytes / window over time), {} (RSS, descriptors and \
         threads over time), {} (every figure and series)\n",
        outputs.bytes_chart.display(),
        outputs.process_chart.display(),
        outputs.json.display()
    ));
    text
}

/// One line per run that answered a lookup wrongly; empty when every answer was right.
pub fn wrong_answers(runs: &[BucketsRun]) -> Vec<String> {
    runs.iter()
        .filter(|r| !r.correct())
        .map(|r| {
            format!(
                "{} with {} buckets: {} mismatches, {} errors ({})",
                r.backend,
                r.buckets,
                r.lookups.mismatches,
                r.lookups.errors,
                r.lookups.problems.join("; ")
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::config::Selection;

    /// The scenario the brief of `--buckets` names as the small case: 6 buckets, 2 written at a
    /// time, 2 s.
    fn small() -> (CompareConfig, BucketsConfig) {
        let config = CompareConfig::default().with_duration(Duration::from_secs(2));
        let scenario = BucketsConfig::new(6, Some(2), None, config.duration).unwrap();
        (config, scenario)
    }

    #[test]
    fn every_backend_runs_the_scenario_and_answers_every_lookup_right() {
        let tmp = tempfile::tempdir().unwrap();
        let (out, stores) = (tmp.path().join("out"), tmp.path().join("stores"));
        let (config, scenario) = small();
        let mut backends = Selection::new(vec![], vec![]).unwrap().backends;
        backends.push(Backend::Memory);
        let (report, outputs) = compare(
            &config,
            &scenario,
            &backends,
            &out,
            Some(&stores),
            &Isolation::InProcess,
        )
        .unwrap();
        assert_eq!(report.runs.len(), backends.len());
        assert!(
            wrong_answers(&report.runs).is_empty(),
            "{:?}",
            wrong_answers(&report.runs)
        );
        for run in &report.runs {
            let what = format!("{}: {run:?}", run.backend);
            assert!(run.correct(), "{what}");
            assert_eq!(run.records, config.records(), "{what}");
            assert_eq!(
                run.first_write_records,
                scenario.buckets as u64 * config.batch,
                "{what}: every bucket had its first batch"
            );
            assert_eq!(run.buckets_written, 6, "{what}: five rotations of two");
            assert_eq!(run.rotations, 5, "{what}");
            // Active and idle buckets were looked up, and every key once more at the end.
            assert!(run.lookups.active > 0 && run.lookups.idle > 0, "{what}");
            assert!(
                run.lookups.checked > run.lookups.active + run.lookups.idle,
                "{what}"
            );
            assert!(
                run.lookups.lake_fallbacks > 0,
                "{what}: idle buckets asked the lake"
            );
            assert!(
                run.bytes.window_end > 0,
                "{what}: the lake trails the active buckets"
            );
            assert!(run.write_latency.is_some_and(|p| p.p99 > 0.0), "{what}");
            assert!(run.lookup_latency.is_some_and(|p| p.p99 > 0.0), "{what}");
            let p = &run.process;
            assert!(p.max.threads.is_some_and(|t| t > 0), "{what}");
            assert!(p.max.open_fds.is_some_and(|n| n > 0), "{what}");
            assert!(p.max.rss_bytes.is_some_and(|b| b > 0), "{what}");
            assert!(p.end.open_fds <= p.max.open_fds, "{what}");
            // Idle buckets were caught up with by the lake and reclaimed while idle.
            assert!(run.reclaim.totals.runs > 0, "{what}");
            assert!(run.reclaim.while_idle > 0, "{what}");
            assert!(run.reclaim.buckets_reclaimed > 0, "{what}");
            assert!(run.lake.commits > 0, "{what}");
            let n = run.series.at.len();
            assert!(n > 1, "{what}");
            assert_eq!(run.series.bytes_on_disk.len(), n);
            assert_eq!(run.series.allocated_bytes.len(), n);
            assert_eq!(run.series.threads.len(), n);
            if run.backend != "memory" {
                assert!(run.bytes.empty > 0 && run.bytes.end > 0, "{what}");
                assert!(run.bytes.end_over_window.is_some_and(|r| r > 0.0), "{what}");
                assert!(run.bytes.end_allocated > 0, "{what}");
                assert!(
                    run.bytes.end_allocated_over_window.is_some_and(|r| r > 0.0),
                    "{what}"
                );
            }
        }
        // The stores were kept where --dir said, a root per backend.
        for &backend in &backends {
            if backend.is_persistent() {
                let root = buckets_root(&stores, backend);
                assert!(root.join("bucket-5").exists(), "{}", root.display());
            }
        }

        let json: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&outputs.json).unwrap()).unwrap();
        assert_eq!(json["schema"], "tidemark.compare.buckets/1");
        assert_eq!(json["scenario"]["buckets"], 6);
        assert_eq!(json["scenario"]["active"], 2);
        for run in json["runs"].as_array().unwrap() {
            for field in ["buckets_reclaimed", "buckets_drained", "while_idle", "runs"] {
                assert!(run["reclaim"][field].is_u64(), "{field}: {run}");
            }
            assert!(run["process"]["max"]["open_fds"].as_u64().unwrap() > 0);
            assert!(run["bytes"]["window_end"].as_u64().unwrap() > 0);
            assert!(run["write_latency"]["p99"].as_f64().unwrap() > 0.0);
            assert!(run["lookup_latency"]["p99"].as_f64().unwrap() > 0.0);
            assert_eq!(run["lookups"]["mismatches"], 0);
            assert_eq!(run["lookups"]["errors"], 0);
        }
        for (chart, labels) in [
            (
                &outputs.bytes_chart,
                &["every file under the root", "uncovered window"][..],
            ),
            (
                &outputs.process_chart,
                &["resident memory", "open file descriptors", "threads"][..],
            ),
        ] {
            let svg = std::fs::read_to_string(chart).unwrap();
            assert!(svg.starts_with("<svg"), "{}", chart.display());
            for label in labels.iter().chain(&["memory"]) {
                assert!(svg.contains(label), "{label} in {}", chart.display());
            }
        }
        let text = render(&report, &outputs);
        for needle in ["historical partitions", "space and process", "reclaims"] {
            assert!(text.contains(needle), "{needle}: {text}");
        }

        // A second comparison into the same stores is refused before anything runs.
        let err = compare(
            &config,
            &scenario,
            &backends,
            &out,
            Some(&stores),
            &Isolation::InProcess,
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("is not empty"), "{err}");
    }
}
