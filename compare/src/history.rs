//! The model a run's answers are checked against, and that the run's lake answers from: the
//! offsets that wrote each key, in memory bounded by the keys written and not by the run's length.
//!
//! The reader looks keys up while the writer applies, so an answer is right when it is the key's
//! state at *some* WAL end the lookup could have observed: no earlier than the end acknowledged
//! before the lookup began, no later than the end being applied when it returned. A check needs
//! the newest offset of the key below the acknowledged end and every offset after it; a lake
//! snapshot needs the newest offset below its end. So offsets below a *floor* (no pending check
//! and no live lake snapshot reaches below it) are *settled*: only each key's newest one is kept.
//! Offsets from the floor to the end (the window the lake has not absorbed, and a little more) are
//! kept in full.

use std::collections::{HashMap, VecDeque};

use crate::{Error, Result};

use super::stream::Stream;

/// Offsets that wrote each key: the newest below the floor, and every one above it.
#[derive(Debug, Default)]
pub struct History {
    /// Key → its newest offset below `floor`.
    settled: HashMap<u64, u64>,
    /// Key → its offsets in `floor..end`, ascending.
    recent: HashMap<u64, Vec<u64>>,
    /// The key of each offset in `floor..end`.
    window: VecDeque<u64>,
    /// Offsets below it are settled.
    floor: u64,
    /// Offsets below it are recorded.
    end: u64,
}

/// What a checked answer was.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// A state the key had at a WAL end the lookup could observe.
    Consistent,
    /// Not a state the key had in that range of ends (lost, resurrected or corrupt data).
    Mismatch,
}

fn settled_past(what: &str, offset: u64, floor: u64) -> Error {
    Error::Harness(format!(
        "the model settled offsets below {floor}, past the {what} {offset} it still needs"
    ))
}

impl History {
    /// Records that the records at `from..to` of `stream` are being applied; `from` must be
    /// where the previous call ended.
    pub fn extend(&mut self, stream: &Stream, from: u64, to: u64) -> Result<()> {
        if from != self.end {
            return Err(Error::Harness(format!(
                "the model holds offsets up to {}, not {from}",
                self.end
            )));
        }
        for offset in from..to {
            let key = stream.key_index(offset);
            self.recent.entry(key).or_default().push(offset);
            self.window.push_back(key);
        }
        self.end = self.end.max(to);
        Ok(())
    }

    /// Keeps, of the offsets below `floor` (at most the end), only each key's newest.
    pub fn settle_below(&mut self, floor: u64) {
        let floor = floor.min(self.end);
        while self.floor < floor {
            let Some(key) = self.window.pop_front() else {
                break;
            };
            let offset = self.floor;
            self.settled.insert(key, offset);
            if let Some(offsets) = self.recent.get_mut(&key) {
                // The oldest recent offset of the key is this one: offsets settle in order.
                if offsets.first() == Some(&offset) {
                    offsets.remove(0);
                }
                if offsets.is_empty() {
                    self.recent.remove(&key);
                }
            }
            self.floor += 1;
        }
    }

    /// Offsets below it keep only each key's newest.
    pub fn floor(&self) -> u64 {
        self.floor
    }

    /// Offsets below it are recorded.
    pub fn end(&self) -> u64 {
        self.end
    }

    /// Keys written so far (their indexes).
    pub fn keys(&self) -> impl Iterator<Item = u64> + '_ {
        let settled = &self.settled;
        settled.keys().copied().chain(
            self.recent
                .keys()
                .copied()
                .filter(move |k| !settled.contains_key(k)),
        )
    }

    /// The key's offsets at or above the floor.
    fn recent(&self, key: u64) -> &[u64] {
        self.recent.get(&key).map_or(&[][..], Vec::as_slice)
    }

    /// The key's newest offset below `end` (at or above the floor).
    fn newest_below(&self, key: u64, end: u64) -> Option<u64> {
        let recent = self.recent(key);
        match recent.partition_point(|&o| o < end) {
            0 => self.settled.get(&key).copied(),
            n => recent.get(n - 1).copied(),
        }
    }

    /// Checks `answer` for key `key` against every state the key had at a WAL end in
    /// `acked_before..=applying_after`: the state left by the last record below `acked_before`,
    /// and the state after each record in `acked_before..applying_after`. An error when the
    /// model has already settled offsets `acked_before` needs.
    pub fn check(
        &self,
        stream: &Stream,
        key: u64,
        answer: Option<&[u8]>,
        acked_before: u64,
        applying_after: u64,
    ) -> Result<Verdict> {
        if acked_before < self.floor {
            return Err(settled_past("acknowledged end", acked_before, self.floor));
        }
        let recent = self.recent(key);
        let first = recent.partition_point(|&o| o < acked_before);
        let last = recent.partition_point(|&o| o < applying_after.max(acked_before));
        let before = self.newest_below(key, acked_before);
        // Before any record of the key the state is "absent".
        if before.is_none() && answer.is_none() {
            return Ok(Verdict::Consistent);
        }
        let mut candidates = before
            .into_iter()
            .chain(recent.get(first..last).unwrap_or_default().iter().copied());
        let consistent = match answer {
            // A value names its offset; only that record can have written it.
            Some(value) => Stream::offset_of(value).is_some_and(|o| {
                candidates.any(|c| c == o) && stream.state_after(o).as_deref() == Some(value)
            }),
            None => candidates.any(|o| stream.is_delete(o)),
        };
        Ok(if consistent {
            Verdict::Consistent
        } else {
            Verdict::Mismatch
        })
    }

    /// The key's state once every record below `end` is applied; an error when `end` is below
    /// the floor.
    pub fn state_at(&self, stream: &Stream, key: u64, end: u64) -> Result<Option<Vec<u8>>> {
        if end < self.floor {
            return Err(settled_past("end", end, self.floor));
        }
        Ok(self
            .newest_below(key, end)
            .and_then(|o| stream.state_after(o)))
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
        h.extend(&s, 0, 40).unwrap();
        let put = (0..40).filter(|&o| !s.is_delete(o)).collect::<Vec<_>>();
        let del = (1..40).find(|&o| s.is_delete(o)).unwrap();
        let (a, b) = (put[3], put[6]);
        let value_a = s.payload(a);
        // Exactly at a: the state after a (the last record below a + 1).
        assert_eq!(
            h.check(&s, 0, Some(&value_a), a + 1, a + 1).unwrap(),
            Verdict::Consistent
        );
        // A range reaching past newer records still allows the older state.
        assert_eq!(
            h.check(&s, 0, Some(&value_a), a + 1, b + 1).unwrap(),
            Verdict::Consistent
        );
        // Once b was acknowledged, a is an older version: a mismatch.
        assert_eq!(
            h.check(&s, 0, Some(&value_a), b + 1, b + 1).unwrap(),
            Verdict::Mismatch
        );
        // A value that was never written, or damaged, is a mismatch.
        let mut damaged = value_a.clone();
        damaged[10] ^= 1;
        assert_eq!(
            h.check(&s, 0, Some(&damaged), 0, 40).unwrap(),
            Verdict::Mismatch
        );
        // Absent: right before the first record and right after a delete, nowhere else.
        assert_eq!(h.check(&s, 0, None, 0, 0).unwrap(), Verdict::Consistent);
        assert_eq!(
            h.check(&s, 0, None, del + 1, del + 1).unwrap(),
            Verdict::Consistent
        );
        assert_eq!(
            h.check(&s, 0, None, a + 1, a + 1).unwrap(),
            Verdict::Mismatch
        );
        assert_eq!(h.state_at(&s, 0, a + 1).unwrap(), Some(value_a));
        assert_eq!(h.state_at(&s, 0, del + 1).unwrap(), None);
    }

    #[test]
    fn an_unwritten_key_is_absent() {
        let s = Stream::new(1, 1_000, 0, 16);
        let mut h = History::default();
        h.extend(&s, 0, 10).unwrap();
        let unwritten = (0..1_000).find(|k| h.keys().all(|w| w != *k)).unwrap();
        assert_eq!(
            h.check(&s, unwritten, None, 10, 10).unwrap(),
            Verdict::Consistent
        );
        assert_eq!(
            h.check(&s, unwritten, Some(&s.payload(3)), 10, 10).unwrap(),
            Verdict::Mismatch
        );
        assert_eq!(h.state_at(&s, unwritten, 10).unwrap(), None);
    }

    #[test]
    fn settled_offsets_answer_as_the_full_history_did_and_hold_one_offset_per_key() {
        let s = Stream::new(5, 40, 25, 16);
        let (mut full, mut settled) = (History::default(), History::default());
        let (end, lag) = (2_000u64, 300u64);
        for from in (0..end).step_by(20) {
            full.extend(&s, from, from + 20).unwrap();
            settled.extend(&s, from, from + 20).unwrap();
            settled.settle_below((from + 20).saturating_sub(lag));
        }
        assert_eq!(settled.floor(), end - lag);
        // Memory: the newest settled offset per key, and the window in full.
        assert!(settled.settled.len() <= 40);
        let recent: usize = settled.recent.values().map(Vec::len).sum();
        assert_eq!((recent, settled.window.len()), (lag as usize, lag as usize));
        let mut keys: Vec<u64> = settled.keys().collect();
        keys.sort_unstable();
        let mut all: Vec<u64> = full.keys().collect();
        all.sort_unstable();
        assert_eq!(keys, all);
        for key in 0..40 {
            let answers: Vec<Option<Vec<u8>>> =
                (0..end).map(|o| s.state_after(o)).chain([None]).collect();
            for (acked, applying) in [(end - lag, end - lag), (end - 200, end - 150), (end, end)] {
                for answer in &answers {
                    assert_eq!(
                        settled
                            .check(&s, key, answer.as_deref(), acked, applying)
                            .unwrap(),
                        full.check(&s, key, answer.as_deref(), acked, applying)
                            .unwrap(),
                        "key {key}, {acked}..{applying}"
                    );
                }
                assert_eq!(
                    settled.state_at(&s, key, acked).unwrap(),
                    full.state_at(&s, key, acked).unwrap()
                );
            }
        }
        // Below the floor the model no longer knows: an error, never a wrong verdict.
        assert!(settled.check(&s, 0, None, end - lag - 1, end).is_err());
        assert!(settled.state_at(&s, 0, end - lag - 1).is_err());
        assert!(settled.extend(&s, 0, 5).is_err(), "offsets must follow on");
    }
}
