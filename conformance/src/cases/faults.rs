//! Injected storage faults ([`tidemark_disk::testing::Chaos`]): a commit that fails like a full disk, a
//! watermark write that fails, a reclaim that fails midway. Nothing acknowledged is lost, nothing
//! failed is half visible, and a retry succeeds. A storage call that panics fails the store
//! until it is reopened, and poisons nothing.

use tidemark_disk::high_water::HIGH_WATER_FILE;
use tidemark_disk::testing::{FaultPoint, Faults};
use tidemark_engine_api::{Engine, Error, LocalLookup, Record};

use super::util::{apply, assert_lookup, batch, fill, key, payload, value};
use crate::{EngineFactory, Harness};

fn faults<F: EngineFactory>(h: &Harness<F>) -> &Faults {
    h.factory()
        .faults(h.engine())
        .expect("a backend with Capabilities::faults gives its fault plan")
}

fn is_injected(e: &Error) -> bool {
    matches!(e, Error::Io(io) if io.to_string().contains("injected fault"))
}

/// An `apply` whose commit fails (an I/O error injected where the skeleton calls the storage's
/// commit, before it writes, as a full disk refuses a write) returns the error and writes nothing:
/// the
/// applied end, the counters and every key are as before, also after a reopen; the retried
/// batch then applies once.
pub fn failed_commit_writes_nothing<F: EngineFactory>(factory: F) {
    let mut h = Harness::new(factory);
    fill(h.engine(), 0..10);
    let before = h.engine().stats().unwrap().counters;
    let overwrite = batch((5..15).map(|i| Record::put(key(i % 10), payload(i, i), i + 5)));
    faults(&h).fail_next(FaultPoint::Commit, 1);
    let err = h.engine().apply(&overwrite).unwrap_err();
    assert!(is_injected(&err), "{err}");
    let check = |e: &F::Engine| {
        assert_eq!(e.applied_end(), 10, "a failed commit moved the applied end");
        for i in 0..10 {
            assert_lookup(e, &key(i), &value(i, payload(i, i)));
        }
    };
    check(h.engine());
    assert_eq!(
        h.engine().stats().unwrap().counters,
        before,
        "a failed commit counted"
    );
    if h.capabilities().reopen {
        check(h.reopen());
    }
    let outcome = h.engine().apply(&overwrite).unwrap();
    assert_eq!((outcome.applied, outcome.applied_end), (10, 20));
    // Record i of the batch wrote key i % 10 at offset i + 5: key 9 was written by i = 9.
    assert_lookup(h.engine(), &key(9), &value(14, payload(9, 9)));
}

/// A watermark change whose durable write fails returns the error and moves nothing: `W` is
/// unchanged (a reclaim removes nothing more, a reopen restores the old `W`); a retry moves it.
/// One whose write succeeded but whose high-water record could not be written is reported and
/// published, and survives a reopen.
pub fn failed_watermark_write_keeps_w<F: EngineFactory>(factory: F) {
    let mut h = Harness::new(factory);
    let e = h.engine();
    fill(e, 0..20);
    e.advance_watermark(5).unwrap();
    faults(&h).fail_next(FaultPoint::Watermark, 2);
    assert!(is_injected(&e.advance_watermark(15).unwrap_err()));
    assert!(is_injected(&e.adopt_lake_watermark(30).unwrap_err()));
    assert_eq!(e.watermark(), 5, "a failed watermark write published W");
    let report = e.reclaim().unwrap();
    assert_eq!(report.threshold, 5);
    for i in 5..20 {
        assert_lookup(e, &key(i), &value(i, payload(i, i)));
    }
    if h.capabilities().reopen {
        assert_eq!(h.reopen().watermark(), 5);
    }
    let update = h.engine().advance_watermark(15).unwrap();
    assert!(update.moved && update.current == 15, "{update:?}");
    // Durable in the store but the high-water record not written (a directory where the
    // record's temporary file goes makes the real write fail): still moved and published, and a
    // reopen finds the store ahead of its record (a lower bound), not rolled back.
    let record = h.path().join(HIGH_WATER_FILE);
    let before = std::fs::read(&record).unwrap();
    let blocker = h.path().join(format!("{HIGH_WATER_FILE}.tmp"));
    std::fs::create_dir(&blocker).unwrap();
    let update = h.engine().advance_watermark(18).unwrap();
    assert!(update.moved && update.current == 18, "{update:?}");
    assert_eq!(h.engine().watermark(), 18);
    assert_eq!(
        std::fs::read(&record).unwrap(),
        before,
        "the record was written although its write was made to fail"
    );
    if h.capabilities().reopen {
        // Closed with the blocker still there, the close's record write fails too: the store
        // reopens ahead of its record (a lower bound), not rolled back.
        h.close();
        assert_eq!(
            std::fs::read(&record).unwrap(),
            before,
            "the close wrote the record although its write was made to fail"
        );
        std::fs::remove_dir(&blocker).unwrap();
        assert_eq!(h.reopen().watermark(), 18);
    } else {
        std::fs::remove_dir(&blocker).unwrap();
    }
}

/// A reclaim that fails midway (after it removed part of the covered entries) returns the error
/// and leaves every uncovered entry intact; what it removed was covered; the next reclaim
/// finishes the work.
pub fn failed_reclaim_midway_keeps_uncovered<F: EngineFactory>(factory: F) {
    let h = Harness::new(factory);
    let e = h.engine();
    fill(e, 0..200);
    e.advance_watermark(150).unwrap();
    faults(&h).fail_next(FaultPoint::Reclaim, 1);
    assert!(is_injected(&e.reclaim().unwrap_err()));
    for i in 0..200 {
        let found = e.lookup(&key(i)).unwrap();
        if i >= 150 {
            assert_eq!(
                found,
                value(i, payload(i, i)),
                "uncovered key {i} after a failed reclaim"
            );
        } else {
            assert!(
                found == LocalLookup::Miss || found == value(i, payload(i, i)),
                "covered key {i} after a failed reclaim: {found:?}"
            );
        }
    }
    let report = e.reclaim().unwrap();
    assert_eq!(report.threshold, 150);
    for i in 0..200 {
        let expected = if i < 150 {
            LocalLookup::Miss
        } else {
            value(i, payload(i, i))
        };
        assert_lookup(e, &key(i), &expected);
    }
    let left = e.reclaimable().unwrap().covered;
    assert_eq!(
        left.entries, 0,
        "covered entries left after the finishing reclaim: {left:?}"
    );
}

/// A storage that panics (as an engine does on its damaged files) during a commit, a watermark
/// write, a reclaim or a flush: the call returns [`Error::StoreFailed`] whose cause is the
/// panic, and no lock is poisoned; from then on every write, watermark change, reclaim and
/// flush is `StoreFailed` while lookups, stats, `reclaimable` and `verify` (which takes the
/// writer and reclaimer locks) keep working; a reopen brings back a working store holding every
/// acknowledged write and nothing of the call that panicked (the panic struck before the
/// storage wrote).
pub fn storage_panic_fails_the_store<F: EngineFactory>(factory: F) {
    let mut h = Harness::new(factory);
    fill(h.engine(), 0..10);
    h.engine().advance_watermark(2).unwrap();
    let points = [
        FaultPoint::Commit,
        FaultPoint::Watermark,
        FaultPoint::Reclaim,
        FaultPoint::Flush,
    ];
    // Each round ends by applying one more record, at `end`.
    for (end, point) in (10u64..).zip(points) {
        let (watermark, applied_end) = (h.engine().watermark(), h.engine().applied_end());
        faults(&h).panic_next(point, 1);
        let e = h.engine();
        let panicked = match point {
            FaultPoint::Commit => e
                .apply(&batch([Record::put(key(end), payload(end, end), end)]))
                .map(drop),
            FaultPoint::Watermark => e.advance_watermark(end).map(drop),
            FaultPoint::Reclaim => e.reclaim().map(drop),
            _ => e.flush(),
        };
        let err = panicked.expect_err("a panicking storage call must fail");
        assert!(is_store_failed(&err), "{point:?}: {err:?}");
        let cause = std::error::Error::source(&err).map(ToString::to_string);
        assert!(
            cause
                .as_deref()
                .is_some_and(|c| c.contains(&format!("injected panic at {point:?}"))),
            "{point:?}: the error names the panic as its cause: {cause:?}"
        );
        check_failed(e, point, end);
        assert_eq!(
            (e.watermark(), e.applied_end()),
            (watermark, applied_end),
            "{point:?}: the panicked call moved W or the applied end"
        );
        if !h.capabilities().reopen {
            return;
        }
        let e = h.reopen();
        assert_eq!(
            (e.watermark(), e.applied_end()),
            (watermark, applied_end),
            "{point:?}: the reopened store"
        );
        for i in watermark..end {
            assert_lookup(e, &key(i), &value(i, payload(i, i)));
        }
        // Working again: the write the panic refused applies, W moves.
        let outcome = apply(e, [Record::put(key(end), payload(end, end), end)]);
        assert_eq!(outcome.applied, 1, "{point:?}: after the reopen");
        assert!(e.advance_watermark(watermark + 1).unwrap().moved);
        e.flush().unwrap();
    }
}

fn is_store_failed(e: &Error) -> bool {
    matches!(e, Error::StoreFailed { .. })
}

/// A failed store: every write is refused with `StoreFailed` (never `Poisoned`), every read
/// works and sees the acknowledged writes below `end`.
fn check_failed<E: Engine + ?Sized>(e: &E, point: FaultPoint, end: u64) {
    let refused = [
        (
            "apply",
            e.apply(&batch([Record::put(key(end), payload(end, end), end)]))
                .map(drop),
        ),
        ("advance_watermark", e.advance_watermark(end).map(drop)),
        (
            "adopt_lake_watermark",
            e.adopt_lake_watermark(end).map(drop),
        ),
        ("reclaim", e.reclaim().map(drop)),
        ("reclaim_below", e.reclaim_below(end).map(drop)),
        ("flush", e.flush()),
    ];
    for (call, result) in refused {
        match result {
            Err(err) if is_store_failed(&err) => {}
            other => panic!("{point:?}: {call} on a failed store: {other:?}"),
        }
    }
    let watermark = e.watermark();
    for i in watermark..end {
        assert_lookup(e, &key(i), &value(i, payload(i, i)));
    }
    if let Some(found) = e.lookup_inline(&key(end - 1)).unwrap() {
        assert_eq!(found, e.lookup(&key(end - 1)).unwrap(), "{point:?}");
    }
    e.stats().unwrap();
    e.reclaimable().unwrap();
    let report = e.verify().unwrap();
    assert!(report.is_clean(), "{point:?}: {report:?}");
}
