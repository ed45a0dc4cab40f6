//! The tag-threshold compaction filter on standalone RocksDB databases: watermark and TTL
//! suppliers, retention distance, once-per-compaction supplier reads, corrupt values, caught
//! panics, and deletion markers that stop older versions from reappearing.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use rocksdb::{BottommostLevelCompaction, CompactOptions, DB, Options, properties};
use tidemark_backend_rocksdb::{FilterCounters, TagThresholdFilterFactory, ThresholdSupplier};
use tidemark_backend_rocksdb::{now_ms, ttl_filter_factory, watermark_filter_factory};
use tidemark_engine_api::codec::{encode_tombstone, encode_value, peek_tag};

fn open(dir: &Path, factory: TagThresholdFilterFactory) -> DB {
    let mut opts = Options::default();
    opts.create_if_missing(true);
    opts.set_compaction_filter_factory(factory);
    DB::open(&opts, dir).unwrap()
}

/// Flush and one full manual compaction down to the bottom level, meeting every entry once
/// (`Force` would compact the files it just wrote to the bottom level a second time).
fn compact_all(db: &DB) {
    db.flush().unwrap();
    let mut c = CompactOptions::default();
    c.set_bottommost_level_compaction(BottommostLevelCompaction::ForceOptimized);
    db.compact_range_opt(None::<&[u8]>, None::<&[u8]>, &c);
}

fn key(i: u64) -> Vec<u8> {
    format!("k{i:04}").into_bytes()
}

fn present(db: &DB, i: u64) -> bool {
    db.get(key(i)).unwrap().is_some()
}

/// Puts a value tagged `i` under `key(i)` for every even `i` and a tombstone for every odd one.
fn fill(db: &DB, n: u64) {
    for i in 0..n {
        if i % 2 == 0 {
            db.put(key(i), encode_value(&key(i), i, b"payload"))
                .unwrap();
        } else {
            db.put(key(i), encode_tombstone(&key(i), i)).unwrap();
        }
    }
}

#[test]
fn watermark_removes_covered_values_and_tombstones_only() {
    let tmp = tempfile::tempdir().unwrap();
    let w = Arc::new(AtomicU64::new(0));
    let counters = Arc::new(FilterCounters::default());
    let db = open(
        tmp.path(),
        watermark_filter_factory(Arc::clone(&w), 0).with_counters(Arc::clone(&counters)),
    );
    fill(&db, 20);

    // W = 0 removes nothing.
    compact_all(&db);
    assert!((0..20).all(|i| present(&db, i)));

    w.store(10, Ordering::SeqCst);
    compact_all(&db);
    for i in 0..20 {
        assert_eq!(present(&db, i), i >= 10, "offset {i} with W = 10");
    }
    let c = counters.snapshot();
    assert_eq!((c.removed_values, c.removed_tombstones), (5, 5));
    assert_eq!(c.kept_corrupt, 0);
}

#[test]
fn retention_distance_keeps_offsets_just_below_the_watermark() {
    let tmp = tempfile::tempdir().unwrap();
    let w = Arc::new(AtomicU64::new(10));
    let counters = Arc::new(FilterCounters::default());
    let db = open(
        tmp.path(),
        watermark_filter_factory(Arc::clone(&w), 3).with_counters(Arc::clone(&counters)),
    );
    fill(&db, 20);
    compact_all(&db);
    // Removes offset < W − D = 7.
    for i in 0..20 {
        assert_eq!(present(&db, i), i >= 7, "offset {i} with W = 10, D = 3");
    }
    assert_eq!(
        counters.snapshot().removed_values + counters.snapshot().removed_tombstones,
        7
    );

    // W below D removes nothing more (saturating).
    let tmp2 = tempfile::tempdir().unwrap();
    let db2 = open(
        tmp2.path(),
        watermark_filter_factory(Arc::new(AtomicU64::new(2)), 3),
    );
    fill(&db2, 5);
    compact_all(&db2);
    assert!((0..5).all(|i| present(&db2, i)));
}

#[test]
fn ttl_supplier_expires_old_entries_and_keeps_fresh_ones() {
    let tmp = tempfile::tempdir().unwrap();
    let factory = ttl_filter_factory(Duration::from_secs(3600));
    let counters = factory.counters();
    let db = open(tmp.path(), factory);
    let now = now_ms();
    let two_hours = 2 * 3600 * 1000;
    // Tags are write times in ms: two entries from two hours ago, two written now.
    db.put(
        b"old-value",
        encode_value(b"old-value", now - two_hours, b"stale"),
    )
    .unwrap();
    db.put(
        b"old-tombstone",
        encode_tombstone(b"old-tombstone", now - two_hours),
    )
    .unwrap();
    db.put(b"fresh-value", encode_value(b"fresh-value", now, b"fresh"))
        .unwrap();
    db.put(
        b"fresh-tombstone",
        encode_tombstone(b"fresh-tombstone", now),
    )
    .unwrap();
    compact_all(&db);
    assert!(db.get(b"old-value").unwrap().is_none());
    assert!(db.get(b"old-tombstone").unwrap().is_none());
    assert!(db.get(b"fresh-value").unwrap().is_some());
    assert!(db.get(b"fresh-tombstone").unwrap().is_some());
    let c = counters.snapshot();
    assert_eq!((c.removed_values, c.removed_tombstones), (1, 1));
}

#[test]
fn ttl_with_a_controlled_clock_expires_exactly_at_the_ttl() {
    let tmp = tempfile::tempdir().unwrap();
    let clock = Arc::new(AtomicU64::new(1_000));
    let supplier: ThresholdSupplier = {
        let clock = Arc::clone(&clock);
        Arc::new(move || Some(clock.load(Ordering::SeqCst)))
    };
    // TTL 100 ms: an entry written at t expires once now >= t + 100.
    let db = open(tmp.path(), TagThresholdFilterFactory::new(100, supplier));
    for t in [850u64, 900, 901, 950] {
        let k = format!("t{t}");
        db.put(&k, encode_value(k.as_bytes(), t, b"x")).unwrap();
    }
    compact_all(&db);
    assert!(db.get(b"t850").unwrap().is_none());
    assert!(db.get(b"t900").unwrap().is_none());
    assert!(db.get(b"t901").unwrap().is_some());
    clock.store(1_050, Ordering::SeqCst);
    compact_all(&db);
    assert!(db.get(b"t901").unwrap().is_none());
    assert!(db.get(b"t950").unwrap().is_none());
}

#[test]
fn supplier_is_read_once_per_compaction() {
    let tmp = tempfile::tempdir().unwrap();
    let calls = Arc::new(AtomicU64::new(0));
    let supplier: ThresholdSupplier = {
        let calls = Arc::clone(&calls);
        // Each read returns a *higher* limit: if it were read per entry, later entries of the same
        // compaction would see a different limit than earlier ones.
        Arc::new(move || Some(calls.fetch_add(1, Ordering::SeqCst) + 50))
    };
    let factory = TagThresholdFilterFactory::new(0, supplier);
    let counters = factory.counters();
    let mut opts = Options::default();
    opts.create_if_missing(true);
    opts.set_compaction_filter_factory(factory);
    // Only the manual compactions below may run, so the number of compactions is known:
    // one flush makes one L0 file, and one full manual compaction moves it to the bottom level
    // in a single compaction (dynamic level sizing: L0 compacts straight into the last level).
    opts.set_disable_auto_compactions(true);
    opts.set_level_compaction_dynamic_level_bytes(true);
    let db = DB::open(&opts, tmp.path()).unwrap();
    for i in 0..1_000u64 {
        db.put(key(i), encode_value(&key(i), i, b"v")).unwrap();
    }

    compact_all(&db);
    let c = counters.snapshot();
    assert_eq!((c.manual_compactions, c.automatic_compactions), (1, 0));
    assert_eq!((calls.load(Ordering::SeqCst), c.supplier_reads), (1, 1));
    // One compaction, one limit (50): exactly the tags <= 50 went, not a drifting set.
    assert_eq!(c.removed_values, 51);
    assert!(!present(&db, 50) && present(&db, 51));

    // A second compaction (of the bottom-level file the first one wrote) reads the supplier
    // again and applies its new limit (51) to all of its entries.
    compact_all(&db);
    let c = counters.snapshot();
    assert_eq!((c.manual_compactions, c.automatic_compactions), (2, 0));
    assert_eq!((calls.load(Ordering::SeqCst), c.supplier_reads), (2, 2));
    assert_eq!(c.removed_values, 52);
    assert!(!present(&db, 51) && present(&db, 52));
}

#[test]
fn corrupt_values_are_kept_and_counted() {
    let tmp = tempfile::tempdir().unwrap();
    let factory = watermark_filter_factory(Arc::new(AtomicU64::new(u64::MAX)), 0);
    let counters = factory.counters();
    let db = open(tmp.path(), factory);
    // A checksummed value with one flipped payload byte, and one stored under another key:
    // their tags read fine but their checksums fail, so they are kept, not removed.
    let mut flipped = encode_value(b"bad5", 3, b"payload");
    if let Some(last) = flipped.last_mut() {
        *last ^= 0x01;
    }
    let moved = encode_value(b"elsewhere", 3, b"payload");
    let garbage: [&[u8]; 7] = [
        b"",
        b"\x07\0\0\0\0\0\0\0\x01",
        b"\x01\0\0",
        b"\x02\0\0\0\0\0\0\0\x01extra",
        b"not a tidemark value",
        &flipped,
        &moved,
    ];
    for (i, g) in garbage.iter().enumerate() {
        db.put(format!("bad{i}"), g).unwrap();
    }
    db.put(b"good", encode_value(b"good", 3, b"v")).unwrap();
    compact_all(&db);
    for (i, g) in garbage.iter().enumerate() {
        assert_eq!(db.get(format!("bad{i}")).unwrap().as_deref(), Some(*g));
    }
    assert!(db.get(b"good").unwrap().is_none());
    let c = counters.snapshot();
    assert_eq!(c.kept_corrupt, garbage.len() as u64);
    assert_eq!(c.removed_values, 1);
}

fn reader_that_panics_on_boom(_key: &[u8], stored: &[u8]) -> Option<u64> {
    if stored.ends_with(b"boom") {
        panic!("tag reader exploded");
    }
    peek_tag(stored)
}

#[test]
fn a_panicking_decision_keeps_the_entry_and_is_counted() {
    let tmp = tempfile::tempdir().unwrap();
    let factory = watermark_filter_factory(Arc::new(AtomicU64::new(100)), 0)
        .with_tag_reader(reader_that_panics_on_boom);
    let counters = factory.counters();
    let db = open(tmp.path(), factory);
    db.put(b"a", encode_value(b"a", 1, b"fine")).unwrap();
    db.put(b"b", encode_value(b"b", 2, b"boom")).unwrap();
    db.put(b"c", encode_value(b"c", 3, b"fine")).unwrap();
    compact_all(&db);
    assert!(db.get(b"a").unwrap().is_none());
    assert!(
        db.get(b"b").unwrap().is_some(),
        "the entry whose decision panicked is kept"
    );
    assert!(db.get(b"c").unwrap().is_none());
    let c = counters.snapshot();
    assert_eq!((c.panics, c.removed_values), (1, 2));
}

#[test]
fn a_panicking_supplier_removes_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let factory = TagThresholdFilterFactory::new(0, Arc::new(|| panic!("supplier exploded")));
    let counters = factory.counters();
    let db = open(tmp.path(), factory);
    db.put(b"a", encode_value(b"a", 1, b"v")).unwrap();
    compact_all(&db);
    assert!(db.get(b"a").unwrap().is_some());
    let c = counters.snapshot();
    assert!(c.panics >= 1);
    assert_eq!(c.removed_values, 0);
}

/// Waits for background work (not a timing assertion: the deadline only turns a hang into a
/// failure).
fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(120);
    while !done() {
        assert!(Instant::now() < deadline, "{what} never happened");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn files_at(db: &DB, level: usize) -> u64 {
    db.property_int_value(properties::num_files_at_level(level))
        .unwrap()
        .unwrap_or(0)
}

/// A removed entry becomes a deletion marker, so an older version sitting in a lower level that
/// the compaction did not include stays hidden.
#[test]
fn removal_above_an_older_bottom_version_never_resurrects_it() {
    let tmp = tempfile::tempdir().unwrap();
    let w = Arc::new(AtomicU64::new(0));
    let factory = watermark_filter_factory(Arc::clone(&w), 0);
    let counters = factory.counters();
    let mut opts = Options::default();
    opts.create_if_missing(true);
    opts.set_compaction_filter_factory(factory);
    // Static level sizing: L0 compacts into L1, not straight into the bottom level.
    opts.set_level_compaction_dynamic_level_bytes(false);
    opts.set_level_zero_file_num_compaction_trigger(1);
    let db = DB::open(&opts, tmp.path()).unwrap();

    // The old version, pushed to the bottom level (L6) while W = 0 protects it.
    db.put(b"k", encode_value(b"k", 1, b"old")).unwrap();
    db.flush().unwrap();
    let mut to_bottom = CompactOptions::default();
    to_bottom.set_change_level(true);
    to_bottom.set_target_level(6);
    db.compact_range_opt(None::<&[u8]>, None::<&[u8]>, &to_bottom);
    assert_eq!(files_at(&db, 6), 1, "old version sits in the bottom level");

    // Neighbours of `k`, never covered, land in L1 (an automatic trivial move of their L0 file).
    db.put(b"j", encode_value(b"j", 20, b"j")).unwrap();
    db.put(b"l", encode_value(b"l", 21, b"l")).unwrap();
    db.flush().unwrap();
    wait_until("the neighbours reach L1", || {
        files_at(&db, 0) == 0 && files_at(&db, 1) == 1
    });

    // A newer version of `k`, covered together with the old one.
    w.store(10, Ordering::SeqCst);
    db.put(b"k", encode_value(b"k", 5, b"new")).unwrap();
    db.flush().unwrap();

    // Its L0 file overlaps L1's, so the background compaction L0 + L1 -> L1 really runs the
    // filter (an automatic compaction with nothing to merge would be a trivial move). It does not
    // include L6: the filter removes the newer version there, above the old one.
    wait_until("the L0 + L1 compaction", || {
        files_at(&db, 0) == 0 && counters.snapshot().removed_values > 0
    });
    assert_eq!(counters.snapshot().removed_values, 1);
    assert_eq!(
        files_at(&db, 6),
        1,
        "the old version is still physically in L6"
    );
    assert_eq!(files_at(&db, 1), 1, "a deletion marker was written to L1");
    assert!(
        db.get(b"k").unwrap().is_none(),
        "the old version must not reappear"
    );
    assert!(db.get(b"j").unwrap().is_some() && db.get(b"l").unwrap().is_some());

    // A later full compaction drops marker and old version together; still nothing.
    compact_all(&db);
    assert!(db.get(b"k").unwrap().is_none());
}
