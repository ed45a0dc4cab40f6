//! Opening existing stores (§ Engine contract / open): an open that must find a store creates
//! nothing where there is none, and a read-only open reads everything and writes nothing.

use tidemark_disk::layout;
use tidemark_engine_api::{Engine, EngineOptions, Error, LocalLookup, OpenMode, Record};

use super::util::{apply, assert_lookup, file_snapshot, tombstone, value};
use crate::{EngineFactory, Harness};

fn modes() -> [OpenMode; 2] {
    [OpenMode::MustExist, OpenMode::ReadOnly]
}

#[track_caller]
fn assert_no_store<E>(result: tidemark_engine_api::Result<E>, what: &str) {
    match result {
        Err(Error::NoStore { .. }) => {}
        Err(e) => panic!("{what}: expected NoStore, got {e}"),
        Ok(_) => panic!("{what}: opened a store where there is none"),
    }
}

/// An open that requires an existing store (read-write or read-only) of a path holding none —
/// no such directory, an empty directory, a marker without the engine's files — is
/// `Error::NoStore`, and nothing is created there: the path stays absent, the directory keeps
/// exactly what it held.
pub fn open_existing_creates_nothing<F: EngineFactory>(factory: F) {
    let h = Harness::new(factory);
    let name = h.backend();
    let missing = h.scratch().join("no").join("such");
    let empty = h.scratch().join("empty");
    std::fs::create_dir(&empty).unwrap();
    let marked = h.scratch().join("marked");
    layout::claim_directory(&marked, name).unwrap();
    let marked_before = file_snapshot(&marked);
    for mode in modes() {
        let options = || h.options().clone().with_open_mode(mode);
        assert_no_store(h.factory().open(&missing, options()), "missing path");
        assert!(
            !h.scratch().join("no").exists(),
            "{mode:?}: created the missing path"
        );
        assert_no_store(h.factory().open(&empty, options()), "empty directory");
        assert!(
            file_snapshot(&empty).is_empty(),
            "{mode:?}: wrote into an empty dir"
        );
        assert_no_store(h.factory().open(&marked, options()), "marker only");
        assert_eq!(
            file_snapshot(&marked),
            marked_before,
            "{mode:?}: changed a marked dir"
        );
    }
}

/// A store opened read-only reads exactly what a read-write open does (data, `W`, the applied
/// end, stats), refuses every write, watermark change, reclaim and flush with
/// `Error::ReadOnly`, and leaves the store as it was: reopened read-write, nothing changed;
/// where the engine opens its files read-only, every file is byte for byte the same.
pub fn read_only_open_reads_and_refuses_writes<F: EngineFactory>(factory: F) {
    let mut h = Harness::new(factory);
    let e = h.engine();
    apply(
        e,
        [
            Record::put(b"a", b"1", 0),
            Record::delete(b"gone", 1),
            Record::put(b"b", b"2", 2),
        ],
    );
    e.advance_watermark(1).unwrap();
    let live = e.stats().unwrap().live_entries;
    h.close();
    let before = file_snapshot(h.path());
    let read_only = h.options().clone().with_open_mode(OpenMode::ReadOnly);
    {
        let ro = h.factory().open(h.path(), read_only).unwrap();
        assert_eq!((ro.watermark(), ro.applied_end()), (1, 3));
        assert_lookup(&ro, b"a", &value(0, "1"));
        assert_lookup(&ro, b"gone", &tombstone(1));
        assert_lookup(&ro, b"never", &LocalLookup::Miss);
        let stats = ro.stats().unwrap();
        assert_eq!((stats.watermark, stats.applied_end), (1, 3));
        if h.capabilities().declared.exact_live_entries {
            assert_eq!(stats.live_entries, live);
        }
        let refused = |what: &str, result: tidemark_engine_api::Result<()>| match result {
            Err(Error::ReadOnly { .. }) => {}
            Err(e) => panic!("{what} on a read-only store: expected ReadOnly, got {e}"),
            Ok(()) => panic!("{what} on a read-only store succeeded"),
        };
        refused("apply", ro.put(b"c", b"3", 3).map(drop));
        refused("apply of replayed records", ro.put(b"a", b"1", 0).map(drop));
        refused("advance_watermark", ro.advance_watermark(3).map(drop));
        refused("adopt_lake_watermark", ro.adopt_lake_watermark(9).map(drop));
        refused("reclaim", ro.reclaim().map(drop));
        refused("reclaim_below", ro.reclaim_below(1).map(drop));
        refused("flush", ro.flush());
        assert_eq!((ro.watermark(), ro.applied_end()), (1, 3));
        assert!(ro.verify().unwrap().is_clean());
    }
    if h.capabilities().declared.read_only_files {
        assert_eq!(
            file_snapshot(h.path()),
            before,
            "a read-only open changed the store's files"
        );
    }
    let e = h.reopen();
    assert_eq!((e.watermark(), e.applied_end()), (1, 3));
    assert_lookup(e, b"a", &value(0, "1"));
    assert_lookup(e, b"b", &value(2, "2"));
    assert_lookup(e, b"c", &LocalLookup::Miss);
}

/// An open that requires an existing store opens one read-write: it writes, reclaims and
/// advances `W`, and a later ordinary open sees it.
pub fn must_exist_open_writes<F: EngineFactory>(factory: F) {
    let mut h = Harness::new(factory);
    h.engine().put(b"a", b"1", 0).unwrap();
    h.close();
    {
        let options = EngineOptions::default().with_open_mode(OpenMode::MustExist);
        let e = h.factory().open(h.path(), options).unwrap();
        e.put(b"b", b"2", 1).unwrap();
        e.advance_watermark(1).unwrap();
        assert_eq!(e.reclaim().unwrap().values_removed, 1);
        e.flush().unwrap();
    }
    let e = h.reopen();
    assert_eq!((e.watermark(), e.applied_end()), (1, 2));
    assert_lookup(e, b"a", &LocalLookup::Miss);
    assert_lookup(e, b"b", &value(1, "2"));
}
