//! Hundreds of buckets in one process share one context: one cache, one memtable budget, one rate
//! limiter and one bounded set of background threads. Its own test binary, so the thread count
//! it prints is this scenario's alone.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

use backend_rocksdb::{ContextOptions, RocksDbContext, RocksDbEngine};
use engine_api::{Engine, EngineOptions, LocalLookup};

fn process_threads() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("Threads:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd")
        .map(|d| d.count())
        .unwrap_or(0)
}

#[test]
fn two_hundred_buckets_share_one_context() {
    const BUCKETS: u64 = 200;
    let ctx = RocksDbContext::new(ContextOptions::default()).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let threads_before = process_threads();

    let engines: Vec<RocksDbEngine> = (0..BUCKETS)
        .map(|b| {
            let dir = tmp.path().join(format!("bucket-{b:03}"));
            // Unsynced writes: 200 fsyncs per round would only measure the disk.
            let options = EngineOptions::default().with_sync_writes(false);
            RocksDbEngine::open_in(&ctx, &dir, options).unwrap()
        })
        .collect();
    for (b, engine) in engines.iter().enumerate() {
        for offset in 0..5u64 {
            engine
                .put(
                    format!("key-{offset}").as_bytes(),
                    format!("bucket {b}").as_bytes(),
                    offset,
                )
                .unwrap();
        }
        engine.advance_watermark(2).unwrap();
    }
    // Reclaim a quarter of them, so background flush and compaction work actually ran.
    for engine in engines.iter().step_by(4) {
        assert_eq!(engine.reclaim().unwrap().values_removed, 2);
    }
    let threads = process_threads();
    println!(
        "{BUCKETS} buckets open: {threads} threads in the process ({threads_before} before), \
         {} open file descriptors, memtables {} bytes, block cache {} bytes",
        open_fds(),
        ctx.memtable_usage(),
        ctx.block_cache_usage()
    );
    // A thread pool per bucket would mean hundreds of threads; the shared pools add a handful.
    assert!(threads < 100, "{threads} threads for {BUCKETS} buckets");

    for (b, engine) in engines.iter().enumerate() {
        let expected = LocalLookup::Value {
            offset: 4,
            bytes: format!("bucket {b}").into_bytes(),
        };
        assert_eq!(engine.lookup(b"key-4").unwrap(), expected);
        let reclaimed = b % 4 == 0;
        assert_eq!(
            engine.lookup(b"key-0").unwrap() == LocalLookup::Miss,
            reclaimed,
            "bucket {b}"
        );
    }
}
