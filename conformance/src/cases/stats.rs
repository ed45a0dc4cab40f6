//! `stats()`: watermark, applied end, sizes, live entries, covered estimate and counters.

use tidemark_engine_api::{CounterSnapshot, Engine, Record};

use super::util::{apply, batch, fill, key, noise};
use crate::{EngineFactory, Harness};

/// Counters, watermark and applied end match exactly what happened: applied, covered and
/// already-applied records, reclaimed values and tombstones, reclaim runs; `live_entries` is
/// checked exactly where the backend says it is exact.
pub fn stats_counters_match_operations<F: EngineFactory>(factory: F) {
    let h = Harness::new(factory);
    let exact = h.capabilities().declared.exact_live_entries;
    let e = h.engine();
    fill(e, 0..10);
    fill(e, 5..12);
    e.advance_watermark(8).unwrap();
    let out = apply(e, (6..14u64).map(|i| Record::delete(key(i), i)));
    assert_eq!((out.applied, out.covered, out.already_applied), (2, 2, 4));
    let s = e.stats().unwrap();
    assert_eq!(
        s.live_entries_exact, exact,
        "stats and capabilities disagree"
    );
    assert_eq!((s.watermark, s.applied_end), (8, 14));
    let written = CounterSnapshot {
        applied: 14,
        covered: 2,
        already_applied: 9,
        ..CounterSnapshot::default()
    };
    assert_eq!(s.counters, written);
    if exact {
        assert_eq!(s.live_entries, 14);
        assert!(
            s.covered_estimate >= 8,
            "estimate {} < 8 covered",
            s.covered_estimate
        );
    }

    let r1 = e.reclaim().unwrap();
    assert_eq!((r1.values_removed, r1.tombstones_removed), (8, 0));
    e.advance_watermark(14).unwrap();
    let r2 = e.reclaim().unwrap();
    assert_eq!((r2.values_removed, r2.tombstones_removed), (4, 2));
    let freed =
        |r: &tidemark_engine_api::ReclaimReport| r.bytes_before.saturating_sub(r.bytes_after);
    let rewritten = |r: &tidemark_engine_api::ReclaimReport| r.bytes_rewritten.unwrap_or(0);
    let s = e.stats().unwrap();
    assert_eq!((s.watermark, s.applied_end), (14, 14));
    assert_eq!(
        s.counters,
        CounterSnapshot {
            reclaimed_values: 12,
            reclaimed_tombstones: 2,
            reclaim_runs: 2,
            reclaim_bytes_rewritten: rewritten(&r1) + rewritten(&r2),
            reclaim_bytes_freed: freed(&r1) + freed(&r2),
            // Whether a store this small is rebuilt is the backend's policy; the space case
            // checks that rebuilds give space back.
            space_rebuilds: s.counters.space_rebuilds,
            // The reclaims change no write counter, and keep no corrupt entry.
            ..written
        }
    );
    if exact {
        assert_eq!(s.live_entries, 0);
    }
}

/// `live_entries` counts values and tombstones (one per key) and drops by what reclaim removed.
pub fn live_entries_exact<F: EngineFactory>(factory: F) {
    let h = Harness::new(factory);
    let e = h.engine();
    e.put(b"a", b"1", 0).unwrap();
    e.put(b"b", b"1", 1).unwrap();
    e.put(b"c", b"1", 2).unwrap();
    e.put(b"a", b"2", 3).unwrap();
    e.delete(b"b", 4).unwrap();
    e.delete(b"d", 5).unwrap();
    assert_eq!(e.stats().unwrap().live_entries, 4);
    e.advance_watermark(4).unwrap();
    let s = e.stats().unwrap();
    assert!(
        s.covered_estimate >= 2,
        "estimate {} < 2",
        s.covered_estimate
    );
    assert_eq!(e.reclaim().unwrap().removed(), 2); // a@3, c@2
    assert_eq!(e.stats().unwrap().live_entries, 2);
    e.advance_watermark(6).unwrap();
    e.reclaim().unwrap();
    assert_eq!(e.stats().unwrap().live_entries, 0);
}

/// Sizes follow the data: after 1 MiB of incompressible values is written and flushed,
/// `bytes_on_disk` reflects it and a reclaim report's `bytes_before` saw it. Report and counters
/// agree.
pub fn reclaim_report_consistent<F: EngineFactory>(factory: F) {
    let h = Harness::new(factory);
    let e = h.engine();
    let b = batch((0..64u64).map(|i| Record::put(key(i), noise(i, 16 * 1024), i)));
    e.apply(&b).unwrap();
    e.delete(b"t", 64).unwrap();
    e.flush().unwrap();
    let s = e.stats().unwrap();
    assert!(
        s.bytes_on_disk >= 256 * 1024,
        "bytes_on_disk {} after writing 1 MiB",
        s.bytes_on_disk
    );
    e.advance_watermark(40).unwrap();
    let before = e.stats().unwrap().counters;
    let r = e.reclaim().unwrap();
    assert_eq!(r.threshold, 40);
    assert_eq!((r.values_removed, r.tombstones_removed), (40, 0));
    assert!(
        r.bytes_before >= 256 * 1024,
        "bytes_before {} with 1 MiB stored",
        r.bytes_before
    );
    let after = e.stats().unwrap().counters;
    assert_eq!(
        after.reclaimed_values - before.reclaimed_values,
        r.values_removed
    );
    assert_eq!(
        after.reclaimed_tombstones - before.reclaimed_tombstones,
        r.tombstones_removed
    );
    assert_eq!(after.reclaim_runs - before.reclaim_runs, 1);
    assert_eq!(after.corrupt_kept - before.corrupt_kept, r.corrupt_kept);
    e.advance_watermark(65).unwrap();
    let r = e.reclaim().unwrap();
    assert_eq!((r.values_removed, r.tombstones_removed), (24, 1));
}

/// The covered estimate is an upper bound for batches that repeat an offset and skip one at
/// once (both allowed): `stats().covered_estimate`, `reclaimable().covered` (entries and bytes)
/// and the garbage ratio never read below what is covered, before a reclaim, after one that
/// cut a batch, and after a reopen.
pub fn covered_estimate_never_low_with_repeated_offsets_and_gaps<F: EngineFactory>(factory: F) {
    let mut h = Harness::new(factory);
    let reopen = h.capabilities().reopen;
    // a@1, b@3, c@3, d@4: four entries over offsets 1..=4, as many as one per offset would be.
    apply(
        h.engine(),
        [
            Record::put(b"a", b"v", 1),
            Record::put(b"b", b"v", 3),
            Record::put(b"c", b"v", 3),
            Record::put(b"d", b"v", 4),
        ],
    );
    h.engine().advance_watermark(3).unwrap();
    assert_eq!(
        h.engine().reclaim().unwrap().removed(),
        1,
        "{}: a@1",
        F::NAME
    );
    h.engine().advance_watermark(5).unwrap();
    let check = |e: &F::Engine, covered: u64, what: &str| {
        let s = e.stats().unwrap();
        let r = e.reclaimable().unwrap();
        assert!(
            s.covered_estimate >= covered && r.covered.entries >= covered,
            "{} {what}: estimate {} / reclaimable {r:?} below the {covered} covered",
            F::NAME,
            s.covered_estimate
        );
    };
    check(h.engine(), 3, "after a reclaim cut the batch");
    if reopen {
        h.reopen();
        check(h.engine(), 3, "after a reopen");
    }
    assert_eq!(h.engine().reclaim().unwrap().removed(), 3, "{}", F::NAME);

    // Equal entries at 2, 2, 3, 3, 6: four of five covered by W = 4, four fifths of the bytes.
    let e = h.open_sibling("second", tidemark_engine_api::EngineOptions::default());
    apply(
        &e,
        [(b"p", 2), (b"q", 2), (b"r", 3), (b"s", 3), (b"t", 6)]
            .map(|(k, o)| Record::put(k.to_vec(), b"same", o)),
    );
    e.advance_watermark(4).unwrap();
    check(&e, 4, "one batch with repeated offsets and a gap");
    let r = e.reclaimable().unwrap();
    let entry = (1 + tidemark_engine_api::codec::HEADER_LEN + 4) as u64;
    assert!(
        r.covered.bytes >= 4 * entry && r.garbage_ratio() >= 0.8 - 1e-9,
        "{}: {r:?} ratio {}",
        F::NAME,
        r.garbage_ratio()
    );
}
