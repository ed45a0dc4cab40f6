//! Small helpers shared by the cases.

use engine_api::{Engine, LocalLookup, Record, WriteBatch};

/// `LocalLookup::Value`.
pub fn value(offset: u64, bytes: impl Into<Vec<u8>>) -> LocalLookup {
    LocalLookup::Value {
        offset,
        bytes: bytes.into(),
    }
}

/// `LocalLookup::Tombstone`.
pub fn tombstone(offset: u64) -> LocalLookup {
    LocalLookup::Tombstone { offset }
}

/// Looks `key` up and asserts the result.
#[track_caller]
pub fn assert_lookup<E: Engine + ?Sized>(engine: &E, key: &[u8], expected: &LocalLookup) {
    let got = engine
        .lookup(key)
        .unwrap_or_else(|e| panic!("lookup {key:?}: {e}"));
    assert_eq!(&got, expected, "lookup of key {key:?}");
}

/// A batch from records.
pub fn batch(records: impl IntoIterator<Item = Record>) -> WriteBatch {
    records.into_iter().collect()
}

/// The key `k<i>`.
pub fn key(i: u64) -> Vec<u8> {
    format!("k{i:04}").into_bytes()
}

/// A payload that names its key and offset, so a stale value is recognisable.
pub fn payload(i: u64, offset: u64) -> Vec<u8> {
    format!("v{i}@{offset}").into_bytes()
}

/// Deterministic, incompressible bytes (SplitMix64).
pub fn noise(seed: u64, len: usize) -> Vec<u8> {
    let mut rng = SplitMix64(seed);
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        out.extend_from_slice(&rng.next_u64().to_le_bytes());
    }
    out.truncate(len);
    out
}

/// A tiny deterministic PRNG for cases that need variety without a dependency.
#[derive(Debug, Clone)]
pub struct SplitMix64(pub u64);

impl SplitMix64 {
    /// Next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (`n > 0`).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }
}
