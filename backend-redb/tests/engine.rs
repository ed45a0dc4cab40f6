//! Backend-specific behaviour of the redb engine: a corrupt row healed by an overwrite, meta
//! validated inside the file, a file that is not redb, and stats. The shared contract is
//! covered by the conformance suite.

// Test code may unwrap.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::Path;
use tidemark_backend_redb::RedbDiagnostics;

use tidemark_backend_redb::{DB_FILE, RedbEngine};
use tidemark_engine_api::{Engine, EngineOptions, Error, OpenEngine};

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
