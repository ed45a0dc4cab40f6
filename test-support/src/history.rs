//! Every write of a WAL, per key, and what a lookup that ran while the WAL end moved may answer.
//!
//! A reader that looks keys up while a writer applies sees some WAL end it cannot name: no
//! earlier than the end acknowledged before the lookup began (`lo`), no later than the end being
//! applied when it returned (`hi`). An answer is right when it is the key's state at *some* end in
//! `lo..=hi`: the state the newest write below `lo` left, or the state after any of the key's
//! writes in `lo..hi` ([`WalHistory::states_between`], [`WalHistory::allows`]).
//!
//! A check needs the key's newest write below `lo` and every write after it, so writes below a
//! *floor* that no pending check reaches below can be *settled*
//! ([`WalHistory::settle_below`]): only each key's newest one is kept, and memory is bounded by
//! the keys written plus the writes above the floor, not by the WAL's length.

use std::collections::{HashMap, VecDeque};

/// A key's state at some WAL end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyState {
    /// `1 +` the offset of the key's newest write below that end; 0 when it was never written.
    /// A reader that saw one version never sees a smaller one after it.
    pub version: u64,
    /// The offset of that write when it is a put (`None`: deleted, or never written).
    pub put: Option<u64>,
}

impl KeyState {
    /// The state of a key no write has touched.
    pub const NEVER_WRITTEN: KeyState = KeyState {
        version: 0,
        put: None,
    };

    fn after(write: Write) -> Self {
        KeyState {
            version: write.offset + 1,
            put: write.put.then_some(write.offset),
        }
    }
}

/// What a lookup answered, as the history can judge it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    /// No value.
    Absent,
    /// A value that names the put at this offset as its writer. Whether its bytes are that
    /// put's is the caller's to check: the history keeps offsets, not values.
    Put(u64),
    /// A value that names no put at all (damaged or foreign bytes).
    Foreign,
}

/// Why the history cannot do what it was asked.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HistoryError {
    /// A write below the history's end: writes come in offset order.
    #[error("the history holds offsets up to {end}; a write at {offset} comes too late")]
    OutOfOrder {
        /// Where the history ends.
        end: u64,
        /// The write's offset.
        offset: u64,
    },
    /// Writes appended as a contiguous run must start at the history's end.
    #[error("the history holds offsets up to {end}, not {from}")]
    NotContiguous {
        /// Where the history ends.
        end: u64,
        /// Where the writes given start.
        from: u64,
    },
    /// The question needs writes the history has already settled.
    #[error("the history settled offsets below {floor}, past the end {asked} it still needs")]
    Settled {
        /// The WAL end asked about.
        asked: u64,
        /// Writes below it are settled.
        floor: u64,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Write {
    offset: u64,
    put: bool,
}

/// The writes of a WAL per key (key ids are `u64`): each key's newest below the floor, and every
/// one from the floor to the end.
#[derive(Debug, Default, Clone)]
pub struct WalHistory {
    /// Key → its newest write below `floor`.
    settled: HashMap<u64, Write>,
    /// Key → its writes in `floor..end`, ascending.
    recent: HashMap<u64, Vec<Write>>,
    /// `(offset, key)` of each write in `floor..end`, in offset order.
    window: VecDeque<(u64, u64)>,
    /// Writes below it are settled.
    floor: u64,
    /// Writes below it are recorded.
    end: u64,
}

impl WalHistory {
    /// Records that the write at `offset` (at or past the end: writes come in offset order)
    /// put or deleted `key`; the end becomes `offset + 1`. Offsets skipped wrote nothing.
    pub fn record(&mut self, key: u64, offset: u64, put: bool) -> Result<(), HistoryError> {
        if offset < self.end {
            return Err(HistoryError::OutOfOrder {
                end: self.end,
                offset,
            });
        }
        self.recent
            .entry(key)
            .or_default()
            .push(Write { offset, put });
        self.window.push_back((offset, key));
        self.end = offset + 1;
        Ok(())
    }

    /// Records the writes at offsets `from, from + 1, …`, each `(key, is a put)`; `from` must be
    /// the history's end (a WAL every offset of which writes one key). Returns the new end.
    pub fn append(
        &mut self,
        from: u64,
        writes: impl IntoIterator<Item = (u64, bool)>,
    ) -> Result<u64, HistoryError> {
        if from != self.end {
            return Err(HistoryError::NotContiguous {
                end: self.end,
                from,
            });
        }
        for ((key, put), offset) in writes.into_iter().zip(from..) {
            self.record(key, offset, put)?;
        }
        Ok(self.end)
    }

    /// Keeps, of the writes below `floor` (at most the end), only each key's newest.
    pub fn settle_below(&mut self, floor: u64) {
        let floor = floor.min(self.end);
        while let Some(&(offset, key)) = self.window.front() {
            if offset >= floor {
                break;
            }
            self.window.pop_front();
            if let Some(writes) = self.recent.get_mut(&key) {
                // The key's oldest recent write is this one: writes settle in offset order.
                if writes.first().is_some_and(|w| w.offset == offset) {
                    let write = writes.remove(0);
                    self.settled.insert(key, write);
                }
                if writes.is_empty() {
                    self.recent.remove(&key);
                }
            }
        }
        self.floor = self.floor.max(floor);
    }

    /// Writes below it keep only each key's newest.
    pub fn floor(&self) -> u64 {
        self.floor
    }

    /// Writes below it are recorded.
    pub fn end(&self) -> u64 {
        self.end
    }

    /// Keys written so far, in no particular order.
    pub fn keys(&self) -> impl Iterator<Item = u64> + '_ {
        let settled = &self.settled;
        settled.keys().copied().chain(
            self.recent
                .keys()
                .copied()
                .filter(move |k| !settled.contains_key(k)),
        )
    }

    /// The key's writes at or above the floor.
    fn recent(&self, key: u64) -> &[Write] {
        self.recent.get(&key).map_or(&[][..], Vec::as_slice)
    }

    fn check_floor(&self, asked: u64) -> Result<(), HistoryError> {
        if asked < self.floor {
            return Err(HistoryError::Settled {
                asked,
                floor: self.floor,
            });
        }
        Ok(())
    }

    /// The key's state once every write below `end` is applied; an error when `end` is below
    /// the floor.
    pub fn state_at(&self, key: u64, end: u64) -> Result<KeyState, HistoryError> {
        self.check_floor(end)?;
        let recent = self.recent(key);
        let newest = match recent.partition_point(|w| w.offset < end) {
            0 => self.settled.get(&key).copied(),
            n => recent.get(n - 1).copied(),
        };
        Ok(newest.map_or(KeyState::NEVER_WRITTEN, KeyState::after))
    }

    /// Every state a lookup of `key` may answer when it began with `lo` acknowledged and
    /// returned with `hi` being applied: the state at `lo`, then the state after each of the
    /// key's writes in `lo..hi`, oldest first. An error when `lo` is below the floor.
    pub fn states_between(
        &self,
        key: u64,
        lo: u64,
        hi: u64,
    ) -> Result<Vec<KeyState>, HistoryError> {
        let mut states = vec![self.state_at(key, lo)?];
        let recent = self.recent(key);
        let first = recent.partition_point(|w| w.offset < lo);
        let last = recent.partition_point(|w| w.offset < hi.max(lo));
        states.extend(
            recent
                .get(first..last)
                .unwrap_or_default()
                .iter()
                .map(|&w| KeyState::after(w)),
        );
        Ok(states)
    }

    /// Whether `answer` is one of the [`states_between`](Self::states_between) `lo` and `hi`.
    pub fn allows(&self, key: u64, answer: Answer, lo: u64, hi: u64) -> Result<bool, HistoryError> {
        let states = self.states_between(key, lo, hi)?;
        Ok(match answer {
            Answer::Absent => states.iter().any(|s| s.put.is_none()),
            Answer::Put(offset) => states.iter().any(|s| s.put == Some(offset)),
            Answer::Foreign => false,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::stream::SeededStream;

    /// A stream over a single key, so every record writes it.
    fn one_key() -> SeededStream {
        SeededStream::new(11, 1, 40, 16)
    }

    /// The history of the records at `from..to` of `s`, appended to `h`.
    fn extend(
        h: &mut WalHistory,
        s: &SeededStream,
        from: u64,
        to: u64,
    ) -> Result<u64, HistoryError> {
        h.append(from, (from..to).map(|o| s.write(o)))
    }

    /// Whether `h` allows `answer` for `key` between `lo` and `hi`, as `tidemark compare`
    /// checks it: the bytes must be the stream's, the write one the lookup could observe.
    fn check(
        h: &WalHistory,
        s: &SeededStream,
        key: u64,
        answer: Option<&[u8]>,
        lo: u64,
        hi: u64,
    ) -> Result<bool, HistoryError> {
        Ok(h.allows(key, SeededStream::claimed(answer), lo, hi)? && s.is_exact(answer))
    }

    /// The value the model holds for `key` after the records below `end`.
    fn value_at(h: &WalHistory, s: &SeededStream, key: u64, end: u64) -> Option<Vec<u8>> {
        h.state_at(key, end)
            .map(|st| st.put.map(|o| s.payload(o)))
            .unwrap()
    }

    #[test]
    fn an_answer_is_checked_against_the_states_in_its_range() {
        let s = one_key();
        let mut h = WalHistory::default();
        extend(&mut h, &s, 0, 40).unwrap();
        let put = (0..40).filter(|&o| !s.is_delete(o)).collect::<Vec<_>>();
        let del = (1..40).find(|&o| s.is_delete(o)).unwrap();
        let (a, b) = (put[3], put[6]);
        let value_a = s.payload(a);
        // Exactly at a: the state after a (the last record below a + 1).
        assert!(check(&h, &s, 0, Some(&value_a), a + 1, a + 1).unwrap());
        // A range reaching past newer records still allows the older state.
        assert!(check(&h, &s, 0, Some(&value_a), a + 1, b + 1).unwrap());
        // Once b was acknowledged, a is an older version: a mismatch.
        assert!(!check(&h, &s, 0, Some(&value_a), b + 1, b + 1).unwrap());
        // A value that was never written, or damaged, is a mismatch.
        let mut damaged = value_a.clone();
        damaged[10] ^= 1;
        assert!(!check(&h, &s, 0, Some(&damaged), 0, 40).unwrap());
        // Absent: right before the first record and right after a delete, nowhere else.
        assert!(check(&h, &s, 0, None, 0, 0).unwrap());
        assert!(check(&h, &s, 0, None, del + 1, del + 1).unwrap());
        assert!(!check(&h, &s, 0, None, a + 1, a + 1).unwrap());
        assert_eq!(value_at(&h, &s, 0, a + 1), Some(value_a));
        assert_eq!(value_at(&h, &s, 0, del + 1), None);
    }

    #[test]
    fn an_unwritten_key_is_absent() {
        let s = SeededStream::new(1, 1_000, 0, 16);
        let mut h = WalHistory::default();
        extend(&mut h, &s, 0, 10).unwrap();
        let unwritten = (0..1_000).find(|k| h.keys().all(|w| w != *k)).unwrap();
        assert!(check(&h, &s, unwritten, None, 10, 10).unwrap());
        assert!(!check(&h, &s, unwritten, Some(&s.payload(3)), 10, 10).unwrap());
        assert_eq!(value_at(&h, &s, unwritten, 10), None);
    }

    #[test]
    fn settled_offsets_answer_as_the_full_history_did_and_hold_one_offset_per_key() {
        let s = SeededStream::new(5, 40, 25, 16);
        let (mut full, mut settled) = (WalHistory::default(), WalHistory::default());
        let (end, lag) = (2_000u64, 300u64);
        for from in (0..end).step_by(20) {
            extend(&mut full, &s, from, from + 20).unwrap();
            extend(&mut settled, &s, from, from + 20).unwrap();
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
                        check(&settled, &s, key, answer.as_deref(), acked, applying).unwrap(),
                        check(&full, &s, key, answer.as_deref(), acked, applying).unwrap(),
                        "key {key}, {acked}..{applying}"
                    );
                }
                assert_eq!(
                    value_at(&settled, &s, key, acked),
                    value_at(&full, &s, key, acked)
                );
            }
        }
        // Below the floor the model no longer knows: an error, never a wrong verdict.
        assert!(check(&settled, &s, 0, None, end - lag - 1, end).is_err());
        assert!(settled.state_at(0, end - lag - 1).is_err());
        assert!(
            extend(&mut settled, &s, 0, 5).is_err(),
            "offsets must follow on"
        );
    }

    #[test]
    fn writes_may_skip_offsets_and_must_come_in_order() {
        let mut h = WalHistory::default();
        h.record(0, 2, true).unwrap();
        h.record(0, 5, false).unwrap();
        h.record(1, 6, true).unwrap();
        h.record(0, 7, true).unwrap();
        assert_eq!(h.end(), 8);
        assert_eq!(
            h.record(0, 7, true),
            Err(HistoryError::OutOfOrder { end: 8, offset: 7 })
        );
        assert_eq!(h.state_at(0, 2).unwrap(), KeyState::NEVER_WRITTEN);
        let deleted = KeyState {
            version: 6,
            put: None,
        };
        assert_eq!(h.state_at(0, 6).unwrap(), deleted);
        assert_eq!(
            h.states_between(0, 3, 8).unwrap(),
            [
                KeyState {
                    version: 3,
                    put: Some(2)
                },
                deleted,
                KeyState {
                    version: 8,
                    put: Some(7)
                }
            ]
        );
        h.settle_below(6);
        assert_eq!(h.floor(), 6);
        assert_eq!(
            h.state_at(0, 6).unwrap(),
            deleted,
            "the newest settled write"
        );
        assert!(h.allows(0, Answer::Put(7), 6, 8).unwrap());
        assert!(h.allows(0, Answer::Absent, 6, 8).unwrap());
        assert!(!h.allows(0, Answer::Put(2), 6, 8).unwrap());
        assert!(!h.allows(0, Answer::Foreign, 6, 8).unwrap());
        assert_eq!(
            h.state_at(0, 5),
            Err(HistoryError::Settled { asked: 5, floor: 6 })
        );
    }
}
