//! [`GroupCommit`]: the synced commits of the buckets of one shared database that arrive
//! together are written as one fjall batch with one journal sync (group commit).
//!
//! fjall writes a batch's journal entry and syncs it under its journal writer lock, so synced
//! batches of the buckets of one database (which share one journal) took turns, one fsync each:
//! 100 buckets written at once committed no faster than one. Syncing outside the batch does not
//! help, because fjall's sync holds the same lock: the writers that queued behind it append one
//! at a time, and the first to finish leads the next sync before the others are in.
//!
//! Instead, as RocksDB's write group does, a synced commit hands its operations to the database's
//! `GroupCommit`. When no group is being written, it becomes the *leader*: it takes every
//! operation handed in so far (its own and those of commits that arrived meanwhile), writes them
//! as one batch with a journal sync, and wakes the others; commits arriving while a group is
//! written gather into the next group, which one of them leads. Each bucket commits at most one
//! batch at a time (the engine's writer lock), so a group never holds two writes of one key;
//! a group is atomic as a whole, so each bucket's commit in it is too, and a commit returns only
//! once its group is durable and visible.
//!
//! A group that fails fails every commit in it; fjall poisons a database whose journal write or
//! sync failed, so the groups after it fail on their own. When the leader panics, each member
//! panics in turn, so the engine fails every store of the group, as it fails the leader's.

use std::collections::HashMap;
use std::sync::{Condvar, Mutex, MutexGuard};

use fjall::{Keyspace, OwnedWriteBatch, UserKey, UserValue};
use tidemark_engine_api::sync::lock;
use tidemark_engine_api::{Error, Result};

use crate::error::BACKEND;

/// What its lock is called in [`Error::Poisoned`].
const WHAT: &str = "fjall group commit";

/// Why a group failed.
#[derive(Debug, Clone)]
struct Failure {
    why: String,
    /// The leader panicked writing it: its members' writes may be in, half in or out, so each
    /// member's call panics too and the engine fails its store, as it does the leader's.
    panicked: bool,
}

/// One write of a batch, in the keyspace it names.
pub(crate) enum Op {
    Insert(Keyspace, UserKey, UserValue),
    Remove(Keyspace, UserKey),
}

/// Adds `ops` to `batch`, in order.
pub(crate) fn fill(batch: &mut OwnedWriteBatch, ops: impl IntoIterator<Item = Op>) {
    for op in ops {
        match op {
            Op::Insert(keyspace, key, value) => batch.insert(&keyspace, key, value),
            Op::Remove(keyspace, key) => batch.remove(&keyspace, key),
        }
    }
}

/// The writes of one commit: straight into a batch of its own, or gathered for a group.
pub(crate) enum Writes {
    /// A batch this commit writes alone.
    Alone(OwnedWriteBatch),
    /// Operations for [`GroupCommit::commit`].
    Grouped(Vec<Op>),
}

impl Writes {
    pub(crate) fn insert(
        &mut self,
        keyspace: &Keyspace,
        key: impl Into<UserKey>,
        value: impl Into<UserValue>,
    ) {
        match self {
            Writes::Alone(batch) => batch.insert(keyspace, key, value),
            Writes::Grouped(ops) => {
                ops.push(Op::Insert(keyspace.clone(), key.into(), value.into()))
            }
        }
    }

    pub(crate) fn remove(&mut self, keyspace: &Keyspace, key: impl Into<UserKey>) {
        match self {
            Writes::Alone(batch) => batch.remove(keyspace, key),
            Writes::Grouped(ops) => ops.push(Op::Remove(keyspace.clone(), key.into())),
        }
    }
}

/// The synced commits of one shared database (see the [module](self)).
#[derive(Default)]
pub(crate) struct GroupCommit {
    state: Mutex<State>,
    /// Signalled when a group has been written (or failed): the members of even groups wait on
    /// the first, of odd ones on the second, so the end of a group wakes its own members and
    /// one member of the next group (its leader), not every commit waiting.
    ended: [Condvar; 2],
}

impl std::fmt::Debug for GroupCommit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GroupCommit").finish_non_exhaustive()
    }
}

#[derive(Default)]
struct State {
    /// The operations of the group being gathered.
    gathering: Vec<Op>,
    /// The commits in the group being gathered.
    members: usize,
    /// The number of the group being gathered; groups are written in order.
    number: u64,
    /// Every group numbered below this one has been written or has failed.
    ended_below: u64,
    /// Whether a leader is writing a group now.
    writing: bool,
    /// Groups that failed, with how and how many of their members have not heard yet.
    failed: HashMap<u64, (Failure, usize)>,
    /// Groups written (for tests: fewer than the commits when commits shared a group).
    #[cfg(test)]
    written: u64,
}

impl GroupCommit {
    /// Commits `ops` durably as part of a group: returns once the group holding them was written
    /// with a journal sync by `write` (run by whichever commit leads that group, outside the
    /// lock), with that group's outcome.
    pub(crate) fn commit(
        &self,
        ops: Vec<Op>,
        write: impl FnOnce(Vec<Op>) -> Result<()>,
    ) -> Result<()> {
        let mut state = self.lock()?;
        state.gathering.extend(ops);
        state.members += 1;
        let mine = state.number;
        while state.writing && state.ended_below <= mine {
            state = self
                .waiters_of(mine)
                .wait(state)
                .map_err(|_| Error::Poisoned { what: WHAT })?;
        }
        if state.ended_below > mine {
            let heard = Self::outcome(&mut state, mine);
            drop(state);
            return Self::answer(heard);
        }
        // No group in flight and ours not written: lead it. (Groups are written in order, so
        // the unwritten group nobody writes is the one being gathered, ours.)
        if state.number != mine {
            return Err(Error::Internal(format!(
                "fjall group commit: group {mine} was taken but never ended"
            )));
        }
        state.writing = true;
        let group = std::mem::take(&mut state.gathering);
        let others = std::mem::take(&mut state.members) - 1;
        state.number += 1;
        drop(state);
        // Until the write returns, the group counts as one whose leader panicked: if it unwinds,
        // dropping `leading` ends the group that way.
        let mut leading = Leading {
            commits: self,
            group: mine,
            others,
            failure: Some(Failure {
                why: "the thread writing it panicked".to_owned(),
                panicked: true,
            }),
        };
        let written = write(group);
        leading.failure = written.as_ref().err().map(|e| Failure {
            why: e.to_string(),
            panicked: false,
        });
        drop(leading);
        written
    }

    fn lock(&self) -> Result<MutexGuard<'_, State>> {
        lock(&self.state, WHAT)
    }

    fn waiters_of(&self, group: u64) -> &Condvar {
        &self.ended[usize::from(group % 2 == 1)]
    }

    /// Wakes the members of `group`, which just ended, and one member of the next group, which
    /// leads it.
    fn wake_after(&self, group: u64) {
        self.waiters_of(group).notify_all();
        self.waiters_of(group + 1).notify_one();
    }

    /// What a member that did not lead group `group` hears once it ended (taken under the
    /// lock; [`Self::answer`] turns it into the member's result once the lock is released).
    fn outcome(state: &mut State, group: u64) -> Option<Failure> {
        let (failure, unheard) = state.failed.get_mut(&group)?;
        let failure = failure.clone();
        *unheard = unheard.saturating_sub(1);
        if *unheard == 0 {
            state.failed.remove(&group);
        }
        Some(failure)
    }

    /// A member's result: a member of a group whose leader panicked panics in turn (the engine
    /// contains it and fails the member's store, as a panic in its own write would).
    fn answer(failure: Option<Failure>) -> Result<()> {
        let Some(failure) = failure else {
            return Ok(());
        };
        let message = format!(
            "the group commit of this bucket's synced write failed: {}",
            failure.why
        );
        if failure.panicked {
            std::panic::resume_unwind(Box::new(message));
        }
        Err(Error::backend(BACKEND, message))
    }

    /// Groups written so far.
    #[cfg(test)]
    fn groups_written(&self) -> u64 {
        self.lock().map_or(0, |s| s.written)
    }
}

/// The leader's hold on the group it writes: ends it when dropped, with `failure` (a panic's
/// until the write returned), so the members never wait for a group nobody writes.
struct Leading<'a> {
    commits: &'a GroupCommit,
    group: u64,
    others: usize,
    failure: Option<Failure>,
}

impl Drop for Leading<'_> {
    fn drop(&mut self) {
        let mut state = tidemark_engine_api::sync::lock_recovered(&self.commits.state);
        state.writing = false;
        state.ended_below = self.group + 1;
        #[cfg(test)]
        {
            state.written += 1;
        }
        if let Some(failure) = self.failure.take()
            && self.others > 0
        {
            state.failed.insert(self.group, (failure, self.others));
        }
        drop(state);
        self.commits.wake_after(self.group);
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

    use std::sync::Barrier;

    use super::*;

    fn keyspace() -> (tempfile::TempDir, fjall::Database, Keyspace) {
        let dir = tempfile::tempdir().unwrap();
        let db = fjall::Database::builder(dir.path()).open().unwrap();
        let keyspace = db
            .keyspace("k", fjall::KeyspaceCreateOptions::default)
            .unwrap();
        (dir, db, keyspace)
    }

    fn insert(keyspace: &Keyspace, key: &str) -> Vec<Op> {
        vec![Op::Insert(
            keyspace.clone(),
            key.as_bytes().into(),
            b"v".as_slice().into(),
        )]
    }

    #[test]
    fn a_lone_commit_writes_its_own_group() {
        let (_dir, _db, keyspace) = keyspace();
        let commits = GroupCommit::default();
        for key in ["a", "b", "c"] {
            let mut got = 0;
            commits
                .commit(insert(&keyspace, key), |ops| {
                    got = ops.len();
                    Ok(())
                })
                .unwrap();
            assert_eq!(got, 1);
        }
        assert_eq!(commits.groups_written(), 3);
    }

    #[test]
    fn concurrent_commits_all_land_and_each_returns_once_written() {
        const THREADS: usize = 8;
        const COMMITS: usize = 100;
        let (_dir, db, keyspace) = keyspace();
        let commits = GroupCommit::default();
        std::thread::scope(|scope| {
            for t in 0..THREADS {
                let (commits, db, keyspace) = (&commits, &db, &keyspace);
                scope.spawn(move || {
                    for n in 0..COMMITS {
                        let key = format!("{t}-{n}");
                        commits
                            .commit(insert(keyspace, &key), |ops| {
                                let mut batch = db.batch();
                                fill(&mut batch, ops);
                                std::thread::yield_now();
                                batch
                                    .commit()
                                    .map_err(|e| Error::backend(BACKEND, e.to_string()))
                            })
                            .unwrap();
                        // Returned: written (the group holding it ended).
                        assert!(keyspace.get(&key).unwrap().is_some(), "{key} missing");
                    }
                });
            }
        });
        assert_eq!(keyspace.len().unwrap(), THREADS * COMMITS);
    }

    /// Two commits gathered behind a group in flight form the next group, which one of them
    /// leads with `write`; what each of the two returned (a panic as an error).
    fn group_of_two(write: fn() -> Result<()>) -> (GroupCommit, Vec<Result<()>>) {
        let (_dir, _db, keyspace) = keyspace();
        let commits = GroupCommit::default();
        let leading = Barrier::new(3);
        let results = std::thread::scope(|scope| {
            let first = scope.spawn(|| {
                commits.commit(insert(&keyspace, "a"), |_| {
                    leading.wait();
                    // Written once both others have gathered into the next group.
                    while commits.lock().unwrap().members < 2 {
                        std::thread::yield_now();
                    }
                    Ok(())
                })
            });
            let members: Vec<_> = ["b", "c"]
                .into_iter()
                .map(|key| {
                    let (commits, keyspace, leading) = (&commits, &keyspace, &leading);
                    scope.spawn(move || {
                        leading.wait();
                        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                            commits.commit(insert(keyspace, key), |_| write())
                        }))
                        .unwrap_or_else(|_| Err(Error::Internal("panicked".into())))
                    })
                })
                .collect();
            first.join().unwrap().unwrap();
            members.into_iter().map(|m| m.join().unwrap()).collect()
        });
        (commits, results)
    }

    #[test]
    fn every_member_of_a_failed_group_hears_of_it() {
        let (commits, results) =
            group_of_two(|| Err(Error::Internal("journal sync failed".into())));
        assert_eq!(
            commits.groups_written(),
            2,
            "the two gathered into one group"
        );
        assert!(results.iter().all(Result::is_err), "{results:?}");
        assert!(
            commits.lock().unwrap().failed.is_empty(),
            "every member heard"
        );
        // The next group is written as usual.
        let (_dir, _db, keyspace) = keyspace();
        commits.commit(insert(&keyspace, "d"), |_| Ok(())).unwrap();
    }

    #[test]
    fn a_leader_that_panics_fails_its_group_instead_of_leaving_it_waiting() {
        let (commits, results) = group_of_two(|| panic!("the journal write panicked"));
        assert_eq!(commits.groups_written(), 2);
        // Both panicked: the leader in its write, the other member on hearing of it.
        assert!(
            results
                .iter()
                .all(|r| matches!(r, Err(Error::Internal(m)) if m == "panicked")),
            "{results:?}"
        );
        let (_dir, _db, keyspace) = keyspace();
        commits.commit(insert(&keyspace, "d"), |_| Ok(())).unwrap();
    }
}
