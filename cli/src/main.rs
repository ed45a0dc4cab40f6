//! `tidemark` command-line tool: the commands an operator uses on a bucket store (`stats`,
//! `reclaim` and `verify`) and `backends`; with cargo feature `compare`, also `compare`, which runs
//! the backends side by side against the two designs Tidemark replaces (the benchmark harness,
//! kept out of the operator's build). None of the operator's commands creates a store: a path
//! that holds none is an error. Exit status: 0 success (and, for `verify`, a clean store), 1
//! `verify` found damage or `compare` a wrong answer, 2 an error (printed on stderr).

use std::process::ExitCode;

mod output;
mod reclaim;
mod stats;
mod store;
mod verify;

use clap::{Parser, Subcommand};
use store::StoreArgs;
use tidemark::Backend;
#[cfg(feature = "compare")]
use tidemark_compare::CompareArgs;

/// Exit status when `verify` found damage, or `compare` a lookup that answered wrongly.
const DAMAGE_FOUND: u8 = 1;
/// Exit status of an error (clap uses the same for a command line it cannot parse).
const FAILED: u8 = 2;

#[derive(Debug, Parser)]
#[command(
    name = "tidemark",
    version,
    about = "Incremental, lake-driven reclamation of local bucket state"
)]
#[cfg_attr(
    feature = "compare",
    command(
        after_help = "Exit status: 0 success (verify: clean), 1 verify found damage or \
                          compare a wrong answer, 2 error. \
                          Logs go to stderr, filtered by RUST_LOG (default: warn)."
    )
)]
#[cfg_attr(
    not(feature = "compare"),
    command(
        after_help = "Exit status: 0 success (verify: clean), 1 verify found damage, \
                          2 error. \
                          Logs go to stderr, filtered by RUST_LOG (default: warn)."
    )
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Write the same continuously written bucket into every backend, with Tidemark and with
    /// the two designs it replaces (no cleanup; all-or-nothing rebuild), and compare what each
    /// costs: throughput, latencies, bytes on disk, reclaims. Writes two SVG charts and a JSON
    /// report into --out. With --buckets N: many buckets per backend, a few written at a time
    /// while the rest sit idle (the historical-partitions scenario).
    #[cfg(feature = "compare")]
    Compare(Box<CompareArgs>),
    /// `compare` in a build without it: refused with how to get it, not as an unknown command.
    #[cfg(not(feature = "compare"))]
    #[command(hide = true, disable_help_flag = true)]
    Compare {
        /// Whatever was passed, unread.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true, hide = true)]
        args: Vec<String>,
    },
    /// List the backends compiled into this build.
    Backends,
    /// Print a store's statistics. Opens it read-only: creates and changes nothing.
    Stats {
        #[command(flatten)]
        store: StoreArgs,
        /// Print one JSON document (schema tidemark.stats/1) instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Advance an existing store's watermark (optional) and reclaim everything below it.
    Reclaim {
        #[command(flatten)]
        store: StoreArgs,
        /// Lake end offset to advance the watermark to first (clamped to the applied end).
        #[arg(long)]
        watermark: Option<u64>,
        /// Print one JSON document (schema tidemark.reclaim/1) instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Check a store's consistency offline, like a filesystem check. Opens it read-only and
    /// repairs nothing; exits 1 when it finds damage.
    Verify {
        #[command(flatten)]
        store: StoreArgs,
        /// Print one JSON document (schema tidemark.verify/1) instead of text.
        #[arg(long)]
        json: bool,
    },
}

fn main() -> ExitCode {
    // The library's events (reclaims, recoveries, failures) go to stderr, filtered by RUST_LOG
    // (default: warnings and errors only).
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    // A storage engine that panics on a damaged store has each panic turned into an error, which
    // this tool prints; the panic hook's own report of every one (a message and a backtrace note
    // per lookup) would bury it. Reported once below instead.
    tidemark::contain::quiet_contained_panics();
    let cli = Cli::parse();
    let code = match run(cli.command) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("tidemark: {e}");
            ExitCode::from(FAILED)
        }
    };
    report_contained_panics();
    code
}

/// Logs, once, that the storage engine panicked (each panic already came back as an error), with
/// how many times and the first panic's message and location.
fn report_contained_panics() {
    let panics = tidemark::contain::contained_panics();
    if let Some(first) = panics.first {
        tracing::warn!(
            count = panics.count,
            first = %first,
            "the storage engine panicked, most likely on damaged files; each panic was returned as \
             an error"
        );
    }
}

/// Why a command failed: the operator's commands report the library's errors, `compare` its own.
#[derive(Debug, thiserror::Error)]
enum Failure {
    #[error(transparent)]
    Store(#[from] tidemark::Error),
    #[cfg(feature = "compare")]
    #[error(transparent)]
    Compare(#[from] tidemark_compare::Error),
    #[cfg(not(feature = "compare"))]
    #[error(
        "this build has no `compare`: the benchmark harness is built only with the cargo feature \
         `compare` (`./scripts/compare.sh` builds and runs it)"
    )]
    NoCompare,
}

fn run(command: Command) -> Result<ExitCode, Failure> {
    match command {
        #[cfg(feature = "compare")]
        Command::Compare(args) => {
            if !compare_backends(&args)? {
                return Ok(ExitCode::from(DAMAGE_FOUND));
            }
        }
        #[cfg(not(feature = "compare"))]
        Command::Compare { .. } => return Err(Failure::NoCompare),
        Command::Backends => {
            for b in Backend::ALL {
                let state = if b.is_compiled() {
                    "compiled in"
                } else {
                    "not compiled (enable its feature)"
                };
                println!("{:<8} {state}", b.name());
            }
        }
        Command::Stats { store, json } => stats::run(&store, json)?,
        Command::Reclaim {
            store,
            watermark,
            json,
        } => reclaim::run(&store, watermark, json)?,
        Command::Verify { store, json } => {
            if !verify::run(&store, json)? {
                return Ok(ExitCode::from(DAMAGE_FOUND));
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Runs `compare` and prints its tables; `false` when a lookup answered wrongly.
#[cfg(feature = "compare")]
fn compare_backends(args: &CompareArgs) -> tidemark_compare::Result<bool> {
    let comparison = tidemark_compare::run(args)?;
    print!("{}", comparison.render());
    let wrong = comparison.wrong_answers();
    if wrong.is_empty() {
        println!(
            "every lookup matched the model (local value or tombstone, or the lake after a miss)"
        );
        Ok(true)
    } else {
        eprintln!(
            "tidemark: lookups answered wrongly:\n  {}",
            wrong.join("\n  ")
        );
        Ok(false)
    }
}
