//! # `tidemark compare`
//!
//! Every chosen backend takes the same continuously written bucket, with Tidemark's incremental
//! reclamation and with the two designs it replaces (no cleanup at all; drop and rebuild only
//! when the lake has caught up), one run at a time so no run disturbs another's timings. The
//! result is a set of tables, two SVG charts and `compare.json` (schema `tidemark.compare/1`,
//! `docs/CLI.md` § `tidemark compare`).
//!
//! With `--buckets N` ([`compare_buckets`]) it runs the historical-partitions scenario instead:
//! per backend, `N` sibling buckets under one root, a few written at a time while the rest sit
//! idle, the lake trailing each; the whole root's bytes against the uncovered window, the
//! process's threads, descriptors and memory, the tails and the answers (schema
//! `tidemark.compare.buckets/1`).
//!
//! The `tidemark` binary flattens [`CompareArgs`] into its `compare` subcommand and calls
//! [`run`]:
//!
//! ```no_run
//! use clap::Parser;
//!
//! #[derive(Parser)]
//! struct Cli {
//!     #[command(flatten)]
//!     compare: tidemark_compare::CompareArgs,
//! }
//!
//! let comparison = tidemark_compare::run(&Cli::parse().compare)?;
//! print!("{}", comparison.render());
//! if !comparison.wrong_answers().is_empty() {
//!     std::process::exit(1);
//! }
//! # Ok::<(), tidemark_compare::Error>(())
//! ```
//!
//! The backends compiled in are the `tidemark` facade's (its cargo features; this crate's default
//! features turn on the facade's). Byte counts and durations read as in the rest of the tool
//! ([`tidemark::units`]).

mod args;
mod chart;
mod comparison;
mod config;
mod error;
mod floor;
mod histogram;
mod historical;
mod lake;
mod latency;
mod percentiles;
mod reclaims;
mod report;
mod run;
mod store_dirs;
mod tiering;
mod timed_lake;
mod window;

// Where the crate's modules find `units`: the tool's one formatting of bytes and durations.
use tidemark::units;

pub use args::CompareArgs;
pub use comparison::{Outputs, compare};
pub use config::{BucketsConfig, CompareConfig, Selection, Variant};
pub use error::{Error, Result};
pub use historical::compare as compare_buckets;
pub use historical::{BucketsOutputs, BucketsReport, BucketsRun, Isolation};
pub use report::{CompareReport, RunReport};

/// A finished comparison: its report and where its files went.
#[derive(Debug, Clone)]
pub enum Comparison {
    /// Every backend and variant on one continuously written bucket (without `--buckets`).
    Variants {
        /// Every figure of every run.
        report: CompareReport,
        /// The JSON report and the two charts.
        outputs: Outputs,
    },
    /// The historical-partitions scenario (`--buckets N`): one Tidemark run per backend.
    Buckets {
        /// Every figure of every backend's run.
        report: BucketsReport,
        /// The JSON report and the two charts.
        outputs: BucketsOutputs,
    },
    /// One backend's run of the scenario in a child process ([`Isolation::Children`]): its
    /// figures went to the file the parent named, which prints them.
    BucketsChild {
        /// The run's figures.
        run: Box<BucketsRun>,
    },
}

impl Comparison {
    /// The tables, and where the files are.
    pub fn render(&self) -> String {
        match self {
            Comparison::Variants { report, outputs } => comparison::render(report, outputs),
            Comparison::Buckets { report, outputs } => historical::render(report, outputs),
            Comparison::BucketsChild { .. } => String::new(),
        }
    }

    /// One line per run that answered a lookup wrongly (a mismatch with the model, or an
    /// error): empty when every answer was right.
    pub fn wrong_answers(&self) -> Vec<String> {
        let report = match self {
            Comparison::Variants { report, .. } => report,
            Comparison::Buckets { report, .. } => {
                return historical::wrong_answers(&report.runs);
            }
            Comparison::BucketsChild { run } => {
                return historical::wrong_answers(std::slice::from_ref(run));
            }
        };
        report
            .runs
            .iter()
            .filter(|r| !r.correct())
            .map(|r| {
                format!(
                    "{} {}: {} mismatches, {} errors ({})",
                    r.backend,
                    r.variant,
                    r.lookups.mismatches,
                    r.lookups.errors,
                    r.lookups.problems.join("; ")
                )
            })
            .collect()
    }
}

/// Runs the comparison `args` describe: checks them (before anything is written), runs every
/// backend and variant (with `--buckets`, the historical-partitions scenario on every backend),
/// writes the outputs into `--out`, and returns the report.
pub fn run(args: &CompareArgs) -> Result<Comparison> {
    let (config, selection) = args.config()?;
    match args.buckets_config()? {
        None => {
            let (report, outputs) = compare(&config, &selection, &args.out, args.dir.as_deref())?;
            Ok(Comparison::Variants { report, outputs })
        }
        Some(scenario) => {
            if let [backend, file] = args.buckets_child.as_slice() {
                let backend: tidemark::Backend = backend.parse()?;
                let run = historical::child(
                    &config,
                    &scenario,
                    backend,
                    std::path::Path::new(file),
                    args.dir.as_deref(),
                )?;
                return Ok(Comparison::BucketsChild { run: Box::new(run) });
            }
            // Each backend in a process of its own: its threads, descriptors and memory are
            // then its own, not what the backends before it left behind.
            let (report, outputs) = compare_buckets(
                &config,
                &scenario,
                &selection.backends,
                &args.out,
                args.dir.as_deref(),
                &Isolation::this_program()?,
            )?;
            Ok(Comparison::Buckets { report, outputs })
        }
    }
}
