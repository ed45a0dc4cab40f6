//! Corrupt stored values: named by lookups, kept and counted by reclamation.

use engine_api::{Engine, Error, LocalLookup, codec};

use super::util::{assert_lookup, key, payload, value};
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
            assert!(
                text.contains(&codec::display_key(key)),
                "message {text:?} does not show the key"
            );
            assert!(
                reason.contains(needle),
                "reason {reason:?} lacks {needle:?}"
            );
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
/// still there (still `Corrupt`) after repeated reclaims.
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
    for (k, _, needle) in corruptions() {
        assert_corrupt(e, &k, needle);
    }
    assert_lookup(e, &key(10), &value(10, payload(10, 10)));
    e.advance_watermark(11).unwrap();
    // Kept entries are met (and counted) again by every later reclaim.
    let r = e.reclaim().unwrap();
    assert_eq!((r.values_removed, r.corrupt_kept), (1, injected));
    assert_eq!(e.stats().unwrap().counters.corrupt_kept, 2 * injected);
    for (k, _, needle) in corruptions() {
        assert_corrupt(e, &k, needle);
    }
}
