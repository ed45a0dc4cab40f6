//! Invalid input: rejected with `Error::InvalidInput`, nothing written.

use tidemark_engine_api::{
    Engine, Error, LocalLookup, MAX_KEY_LEN, MAX_OFFSET, MAX_VALUE_LEN, Record,
};

use super::util::{assert_lookup, assert_mentions, batch, tombstone, value};
use crate::{EngineFactory, Harness};

#[track_caller]
fn assert_invalid<T: std::fmt::Debug>(result: tidemark_engine_api::Result<T>, needle: &str) {
    match result {
        Err(Error::InvalidInput(msg)) => assert_mentions("message", &msg, needle),
        other => panic!("expected InvalidInput ({needle}), got {other:?}"),
    }
}

/// Empty keys, keys above 64 KiB − 2, values above 64 MiB, offsets going backwards and offset
/// `u64::MAX` are rejected as `InvalidInput` naming the problem, and nothing of the batch is
/// written: not the valid records around the bad one, not the applied end, not the counters.
pub fn invalid_input_rejected_nothing_written<F: EngineFactory>(factory: F) {
    let h = Harness::new(factory);
    let e = h.engine();
    e.put(b"base", b"v", 0).unwrap();
    e.put(b"x", b"old", 1).unwrap();
    e.advance_watermark(1).unwrap();
    let stats_before = e.stats().unwrap();
    let ok = |offset| Record::put(b"x", b"NEW", offset);
    let ok2 = |offset| Record::delete(b"y", offset);

    let cases: Vec<(Vec<Record>, &str)> = vec![
        (
            vec![ok(10), ok2(11), Record::put(Vec::new(), b"v", 12)],
            "empty",
        ),
        (vec![Record::delete(Vec::new(), 10), ok(11)], "empty"),
        (
            vec![
                ok(10),
                Record::put(vec![7u8; MAX_KEY_LEN + 1], b"v", 11),
                ok2(12),
            ],
            "key",
        ),
        (
            vec![
                ok(10),
                Record::put(b"big", vec![0u8; MAX_VALUE_LEN + 1], 11),
            ],
            "value",
        ),
        (
            vec![ok(10), ok2(12), Record::put(b"z", b"v", 11)],
            "backwards",
        ),
        (vec![ok(10), Record::delete(b"z", u64::MAX)], "offset"),
        // Invalid even when every record would have been skipped as already applied.
        (
            vec![Record::put(b"x", b"v", 1), Record::put(Vec::new(), b"v", 1)],
            "empty",
        ),
    ];
    for (records, needle) in cases {
        assert_invalid(e.apply(&batch(records)), needle);
        assert_eq!(e.applied_end(), 2);
        assert_eq!(e.watermark(), 1);
        assert_lookup(e, b"x", &value(1, "old"));
        assert_lookup(e, b"y", &LocalLookup::Miss);
        assert_lookup(e, b"z", &LocalLookup::Miss);
        assert_lookup(e, b"big", &LocalLookup::Miss);
    }
    assert_invalid(e.put(b"", b"v", 20), "empty");
    assert_invalid(e.delete(&vec![1u8; MAX_KEY_LEN + 1], 20), "key");
    let s = e.stats().unwrap();
    assert_eq!(s.counters, stats_before.counters);
    assert_eq!((s.watermark, s.applied_end), (1, 2));
    if h.capabilities().declared.exact_live_entries {
        assert_eq!(s.live_entries, 2);
    }
    // The engine is still usable.
    e.put(b"x", b"after", 2).unwrap();
    assert_lookup(e, b"x", &value(2, "after"));
}

/// Lookups with an empty key or a key above 64 KiB − 2 are `InvalidInput`, not a miss or a panic.
pub fn lookup_rejects_invalid_keys<F: EngineFactory>(factory: F) {
    let h = Harness::new(factory);
    let e = h.engine();
    e.put(b"k", b"v", 0).unwrap();
    assert_invalid(e.lookup(b""), "empty");
    assert_invalid(e.lookup(&vec![b'k'; MAX_KEY_LEN + 1]), "key");
    assert_lookup(e, b"k", &value(0, "v"));
    assert_invalid(e.lookup_inline(b""), "empty");
    assert_invalid(e.lookup_inline(&vec![b'k'; MAX_KEY_LEN + 1]), "key");
}

/// `lookup_inline` answers exactly what `lookup` does whenever it answers, before and after the
/// data settles into the store's files; a key just written (in memory on every backend) is
/// answered inline.
pub fn lookup_inline_agrees_with_lookup<F: EngineFactory>(factory: F) {
    let h = Harness::new(factory);
    let e = h.engine();
    let mut b = tidemark_engine_api::WriteBatch::new();
    b.put("a", "1", 0).delete("b", 1).put("c", "3", 2);
    e.apply(&b).unwrap();
    assert_eq!(e.lookup_inline(b"a").unwrap(), Some(value(0, "1")));
    let keys: [&[u8]; 4] = [b"a", b"b", b"c", b"never"];
    for settled in [false, true] {
        if settled {
            h.factory().settle(e).unwrap();
        }
        for key in keys {
            if let Some(inline) = e.lookup_inline(key).unwrap() {
                assert_eq!(inline, e.lookup(key).unwrap(), "settled {settled}");
            }
        }
    }
}

/// The largest accepted offset (`u64::MAX - 1`) works end to end: applied end `u64::MAX`, a
/// watermark of `u64::MAX`, and reclaim removing it.
pub fn largest_offset_accepted<F: EngineFactory>(factory: F) {
    let h = Harness::new(factory);
    let e = h.engine();
    e.put(b"low", b"v", 0).unwrap();
    let out = e.delete(b"top", MAX_OFFSET).unwrap();
    assert_eq!((out.applied, out.applied_end), (1, u64::MAX));
    assert_lookup(e, b"top", &tombstone(MAX_OFFSET));
    e.advance_watermark(MAX_OFFSET).unwrap();
    let r = e.reclaim().unwrap();
    assert_eq!((r.values_removed, r.tombstones_removed), (1, 0));
    assert_lookup(e, b"top", &tombstone(MAX_OFFSET));
    let up = e.advance_watermark(u64::MAX).unwrap();
    assert_eq!((up.current, up.moved), (u64::MAX, true));
    let r = e.reclaim().unwrap();
    assert_eq!((r.threshold, r.tombstones_removed), (u64::MAX, 1));
    assert_lookup(e, b"top", &LocalLookup::Miss);
}
