//! The read path: local first, the lake only for what the store cannot answer.
//!
//! A local read runs inline when the engine can answer without blocking for long
//! ([`Engine::lookup_inline`]), and on tokio's blocking pool otherwise, so a local hit costs
//! about what the engine's own lookup costs. [`HistoricalBucket::lookup_many`] reads every key
//! locally in one pass (one blocking task at most) and asks the lake once for all the misses.
//! Both consume tokio's cooperative budget, so a loop of inline hits still yields.

use std::collections::HashMap;
use std::sync::atomic::Ordering;

use super::HistoricalBucket;
use super::lake_call::LakeCall;
use super::stats::bump;
use crate::error::{Error, Result};
use tidemark_engine_api::Engine;
use tidemark_engine_api::LocalLookup;

/// What the local store says about one key.
enum Local {
    /// An authoritative answer (`None`: a tombstone).
    Answer(Option<Vec<u8>>),
    /// A miss or an untrusted entry: the lake answers.
    AskLake,
}

impl HistoricalBucket {
    /// Looks `key` up: a local value is returned, a local tombstone is `None` without asking
    /// the lake, and a local miss is answered by the lake lookuper.
    ///
    /// The lake is read only *after* the local miss. Any reclaim that removed the key's entry
    /// ran under a watermark the lookuper had already been refreshed to cover, so the lake
    /// answers at least as new as what was removed. If the lookuper serves a snapshot behind
    /// the watermark (only after recovering from a snapshot older than the persisted
    /// watermark), a local miss is refused with [`Error::Lake`] rather than answered stale.
    ///
    /// A local entry is authoritative only if it is at least as new as the lake's newest record
    /// for the key. While the lookuper serves a snapshot ending beyond what the engine has
    /// applied (the lake is ahead of a replaying or lagging host), the local store may lack the
    /// lake's newer versions, so a local entry below the snapshot's end is not served: the lake
    /// answers instead (§ Lake progress and snapshots / Lake ahead of the applied end in
    /// `docs/DESIGN.md`).
    ///
    /// A lake lookup that fails, or does not answer within
    /// [`LakeTimeouts::lookup`](super::LakeTimeouts::lookup), is [`Error::Lake`], never
    /// "absent"; local hits never wait for the lake.
    pub async fn lookup(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        // Read before the local lookup: the applied end only grows, so if it already reached
        // the lake end, the store held every record the lake holds when the lookup ran.
        // An inline read never suspends: without this a task looking keys up in a loop would
        // never yield and could starve the runtime's other tasks (a writer, the scheduler).
        tokio::task::coop::consume_budget().await;
        let applied_before = self.engine.applied_end();
        let local = match self.engine.lookup_inline(key)? {
            Some(local) => local,
            None => {
                let owned = key.to_vec();
                self.blocking(move |engine| engine.lookup(&owned)).await?
            }
        };
        let trusted_from = self.trusted_from(applied_before)?;
        if let Local::Answer(answer) = self.judge(local, trusted_from) {
            return Ok(answer);
        }
        self.check_lake_current()?;
        let what = || "a lake lookup".to_owned();
        match self
            .lake_call(LakeCall::Lookup, what, self.lake.lookup(key))
            .await
        {
            Ok(value) => {
                bump(&self.counters.lake_fallbacks);
                Ok(value)
            }
            Err(e) => {
                bump(&self.counters.lake_failures);
                Err(e)
            }
        }
    }

    /// Looks every key up, answering each as [`lookup`](Self::lookup) would: one local pass
    /// (inline where the engine allows, otherwise one blocking task for the rest), then one
    /// [`LakeLookuper::lookup_many`](crate::lake::LakeLookuper::lookup_many) call for the
    /// misses, each distinct key asked once however many times it appears in `keys`. Answers
    /// are in the order of `keys`. Any error fails the whole call.
    pub async fn lookup_many<K: AsRef<[u8]>>(&self, keys: &[K]) -> Result<Vec<Option<Vec<u8>>>> {
        tokio::task::coop::consume_budget().await;
        let applied_before = self.engine.applied_end();
        let mut locals: Vec<Option<LocalLookup>> = Vec::with_capacity(keys.len());
        for key in keys {
            locals.push(self.engine.lookup_inline(key.as_ref())?);
        }
        let blocked: Vec<(usize, Vec<u8>)> = locals
            .iter()
            .zip(keys)
            .enumerate()
            .filter(|(_, (local, _))| local.is_none())
            .map(|(i, (_, key))| (i, key.as_ref().to_vec()))
            .collect();
        if !blocked.is_empty() {
            let looked_up = self
                .blocking(move |engine| {
                    blocked
                        .into_iter()
                        .map(|(i, key)| Ok((i, engine.lookup(&key)?)))
                        .collect::<tidemark_engine_api::Result<Vec<_>>>()
                })
                .await?;
            for (i, local) in looked_up {
                if let Some(slot) = locals.get_mut(i) {
                    *slot = Some(local);
                }
            }
        }
        let trusted_from = self.trusted_from(applied_before)?;
        let mut answers = Vec::with_capacity(keys.len());
        let mut misses: Vec<(usize, Vec<u8>)> = Vec::new();
        for (i, (local, key)) in locals.into_iter().zip(keys).enumerate() {
            let local = local
                .ok_or_else(|| Error::Internal("lookup_many lost a local answer".to_owned()))?;
            match self.judge(local, trusted_from) {
                Local::Answer(answer) => answers.push(answer),
                Local::AskLake => {
                    answers.push(None);
                    misses.push((i, key.as_ref().to_vec()));
                }
            }
        }
        if misses.is_empty() {
            return Ok(answers);
        }
        self.check_lake_current()?;
        // The lake is asked once per distinct key, however often it was asked for: a lake
        // lookup reads files, and every position of a key gets the same answer.
        let mut distinct: HashMap<Vec<u8>, usize> = HashMap::with_capacity(misses.len());
        let mut miss_keys: Vec<Vec<u8>> = Vec::with_capacity(misses.len());
        let positions: Vec<(usize, usize)> = misses
            .into_iter()
            .map(|(i, key)| {
                let at = *distinct.entry(key).or_insert_with_key(|key| {
                    miss_keys.push(key.clone());
                    miss_keys.len() - 1
                });
                (i, at)
            })
            .collect();
        // Counted per lookup answered (or failed), as single lookups are.
        let count = u64::try_from(positions.len()).unwrap_or(u64::MAX);
        let what = || format!("a lake lookup_many of {} keys", miss_keys.len());
        let from_lake = match self
            .lake_call(LakeCall::Lookup, what, self.lake.lookup_many(&miss_keys))
            .await
        {
            Ok(values) if values.len() == miss_keys.len() => values,
            Ok(values) => {
                self.counters
                    .lake_failures
                    .fetch_add(count, Ordering::Relaxed);
                return Err(Error::lake(format!(
                    "the lake lookuper answered {} of {} keys",
                    values.len(),
                    miss_keys.len()
                )));
            }
            Err(e) => {
                self.counters
                    .lake_failures
                    .fetch_add(count, Ordering::Relaxed);
                return Err(e);
            }
        };
        self.counters
            .lake_fallbacks
            .fetch_add(count, Ordering::Relaxed);
        for (i, at) in positions {
            if let (Some(slot), Some(value)) = (answers.get_mut(i), from_lake.get(at)) {
                slot.clone_from(value);
            }
        }
        Ok(answers)
    }

    /// The lowest offset of a local entry the bucket serves, for local reads that started after
    /// the applied end was `applied_before`. Read after the local reads: the lake end only
    /// grows, so this bounds the one in force during them from above.
    fn trusted_from(&self, applied_before: u64) -> Result<u64> {
        let lake_end = self.served()?.end_offset;
        let stale_below = self.stale_below.load(Ordering::SeqCst);
        Ok(if applied_before >= lake_end {
            stale_below
        } else {
            stale_below.max(lake_end)
        })
    }

    /// Whether a local entry answers, counting the outcome.
    fn judge(&self, local: LocalLookup, trusted_from: u64) -> Local {
        match local {
            LocalLookup::Value { offset, bytes } if offset >= trusted_from => {
                bump(&self.counters.local_values);
                Local::Answer(Some(bytes))
            }
            LocalLookup::Tombstone { offset } if offset >= trusted_from => {
                bump(&self.counters.local_tombstones);
                Local::Answer(None)
            }
            LocalLookup::Value { .. } | LocalLookup::Tombstone { .. } => {
                bump(&self.counters.distrusted_local);
                Local::AskLake
            }
            LocalLookup::Miss => Local::AskLake,
        }
    }

    /// Refuses to ask a lake whose snapshot is behind `W` (it may lack what was reclaimed).
    fn check_lake_current(&self) -> Result<()> {
        // W first, then the lake end: the served snapshot is recorded before the W it allows is
        // published, so a lake end read after W is never behind it unless the lookuper really is.
        let watermark = self.engine.watermark();
        let lake_end = self.served()?.end_offset;
        if lake_end < watermark {
            bump(&self.counters.lake_behind);
            return Err(Error::lake(format!(
                "the lake lookuper serves a snapshot ending at {lake_end}, behind the watermark \
                 {watermark}; a lake-progress notification must bring it up to date"
            )));
        }
        Ok(())
    }
}
