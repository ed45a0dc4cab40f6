//! The lake side of a bucket: the [`LakeLookuper`] trait a [`HistoricalBucket`](crate::HistoricalBucket)
//! falls back to on a local miss, and [`MemoryLake`], its in-memory reference implementation.

#[cfg_attr(not(any(test, feature = "testing")), allow(dead_code))]
mod faults;
#[cfg(any(test, feature = "testing"))]
mod gate;
mod memory;

use async_trait::async_trait;

use crate::error::Result;

pub use memory::MemoryLake;

/// A committed lake snapshot: its id and its exclusive end offset (every WAL record with
/// `offset < end_offset` is in it).
/// `LakeSnapshot::default()` (id 0, end 0) stands for the empty lake, before any commit.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LakeSnapshot {
    /// Snapshot id, as the lake numbers its commits.
    pub id: u64,
    /// Exclusive lake log end offset of the snapshot.
    pub end_offset: u64,
}

impl LakeSnapshot {
    /// A snapshot reference.
    pub fn new(id: u64, end_offset: u64) -> Self {
        LakeSnapshot { id, end_offset }
    }
}

/// Point lookups against the lake table, as of the snapshot it was last refreshed to.
///
/// A bucket refreshes the lookuper to a snapshot *before* it publishes the watermark that relies
/// on it, so a lookup that misses locally always finds a lake at least as new as the entries the
/// bucket has reclaimed.
///
/// The bucket bounds every call with its [`LakeTimeouts`](crate::LakeTimeouts) and drops the
/// call's future when the timeout expires. A dropped `refresh` must leave the lookuper serving
/// what it served before, as a failed one does (switch snapshots in one step at the end).
///
/// Implementations put [`async_trait`](crate::async_trait) (re-exported here and by the
/// `tidemark` facade) on their `impl`:
///
/// ```
/// use std::collections::BTreeMap;
/// use std::sync::Mutex;
///
/// use tidemark_bucket::{Error, Result};
/// use tidemark_bucket::{LakeLookuper, LakeSnapshot, async_trait};
///
/// /// A lake that never changes: one map, whatever the snapshot.
/// struct FixedLake(Mutex<BTreeMap<Vec<u8>, Vec<u8>>>);
///
/// #[async_trait]
/// impl LakeLookuper for FixedLake {
///     async fn refresh(&self, _snapshot: LakeSnapshot) -> Result<()> {
///         Ok(())
///     }
///
///     async fn lookup(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
///         let rows = self.0.lock().map_err(|_| Error::lake("poisoned"))?;
///         Ok(rows.get(key).cloned())
///     }
/// }
/// ```
#[async_trait]
pub trait LakeLookuper: Send + Sync {
    /// Switches lookups to `snapshot`. On error the lookuper keeps serving what it served before.
    async fn refresh(&self, snapshot: LakeSnapshot) -> Result<()>;

    /// The key's value in the current snapshot: `None` when absent or deleted.
    async fn lookup(&self, key: &[u8]) -> Result<Option<Vec<u8>>>;

    /// The values of `keys` in the current snapshot, in their order (one answer per key). The
    /// default looks them up one by one; a lake with a batched read overrides it.
    async fn lookup_many(&self, keys: &[Vec<u8>]) -> Result<Vec<Option<Vec<u8>>>> {
        let mut values = Vec::with_capacity(keys.len());
        for key in keys {
            values.push(self.lookup(key).await?);
        }
        Ok(values)
    }
}

#[async_trait]
impl<L: LakeLookuper + ?Sized> LakeLookuper for std::sync::Arc<L> {
    async fn refresh(&self, snapshot: LakeSnapshot) -> Result<()> {
        (**self).refresh(snapshot).await
    }

    async fn lookup(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        (**self).lookup(key).await
    }

    async fn lookup_many(&self, keys: &[Vec<u8>]) -> Result<Vec<Option<Vec<u8>>>> {
        (**self).lookup_many(keys).await
    }
}
