//! The model a run's answers are checked against: every offset that wrote each key.
//!
//! The reader looks keys up while the writer applies, so an answer is right when it is the key's
//! state at *some* WAL end the lookup could have observed: no earlier than the end acknowledged
//! before the lookup began, no later than the end being applied when it returned.

use std::collections::HashMap;

use super::stream::Stream;

/// Offsets that wrote each key, in offset order.
#[derive(Debug, Default)]
pub struct History {
    offsets: HashMap<u64, Vec<u64>>,
}

/// What a checked answer was.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// A state the key had at a WAL end the lookup could observe.
    Consistent,
    /// Not a state the key had in that range of ends (lost, resurrected or corrupt data).
    Mismatch,
}

impl History {
    /// Records that the records at `from..to` of `stream` are being applied.
    pub fn extend(&mut self, stream: &Stream, from: u64, to: u64) {
        for offset in from..to {
            self.offsets
                .entry(stream.key_index(offset))
                .or_default()
                .push(offset);
        }
    }

    /// Keys written so far (their indexes).
    pub fn keys(&self) -> impl Iterator<Item = u64> + '_ {
        self.offsets.keys().copied()
    }

    /// Checks `answer` for key `key` against every state the key had at a WAL end in
    /// `acked_before..=applying_after`: the state left by the last record below `acked_before`,
    /// and the state after each record in `acked_before..applying_after`.
    pub fn check(
        &self,
        stream: &Stream,
        key: u64,
        answer: Option<&[u8]>,
        acked_before: u64,
        applying_after: u64,
    ) -> Verdict {
        let offsets = self.offsets.get(&key).map_or(&[][..], Vec::as_slice);
        let first = offsets.partition_point(|&o| o < acked_before);
        let last = offsets.partition_point(|&o| o < applying_after.max(acked_before));
        // Before any record of the key the state is "absent".
        if first == 0 && answer.is_none() {
            return Verdict::Consistent;
        }
        let candidates = offsets
            .get(first.saturating_sub(1)..last)
            .unwrap_or_default();
        let consistent = match answer {
            // A value names its offset; only that record can have written it.
            Some(value) => Stream::offset_of(value).is_some_and(|o| {
                candidates.binary_search(&o).is_ok()
                    && stream.state_after(o).as_deref() == Some(value)
            }),
            None => candidates.iter().any(|&o| stream.is_delete(o)),
        };
        if consistent {
            Verdict::Consistent
        } else {
            Verdict::Mismatch
        }
    }

    /// The key's state once every record below `end` is applied.
    pub fn state_at(&self, stream: &Stream, key: u64, end: u64) -> Option<Vec<u8>> {
        let offsets = self.offsets.get(&key)?;
        let newest = offsets.get(offsets.partition_point(|&o| o < end).checked_sub(1)?)?;
        stream.state_after(*newest)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stream over a single key, so every record writes it.
    fn one_key() -> Stream {
        Stream::new(11, 1, 40, 16)
    }

    #[test]
    fn an_answer_is_checked_against_the_states_in_its_range() {
        let s = one_key();
        let mut h = History::default();
        h.extend(&s, 0, 40);
        let put = (0..40).filter(|&o| !s.is_delete(o)).collect::<Vec<_>>();
        let del = (1..40).find(|&o| s.is_delete(o)).unwrap();
        let (a, b) = (put[3], put[6]);
        let value_a = s.payload(a);
        // Exactly at a: the state after a (the last record below a + 1).
        assert_eq!(
            h.check(&s, 0, Some(&value_a), a + 1, a + 1),
            Verdict::Consistent
        );
        // A range reaching past newer records still allows the older state.
        assert_eq!(
            h.check(&s, 0, Some(&value_a), a + 1, b + 1),
            Verdict::Consistent
        );
        // Once b was acknowledged, a is an older version: a mismatch.
        assert_eq!(
            h.check(&s, 0, Some(&value_a), b + 1, b + 1),
            Verdict::Mismatch
        );
        // A value that was never written, or damaged, is a mismatch.
        let mut damaged = value_a.clone();
        damaged[10] ^= 1;
        assert_eq!(h.check(&s, 0, Some(&damaged), 0, 40), Verdict::Mismatch);
        // Absent: right before the first record and right after a delete, nowhere else.
        assert_eq!(h.check(&s, 0, None, 0, 0), Verdict::Consistent);
        assert_eq!(h.check(&s, 0, None, del + 1, del + 1), Verdict::Consistent);
        assert_eq!(h.check(&s, 0, None, a + 1, a + 1), Verdict::Mismatch);
        assert_eq!(h.state_at(&s, 0, a + 1), Some(value_a));
        assert_eq!(h.state_at(&s, 0, del + 1), None);
    }

    #[test]
    fn an_unwritten_key_is_absent() {
        let s = Stream::new(1, 1_000, 0, 16);
        let mut h = History::default();
        h.extend(&s, 0, 10);
        let unwritten = (0..1_000).find(|k| h.keys().all(|w| w != *k)).unwrap();
        assert_eq!(h.check(&s, unwritten, None, 10, 10), Verdict::Consistent);
        assert_eq!(
            h.check(&s, unwritten, Some(&s.payload(3)), 10, 10),
            Verdict::Mismatch
        );
        assert_eq!(h.state_at(&s, unwritten, 10), None);
    }
}
