//! Memory of sled stores released and reopened on demand: a context whose stores are released
//! keeps a reopened database about as small as a first-opened one (it fixes glibc's mmap
//! threshold: see `SledContextOptions::fixed_mmap_threshold`). Measured in a child process of
//! its own, so that no other test's memory counts.
// The effect and its fix are glibc's, and resident memory is read from Linux's /proc.
#![cfg(all(target_os = "linux", target_env = "gnu"))]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

use std::path::Path;
use std::process::Command;

use tidemark_backend_sled::{BackendContext, SledContext, SledContextOptions, SledEngine};
use tidemark_disk::budget::CacheBudget;
use tidemark_disk::process::ProcessUsage;
use tidemark_engine_api::{Engine, EngineOptions, WriteBatch};

const CHILD_ENV: &str = "TIDEMARK_SLED_REOPENED_MEMORY_DIR";
const TEST: &str = "reopened_stores_stay_about_as_small_as_first_opened_ones";
const BUCKETS: usize = 160;
const OPEN_STORES: usize = 64;
const ROUNDS: usize = 4;
/// What the rounds of reopens may add to resident memory: with glibc's dynamic threshold (the
/// option off) they added 230 MiB, about 4 MiB for each of the 64 open reopened databases.
const MAX_GROWTH: u64 = 48 << 20;

#[test]
fn reopened_stores_stay_about_as_small_as_first_opened_ones() {
    if let Ok(dir) = std::env::var(CHILD_ENV) {
        child(Path::new(&dir));
        return;
    }
    let root = tempfile::tempdir().unwrap();
    let output = Command::new(std::env::current_exe().unwrap())
        .args([TEST, "--exact", "--nocapture", "--test-threads", "1"])
        .env(CHILD_ENV, root.path())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "the child failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let growth: u64 = stdout
        .lines()
        .find_map(|line| line.split_once("reopen growth bytes: ").map(|(_, n)| n))
        .unwrap_or_else(|| panic!("no figure from the child:\n{stdout}"))
        .trim()
        .parse()
        .unwrap();
    println!("{ROUNDS} rounds of reopens added {} KiB", growth >> 10);
    assert!(
        growth < MAX_GROWTH,
        "{ROUNDS} rounds of reopens over {BUCKETS} buckets with {OPEN_STORES} open stores grew \
         resident memory by {} MiB",
        growth >> 20
    );
}

/// Opens the buckets under a bound a third their number, writes each, then looks every bucket
/// up in turn for a few rounds (each lookup reopens a released store and releases another), and
/// prints how much resident memory the rounds added.
fn child(root: &Path) {
    let context = SledContext::new(SledContextOptions {
        budget: CacheBudget {
            max_buckets: BUCKETS,
            ..CacheBudget::default()
        },
        max_open_stores: OPEN_STORES,
        ..SledContextOptions::default()
    })
    .unwrap();
    let options = EngineOptions::default().with_sync_writes(false);
    let engines: Vec<SledEngine> = (0..BUCKETS)
        .map(|i| {
            let engine =
                SledEngine::open_in(&context, &root.join(format!("b{i}")), options.clone())
                    .unwrap();
            let mut batch = WriteBatch::new();
            for o in 0..100u64 {
                batch.put(format!("k{o}"), vec![7u8; 128], o);
            }
            engine.apply(&batch).unwrap();
            engine
        })
        .collect();
    // Every store was opened once; all but the last `OPEN_STORES` were released since.
    let before = ProcessUsage::current().rss_bytes.unwrap();
    for _ in 0..ROUNDS {
        for engine in &engines {
            engine.lookup(b"k1").unwrap();
        }
    }
    let after = ProcessUsage::current().rss_bytes.unwrap();
    println!("reopen growth bytes: {}", after.saturating_sub(before));
}
