//! Puts, lookups, overwrites, tombstones, sizes and flush.

use tidemark_engine_api::{Engine, LocalLookup, MAX_KEY_LEN, MAX_VALUE_LEN, Record};

use super::util::{assert_lookup, batch, noise, tombstone, value};
use crate::{EngineFactory, Harness};

/// A put is found with its offset and bytes; other keys miss.
pub fn put_then_lookup<F: EngineFactory>(factory: F) {
    let h = Harness::new(factory);
    let e = h.engine();
    let out = e.put(b"alpha", b"one", 0).unwrap();
    assert_eq!(
        (
            out.applied,
            out.covered,
            out.already_applied,
            out.applied_end
        ),
        (1, 0, 0, 1)
    );
    e.put(b"beta", b"two", 1).unwrap();
    assert_lookup(e, b"alpha", &value(0, "one"));
    assert_lookup(e, b"beta", &value(1, "two"));
    assert_lookup(e, b"gamma", &LocalLookup::Miss);
    assert_lookup(e, b"alph", &LocalLookup::Miss);
    assert_lookup(e, b"alphaa", &LocalLookup::Miss);
    assert_eq!(e.applied_end(), 2);
}

/// Later writes of a key replace earlier ones: value, tombstone, value again.
pub fn overwrite_returns_newest<F: EngineFactory>(factory: F) {
    let h = Harness::new(factory);
    let e = h.engine();
    e.put(b"k", b"v1", 0).unwrap();
    e.put(b"k", b"v2", 1).unwrap();
    assert_lookup(e, b"k", &value(1, "v2"));
    e.delete(b"k", 4).unwrap();
    assert_lookup(e, b"k", &tombstone(4));
    e.put(b"k", b"v3 longer than before", 9).unwrap();
    assert_lookup(e, b"k", &value(9, "v3 longer than before"));
    e.put(b"k", b"", 10).unwrap();
    assert_lookup(e, b"k", &value(10, ""));
    assert_eq!(e.applied_end(), 11);
}

/// Arbitrary binary keys and values round-trip, including NUL and 0xff bytes, keys that are
/// prefixes of each other, and an empty value.
pub fn binary_keys_and_values<F: EngineFactory>(factory: F) {
    let h = Harness::new(factory);
    let e = h.engine();
    let all_bytes: Vec<u8> = (0..=255u8).collect();
    let keys: Vec<Vec<u8>> = vec![
        vec![0x00],
        vec![0xff],
        vec![0x00, 0x00],
        vec![0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff],
        b"a".to_vec(),
        b"a\0".to_vec(),
        b"ab".to_vec(),
        all_bytes.clone(),
        all_bytes.iter().rev().copied().collect(),
        // Looks like an offset-index row (8-byte BE offset ‖ key) and like a tagged value.
        [&0u64.to_be_bytes()[..], b"k"].concat(),
        [&[0x01u8][..], &7u64.to_be_bytes()[..]].concat(),
        "ключ-🔑".as_bytes().to_vec(),
    ];
    let values: Vec<Vec<u8>> = keys
        .iter()
        .enumerate()
        .map(|(i, k)| match i % 4 {
            0 => Vec::new(),
            1 => all_bytes.clone(),
            2 => [k.as_slice(), &[0u8, 0xff]].concat(),
            _ => vec![0u8; 9],
        })
        .collect();
    let b = batch(
        keys.iter()
            .zip(&values)
            .enumerate()
            .map(|(i, (k, v))| Record::put(k.clone(), v.clone(), i as u64)),
    );
    assert_eq!(e.apply(&b).unwrap().applied, keys.len() as u64);
    for (i, (k, v)) in keys.iter().zip(&values).enumerate() {
        assert_lookup(e, k, &value(i as u64, v.clone()));
    }
    assert_lookup(e, &[0x01], &LocalLookup::Miss);
    assert_lookup(e, &[0xff, 0xff], &LocalLookup::Miss);
}

/// A 64 KiB key and a 64 MiB value (the limits, inclusive) are accepted and read back intact.
pub fn max_size_key_and_value<F: EngineFactory>(factory: F) {
    let h = Harness::new(factory);
    let e = h.engine();
    let big_key = noise(1, MAX_KEY_LEN);
    e.put(&big_key, b"small", 0).unwrap();
    assert_lookup(e, &big_key, &value(0, "small"));
    // A key that differs only in its last byte is a different key.
    let mut sibling = big_key.clone();
    *sibling.last_mut().unwrap() ^= 1;
    assert_lookup(e, &sibling, &LocalLookup::Miss);

    let big_value = noise(2, MAX_VALUE_LEN);
    e.put(&sibling, &big_value, 1).unwrap();
    match e.lookup(&sibling).unwrap() {
        LocalLookup::Value { offset, bytes } => {
            assert_eq!(offset, 1);
            assert!(bytes == big_value, "64 MiB value changed on the way back");
        }
        other => panic!("expected the 64 MiB value, got {other:?}"),
    }
    e.delete(&big_key, 2).unwrap();
    assert_lookup(e, &big_key, &tombstone(2));
}

/// A delete stores a tagged tombstone, distinct from a miss, also for a key never written.
pub fn tombstone_distinct_from_miss<F: EngineFactory>(factory: F) {
    let h = Harness::new(factory);
    let e = h.engine();
    let out = e.delete(b"never-written", 3).unwrap();
    assert_eq!((out.applied, out.applied_end), (1, 4));
    assert_lookup(e, b"never-written", &tombstone(3));
    e.put(b"k", b"v", 4).unwrap();
    e.delete(b"k", 5).unwrap();
    assert_lookup(e, b"k", &tombstone(5));
    assert_lookup(e, b"other", &LocalLookup::Miss);
    assert_ne!(tombstone(5), LocalLookup::Miss);
    // Deleting twice keeps the newer tag.
    e.delete(b"k", 6).unwrap();
    assert_lookup(e, b"k", &tombstone(6));
}

/// A new engine has `W = 0`, applied end 0, no entries and zero counters; reclaiming it removes
/// nothing.
pub fn fresh_engine_is_empty<F: EngineFactory>(factory: F) {
    let h = Harness::new(factory);
    let e = h.engine();
    h.backend();
    assert_eq!(e.watermark(), 0);
    assert_eq!(e.applied_end(), 0);
    assert_lookup(e, b"anything", &LocalLookup::Miss);
    let s = e.stats().unwrap();
    assert_eq!((s.watermark, s.applied_end), (0, 0));
    assert_eq!(s.live_entries, 0);
    assert_eq!(s.covered_estimate, 0);
    assert_eq!(s.counters, Default::default());
    let r = e.reclaim().unwrap();
    assert_eq!((r.threshold, r.removed(), r.corrupt_kept), (0, 0, 0));
}

/// `flush` succeeds on an empty and on a written engine and changes nothing visible.
pub fn flush_succeeds<F: EngineFactory>(factory: F) {
    let h = Harness::new(factory);
    let e = h.engine();
    e.flush().unwrap();
    e.put(b"a", b"1", 0).unwrap();
    e.delete(b"b", 1).unwrap();
    e.advance_watermark(1).unwrap();
    e.flush().unwrap();
    e.flush().unwrap();
    assert_lookup(e, b"a", &value(0, "1"));
    assert_lookup(e, b"b", &tombstone(1));
    assert_eq!((e.watermark(), e.applied_end()), (1, 2));
}
