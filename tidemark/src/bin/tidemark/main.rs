//! `tidemark` command-line tool: the side-by-side backend demo and small store inspection commands.

use std::path::PathBuf;
use std::process::ExitCode;

mod demo;

use clap::{Parser, Subcommand};
use demo::{DemoConfig, render, run_backend};
use tidemark::{Backend, Engine, EngineOptions, Result};

#[derive(Debug, Parser)]
#[command(
    name = "tidemark",
    version,
    about = "Incremental, lake-driven reclamation of local bucket state"
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
    /// Print the statistics of a bucket store.
    Stats {
        /// Backend of the store.
        #[arg(long)]
        backend: Backend,
        /// Bucket directory.
        #[arg(long)]
        dir: PathBuf,
    },
    /// Advance a bucket's watermark (optional) and reclaim what it covers.
    Reclaim {
        /// Backend of the store.
        #[arg(long)]
        backend: Backend,
        /// Bucket directory.
        #[arg(long)]
        dir: PathBuf,
        /// Lake end offset to advance the watermark to first.
        #[arg(long)]
        watermark: Option<u64>,
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
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("tidemark: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(command: Command) -> Result<()> {
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
            let backends = if backends.is_empty() {
                Backend::compiled()
            } else {
                backends
            };
            let tmp = tempfile_dir(dir)?;
            println!(
                "tidemark demo: {} records over {} keys, {}-byte values, lake lag >= {} offsets, D = {}",
                config.records,
                config.keys,
                config.value_size,
                config.min_lag,
                config.retention_distance
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
            println!(
                "every lookup matched the model (local value/tombstone, or a miss the lake covers)"
            );
            Ok(())
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
            Ok(())
        }
        Command::Stats { backend, dir } => {
            let engine = backend.open(&dir, EngineOptions::default())?;
            println!("{:#?}", engine.stats()?);
            Ok(())
        }
        Command::Reclaim {
            backend,
            dir,
            watermark,
        } => {
            let engine = backend.open(&dir, EngineOptions::default())?;
            if let Some(w) = watermark {
                println!("{:?}", engine.advance_watermark(w)?);
            }
            println!("{:#?}", engine.reclaim()?);
            Ok(())
        }
    }
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
