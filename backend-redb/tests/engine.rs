//! Backend-specific behaviour of the redb engine: persistence, corruption handling, directory
//! checks and stats. The shared contract is covered by the conformance suite.

// Test code may unwrap.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::Path;

use backend_redb::{DB_FILE, RedbEngine};
use engine_api::{Engine, EngineOptions, Error, LocalLookup, OpenEngine, WriteBatch};

fn open(dir: &Path) -> RedbEngine {
    RedbEngine::open(dir, EngineOptions::default()).unwrap()
}

/// Writes `value` into the `meta` table directly, bypassing the engine (the engine must be
/// closed).
fn poke_meta(dir: &Path, name: &str, value: &[u8]) {
    const META: redb::TableDefinition<&str, &[u8]> = redb::TableDefinition::new("meta");
    let db = redb::Database::open(dir.join(DB_FILE)).unwrap();
    let txn = db.begin_write().unwrap();
    txn.open_table(META).unwrap().insert(name, value).unwrap();
    txn.commit().unwrap();
}

#[test]
fn reopen_restores_watermark_applied_end_and_data() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("bucket");
    {
        let engine = open(&dir);
        let mut batch = WriteBatch::new();
        batch
            .put("a", "1", 0)
            .put("b", "2", 1)
            .delete("a", 2)
            .put("c", "3", 3);
        engine.apply(&batch).unwrap();
        assert!(engine.advance_watermark(2).unwrap().moved);
        assert_eq!(engine.reclaim().unwrap().removed(), 1); // b@1; a@0 is stale
    }
    let engine = open(&dir);
    assert_eq!(engine.watermark(), 2);
    assert_eq!(engine.applied_end(), 4);
    assert_eq!(
        engine.lookup(b"a").unwrap(),
        LocalLookup::Tombstone { offset: 2 }
    );
    assert_eq!(engine.lookup(b"b").unwrap(), LocalLookup::Miss);
    assert_eq!(
        engine.lookup(b"c").unwrap(),
        LocalLookup::Value {
            offset: 3,
            bytes: b"3".to_vec()
        }
    );
    // Replaying the WAL after the restart is idempotent.
    let mut replay = WriteBatch::new();
    replay.put("b", "2", 1).put("c", "3", 3).put("d", "4", 4);
    let outcome = engine.apply(&replay).unwrap();
    assert_eq!(
        (outcome.covered, outcome.already_applied, outcome.applied),
        (1, 1, 1)
    );
    assert_eq!(engine.applied_end(), 5);
}

#[test]
fn unsynced_writes_survive_a_clean_close_and_flush() {
    let tmp = tempfile::tempdir().unwrap();
    let options = EngineOptions::default().with_sync_writes(false);
    {
        let engine = RedbEngine::open(tmp.path(), options.clone()).unwrap();
        engine.put(b"k", b"v", 7).unwrap();
        engine.flush().unwrap();
        engine.put(b"k2", b"v", 8).unwrap();
    }
    let engine = RedbEngine::open(tmp.path(), options).unwrap();
    assert_eq!(engine.applied_end(), 9);
    assert_eq!(engine.lookup(b"k").unwrap().offset(), Some(7));
    assert_eq!(engine.lookup(b"k2").unwrap().offset(), Some(8));
}

#[test]
fn corrupt_value_is_kept_counted_and_reported_by_lookup() {
    let tmp = tempfile::tempdir().unwrap();
    let engine = open(tmp.path());
    engine.put(b"good", b"v", 0).unwrap();
    engine.insert_raw(b"bad", &[0x07, 1, 2]).unwrap();
    engine.put(b"later", b"v", 5).unwrap();
    engine.advance_watermark(3).unwrap();

    let report = engine.reclaim().unwrap();
    assert_eq!((report.values_removed, report.corrupt_kept), (1, 1));
    match engine.lookup(b"bad") {
        Err(Error::Corrupt { key, .. }) => assert_eq!(key, b"bad"),
        other => panic!("expected Corrupt, got {other:?}"),
    }
    // Kept: the next sweep meets and counts it again, and it still counts as live.
    assert_eq!(engine.reclaim().unwrap().corrupt_kept, 1);
    let stats = engine.stats().unwrap();
    assert_eq!(stats.counters.corrupt_kept, 2);
    assert_eq!(stats.live_entries, 2);
    // Overwriting the corrupt row heals it; the sweeper then drops its stale index row.
    engine.put(b"bad", b"fixed", 6).unwrap();
    engine.advance_watermark(7).unwrap();
    let report = engine.reclaim().unwrap();
    assert_eq!((report.values_removed, report.corrupt_kept), (2, 0));
    assert_eq!(engine.stats().unwrap().live_entries, 0);
}

#[test]
fn stats_report_live_covered_and_file_size() {
    let tmp = tempfile::tempdir().unwrap();
    let engine = open(tmp.path());
    for i in 0..10u64 {
        engine
            .put(format!("k{}", i % 5).as_bytes(), b"payload", i)
            .unwrap();
    }
    engine.advance_watermark(6).unwrap();
    let stats = engine.stats().unwrap();
    assert_eq!(stats.live_entries, 5);
    assert!(stats.live_entries_exact);
    // Index rows below 6: five live-or-stale rows k0..k4@0..4 plus k0@5 — an upper bound on
    // the one live covered entry (k0@5).
    assert_eq!(stats.covered_estimate, 6);
    assert_eq!(stats.bytes_on_disk, engine.disk_stats().unwrap().file_bytes);
    assert!(stats.bytes_on_disk > 0);

    let report = engine.reclaim().unwrap();
    assert_eq!(report.removed(), 1);
    assert_eq!(engine.last_sweep().unwrap().stale_dropped, 5);
    let stats = engine.stats().unwrap();
    assert_eq!((stats.live_entries, stats.covered_estimate), (4, 0));
    assert_eq!(stats.counters.reclaim_runs, 1);
    assert_eq!(stats.counters.applied, 10);
}

#[test]
fn retention_distance_keeps_a_margin() {
    let tmp = tempfile::tempdir().unwrap();
    let options = EngineOptions::default().with_retention_distance(3);
    let engine = RedbEngine::open(tmp.path(), options).unwrap();
    for i in 0..10u64 {
        engine.put(format!("k{i}").as_bytes(), b"v", i).unwrap();
    }
    engine.advance_watermark(8).unwrap();
    let report = engine.reclaim().unwrap();
    assert_eq!((report.threshold, report.removed()), (5, 5));
    assert_eq!(engine.lookup(b"k5").unwrap().offset(), Some(5));
}

#[test]
fn other_backends_and_foreign_directories_are_refused() {
    let tmp = tempfile::tempdir().unwrap();

    let sled_dir = tmp.path().join("sled");
    disk::layout::claim_directory(&sled_dir, "sled").unwrap();
    let err = RedbEngine::open(&sled_dir, EngineOptions::default()).unwrap_err();
    assert!(matches!(err, Error::WrongBackend { .. }), "{err}");
    assert!(err.to_string().contains("sled"), "{err}");
    assert!(
        !sled_dir.join(DB_FILE).exists(),
        "must not create files there"
    );

    // A directory with another engine's files but no marker (sled writes `conf` and `db`).
    let foreign = tmp.path().join("foreign");
    std::fs::create_dir_all(&foreign).unwrap();
    std::fs::write(foreign.join("conf"), "segment_size: 524288").unwrap();
    let err = RedbEngine::open(&foreign, EngineOptions::default()).unwrap_err();
    assert!(matches!(err, Error::ForeignDirectory { .. }), "{err}");
    assert!(err.to_string().contains("conf"), "{err}");

    let newer = tmp.path().join("newer");
    std::fs::create_dir_all(&newer).unwrap();
    std::fs::write(newer.join("TIDEMARK"), "backend=redb\nformat=3\n").unwrap();
    let err = RedbEngine::open(&newer, EngineOptions::default()).unwrap_err();
    assert!(
        matches!(err, Error::UnsupportedFormat { found: 3, .. }),
        "{err}"
    );
}

#[test]
fn newer_format_or_corrupt_meta_inside_the_file_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    drop(open(tmp.path()));
    poke_meta(tmp.path(), "format_version", &3u64.to_be_bytes());
    let err = RedbEngine::open(tmp.path(), EngineOptions::default()).unwrap_err();
    assert!(
        matches!(
            err,
            Error::UnsupportedFormat {
                found: 3,
                supported: 2,
                ..
            }
        ),
        "{err}"
    );

    let tmp = tempfile::tempdir().unwrap();
    drop(open(tmp.path()));
    poke_meta(tmp.path(), "watermark", &[1, 2, 3]);
    let err = RedbEngine::open(tmp.path(), EngineOptions::default()).unwrap_err();
    assert!(matches!(err, Error::Corrupt { .. }), "{err}");
    assert!(err.to_string().contains("watermark"), "{err}");
}

#[test]
fn a_file_that_is_not_redb_is_a_backend_error_not_a_panic() {
    let tmp = tempfile::tempdir().unwrap();
    drop(open(tmp.path()));
    std::fs::write(tmp.path().join(DB_FILE), vec![0xabu8; 8192]).unwrap();
    let err = RedbEngine::open(tmp.path(), EngineOptions::default()).unwrap_err();
    assert!(
        matches!(
            err,
            Error::Backend {
                backend: "redb",
                ..
            }
        ),
        "{err}"
    );
}
