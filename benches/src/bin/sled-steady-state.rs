//! Report: does sled's footprint plateau under continuous overwrites with a trailing watermark?
//!
//! This was a test, but it measures sled's *background* segment cleaner, which on a loaded
//! machine may run late: a timing property, so it is a report. Run with
//! `cargo run --release -p tidemark-benches --bin sled-steady-state`. It writes `ROUNDS` rounds
//! over a fixed key space, the lake trailing by half a round, reclaims after every round, and
//! prints `size_on_disk` per round and the late peak ÷ warm-up peak (about 1 when sled reuses the
//! space the sweeper frees; growing with the rounds when it does not).

use std::process::ExitCode;
use tidemark::sled::SledDiagnostics;

use tidemark::sled::SledEngine;
use tidemark::{Engine, EngineOptions, OpenEngine, Result, WriteBatch};

const KEYS: u64 = 2_000;
const ROUNDS: u64 = 60;
const WARM_UP: usize = 15;

fn run() -> Result<()> {
    let tmp = tempfile::tempdir()?;
    let engine = SledEngine::open(tmp.path(), EngineOptions::default().with_sync_writes(false))?;
    let mut offset = 0u64;
    let mut sizes = Vec::new();
    for _ in 0..ROUNDS {
        let mut batch = WriteBatch::new();
        for k in 0..KEYS {
            batch.put(format!("key{k:05}"), vec![0xa5u8; 200], offset);
            offset += 1;
        }
        engine.apply(&batch)?;
        engine.advance_watermark(offset - KEYS / 2)?;
        engine.reclaim()?;
        // A rebuild the reclaim queued runs in the background: the size after it.
        engine.wait_for_background_work()?;
        engine.flush()?;
        sizes.push(engine.size_on_disk()?);
    }
    let warm = sizes.iter().take(WARM_UP).copied().max().unwrap_or(0);
    let late = sizes.iter().skip(WARM_UP).copied().max().unwrap_or(0);
    println!(
        "payload written: {} bytes over {ROUNDS} rounds",
        offset * 200
    );
    println!("size_on_disk per round: {sizes:?}");
    println!("rebuilds: {}", engine.stats()?.counters.space_rebuilds);
    println!(
        "live entries {} (expected {}); warm-up peak {warm} B, later peak {late} B, ratio {:.2}",
        engine.stats()?.live_entries,
        KEYS / 2,
        late as f64 / warm.max(1) as f64
    );
    Ok(())
}

fn main() -> ExitCode {
    tidemark_benches::exit_code("sled-steady-state", run())
}
