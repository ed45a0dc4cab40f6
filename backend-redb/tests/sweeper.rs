//! The redb sweeper: work proportional to what is covered, concurrency with writers, and a file
//! that stops growing in steady state.

// Test code may unwrap.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use tidemark_backend_redb::RedbDiagnostics;

use tidemark_backend_redb::RedbEngine;
use tidemark_engine_api::{Engine, EngineOptions, LocalLookup, OpenEngine, WriteBatch};

#[test]
fn apply_and_lookup_run_during_reclaim() {
    let tmp = tempfile::tempdir().unwrap();
    let options = EngineOptions::default()
        .with_sync_writes(false)
        .with_sweep_chunk_rows(16);
    let engine = Arc::new(RedbEngine::open(tmp.path(), options).unwrap());
    const KEYS: u64 = 200;
    const BATCHES: u64 = 150;
    const PER_BATCH: u64 = 20;
    let done = Arc::new(AtomicBool::new(false));

    let reclaimer = {
        let (engine, done) = (engine.clone(), done.clone());
        std::thread::spawn(move || {
            let mut runs = 0u64;
            while !done.load(Ordering::Acquire) || runs == 0 {
                // Trail the writer: cover roughly the older half of what was written.
                engine.advance_watermark(engine.applied_end() / 2).unwrap();
                engine.reclaim().unwrap();
                runs += 1;
            }
            runs
        })
    };
    let reader = {
        let (engine, done) = (engine.clone(), done.clone());
        std::thread::spawn(move || {
            while !done.load(Ordering::Acquire) {
                for k in 0..KEYS {
                    // Either still there or reclaimed; never an error.
                    engine.lookup(format!("k{k}").as_bytes()).unwrap();
                }
            }
        })
    };
    for b in 0..BATCHES {
        let batch: WriteBatch = (b * PER_BATCH..(b + 1) * PER_BATCH)
            .map(|o| tidemark_engine_api::Record::put(format!("k{}", o % KEYS), o.to_be_bytes(), o))
            .collect();
        engine.apply(&batch).unwrap();
    }
    done.store(true, Ordering::Release);
    let runs = reclaimer.join().unwrap();
    reader.join().unwrap();
    println!("reclaim runs during {BATCHES} batches: {runs}");

    // Every key holds exactly its last write unless that write is now covered and reclaimed.
    engine.reclaim().unwrap();
    let threshold = engine.watermark();
    let end = BATCHES * PER_BATCH;
    for k in 0..KEYS {
        let last = (0..end).rev().find(|o| o % KEYS == k).unwrap();
        let expected = if last < threshold {
            LocalLookup::Miss
        } else {
            LocalLookup::Value {
                offset: last,
                bytes: last.to_be_bytes().to_vec(),
            }
        };
        assert_eq!(
            engine.lookup(format!("k{k}").as_bytes()).unwrap(),
            expected,
            "k{k}"
        );
    }
    let stats = engine.stats().unwrap();
    assert_eq!(stats.counters.applied, end);
    assert_eq!(stats.covered_estimate, 0);
}

const KEYS: u64 = 5_000;
const ROUNDS: usize = 24;
const WARMUP: usize = 8;
const BATCH: u64 = 500;

/// Writes `ROUNDS` rounds of `KEYS` random puts over the fixed key space (values 100–200 bytes),
/// advancing the watermark so that the lake trails the writer by one round, and reclaiming after
/// each round when `reclaim` is set. Returns the file size seen after each round and the payload
/// bytes written.
fn steady_workload(engine: &RedbEngine, reclaim: bool) -> (Vec<u64>, u64) {
    let mut offset = 0u64;
    let mut rng = 0x2545_f491_4f6c_dd1du64;
    let mut next = move || {
        // xorshift64: deterministic, no dependency.
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    let mut sizes = Vec::with_capacity(ROUNDS);
    let mut written = 0u64;
    let mut previous_round_end = 0u64;
    for _ in 0..ROUNDS {
        for _ in 0..KEYS / BATCH {
            let mut batch = WriteBatch::new();
            for _ in 0..BATCH {
                let key = format!("key-{:05}", next() % KEYS);
                let len = 100 + (next() % 101) as usize;
                written += len as u64;
                batch.put(key, vec![(offset % 251) as u8; len], offset);
                offset += 1;
            }
            engine.apply(&batch).unwrap();
        }
        engine.advance_watermark(previous_round_end).unwrap();
        previous_round_end = offset;
        if reclaim {
            engine.reclaim().unwrap();
        }
        sizes.push(engine.stats().unwrap().bytes_on_disk);
    }
    (sizes, written)
}

/// Checks that after warm-up the file stops growing: the largest size over the second half of
/// the rounds is at most the warm-up's largest plus a quarter (room for one more allocator
/// step, never for unbounded growth).
fn assert_bounded(label: &str, sizes: &[u64]) {
    let warmup_max = sizes.iter().take(WARMUP).copied().max().unwrap();
    let late_max = sizes.iter().skip(ROUNDS / 2).copied().max().unwrap();
    assert!(
        late_max <= warmup_max + warmup_max / 4,
        "{label}: file kept growing: warm-up max {warmup_max}, late max {late_max}, {sizes:?}"
    );
}

/// Once warmed up, freed pages are reused and the file stops growing, with synced and with
/// unsynced writes, in large chunks and in the small ones a sweep sized by time takes on a busy
/// machine (fixed sizes here, so the run is the same on every machine); the same workload without
/// reclaim keeps growing (its index gains a row per write), which shows the bound means something.
#[test]
fn steady_state_file_size_is_bounded() {
    let tmp = tempfile::tempdir().unwrap();
    let open = |name: &str, sync: bool, chunk_rows: usize| {
        let options = EngineOptions::default()
            .with_sync_writes(sync)
            .with_sweep_chunk_rows(chunk_rows)
            .with_sweep_chunk_time(None);
        RedbEngine::open(&tmp.path().join(name), options).unwrap()
    };

    let mut reclaimed_disk = None;
    for chunk_rows in [4096, 16] {
        let synced = open(&format!("synced-{chunk_rows}"), true, chunk_rows);
        let (synced_sizes, written) = steady_workload(&synced, true);
        println!(
            "reclaimed, sync_writes=true, chunks of {chunk_rows}, file bytes per round: \
             {synced_sizes:?}"
        );
        println!(
            "  payload written {written} bytes; {:?}",
            synced.disk_stats().unwrap()
        );
        assert_bounded(
            &format!("sync_writes=true, chunks of {chunk_rows}"),
            &synced_sizes,
        );

        let unsynced = open(&format!("unsynced-{chunk_rows}"), false, chunk_rows);
        let (unsynced_sizes, _) = steady_workload(&unsynced, true);
        println!(
            "reclaimed, sync_writes=false, chunks of {chunk_rows}, file bytes per round: \
             {unsynced_sizes:?}"
        );
        let disk = unsynced.disk_stats().unwrap();
        println!("  {disk:?}");
        assert_bounded(
            &format!("sync_writes=false, chunks of {chunk_rows}"),
            &unsynced_sizes,
        );
        reclaimed_disk.get_or_insert(disk);
    }
    let reclaimed_disk = reclaimed_disk.unwrap();

    let control = open("control", false, 4096);
    let (control_sizes, _) = steady_workload(&control, false);
    println!("not reclaimed, file bytes per round: {control_sizes:?}");
    let control_disk = control.disk_stats().unwrap();
    println!("  {control_disk:?}");
    // Without reclaim the stored bytes grow with every write (one index row each, plus the
    // covered values): the same workload is far from bounded there.
    assert!(
        control_disk.stored_bytes > 4 * reclaimed_disk.stored_bytes,
        "control {control_disk:?} vs reclaimed {reclaimed_disk:?}"
    );
}
