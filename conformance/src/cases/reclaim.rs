//! `reclaim`: exactly the covered values and tombstones, retention distance, no resurrection.

use std::ops::Range;

use tidemark_engine_api::{Engine, EngineOptions, LocalLookup, ReclaimReport, Record};

use super::util::{apply, assert_lookup, key, noise, payload, tombstone, value};
use crate::{EngineFactory, Harness};

/// Key `i` at offset `i`, a tombstone when `i % 3 == 2`, otherwise a value.
fn fill_mixed<E: Engine>(e: &E, range: Range<u64>) {
    apply(
        e,
        range.map(|i| {
            if i % 3 == 2 {
                Record::delete(key(i), i)
            } else {
                Record::put(key(i), payload(i, i), i)
            }
        }),
    );
}

fn mixed(i: u64) -> LocalLookup {
    if i % 3 == 2 {
        tombstone(i)
    } else {
        value(i, payload(i, i))
    }
}

/// Asserts a reclaim over the keys `fill_mixed(e, 0..end)` wrote: its report (as
/// [`assert_report`]), then every key: those below `removed.end` gone, the others as written.
#[track_caller]
fn assert_reclaimed<E: Engine>(
    e: &E,
    r: &ReclaimReport,
    threshold: u64,
    removed: Range<u64>,
    end: u64,
) {
    let cut = removed.end;
    assert_report(r, threshold, removed);
    for i in 0..end {
        let expected = if i < cut { LocalLookup::Miss } else { mixed(i) };
        assert_lookup(e, &key(i), &expected);
    }
}

/// Asserts a reclaim over `fill_mixed` keys: its threshold, exactly the values and tombstones
/// of the keys in `removed`, and no corrupt entry kept.
#[track_caller]
fn assert_report(r: &ReclaimReport, threshold: u64, removed: Range<u64>) {
    assert_eq!(r.threshold, threshold, "reclaim threshold");
    assert_eq!(
        (r.values_removed, r.tombstones_removed),
        count_mixed(removed),
        "values and tombstones removed"
    );
    assert_eq!(r.corrupt_kept, 0, "corrupt entries kept");
}

fn count_mixed(range: Range<u64>) -> (u64, u64) {
    let tombstones = range.clone().filter(|i| i % 3 == 2).count() as u64;
    (range.count() as u64 - tombstones, tombstones)
}

/// Reclaim removes every covered value and tombstone (`offset < W`), reports them, and leaves
/// every uncovered entry exactly as it was; a second reclaim finds nothing.
pub fn reclaim_removes_exactly_covered<F: EngineFactory>(factory: F) {
    let h = Harness::new(factory);
    let e = h.engine();
    fill_mixed(e, 0..30);
    e.advance_watermark(17).unwrap();
    assert_reclaimed(e, &e.reclaim().unwrap(), 17, 0..17, 30);
    // A second reclaim finds nothing.
    assert_reclaimed(e, &e.reclaim().unwrap(), 17, 17..17, 30);
}

/// Reclaim is incremental: after more writes and a higher watermark it removes only the newly
/// covered entries.
pub fn reclaim_is_incremental<F: EngineFactory>(factory: F) {
    let h = Harness::new(factory);
    let e = h.engine();
    fill_mixed(e, 0..20);
    e.advance_watermark(8).unwrap();
    assert_reclaimed(e, &e.reclaim().unwrap(), 8, 0..8, 20);
    fill_mixed(e, 20..40);
    e.advance_watermark(31).unwrap();
    assert_reclaimed(e, &e.reclaim().unwrap(), 31, 8..31, 40);
}

/// With `W = 0` nothing is covered and reclaim removes nothing.
pub fn reclaim_with_zero_watermark_removes_nothing<F: EngineFactory>(factory: F) {
    let h = Harness::new(factory);
    let e = h.engine();
    fill_mixed(e, 0..15);
    assert_reclaimed(e, &e.reclaim().unwrap(), 0, 0..0, 15);
    assert_eq!(e.stats().unwrap().covered_estimate, 0);
}

/// Retention distance `D` keeps `D` offsets below `W`: reclaim removes `offset < W - D`
/// (saturating, so `D > W` removes nothing).
pub fn retention_distance_keeps_margin<F: EngineFactory>(factory: F) {
    let h = Harness::with_options(factory, EngineOptions::default().with_retention_distance(3));
    let e = h.engine();
    fill_mixed(e, 0..20);
    e.advance_watermark(10).unwrap();
    assert_reclaimed(e, &e.reclaim().unwrap(), 7, 0..7, 20);
    // Covered-on-apply still uses W itself, not W - D.
    let out = e.put(&key(8), b"late", 8).unwrap();
    assert_eq!(out.covered, 1);

    let wide = h.open_sibling("wide", EngineOptions::default().with_retention_distance(50));
    let e = &wide;
    fill_mixed(e, 0..20);
    e.advance_watermark(20).unwrap();
    assert_reclaimed(e, &e.reclaim().unwrap(), 0, 0..0, 20);
}

/// A key rewritten at or above the watermark survives the reclaim of its old, covered version
/// (value over value, tombstone over value, value over tombstone).
pub fn rewritten_key_survives_reclaim<F: EngineFactory>(factory: F) {
    let h = Harness::new(factory);
    let e = h.engine();
    e.put(b"k", b"old", 2).unwrap();
    e.put(b"j", b"old", 3).unwrap();
    e.delete(b"t", 4).unwrap();
    e.put(b"x", b"covered", 5).unwrap();
    // Old versions deep in storage, new ones above them.
    h.factory().settle(e).unwrap();
    e.put(b"k", b"new", 10).unwrap();
    e.delete(b"j", 11).unwrap();
    e.put(b"t", b"revived", 12).unwrap();
    e.advance_watermark(10).unwrap();
    let r = e.reclaim().unwrap();
    assert_eq!((r.values_removed, r.tombstones_removed), (1, 0));
    assert_lookup(e, b"k", &value(10, "new"));
    assert_lookup(e, b"j", &tombstone(11));
    assert_lookup(e, b"t", &value(12, "revived"));
    assert_lookup(e, b"x", &LocalLookup::Miss);
    // Reclaiming again (the stale old versions are long gone) still keeps the new ones.
    assert_eq!(e.reclaim().unwrap().removed(), 0);
    assert_lookup(e, b"k", &value(10, "new"));
}

/// After the newest version of a key is reclaimed, no older version ever reappears: not after
/// further writes, not after more reclaims, not for values hidden by tombstones. The older
/// versions are [settled](EngineFactory::settle) deep before the newer ones are written.
pub fn older_version_never_reappears<F: EngineFactory>(factory: F) {
    let h = Harness::new(factory);
    let e = h.engine();
    // `settle`, not `flush`: flush may only sync a log (RocksDB), leaving the old versions in
    // the memtable beside the new ones; settled, they sit at the bottom of the storage while
    // the newer versions stay above them.
    e.put(b"k", b"oldest", 0).unwrap();
    h.factory().settle(e).unwrap();
    e.put(b"k", b"older", 1).unwrap();
    e.put(b"d", b"value-under-tombstone", 2).unwrap();
    h.factory().settle(e).unwrap();
    // Push the old versions away from the new ones (more data in between).
    for i in 3..200u64 {
        e.put(&key(i), &noise(i, 100), i).unwrap();
    }
    e.flush().unwrap();
    e.put(b"k", b"newest", 200).unwrap();
    e.delete(b"d", 201).unwrap();
    e.advance_watermark(150).unwrap();
    e.reclaim().unwrap();
    assert_lookup(e, b"k", &value(200, "newest"));
    assert_lookup(e, b"d", &tombstone(201));
    e.put(b"z", b"tail", 202).unwrap();
    e.advance_watermark(203).unwrap();
    let r = e.reclaim().unwrap();
    assert_eq!((r.values_removed, r.tombstones_removed), (50 + 2, 1));
    for _ in 0..3 {
        assert_lookup(e, b"k", &LocalLookup::Miss);
        assert_lookup(e, b"d", &LocalLookup::Miss);
        e.put(&key(1000 + e.applied_end()), b"more", e.applied_end())
            .unwrap();
        e.advance_watermark(e.applied_end()).unwrap();
        e.reclaim().unwrap();
        e.flush().unwrap();
    }
    assert_lookup(e, b"k", &LocalLookup::Miss);
    assert_lookup(e, b"d", &LocalLookup::Miss);
}

/// `reclaim_below(t)`, recovery's purge, removes exactly the entries with `offset < min(t, W)`:
/// it ignores the retention distance, never touches an entry at or above `W`, and reports and
/// counts like `reclaim` (threshold, values, tombstones, counters, one run per call).
pub fn reclaim_below_removes_exactly_below_threshold<F: EngineFactory>(factory: F) {
    let h = Harness::with_options(factory, EngineOptions::default().with_retention_distance(8));
    let e = h.engine();
    fill_mixed(e, 0..30);
    // W = 0: nothing is below it, whatever the threshold.
    assert_reclaimed(e, &e.reclaim_below(10).unwrap(), 0, 0..0, 30);

    e.advance_watermark(20).unwrap();
    // `reclaim` would stop at W - D = 12; `reclaim_below(16)` goes to 16.
    assert_reclaimed(e, &e.reclaim_below(16).unwrap(), 16, 0..16, 30);

    // A threshold beyond W stops at W.
    assert_reclaimed(e, &e.reclaim_below(1_000).unwrap(), 20, 16..20, 30);

    // Nothing is left below W: a repeat, lower thresholds and a plain reclaim find nothing.
    for t in [1_000, 5, 0] {
        assert_reclaimed(e, &e.reclaim_below(t).unwrap(), t.min(20), 20..20, 30);
    }
    // A plain reclaim stops at W - D = 12.
    assert_reclaimed(e, &e.reclaim().unwrap(), 12, 20..20, 30);
    assert_eq!((e.watermark(), e.applied_end()), (20, 30));
    let c = e.stats().unwrap().counters;
    assert_eq!(
        (c.reclaimed_values, c.reclaimed_tombstones),
        count_mixed(0..20)
    );
    assert_eq!((c.reclaim_runs, c.corrupt_kept), (7, 0));
}

/// A lagging replica's recovery purge: after `adopt_lake_watermark` raised `W` past the
/// applied end, `reclaim_below(W)` removes every local entry although the retention distance
/// would keep them all; the records replayed afterwards (at or above `W`) survive a repeat.
pub fn reclaim_below_purges_a_lagging_replica<F: EngineFactory>(factory: F) {
    let h = Harness::with_options(
        factory,
        EngineOptions::default().with_retention_distance(50),
    );
    let e = h.engine();
    fill_mixed(e, 0..20);
    e.advance_watermark(10).unwrap();
    assert_eq!(e.reclaim().unwrap().removed(), 0, "D = 50 keeps everything");
    assert!(e.adopt_lake_watermark(25).unwrap().moved);
    assert_reclaimed(e, &e.reclaim_below(25).unwrap(), 25, 0..20, 20);
    // The replay from the lake end.
    apply(
        e,
        [
            Record::put(key(3), b"replayed", 25),
            Record::delete(key(4), 26),
            Record::put(key(30), b"new", 27),
        ],
    );
    assert_report(&e.reclaim_below(25).unwrap(), 25, 25..25);
    assert_lookup(e, &key(3), &value(25, "replayed"));
    assert_lookup(e, &key(4), &tombstone(26));
    assert_lookup(e, &key(30), &value(27, "new"));
    assert_eq!((e.watermark(), e.applied_end()), (25, 28));
}
