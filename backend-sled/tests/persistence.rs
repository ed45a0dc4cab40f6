//! sled-specific persistence: meta validation, the format version and its upgrade, second
//! opens, the persisted live count (reopening in general is in the conformance suite).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

mod common;

use common::{key, open_fast, puts, raw_db};
use tidemark_backend_sled::SledEngine;
use tidemark_engine_api::{Engine, EngineOptions, Error, OpenEngine, WriteBatch};

/// Rewrites one `meta` entry with sled directly, bypassing the engine.
fn poke_meta(dir: &std::path::Path, key: &[u8], value: &[u8]) {
    let db = raw_db(dir);
    db.open_tree("meta").unwrap().insert(key, value).unwrap();
    db.flush().unwrap();
}

#[test]
fn newer_format_in_meta_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    drop(open_fast(tmp.path()));
    poke_meta(tmp.path(), b"format_version", &7u32.to_be_bytes());
    let err = SledEngine::open(tmp.path(), EngineOptions::default()).unwrap_err();
    assert!(
        matches!(
            err,
            Error::UnsupportedFormat {
                found: 7,
                supported: 2,
                ..
            }
        ),
        "{err}"
    );
}

/// The stored meta format version, raw.
fn stored_format(dir: &std::path::Path) -> Vec<u8> {
    let stored = raw_db(dir)
        .open_tree("meta")
        .unwrap()
        .get(b"format_version")
        .unwrap()
        .unwrap();
    stored.to_vec()
}

/// Marks the store at `dir` format 1, as a build from before the shared metadata codec wrote
/// it (a 4-byte version in meta, `format=1` in the marker).
fn make_format_1(dir: &std::path::Path) {
    poke_meta(dir, b"format_version", &1u32.to_be_bytes());
    let marker = dir.join(tidemark_disk::layout::MARKER_FILE);
    std::fs::write(marker, "backend=sled\nformat=1\n").unwrap();
}

#[test]
fn the_format_version_is_written_in_the_shared_encoding_and_format_1_is_upgraded() {
    let tmp = tempfile::tempdir().unwrap();
    open_fast(tmp.path()).apply(&puts(0, 3)).unwrap();
    assert_eq!(stored_format(tmp.path()), 2u64.to_be_bytes());
    // A format-1 store with a format-1 entry: a read-only open leaves it at format 1; a
    // writable open upgrades marker and meta to format 2, and the old entry still reads.
    make_format_1(tmp.path());
    {
        let engine = open_fast(tmp.path());
        engine
            .insert_raw(
                b"old",
                &tidemark_engine_api::codec::encode_value_v1(1, b"v1"),
            )
            .unwrap();
    }
    make_format_1(tmp.path());
    let read_only =
        EngineOptions::default().with_open_mode(tidemark_engine_api::OpenMode::ReadOnly);
    drop(SledEngine::open(tmp.path(), read_only).unwrap());
    assert_eq!(
        tidemark_disk::layout::read_marker(tmp.path())
            .unwrap()
            .format,
        1
    );
    let engine = open_fast(tmp.path());
    assert_eq!(engine.applied_end(), 3);
    assert_eq!(engine.stats().unwrap().live_entries, 4);
    assert_eq!(
        engine.lookup(b"old").unwrap(),
        tidemark_engine_api::LocalLookup::Value {
            offset: 1,
            bytes: b"v1".to_vec()
        }
    );
    assert_eq!(
        tidemark_disk::layout::read_marker(tmp.path())
            .unwrap()
            .format,
        2
    );
    drop(engine);
    assert_eq!(stored_format(tmp.path()), 2u64.to_be_bytes());
}

#[test]
fn a_refused_store_is_not_written_to_even_when_its_live_count_is_missing() {
    let tmp = tempfile::tempdir().unwrap();
    open_fast(tmp.path()).apply(&puts(0, 3)).unwrap();
    {
        let db = raw_db(tmp.path());
        let meta = db.open_tree("meta").unwrap();
        meta.insert(b"format_version", &7u64.to_be_bytes()).unwrap();
        meta.remove(b"live_entries").unwrap();
        db.flush().unwrap();
    }
    let err = SledEngine::open(tmp.path(), EngineOptions::default()).unwrap_err();
    assert!(
        matches!(err, Error::UnsupportedFormat { found: 7, .. }),
        "{err}"
    );
    // The recount happens only once the metadata is known to be readable by this build.
    assert_eq!(persisted_live_entries(tmp.path()), None);
}

#[test]
fn unparsable_meta_is_corrupt() {
    let tmp = tempfile::tempdir().unwrap();
    drop(open_fast(tmp.path()));
    poke_meta(tmp.path(), b"watermark", b"\x01\x02");
    let err = SledEngine::open(tmp.path(), EngineOptions::default()).unwrap_err();
    match err {
        Error::Corrupt { key, reason } => {
            // The shared metadata decoder names the entry `meta/<name>`.
            assert_eq!(key, b"meta/watermark");
            assert!(reason.contains("2 bytes"), "{reason}");
        }
        other => panic!("expected Corrupt, got {other}"),
    }
}

#[test]
fn a_second_open_of_a_live_store_is_a_backend_error() {
    let tmp = tempfile::tempdir().unwrap();
    let _first = open_fast(tmp.path());
    let err = SledEngine::open(tmp.path(), EngineOptions::default()).unwrap_err();
    assert!(
        matches!(
            err,
            Error::Backend {
                backend: "sled",
                ..
            }
        ),
        "{err}"
    );
}

#[test]
fn rapid_close_and_reopen_cycles() {
    let tmp = tempfile::tempdir().unwrap();
    for cycle in 0..20u64 {
        let engine = open_fast(tmp.path());
        assert_eq!(engine.applied_end(), cycle * 50);
        engine.apply(&puts(cycle * 50, 50)).unwrap();
    }
    assert_eq!(open_fast(tmp.path()).stats().unwrap().live_entries, 1000);
}

/// The `live_entries` row of `meta`, read with sled directly (the engine must be dropped).
fn persisted_live_entries(dir: &std::path::Path) -> Option<u64> {
    let db = raw_db(dir);
    let row = db.open_tree("meta").unwrap().get(b"live_entries").unwrap();
    row.map(|bytes| u64::from_be_bytes(bytes.as_ref().try_into().unwrap()))
}

#[test]
fn live_entry_count_is_exact_persisted_and_recounted_when_missing() {
    let tmp = tempfile::tempdir().unwrap();
    {
        let engine = open_fast(tmp.path());
        engine.apply(&puts(0, 100)).unwrap();
        let mut batch = WriteBatch::new();
        batch
            .put("a", "1", 100)
            .put("a", "2", 101) // the same new key twice in one batch counts once
            .delete("b", 102) // a tombstone is an entry
            .delete(key(0), 103) // overwriting an existing key adds nothing
            .put(key(1), "again", 104);
        engine.apply(&batch).unwrap();
        // Replays and covered records write nothing.
        engine.apply(&puts(0, 50)).unwrap();
        assert_eq!(engine.stats().unwrap().live_entries, 102);
        engine.advance_watermark(50).unwrap();
        // key2..key49 go; key0 and key1 were overwritten above the watermark and stay.
        assert_eq!(engine.reclaim().unwrap().values_removed, 48);
        assert_eq!(engine.stats().unwrap().live_entries, 54);
        engine.insert_raw(b"raw", b"\xff").unwrap();
        engine.insert_raw(&key(60), b"\xff").unwrap(); // replaces an entry: no change
        assert_eq!(engine.stats().unwrap().live_entries, 55);
    }
    assert_eq!(persisted_live_entries(tmp.path()), Some(55));
    assert_eq!(open_fast(tmp.path()).stats().unwrap().live_entries, 55);

    // A store without the row (written before it existed) is counted once on open, and the count
    // is persisted from then on; a damaged row is recounted the same way.
    {
        let db = raw_db(tmp.path());
        db.open_tree("meta")
            .unwrap()
            .remove(b"live_entries")
            .unwrap();
        db.flush().unwrap();
    }
    assert_eq!(open_fast(tmp.path()).stats().unwrap().live_entries, 55);
    assert_eq!(persisted_live_entries(tmp.path()), Some(55));
    poke_meta(tmp.path(), b"live_entries", b"\x01\x02");
    let engine = open_fast(tmp.path());
    assert_eq!(engine.stats().unwrap().live_entries, 55);
    engine.put(b"c", b"v", 200).unwrap();
    assert_eq!(engine.stats().unwrap().live_entries, 56);
    drop(engine);
    assert_eq!(persisted_live_entries(tmp.path()), Some(56));
}
