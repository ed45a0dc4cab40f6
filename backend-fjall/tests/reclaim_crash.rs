//! A reclaim flushes only the `data` keyspace: the watermark and the applied end stay in the
//! `meta` memtable and the shared journal. A process that dies after reclaims, without closing
//! anything, must reopen with both, and with nothing the reclaims removed.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

mod common;

use std::path::Path;

use common::{CRASH_CHILD_EXIT, crash_child_dir, run_crash_child};
use tidemark_backend_fjall::{BackendContext, FjallContext, FjallEngine};
use tidemark_engine_api::WriteBatch;
use tidemark_engine_api::{Engine, EngineOptions, LocalLookup};

fn open(ctx: &FjallContext, path: &Path) -> FjallEngine {
    FjallEngine::open_in(ctx, path, EngineOptions::default()).unwrap()
}

fn key(offset: u64) -> Vec<u8> {
    format!("key-{offset:05}").into_bytes()
}

/// Writes one value per offset in `offsets`, under its own key, in one batch.
fn write(engine: &FjallEngine, offsets: std::ops::Range<u64>) {
    let mut batch = WriteBatch::new();
    for offset in offsets {
        batch.put(key(offset), b"v".to_vec(), offset);
    }
    engine.apply(&batch).unwrap();
}

/// The offsets in `offsets` whose key the bucket still holds.
fn held(engine: &FjallEngine, offsets: std::ops::Range<u64>) -> Vec<u64> {
    offsets
        .filter(|&o| engine.lookup(&key(o)).unwrap() != LocalLookup::Miss)
        .collect()
}

/// Advances `W` to `w` and reclaims; returns the values removed.
fn reclaim_at(engine: &FjallEngine, w: u64) -> u64 {
    engine.advance_watermark(w).unwrap();
    engine.reclaim().unwrap().values_removed
}

#[test]
fn reclaims_survive_a_crash_with_the_metadata_only_in_the_journal() {
    if let Some(dir) = crash_child_dir() {
        let ctx = FjallContext::for_buckets(1).unwrap();
        let engine = open(&ctx, &dir.join("b"));
        write(&engine, 0..100);
        assert_eq!(reclaim_at(&engine, 1), 1);
        // Removes the newest entries of the table files: the marker, flushed with them, keeps
        // the newest sequence number there above every removal.
        assert_eq!(reclaim_at(&engine, 100), 99);
        write(&engine, 100..110);
        // The journal, with every write above, is durable; no memtable is flushed after the
        // reclaims, and none of `meta` by them.
        engine.flush().unwrap();
        assert_eq!(held(&engine, 0..110), (100..110).collect::<Vec<_>>());
        std::process::exit(CRASH_CHILD_EXIT + i32::from(engine.applied_end() != 110));
    }
    let tmp = tempfile::tempdir().unwrap();
    run_crash_child(
        "reclaims_survive_a_crash_with_the_metadata_only_in_the_journal",
        tmp.path(),
    );
    let ctx = FjallContext::for_buckets(1).unwrap();
    let engine = open(&ctx, &tmp.path().join("b"));
    assert_eq!((engine.watermark(), engine.applied_end()), (100, 110));
    assert_eq!(held(&engine, 0..110), (100..110).collect::<Vec<_>>());
    // The reopened bucket reclaims on: its first reclaim flushes behind a new marker.
    assert_eq!(reclaim_at(&engine, 105), 5);
    assert_eq!(held(&engine, 0..110), (105..110).collect::<Vec<_>>());
}
