//! Reopening: data, watermark and applied end survive; reclaim works after reopen; directories.

use tidemark_engine_api::{Engine, Error, LocalLookup, Record};

use super::util::{apply, assert_lookup, batch, tombstone, value};
use crate::{EngineFactory, Harness};

/// Reopen restores values, tombstones, misses, the watermark and the applied end.
pub fn reopen_restores_data<F: EngineFactory>(factory: F) {
    let mut h = Harness::new(factory);
    let e = h.engine();
    apply(
        e,
        [
            Record::put(b"a", b"1", 0),
            Record::put(vec![0u8, 0xff], vec![0xffu8, 0], 1),
            Record::delete(b"gone", 2),
        ],
    );
    e.put(b"a", b"2", 5).unwrap();
    e.advance_watermark(3).unwrap();
    let e = h.reopen();
    assert_eq!(e.watermark(), 3);
    assert_eq!(e.applied_end(), 6);
    assert_lookup(e, b"a", &value(5, "2"));
    assert_lookup(e, &[0, 0xff], &value(1, vec![0xffu8, 0]));
    assert_lookup(e, b"gone", &tombstone(2));
    assert_lookup(e, b"never", &LocalLookup::Miss);
    let s = e.stats().unwrap();
    assert_eq!((s.watermark, s.applied_end), (3, 6));
}

/// The covered estimate survives a reopen and never reads low: keys at offsets 0..=9 and one at
/// 1,000,000 (in one batch and, on a second key range, as separate commits), reopen, `W = 10`:
/// at least the ten covered entries are estimated, in `stats` and in `reclaimable`, and a reclaim
/// removes them.
pub fn covered_estimate_survives_reopen<F: EngineFactory>(factory: F) {
    let mut h = Harness::new(factory);
    let e = h.engine();
    let mut one = batch((0..10).map(|i| Record::put(format!("a{i}"), b"v", i)));
    one.put("far", "v", 1_000_000);
    e.apply(&one).unwrap();
    for i in 0..10 {
        e.put(format!("b{i}").as_bytes(), b"v", 2_000_000 + i)
            .unwrap();
    }
    e.put(b"farther", b"v", 3_000_000).unwrap();
    let e = h.reopen();
    e.advance_watermark(10).unwrap();
    let estimate = e.stats().unwrap().covered_estimate;
    let reclaimable = e.reclaimable().unwrap();
    assert!(
        estimate >= 10,
        "covered estimate {estimate} reads low after reopen"
    );
    assert_eq!(reclaimable.covered.entries, estimate);
    assert!(reclaimable.covered.bytes > 0 && reclaimable.stored.bytes >= reclaimable.covered.bytes);
    assert!(reclaimable.stored.entries >= 22, "{reclaimable:?}");
    assert_eq!(e.reclaim().unwrap().values_removed, 10);
    assert_eq!(e.stats().unwrap().covered_estimate, 0);

    // Separate commits are counted exactly, across another reopen.
    e.advance_watermark(2_000_005).unwrap();
    let e = h.reopen();
    assert_eq!(
        e.stats().unwrap().covered_estimate,
        6,
        "far@1000000 and b0..=b4"
    );
    assert_eq!(e.reclaim().unwrap().values_removed, 6);
    assert_eq!(e.reclaimable().unwrap().covered.entries, 0);
}

/// The watermark is durable on its own (no write after it), including an adopted watermark
/// above the applied end; the applied end survives with gaps in the offsets.
pub fn watermark_durable_across_reopen<F: EngineFactory>(factory: F) {
    let mut h = Harness::new(factory);
    let e = h.engine();
    e.put(b"a", b"1", 3).unwrap();
    e.put(b"b", b"2", 17).unwrap();
    e.advance_watermark(10).unwrap();
    let e = h.reopen();
    assert_eq!((e.watermark(), e.applied_end()), (10, 18));
    assert_eq!(e.adopt_lake_watermark(40).unwrap().current, 40);
    let e = h.reopen();
    assert_eq!((e.watermark(), e.applied_end()), (40, 18));
    // Monotonic across reopen: stale requests stay no-ops.
    assert!(!e.advance_watermark(20).unwrap().moved);
    let out = e.put(b"c", b"3", 39).unwrap();
    assert_eq!((out.covered, out.applied_end), (1, 18));
    let e = h.reopen();
    assert_eq!((e.watermark(), e.applied_end()), (40, 18));
    assert_lookup(e, b"c", &LocalLookup::Miss);
    assert_lookup(e, b"b", &value(17, "2"));
}

/// After a reopen, replaying the WAL from the start is idempotent: every record is covered or
/// already applied and the data is unchanged.
pub fn replay_after_reopen_is_idempotent<F: EngineFactory>(factory: F) {
    let mut h = Harness::new(factory);
    let wal = super::apply::sample_wal();
    for b in &wal {
        h.engine().apply(b).unwrap();
    }
    h.engine().advance_watermark(12).unwrap();
    let e = h.reopen();
    let (mut covered, mut already) = (0, 0);
    for b in &wal {
        let out = e.apply(b).unwrap();
        assert_eq!(out.applied, 0);
        covered += out.covered;
        already += out.already_applied;
    }
    assert_eq!((covered, already), (12, 28));
    for (k, l) in super::apply::sample_wal_state() {
        assert_lookup(e, &k, &l);
    }
    let c = e.stats().unwrap().counters;
    assert_eq!((c.applied, c.covered, c.already_applied), (0, 12, 28));
}

/// Reclaim works after a reopen (it removes exactly what the restored watermark covers), and
/// what it removed stays removed across another reopen: no older version reappears.
pub fn reclaim_after_reopen<F: EngineFactory>(factory: F) {
    let mut h = Harness::new(factory);
    let e = h.engine();
    e.put(b"k", b"old", 0).unwrap();
    e.put(b"j", b"old", 1).unwrap();
    e.delete(b"t", 2).unwrap();
    // The old versions deep in storage, the new ones above them.
    h.factory().settle(e).unwrap();
    e.put(b"k", b"new", 3).unwrap();
    e.put(b"j", b"newer", 6).unwrap();
    e.put(b"u", b"kept", 7).unwrap();
    e.advance_watermark(5).unwrap();
    let e = h.reopen();
    let r = e.reclaim().unwrap();
    assert_eq!(r.threshold, 5);
    assert_eq!((r.values_removed, r.tombstones_removed), (1, 1));
    assert_lookup(e, b"k", &LocalLookup::Miss);
    assert_lookup(e, b"t", &LocalLookup::Miss);
    assert_lookup(e, b"j", &value(6, "newer"));
    let e = h.reopen();
    assert_lookup(e, b"k", &LocalLookup::Miss);
    assert_lookup(e, b"t", &LocalLookup::Miss);
    assert_lookup(e, b"j", &value(6, "newer"));
    assert_lookup(e, b"u", &value(7, "kept"));
    assert_eq!(e.reclaim().unwrap().removed(), 0);
    e.advance_watermark(8).unwrap();
    assert_eq!(e.reclaim().unwrap().removed(), 2);
    let e = h.reopen();
    for k in [&b"k"[..], b"j", b"t", b"u"] {
        assert_lookup(e, k, &LocalLookup::Miss);
    }
    assert_eq!((e.watermark(), e.applied_end()), (8, 8));
}

/// Opening a path whose parent directories do not exist creates them, and the store can be
/// reopened from there.
pub fn missing_directory_created<F: EngineFactory>(factory: F) {
    let h = Harness::new(factory);
    // The harness itself opened `<tmp>/bucket`, which did not exist.
    assert!(h.path().is_dir(), "{} was not created", h.path().display());
    let nested = h.scratch().join("a").join("b").join("c");
    assert!(!nested.exists());
    let opts = h.options().clone();
    {
        let e = h.factory().open(&nested, opts.clone()).unwrap();
        e.put(b"k", b"v", 0).unwrap();
    }
    assert!(nested.is_dir(), "{} was not created", nested.display());
    let e = h.factory().open(&nested, opts).unwrap();
    assert_lookup(&e, b"k", &value(0, "v"));
}

/// A directory holding another backend's store, a newer format, or files that are not a
/// Tidemark store is a clear error, and nothing is written into it.
pub fn foreign_directory_rejected<F: EngineFactory>(factory: F) {
    let h = Harness::new(factory);
    let name = h.backend();
    let opts = h.options();
    let marker = tidemark_disk::layout::MARKER_FILE;
    let prepare = |dir: &str, file: &str, text: &str| {
        let path = h.scratch().join(dir);
        std::fs::create_dir_all(&path).unwrap();
        std::fs::write(path.join(file), text).unwrap();
        path
    };
    let listing = |path: &std::path::Path| {
        let mut names: Vec<_> = std::fs::read_dir(path)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        names.sort();
        names
    };

    // Opens `path`, expecting the refusal `accept` takes, and checks nothing was written there.
    let refuse =
        |path: &std::path::Path, what: &str, expected: &str, accept: &dyn Fn(&Error) -> bool| {
            let before = listing(path);
            match h.factory().open(path, opts.clone()) {
                Err(e) if accept(&e) => {}
                Err(e) => panic!("{what}: expected {expected}, got {e}"),
                Ok(_) => panic!("opened {what} as {name}"),
            }
            assert_eq!(listing(path), before, "files were written into {what}");
        };

    let other = if name == "memory" { "sled" } else { "memory" };
    let path = prepare("other", marker, &format!("backend={other}\nformat=1\n"));
    refuse(
        &path,
        &format!("a {other} directory"),
        "WrongBackend",
        &|e| matches!(e, Error::WrongBackend { found, .. } if found == other),
    );

    let path = prepare("newer", marker, &format!("backend={name}\nformat=99\n"));
    refuse(&path, "a format-99 directory", "UnsupportedFormat", &|e| {
        matches!(e, Error::UnsupportedFormat { found: 99, .. })
    });

    let path = prepare("stray", "precious.dat", "not a store");
    refuse(
        &path,
        "a directory holding foreign files",
        "ForeignDirectory naming precious.dat",
        &|e| matches!(e, Error::ForeignDirectory { reason, .. } if reason.contains("precious.dat")),
    );
    assert_eq!(
        std::fs::read_to_string(path.join("precious.dat")).unwrap(),
        "not a store"
    );
}
