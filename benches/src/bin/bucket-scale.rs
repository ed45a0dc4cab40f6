//! Report: what many open buckets cost the process, per disk backend, at 10, 100 and 1,000
//! buckets: threads, open file descriptors, resident memory, and the time to open them all (and to
//! reopen them after closing).
//!
//! `cargo run --release -p tidemark-benches --bin bucket-scale -- [--buckets 10,100,1000]
//! [--records 100] [--fd-limit 1024] [--backends sled,redb,rocksdb]`
//!
//! Each (backend, count) runs in a fresh child process (this binary re-executed), so one
//! measurement's threads, descriptors and memory never leak into the next. The child lowers its
//! soft descriptor limit to `--fd-limit` (default 1,024, the usual default of a login shell) so
//! the figures are those of a host that did not raise it; `--fd-limit 0` keeps the inherited one.
//! In the child every bucket is opened through `Backend::open_with` with the backend's context
//! sized for the count (`BackendConfig::with_budget`). The first `--written` (default 100) are
//! given 100 records (synced), their watermarks advanced over a tenth of them and reclaimed; then
//! the rest are opened and left idle, which gives an idle bucket's share of resident memory (the
//! growth over them, per bucket); then the idle ones are written, advanced and reclaimed too, and
//! the figures are read with every bucket open. Then all are closed and reopened, and one record
//! of each read back.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a report, not library code

use std::path::Path;
use std::process::{Command, ExitCode};
use std::time::{Duration, Instant};

use clap::Parser;
use tidemark::{Backend, BackendConfig, Engine, EngineHandle, EngineOptions, LocalLookup, Result};
use tidemark_disk::process::{self, ProcessUsage};

#[derive(Debug, Parser)]
struct Args {
    /// Bucket counts to measure.
    #[arg(long, value_delimiter = ',', default_value = "10,100,1000")]
    buckets: Vec<usize>,
    /// Records written to each bucket.
    #[arg(long, default_value_t = 100)]
    records: u64,
    /// Buckets written before the rest are opened idle (for the idle share of memory).
    #[arg(long, default_value_t = 100)]
    written: usize,
    /// Soft file-descriptor limit the child runs under (0: the inherited limit).
    #[arg(long, default_value_t = 1024)]
    fd_limit: u64,
    /// Backends (default: every compiled disk backend).
    #[arg(long, value_delimiter = ',')]
    backends: Vec<String>,
    /// Print the files the child holds open with every bucket open (which descriptors a bucket
    /// costs).
    #[arg(long)]
    list_fds: bool,
    /// Internal: run one measurement as the child process.
    #[arg(long, hide = true, num_args = 2, value_names = ["BACKEND", "BUCKETS"])]
    child: Vec<String>,
}

fn main() -> ExitCode {
    let args = Args::parse();
    if let [backend, buckets] = args.child.as_slice() {
        return child(&args, backend, buckets.parse().expect("bucket count"));
    }
    let backends = tidemark_benches::chosen_backends(&args.backends);
    println!(
        "bucket-scale: {} records per bucket, a tenth reclaimed; soft fd limit {}; one child \
         process per row (figures with every bucket open; idle = the child before its first open)",
        args.records,
        if args.fd_limit == 0 {
            "inherited".to_string()
        } else {
            args.fd_limit.to_string()
        }
    );
    println!(
        "| backend | buckets | threads (idle) | open fds (idle) | RSS MiB (idle) | idle bucket KiB | open s | reopen s | RSS MiB reopened | result |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|");
    let exe = std::env::current_exe().expect("current exe");
    let mut failed = false;
    for backend in backends {
        for &n in &args.buckets {
            let out = Command::new(&exe)
                .args(["--records", &args.records.to_string()])
                .args(["--written", &args.written.to_string()])
                .args(["--fd-limit", &args.fd_limit.to_string()])
                .args(args.list_fds.then_some("--list-fds"))
                .args(["--child", backend.name(), &n.to_string()])
                .output()
                .expect("run child");
            let stdout = String::from_utf8_lossy(&out.stdout);
            for line in stdout.lines().filter(|l| l.starts_with("FD ")) {
                println!("{line}");
            }
            match stdout.lines().find_map(|l| l.strip_prefix("ROW ")) {
                Some(row) => println!("| {backend} | {n} | {row} |"),
                None => {
                    failed = true;
                    println!(
                        "| {backend} | {n} | child failed ({}): {} |",
                        out.status,
                        String::from_utf8_lossy(&out.stderr).trim()
                    );
                }
            }
        }
    }
    if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

/// One measurement; prints `ROW <cells>` (the cells after backend and count).
fn child(args: &Args, backend: &str, buckets: usize) -> ExitCode {
    if args.fd_limit > 0 {
        process::set_fd_soft_limit(args.fd_limit).expect("set the soft fd limit");
    }
    let backend: Backend = backend.parse().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let idle = ProcessUsage::current();
    let config = BackendConfig::default()
        .with_budget(backend, buckets)
        .unwrap();
    let (result, usage, open, reopen, idle_share) =
        match measure(backend, &config, dir.path(), buckets, args) {
            Ok(m) => (
                "ok".to_string(),
                m.usage,
                m.open,
                Some(m.reopen),
                m.idle_share,
            ),
            Err(failure) => {
                let (opened, e, usage, open) = *failure;
                (
                    format!("failed opening bucket {opened}: {e}"),
                    usage,
                    open,
                    None,
                    None,
                )
            }
        };
    let reopened = ProcessUsage::current();
    let mib = |b: Option<u64>| b.map_or("?".into(), |b| format!("{:.0}", b as f64 / 1048576.0));
    let n = |v: Option<u64>| v.map_or("?".into(), |v| v.to_string());
    println!(
        "ROW {} ({}) | {} ({}) | {} ({}) | {} | {:.2} | {} | {} | {}",
        n(usage.threads),
        n(idle.threads),
        n(usage.open_fds),
        n(idle.open_fds),
        mib(usage.rss_bytes),
        mib(idle.rss_bytes),
        idle_share.map_or("-".into(), |b| format!("{:.1}", b as f64 / 1024.0)),
        open.as_secs_f64(),
        reopen.map_or("-".into(), |d| format!("{:.2}", d.as_secs_f64())),
        mib(reopened.rss_bytes),
        result
    );
    ExitCode::SUCCESS
}

type Failure = Box<(usize, tidemark::Error, ProcessUsage, Duration)>;

/// What one child measured.
struct Measured {
    /// With every bucket open, written and reclaimed.
    usage: ProcessUsage,
    /// Time spent opening them.
    open: Duration,
    /// Time spent reopening them after all were closed.
    reopen: Duration,
    /// Resident memory an idle bucket adds, bytes: the growth while the buckets past the
    /// written ones are opened idle, per bucket (`None` without idle ones).
    idle_share: Option<u64>,
}

/// Opens and fills the first `--written` buckets, opens the rest idle (for the idle share of
/// memory), fills and reclaims those too, reads the usage, then closes and reopens them all.
fn measure(
    backend: Backend,
    config: &BackendConfig,
    root: &Path,
    buckets: usize,
    args: &Args,
) -> std::result::Result<Measured, Failure> {
    let mut open_time = Duration::ZERO;
    let mut engines = Vec::with_capacity(buckets);
    let written = args.written.min(buckets);
    let fail = |i: usize, open_time: Duration| {
        move |e: tidemark::Error| Box::new((i, e, ProcessUsage::current(), open_time))
    };
    let mut with_written = None;
    for i in 0..buckets {
        if i == written {
            // The written buckets' memory has settled before the idle ones are counted.
            for engine in &engines {
                let engine: &EngineHandle = engine;
                engine.flush().map_err(fail(i, open_time))?;
            }
            with_written = ProcessUsage::current().rss_bytes;
        }
        let started = Instant::now();
        let opened = backend.open_with(
            &root.join(format!("bucket-{i}")),
            EngineOptions::default(),
            config,
        );
        open_time += started.elapsed();
        let engine = opened.map_err(fail(i, open_time))?;
        if i < written {
            fill(&engine, args.records).map_err(fail(i, open_time))?;
        }
        engines.push(engine);
    }
    let idle = (buckets - written) as u64;
    let idle_share = with_written
        .zip(ProcessUsage::current().rss_bytes)
        .filter(|_| idle > 0)
        .map(|(before, after)| after.saturating_sub(before) / idle);
    for (i, engine) in engines.iter().enumerate().skip(written) {
        fill(engine, args.records).map_err(fail(i, open_time))?;
    }
    let usage = ProcessUsage::current();
    if args.list_fds {
        for entry in std::fs::read_dir("/proc/self/fd")
            .into_iter()
            .flatten()
            .flatten()
        {
            if let Ok(target) = std::fs::read_link(entry.path()) {
                println!("FD {}", target.display());
            }
        }
    }
    drop(engines);
    let started = Instant::now();
    let mut engines = Vec::with_capacity(buckets);
    for i in 0..buckets {
        let engine = backend
            .open_with(
                &root.join(format!("bucket-{i}")),
                EngineOptions::default(),
                config,
            )
            .map_err(|e| Box::new((i, e, ProcessUsage::current(), open_time)))?;
        engines.push(engine);
    }
    let reopen = started.elapsed();
    for (i, engine) in engines.iter().enumerate() {
        let last = args.records - 1;
        match engine.lookup(format!("k{last}").as_bytes()) {
            Ok(LocalLookup::Value { offset, .. }) if offset == last => {}
            other => panic!("bucket {i} lost its data after reopen: {other:?}"),
        }
    }
    Ok(Measured {
        usage,
        open: open_time,
        reopen,
        idle_share,
    })
}

/// `records` puts at offsets `0..records`, the watermark over the first tenth, one reclaim.
fn fill(engine: &EngineHandle, records: u64) -> Result<()> {
    let mut batch = tidemark::WriteBatch::new();
    for i in 0..records {
        batch.put(format!("k{i}").into_bytes(), vec![b'v'; 100], i);
    }
    engine.apply(&batch)?;
    engine.advance_watermark(records / 10)?;
    engine.reclaim()?;
    Ok(())
}
