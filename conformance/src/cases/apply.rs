//! Records skipped as covered or already applied, and idempotent WAL replay.

use tidemark_engine_api::{ApplyOutcome, Engine, LocalLookup, Record, WriteBatch};

use super::util::{apply, assert_lookup, batch, fill, key, payload, tombstone, value};
use crate::{EngineFactory, Harness};

/// A small WAL: batches of puts and deletes over 8 keys, offsets 0..40.
pub(crate) fn sample_wal() -> Vec<WriteBatch> {
    (0..8u64)
        .map(|b| {
            batch((0..5u64).map(|j| {
                let offset = b * 5 + j;
                let k = offset % 8;
                if offset % 7 == 6 {
                    Record::delete(key(k), offset)
                } else {
                    Record::put(key(k), payload(k, offset), offset)
                }
            }))
        })
        .collect()
}

/// What `sample_wal` leaves behind for each of its 8 keys.
pub(crate) fn sample_wal_state() -> Vec<(Vec<u8>, LocalLookup)> {
    let mut state: Vec<LocalLookup> = vec![LocalLookup::Miss; 8];
    for offset in 0..40u64 {
        let k = offset % 8;
        state[k as usize] = if offset % 7 == 6 {
            tombstone(offset)
        } else {
            value(offset, payload(k, offset))
        };
    }
    state
        .into_iter()
        .enumerate()
        .map(|(k, l)| (key(k as u64), l))
        .collect()
}

/// Records below the applied end are skipped and counted as already applied; their (different)
/// bytes are not written.
pub fn already_applied_skipped_and_counted<F: EngineFactory>(factory: F) {
    let h = Harness::new(factory);
    let e = h.engine();
    fill(e, 0..10);
    let replay = batch((5..15u64).map(|i| Record::put(key(i), b"REPLAYED", i)));
    let out = e.apply(&replay).unwrap();
    assert_eq!(
        out,
        ApplyOutcome {
            applied: 5,
            covered: 0,
            already_applied: 5,
            applied_end: 15
        }
    );
    for i in 5..10u64 {
        assert_lookup(e, &key(i), &value(i, payload(i, i)));
    }
    for i in 10..15u64 {
        assert_lookup(e, &key(i), &value(i, "REPLAYED"));
    }
    // A delete of an already-applied offset does not store a tombstone either.
    let out = e.delete(&key(3), 3).unwrap();
    assert_eq!((out.applied, out.already_applied), (0, 1));
    assert_lookup(e, &key(3), &value(3, payload(3, 3)));
    let c = e.stats().unwrap().counters;
    assert_eq!((c.applied, c.already_applied, c.covered), (15, 6, 0));
}

/// Records below `W` are skipped and counted as covered (before the already-applied check);
/// they are not written, not even over an empty slot.
pub fn covered_skipped_and_counted<F: EngineFactory>(factory: F) {
    let h = Harness::new(factory);
    let e = h.engine();
    fill(e, 0..10);
    e.advance_watermark(6).unwrap();
    let out = apply(e, (3..13u64).map(|i| Record::delete(key(100 + i), i)));
    assert_eq!(
        out,
        ApplyOutcome {
            applied: 3,
            covered: 3,
            already_applied: 4,
            applied_end: 13
        }
    );
    for i in 3..10u64 {
        assert_lookup(e, &key(100 + i), &LocalLookup::Miss);
    }
    for i in 10..13u64 {
        assert_lookup(e, &key(100 + i), &tombstone(i));
    }
    let c = e.stats().unwrap().counters;
    assert_eq!((c.applied, c.covered, c.already_applied), (13, 3, 4));
}

/// Replaying the whole WAL (before and after a reclaim) changes nothing: every record is
/// covered or already applied, and reclaimed keys do not come back.
pub fn wal_replay_is_idempotent<F: EngineFactory>(factory: F) {
    let h = Harness::new(factory);
    let e = h.engine();
    let wal = sample_wal();
    for b in &wal {
        e.apply(b).unwrap();
    }
    let expected = sample_wal_state();
    let check = |expected: &[(Vec<u8>, LocalLookup)]| {
        for (k, l) in expected {
            assert_lookup(e, k, l);
        }
    };
    check(&expected);
    for b in &wal {
        let out = e.apply(b).unwrap();
        assert_eq!((out.applied, out.covered, out.already_applied), (0, 0, 5));
        assert_eq!(out.applied_end, 40);
    }
    check(&expected);

    e.advance_watermark(36).unwrap();
    e.reclaim().unwrap();
    let after: Vec<(Vec<u8>, LocalLookup)> = expected
        .iter()
        .map(|(k, l)| {
            let kept = l.offset().is_some_and(|o| o >= 36);
            (k.clone(), if kept { l.clone() } else { LocalLookup::Miss })
        })
        .collect();
    check(&after);
    let mut totals = (0, 0, 0);
    for b in &wal {
        let out = e.apply(b).unwrap();
        totals.0 += out.applied;
        totals.1 += out.covered;
        totals.2 += out.already_applied;
    }
    assert_eq!(totals, (0, 36, 4));
    check(&after);
    assert_eq!(e.applied_end(), 40);
}
