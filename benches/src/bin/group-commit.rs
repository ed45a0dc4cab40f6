//! Report: what synced applies of many buckets of one process add up to, per disk backend. Each
//! synced apply waits for its write to be durable (about one `fdatasync`); a backend whose
//! buckets share a log can make one sync serve the applies of many buckets (group commit), one
//! whose buckets each have their own files cannot.
//!
//! `cargo run -p tidemark-benches --bin group-commit -- [--buckets 100] [--seconds 3]
//! [--backends sled,redb,rocksdb,fjall]`
//!
//! For each backend: one bucket written alone by one thread, then `--buckets` buckets of one
//! `BackendConfig` (opened with `Backend::open_with`, the way the README shows) written at once,
//! a thread each, every apply a batch of one record with `sync_writes` on, for `--seconds` each.
//! Printed: applies per second alone, all together, and their ratio (aggregate ÷ alone).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a report, not library code

use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use clap::Parser;
use tidemark::{Backend, BackendConfig, EngineHandle, EngineOptions, Result, WriteBatch};

#[derive(Debug, Parser)]
struct Args {
    /// Buckets written at once.
    #[arg(long, default_value_t = 100)]
    buckets: usize,
    /// How long each measurement writes.
    #[arg(long, default_value_t = 3.0)]
    seconds: f64,
    /// Backends (default: every compiled disk backend).
    #[arg(long, value_delimiter = ',')]
    backends: Vec<String>,
}

/// Synced applies per second of `engines`, each written by a thread of its own for `length`.
fn applies_per_second(engines: &[EngineHandle], length: Duration) -> Result<f64> {
    let stop = Arc::new(AtomicBool::new(false));
    let applied = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let writers: Vec<_> = engines
        .iter()
        .map(|engine| {
            let (engine, stop, applied) = (engine.clone(), Arc::clone(&stop), Arc::clone(&applied));
            std::thread::spawn(move || -> Result<()> {
                let mut offset = engine.applied_end();
                while !stop.load(Ordering::Acquire) {
                    let mut batch = WriteBatch::new();
                    batch.put(format!("key-{offset}"), vec![7u8; 128], offset);
                    engine.apply(&batch)?;
                    offset += 1;
                    applied.fetch_add(1, Ordering::AcqRel);
                }
                Ok(())
            })
        })
        .collect();
    std::thread::sleep(length);
    stop.store(true, Ordering::Release);
    for writer in writers {
        writer.join().expect("a writer thread panicked")?;
    }
    Ok(applied.load(Ordering::Acquire) as f64 / started.elapsed().as_secs_f64())
}

fn measure(backend: Backend, args: &Args) -> Result<(f64, f64)> {
    let dir = tempfile::tempdir()?;
    let length = Duration::from_secs_f64(args.seconds);
    let options = EngineOptions::default().with_sync_writes(true);
    let config = BackendConfig::default().with_budget(backend, args.buckets + 1)?;
    let alone = backend.open_with(&dir.path().join("alone"), options.clone(), &config)?;
    let one = applies_per_second(std::slice::from_ref(&alone), length)?;
    drop(alone);
    let engines = (0..args.buckets)
        .map(|i| {
            backend.open_with(
                &dir.path().join(format!("bucket-{i}")),
                options.clone(),
                &config,
            )
        })
        .collect::<Result<Vec<_>>>()?;
    let all = applies_per_second(&engines, length)?;
    Ok((one, all))
}

fn main() -> ExitCode {
    let args = Args::parse();
    let backends = tidemark_benches::chosen_backends(&args.backends);
    println!(
        "synced applies of one record, {} buckets written at once against one alone, {} s each",
        args.buckets, args.seconds
    );
    println!("backend   alone/s   together/s   together ÷ alone");
    let mut status = ExitCode::SUCCESS;
    for backend in backends {
        match measure(backend, &args) {
            Ok((one, all)) => println!(
                "{:<8} {:>8.0} {:>12.0} {:>18.2}",
                backend.name(),
                one,
                all,
                all / one
            ),
            Err(e) => {
                eprintln!("{}: {e}", backend.name());
                status = ExitCode::FAILURE;
            }
        }
    }
    status
}
