//! redb's garbage-triggered compaction: a covered bucket gives its file back, a bucket with a
//! steady window is left alone, writers and readers during a compaction lose nothing, and a
//! compaction closed or killed midway leaves a store that reopens whole.

// Test code may unwrap.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use tidemark_backend_redb::RedbEngine;
use tidemark_engine_api::{Engine, EngineOptions, LocalLookup, OpenEngine, OpenMode, WriteBatch};

/// Values large enough that a few thousand entries make a file of several MiB.
const VALUE: usize = 512;

/// A value that names the offset it was written at, so a reader can tell versions apart.
fn value(offset: u64) -> Vec<u8> {
    let mut v = offset.to_be_bytes().to_vec();
    v.resize(VALUE, (offset % 251) as u8);
    v
}

fn check_value(key: &[u8], offset: u64, bytes: &[u8]) {
    assert_eq!(
        bytes,
        value(offset).as_slice(),
        "{}: the bytes of another version",
        String::from_utf8_lossy(key)
    );
}

/// Every key `prefix` + offset in `offsets` answers the value written at that offset.
fn assert_holds(engine: &RedbEngine, prefix: &str, offsets: std::ops::Range<u64>, what: &str) {
    for offset in offsets {
        let key = format!("{prefix}{offset}");
        match engine.lookup(key.as_bytes()).unwrap() {
            LocalLookup::Value {
                offset: found,
                bytes,
            } => {
                assert_eq!(found, offset, "{key}, {what}");
                check_value(key.as_bytes(), found, &bytes);
            }
            other => panic!("{key}, {what}: {other:?}"),
        }
    }
}

fn unsynced() -> EngineOptions {
    EngineOptions::default().with_sync_writes(false)
}

/// Writes `keys` distinct keys (`prefix` + number) at offsets from `applied_end`, in batches.
fn write_keys(engine: &RedbEngine, prefix: &str, keys: u64) {
    let mut offset = engine.applied_end();
    let mut left = keys;
    while left > 0 {
        let mut batch = WriteBatch::new();
        for _ in 0..left.min(500) {
            batch.put(
                format!("{prefix}{offset}").into_bytes(),
                value(offset),
                offset,
            );
            offset += 1;
            left -= 1;
        }
        engine.apply(&batch).unwrap();
    }
}

/// The file of a freshly created bucket: the footprint the space target is stated against.
fn empty_footprint() -> u64 {
    let tmp = tempfile::tempdir().unwrap();
    let engine = RedbEngine::open(tmp.path(), EngineOptions::default()).unwrap();
    engine.stats().unwrap().bytes_on_disk
}

fn rebuilds(engine: &RedbEngine) -> u64 {
    engine.stats().unwrap().counters.space_rebuilds
}

/// The drain: a bucket the lake covers wholly, reclaimed once, settles within twice the
/// empty store's footprint plus 1 MiB, whether covered at once or in 100 steps.
#[test]
fn a_covered_bucket_shrinks_after_one_reclaim() {
    let empty = empty_footprint();
    let target = 2 * empty + (1 << 20);
    for steps in [1u64, 100] {
        let tmp = tempfile::tempdir().unwrap();
        let engine = RedbEngine::open(tmp.path(), unsynced()).unwrap();
        write_keys(&engine, "k", 40_000);
        engine.flush().unwrap();
        let full = engine.stats().unwrap().bytes_on_disk;
        assert!(full > 8 * target, "the filled file is only {full} bytes");
        let end = engine.applied_end();
        for step in 1..=steps {
            engine.advance_watermark(end * step / steps).unwrap();
            engine.reclaim().unwrap();
        }
        engine.wait_for_background_work().unwrap();
        let stats = engine.stats().unwrap();
        println!(
            "covered in {steps} step(s): {full} bytes full, {} after, empty store {empty}, \
             {} compaction(s)",
            stats.bytes_on_disk, stats.counters.space_rebuilds
        );
        assert_eq!(stats.live_entries, 0);
        assert!(
            stats.bytes_on_disk <= target,
            "{} bytes after the drain, target {target}",
            stats.bytes_on_disk
        );
        assert!(stats.counters.space_rebuilds >= 1);
        assert!(engine.verify().unwrap().is_clean());
    }
}

/// A bucket compacted once, refilled and covered again gives its file back again: the rule that
/// keeps a steady window from compacting twice counts from the most the bucket held since.
#[test]
fn a_bucket_drained_twice_shrinks_twice() {
    let target = 2 * empty_footprint() + (1 << 20);
    let tmp = tempfile::tempdir().unwrap();
    let engine = RedbEngine::open(tmp.path(), unsynced()).unwrap();
    for round in 1..=2u64 {
        write_keys(&engine, &format!("r{round}-"), 40_000);
        engine.flush().unwrap();
        let full = engine.stats().unwrap().bytes_on_disk;
        assert!(full > 8 * target, "round {round}: only {full} bytes");
        engine.advance_watermark(engine.applied_end()).unwrap();
        engine.reclaim().unwrap();
        engine.wait_for_background_work().unwrap();
        let stats = engine.stats().unwrap();
        assert!(
            stats.bytes_on_disk <= target,
            "round {round}: {} bytes after the drain, target {target}",
            stats.bytes_on_disk
        );
        assert_eq!(stats.counters.space_rebuilds, round);
    }
}

/// A window of live data over a fixed key space, continuously overwritten with `W` trailing the
/// writer and a reclaim each round: the file is past the size the trigger considers, but never
/// mostly garbage, so no round pays a compaction.
#[test]
fn the_trigger_does_not_fire_on_a_steady_window() {
    const KEYS: u64 = 6_000;
    const ROUNDS: u64 = 30;
    const WARM_UP: u64 = 5;
    for sync in [true, false] {
        let tmp = tempfile::tempdir().unwrap();
        let options = EngineOptions::default().with_sync_writes(sync);
        let engine = RedbEngine::open(tmp.path(), options).unwrap();
        let mut offset = 0u64;
        let mut largest = 0u64;
        let mut warmed_up = 0u64;
        for round in 0..ROUNDS {
            if round == WARM_UP {
                // The first reclaims may compact once: the first covers half of a file that only
                // grew so far.
                warmed_up = rebuilds(&engine);
            }
            for first in (0..KEYS).step_by(100) {
                let mut batch = WriteBatch::new();
                for k in first..first + 100 {
                    batch.put(format!("k{k}").into_bytes(), value(offset), offset);
                    offset += 1;
                }
                engine.apply(&batch).unwrap();
            }
            // Everything but the last half round is covered: the window is about half the keys.
            engine.advance_watermark(offset - KEYS / 2).unwrap();
            engine.reclaim().unwrap();
            largest = largest.max(engine.stats().unwrap().bytes_on_disk);
        }
        let stats = engine.stats().unwrap();
        println!(
            "steady window (sync_writes {sync}): {} live entries, file {} bytes at the end, \
             {largest} at most, {} compaction(s)",
            stats.live_entries, stats.bytes_on_disk, stats.counters.space_rebuilds
        );
        assert!(
            largest > 1 << 20,
            "the file never grew past the size the trigger looks at"
        );
        assert!(warmed_up <= 1, "{warmed_up} compactions while warming up");
        assert_eq!(
            stats.counters.space_rebuilds, warmed_up,
            "a steady window compacted"
        );
    }
}

/// A writer overwrites a few hot keys and a reader looks them up while the reclaim that covers
/// a large cold part of the bucket sweeps and compacts, three times over (a fresh bucket each):
/// every lookup finds a version at least as new as the last one acknowledged, with its own
/// bytes, and no write is lost.
#[test]
fn writers_and_readers_during_a_compaction_lose_nothing() {
    const HOT: u64 = 20;
    const AFTER: u64 = 50;
    const MAX_BATCHES: u64 = 100_000;
    for cycle in 0..3 {
        let tmp = tempfile::tempdir().unwrap();
        let engine = Arc::new(RedbEngine::open(tmp.path(), unsynced()).unwrap());
        write_keys(&engine, "cold", 8_000);
        // The first offset of the newest acknowledged batch; hot key `h` is at it + `h`.
        let acked = Arc::new(AtomicU64::new(u64::MAX));
        let done = Arc::new(AtomicBool::new(false));
        let writer = {
            let (engine, acked, done) = (engine.clone(), acked.clone(), done.clone());
            std::thread::spawn(move || {
                let mut offset = engine.applied_end();
                let (mut batches, mut after) = (0u64, 0u64);
                // Goes on for a while after the reclaim returned, so it overlaps all of it.
                while after < AFTER && batches < MAX_BATCHES {
                    let first = offset;
                    let mut batch = WriteBatch::new();
                    for h in 0..HOT {
                        batch.put(format!("hot{h}").into_bytes(), value(offset), offset);
                        offset += 1;
                    }
                    engine.apply(&batch).unwrap();
                    acked.store(first, Ordering::Release);
                    batches += 1;
                    after += u64::from(done.load(Ordering::Acquire));
                }
                batches
            })
        };
        let reader = {
            let (engine, acked, writer_done) = (engine.clone(), acked.clone(), done.clone());
            std::thread::spawn(move || {
                let mut lookups = 0u64;
                let mut after = 0u64;
                while after < AFTER {
                    after += u64::from(writer_done.load(Ordering::Acquire));
                    let first = acked.load(Ordering::Acquire);
                    if first == u64::MAX {
                        continue;
                    }
                    for h in 0..HOT {
                        let key = format!("hot{h}").into_bytes();
                        // Inline and blocking lookups both: the inline one steps aside while
                        // a compaction holds the database.
                        let found = match engine.lookup_inline(&key).unwrap() {
                            Some(found) => found,
                            None => engine.lookup(&key).unwrap(),
                        };
                        match found {
                            LocalLookup::Value { offset, bytes } => {
                                assert!(
                                    offset >= first + h,
                                    "hot{h}: version {offset} older than the acknowledged {}",
                                    first + h
                                );
                                check_value(&key, offset, &bytes);
                            }
                            other => {
                                panic!("hot{h}: {other:?} after version {} was acked", first + h)
                            }
                        }
                        lookups += 1;
                    }
                }
                lookups
            })
        };
        // Cover everything before the newest acknowledged batch (all the cold keys and the hot
        // keys' older versions) and reclaim: the file is then mostly garbage and compacted.
        let first = loop {
            let first = acked.load(Ordering::Acquire);
            if first != u64::MAX {
                break first;
            }
            std::thread::yield_now();
        };
        engine.advance_watermark(first).unwrap();
        engine.reclaim().unwrap();
        done.store(true, Ordering::Release);
        let batches = writer.join().unwrap();
        let lookups = reader.join().unwrap();
        let stats = engine.stats().unwrap();
        println!(
            "cycle {cycle}: {batches} batches, {lookups} lookups, {} compaction(s), file {} bytes",
            stats.counters.space_rebuilds, stats.bytes_on_disk
        );
        assert_eq!(stats.counters.space_rebuilds, 1, "the reclaim compacted");
        assert_eq!(stats.live_entries, HOT);
        let last = acked.load(Ordering::Acquire);
        for h in 0..HOT {
            let key = format!("hot{h}");
            match engine.lookup(key.as_bytes()).unwrap() {
                LocalLookup::Value { offset, bytes } => {
                    assert_eq!(offset, last + h, "{key}: not the last write");
                    check_value(key.as_bytes(), offset, &bytes);
                }
                other => panic!("{key}: {other:?}"),
            }
        }
        assert!(engine.verify().unwrap().is_clean());
    }
}

/// A bucket closed right after a compaction reopens with its rows, watermark and applied end,
/// and takes writes and reclaims again.
#[test]
fn reopen_after_close_right_after_a_compaction() {
    let tmp = tempfile::tempdir().unwrap();
    let (w, end) = {
        let engine = RedbEngine::open(tmp.path(), unsynced()).unwrap();
        write_keys(&engine, "old", 20_000);
        let w = engine.applied_end();
        write_keys(&engine, "new", 200);
        engine.advance_watermark(w).unwrap();
        engine.reclaim().unwrap();
        assert_eq!(rebuilds(&engine), 1, "the reclaim compacted");
        (w, engine.applied_end())
    };
    for mode in [OpenMode::ReadOnly, OpenMode::MustExist] {
        let engine =
            RedbEngine::open(tmp.path(), EngineOptions::default().with_open_mode(mode)).unwrap();
        assert_eq!((engine.watermark(), engine.applied_end()), (w, end));
        assert_eq!(engine.stats().unwrap().live_entries, end - w);
        assert_holds(&engine, "new", w..end, "after the compaction");
        assert_eq!(
            engine.lookup(format!("old{}", w - 1).as_bytes()).unwrap(),
            LocalLookup::Miss
        );
        assert!(engine.verify().unwrap().is_clean());
    }
    let engine = RedbEngine::open(tmp.path(), unsynced()).unwrap();
    write_keys(&engine, "more", 100);
    engine.advance_watermark(end).unwrap();
    engine.reclaim().unwrap();
    assert_eq!(engine.stats().unwrap().live_entries, 100);
}

/// Environment variable that makes `a_compaction_killed_midway_reopens_whole` the child: the
/// bucket directory it writes to.
const CHILD_DIR: &str = "TIDEMARK_REDB_COMPACTION_CHILD";

/// A child writes with synced applies and reclaims that compact, announcing each reclaim before
/// it starts; the parent kills it with SIGKILL as soon as it reads the announcement, so the kill
/// lands inside the reclaim's sweep or compaction (or just after). Every reopen must succeed
/// (a writable open checks every page), keep every write acknowledged before the announcement,
/// and verify clean. Three children in a row on the same store.
#[test]
fn a_compaction_killed_midway_reopens_whole() {
    if let Ok(dir) = std::env::var(CHILD_DIR) {
        child(Path::new(&dir));
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    for round in 0..3 {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args([
                "a_compaction_killed_midway_reopens_whole",
                "--exact",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CHILD_DIR, tmp.path())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        // `reclaiming <W> <applied end>`: everything below the applied end was applied with a
        // synced commit before the reclaim that compacts began.
        let mut announced = None;
        for line in stdout.lines() {
            let line = line.unwrap();
            if let Some(rest) = line.strip_prefix("reclaiming ") {
                let mut figures = rest.split(' ').map(|f| f.parse::<u64>().unwrap());
                announced = Some((figures.next().unwrap(), figures.next().unwrap()));
                child.kill().unwrap();
                break;
            }
        }
        child.wait().unwrap();
        let (w, end) = announced.expect("the child announced a reclaim");
        let engine = RedbEngine::open(tmp.path(), EngineOptions::default()).unwrap();
        assert!(engine.watermark() >= w && engine.applied_end() >= end);
        // The child may have gone on before the kill landed: what it announced is a floor.
        let w = engine.watermark();
        let live = engine.stats().unwrap().live_entries;
        println!(
            "round {round}: killed reclaiming below {w}; reopened with applied end {}, {live} \
             live entries, file {} bytes",
            engine.applied_end(),
            engine.stats().unwrap().bytes_on_disk
        );
        assert_holds(&engine, "k", w..end.max(w), "acknowledged before the kill");
        assert!(engine.verify().unwrap().is_clean());
    }
}

/// The child's loop: 3 MiB of synced writes, all but the last 100 covered, then a reclaim
/// (which compacts), announced first.
fn child(dir: &Path) {
    let engine = RedbEngine::open(dir, EngineOptions::default()).unwrap();
    for _ in 0..1_000 {
        write_keys(&engine, "k", 6_000);
        let end = engine.applied_end();
        let w = end - 100;
        engine.advance_watermark(w).unwrap();
        println!("reclaiming {w} {end}");
        engine.reclaim().unwrap();
    }
}
