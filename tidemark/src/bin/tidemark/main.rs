//! `tidemark` command-line tool: the side-by-side backend demo and the commands an operator uses
//! on a bucket store: `stats`, `reclaim` and `verify`. None of them creates a store: a path that
//! holds none is an error. Exit status: 0 success (and, for `verify`, a clean store), 1 `verify`
//! found damage, 2 an error (printed on stderr).

use std::path::PathBuf;
use std::process::ExitCode;

mod demo;
mod output;
mod reclaim;
mod stats;
mod store;
mod units;
mod verify;

use clap::{Parser, Subcommand};
use demo::{DemoConfig, render, run_backend};
use store::StoreArgs;
use tidemark::{Backend, Result};

/// Exit status when `verify` found damage.
const DAMAGE_FOUND: u8 = 1;
/// Exit status of an error (clap uses the same for a command line it cannot parse).
const FAILED: u8 = 2;

#[derive(Debug, Parser)]
#[command(
    name = "tidemark",
    version,
    about = "Incremental, lake-driven reclamation of local bucket state",
    after_help = "Exit status: 0 success (verify: clean), 1 verify found damage, 2 error. \
                  Logs go to stderr, filtered by RUST_LOG (default: warn)."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the same stream through every compiled-in backend and compare them side by side.
    Demo {
        /// Backends to run (default: all compiled in), e.g. `--backends sled,redb`.
        #[arg(long, value_delimiter = ',')]
        backends: Vec<Backend>,
        /// Records to write.
        #[arg(long, default_value_t = DemoConfig::default().records)]
        records: u64,
        /// Size of the key space.
        #[arg(long, default_value_t = DemoConfig::default().keys)]
        keys: u64,
        /// Payload bytes per value.
        #[arg(long, default_value_t = DemoConfig::default().value_size)]
        value_size: usize,
        /// Smallest lag between the applied end and the lake.
        #[arg(long, default_value_t = DemoConfig::default().min_lag)]
        min_lag: u64,
        /// Retention distance below the watermark.
        #[arg(long, default_value_t = 0)]
        retention_distance: u64,
        /// Directory for the stores (default: a temporary directory removed afterwards).
        #[arg(long)]
        dir: Option<PathBuf>,
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
    let cli = Cli::parse();
    match run(cli.command) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("tidemark: {e}");
            ExitCode::from(FAILED)
        }
    }
}

fn run(command: Command) -> Result<ExitCode> {
    match command {
        Command::Demo {
            backends,
            records,
            keys,
            value_size,
            min_lag,
            retention_distance,
            dir,
        } => {
            let config = DemoConfig {
                records,
                keys,
                value_size,
                min_lag,
                retention_distance,
                ..DemoConfig::default()
            };
            demo(config, backends, dir)?;
        }
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

fn demo(config: DemoConfig, backends: Vec<Backend>, dir: Option<PathBuf>) -> Result<()> {
    let backends = if backends.is_empty() {
        Backend::compiled()
    } else {
        backends
    };
    let tmp = tempfile_dir(dir)?;
    println!(
        "tidemark demo: {} records over {} keys, {}-byte values, lake lag >= {} offsets, D = {}",
        config.records, config.keys, config.value_size, config.min_lag, config.retention_distance
    );
    let mut rows = Vec::new();
    for backend in backends {
        let row = run_backend(backend, &tmp.path().join(backend.name()), &config)?;
        eprintln!("  {backend}: done");
        rows.push(row);
    }
    print!("{}", render(&rows));
    let bad: u64 = rows.iter().map(|r| r.mismatches).sum();
    if bad > 0 {
        return Err(tidemark::Error::Corrupt {
            key: Vec::new(),
            reason: format!("{bad} lookups disagreed with the model"),
        });
    }
    println!("every lookup matched the model (local value/tombstone, or a miss the lake covers)");
    Ok(())
}

/// Where the demo stores its buckets: the given directory, or a temporary one.
enum DemoDir {
    Given(PathBuf),
    Temp(tempfile::TempDir),
}

impl DemoDir {
    fn path(&self) -> &std::path::Path {
        match self {
            DemoDir::Given(p) => p,
            DemoDir::Temp(t) => t.path(),
        }
    }
}

fn tempfile_dir(dir: Option<PathBuf>) -> Result<DemoDir> {
    Ok(match dir {
        Some(d) => DemoDir::Given(d),
        None => DemoDir::Temp(tempfile::tempdir()?),
    })
}
