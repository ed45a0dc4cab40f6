//! Reclaim running alongside a writer: chunks interleave with applies, nothing uncovered is lost.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;

use backend_sled::SledEngine;
use engine_api::{Engine, EngineOptions, LocalLookup, OpenEngine, WriteBatch};

const KEYS: u64 = 64;
const BATCHES: u64 = 300;
const PER_BATCH: u64 = 8;

fn key(i: u64) -> Vec<u8> {
    format!("k{:03}", i % KEYS).into_bytes()
}

#[test]
fn apply_proceeds_while_reclaim_sweeps_in_chunks() {
    let tmp = tempfile::tempdir().unwrap();
    let options = EngineOptions::default()
        .with_sync_writes(false)
        .with_sweep_chunk_rows(16);
    let engine = Arc::new(SledEngine::open(tmp.path(), options).unwrap());
    let done = Arc::new(AtomicBool::new(false));

    // Overwrites a fixed key space, so the sweeper keeps meeting stale rows and fresh versions.
    let writer = {
        let engine = Arc::clone(&engine);
        thread::spawn(move || {
            for b in 0..BATCHES {
                let mut batch = WriteBatch::new();
                for i in 0..PER_BATCH {
                    let offset = b * PER_BATCH + i;
                    batch.put(key(offset), offset.to_be_bytes(), offset);
                }
                engine.apply(&batch).unwrap();
            }
        })
    };
    let reclaimer = {
        let engine = Arc::clone(&engine);
        let done = Arc::clone(&done);
        thread::spawn(move || {
            let mut runs = 0u64;
            while !done.load(Ordering::Acquire) {
                // Lag the lake behind the writer so there is always something uncovered.
                let end = engine.applied_end();
                engine
                    .advance_watermark(end.saturating_sub(2 * KEYS))
                    .unwrap();
                engine.reclaim().unwrap();
                runs += 1;
                thread::yield_now();
            }
            runs
        })
    };
    writer.join().unwrap();
    done.store(true, Ordering::Release);
    let runs = reclaimer.join().unwrap();
    assert!(runs > 0);

    let end = BATCHES * PER_BATCH;
    assert_eq!(engine.applied_end(), end);
    let w = engine.watermark();
    engine.reclaim().unwrap();
    // Every key's newest version is at offset end - KEYS + slot; each survives iff uncovered.
    for slot in 0..KEYS {
        let newest = end - KEYS + slot;
        let found = engine.lookup(&key(newest)).unwrap();
        if newest >= w {
            assert_eq!(
                found,
                LocalLookup::Value {
                    offset: newest,
                    bytes: newest.to_be_bytes().to_vec()
                }
            );
        } else {
            assert_eq!(found, LocalLookup::Miss);
        }
    }
    let stats = engine.stats().unwrap();
    assert_eq!(stats.covered_estimate, 0);
    assert_eq!(stats.counters.applied, end);
    assert_eq!(stats.counters.reclaim_runs, runs + 1);
}

#[test]
fn writers_commit_between_reclaim_chunks() {
    let tmp = tempfile::tempdir().unwrap();
    let options = EngineOptions::default()
        .with_sync_writes(false)
        .with_sweep_chunk_rows(1);
    let engine = Arc::new(SledEngine::open(tmp.path(), options).unwrap());
    const COVERED: u64 = 3_000;
    let mut batch = WriteBatch::new();
    for offset in 0..COVERED {
        batch.put(format!("old{offset}"), "v", offset);
    }
    engine.apply(&batch).unwrap();
    engine.advance_watermark(COVERED).unwrap();

    let applies = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (engine, applies, stop) =
            (Arc::clone(&engine), Arc::clone(&applies), Arc::clone(&stop));
        thread::spawn(move || {
            let mut offset = COVERED;
            while !stop.load(Ordering::Acquire) {
                engine
                    .put(format!("new{offset}").as_bytes(), b"v", offset)
                    .unwrap();
                applies.fetch_add(1, Ordering::AcqRel);
                offset += 1;
            }
        })
    };
    while applies.load(Ordering::Acquire) == 0 {
        thread::yield_now();
    }
    let before = applies.load(Ordering::Acquire);
    let report = engine.reclaim().unwrap();
    let during = applies.load(Ordering::Acquire) - before;
    stop.store(true, Ordering::Release);
    writer.join().unwrap();

    println!("{during} applies committed during a reclaim of {COVERED} one-row chunks");
    // With one row per chunk the reclaim is thousands of short transactions; a reclaim that held
    // writers off for its whole run would leave `during` at zero.
    assert!(during > 0, "no apply committed while reclaim ran");
    assert_eq!(report.values_removed, COVERED);
    assert_eq!(engine.last_sweep().unwrap().chunks, COVERED);
    let written = applies.load(Ordering::Acquire);
    assert_eq!(engine.stats().unwrap().live_entries, written);
}
