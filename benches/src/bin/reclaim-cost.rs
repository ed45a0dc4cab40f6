//! Report: what reclamation costs relative to what it reclaims, and what the bucket's read path
//! costs relative to the engine's, on every compiled disk backend, as ratios measured in one run.
//!
//! `cargo run --release -p tidemark-benches --bin reclaim-cost -- [--sizes 100000,1000000]
//! [--drain-keys 300000] [--lookups 200000]`
//!
//! 1. **Fixed reclaim**: a bucket of N distinct keys (128-byte incompressible values, settled
//!    into the store's files), the first 1,000 covered; one direct `reclaim()` timed. Ratio of the
//!    largest N to the smallest.
//! 2. **Drain**: a bucket of `--drain-keys` keys; the watermark moves in 100 steps of 1 %, the
//!    scheduler (default policies) asked to reclaim after each step and waited for. The sum of the
//!    scheduler's reclaim times ÷ one reclaim of the same bucket fully covered, plus RocksDB's
//!    bytes rewritten per byte reclaimed from its own file metadata. Then the space the drained
//!    bucket gives back: its bytes on disk once the engine's background space work finished
//!    (`Engine::wait_for_background_work`), against the target of at most twice an empty
//!    store's footprint plus 1 MiB, the engine's space rebuilds, and the wall time of the whole
//!    drain, background work included, per entry reclaimed.
//! 3. **Read path**: a local hit through `HistoricalBucket::lookup` vs `Engine::lookup` on the same
//!    engine (throughput ratio), and `lookup_many` of 100 keys vs 100 single bucket lookups.
//! 4. **Notification storm**: 1,000 `on_lake_progress` calls that each move `W` by one offset, vs
//!    1,000 that do not move it (the same refresh, no watermark write): what the durable watermark
//!    write costs per notification.
//!
//! Setup and teardown are outside every timed region.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a report, not library code

use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Parser;
use tidemark::bucket::{HistoricalBucket, MemoryLake, ReclaimScheduler, SchedulerConfig};
use tidemark::{Backend, EngineHandle, EngineOptions, WriteBatch};
use tidemark_test_support::observe::{Observed, ReclaimLog};
use tidemark_test_support::rng::SplitMix64;

/// A run fails with an engine, bucket or I/O error, each printed as it is.
type Result<T> = std::result::Result<T, Box<dyn std::error::Error + Send + Sync>>;

#[derive(Debug, Parser)]
struct Args {
    /// Bucket sizes (distinct keys) for the fixed reclaim of 1,000 covered entries.
    #[arg(long, value_delimiter = ',', default_value = "100000,1000000")]
    sizes: Vec<u64>,
    /// Keys of the drained bucket.
    #[arg(long, default_value_t = 300_000)]
    drain_keys: u64,
    /// Lookups per read-path measurement.
    #[arg(long, default_value_t = 200_000)]
    lookups: u64,
    /// Backends (default: every compiled disk backend).
    #[arg(long, value_delimiter = ',')]
    backends: Vec<String>,
}

const COVERED: u64 = 1_000;
const VALUE: usize = 128;
const WRITE_BATCH: u64 = 1_000;

fn key(i: u64) -> Vec<u8> {
    format!("key-{i:010}").into_bytes()
}

/// Opens a bucket of `n` distinct keys at offsets `0..n`, with incompressible values, settled
/// into the store's files.
fn filled(backend: Backend, dir: &Path, n: u64) -> Result<EngineHandle> {
    let engine = backend.open_with(
        dir,
        EngineOptions::default().with_sync_writes(false),
        &tidemark_benches::config(),
    )?;
    let mut rng = SplitMix64::new(n ^ 0x5EED);
    for first in (0..n).step_by(WRITE_BATCH as usize) {
        let mut batch = WriteBatch::new();
        for i in first..(first + WRITE_BATCH).min(n) {
            batch.put(key(i), rng.bytes(VALUE), i);
        }
        engine.apply(&batch)?;
    }
    engine.flush()?;
    // A reclaim with nothing covered settles the data (RocksDB: compacted to the bottom level);
    // a rebuild it queued (sled) finishes before anything is timed.
    engine.reclaim()?;
    engine.wait_for_background_work()?;
    Ok(engine)
}

fn secs(d: Duration) -> f64 {
    d.as_secs_f64()
}

fn fixed_reclaim(backend: Backend, sizes: &[u64]) -> Result<()> {
    let mut times = Vec::new();
    for &n in sizes {
        let tmp = tempfile::tempdir()?;
        let engine = filled(backend, &tmp.path().join("b"), n)?;
        engine.advance_watermark(COVERED)?;
        let started = Instant::now();
        let report = engine.reclaim()?;
        let took = started.elapsed();
        assert_eq!(
            report.removed(),
            COVERED,
            "{}: reclaim removed the covered entries",
            backend.name()
        );
        println!(
            "  {:<8} N = {n:>9}: reclaim of {COVERED} covered {:>8.4} s, bytes rewritten {}",
            backend.name(),
            secs(took),
            report
                .bytes_rewritten
                .map_or("-".to_owned(), |b| b.to_string())
        );
        times.push(took);
        drop(engine);
    }
    if let (Some(first), Some(last)) = (times.first(), times.last()) {
        println!(
            "  {:<8} ratio N = {} / N = {}: {:.2}",
            backend.name(),
            sizes.last().copied().unwrap_or(0),
            sizes.first().copied().unwrap_or(0),
            secs(*last) / secs(*first).max(1e-9)
        );
    }
    Ok(())
}

fn drain(backend: Backend, keys: u64, rt: &tokio::runtime::Runtime) -> Result<()> {
    // One reclaim of the same bucket fully covered.
    let once = {
        let tmp = tempfile::tempdir()?;
        let engine = filled(backend, &tmp.path().join("b"), keys)?;
        engine.advance_watermark(keys)?;
        let started = Instant::now();
        engine.reclaim()?;
        started.elapsed()
    };
    let empty = {
        let tmp = tempfile::tempdir()?;
        let engine = backend.open_with(
            &tmp.path().join("b"),
            EngineOptions::default().with_sync_writes(false),
            &tidemark_benches::config(),
        )?;
        engine.flush()?;
        engine.stats()?.bytes_on_disk
    };
    let tmp = tempfile::tempdir()?;
    // Sums the time of every `reclaim` the scheduler makes.
    let log = Arc::new(ReclaimLog::default());
    let timed = Observed::wrap(
        filled(backend, &tmp.path().join("b"), keys)?,
        Arc::clone(&log),
    );
    let drain_started = Instant::now();
    let stats = rt.block_on(async {
        let config = SchedulerConfig::default().with_min_interval(Duration::ZERO);
        let sched = ReclaimScheduler::new(config)?;
        let id = tidemark::bucket::BucketId(1);
        sched.register(id, timed.clone())?;
        for step in 1..=100u64 {
            timed.advance_watermark(keys * step / 100)?;
            sched.request(id)?;
            sched.settled(id).await;
        }
        let stats = sched.bucket_stats(id);
        sched.shutdown().await;
        Ok::<_, tidemark::BucketError>(stats)
    })?;
    timed.wait_for_background_work()?;
    let drain_wall = drain_started.elapsed();
    let total = log.total_time();
    let end = timed.stats()?;
    let (counters, left) = (end.counters, end.live_entries);
    let allowance = 2 * empty + (1 << 20);
    let runs = stats.map_or(0, |s| s.runs);
    let amplification = if counters.reclaim_bytes_freed > 0 {
        format!(
            "{:.2}",
            counters.reclaim_bytes_rewritten as f64 / counters.reclaim_bytes_freed as f64
        )
    } else {
        "-".to_owned()
    };
    println!(
        "  {:<8} drain of {keys}: {runs} runs, {:.3} s in total; one full reclaim {:.3} s; \
         ratio {:.2}; bytes rewritten / bytes freed {amplification}; {left} entries left",
        backend.name(),
        secs(total),
        secs(once),
        secs(total) / secs(once).max(1e-9),
    );
    let reclaimed = (counters.reclaimed_values + counters.reclaimed_tombstones).max(1);
    println!(
        "  {:<8} drained: {} bytes on disk after, empty store {empty}, target at most {allowance} \
         (2 x empty + 1 MiB): {}; {} space rebuilds; whole drain, background work included, \
         {:.2} µs per entry reclaimed",
        backend.name(),
        end.bytes_on_disk,
        if end.bytes_on_disk <= allowance {
            "met"
        } else {
            "MISSED"
        },
        counters.space_rebuilds,
        secs(drain_wall) * 1e6 / reclaimed as f64,
    );
    Ok(())
}

fn read_path(backend: Backend, lookups: u64, rt: &tokio::runtime::Runtime) -> Result<()> {
    const N: u64 = 100_000;
    let tmp = tempfile::tempdir()?;
    let engine = filled(backend, &tmp.path().join("b"), N)?;
    let lake = Arc::new(MemoryLake::new());
    let bucket = HistoricalBucket::new(engine.clone(), lake);
    let mut rng = SplitMix64::new(7);
    let keys: Vec<Vec<u8>> = (0..lookups).map(|_| key(rng.below(N))).collect();
    // Warm the caches the same way for both.
    for k in keys.iter().take(10_000) {
        engine.lookup(k)?;
    }
    let started = Instant::now();
    for k in &keys {
        std::hint::black_box(engine.lookup(k)?);
    }
    let engine_time = started.elapsed();
    let (bucket_time, single_time, many_time) = rt.block_on(async {
        let started = Instant::now();
        for k in &keys {
            std::hint::black_box(bucket.lookup(k).await?);
        }
        let bucket_time = started.elapsed();
        let groups: Vec<&[Vec<u8>]> = keys.chunks(100).collect();
        let started = Instant::now();
        for group in &groups {
            for k in *group {
                std::hint::black_box(bucket.lookup(k).await?);
            }
        }
        let single_time = started.elapsed();
        let started = Instant::now();
        for group in &groups {
            std::hint::black_box(bucket.lookup_many(group).await?);
        }
        Ok::<_, tidemark::BucketError>((bucket_time, single_time, started.elapsed()))
    })?;
    println!(
        "  {:<8} local hits: bucket lookup / engine lookup throughput {:.2}; lookup_many(100) / \
         100 lookups throughput {:.2}",
        backend.name(),
        secs(engine_time) / secs(bucket_time).max(1e-9),
        secs(single_time) / secs(many_time).max(1e-9),
    );
    Ok(())
}

fn storm(backend: Backend, rt: &tokio::runtime::Runtime) -> Result<()> {
    const NOTIFICATIONS: u64 = 1_000;
    let tmp = tempfile::tempdir()?;
    let engine = filled(backend, &tmp.path().join("b"), 2 * NOTIFICATIONS)?;
    let lake = Arc::new(MemoryLake::new());
    let batch: WriteBatch = (0..2 * NOTIFICATIONS)
        .map(|i| tidemark::Record::put(key(i), vec![0u8; 8], i))
        .collect();
    lake.append_batch(&batch)?;
    let bucket = HistoricalBucket::new(engine, lake.clone());
    let (moving, still) = rt.block_on(async {
        // Snapshots are committed before the timed region; only the notifications are timed.
        let moving: Vec<_> = (1..=NOTIFICATIONS)
            .map(|end| lake.commit(end))
            .collect::<tidemark::BucketResult<_>>()?;
        let started = Instant::now();
        for s in &moving {
            bucket.on_lake_progress(*s).await?;
        }
        let moving_time = started.elapsed();
        // The same number of new snapshots at an unchanged end: a refresh each, no W write.
        let still: Vec<_> = (0..NOTIFICATIONS)
            .map(|_| lake.compact())
            .collect::<tidemark::BucketResult<_>>()?;
        let started = Instant::now();
        for s in &still {
            bucket.on_lake_progress(*s).await?;
        }
        Ok::<_, tidemark::BucketError>((moving_time, started.elapsed()))
    })?;
    println!(
        "  {:<8} {NOTIFICATIONS} notifications: moving W {:.1} µs each, not moving W {:.1} µs \
         each (ratio {:.1})",
        backend.name(),
        secs(moving) * 1e6 / NOTIFICATIONS as f64,
        secs(still) * 1e6 / NOTIFICATIONS as f64,
        secs(moving) / secs(still).max(1e-9)
    );
    Ok(())
}

fn run(args: &Args) -> Result<()> {
    let backends: Vec<Backend> = tidemark_benches::disk_backends()
        .into_iter()
        .filter(|b| args.backends.is_empty() || args.backends.iter().any(|n| n == b.name()))
        .collect();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    println!("fixed reclaim of {COVERED} covered entries:");
    for &b in &backends {
        fixed_reclaim(b, &args.sizes)?;
    }
    println!("drain in 100 watermark steps of 1 %, scheduler reclaiming after each:");
    for &b in &backends {
        drain(b, args.drain_keys, &rt)?;
    }
    println!("read path ({} lookups):", args.lookups);
    for &b in &backends {
        read_path(b, args.lookups, &rt)?;
    }
    println!("notification storm:");
    for &b in &backends {
        storm(b, &rt)?;
    }
    Ok(())
}

fn main() -> ExitCode {
    let args = Args::parse();
    tidemark_benches::exit_code("reclaim-cost", run(&args))
}
