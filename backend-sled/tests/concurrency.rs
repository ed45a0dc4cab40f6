//! Reclaim running alongside writers: applies commit *between the chunks of one reclaim*, and
//! nothing uncovered is lost.
//!
//! The overlap is forced, never left to scheduling luck: each reclaim is paused after a committed
//! chunk (`Faults::on_chunk_committed` of the `Chaos` fault layer) until the writer has committed another apply, and only
//! then goes on to its next chunk. A reclaim that held writers off for its whole run would never
//! see that apply; the test would then fail at the `STUCK` bound instead of hanging.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::thread;
use std::time::{Duration, Instant};

use common::ChaosEngine;
use tidemark_backend_sled::SweepTotals;
use tidemark_engine_api::{Engine, EngineOptions, LocalLookup, OpenEngine, WriteBatch};

/// How long one thread waits for the other before the test gives up. Reached only if a thread is
/// deadlocked or dead, so it turns a hang into a failure; it is not a timing assertion.
const STUCK: Duration = Duration::from_secs(120);

/// Polls `done` until it holds; panics with `what` after [`STUCK`].
fn wait_for(what: &str, done: impl Fn() -> bool) {
    let deadline = Instant::now() + STUCK;
    while !done() {
        assert!(Instant::now() < deadline, "stuck waiting for {what}");
        thread::sleep(Duration::from_millis(1));
    }
}

/// Pauses every reclaim of `engine` after each committed chunk, hands control to a writer
/// through the returned channel and resumes once the writer acknowledges.
fn pause_between_chunks(engine: &ChaosEngine) -> (mpsc::Receiver<SweepTotals>, mpsc::Sender<()>) {
    let (chunk_tx, chunk_rx) = mpsc::channel::<SweepTotals>();
    let (ack_tx, ack_rx) = mpsc::channel::<()>();
    let ack_rx = Mutex::new(ack_rx);
    engine
        .storage()
        .faults()
        .on_chunk_committed(Some(Arc::new(move |chunk: &SweepTotals| {
            chunk_tx.send(*chunk).unwrap();
            ack_rx
                .lock()
                .unwrap()
                .recv_timeout(STUCK)
                .expect("the writer never committed while the reclaim was paused");
        })));
    (chunk_rx, ack_tx)
}

fn old_key(i: u64) -> Vec<u8> {
    format!("old{i:02}").into_bytes()
}

#[test]
fn applies_commit_between_the_chunks_of_one_reclaim() {
    const COVERED: u64 = 16;
    const CHUNK: u64 = 4;
    let tmp = tempfile::tempdir().unwrap();
    let options = EngineOptions::default()
        .with_sync_writes(false)
        .with_sweep_chunk_rows(CHUNK as usize)
        // Chunks of exactly CHUNK rows, not sized by time: the test counts them.
        .with_sweep_chunk_time(None);
    let engine = Arc::new(ChaosEngine::open(tmp.path(), options).unwrap());
    let mut batch = WriteBatch::new();
    for offset in 0..COVERED {
        batch.put(old_key(offset), "old", offset);
    }
    engine.apply(&batch).unwrap();
    engine.advance_watermark(COVERED).unwrap();

    let (chunk_rx, ack_tx) = pause_between_chunks(&engine);
    let reclaiming = Arc::new(AtomicBool::new(false));
    // After chunk n, overwrite the first key of chunk n + 1 (not swept yet) above the watermark,
    // so the sweep must meet its old index row as stale and keep the new value. After the last
    // chunk, write a brand-new key.
    let writer = {
        let (engine, reclaiming) = (Arc::clone(&engine), Arc::clone(&reclaiming));
        thread::spawn(move || {
            for n in 1..=COVERED / CHUNK {
                let chunk = chunk_rx.recv_timeout(STUCK).expect("no chunk committed");
                assert_eq!(chunk.rows_visited, CHUNK);
                let offset = COVERED + n - 1;
                engine.put(&old_key(CHUNK * n), b"new", offset).unwrap();
                // The reclaim is paused inside its call, between two chunks.
                assert!(reclaiming.load(Ordering::Acquire));
                ack_tx.send(()).unwrap();
            }
        })
    };
    reclaiming.store(true, Ordering::Release);
    let report = engine.reclaim().unwrap();
    reclaiming.store(false, Ordering::Release);
    writer.join().unwrap();

    let sweep = engine.last_sweep().unwrap();
    assert_eq!((sweep.chunks, sweep.rows_visited), (4, COVERED));
    // old04, old08 and old12 were overwritten before the sweep reached them.
    assert_eq!(sweep.stale_dropped, 3);
    assert_eq!(report.values_removed, COVERED - 3);
    for n in 1..=4 {
        assert_eq!(
            engine.lookup(&old_key(CHUNK * n)).unwrap(),
            LocalLookup::Value {
                offset: COVERED + n - 1,
                bytes: b"new".to_vec()
            }
        );
    }
    for i in (0..COVERED).filter(|i| i % CHUNK != 0 || *i == 0) {
        assert_eq!(
            engine.lookup(&old_key(i)).unwrap(),
            LocalLookup::Miss,
            "{i}"
        );
    }
    let stats = engine.stats().unwrap();
    assert_eq!(stats.applied_end, COVERED + 4);
    assert_eq!(stats.live_entries, 4);
    assert_eq!(stats.covered_estimate, 0);
}

const KEYS: u64 = 64;
const PER_BATCH: u64 = 8;
const SWEEP_CHUNK: u64 = 16;
/// Batches the writer may write before each round: enough new index rows below the next
/// threshold for two full chunks, so the pause after the first chunk is mid-sweep.
const BATCHES_PER_ROUND: u64 = 2 * SWEEP_CHUNK / PER_BATCH;
/// Batches released when a reclaim starts, written wherever the scheduler puts them.
const RACING_BATCHES: u64 = 2;
const ROUNDS: u64 = 20;
/// The watermark trails the writer, so there is always something uncovered.
const LAG: u64 = 2 * KEYS;

fn slot_key(offset: u64) -> Vec<u8> {
    format!("k{:03}", offset % KEYS).into_bytes()
}

#[test]
fn overwrites_and_repeated_reclaims_interleave_and_lose_nothing_uncovered() {
    let tmp = tempfile::tempdir().unwrap();
    let options = EngineOptions::default()
        .with_sync_writes(false)
        .with_sweep_chunk_rows(SWEEP_CHUNK as usize)
        // Full chunks of SWEEP_CHUNK rows, so the pause after the first one is mid-sweep.
        .with_sweep_chunk_time(None);
    let engine = Arc::new(ChaosEngine::open(tmp.path(), options).unwrap());
    // The writer runs on its own thread but only up to `budget` batches, so every round does a
    // fixed amount of work however the threads are scheduled.
    let budget = Arc::new(AtomicU64::new(0));
    let written = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));

    // Pause each reclaim once, after its first chunk, and release one more batch: the reclaim
    // resumes only after that batch is committed, so it committed between two chunks.
    let armed = Arc::new(AtomicBool::new(false));
    let overlapped = Arc::new(AtomicU64::new(0));
    {
        let (budget, written, armed, overlapped) = (
            Arc::clone(&budget),
            Arc::clone(&written),
            Arc::clone(&armed),
            Arc::clone(&overlapped),
        );
        engine
            .storage()
            .faults()
            .on_chunk_committed(Some(Arc::new(move |_: &SweepTotals| {
                if armed.swap(false, Ordering::AcqRel) {
                    let target = budget.fetch_add(1, Ordering::AcqRel) + 1;
                    wait_for("an apply during the reclaim", || {
                        written.load(Ordering::Acquire) >= target
                    });
                    overlapped.fetch_add(1, Ordering::AcqRel);
                }
            })));
    }

    // Overwrites a fixed key space, so the sweeper keeps meeting stale rows and fresh versions.
    let writer = {
        let (engine, budget, written, stop) = (
            Arc::clone(&engine),
            Arc::clone(&budget),
            Arc::clone(&written),
            Arc::clone(&stop),
        );
        thread::spawn(move || {
            let mut b = 0u64;
            loop {
                wait_for("budget", || {
                    stop.load(Ordering::Acquire) || budget.load(Ordering::Acquire) > b
                });
                if stop.load(Ordering::Acquire) {
                    return;
                }
                let mut batch = WriteBatch::new();
                for i in 0..PER_BATCH {
                    let offset = b * PER_BATCH + i;
                    batch.put(slot_key(offset), offset.to_be_bytes(), offset);
                }
                engine.apply(&batch).unwrap();
                b += 1;
                written.store(b, Ordering::Release);
            }
        })
    };

    let mut threshold = 0u64;
    for round in 0..ROUNDS {
        let warm_up = if round == 0 { LAG / PER_BATCH } else { 0 };
        budget.fetch_add(warm_up + BATCHES_PER_ROUND, Ordering::AcqRel);
        wait_for("the writer to use its budget", || {
            written.load(Ordering::Acquire) == budget.load(Ordering::Acquire)
        });
        let next = engine.applied_end() - LAG;
        assert!(next >= threshold + 2 * SWEEP_CHUNK);
        threshold = next;
        engine.advance_watermark(threshold).unwrap();
        armed.store(true, Ordering::Release);
        budget.fetch_add(RACING_BATCHES, Ordering::AcqRel);
        let report = engine.reclaim().unwrap();
        assert_eq!(report.threshold, threshold);
        // The paused first chunk was followed by at least one more, after the writer's apply.
        assert!(engine.last_sweep().unwrap().chunks >= 2);
    }
    stop.store(true, Ordering::Release);
    writer.join().unwrap();
    assert_eq!(overlapped.load(Ordering::Acquire), ROUNDS);

    let end = engine.applied_end();
    assert_eq!(end, written.load(Ordering::Acquire) * PER_BATCH);
    let w = engine.watermark();
    assert_eq!(w, threshold);
    engine.storage().faults().on_chunk_committed(None);
    engine.reclaim().unwrap();
    // Every key's newest version survives iff it is uncovered; nothing older ever reappears.
    let mut live = 0;
    for slot in 0..KEYS {
        let newest = (end - 1) - ((end - 1 - slot) % KEYS);
        let found = engine.lookup(&slot_key(newest)).unwrap();
        if newest >= w {
            live += 1;
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
    assert_eq!(stats.live_entries, live);
    assert_eq!(stats.counters.applied, end);
    assert_eq!(stats.counters.reclaim_runs, ROUNDS + 1);
}
