//! The scale scenario: a thousand buckets of one backend open at once in one process, writing,
//! reclaiming and reopening, within the resources the backend states for them
//! ([`tidemark_disk::budget::ResourceBounds`]).
//!
//! Threads, descriptors and memory are process-wide, so the scenario runs in a child process of
//! its own (the test binary re-executed for this one test, [`run_isolated`]): nothing else in the
//! process opens files or starts threads while it measures. The child runs under a soft
//! descriptor limit of 1,024 (the usual default) whenever the descriptors admission reserves for
//! the buckets (each bucket's ceiling) fit in it; otherwise it first shows that the open that
//! would exceed the limit is a clear [`Error::ResourceLimit`], then raises the limit to the value
//! the message names (the hard limit too, where it is lower and the process may) and goes on.
//!
//! `TIDEMARK_SCALE_BUCKETS` sets the number of buckets (default 1,000).

use tidemark_disk::budget::{FD_RESERVE, ResourceBounds};
use tidemark_disk::process::{self, ProcessUsage};
use tidemark_engine_api::{Engine, EngineOptions, Error, LocalLookup, Result, WriteBatch};

use crate::bucket_checks::{advance_and_reclaim_exactly, assert_record};
use crate::child;
use tidemark_disk::testing::TestedBackend;

use crate::factories::DiskFactory;

/// Buckets opened at once by default.
pub const DEFAULT_BUCKETS: usize = 1000;

/// Records written to each bucket; the first tenth (and a little more in some) becomes covered.
pub const RECORDS: u64 = 100;

/// The soft descriptor limit the scenario runs under when the buckets fit in it.
pub const DEFAULT_SOFT_FD_LIMIT: u64 = 1024;

/// The number of buckets: `TIDEMARK_SCALE_BUCKETS`, or [`DEFAULT_BUCKETS`].
pub fn buckets_from_env() -> usize {
    std::env::var("TIDEMARK_SCALE_BUCKETS")
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .filter(|&n| n > 0)
        .unwrap_or(DEFAULT_BUCKETS)
}

/// Runs [`run`] in a child process: the test binary re-executed for the one test `test_name`
/// (its full name as the harness lists it, e.g. `sled::scale`), see [`child::run_isolated`].
pub fn run_isolated<B: TestedBackend>(test_name: &str, factory: &DiskFactory<B>) {
    child::run_isolated(test_name, &format!("scale {}:", B::BACKEND), || {
        run(factory, buckets_from_env())
    });
}

/// The scenario, in this process: opens `buckets` buckets from a context sized for them, writes
/// and reclaims in each, checks the process's threads, descriptors and memory against the
/// backend's bounds, checks that one bucket more is refused clearly and that a closed bucket's
/// share is free at once, then closes all and reopens them with their data and watermarks,
/// within the same bounds.
pub fn run<B: TestedBackend>(factory: &DiskFactory<B>, buckets: usize) {
    let name = B::BACKEND;
    let root = tempfile::tempdir().expect("temporary directory");
    let context = factory.scale_context(buckets).expect("scale context");
    let bounds = factory.bounds(&context, buckets);
    let idle = ProcessUsage::current();
    let idle_fds = idle.open_fds.unwrap_or(0);
    let needed = idle_fds + bounds.fds_reserved + FD_RESERVE;
    assert!(
        bounds.fds <= bounds.fds_reserved,
        "{name}: the buckets hold {} descriptors, more than the {} reserved for them",
        bounds.fds,
        bounds.fds_reserved
    );
    let dir = |i: usize| root.path().join(format!("bucket-{i}"));
    let options = EngineOptions::default().with_sync_writes(false);

    let mut engines = Vec::with_capacity(buckets);
    let (mut buckets, mut bounds) = (buckets, bounds);
    process::set_fd_soft_limit(DEFAULT_SOFT_FD_LIMIT).expect("lower the soft fd limit");
    if needed > DEFAULT_SOFT_FD_LIMIT {
        // Does not fit the default: the open that would exceed it must say so, not fail inside
        // the engine. Then raise the limit as the message says and continue with what is open.
        let (i, text) = open_until_refused(factory, &context, &dir, &mut engines, buckets);
        let raise_to = crate::headroom::limit_named(&text)
            .unwrap_or_else(|| panic!("{name}: the refusal names no limit to raise to: {text}"));
        assert!(
            raise_to >= bounds.fds_reserved + FD_RESERVE,
            "{name}: the refusal asks for {raise_to}, less than the {} reserved for {buckets} \
             buckets and the reserve",
            bounds.fds_reserved
        );
        // As `ulimit -n` would: the hard limit too where it is lower, if the process may.
        let raised = process::set_fd_limit(raise_to)
            .or_else(|_| process::set_fd_soft_limit(raise_to))
            .expect("raise the soft fd limit");
        println!(
            "scale {name}: bucket {i} refused under a soft limit of {DEFAULT_SOFT_FD_LIMIT} \
             ({text}); limit raised to {:?}",
            raised.soft
        );
        if raised.soft < Some(raise_to) {
            // The hard limit is lower and this process may not raise it: the buckets it admits
            // run the scenario, and the open past them must again be refused clearly.
            let (i, text) = open_until_refused(factory, &context, &dir, &mut engines, buckets);
            println!(
                "scale {name}: NOTE {buckets} buckets need a limit of {raise_to}, above the hard \
                 limit {:?} this process may not raise; the scenario runs with the {i} buckets \
                 it admits (bucket {i} refused: {text})",
                raised.hard
            );
            buckets = i;
            bounds = factory.bounds(&context, buckets);
        }
    }
    for i in engines.len()..buckets {
        let engine = factory
            .open_in(&context, &dir(i), options.clone())
            .unwrap_or_else(|e| panic!("{name}: open bucket {i} of {buckets}: {e}"));
        engines.push(engine);
    }
    for (i, engine) in engines.iter().enumerate() {
        fill(engine, i).unwrap_or_else(|e| panic!("{name}: fill bucket {i}: {e}"));
    }
    let usage = ProcessUsage::current();
    report(name, buckets, &idle, &usage, &bounds);
    check_bounds(name, &idle, &usage, &bounds);

    // The budget is full: one more is refused clearly and creates nothing; a closed bucket's
    // share is free at once, and that bucket reopens with its data.
    let extra = dir(buckets);
    match factory.open_in(&context, &extra, options.clone()) {
        Err(Error::ResourceLimit { .. }) => {}
        Err(e) => panic!("{name}: bucket {buckets} beyond a budget of {buckets}: {e}"),
        Ok(_) => panic!("{name}: bucket {buckets} opened beyond a budget of {buckets}"),
    }
    assert!(
        !extra.exists(),
        "{name}: a refused open created {}",
        extra.display()
    );
    drop(engines.pop());
    let last = buckets - 1;
    let engine = factory
        .open_in(&context, &dir(last), options.clone())
        .unwrap_or_else(|e| panic!("{name}: reopen bucket {last} right after closing it: {e}"));
    check_bucket(name, &engine, last);
    engines.push(engine);

    drop(engines);
    let engines: Vec<_> = (0..buckets)
        .map(|i| {
            factory
                .open_in(&context, &dir(i), options.clone())
                .unwrap_or_else(|e| panic!("{name}: reopen bucket {i}: {e}"))
        })
        .collect();
    for (i, engine) in engines.iter().enumerate() {
        check_bucket(name, engine, i);
    }
    // Closing gave every bucket's descriptors and threads back: reopened, they hold no more
    // than the first time (a leak would double them).
    let reopened = ProcessUsage::current();
    check_bounds(name, &idle, &reopened, &bounds);
}

/// Opens buckets from `context` after those in `engines` until one is refused, which must be a
/// clear [`Error::ResourceLimit`] naming the limit (`ulimit -n`) that created nothing, before
/// `buckets` are open. Returns the refused bucket's number and the refusal's text.
fn open_until_refused<B: TestedBackend>(
    factory: &DiskFactory<B>,
    context: &B::Context,
    dir: &dyn Fn(usize) -> std::path::PathBuf,
    engines: &mut Vec<tidemark_disk::DiskEngine<B>>,
    buckets: usize,
) -> (usize, String) {
    let name = B::BACKEND;
    let limit = process::fd_limit().soft;
    let options = EngineOptions::default().with_sync_writes(false);
    let (i, err) = loop {
        let i = engines.len();
        assert!(
            i < buckets,
            "{name}: {buckets} buckets opened under a soft limit of {limit:?} though the \
             descriptors reserved for them do not fit"
        );
        match factory.open_in(context, &dir(i), options.clone()) {
            Ok(engine) => engines.push(engine),
            Err(e) => break (i, e),
        }
    };
    let text = err.to_string();
    assert!(
        matches!(err, Error::ResourceLimit { .. }) && text.contains("ulimit -n"),
        "{name}: bucket {i} under a soft limit of {limit:?} failed without naming the limit: {text}"
    );
    assert!(
        !dir(i).exists(),
        "{name}: a refused open created {}",
        dir(i).display()
    );
    (i, text)
}

/// The watermark bucket `i` is given: a tenth of its records, and up to 9 more so that buckets
/// differ.
fn watermark_of(i: usize) -> u64 {
    RECORDS / 10 + (i % 10) as u64
}

/// The key of record `j` and its payload in bucket `i` (distinct per bucket, so a bucket serving
/// another's data is caught).
fn record(i: usize, j: u64) -> (Vec<u8>, Vec<u8>) {
    (
        format!("k{j:03}").into_bytes(),
        format!("bucket {i} record {j}").into_bytes(),
    )
}

/// Writes the bucket's records (every tenth a delete), advances its watermark and reclaims; the
/// reclaim must remove exactly the covered records.
fn fill<E: Engine>(engine: &E, i: usize) -> Result<()> {
    let mut batch = WriteBatch::new();
    for j in 0..RECORDS {
        let (key, value) = record(i, j);
        if j % 10 == 9 {
            batch.delete(key, j);
        } else {
            batch.put(key, value, j);
        }
    }
    engine.apply(&batch)?;
    advance_and_reclaim_exactly(engine, watermark_of(i))
}

/// After a reopen: W and the applied end restored, covered records gone, the rest exact.
fn check_bucket<E: Engine>(name: &str, engine: &E, i: usize) {
    let w = watermark_of(i);
    assert_eq!(
        (engine.watermark(), engine.applied_end()),
        (w, RECORDS),
        "{name}: bucket {i} watermark and applied end"
    );
    for j in 0..RECORDS {
        let (key, value) = record(i, j);
        let expected = if j < w {
            LocalLookup::Miss
        } else if j % 10 == 9 {
            LocalLookup::Tombstone { offset: j }
        } else {
            LocalLookup::Value {
                offset: j,
                bytes: value,
            }
        };
        assert_record(name, engine, i, j, &key, &expected);
    }
}

fn growth(now: Option<u64>, before: Option<u64>) -> Option<u64> {
    Some(now?.saturating_sub(before?))
}

fn check_bounds(name: &str, idle: &ProcessUsage, usage: &ProcessUsage, bounds: &ResourceBounds) {
    if let Some(threads) = growth(usage.threads, idle.threads) {
        assert!(
            threads <= bounds.threads,
            "{name}: {threads} threads added, the backend states at most {}",
            bounds.threads
        );
    }
    if let Some(fds) = growth(usage.open_fds, idle.open_fds) {
        assert!(
            fds <= bounds.fds,
            "{name}: {fds} descriptors added, the backend states at most {}",
            bounds.fds
        );
    }
    if let Some(rss) = growth(usage.rss_bytes, idle.rss_bytes) {
        assert!(
            rss <= bounds.memory_bytes,
            "{name}: {} MiB of resident memory added, the backend states at most {} MiB",
            rss >> 20,
            bounds.memory_bytes >> 20
        );
    }
}

fn report(
    name: &str,
    buckets: usize,
    idle: &ProcessUsage,
    usage: &ProcessUsage,
    bounds: &ResourceBounds,
) {
    let show = |v: Option<u64>| v.map_or_else(|| "?".to_string(), |v| v.to_string());
    println!(
        "scale {name}: {buckets} buckets open: threads {} (idle {}, bound +{}), descriptors {} \
         (idle {}, bound +{}), RSS {} MiB (idle {} MiB, bound +{} MiB)",
        show(usage.threads),
        show(idle.threads),
        bounds.threads,
        show(usage.open_fds),
        show(idle.open_fds),
        bounds.fds,
        show(usage.rss_bytes.map(|b| b >> 20)),
        show(idle.rss_bytes.map(|b| b >> 20)),
        bounds.memory_bytes >> 20
    );
}

/// Stamps the scale test for one backend: `#[test] fn scale()`, run in a child process. Use it
/// inside the backend's module of the conformance test (`mod sled { ... }`), whose name is the
/// test's prefix.
#[macro_export]
macro_rules! scale_case {
    ($factory:expr) => {
        $crate::__child_test! {
            /// A thousand buckets (`TIDEMARK_SCALE_BUCKETS`) open, write, reclaim and reopen within
            /// the backend's stated budget, in a child process.
            scale, $crate::scale::run_isolated, $factory
        }
    };
}
