//! The range-scan sweeper on sled: why its chunks are capped (the sweeper's shared contract is
//! in the conformance suite).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

mod common;

use common::ChaosEngine;
use common::puts;
use tidemark_backend_sled::MAX_SWEEP_CHUNK_ROWS;
use tidemark_engine_api::{Engine, EngineOptions, OpenEngine};

#[test]
fn chunks_are_capped_because_a_sled_transaction_blocks_every_store_in_the_process() {
    let tmp = tempfile::tempdir().unwrap();
    // The default asks for 4096 rows per chunk; sled uses at most MAX_SWEEP_CHUNK_ROWS. Sized by
    // rows alone (no time target), so the cap is what limits the chunks.
    let options = EngineOptions::default()
        .with_sync_writes(false)
        .with_sweep_chunk_time(None);
    let engine = ChaosEngine::open(tmp.path(), options).unwrap();
    assert_eq!(engine.options().sweep_chunk_rows, 4096);
    assert_eq!(
        engine.storage().inner().sweep_chunk_rows(),
        MAX_SWEEP_CHUNK_ROWS
    );
    let covered = 4 * MAX_SWEEP_CHUNK_ROWS as u64 - 24;
    engine.apply(&puts(0, covered + 10)).unwrap();
    engine.advance_watermark(covered).unwrap();
    let largest = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let seen = std::sync::Arc::clone(&largest);
    engine
        .storage()
        .faults()
        .on_chunk_committed(Some(std::sync::Arc::new(
            move |chunk: &tidemark_backend_sled::SweepTotals| {
                seen.fetch_max(chunk.rows_visited, std::sync::atomic::Ordering::AcqRel);
            },
        )));
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
        ChaosEngine::open(tmp.path(), options)
            .unwrap()
            .storage()
            .inner()
            .sweep_chunk_rows(),
        10
    );
}
