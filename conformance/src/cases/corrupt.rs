//! Corrupt stored values: named by lookups, kept and counted by reclamation.

use tidemark_engine_api::{Engine, Error, LocalLookup, codec};

use super::util::{assert_lookup, assert_mentions, key, payload, value};
use crate::{EngineFactory, Harness};

/// Stored bytes that are not a valid format-1 value, each with a binary key to store them under.
fn corruptions() -> Vec<(Vec<u8>, Vec<u8>, &'static str)> {
    vec![
        (vec![0x00, 0xff, 0x01], vec![], "empty"),
        (
            b"bad-kind".to_vec(),
            vec![0x03, 0, 0, 0, 0, 0, 0, 0, 1],
            "unknown kind",
        ),
        (b"zero-kind".to_vec(), vec![0x00], "unknown kind"),
        (
            b"short".to_vec(),
            vec![codec::KIND_VALUE, 0, 0, 0],
            "shorter",
        ),
        (
            b"fat-tombstone".to_vec(),
            vec![codec::KIND_TOMBSTONE, 0, 0, 0, 0, 0, 0, 0, 1, 0xee],
            "tombstone carries",
        ),
    ]
}

#[track_caller]
fn assert_corrupt<E: Engine>(e: &E, key: &[u8], needle: &str) {
    match e.lookup(key) {
        Err(err @ Error::Corrupt { .. }) => {
            let text = err.to_string();
            let Error::Corrupt { key: named, reason } = err else {
                unreachable!()
            };
            assert_eq!(named, key, "Corrupt names the wrong key");
            assert_mentions("message", &text, &codec::display_key(key));
            assert_mentions("reason", &reason, needle);
        }
        other => panic!("lookup of corrupt key {key:?}: expected Error::Corrupt, got {other:?}"),
    }
}

/// A lookup of an undecodable stored value returns `Error::Corrupt` naming the key (never a
/// panic, never a wrong value); other keys are unaffected; a newer write replaces it.
pub fn corrupt_value_lookup_names_key<F: EngineFactory>(factory: F) {
    let h = Harness::new(factory);
    let e = h.engine();
    e.put(b"good", b"fine", 0).unwrap();
    for (k, stored, _) in corruptions() {
        h.inject_raw(&k, &stored);
    }
    for (k, _, needle) in corruptions() {
        assert_corrupt(e, &k, needle);
    }
    assert_lookup(e, b"good", &value(0, "fine"));
    assert_lookup(e, b"missing", &LocalLookup::Miss);
    e.put(b"short", b"repaired", 1).unwrap();
    assert_lookup(e, b"short", &value(1, "repaired"));
}

/// Reclamation keeps what it cannot decode and counts it, each entry exactly once per reclaim
/// (report and counters), while removing the covered entries around it; the corrupt entries are
/// still there (still `Corrupt`, and counted live where the count is exact) after repeated
/// reclaims.
pub fn reclaim_keeps_and_counts_corrupt<F: EngineFactory>(factory: F) {
    let h = Harness::new(factory);
    let e = h.engine();
    for i in 0..10u64 {
        e.put(&key(i), &payload(i, i), i).unwrap();
    }
    for (k, stored, _) in corruptions() {
        h.inject_raw(&k, &stored);
    }
    e.put(&key(10), &payload(10, 10), 10).unwrap();
    e.advance_watermark(10).unwrap();
    let injected = corruptions().len() as u64;
    let r = e.reclaim().unwrap();
    assert_eq!((r.values_removed, r.tombstones_removed), (10, 0));
    assert_eq!(
        r.corrupt_kept, injected,
        "reclaim must meet, keep and count each injected corrupt entry exactly once"
    );
    assert_eq!(e.stats().unwrap().counters.corrupt_kept, injected);
    // What a reclaim keeps still counts as live, where the backend counts exactly.
    let exact = h.capabilities().declared.exact_live_entries;
    if exact {
        assert_eq!(e.stats().unwrap().live_entries, injected + 1);
    }
    for (k, _, needle) in corruptions() {
        assert_corrupt(e, &k, needle);
    }
    assert_lookup(e, &key(10), &value(10, payload(10, 10)));
    e.advance_watermark(11).unwrap();
    // Kept entries are met (and counted) again by every later reclaim.
    let r = e.reclaim().unwrap();
    assert_eq!((r.values_removed, r.corrupt_kept), (1, injected));
    assert_eq!(e.stats().unwrap().counters.corrupt_kept, 2 * injected);
    if exact {
        assert_eq!(e.stats().unwrap().live_entries, injected);
    }
    for (k, _, needle) in corruptions() {
        assert_corrupt(e, &k, needle);
    }
}

/// Format-2 entries carry a checksum over key, header and payload: one damaged byte anywhere,
/// or an entry stored under another key, is `Error::Corrupt` ("checksum mismatch"), never a
/// wrong value. A decodable entry tagged at or above the applied end is `Corrupt` too. A
/// format-1 entry (no checksum) below the applied end still reads.
pub fn damaged_entries_are_never_served<F: EngineFactory>(factory: F) {
    let h = Harness::new(factory);
    let e = h.engine();
    e.put(b"anchor", b"x", 9).unwrap(); // applied end 10
    let good = codec::encode_value(b"flipped", 3, b"payload");
    for byte in 0..good.len() {
        let mut bad = good.clone();
        bad[byte] ^= 0x04;
        h.inject_raw(b"flipped", &bad);
        assert!(
            matches!(e.lookup(b"flipped"), Err(Error::Corrupt { .. })),
            "a flip in byte {byte} was served"
        );
    }
    h.inject_raw(b"moved", &codec::encode_value(b"elsewhere", 3, b"payload"));
    assert_corrupt(e, b"moved", "checksum mismatch");
    h.inject_raw(b"moved", &codec::encode_tombstone(b"elsewhere", 3));
    assert_corrupt(e, b"moved", "checksum mismatch");
    h.inject_raw(
        b"future",
        &codec::encode_value(b"future", 10, b"never applied"),
    );
    assert_corrupt(e, b"future", "applied end");
    h.inject_raw(b"far", &codec::encode_tombstone(b"far", u64::MAX - 1));
    assert_corrupt(e, b"far", "applied end");
    h.inject_raw(b"old", &codec::encode_value_v1(4, b"version 1"));
    assert_lookup(e, b"old", &value(4, "version 1"));
    h.inject_raw(b"old-gone", &codec::encode_tombstone_v1(5));
    assert_lookup(e, b"old-gone", &LocalLookup::Tombstone { offset: 5 });
    h.inject_raw(b"old-future", &codec::encode_value_v1(10, b"x"));
    assert_corrupt(e, b"old-future", "applied end");
    assert_lookup(e, b"anchor", &value(9, "x"));
}
