//! The layout fjall buckets share: one database per directory of buckets, a keyspace record per
//! bucket, and what an open refuses.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

mod common;

use std::path::Path;

use common::{CRASH_CHILD_EXIT, crash_child_dir, run_crash_child};
use tidemark_backend_fjall::{
    BackendContext, FjallContext, FjallEngine, KEYSPACE_RECORD, MAX_BUCKETS_PER_DATABASE,
    SHARED_DIR,
};
use tidemark_engine_api::{Engine, EngineOptions, Error, LocalLookup};

fn open(ctx: &FjallContext, path: &Path) -> tidemark_engine_api::Result<FjallEngine> {
    FjallEngine::open_in(ctx, path, EngineOptions::default())
}

fn value(engine: &FjallEngine, key: &[u8]) -> Option<Vec<u8>> {
    match engine.lookup(key).unwrap() {
        LocalLookup::Value { bytes, .. } => Some(bytes),
        _ => None,
    }
}

#[test]
fn buckets_of_one_directory_share_a_database_and_keep_their_own_keyspaces() {
    let tmp = tempfile::tempdir().unwrap();
    let ctx = FjallContext::for_buckets(4).unwrap();
    let a = open(&ctx, &tmp.path().join("a")).unwrap();
    let b = open(&ctx, &tmp.path().join("b")).unwrap();
    assert_eq!(
        a.storage().database_path().unwrap(),
        b.storage().database_path().unwrap()
    );
    assert_eq!(
        a.storage().database_path().unwrap(),
        tmp.path()
            .canonicalize()
            .unwrap()
            .join(SHARED_DIR)
            .join("0")
    );
    assert_eq!(
        (a.storage().keyspace_name(), b.storage().keyspace_name()),
        ("a", "b")
    );
    a.put(b"k", b"from-a", 0).unwrap();
    b.put(b"k", b"from-b", 0).unwrap();
    assert_eq!(value(&a, b"k").as_deref(), Some(&b"from-a"[..]));
    assert_eq!(value(&b, b"k").as_deref(), Some(&b"from-b"[..]));
    // Reclaiming one bucket leaves the other's entries alone.
    a.advance_watermark(1).unwrap();
    assert_eq!(a.reclaim().unwrap().values_removed, 1);
    assert_eq!(value(&a, b"k"), None);
    assert_eq!(value(&b, b"k").as_deref(), Some(&b"from-b"[..]));
    assert_eq!(ctx.open_buckets(), 2);
    drop((a, b));
    assert_eq!(ctx.open_buckets(), 0);
    // The database closed with its last bucket; both reopen from it.
    let b = open(&ctx, &tmp.path().join("b")).unwrap();
    assert_eq!(value(&b, b"k").as_deref(), Some(&b"from-b"[..]));
    let a = open(&ctx, &tmp.path().join("a")).unwrap();
    assert_eq!((value(&a, b"k"), a.watermark()), (None, 1));
}

#[test]
fn a_bucket_open_twice_in_one_process_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let ctx = FjallContext::for_buckets(4).unwrap();
    let path = tmp.path().join("bucket");
    let first = open(&ctx, &path).unwrap();
    let err = open(&ctx, &path).unwrap_err();
    assert!(err.to_string().contains("already open"), "{err}");
    // A copy of the directory names the same keyspaces: refused, never two engines writing one
    // keyspace.
    let copy = tmp.path().join("copy");
    std::fs::create_dir(&copy).unwrap();
    for entry in std::fs::read_dir(&path).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), copy.join(entry.file_name())).unwrap();
    }
    let err = open(&ctx, &copy).unwrap_err();
    assert!(err.to_string().contains("copied or moved"), "{err}");
    drop(first);
    assert!(open(&ctx, &path).is_ok());
    // Nor once the original is closed: the copy never writes the original's keyspaces.
    let err = open(&ctx, &copy).unwrap_err();
    assert!(err.to_string().contains("copied or moved"), "{err}");
}

#[test]
fn a_recreated_directory_never_reuses_leftover_keyspaces() {
    let tmp = tempfile::tempdir().unwrap();
    let ctx = FjallContext::for_buckets(4).unwrap();
    let path = tmp.path().join("bucket");
    {
        let e = open(&ctx, &path).unwrap();
        e.put(b"old", b"v", 0).unwrap();
    }
    std::fs::remove_dir_all(&path).unwrap();
    let e = open(&ctx, &path).unwrap();
    assert_eq!(e.storage().keyspace_name(), "bucket~1");
    assert_eq!((e.applied_end(), value(&e, b"old")), (0, None));
}

#[test]
fn a_record_naming_missing_keyspaces_or_unreadable_is_damage() {
    let tmp = tempfile::tempdir().unwrap();
    let ctx = FjallContext::for_buckets(4).unwrap();
    let path = tmp.path().join("bucket");
    drop(open(&ctx, &path).unwrap());
    let record = path.join(KEYSPACE_RECORD);
    let home = path.canonicalize().unwrap();
    let home = home.display();
    std::fs::write(
        &record,
        format!("keyspace=elsewhere\ndatabase=0\nhome={home}\n"),
    )
    .unwrap();
    assert!(matches!(open(&ctx, &path), Err(Error::Damaged { .. })));
    std::fs::write(
        &record,
        format!("keyspace=bucket\ndatabase=7\nhome={home}\n"),
    )
    .unwrap();
    assert!(matches!(open(&ctx, &path), Err(Error::Damaged { .. })));
    std::fs::write(&record, [0xff, 0x00]).unwrap();
    assert!(matches!(open(&ctx, &path), Err(Error::Damaged { .. })));
    std::fs::remove_file(&record).unwrap();
    // The high-water record says a store lived here: a missing record is damage too.
    assert!(matches!(open(&ctx, &path), Err(Error::Damaged { .. })));
}

#[test]
fn a_missing_shared_database_is_damage_not_a_new_store() {
    let tmp = tempfile::tempdir().unwrap();
    let ctx = FjallContext::for_buckets(4).unwrap();
    let path = tmp.path().join("bucket");
    {
        let e = open(&ctx, &path).unwrap();
        e.put(b"k", b"v", 0).unwrap();
    }
    std::fs::remove_dir_all(tmp.path().join(SHARED_DIR)).unwrap();
    assert!(matches!(open(&ctx, &path), Err(Error::Damaged { .. })));
    assert!(!tmp.path().join(SHARED_DIR).exists(), "nothing was created");
}

#[test]
fn reclaimed_entries_stay_gone_across_reopens() {
    let tmp = tempfile::tempdir().unwrap();
    let ctx = FjallContext::for_buckets(4).unwrap();
    let path = tmp.path().join("bucket");
    {
        let e = open(&ctx, &path).unwrap();
        // Only in the journal and the memtable when the reclaim removes them.
        e.put(b"a", b"v", 0).unwrap();
        e.delete(b"b", 1).unwrap();
        e.put(b"c", b"kept", 2).unwrap();
        e.advance_watermark(2).unwrap();
        let r = e.reclaim().unwrap();
        assert_eq!((r.values_removed, r.tombstones_removed), (1, 1));
    }
    for _ in 0..2 {
        let e = open(&ctx, &path).unwrap();
        assert_eq!(e.lookup(b"a").unwrap(), LocalLookup::Miss);
        assert_eq!(e.lookup(b"b").unwrap(), LocalLookup::Miss);
        assert_eq!(value(&e, b"c").as_deref(), Some(&b"kept"[..]));
        assert_eq!(e.reclaim().unwrap().removed(), 0);
    }
}

/// A directory of more buckets than one shared database takes
/// ([`MAX_BUCKETS_PER_DATABASE`]) spreads them over several, and every one of them reopens.
#[test]
fn a_directory_of_many_buckets_spreads_over_databases_that_all_reopen() {
    let tmp = tempfile::tempdir().unwrap();
    let buckets = MAX_BUCKETS_PER_DATABASE + 120;
    let ctx = FjallContext::for_buckets(buckets).unwrap();
    let path = |i: usize| tmp.path().join(format!("b{i}"));
    {
        let engines: Vec<_> = (0..buckets)
            .map(|i| {
                let e = open(&ctx, &path(i)).unwrap();
                e.put(b"k", format!("v{i}").as_bytes(), 0).unwrap();
                e
            })
            .collect();
        let first = engines[0].storage().database_path().unwrap();
        let last = engines[buckets - 1].storage().database_path().unwrap();
        assert_eq!(first.file_name().unwrap(), "0");
        assert_eq!(last.file_name().unwrap(), "1");
    }
    for i in [0, MAX_BUCKETS_PER_DATABASE - 1, buckets - 1] {
        let e = open(&ctx, &path(i)).unwrap();
        assert_eq!(value(&e, b"k"), Some(format!("v{i}").into_bytes()));
    }
}

/// Buckets the crash test writes: more than one shared database takes.
const CRASH_BUCKETS: usize = MAX_BUCKETS_PER_DATABASE + 120;

/// A process killed with hundreds of buckets open and nothing flushed: every bucket of both its
/// shared databases reopens with its acknowledged write, replayed from the journal.
#[test]
fn many_buckets_reopen_after_a_crash_left_every_journal_unflushed() {
    if let Some(dir) = crash_child_dir() {
        let ctx = FjallContext::for_buckets(CRASH_BUCKETS).unwrap();
        let engines: Vec<_> = (0..CRASH_BUCKETS)
            .map(|i| {
                let e = open(&ctx, &dir.join(format!("b{i}"))).unwrap();
                e.put(b"k", format!("v{i}").as_bytes(), 0).unwrap();
                e.flush().unwrap();
                e
            })
            .collect();
        // Dies with every bucket open: nothing is closed, no memtable flushed.
        std::process::exit(CRASH_CHILD_EXIT + i32::from(engines.is_empty()));
    }
    let tmp = tempfile::tempdir().unwrap();
    run_crash_child(
        "many_buckets_reopen_after_a_crash_left_every_journal_unflushed",
        tmp.path(),
    );
    // The reopen runs on its own thread: a recovery that blocks fails the test instead of
    // hanging it.
    let (tx, rx) = std::sync::mpsc::channel();
    let root = tmp.path().to_path_buf();
    std::thread::spawn(move || {
        let ctx = FjallContext::for_buckets(4).unwrap();
        let read = |i: usize| -> tidemark_engine_api::Result<Option<Vec<u8>>> {
            let e = open(&ctx, &root.join(format!("b{i}")))?;
            Ok(value(&e, b"k"))
        };
        let _ = tx.send([0, CRASH_BUCKETS / 2, CRASH_BUCKETS - 1].map(|i| (i, read(i))));
    });
    let read = rx
        .recv_timeout(std::time::Duration::from_secs(90))
        .expect("reopening after the crash did not finish within 90 s");
    for (i, got) in read {
        assert_eq!(got.unwrap(), Some(format!("v{i}").into_bytes()));
    }
}

/// Keys starting with byte `0xff` are stored escaped (the flush marker is the one-byte key
/// `0xff`): every such key is its own entry, distinct from the marker and from each other,
/// through writes, lookups, reclaims, a reopen and `verify`.
#[test]
fn keys_starting_with_the_escape_byte_are_ordinary_keys() {
    let tmp = tempfile::tempdir().unwrap();
    let ctx = FjallContext::for_buckets(4).unwrap();
    let path = tmp.path().join("bucket");
    let keys: [&[u8]; 5] = [
        &[0xff],
        &[0xff, 0xff],
        &[0xff, 0x00],
        &[0xff, 0xff, 0xff],
        &[0xfe, 0xff],
    ];
    {
        let e = open(&ctx, &path).unwrap();
        for (offset, key) in keys.iter().enumerate() {
            e.put(key, format!("v{offset}").as_bytes(), offset as u64)
                .unwrap();
        }
        // A long key starting with the escape byte still fits fjall's 16-bit key length.
        let long = vec![0xff; tidemark_engine_api::MAX_KEY_LEN];
        e.put(&long, b"long", 10).unwrap();
        assert_eq!(value(&e, &long).as_deref(), Some(&b"long"[..]));
        // The first two are covered; the reclaim writes the marker and removes exactly them.
        e.advance_watermark(2).unwrap();
        let r = e.reclaim().unwrap();
        assert_eq!(r.values_removed, 2);
        assert_eq!(e.lookup(keys[0]).unwrap(), LocalLookup::Miss);
        assert_eq!(e.lookup(keys[1]).unwrap(), LocalLookup::Miss);
        let report = e.verify().unwrap();
        assert!(report.is_clean(), "{report:?}");
    }
    let e = open(&ctx, &path).unwrap();
    assert_eq!(e.lookup(keys[0]).unwrap(), LocalLookup::Miss);
    assert_eq!(e.lookup(keys[1]).unwrap(), LocalLookup::Miss);
    for (offset, key) in keys.iter().enumerate().skip(2) {
        assert_eq!(value(&e, key), Some(format!("v{offset}").into_bytes()));
    }
    let long = vec![0xff; tidemark_engine_api::MAX_KEY_LEN];
    assert_eq!(value(&e, &long).as_deref(), Some(&b"long"[..]));
    assert_eq!(e.reclaim().unwrap().removed(), 0);
    assert!(e.verify().unwrap().is_clean());
}

#[test]
fn a_removed_bucket_takes_its_keyspace_and_rows_out_of_the_shared_database_and_no_other() {
    let tmp = tempfile::tempdir().unwrap();
    let ctx = FjallContext::for_buckets(4).unwrap();
    let (a_dir, b_dir) = (tmp.path().join("a"), tmp.path().join("b"));
    let a = open(&ctx, &a_dir).unwrap();
    let b = open(&ctx, &b_dir).unwrap();
    for (i, engine) in [&a, &b].into_iter().enumerate() {
        for k in 0..100u64 {
            engine
                .put(format!("k{k}").as_bytes(), format!("{i}:{k}").as_bytes(), k)
                .unwrap();
        }
        engine.advance_watermark(10).unwrap();
    }
    let refused = FjallEngine::remove_in(&ctx, &a_dir).unwrap_err();
    assert!(
        refused.to_string().contains("open in this process"),
        "{refused}"
    );
    assert_eq!(
        value(&a, b"k99"),
        Some(b"0:99".to_vec()),
        "a refused removal touches nothing"
    );
    let database = a.storage().database_path().unwrap().to_path_buf();
    drop(a);
    FjallEngine::remove_in(&ctx, &a_dir).unwrap();
    assert!(!a_dir.exists());
    for k in 0..100u64 {
        assert_eq!(
            value(&b, format!("k{k}").as_bytes()),
            Some(format!("1:{k}").into_bytes()),
            "the sibling keeps every row"
        );
    }
    assert_eq!(b.watermark(), 10);
    drop(b);
    // A new bucket where the removed one was starts empty: nothing of the old one is left to
    // name, neither its keyspace nor its metadata rows.
    let again = open(&ctx, &a_dir).unwrap();
    assert_eq!((again.watermark(), again.applied_end()), (0, 0));
    assert_eq!(value(&again, b"k5"), None);
    assert_eq!(again.storage().database_path().unwrap(), database.as_path());
}
