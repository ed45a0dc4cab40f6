//! RocksDB-specific engine behaviour beyond the shared conformance suite: versions spread over
//! levels never resurrect, metadata persistence and corruption, the covered estimate, and the
//! directory layout.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

use std::path::Path;

use backend_rocksdb::engine::{DATA_CF, DB_DIR, META_CF};
use backend_rocksdb::{ContextOptions, RocksDbContext, RocksDbEngine};
use engine_api::{Engine, EngineOptions, Error, LocalLookup, OpenEngine};
use rocksdb::{DB, Options};

fn open(dir: &Path) -> RocksDbEngine {
    RocksDbEngine::open(dir, EngineOptions::default()).unwrap()
}

/// Puts `k@1`, then pushes it to the bottom level with a reclaim that covers nothing, then puts
/// `k@5` and flushes it into L0.
fn old_at_bottom_new_in_l0(engine: &RocksDbEngine, newer_is_tombstone: bool) {
    engine.put(b"k", b"old", 1).unwrap();
    let report = engine.reclaim().unwrap();
    assert_eq!(report.removed(), 0);
    let levels = engine.data_files_per_level().unwrap();
    assert_eq!(levels.iter().sum::<u64>(), 1);
    assert_eq!(
        levels[6], 1,
        "old version is in the bottom level: {levels:?}"
    );
    if newer_is_tombstone {
        engine.delete(b"k", 5).unwrap();
    } else {
        engine.put(b"k", b"new", 5).unwrap();
    }
    engine.flush_memtables().unwrap();
    let levels = engine.data_files_per_level().unwrap();
    assert_eq!((levels[0], levels[6]), (1, 1), "{levels:?}");
}

#[test]
fn reclaiming_a_newer_version_never_resurrects_the_bottom_one() {
    for tombstone in [false, true] {
        let tmp = tempfile::tempdir().unwrap();
        let engine = open(tmp.path());
        old_at_bottom_new_in_l0(&engine, tombstone);
        engine.advance_watermark(6).unwrap();
        let report = engine.reclaim().unwrap();
        // One logical entry (the newest version) was covered and removed; the older version
        // went with it as an obsolete version, not as a second removal.
        assert_eq!(report.removed(), 1, "{report:?}");
        assert_eq!(
            (report.values_removed, report.tombstones_removed),
            if tombstone { (0, 1) } else { (1, 0) }
        );
        assert_eq!(engine.lookup(b"k").unwrap(), LocalLookup::Miss);
        drop(engine);
        let engine = open(tmp.path());
        assert_eq!(engine.lookup(b"k").unwrap(), LocalLookup::Miss);
        assert_eq!(engine.reclaim().unwrap().removed(), 0);
        assert_eq!(engine.lookup(b"k").unwrap(), LocalLookup::Miss);
    }
}

#[test]
fn covering_only_the_older_version_keeps_the_newer_and_later_removes_both() {
    let tmp = tempfile::tempdir().unwrap();
    let engine = open(tmp.path());
    old_at_bottom_new_in_l0(&engine, false);
    // W = 3 covers k@1 only, but k@1 is no longer the key's entry: k@5 is, and it is not covered.
    engine.advance_watermark(3).unwrap();
    let report = engine.reclaim().unwrap();
    assert_eq!(report.removed(), 0, "{report:?}");
    let expected = LocalLookup::Value {
        offset: 5,
        bytes: b"new".to_vec(),
    };
    assert_eq!(engine.lookup(b"k").unwrap(), expected);
    let levels = engine.data_files_per_level().unwrap();
    assert_eq!(
        levels.iter().sum::<u64>(),
        1,
        "merged into one file: {levels:?}"
    );

    engine.advance_watermark(6).unwrap();
    assert_eq!(engine.reclaim().unwrap().values_removed, 1);
    assert_eq!(engine.lookup(b"k").unwrap(), LocalLookup::Miss);
}

#[test]
fn watermark_and_applied_end_survive_reopen_and_the_filter_uses_them() {
    let tmp = tempfile::tempdir().unwrap();
    {
        let engine = open(tmp.path());
        for i in 0..10u64 {
            engine.put(format!("k{i}").as_bytes(), b"v", i).unwrap();
        }
        assert!(engine.advance_watermark(4).unwrap().moved);
    }
    let engine = open(tmp.path());
    assert_eq!((engine.watermark(), engine.applied_end()), (4, 10));
    // The restored W drives the filter straight away.
    let report = engine.reclaim().unwrap();
    assert_eq!((report.threshold, report.values_removed), (4, 4));
    assert_eq!(engine.lookup(b"k3").unwrap(), LocalLookup::Miss);
    assert!(matches!(
        engine.lookup(b"k4").unwrap(),
        LocalLookup::Value { offset: 4, .. }
    ));
}

#[test]
fn covered_estimate_tracks_writes_and_reclaims() {
    let tmp = tempfile::tempdir().unwrap();
    let engine = open(tmp.path());
    let mut batch = engine_api::WriteBatch::new();
    for i in 0..100u64 {
        batch.put(format!("k{i}"), b"v".to_vec(), i);
    }
    engine.apply(&batch).unwrap();
    assert_eq!(engine.stats().unwrap().covered_estimate, 0);
    engine.advance_watermark(40).unwrap();
    assert_eq!(engine.stats().unwrap().covered_estimate, 40);
    let report = engine.reclaim().unwrap();
    assert_eq!(report.values_removed, 40);
    assert!(report.bytes_after <= report.bytes_before, "{report:?}");
    let stats = engine.stats().unwrap();
    assert_eq!(stats.covered_estimate, 0);
    assert!(!stats.live_entries_exact);
    assert!(stats.bytes_on_disk > 0);
    assert_eq!(stats.counters.reclaimed_values, 40);
}

fn raw_meta_db(dir: &Path) -> DB {
    let opts = Options::default();
    DB::open_cf(&opts, dir.join(DB_DIR), [DATA_CF, META_CF]).unwrap()
}

#[test]
fn unparsable_metadata_is_corrupt_and_newer_format_is_unsupported() {
    let tmp = tempfile::tempdir().unwrap();
    drop(open(tmp.path()));
    {
        let db = raw_meta_db(tmp.path());
        let meta = db.cf_handle(META_CF).unwrap();
        db.put_cf(meta, b"watermark", b"xyz").unwrap();
    }
    match RocksDbEngine::open(tmp.path(), EngineOptions::default()) {
        Err(Error::Corrupt { key, .. }) => assert_eq!(key, b"watermark"),
        other => panic!("expected Corrupt, got {other:?}"),
    }

    let tmp = tempfile::tempdir().unwrap();
    drop(open(tmp.path()));
    {
        let db = raw_meta_db(tmp.path());
        let meta = db.cf_handle(META_CF).unwrap();
        db.put_cf(meta, b"format_version", 2u64.to_be_bytes())
            .unwrap();
    }
    match RocksDbEngine::open(tmp.path(), EngineOptions::default()) {
        Err(Error::UnsupportedFormat { found: 2, .. }) => {}
        other => panic!("expected UnsupportedFormat, got {other:?}"),
    }
}

#[test]
fn directory_layout_and_foreign_directories() {
    let tmp = tempfile::tempdir().unwrap();
    let bucket = tmp.path().join("missing").join("bucket");
    drop(open(&bucket));
    assert!(bucket.join("TIDEMARK").is_file());
    assert!(bucket.join(DB_DIR).join("CURRENT").is_file());

    let foreign = tempfile::tempdir().unwrap();
    std::fs::write(foreign.path().join("data.redb"), b"x").unwrap();
    assert!(matches!(
        RocksDbEngine::open(foreign.path(), EngineOptions::default()),
        Err(Error::ForeignDirectory { .. })
    ));
    let other = tempfile::tempdir().unwrap();
    engine_api::layout::claim_directory(other.path(), "sled").unwrap();
    assert!(matches!(
        RocksDbEngine::open(other.path(), EngineOptions::default()),
        Err(Error::WrongBackend { .. })
    ));
}

#[test]
fn raw_injection_is_kept_and_counted_by_reclaim_and_fails_lookup() {
    let tmp = tempfile::tempdir().unwrap();
    let engine = open(tmp.path());
    engine.put(b"good", b"v", 0).unwrap();
    engine.insert_raw(b"bad", b"\x09garbage").unwrap();
    engine.advance_watermark(1).unwrap();
    let report = engine.reclaim().unwrap();
    assert_eq!((report.values_removed, report.corrupt_kept), (1, 1));
    assert!(matches!(engine.lookup(b"bad"), Err(Error::Corrupt { .. })));
    // Met once per reclaim, not once per level it passes through.
    assert_eq!(engine.reclaim().unwrap().corrupt_kept, 1);
}

#[test]
fn engines_in_a_private_context_and_unsynced_writes() {
    let ctx = RocksDbContext::new(ContextOptions {
        rate_limit_bytes_per_sec: None,
        ..ContextOptions::default()
    })
    .unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let options = EngineOptions::default().with_sync_writes(false);
    {
        let engine = RocksDbEngine::open_in(&ctx, tmp.path(), options.clone()).unwrap();
        engine.put(b"a", b"1", 0).unwrap();
        engine.flush().unwrap();
    }
    let engine = RocksDbEngine::open_in(&ctx, tmp.path(), options).unwrap();
    assert_eq!(
        engine.lookup(b"a").unwrap(),
        LocalLookup::Value {
            offset: 0,
            bytes: b"1".to_vec()
        }
    );
    assert_eq!(engine.context().settings().rate_limit_bytes_per_sec, None);
}
