//! # `tidemark compare`
//!
//! Every chosen backend takes the same continuously written bucket, with Tidemark's incremental
//! reclamation and with the two designs it replaces (no cleanup at all; drop and rebuild only
//! when the lake has caught up), one run at a time so no run disturbs another's timings. The
//! result is a set of tables, two SVG charts and `compare.json` (schema `tidemark.compare/1`,
//! `docs/CLI.md` § `tidemark compare`).
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
pub use config::{CompareConfig, Selection, Variant};
pub use error::{Error, Result};
pub use report::{CompareReport, RunReport};

/// A finished comparison: its report and where its files went.
#[derive(Debug, Clone)]
pub struct Comparison {
    /// Every figure of every run.
    pub report: CompareReport,
    /// The JSON report and the two charts.
    pub outputs: Outputs,
}

impl Comparison {
    /// The tables, and where the files are.
    pub fn render(&self) -> String {
        comparison::render(&self.report, &self.outputs)
    }

    /// One line per run that answered a lookup wrongly (a mismatch with the model, or an
    /// error): empty when every answer was right.
    pub fn wrong_answers(&self) -> Vec<String> {
        self.report
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
/// backend and variant, writes the outputs into `--out`, and returns the report.
pub fn run(args: &CompareArgs) -> Result<Comparison> {
    let (config, selection) = args.config()?;
    let (report, outputs) = compare(&config, &selection, &args.out, args.dir.as_deref())?;
    Ok(Comparison { report, outputs })
}
