//! Scenarios that hold a [`Releasing`] backend to the layer's promises (cargo feature
//! `testing`): the backends' tests run them on their real storages with a context whose bound
//! is smaller than the buckets they open.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use tidemark_engine_api::{Engine, EngineOptions, LocalLookup, Result, WriteBatch};

use super::{Releasable, Releasing};
use crate::DiskEngine;
use crate::context::BackendContext;

/// The engine the scenarios open.
pub type Released<S> = DiskEngine<Releasing<S>>;

fn open<S: Releasable>(context: &S::Context, dir: &Path, options: EngineOptions) -> Released<S> {
    Released::<S>::open_in(context, dir, options)
        .unwrap_or_else(|e| panic!("open {}: {e}", dir.display()))
}

fn bound<S: Releasable>(context: &S::Context) -> usize {
    context
        .open_stores()
        .expect("a context with a bound on open stores")
        .max_open_stores()
}

fn open_now<S: Releasable>(engines: &[Released<S>]) -> usize {
    engines.iter().filter(|e| e.storage().is_open()).count()
}

/// Leaves bucket `i` released: the buckets after it are used until the bound pushed it out.
fn push_out<S: Releasable>(engines: &[Released<S>], i: usize) {
    for (j, other) in engines.iter().enumerate().cycle().skip(i + 1) {
        if !engines[i].storage().is_open() {
            return;
        }
        if j != i {
            other.lookup(b"k0").unwrap();
        }
    }
}

/// Bucket `i`'s writes: `k0..k19` at offsets `0..20`, `k15` deleted at 20, `k12` written again
/// at 21.
fn write_bucket<S: Releasable>(engine: &Released<S>, i: usize) {
    let mut batch = WriteBatch::new();
    for j in 0..20u64 {
        batch.put(format!("k{j}"), format!("b{i}-v{j}"), j);
    }
    engine.apply(&batch).unwrap();
    let mut batch = WriteBatch::new();
    batch
        .delete("k15", 20)
        .put("k12", format!("b{i}-again"), 21);
    engine.apply(&batch).unwrap();
}

/// What bucket `i` answers for `k{j}` with `W` at `watermark` after a reclaim (`None`: before).
fn expected(i: usize, j: u64, reclaimed_below: Option<u64>) -> LocalLookup {
    let (offset, bytes) = match j {
        15 => return LocalLookup::Tombstone { offset: 20 },
        12 => (21, format!("b{i}-again")),
        _ => (j, format!("b{i}-v{j}")),
    };
    if reclaimed_below.is_some_and(|w| offset < w) {
        return LocalLookup::Miss;
    }
    LocalLookup::Value {
        offset,
        bytes: bytes.into_bytes(),
    }
}

fn check_bucket<S: Releasable>(engine: &Released<S>, i: usize, reclaimed_below: Option<u64>) {
    for j in 0..20u64 {
        assert_eq!(
            engine.lookup(format!("k{j}").as_bytes()).unwrap(),
            expected(i, j, reclaimed_below),
            "bucket {i}, k{j}"
        );
    }
}

/// `buckets` buckets (more than the context's bound) each written, released, read back,
/// their watermark advanced and their covered entries reclaimed while released, then closed
/// and reopened with it. The context's bound is never exceeded; stores are really released and
/// reopened.
pub fn round_trip<S: Releasable>(context: &S::Context, root: &Path, buckets: usize) {
    let max = bound::<S>(context);
    assert!(
        buckets > max,
        "{buckets} buckets do not exceed the bound {max}"
    );
    let stores = context.open_stores().unwrap().clone();
    let dir = |i: usize| root.join(format!("bucket-{i}"));
    let engines: Vec<_> = (0..buckets)
        .map(|i| open::<S>(context, &dir(i), EngineOptions::default()))
        .collect();
    for (i, engine) in engines.iter().enumerate() {
        write_bucket(engine, i);
        assert!(
            stores.open_stores() <= max,
            "{} stores open",
            stores.open_stores()
        );
        assert!(open_now(&engines) <= max);
    }
    assert!(stores.releases() > 0, "nothing was released");
    for (i, engine) in engines.iter().enumerate() {
        push_out(&engines, i);
        assert!(!engine.storage().is_open());
        // Statistics of a released store need no reopen.
        let stats = engine.stats().unwrap();
        assert_eq!(stats.live_entries, 20, "bucket {i}");
        assert_eq!(stats.applied_end, 22);
        assert!(!engine.storage().is_open(), "stats reopened bucket {i}");
        check_bucket(engine, i, None);
    }
    let rebuilds: Vec<u64> = engines
        .iter()
        .map(|e| e.stats().unwrap().counters.space_rebuilds)
        .collect();
    for (i, engine) in engines.iter().enumerate() {
        push_out(&engines, i);
        let update = engine.advance_watermark(10).unwrap();
        assert!(
            update.moved && update.current == 10,
            "bucket {i}: {update:?}"
        );
        push_out(&engines, i);
        let report = engine.reclaim().unwrap();
        assert_eq!(report.threshold, 10);
        assert_eq!(report.values_removed, 10, "bucket {i}: {report:?}");
        assert_eq!(report.tombstones_removed, 0, "bucket {i}: {report:?}");
        engine.wait_for_background_work().unwrap();
        push_out(&engines, i);
        check_bucket(engine, i, Some(10));
        assert!(stores.open_stores() <= max);
    }
    for (i, engine) in engines.iter().enumerate() {
        let counters = engine.stats().unwrap().counters;
        assert!(
            counters.space_rebuilds >= rebuilds[i],
            "bucket {i}: space rebuilds went back"
        );
        assert_eq!(counters.reclaimed_values, 10, "bucket {i}");
    }
    assert!(stores.reopens() > 0, "nothing was reopened");
    drop(engines);
    assert_eq!(
        stores.open_stores(),
        0,
        "a closed engine left its store open"
    );
    let engines: Vec<_> = (0..buckets)
        .map(|i| open::<S>(context, &dir(i), EngineOptions::default()))
        .collect();
    for (i, engine) in engines.iter().enumerate() {
        assert_eq!(engine.watermark(), 10, "bucket {i}");
        assert_eq!(engine.applied_end(), 22, "bucket {i}");
        check_bucket(engine, i, Some(10));
        assert_eq!(engine.stats().unwrap().live_entries, 10, "bucket {i}");
    }
    assert!(stores.open_stores() <= max);
}

/// A writer per bucket and readers over every bucket at once, on more buckets than the bound:
/// every lookup finds each key at least as new as what its writer had acknowledged when the
/// lookup started, never a miss, while watermarks advance and reclaims run.
pub fn concurrent<S: Releasable>(context: &S::Context, root: &Path, buckets: usize, batches: u64) {
    const KEYS: u64 = 8;
    let stores = context.open_stores().unwrap().clone();
    let options = EngineOptions::default().with_sync_writes(false);
    let engines: Arc<Vec<Released<S>>> = Arc::new(
        (0..buckets)
            .map(|i| open::<S>(context, &root.join(format!("c-{i}")), options.clone()))
            .collect(),
    );
    let acked: Arc<Vec<AtomicU64>> = Arc::new((0..buckets).map(|_| AtomicU64::new(0)).collect());
    let done = Arc::new(AtomicU64::new(0));
    std::thread::scope(|scope| {
        for b in 0..buckets {
            let (engines, acked, done) = (&engines, &acked, &done);
            scope.spawn(move || {
                // Counted even when this writer panics, so the readers stop and the scope
                // hands its panic on instead of waiting for them forever.
                let _finished = Finished(done);
                let engine = &engines[b];
                for n in 0..batches {
                    let first = n * KEYS;
                    let mut batch = WriteBatch::new();
                    for o in first..first + KEYS {
                        batch.put(format!("k{}", o % KEYS), o.to_be_bytes().to_vec(), o);
                    }
                    engine.apply(&batch).unwrap();
                    acked[b].store(first + KEYS, Ordering::Release);
                    if n % 5 == 4 {
                        engine
                            .advance_watermark(first.saturating_sub(KEYS))
                            .unwrap();
                        engine.reclaim().unwrap();
                    }
                }
            });
        }
        for r in 0..2u64 {
            let (engines, acked, done) = (&engines, &acked, &done);
            scope.spawn(move || {
                let mut i = r;
                while done.load(Ordering::Acquire) < buckets as u64 {
                    // Readers that never pause would reopen a store at every lookup and starve
                    // the writers (a working set above the bound thrashes by design).
                    std::thread::sleep(std::time::Duration::from_micros(500));
                    i = i
                        .wrapping_mul(6364136223846793005)
                        .wrapping_add(1442695040888963407);
                    let b = (i >> 33) as usize % buckets;
                    let k = (i >> 17) % KEYS;
                    let end = acked[b].load(Ordering::Acquire);
                    if end == 0 {
                        continue;
                    }
                    // The newest write of k below the acknowledged end.
                    let newest = (end - KEYS) + k;
                    match engines[b].lookup(format!("k{k}").as_bytes()).unwrap() {
                        LocalLookup::Value { offset, bytes } => {
                            assert!(offset >= newest, "bucket {b} k{k}: {offset} < {newest}");
                            assert_eq!(bytes, offset.to_be_bytes());
                        }
                        other => panic!("bucket {b} k{k}: {other:?} after end {end}"),
                    }
                }
            });
        }
    });
    assert!(stores.releases() > 0, "nothing was released");
    assert!(stores.open_stores() <= stores.max_open_stores());
    for (b, engine) in engines.iter().enumerate() {
        assert_eq!(engine.applied_end(), batches * KEYS, "bucket {b}");
    }
}

/// Counts a finished writer when dropped, also when it unwinds.
struct Finished<'a>(&'a AtomicU64);

impl Drop for Finished<'_> {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::AcqRel);
    }
}

const CHILD_ENV: &str = "TIDEMARK_RELEASE_CRASH_TEST";
const DIR_ENV: &str = "TIDEMARK_RELEASE_CRASH_DIR";
const ACKED_ENV: &str = "TIDEMARK_RELEASE_CRASH_ACKED";
const VERIFY_ENV: &str = "TIDEMARK_RELEASE_CRASH_VERIFY_ONLY";

/// Per bucket: the applied end and `W` the killed children acknowledged.
type Acked = BTreeMap<usize, (u64, u64)>;

fn batch_at(bucket: usize, first: u64) -> WriteBatch {
    let mut batch = WriteBatch::new();
    for o in first..first + 4 {
        batch.put(format!("k{}", o % 16), format!("b{bucket}-{o}"), o);
    }
    batch
}

/// A crash while buckets are released and reopened loses nothing acknowledged: children write
/// synced batches round-robin over `buckets` buckets (more than the bound, so every few calls
/// release a store and reopen another), advancing watermarks and reclaiming, and are killed
/// (SIGKILL) at `kills` moments; each next child reopens every bucket and finds at least what
/// was acknowledged, every acknowledged key right.
///
/// `test_name` is the calling test's full name (the test binary is re-executed for it); the
/// buckets live under `root`.
pub fn crash_while_releasing<S: Releasable>(
    test_name: &str,
    context: impl Fn() -> Result<S::Context>,
    root: &Path,
    buckets: usize,
    kills: u32,
) {
    if std::env::var(CHILD_ENV).as_deref() == Ok(test_name) {
        let dir = PathBuf::from(std::env::var(DIR_ENV).unwrap());
        let acked = parse_acked(&std::env::var(ACKED_ENV).unwrap_or_default());
        let verify_only = std::env::var(VERIFY_ENV).is_ok();
        crash_child::<S>(&context().unwrap(), &dir, buckets, &acked, verify_only);
        return;
    }
    let mut acked = Acked::new();
    let mut seed = 0x9e37_79b9_7f4a_7c15_u64 ^ u64::from(std::process::id());
    for kill in 0..=kills {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        let stop_after = 10 + seed % 120;
        let exe = std::env::current_exe().unwrap();
        let last = kill == kills;
        let mut command = Command::new(exe);
        command
            .args([test_name, "--exact", "--nocapture", "--test-threads=1"])
            .env(CHILD_ENV, test_name)
            .env(DIR_ENV, root)
            .env(ACKED_ENV, format_acked(&acked));
        if last {
            command.env(VERIFY_ENV, "1");
        }
        let mut child = command
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let (mut seen, mut checked, mut killed) = (0u64, false, false);
        for line in BufReader::new(stdout).lines() {
            let line = line.unwrap();
            let fields: Vec<&str> = line.split_whitespace().collect();
            // libtest may print the test's name on the same line first.
            let at = (fields.iter())
                .position(|f| matches!(*f, "ACK" | "WACK" | "CHECKED"))
                .unwrap_or(fields.len());
            match &fields[at..] {
                ["ACK", b, end] => {
                    acked.entry(b.parse().unwrap()).or_default().0 = end.parse().unwrap();
                    seen += 1;
                }
                ["WACK", b, w] => {
                    acked.entry(b.parse().unwrap()).or_default().1 = w.parse().unwrap();
                }
                ["CHECKED"] => checked = true,
                _ => {}
            }
            if !last && seen >= stop_after {
                killed = child.kill().is_ok();
                break;
            }
        }
        let status = child.wait().unwrap();
        assert!(
            checked,
            "child {kill} did not get through its checks: {status}"
        );
        assert!(killed || status.success(), "child {kill} failed: {status}");
    }
    assert!(
        acked.values().all(|(end, _)| *end > 0),
        "every bucket was written: {acked:?}"
    );
}

fn format_acked(acked: &Acked) -> String {
    acked
        .iter()
        .map(|(b, (end, w))| format!("{b}:{end}:{w}"))
        .collect::<Vec<_>>()
        .join(",")
}

fn parse_acked(text: &str) -> Acked {
    text.split(',')
        .filter(|s| !s.is_empty())
        .map(|s| {
            let v: Vec<u64> = s.split(':').map(|n| n.parse().unwrap()).collect();
            (v[0] as usize, (v[1], v[2]))
        })
        .collect()
}

/// The child: checks what the killed one acknowledged, prints `CHECKED`, then writes until
/// it is killed (or a while, for the last child).
fn crash_child<S: Releasable>(
    context: &S::Context,
    root: &Path,
    buckets: usize,
    acked: &Acked,
    verify_only: bool,
) {
    let engines: Vec<_> = (0..buckets)
        .map(|b| {
            open::<S>(
                context,
                &root.join(format!("crash-{b}")),
                EngineOptions::default(),
            )
        })
        .collect();
    for (b, engine) in engines.iter().enumerate() {
        let (end, w) = acked.get(&b).copied().unwrap_or_default();
        let found = engine.applied_end();
        // Batches are atomic and synced: the acknowledged end, or the one in flight.
        assert!(
            found == end || found == end + 4,
            "bucket {b}: applied end {found}, acknowledged {end}"
        );
        assert!(
            engine.watermark() >= w,
            "bucket {b}: W below acknowledged {w}"
        );
        for k in 0..16u64 {
            // The newest write of k below the applied end, when it is not covered.
            let Some(newest) = (0..found).rev().find(|o| o % 16 == k) else {
                continue;
            };
            let got = engine.lookup(format!("k{k}").as_bytes()).unwrap();
            if newest >= engine.watermark() {
                assert_eq!(
                    got,
                    LocalLookup::Value {
                        offset: newest,
                        bytes: format!("b{b}-{newest}").into_bytes()
                    },
                    "bucket {b} k{k}"
                );
            } else {
                assert!(
                    matches!(&got, LocalLookup::Miss)
                        || matches!(&got, LocalLookup::Value { offset, .. } if *offset == newest),
                    "bucket {b} k{k}: {got:?}"
                );
            }
        }
    }
    println!("CHECKED");
    if verify_only {
        return;
    }
    for round in 0..60u64 {
        for (b, engine) in engines.iter().enumerate() {
            let end = engine.applied_end();
            engine.apply(&batch_at(b, end)).unwrap();
            println!("ACK {b} {}", end + 4);
            if round % 3 == 2 {
                let w = engine.applied_end().saturating_sub(16);
                let update = engine.advance_watermark(w).unwrap();
                println!("WACK {b} {}", update.current);
                engine.reclaim().unwrap();
            }
        }
    }
}
