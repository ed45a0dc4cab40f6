//! The offset-index sweeper (§ Backends / Sweeper): its work follows the covered range, and what it
//! cannot read it keeps. Runs on every backend that declares an `offset_index`
//! ([`Capabilities::declared`]).
//!
//! [`Capabilities::declared`]: crate::Capabilities::declared

use std::sync::{Arc, Mutex};

use tidemark_disk::sweeper::SweepTotals;
use tidemark_engine_api::{Engine, EngineOptions, LocalLookup, Record};

use super::util::{apply, key};
use crate::{EngineFactory, Harness};

/// A sweep visits exactly the index rows below the threshold — covered entries plus stale rows
/// of keys rewritten since — never the rest of the table, in chunks of `sweep_chunk_rows`; where
/// the backend has the skeleton's test hooks, the chunk hook runs once after every chunk.
pub fn sweep_visits_only_covered_index_rows<F: EngineFactory>(factory: F) {
    const ROWS: u64 = 20_000;
    const COVERED: u64 = 100;
    const REWRITTEN: u64 = 10;
    const CHUNK: usize = 32;
    let options = EngineOptions::default()
        .with_sync_writes(false)
        .with_sweep_chunk_rows(CHUNK)
        // Chunks of exactly CHUNK rows, not sized by time: the case counts them.
        .with_sweep_chunk_time(None);
    let h = Harness::with_options(factory, options);
    let e = h.engine();
    for first in (0..ROWS).step_by(1_000) {
        apply(
            e,
            (first..first + 1_000).map(|i| Record::put(key(i), b"v", i)),
        );
    }
    // The first REWRITTEN keys get a newer version: their index rows below W are now stale.
    apply(
        e,
        (0..REWRITTEN).map(|i| Record::put(key(i), b"new", ROWS + i)),
    );
    e.advance_watermark(COVERED).unwrap();
    assert_eq!(e.stats().unwrap().covered_estimate, COVERED);

    // Every sweeping disk backend runs the shared sweeper, which calls the chunk hook.
    let chunks_seen: Arc<Mutex<Vec<SweepTotals>>> = Arc::default();
    let faults = h.factory().faults(e);
    if let Some(faults) = faults {
        let seen = Arc::clone(&chunks_seen);
        faults.on_chunk_committed(Some(Arc::new(move |chunk: &SweepTotals| {
            seen.lock().unwrap().push(*chunk);
        })));
    }
    let report = e.reclaim().unwrap();
    let sweep = h.factory().last_sweep(e).expect("a sweep was reported");
    if let Some(faults) = faults {
        faults.on_chunk_committed(None);
        let seen = chunks_seen.lock().unwrap();
        assert_eq!(
            seen.len() as u64,
            sweep.chunks,
            "one hook call per chunk: {seen:?}"
        );
        let visited: u64 = seen.iter().map(|c| c.rows_visited).sum();
        assert_eq!(visited, sweep.rows_visited, "{seen:?}");
    }
    assert_eq!(
        sweep.rows_visited, COVERED,
        "a sweep visits the covered index rows, not the {ROWS}-row table: {sweep:?}"
    );
    assert_eq!(sweep.stale_dropped, REWRITTEN, "{sweep:?}");
    assert_eq!(report.values_removed, COVERED - REWRITTEN);
    assert_eq!(sweep.chunks, COVERED.div_ceil(CHUNK as u64), "{sweep:?}");
    assert_eq!(
        e.stats().unwrap().live_entries,
        ROWS - (COVERED - REWRITTEN)
    );
    assert!(matches!(
        e.lookup(&key(0)).unwrap(),
        LocalLookup::Value { offset, .. } if offset == ROWS
    ));
    assert_eq!(e.lookup(&key(REWRITTEN)).unwrap(), LocalLookup::Miss);
    assert_eq!(e.stats().unwrap().covered_estimate, 0);

    // A second sweep at the same threshold finds nothing to visit.
    e.reclaim().unwrap();
    assert_eq!(h.factory().last_sweep(e).map(|s| s.rows_visited), Some(0));
}

/// An index row too short to hold its 8-byte offset names no entry that can be read: every sweep
/// meets it, keeps it and counts it as corrupt, and the entries around it are reclaimed normally.
pub fn unreadable_index_rows_are_kept_and_counted<F: EngineFactory>(factory: F) {
    let h = Harness::with_options(factory, EngineOptions::default().with_sync_writes(false));
    let e = h.engine();
    apply(e, (0..4).map(|i| Record::put(key(i), b"v", i)));
    // Sorts below every threshold's upper bound.
    h.factory().inject_index_row(e, &[0, 0, 0]).unwrap();
    e.advance_watermark(4).unwrap();
    // The estimate counts entries the engine wrote (§ Disk-engine skeleton / Covered estimate);
    // damage is counted by the sweeps that meet it.
    assert_eq!(e.stats().unwrap().covered_estimate, 4);

    let report = e.reclaim().unwrap();
    assert_eq!((report.values_removed, report.corrupt_kept), (4, 1));
    // Never deleted: every later sweep meets and counts it again.
    assert_eq!(e.stats().unwrap().covered_estimate, 0);
    assert_eq!(e.reclaim().unwrap().corrupt_kept, 1);
    assert_eq!(h.factory().last_sweep(e).map(|s| s.rows_visited), Some(1));
    let stats = e.stats().unwrap();
    assert_eq!(stats.counters.corrupt_kept, 2);
    assert_eq!(stats.live_entries, 0);
}

/// A purge (`reclaim_below`) sweeps the same index: it ignores the retention distance, drops the
/// stale row of a key rewritten since, keeps the tombstone that replaced it, and never passes `W`.
pub fn purge_sweep_ignores_distance_and_drops_stale_rows<F: EngineFactory>(factory: F) {
    let options = EngineOptions::default()
        .with_sync_writes(false)
        .with_retention_distance(10);
    let h = Harness::with_options(factory, options);
    let e = h.engine();
    apply(e, (0..30).map(|i| Record::put(key(i), b"v", i)));
    // key 3 @3 is now stale; its tombstone is @30.
    e.delete(&key(3), 30).unwrap();
    e.delete(b"gone", 31).unwrap();
    e.advance_watermark(20).unwrap();

    // reclaim() would stop at W - D = 10; reclaim_below(15) goes to 15.
    let report = e.reclaim_below(15).unwrap();
    assert_eq!((report.threshold, report.values_removed), (15, 14));
    let sweep = h.factory().last_sweep(e).expect("a sweep was reported");
    assert_eq!(sweep.stale_dropped, 1, "{sweep:?}");
    assert_eq!(sweep.rows_visited, 15, "{sweep:?}");
    assert_eq!(e.lookup(&key(14)).unwrap(), LocalLookup::Miss);
    assert!(e.lookup(&key(15)).unwrap().offset().is_some());

    // A threshold above W is clamped to W: nothing at or above W is touched.
    let report = e.reclaim_below(1_000).unwrap();
    assert_eq!((report.threshold, report.values_removed), (20, 5));
    assert_eq!(e.lookup(&key(19)).unwrap(), LocalLookup::Miss);
    assert!(e.lookup(&key(20)).unwrap().offset().is_some());
    assert_eq!(
        e.lookup(&key(3)).unwrap(),
        LocalLookup::Tombstone { offset: 30 }
    );
    let stats = e.stats().unwrap();
    assert_eq!(stats.live_entries, 10 + 2);
    assert_eq!(stats.counters.reclaim_runs, 2);
    assert_eq!(stats.counters.reclaimed_values, 19);
}
