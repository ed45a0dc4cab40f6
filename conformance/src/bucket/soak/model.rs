//! The soak's model: every write the sequencer handed out, per key, and what a lookup that ran
//! while the acknowledged WAL end moved through a window may answer.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};

use tidemark_test_support::history::WalHistory;

use super::super::support::show;

/// Every write in offset order, per key id, and the two WAL ends the sequencer publishes:
/// `applying` (the end of the batch being applied, raised after its writes are recorded here and
/// before the apply) and `acked` (raised once the apply returned).
#[derive(Debug)]
pub struct Model {
    /// Every write, per key id (the soak never writes the id one past its last key); never
    /// settled, so any WAL end can be asked about.
    history: Mutex<WalHistory>,
    applying: AtomicU64,
    acked: AtomicU64,
}

impl Model {
    /// A model with nothing written (any key id may be written or asked about).
    pub fn new() -> Self {
        Model {
            history: Mutex::new(WalHistory::default()),
            applying: AtomicU64::new(0),
            acked: AtomicU64::new(0),
        }
    }

    /// The key with id `id`.
    pub fn key(id: usize) -> Vec<u8> {
        format!("soak-{id:04}").into_bytes()
    }

    /// The value a put of key `id` at `offset` writes: it names its key and offset (so a reader
    /// knows which version it saw), padded to a length that varies with the offset.
    pub fn value(id: usize, offset: u64) -> Vec<u8> {
        let mut value = format!("soak-{id:04}@{offset}:").into_bytes();
        value.resize(value.len() + (offset % 48) as usize, b'.');
        value
    }

    /// Records a batch's writes `(key id, offset, is a put)` before it is applied and publishes
    /// `end` as the end being applied. Called by the sequencer only, in offset order.
    pub fn begin(&self, writes: &[(usize, u64, bool)], end: u64) {
        let mut history = self.history();
        for &(id, offset, put) in writes {
            history.record(id as u64, offset, put).unwrap();
        }
        drop(history);
        self.applying.store(end, Ordering::SeqCst);
    }

    fn history(&self) -> MutexGuard<'_, WalHistory> {
        self.history.lock().unwrap()
    }

    /// Publishes `end` as acknowledged: the apply of every record below it returned.
    pub fn acknowledge(&self, end: u64) {
        self.acked.store(end, Ordering::SeqCst);
    }

    /// The acknowledged end: read before a lookup, it is the oldest WAL end the lookup may see.
    pub fn acked(&self) -> u64 {
        self.acked.load(Ordering::SeqCst)
    }

    /// The end being applied: read after a lookup, it is the newest WAL end the lookup may see.
    pub fn applying(&self) -> u64 {
        self.applying.load(Ordering::SeqCst)
    }

    /// The model's answer for key `id` at WAL end `end`.
    pub fn answer_at(&self, id: usize, end: u64) -> Option<Vec<u8>> {
        let state = self.history().state_at(id as u64, end).unwrap();
        state.put.map(|offset| Self::value(id, offset))
    }

    /// Checks one answer for key `id` of a lookup that started when `lo` was acknowledged and
    /// ended when `hi` was being applied: it must be the key's state at some end in `lo..=hi`
    /// (the contract: a local entry, or the lake's answer, which holds every record below `W`),
    /// and no older than `floor`, the version this reader saw last for the key (a reader never
    /// sees an older version after a newer one). Raises `floor` to the version seen.
    pub fn check(
        &self,
        id: usize,
        lo: u64,
        hi: u64,
        answer: Option<&[u8]>,
        floor: &mut u64,
    ) -> Result<(), String> {
        // The key's states at `lo` and after each of its writes in `lo..hi`.
        let states = self.history().states_between(id as u64, lo, hi).unwrap();
        let fail = |what: &str| {
            Err(format!(
                "key {} answered {:?}: {what} (acknowledged end {lo}, applying {hi}, last version \
                 seen {floor}, allowed {states:?})",
                show(&Self::key(id)),
                answer.map(show),
                floor = *floor,
            ))
        };
        match answer {
            Some(bytes) => {
                let Some(offset) = parse_offset(id, bytes) else {
                    return fail("not a value this key was ever written");
                };
                if bytes != Self::value(id, offset).as_slice() {
                    return fail("a damaged value");
                }
                if !states.iter().any(|s| s.put == Some(offset)) {
                    return fail("not the key's value at any end the lookup could observe");
                }
                if offset + 1 < *floor {
                    return fail("an older version after a newer one");
                }
                *floor = offset + 1;
            }
            None => {
                let absent: Vec<u64> = states
                    .iter()
                    .filter(|s| s.put.is_none())
                    .map(|s| s.version)
                    .collect();
                if absent.is_empty() {
                    return fail("absent, though the key had a value at every end it could see");
                }
                let Some(&oldest_possible) = absent.iter().filter(|v| **v >= *floor).min() else {
                    return fail("absent, which only an older version than one seen is");
                };
                *floor = oldest_possible;
            }
        }
        Ok(())
    }
}

/// The offset a value of key `id` names, if it has the shape [`Model::value`] writes.
fn parse_offset(id: usize, bytes: &[u8]) -> Option<u64> {
    let text = std::str::from_utf8(bytes).ok()?;
    let rest = text.strip_prefix(&format!("soak-{id:04}@"))?;
    rest.split(':').next()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Key 0: put at 2, delete at 5, put at 7. Each wrong answer the soak must catch is caught.
    #[test]
    fn checks_windows_and_versions() {
        let model = Model::new();
        model.begin(&[(0, 2, true)], 3);
        model.begin(&[(0, 5, false)], 6);
        model.begin(&[(0, 7, true)], 8);
        let v2 = Model::value(0, 2);
        let v7 = Model::value(0, 7);
        let mut floor = 0;
        // Before the first write is acknowledged, absent or the first value.
        model.check(0, 0, 3, None, &mut floor).unwrap();
        model.check(0, 0, 3, Some(&v2), &mut floor).unwrap();
        assert_eq!(floor, 3);
        // Acknowledged past the delete: the old value is lost history, not an answer.
        assert!(model.check(0, 6, 6, Some(&v2), &mut 0).is_err());
        model.check(0, 6, 6, None, &mut floor).unwrap();
        assert_eq!(floor, 6);
        // The delete seen, an older value (allowed by the window alone) is a regression.
        assert!(model.check(0, 3, 6, Some(&v2), &mut floor.clone()).is_err());
        // Absent before the first write, after the delete was seen: a regression too.
        let mut after_delete = 6;
        assert!(model.check(0, 0, 3, None, &mut after_delete).is_err());
        // The newest acknowledged value must be there; a damaged or foreign one never is.
        assert!(model.check(0, 8, 8, None, &mut floor.clone()).is_err());
        model.check(0, 8, 8, Some(&v7), &mut floor).unwrap();
        let mut damaged = v7.clone();
        damaged.push(b'!');
        assert!(model.check(0, 8, 8, Some(&damaged), &mut 0).is_err());
        assert!(model.check(0, 8, 8, Some(b"soak-0001@7:"), &mut 0).is_err());
        assert_eq!(model.answer_at(0, 8), Some(v7));
        assert_eq!(model.answer_at(0, 6), None);
        // The never-written id is always absent.
        model.check(1, 0, 8, None, &mut 0).unwrap();
    }
}
