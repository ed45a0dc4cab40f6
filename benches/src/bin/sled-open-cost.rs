//! Report: what a sled bucket's open costs, and how much of it is reading every row.
//!
//! A sled open hashes every row of `data` to compare it with the live-row digest (README of
//! `backend-sled`, § Damage sled recovers from silently). This writes stores of the sizes the
//! tests use and larger ones, closes them, and prints per store the median of `RUNS` opens of
//! the bucket (`SledEngine::open`, everything included), of sled alone opening the same files
//! (`sled::open` and its three trees), and of one pass over `data` reading every row through
//! sled, for scale. Run with `cargo run -p tidemark-benches --bin sled-open-cost` (the dev
//! profile optimises the libraries); on a loaded machine the figures are only indicative.

use std::path::Path;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use tidemark::sled::SledEngine;
use tidemark::{Engine, EngineOptions, OpenEngine, Result, WriteBatch};

/// Opens timed per store (the median is printed).
const RUNS: usize = 5;

/// One store to measure: `entries` keys of `value_len` bytes each.
struct Size {
    name: &'static str,
    entries: u64,
    value_len: usize,
}

const SIZES: [Size; 5] = [
    Size {
        name: "hostile-file cases (48 keys, up to 3 KiB)",
        entries: 48,
        value_len: 1536,
    },
    Size {
        name: "byte-flip case (408 keys, 1-3 KiB)",
        entries: 408,
        value_len: 2048,
    },
    Size {
        name: "10k entries of 200 B",
        entries: 10_000,
        value_len: 200,
    },
    Size {
        name: "100k entries of 200 B",
        entries: 100_000,
        value_len: 200,
    },
    Size {
        name: "100k entries of 1 KiB",
        entries: 100_000,
        value_len: 1024,
    },
];

/// Writes `size` into a new bucket at `dir` in batches of 1,000 and closes it.
fn write(dir: &Path, size: &Size) -> Result<()> {
    let engine = SledEngine::open(dir, EngineOptions::default().with_sync_writes(false))?;
    let mut batch = WriteBatch::new();
    for offset in 0..size.entries {
        batch.put(
            format!("key{offset:07}"),
            vec![(offset % 251) as u8; size.value_len],
            offset,
        );
        if batch.len() == 1_000 {
            engine.apply(&batch)?;
            batch = WriteBatch::new();
        }
    }
    engine.apply(&batch)?;
    engine.flush()?;
    Ok(())
}

/// The median of `RUNS` runs of `f`, each after a pause: sled releases a closed store's lock a
/// moment after the last handle drops, and an open that waits for it would time the wait.
fn median(mut f: impl FnMut() -> Result<Duration>) -> Result<Duration> {
    let mut times = Vec::with_capacity(RUNS);
    for _ in 0..RUNS {
        std::thread::sleep(Duration::from_millis(300));
        times.push(f()?);
    }
    times.sort();
    Ok(times[RUNS / 2])
}

/// How long `f` took.
fn timed(f: impl FnOnce() -> Result<()>) -> Result<Duration> {
    let start = Instant::now();
    f()?;
    Ok(start.elapsed())
}

fn sled_error(e: sled::Error) -> tidemark::Error {
    tidemark::Error::backend("sled", e)
}

fn run() -> Result<()> {
    println!("store | bucket open | sled alone | one pass over data");
    for size in &SIZES {
        let tmp = tempfile::tempdir()?;
        write(tmp.path(), size)?;
        let bucket = median(|| {
            let start = Instant::now();
            let engine = SledEngine::open(tmp.path(), EngineOptions::default())?;
            let took = start.elapsed();
            assert_eq!(engine.stats()?.live_entries, size.entries);
            Ok(took)
        })?;
        let db_dir = tmp.path().join(tidemark::sled::DB_SUBDIR);
        let (mut alone, mut pass) = (Vec::new(), Vec::new());
        median(|| {
            let start = Instant::now();
            let db = sled::open(&db_dir).map_err(sled_error)?;
            let data = db.open_tree("data").map_err(sled_error)?;
            db.open_tree("by_offset").map_err(sled_error)?;
            db.open_tree("meta").map_err(sled_error)?;
            alone.push(start.elapsed());
            pass.push(timed(|| {
                let mut bytes = 0u64;
                for row in data.iter() {
                    let (key, value) = row.map_err(sled_error)?;
                    bytes += (key.len() + value.len()) as u64;
                }
                assert!(bytes >= size.entries * size.value_len as u64);
                Ok(())
            })?);
            Ok(Duration::ZERO)
        })?;
        alone.sort();
        pass.sort();
        println!(
            "{} | {:.1} ms | {:.1} ms | {:.1} ms",
            size.name,
            bucket.as_secs_f64() * 1e3,
            alone[RUNS / 2].as_secs_f64() * 1e3,
            pass[RUNS / 2].as_secs_f64() * 1e3,
        );
    }
    Ok(())
}

fn main() -> ExitCode {
    tidemark_benches::exit_code("sled-open-cost", run())
}
