//! Deterministic record streams: the record at each offset is a pure function of the stream's
//! parameters and the offset, so every backend, variant and run gets the same records, and a
//! checker can recompute any record instead of keeping it.
//!
//! - [`RecordStream`]: what every stream is, the record at an offset, and batches of them;
//! - [`Cursor`]: hands a stream out batch by batch, from offset 0;
//! - [`PutStream`]: puts only, key and value each a function of the offset (the benchmarks');
//! - [`SeededStream`]: puts and deletes over a key space, drawn from a seed, each value naming
//!   the offset that wrote it (`tidemark compare`'s).

use tidemark_engine_api::{Record, WriteBatch};

use crate::history::Answer;
use crate::rng::SplitMix64;

/// A deterministic stream of WAL records: one record per offset, the same every time.
pub trait RecordStream {
    /// The record at `offset`.
    fn record(&self, offset: u64) -> Record;

    /// The records at `from..to`, as one batch.
    fn batch(&self, from: u64, to: u64) -> WriteBatch {
        (from..to).map(|o| self.record(o)).collect()
    }
}

/// Hands a [`RecordStream`] out in consecutive batches, from offset 0.
#[derive(Debug, Clone)]
pub struct Cursor<S> {
    stream: S,
    next: u64,
}

impl<S: RecordStream> Cursor<S> {
    /// A cursor at offset 0 of `stream`.
    pub fn new(stream: S) -> Self {
        Cursor { stream, next: 0 }
    }

    /// The stream handed out.
    pub fn stream(&self) -> &S {
        &self.stream
    }

    /// The offset of the next record.
    pub fn next_offset(&self) -> u64 {
        self.next
    }

    /// The next `len` records as one batch.
    pub fn next_batch(&mut self, len: u64) -> WriteBatch {
        let first = self.next;
        self.next += len;
        self.stream.batch(first, self.next)
    }

    /// The next `records` records in batches of at most `batch` (at least 1).
    pub fn next_batches(&mut self, records: u64, batch: u64) -> Vec<WriteBatch> {
        let end = self.next + records;
        let mut batches = Vec::new();
        while self.next < end {
            let len = (end - self.next).min(batch.max(1));
            batches.push(self.next_batch(len));
        }
        batches
    }
}

/// Puts only: the record at offset `o` puts `value(o)` under `key(o)`.
#[derive(Debug, Clone, Copy)]
pub struct PutStream {
    key: fn(u64) -> Vec<u8>,
    value: fn(u64) -> Vec<u8>,
}

impl PutStream {
    /// The stream that puts `value(o)` under `key(o)` at every offset `o`.
    pub fn new(key: fn(u64) -> Vec<u8>, value: fn(u64) -> Vec<u8>) -> Self {
        PutStream { key, value }
    }
}

impl RecordStream for PutStream {
    fn record(&self, offset: u64) -> Record {
        Record::put((self.key)(offset), (self.value)(offset), offset)
    }
}

/// Offsets spread over the generator's seeds (the golden-ratio increment of SplitMix64).
const SPREAD: u64 = 0x9e37_79b9_7f4a_7c15;
/// Salt of the payload bytes, so they are not the draws that chose the key.
const PAYLOAD_SALT: u64 = 0x5eed_da7a;

/// The deterministic stream: the record at offset `o` puts a value under a key drawn from the key
/// space, or (with `delete_percent` chance, never at offset 0) deletes the key some earlier
/// offset put.
#[derive(Debug, Clone)]
pub struct SeededStream {
    seed: u64,
    keys: u64,
    delete_percent: u64,
    value_size: usize,
}

impl SeededStream {
    /// The stream of `seed` over `keys` keys.
    pub fn new(seed: u64, keys: u64, delete_percent: u64, value_size: usize) -> Self {
        SeededStream {
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

    /// The key index the record at `offset` writes, and whether it puts (`false`: a delete).
    pub fn write(&self, offset: u64) -> (u64, bool) {
        let (key, delete) = self.shape(offset);
        (key, !delete)
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

    /// What a lookup's `answer` claims was written, for [`WalHistory::allows`]: absent, or the
    /// put at the offset a value names (its bytes unchecked: see [`is_exact`](Self::is_exact)).
    ///
    /// [`WalHistory::allows`]: crate::history::WalHistory::allows
    pub fn claimed(answer: Option<&[u8]>) -> Answer {
        match answer {
            None => Answer::Absent,
            Some(value) => Self::offset_of(value).map_or(Answer::Foreign, Answer::Put),
        }
    }

    /// Whether `answer` is exactly what it claims: absent, or the bytes of the put at the offset
    /// it names. Ask only once that offset is known to be a put of the key (a history allowed
    /// it): a delete's key is found by walking back from its offset.
    pub fn is_exact(&self, answer: Option<&[u8]>) -> bool {
        match answer {
            None => true,
            Some(value) => Self::offset_of(value)
                .is_some_and(|o| self.state_after(o).as_deref() == Some(value)),
        }
    }

    /// What the key's state is right after the record at `offset`: its value, or `None` for a
    /// delete.
    pub fn state_after(&self, offset: u64) -> Option<Vec<u8>> {
        (!self.is_delete(offset)).then(|| self.payload(offset))
    }
}

impl RecordStream for SeededStream {
    fn record(&self, offset: u64) -> Record {
        let (key, delete) = self.shape(offset);
        if delete {
            Record::delete(Self::key(key), offset)
        } else {
            Record::put(Self::key(key), self.payload(offset), offset)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_stream_is_a_function_of_seed_and_offset() {
        let a = SeededStream::new(7, 1_000, 20, 32);
        let b = SeededStream::new(7, 1_000, 20, 32);
        let c = SeededStream::new(8, 1_000, 20, 32);
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
        let s = SeededStream::new(1, 1_000_000, 50, 40);
        let mut deletes = 0;
        for offset in 1..300u64 {
            match s.record(offset) {
                Record::Put { value, .. } => {
                    assert_eq!(value.len(), 40);
                    assert_eq!(SeededStream::offset_of(&value), Some(offset));
                }
                Record::Delete { key, .. } => {
                    deletes += 1;
                    let target = s.key_index(offset);
                    assert_eq!(key, SeededStream::key(target));
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
    fn a_cursor_hands_out_consecutive_batches_of_its_stream() {
        let puts = PutStream::new(|o| vec![o as u8], |o| vec![o as u8; 2]);
        let mut cursor = Cursor::new(puts);
        let first = cursor.next_batch(3);
        assert_eq!(first.records(), puts.batch(0, 3).records());
        let rest = cursor.next_batches(2_500, 1_000);
        let lens: Vec<usize> = rest.iter().map(|b| b.records().len()).collect();
        assert_eq!(lens, [1_000, 1_000, 500]);
        assert_eq!(rest[2].records(), puts.batch(2_003, 2_503).records());
        assert_eq!(cursor.next_offset(), 2_503);
        assert_eq!(
            puts.record(7),
            Record::put(vec![7u8], vec![7u8, 7], 7),
            "puts only"
        );
    }

    #[test]
    fn key_bytes_name_their_index() {
        assert_eq!(SeededStream::key_index_of(&SeededStream::key(42)), Some(42));
        assert_eq!(
            SeededStream::key_index_of(&SeededStream::key(999_999_999_999)),
            Some(999_999_999_999)
        );
        for other in [
            &b"key-42"[..],
            b"kex-000000000042",
            b"key-00000000004x",
            b"",
        ] {
            assert_eq!(SeededStream::key_index_of(other), None, "{other:?}");
        }
    }
}
