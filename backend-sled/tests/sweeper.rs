//! The range-scan sweeper on sled: proportional work, chunking, stale rows, corrupt values.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

mod common;

use backend_sled::{MAX_SWEEP_CHUNK_ROWS, SledEngine};
use common::{key, open_fast, puts};
use engine_api::{Engine, EngineOptions, LocalLookup, OpenEngine, WriteBatch, codec};

#[test]
fn small_chunks_reclaim_everything_covered() {
    let tmp = tempfile::tempdir().unwrap();
    let options = EngineOptions::default()
        .with_sync_writes(false)
        .with_sweep_chunk_rows(7)
        // Chunks of exactly 7 rows, not sized by time: the test counts them.
        .with_sweep_chunk_time(None);
    let engine = SledEngine::open(tmp.path(), options).unwrap();
    engine.apply(&puts(0, 100)).unwrap();
    engine.advance_watermark(50).unwrap();
    let report = engine.reclaim().unwrap();
    let sweep = engine.last_sweep().unwrap();
    assert_eq!(report.values_removed, 50);
    assert_eq!(sweep.rows_visited, 50);
    // 50 rows in chunks of 7: seven full chunks and one of one row.
    assert_eq!(sweep.chunks, 8);
    assert_eq!(engine.stats().unwrap().live_entries, 50);
}

#[test]
fn overwritten_keys_keep_their_newer_version_and_stale_rows_are_dropped() {
    let tmp = tempfile::tempdir().unwrap();
    let engine = open_fast(tmp.path());
    let mut batch = WriteBatch::new();
    batch.put("a", "a0", 0).put("b", "b1", 1).put("c", "c2", 2);
    batch
        .put("a", "a3", 3)
        .delete("b", 4)
        .put("c", "c5", 5)
        .delete("d", 6);
    engine.apply(&batch).unwrap();
    // Every index row so far, including the three stale ones.
    assert_eq!(engine.stats().unwrap().covered_estimate, 0);
    engine.advance_watermark(5).unwrap();
    assert_eq!(engine.stats().unwrap().covered_estimate, 5);

    let report = engine.reclaim().unwrap();
    let sweep = engine.last_sweep().unwrap();
    assert_eq!((report.values_removed, report.tombstones_removed), (1, 1));
    assert_eq!(sweep.stale_dropped, 3);
    assert_eq!(sweep.rows_visited, 5);
    assert_eq!(engine.lookup(b"a").unwrap(), LocalLookup::Miss);
    assert_eq!(engine.lookup(b"b").unwrap(), LocalLookup::Miss);
    assert_eq!(
        engine.lookup(b"c").unwrap(),
        LocalLookup::Value {
            offset: 5,
            bytes: b"c5".to_vec()
        }
    );
    assert_eq!(
        engine.lookup(b"d").unwrap(),
        LocalLookup::Tombstone { offset: 6 }
    );
    assert_eq!(engine.stats().unwrap().covered_estimate, 0);
}

#[test]
fn retention_distance_keeps_a_margin_below_the_watermark() {
    let tmp = tempfile::tempdir().unwrap();
    let options = EngineOptions::default()
        .with_sync_writes(false)
        .with_retention_distance(4);
    let engine = SledEngine::open(tmp.path(), options).unwrap();
    engine.apply(&puts(0, 10)).unwrap();
    engine.advance_watermark(10).unwrap();
    let report = engine.reclaim().unwrap();
    assert_eq!((report.threshold, report.values_removed), (6, 6));
    assert!(engine.lookup(&key(6)).unwrap().offset().is_some());
    assert_eq!(engine.lookup(&key(5)).unwrap(), LocalLookup::Miss);
}

#[test]
fn corrupt_values_are_kept_and_counted() {
    let tmp = tempfile::tempdir().unwrap();
    let engine = open_fast(tmp.path());
    engine.apply(&puts(0, 4)).unwrap();
    // An indexed entry that rotted in place (the kind byte is gone)...
    let mut rotted = codec::encode_value(&key(1), 1, b"v1");
    rotted[0] = 0x7f;
    engine.insert_raw(&key(1), &rotted).unwrap();
    // ...and a new key with nothing readable at all. Both are indexed at 0, each once.
    engine.insert_raw(b"garbage", b"\xff").unwrap();
    assert!(matches!(
        engine.lookup(b"garbage"),
        Err(engine_api::Error::Corrupt { .. })
    ));

    engine.advance_watermark(4).unwrap();
    let report = engine.reclaim().unwrap();
    assert_eq!(report.corrupt_kept, 2);
    assert_eq!(report.values_removed, 3);
    assert_eq!(engine.stats().unwrap().live_entries, 2);
    assert_eq!(engine.stats().unwrap().counters.corrupt_kept, 2);
    // Kept rows stay indexed, so every later sweep meets (and counts) them again.
    assert_eq!(engine.reclaim().unwrap().corrupt_kept, 2);
    assert_eq!(engine.stats().unwrap().counters.corrupt_kept, 4);
    assert_eq!(engine.stats().unwrap().counters.reclaim_runs, 2);
    assert!(engine.lookup(&key(1)).is_err());
}

#[test]
fn chunks_are_capped_because_a_sled_transaction_blocks_every_store_in_the_process() {
    let tmp = tempfile::tempdir().unwrap();
    // The default asks for 4096 rows per chunk; sled uses at most MAX_SWEEP_CHUNK_ROWS. Sized by
    // rows alone (no time target), so the cap is what limits the chunks.
    let options = EngineOptions::default()
        .with_sync_writes(false)
        .with_sweep_chunk_time(None);
    let engine = SledEngine::open(tmp.path(), options).unwrap();
    assert_eq!(engine.options().sweep_chunk_rows, 4096);
    assert_eq!(engine.sweep_chunk_rows(), MAX_SWEEP_CHUNK_ROWS);
    let covered = 4 * MAX_SWEEP_CHUNK_ROWS as u64 - 24;
    engine.apply(&puts(0, covered + 10)).unwrap();
    engine.advance_watermark(covered).unwrap();
    let largest = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let seen = std::sync::Arc::clone(&largest);
    engine
        .on_chunk_committed(Some(std::sync::Arc::new(
            move |chunk: &backend_sled::SweepTotals| {
                seen.fetch_max(chunk.rows_visited, std::sync::atomic::Ordering::AcqRel);
            },
        )))
        .unwrap();
    assert_eq!(engine.reclaim().unwrap().values_removed, covered);
    let sweep = engine.last_sweep().unwrap();
    assert_eq!((sweep.rows_visited, sweep.chunks), (covered, 4));
    assert_eq!(
        largest.load(std::sync::atomic::Ordering::Acquire),
        MAX_SWEEP_CHUNK_ROWS as u64
    );
    // Smaller requests are honoured as they are.
    drop(engine);
    let options = EngineOptions::default().with_sweep_chunk_rows(10);
    assert_eq!(
        SledEngine::open(tmp.path(), options)
            .unwrap()
            .sweep_chunk_rows(),
        10
    );
}
