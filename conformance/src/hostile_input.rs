//! Hostile input: arbitrary bytes read as a sequence of batches and watermark requests, applied
//! to an engine and to the reference [`MemoryEngine`] side by side. The same reader drives the
//! `cargo fuzz` target (`fuzz/fuzz_targets/apply.rs`, nightly) and the stable property test
//! [`crate::cases::hostile_batches_match_the_reference`], so both feed the engine the same inputs.
//!
//! Keys and values of any length around the limits (empty, the largest allowed, one byte over),
//! offsets that jump, repeat, go backwards or reach `u64::MAX`: the engine must answer exactly what
//! the reference answers (the same outcome, or `InvalidInput` with nothing written), and never
//! panic.

use tidemark_engine_api::{
    Engine, Error, LocalLookup, MAX_KEY_LEN, MAX_VALUE_LEN, MemoryEngine, WriteBatch,
};

/// One step read from the bytes.
#[derive(Debug, Clone)]
pub enum Step {
    /// Apply this batch.
    Apply(WriteBatch),
    /// `advance_watermark(w)`.
    Advance(u64),
    /// `reclaim()`.
    Reclaim,
}

/// A cursor over the fuzzer's bytes; reads past the end as zeros, so every input is a program.
struct Bytes<'a> {
    data: &'a [u8],
    at: usize,
}

impl Bytes<'_> {
    fn u8(&mut self) -> u8 {
        let b = self.data.get(self.at).copied().unwrap_or(0);
        self.at += 1;
        b
    }

    fn u64(&mut self) -> u64 {
        (0..8).fold(0, |acc, _| (acc << 8) | u64::from(self.u8()))
    }

    fn done(&self) -> bool {
        self.at >= self.data.len()
    }

    /// A length: mostly small, sometimes exactly at or one past `max` (two marker bytes, so the
    /// expensive ones stay rare under random input).
    fn len(&mut self, max: usize) -> usize {
        match self.u8() {
            0xfe if self.u8() == 0xfe => max,
            0xff if self.u8() == 0xff => max + 1,
            n => usize::from(n % 32),
        }
    }
}

/// Reads `data` as at most `max_steps` steps: a step byte (`0..=5` apply, 6 advance, 7 reclaim,
/// modulo 8), then for an apply a record count and, per record, a kind byte (bit 0: delete; bit 1:
/// offset = previous + a delta byte, else a raw big-endian u64), a key length, a key byte, and for a
/// put a value length and a value byte.
pub fn steps(data: &[u8], max_steps: usize) -> Vec<Step> {
    let mut bytes = Bytes { data, at: 0 };
    let mut steps = Vec::new();
    let mut offset = 0u64;
    while !bytes.done() && steps.len() < max_steps {
        match bytes.u8() % 8 {
            6 => steps.push(Step::Advance(bytes.u64())),
            7 => steps.push(Step::Reclaim),
            _ => {
                let mut batch = WriteBatch::new();
                for _ in 0..bytes.u8() % 8 {
                    let kind = bytes.u8();
                    offset = if kind & 2 != 0 {
                        offset.wrapping_add(u64::from(bytes.u8()))
                    } else {
                        bytes.u64()
                    };
                    let key_len = bytes.len(MAX_KEY_LEN);
                    let key = vec![bytes.u8(); key_len];
                    if kind & 1 != 0 {
                        batch.delete(key, offset);
                    } else {
                        let len = bytes.len(MAX_VALUE_LEN);
                        let value = vec![bytes.u8(); len];
                        batch.put(key, value, offset);
                    }
                }
                steps.push(Step::Apply(batch));
            }
        }
    }
    steps
}

/// Runs `steps` on `engine` and on a fresh [`MemoryEngine`] with the same options, comparing every
/// outcome and, after each step, the applied end, `W` and every key written so far. Returns the
/// first difference.
pub fn run_against_reference<E: Engine>(engine: &E, steps: &[Step]) -> Result<(), String> {
    let reference = MemoryEngine::new(tidemark_engine_api::EngineOptions::default());
    let mut keys: Vec<Vec<u8>> = Vec::new();
    for (i, step) in steps.iter().enumerate() {
        let (got, want) = match step {
            Step::Apply(batch) => {
                for r in batch.records() {
                    let key = r.key();
                    if !key.is_empty() && key.len() <= MAX_KEY_LEN && !keys.iter().any(|k| k == key)
                    {
                        keys.push(key.to_vec());
                    }
                }
                (
                    outcome(engine.apply(batch)),
                    outcome(reference.apply(batch)),
                )
            }
            Step::Advance(w) => (
                outcome(engine.advance_watermark(*w)),
                outcome(reference.advance_watermark(*w)),
            ),
            Step::Reclaim => {
                // Counts differ where covered entries vanish early (RocksDB's background
                // compactions); what is left is compared below.
                let got = engine.reclaim().map(drop);
                let want = reference.reclaim().map(drop);
                (outcome(got), outcome(want))
            }
        };
        if got != want {
            return Err(format!(
                "step {i} ({}): engine {got}, reference {want}",
                describe(step)
            ));
        }
        let e_state = (engine.applied_end(), engine.watermark());
        let r_state = (reference.applied_end(), reference.watermark());
        if e_state != r_state {
            return Err(format!(
                "after step {i}: engine (applied end, W) {e_state:?}, reference {r_state:?}"
            ));
        }
        for key in &keys {
            let got = engine
                .lookup(key)
                .map_err(|e| format!("lookup after step {i}: {e}"))?;
            let want = reference
                .lookup(key)
                .map_err(|e| format!("reference lookup after step {i}: {e}"))?;
            // A covered entry may already be gone from the engine (background reclaim).
            let covered = want.offset().is_some_and(|o| o < reference.watermark());
            if got != want && !(covered && got == LocalLookup::Miss) {
                return Err(format!(
                    "key of {} bytes after step {i}: engine {got:?}, reference {want:?}",
                    key.len()
                ));
            }
        }
    }
    Ok(())
}

/// Hostile input to the value codec: `bytes` stored under `key` (the fuzz target `codec` and the
/// property test below feed it). Decoding never panics; an entry that decodes re-encodes to
/// exactly `bytes` in its own format version (so nothing else decodes: no damaged entry is
/// accepted), and the tag the unchecked and checked readers see agrees with it.
pub fn check_codec(key: &[u8], bytes: &[u8]) -> Result<(), String> {
    use tidemark_engine_api::codec::{self, Decoded};
    let Ok(decoded) = codec::decode(key, bytes) else {
        if codec::checked_tag(key, bytes).is_some() {
            return Err("checked_tag accepts what decode refuses".to_string());
        }
        return Ok(());
    };
    let checked = bytes
        .first()
        .is_some_and(|&k| k == codec::KIND_VALUE_CHECKED || k == codec::KIND_TOMBSTONE_CHECKED);
    let again = match (decoded, checked) {
        (Decoded::Value { offset, payload }, true) => codec::encode_value(key, offset, payload),
        (Decoded::Tombstone { offset }, true) => codec::encode_tombstone(key, offset).to_vec(),
        (Decoded::Value { offset, payload }, false) => codec::encode_value_v1(offset, payload),
        (Decoded::Tombstone { offset }, false) => codec::encode_tombstone_v1(offset).to_vec(),
    };
    if again != bytes {
        return Err(format!(
            "{decoded:?} decoded from {} bytes that are not its encoding ({} bytes)",
            bytes.len(),
            again.len()
        ));
    }
    let tags = (codec::peek_tag(bytes), codec::checked_tag(key, bytes));
    if tags != (Some(decoded.offset()), Some(decoded.offset())) {
        return Err(format!("tags {tags:?} disagree with {decoded:?}"));
    }
    Ok(())
}

/// An outcome reduced to what must agree: the value, or the kind of error.
fn outcome<T: std::fmt::Debug>(result: tidemark_engine_api::Result<T>) -> String {
    match result {
        Ok(v) => format!("Ok({v:?})"),
        Err(Error::InvalidInput(_)) => "InvalidInput".to_string(),
        Err(e) => format!("Err({e})"),
    }
}

fn describe(step: &Step) -> String {
    match step {
        Step::Apply(batch) => format!(
            "apply of {} records, offsets {:?}",
            batch.records().len(),
            batch
                .records()
                .iter()
                .map(|r| r.offset())
                .collect::<Vec<_>>()
        ),
        Step::Advance(w) => format!("advance_watermark({w})"),
        Step::Reclaim => "reclaim".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_input_reads_as_steps_and_markers_reach_the_limits() {
        assert!(steps(&[], 10).is_empty());
        // apply, 1 record: put, raw offset 7, key length at the maximum, key byte, value of 3.
        let mut data = vec![0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 7, 0xfe, 0xfe, b'k', 3, b'v'];
        data.extend([6, 0, 0, 0, 0, 0, 0, 0, 5]); // advance to 5
        let read = steps(&data, 10);
        assert_eq!(read.len(), 2, "{read:?}");
        let Step::Apply(batch) = &read[0] else {
            panic!("{read:?}")
        };
        let r = &batch.records()[0];
        assert_eq!((r.key().len(), r.offset()), (MAX_KEY_LEN, 7));
        assert!(matches!(read[1], Step::Advance(5)));
    }

    proptest::proptest! {
        #![proptest_config(proptest::test_runner::Config {
            cases: 4096,
            failure_persistence: None,
            ..Default::default()
        })]

        /// The codec fuzz target's check on stable: arbitrary bytes, and valid encodings with
        /// one byte changed.
        #[test]
        fn the_codec_accepts_exactly_its_encodings(
            key in proptest::collection::vec(proptest::prelude::any::<u8>(), 1..8),
            bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..48),
            offset in proptest::prelude::any::<u64>(),
            flip in proptest::prelude::any::<(usize, u8)>(),
        ) {
            check_codec(&key, &bytes).map_err(proptest::test_runner::TestCaseError::fail)?;
            let mut valid = tidemark_engine_api::codec::encode_value(&key, offset, &bytes);
            check_codec(&key, &valid).map_err(proptest::test_runner::TestCaseError::fail)?;
            let at = flip.0 % valid.len();
            valid[at] ^= flip.1.max(1);
            check_codec(&key, &valid).map_err(proptest::test_runner::TestCaseError::fail)?;
        }
    }

    #[test]
    fn the_reference_agrees_with_itself() {
        let data: Vec<u8> = (0..=255u8).cycle().take(2048).collect();
        let engine = MemoryEngine::new(tidemark_engine_api::EngineOptions::default());
        run_against_reference(&engine, &steps(&data, 64)).unwrap();
    }
}
