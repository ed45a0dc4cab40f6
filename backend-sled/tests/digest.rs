//! The live-row digest: rows that changed behind it are refused at open in every mode; a store
//! without one (or with one a writer without it left stale) gets one at a writable open; every
//! write path keeps it.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

mod common;

use std::path::Path;

use common::{key, open_fast, puts, raw_db};
use tidemark_backend_sled::SledEngine;
use tidemark_engine_api::Damage;
use tidemark_engine_api::{
    Engine, EngineOptions, Error, LocalLookup, OpenEngine, OpenMode, WriteBatch,
};

const DIGEST_ROW: &[u8] = b"live_digest";

fn open(dir: &Path, mode: OpenMode) -> tidemark_engine_api::Result<SledEngine> {
    SledEngine::open(dir, EngineOptions::default().with_open_mode(mode))
}

/// A store with values, overwrites, a tombstone, a reclaim and a raw entry behind it.
fn written_store(dir: &Path) {
    let engine = open_fast(dir);
    engine.apply(&puts(0, 40)).unwrap();
    let mut batch = WriteBatch::new();
    batch
        .put(key(3), "newer", 40)
        .put("twice", "1", 41)
        .put("twice", "2", 42)
        .delete(key(5), 43);
    engine.apply(&batch).unwrap();
    engine.advance_watermark(20).unwrap();
    engine.reclaim().unwrap();
    engine.insert_raw(b"raw", b"\xff").unwrap();
    engine.insert_raw(&key(30), b"\xfe").unwrap();
}

/// Runs `change` on the bucket's `data` and `meta` trees with sled directly (the engine must be
/// dropped), then flushes.
fn behind_the_engine(dir: &Path, change: impl FnOnce(&sled::Tree, &sled::Tree)) {
    let db = raw_db(dir);
    change(
        &db.open_tree("data").unwrap(),
        &db.open_tree("meta").unwrap(),
    );
    db.flush().unwrap();
}

fn digest_row(dir: &Path) -> Option<Vec<u8>> {
    let db = raw_db(dir);
    let row = db.open_tree("meta").unwrap().get(DIGEST_ROW).unwrap();
    row.map(|bytes| bytes.to_vec())
}

#[track_caller]
fn assert_refused(dir: &Path) {
    for mode in [
        OpenMode::CreateIfMissing,
        OpenMode::MustExist,
        OpenMode::ReadOnly,
    ] {
        match open(dir, mode) {
            Err(Error::Damaged { reason, .. }) => {
                assert!(reason.contains("live-row digest"), "{reason}");
                assert!(reason.contains("sled/db"), "{reason}");
            }
            Err(other) => panic!("{mode:?}: expected Damaged, got {other}"),
            Ok(_) => panic!("{mode:?}: rows changed behind the digest were opened"),
        }
    }
}

#[test]
fn every_write_path_keeps_the_digest() {
    let tmp = tempfile::tempdir().unwrap();
    written_store(tmp.path());
    let engine = open(tmp.path(), OpenMode::ReadOnly).unwrap();
    let report = engine.verify().unwrap();
    assert_eq!(
        report.engine_checks,
        ["live-row digest (every data row)"],
        "{report:?}"
    );
    // The raw entries are undecodable, and nothing else is wrong.
    assert!(
        report.finding(Damage::DigestMismatch).is_none(),
        "{report:?}"
    );
    assert_eq!(report.damaged(), 2, "{report:?}");
}

#[test]
fn an_older_version_of_a_row_is_refused_at_open() {
    let tmp = tempfile::tempdir().unwrap();
    written_store(tmp.path());
    // What sled's recovery does when it skips the segment holding a page's newest version: the
    // key's previous entry, whole and valid, below the applied end.
    let older = tidemark_engine_api::codec::encode_value(&key(3), 3, b"v3");
    behind_the_engine(tmp.path(), |data, _| {
        data.insert(key(3), older).unwrap();
    });
    assert_refused(tmp.path());
}

#[test]
fn a_lost_row_is_refused_at_open() {
    let tmp = tempfile::tempdir().unwrap();
    written_store(tmp.path());
    behind_the_engine(tmp.path(), |data, _| {
        data.remove(key(35)).unwrap();
    });
    assert_refused(tmp.path());
}

#[test]
fn a_store_without_a_digest_gets_one_at_a_writable_open() {
    let tmp = tempfile::tempdir().unwrap();
    written_store(tmp.path());
    behind_the_engine(tmp.path(), |_, meta| {
        meta.remove(DIGEST_ROW).unwrap();
    });
    // Read-only: nothing to compare the rows with, so no check, and nothing written.
    {
        let engine = open(tmp.path(), OpenMode::ReadOnly).unwrap();
        let report = engine.verify().unwrap();
        assert!(report.engine_checks.is_empty(), "{report:?}");
    }
    assert_eq!(digest_row(tmp.path()), None);
    // A writable open computes and stores it once; from then on it protects the rows.
    {
        let engine = open(tmp.path(), OpenMode::MustExist).unwrap();
        assert_eq!(engine.verify().unwrap().engine_checks.len(), 1);
    }
    assert!(digest_row(tmp.path()).is_some());
    behind_the_engine(tmp.path(), |data, _| {
        data.remove(key(35)).unwrap();
    });
    assert_refused(tmp.path());
}

#[test]
fn a_digest_left_stale_by_a_writer_without_it_is_recomputed() {
    let tmp = tempfile::tempdir().unwrap();
    written_store(tmp.path());
    // A build from before the digest applied a record: a row and the applied end moved, the
    // digest (stamped with the applied end it was written at) did not.
    let stored = tidemark_engine_api::codec::encode_value(b"later", 44, b"x");
    behind_the_engine(tmp.path(), |data, meta| {
        data.insert(b"later", stored).unwrap();
        meta.insert(b"applied_end", &45u64.to_be_bytes()).unwrap();
        let live = meta.get(b"live_entries").unwrap().unwrap();
        let live = u64::from_be_bytes(live.as_ref().try_into().unwrap());
        meta.insert(b"live_entries", &(live + 1).to_be_bytes())
            .unwrap();
    });
    let before = digest_row(tmp.path());
    drop(open(tmp.path(), OpenMode::ReadOnly).unwrap());
    assert_eq!(digest_row(tmp.path()), before, "a read-only open wrote");
    {
        let engine = open(tmp.path(), OpenMode::CreateIfMissing).unwrap();
        assert_eq!(
            engine.lookup(b"later").unwrap(),
            LocalLookup::Value {
                offset: 44,
                bytes: b"x".to_vec()
            }
        );
        let report = engine.verify().unwrap();
        assert!(
            report.finding(Damage::DigestMismatch).is_none(),
            "{report:?}"
        );
        assert_eq!(report.engine_checks.len(), 1, "{report:?}");
    }
    assert_ne!(digest_row(tmp.path()), before);
}

#[test]
fn an_unreadable_digest_row_is_corrupt() {
    let tmp = tempfile::tempdir().unwrap();
    written_store(tmp.path());
    behind_the_engine(tmp.path(), |_, meta| {
        meta.insert(DIGEST_ROW, &[1u8, 2, 3][..]).unwrap();
    });
    match open(tmp.path(), OpenMode::ReadOnly).unwrap_err() {
        Error::Corrupt { key, reason } => {
            assert_eq!(key, DIGEST_ROW);
            assert!(reason.contains("3 bytes"), "{reason}");
        }
        other => panic!("expected Corrupt, got {other}"),
    }
}
