//! Batches: all records applied in order, same-key ordering, gaps, empty batches.

use tidemark_engine_api::{ApplyOutcome, Engine, LocalLookup, Record};

use super::util::{apply, assert_lookup, batch, key, payload, tombstone, value};
use crate::{EngineFactory, Harness};

/// Every record of a batch of puts and deletes over several keys is applied; the outcome counts
/// them and the applied end is `1 +` the last offset.
pub fn batch_applies_every_record<F: EngineFactory>(factory: F) {
    let h = Harness::new(factory);
    let e = h.engine();
    let b = batch((0..50u64).map(|i| {
        if i % 5 == 4 {
            Record::delete(key(i), i)
        } else {
            Record::put(key(i), payload(i, i), i)
        }
    }));
    let out = e.apply(&b).unwrap();
    assert_eq!(
        out,
        ApplyOutcome {
            applied: 50,
            covered: 0,
            already_applied: 0,
            applied_end: 50
        }
    );
    for i in 0..50u64 {
        let expected = if i % 5 == 4 {
            tombstone(i)
        } else {
            value(i, payload(i, i))
        };
        assert_lookup(e, &key(i), &expected);
    }
    assert_eq!(e.applied_end(), 50);
}

/// The same key twice in a batch: the last record wins, whatever the kinds and even at the same
/// offset.
pub fn batch_same_key_last_wins<F: EngineFactory>(factory: F) {
    let h = Harness::new(factory);
    let e = h.engine();
    let out = apply(
        e,
        [
            Record::put(b"a", b"first", 1),
            Record::put(b"a", b"second", 1), // same offset
            Record::put(b"b", b"kept?", 2),
            Record::delete(b"b", 3), // put then delete
            Record::delete(b"c", 3),
            Record::put(b"c", b"back", 4), // delete then put
            Record::put(b"a", b"third", 4),
        ],
    );
    assert_eq!((out.applied, out.applied_end), (7, 5));
    assert_lookup(e, b"a", &value(4, "third"));
    assert_lookup(e, b"b", &tombstone(3));
    assert_lookup(e, b"c", &value(4, "back"));
}

/// Offsets may have gaps; the applied end follows the highest offset and a later record below
/// it (in a gap) counts as already applied.
pub fn batch_offsets_with_gaps<F: EngineFactory>(factory: F) {
    let h = Harness::new(factory);
    let e = h.engine();
    let out = apply(
        e,
        [
            Record::put(b"a", b"1", 10),
            Record::put(b"b", b"2", 100),
            Record::put(b"c", b"3", 1000),
        ],
    );
    assert_eq!((out.applied, out.applied_end), (3, 1001));
    let out = e.put(b"gap", b"x", 500).unwrap();
    assert_eq!(
        (out.applied, out.already_applied, out.applied_end),
        (0, 1, 1001)
    );
    assert_lookup(e, b"gap", &LocalLookup::Miss);
    assert_lookup(e, b"c", &value(1000, "3"));
}

/// An empty batch writes nothing and reports the unchanged applied end.
pub fn empty_batch_is_noop<F: EngineFactory>(factory: F) {
    let h = Harness::new(factory);
    let e = h.engine();
    assert_eq!(apply(e, []), ApplyOutcome::default());
    e.put(b"a", b"1", 7).unwrap();
    assert_eq!(
        apply(e, []),
        ApplyOutcome {
            applied_end: 8,
            ..ApplyOutcome::default()
        }
    );
    assert_eq!(e.applied_end(), 8);
    assert_eq!(e.stats().unwrap().counters.applied, 1);
}
