//! `advance_watermark` and `adopt_lake_watermark`.

use tidemark_engine_api::{Engine, LocalLookup, Record, WatermarkUpdate};

use super::util::{apply, assert_lookup, fill, key, payload, value};
use crate::{EngineFactory, Harness};

fn moved(previous: u64, requested: u64, current: u64) -> WatermarkUpdate {
    WatermarkUpdate {
        previous,
        requested,
        current,
        moved: true,
    }
}

fn unchanged(current: u64, requested: u64) -> WatermarkUpdate {
    WatermarkUpdate::unchanged(current, requested)
}

/// Unwraps the update of a watermark change, checking that `watermark()` then says what it
/// reports.
#[track_caller]
fn checked<E: Engine>(
    e: &E,
    change: tidemark_engine_api::Result<WatermarkUpdate>,
) -> WatermarkUpdate {
    let update = change.unwrap();
    assert_eq!(
        e.watermark(),
        update.current,
        "watermark() after {update:?}"
    );
    update
}

/// Advancing reports previous / requested / current / moved and is visible through
/// `watermark()` and `stats()`.
pub fn watermark_advances_and_reports<F: EngineFactory>(factory: F) {
    let h = Harness::new(factory);
    let e = h.engine();
    fill(e, 0..10);
    assert_eq!(checked(e, e.advance_watermark(4)), moved(0, 4, 4));
    assert_eq!(e.stats().unwrap().watermark, 4);
    assert_eq!(checked(e, e.advance_watermark(7)), moved(4, 7, 7));
}

/// A repeated request and a stale (lower) one change nothing and say so.
pub fn watermark_repeat_and_stale_are_noops<F: EngineFactory>(factory: F) {
    let h = Harness::new(factory);
    let e = h.engine();
    fill(e, 0..10);
    e.advance_watermark(6).unwrap();
    assert_eq!(checked(e, e.advance_watermark(6)), unchanged(6, 6));
    assert_eq!(checked(e, e.advance_watermark(2)), unchanged(6, 2));
    assert_eq!(checked(e, e.advance_watermark(0)), unchanged(6, 0));
    assert_eq!(checked(e, e.adopt_lake_watermark(5)), unchanged(6, 5));
}

/// The watermark is clamped to the applied end: it never covers offsets this engine has not
/// applied. An empty engine stays at 0.
pub fn watermark_clamped_to_applied_end<F: EngineFactory>(factory: F) {
    let h = Harness::new(factory);
    let e = h.engine();
    assert_eq!(checked(e, e.advance_watermark(5)), unchanged(0, 5));
    fill(e, 0..10);
    assert_eq!(checked(e, e.advance_watermark(100)), moved(0, 100, 10));
    // Still above the applied end: the clamp leaves nothing to move.
    assert_eq!(checked(e, e.advance_watermark(50)), unchanged(10, 50));
    fill(e, 10..20);
    assert_eq!(checked(e, e.advance_watermark(50)), moved(10, 50, 20));
    assert_eq!(
        checked(e, e.advance_watermark(u64::MAX)),
        unchanged(20, u64::MAX)
    );
}

/// Advancing the watermark does not reclaim: covered entries stay readable until `reclaim`.
pub fn advance_does_not_reclaim<F: EngineFactory>(factory: F) {
    let h = Harness::new(factory);
    let e = h.engine();
    fill(e, 0..10);
    e.delete(b"t", 10).unwrap();
    e.advance_watermark(11).unwrap();
    for i in 0..10 {
        assert_lookup(e, &key(i), &value(i, payload(i, i)));
    }
    assert_lookup(e, b"t", &super::util::tombstone(10));
    let s = e.stats().unwrap();
    assert_eq!(
        (
            s.counters.reclaimed_values,
            s.counters.reclaimed_tombstones,
            s.counters.reclaim_runs
        ),
        (0, 0, 0)
    );
    let r = e.reclaim().unwrap();
    assert_eq!((r.values_removed, r.tombstones_removed), (10, 1));
    assert_lookup(e, &key(3), &LocalLookup::Miss);
}

/// `adopt_lake_watermark` raises `W` past the applied end (unclamped), is monotonic, and later
/// records below it are covered.
pub fn adopt_lake_watermark_unclamped<F: EngineFactory>(factory: F) {
    let h = Harness::new(factory);
    let e = h.engine();
    fill(e, 0..5);
    assert_eq!(checked(e, e.adopt_lake_watermark(20)), moved(0, 20, 20));
    assert_eq!(e.applied_end(), 5);
    assert_eq!(checked(e, e.adopt_lake_watermark(20)), unchanged(20, 20));
    assert_eq!(checked(e, e.adopt_lake_watermark(10)), unchanged(20, 10));
    assert_eq!(checked(e, e.advance_watermark(15)), unchanged(20, 15));
    // Clamped advance above the applied end cannot move it either.
    assert_eq!(checked(e, e.advance_watermark(30)), unchanged(20, 30));

    let out = apply(
        e,
        (15..25u64).map(|i| Record::put(key(i), payload(i, i), i)),
    );
    assert_eq!((out.covered, out.applied, out.already_applied), (5, 5, 0));
    assert_eq!(out.applied_end, 25);
    assert_lookup(e, &key(17), &LocalLookup::Miss);
    assert_lookup(e, &key(22), &value(22, payload(22, 22)));
    assert_eq!(checked(e, e.adopt_lake_watermark(23)), moved(20, 23, 23));
    // Everything below 5 and the new 20..23 is covered; reclaim removes exactly those.
    let r = e.reclaim().unwrap();
    assert_eq!((r.threshold, r.values_removed), (23, 8));
    assert_lookup(e, &key(23), &value(23, payload(23, 23)));
}
