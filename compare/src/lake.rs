//! The lake of a run, and the model its answers are checked against, in one: a lake table over
//! the deterministic stream that keeps offsets, not records.
//!
//! The library's `MemoryLake` keeps every WAL record and copies its whole key → value map at
//! every commit: right for tests, but a run of minutes would hold every record it wrote and copy
//! a map of every key ten times a second. The stream is a function of the offset, so this lake
//! keeps only the [`WalHistory`] of offsets (each key's newest below the floor, every offset above
//! it) and makes a value when it is looked up. The floor is the lowest end anything still needs:
//! the oldest snapshot the lake keeps (a lookuper may serve it) and the acknowledged end the
//! reader's pending check started from.

use std::collections::VecDeque;
use std::sync::{Mutex, MutexGuard, PoisonError};

use tidemark::{LakeLookuper, LakeSnapshot, async_trait};

use crate::{Error, Result};

use tidemark_test_support::history::{HistoryError, WalHistory};
use tidemark_test_support::stream::SeededStream;

/// A lake table over a [`SeededStream`], with one lookuper (every bucket of a run shares it).
#[derive(Debug)]
pub struct StreamLake {
    stream: SeededStream,
    /// Snapshots kept; older ones expire.
    retain: usize,
    state: Mutex<State>,
}

#[derive(Debug)]
struct State {
    history: WalHistory,
    /// The newest snapshots, oldest first.
    snapshots: VecDeque<LakeSnapshot>,
    /// The snapshot lookups read (the empty lake, id 0, before the first refresh).
    served: LakeSnapshot,
    /// The acknowledged end the reader's pending check started from (`u64::MAX`: none pending).
    reader_floor: u64,
}

impl State {
    /// Settles what nothing needs any more.
    fn settle(&mut self) {
        let lake = self.snapshots.front().map_or(0, |s| s.end_offset);
        self.history.settle_below(lake.min(self.reader_floor));
    }

    /// Whether `snapshot` can be served: the empty lake, or one of the snapshots kept.
    fn live(&self, snapshot: LakeSnapshot) -> bool {
        snapshot == LakeSnapshot::default() || self.snapshots.contains(&snapshot)
    }
}

impl StreamLake {
    /// An empty lake over `stream` that keeps its newest `retain` snapshots (at least 1).
    pub fn new(stream: SeededStream, retain: usize) -> Self {
        StreamLake {
            stream,
            retain: retain.max(1),
            state: Mutex::new(State {
                history: WalHistory::default(),
                snapshots: VecDeque::new(),
                served: LakeSnapshot::default(),
                // Nothing settles before the reader says where it is.
                reader_floor: 0,
            }),
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // Nothing panics while it is held; a poisoned state is still whole.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The records at `from..to` reach the lake's input (the WAL) and the model, before they are
    /// applied; `from` is where the previous call ended.
    pub fn append(&self, from: u64, to: u64) -> Result<()> {
        let mut state = self.state();
        state
            .history
            .append(from, (from..to).map(|o| self.stream.write(o)))
            .map_err(model_error)?;
        state.settle();
        Ok(())
    }

    /// Commits a snapshot of every record below `end_offset`: not beyond what was appended, not
    /// below the latest snapshot's end.
    pub fn commit(&self, end_offset: u64) -> Result<LakeSnapshot> {
        let mut state = self.state();
        let appended = state.history.end();
        if end_offset > appended {
            return Err(Error::Harness(format!(
                "lake snapshot end {end_offset} is beyond the WAL end {appended}"
            )));
        }
        let latest = state.snapshots.back().copied().unwrap_or_default();
        if end_offset < latest.end_offset {
            return Err(Error::Harness(format!(
                "lake snapshot end {end_offset} is below the latest snapshot's end {}",
                latest.end_offset
            )));
        }
        let id = latest
            .id
            .checked_add(1)
            .ok_or_else(|| Error::Harness("lake snapshot ids exhausted".into()))?;
        let snapshot = LakeSnapshot::new(id, end_offset);
        state.snapshots.push_back(snapshot);
        while state.snapshots.len() > self.retain {
            state.snapshots.pop_front();
        }
        Ok(snapshot)
    }

    /// The reader is about to check a lookup against `acked`, the end acknowledged before it:
    /// nothing that check needs is settled until the next call.
    pub fn begin_check(&self, acked: u64) {
        self.state().reader_floor = acked;
    }

    /// The reader has stopped: no check is pending.
    pub fn end_checks(&self) {
        self.state().reader_floor = u64::MAX;
    }

    /// Whether `answer` for key `key` is a state the key had at some WAL end from
    /// `acked_before` (acknowledged before the lookup) to `applying_after` (being applied when it
    /// returned), bytes and all; `false` is a wrong answer (lost, resurrected or corrupt data).
    pub fn check(
        &self,
        key: u64,
        answer: Option<&[u8]>,
        acked_before: u64,
        applying_after: u64,
    ) -> Result<bool> {
        let claimed = SeededStream::claimed(answer);
        let allowed = self
            .state()
            .history
            .allows(key, claimed, acked_before, applying_after)
            .map_err(model_error)?;
        // A value names its offset; only that record can have written it, byte for byte.
        Ok(allowed && self.stream.is_exact(answer))
    }

    /// The key's state once every record below `end` is applied.
    pub fn state_at(&self, key: u64, end: u64) -> Result<Option<Vec<u8>>> {
        let state = self
            .state()
            .history
            .state_at(key, end)
            .map_err(model_error)?;
        Ok(state.put.map(|offset| self.stream.payload(offset)))
    }

    /// Every key written so far, ascending.
    pub fn keys(&self) -> Vec<u64> {
        let mut keys: Vec<u64> = self.state().history.keys().collect();
        keys.sort_unstable();
        keys
    }

    /// Offsets the model keeps in full (from its floor to its end); below the floor it keeps one
    /// per key.
    pub fn unsettled(&self) -> u64 {
        let state = self.state();
        state.history.end() - state.history.floor()
    }
}

/// The model could not answer: a harness fault (it settled what a check still needed, or was
/// fed records out of order), never the backend's.
fn model_error(e: HistoryError) -> Error {
    Error::Harness(format!("the model: {e}"))
}

#[async_trait]
impl LakeLookuper for StreamLake {
    async fn refresh(&self, snapshot: LakeSnapshot) -> tidemark::BucketResult<()> {
        let mut state = self.state();
        if !state.live(snapshot) {
            return Err(tidemark::BucketError::lake(format!(
                "lake snapshot {} (end {}) is not one the lake keeps",
                snapshot.id, snapshot.end_offset
            )));
        }
        state.served = snapshot;
        Ok(())
    }

    async fn lookup(&self, key: &[u8]) -> tidemark::BucketResult<Option<Vec<u8>>> {
        let mut values = self.lookup_many(&[key.to_vec()]).await?;
        values
            .pop()
            .ok_or_else(|| tidemark::BucketError::Internal("the lake answered no key".into()))
    }

    async fn lookup_many(&self, keys: &[Vec<u8>]) -> tidemark::BucketResult<Vec<Option<Vec<u8>>>> {
        let state = self.state();
        let served = state.served;
        if !state.live(served) {
            return Err(tidemark::BucketError::lake(format!(
                "lake snapshot {} has expired: refresh to a newer snapshot",
                served.id
            )));
        }
        keys.iter()
            .map(|key| match SeededStream::key_index_of(key) {
                // The empty lake, before any refresh (it may be older than the floor).
                _ if served == LakeSnapshot::default() => Ok(None),
                // A snapshot the lake keeps is never below the model's floor.
                Some(index) => state
                    .history
                    .state_at(index, served.end_offset)
                    .map(|s| s.put.map(|offset| self.stream.payload(offset)))
                    .map_err(|e| tidemark::BucketError::Internal(e.to_string())),
                None => Ok(None),
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block_on<T>(f: impl Future<Output = T>) -> T {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
            .block_on(f)
    }

    #[test]
    fn snapshots_answer_the_state_below_their_end_and_expire() {
        let stream = SeededStream::new(9, 30, 20, 16);
        let lake = StreamLake::new(stream.clone(), 2);
        lake.append(0, 100).unwrap();
        assert!(lake.commit(101).is_err(), "beyond the WAL");
        let first = lake.commit(40).unwrap();
        assert!(lake.commit(39).is_err(), "backwards");
        block_on(async {
            // Before a refresh the lake is empty.
            assert_eq!(
                lake.lookup(&SeededStream::key(stream.key_index(0)))
                    .await
                    .unwrap(),
                None
            );
            lake.refresh(first).await.unwrap();
            for key in 0..30 {
                let mut newest = None;
                for o in 0..40 {
                    if stream.key_index(o) == key {
                        newest = Some(o);
                    }
                }
                let want = newest.and_then(|o| stream.state_after(o));
                assert_eq!(
                    lake.lookup(&SeededStream::key(key)).await.unwrap(),
                    want,
                    "{key}"
                );
            }
            assert_eq!(lake.lookup(b"not a key").await.unwrap(), None);
            let (_, third) = (lake.commit(60).unwrap(), lake.commit(80).unwrap());
            // The first snapshot has expired: served lookups and refreshes to it fail.
            assert!(lake.lookup(&SeededStream::key(0)).await.is_err());
            assert!(lake.refresh(first).await.is_err());
            lake.refresh(third).await.unwrap();
            assert!(lake.lookup(&SeededStream::key(0)).await.is_ok());
            // The empty lake is always there, and empty, however far the model has settled.
            lake.end_checks();
            lake.append(100, 200).unwrap();
            lake.refresh(LakeSnapshot::default()).await.unwrap();
            assert_eq!(lake.lookup(&SeededStream::key(0)).await.unwrap(), None);
        });
    }

    #[test]
    fn the_model_settles_up_to_the_oldest_snapshot_and_the_pending_check() {
        let stream = SeededStream::new(2, 10, 10, 16);
        let lake = StreamLake::new(stream, 2);
        lake.append(0, 100).unwrap();
        lake.commit(50).unwrap();
        lake.commit(70).unwrap();
        lake.append(100, 110).unwrap();
        assert_eq!(lake.unsettled(), 110, "no reader has said where it is");
        lake.begin_check(60);
        lake.append(110, 120).unwrap();
        assert_eq!(
            lake.unsettled(),
            70,
            "settled below the oldest snapshot's end, 50"
        );
        assert!(lake.check(0, None, 50, 120).is_ok());
        lake.commit(90).unwrap();
        lake.append(120, 130).unwrap();
        assert_eq!(
            lake.unsettled(),
            70,
            "the pending check from 60 holds the floor"
        );
        lake.end_checks();
        lake.append(130, 140).unwrap();
        assert_eq!(
            lake.unsettled(),
            70,
            "now the oldest snapshot, ending at 70"
        );
        assert_eq!(lake.keys(), (0..10).collect::<Vec<_>>());
    }
}
