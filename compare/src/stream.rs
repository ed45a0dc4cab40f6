//! The record stream every run writes: a pure function of the seed and the offset, so each
//! backend and variant gets the same records, and a value names the offset that wrote it.

use std::collections::VecDeque;

use test_support::rng::SplitMix64;
use tidemark::{Record, WriteBatch};

/// Offsets spread over the generator's seeds (the golden-ratio increment of SplitMix64).
const SPREAD: u64 = 0x9e37_79b9_7f4a_7c15;
/// Salt of the payload bytes, so they are not the draws that chose the key.
const PAYLOAD_SALT: u64 = 0x5eed_da7a;

/// The deterministic stream: the record at offset `o` puts a value under a key drawn from the key
/// space, or (with `delete_percent` chance, never at offset 0) deletes the key some earlier
/// offset put.
#[derive(Debug, Clone)]
pub struct Stream {
    seed: u64,
    keys: u64,
    delete_percent: u64,
    value_size: usize,
}

impl Stream {
    /// The stream of `seed` over `keys` keys.
    pub fn new(seed: u64, keys: u64, delete_percent: u64, value_size: usize) -> Self {
        Stream {
            seed,
            keys: keys.max(1),
            delete_percent,
            value_size: value_size.max(8),
        }
    }

    fn rng(&self, offset: u64) -> SplitMix64 {
        SplitMix64::new(self.seed ^ offset.wrapping_mul(SPREAD))
    }

    /// The generator of `offset` after its first two draws: the key a put would write, and
    /// whether the record is a delete.
    fn draws(&self, offset: u64) -> (u64, bool, SplitMix64) {
        let mut rng = self.rng(offset);
        let key = rng.below(self.keys);
        let delete = offset > 0 && rng.below(100) < self.delete_percent;
        (key, delete, rng)
    }

    /// The key the last put at or below `offset` wrote (offset 0 is always a put).
    fn written_key(&self, mut offset: u64) -> u64 {
        loop {
            let (key, delete, _) = self.draws(offset);
            if !delete {
                return key;
            }
            offset -= 1;
        }
    }

    /// `(key index, is a delete)` of the record at `offset`: a delete names the key of a put at
    /// a random earlier offset (the last put at or below it), so it deletes a key that exists.
    fn shape(&self, offset: u64) -> (u64, bool) {
        let (key, delete, mut rng) = self.draws(offset);
        if delete {
            (self.written_key(rng.below(offset)), true)
        } else {
            (key, false)
        }
    }

    /// The index of the key the record at `offset` writes.
    pub fn key_index(&self, offset: u64) -> u64 {
        self.shape(offset).0
    }

    /// Whether the record at `offset` is a delete.
    pub fn is_delete(&self, offset: u64) -> bool {
        self.shape(offset).1
    }

    /// The bytes of key `index` (fixed width, so every key has the same size).
    pub fn key(index: u64) -> Vec<u8> {
        format!("key-{index:012}").into_bytes()
    }

    /// The index a key's bytes name (`None` for bytes no key of a stream has).
    pub fn key_index_of(key: &[u8]) -> Option<u64> {
        let digits = std::str::from_utf8(key.strip_prefix(b"key-")?).ok()?;
        if digits.len() != 12 || !digits.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        digits.parse().ok()
    }

    /// The value a put at `offset` writes: the offset (8 bytes, big-endian), then incompressible
    /// bytes, `value_size` in all.
    pub fn payload(&self, offset: u64) -> Vec<u8> {
        let mut value = offset.to_be_bytes().to_vec();
        let mut rng = SplitMix64::new(self.seed ^ PAYLOAD_SALT ^ offset.wrapping_mul(SPREAD));
        value.extend(rng.bytes(self.value_size - 8));
        value
    }

    /// The offset a value names (its first 8 bytes), `None` when it is too short.
    pub fn offset_of(value: &[u8]) -> Option<u64> {
        let head: [u8; 8] = value.get(..8)?.try_into().ok()?;
        Some(u64::from_be_bytes(head))
    }

    /// The record at `offset`.
    pub fn record(&self, offset: u64) -> Record {
        let (key, delete) = self.shape(offset);
        if delete {
            Record::delete(Self::key(key), offset)
        } else {
            Record::put(Self::key(key), self.payload(offset), offset)
        }
    }

    /// The records at `from..to`, as one batch.
    pub fn batch(&self, from: u64, to: u64) -> WriteBatch {
        (from..to).map(|o| self.record(o)).collect()
    }

    /// What the key's state is right after the record at `offset`: its value, or `None` for a
    /// delete.
    pub fn state_after(&self, offset: u64) -> Option<Vec<u8>> {
        (!self.is_delete(offset)).then(|| self.payload(offset))
    }
}

/// Bytes stored by the records of the window the lake has not absorbed (key plus encoded value,
/// as the engines store them): running sums from the lake's end on, so the bytes of any range in
/// it are one subtraction and what the lake has absorbed is forgotten.
#[derive(Debug, Clone)]
pub struct WindowBytes {
    /// The offset of `sums[0]`.
    base: u64,
    /// `sums[i]` = bytes of the records below `base + i`, since offset 0.
    sums: VecDeque<u64>,
}

impl Default for WindowBytes {
    fn default() -> Self {
        WindowBytes {
            base: 0,
            sums: VecDeque::from([0]),
        }
    }
}

impl WindowBytes {
    /// Adds the records that follow the last one added (a batch, in offset order).
    pub fn push(&mut self, records: &[Record]) {
        let mut total = self.sums.back().copied().unwrap_or(0);
        for record in records {
            total = total.saturating_add(record.stored_len());
            self.sums.push_back(total);
        }
    }

    /// Bytes of the records at `from..to`, clamped to the offsets held.
    pub fn window(&self, from: u64, to: u64) -> u64 {
        let at = |o: u64| {
            let i = usize::try_from(o.saturating_sub(self.base)).unwrap_or(usize::MAX);
            self.sums.get(i).or(self.sums.back()).copied().unwrap_or(0)
        };
        at(to).saturating_sub(at(from))
    }

    /// Forgets the records below `offset` (the lake holds them; the window never reaches back).
    pub fn forget_below(&mut self, offset: u64) {
        while self.base < offset && self.sums.len() > 1 {
            self.sums.pop_front();
            self.base += 1;
        }
    }

    /// Offsets held.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.sums.len() - 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_stream_is_a_function_of_seed_and_offset() {
        let a = Stream::new(7, 1_000, 20, 32);
        let b = Stream::new(7, 1_000, 20, 32);
        let c = Stream::new(8, 1_000, 20, 32);
        let records: Vec<Record> = (0..500).map(|o| a.record(o)).collect();
        assert_eq!(records, (0..500).map(|o| b.record(o)).collect::<Vec<_>>());
        assert_ne!(records, (0..500).map(|o| c.record(o)).collect::<Vec<_>>());
        let deletes = (0..500).filter(|&o| a.is_delete(o)).count();
        // 20 % requested; a seeded stream of 500 lands near it.
        assert!((60..140).contains(&deletes), "{deletes} deletes");
        assert!(!a.is_delete(0));
    }

    #[test]
    fn values_name_their_offset_and_deletes_target_written_keys() {
        // Half the records delete: many deletes draw an earlier delete's offset and must walk
        // back to a put.
        let s = Stream::new(1, 1_000_000, 50, 40);
        let mut deletes = 0;
        for offset in 1..300u64 {
            match s.record(offset) {
                Record::Put { value, .. } => {
                    assert_eq!(value.len(), 40);
                    assert_eq!(Stream::offset_of(&value), Some(offset));
                }
                Record::Delete { key, .. } => {
                    deletes += 1;
                    let target = s.key_index(offset);
                    assert_eq!(key, Stream::key(target));
                    // With a million keys, only an earlier put makes this key exist.
                    assert!(
                        (0..offset).any(|o| !s.is_delete(o) && s.key_index(o) == target),
                        "offset {offset} deletes key {target}, never written before"
                    );
                }
            }
        }
        assert!(deletes > 100, "{deletes}");
    }

    #[test]
    fn window_bytes_are_the_records_stored_lengths_and_forget_what_the_lake_holds() {
        let s = Stream::new(3, 100, 10, 16);
        let mut bytes = WindowBytes::default();
        for from in (0..50).step_by(10) {
            bytes.push(s.batch(from, from + 10).records());
        }
        let direct = |from: u64, to: u64| (from..to).map(|o| s.record(o).stored_len()).sum::<u64>();
        assert_eq!(bytes.window(10, 30), direct(10, 30));
        assert_eq!(bytes.window(30, 10), 0);
        assert_eq!(
            bytes.window(0, 50),
            bytes.window(0, 500),
            "clamped to the end held"
        );
        bytes.forget_below(20);
        assert_eq!(bytes.len(), 30);
        assert_eq!(bytes.window(25, 50), direct(25, 50));
        bytes.push(s.batch(50, 60).records());
        assert_eq!(bytes.window(20, 60), direct(20, 60));
        bytes.forget_below(1_000);
        assert_eq!(bytes.len(), 0, "never past the end");
        assert_eq!(bytes.window(60, 60), 0);
    }

    #[test]
    fn key_bytes_name_their_index() {
        assert_eq!(Stream::key_index_of(&Stream::key(42)), Some(42));
        assert_eq!(
            Stream::key_index_of(&Stream::key(999_999_999_999)),
            Some(999_999_999_999)
        );
        for other in [
            &b"key-42"[..],
            b"kex-000000000042",
            b"key-00000000004x",
            b"",
        ] {
            assert_eq!(Stream::key_index_of(other), None, "{other:?}");
        }
    }
}
