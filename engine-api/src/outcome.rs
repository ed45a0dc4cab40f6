//! Result types of engine operations.

use std::time::Duration;

/// What `apply` did with each record of a batch.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ApplyOutcome {
    /// Records written.
    pub applied: u64,
    /// Records skipped because `offset < W` (the lake already has them).
    pub covered: u64,
    /// Records skipped because `offset < applied end` (WAL replay).
    pub already_applied: u64,
    /// Applied end after the batch.
    pub applied_end: u64,
}

/// What the local store holds for a key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LocalLookup {
    /// A value written at `offset`.
    Value {
        /// WAL offset that wrote it.
        offset: u64,
        /// The payload.
        bytes: Vec<u8>,
    },
    /// A tombstone written at `offset`: the key is deleted (authoritative).
    Tombstone {
        /// WAL offset that deleted it.
        offset: u64,
    },
    /// Nothing stored locally.
    Miss,
}

impl LocalLookup {
    /// The offset of the stored record, if any.
    pub fn offset(&self) -> Option<u64> {
        match self {
            LocalLookup::Value { offset, .. } | LocalLookup::Tombstone { offset } => Some(*offset),
            LocalLookup::Miss => None,
        }
    }

    /// Builds a lookup result from decoded stored bytes.
    pub fn from_decoded(decoded: crate::codec::Decoded<'_>) -> Self {
        match decoded {
            crate::codec::Decoded::Value { offset, payload } => LocalLookup::Value {
                offset,
                bytes: payload.to_vec(),
            },
            crate::codec::Decoded::Tombstone { offset } => LocalLookup::Tombstone { offset },
        }
    }
}

/// Result of `advance_watermark`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WatermarkUpdate {
    /// Watermark before the call.
    pub previous: u64,
    /// The value the caller asked for.
    pub requested: u64,
    /// Watermark after the call (`previous` when nothing moved).
    pub current: u64,
    /// Whether the watermark moved.
    pub moved: bool,
}

impl WatermarkUpdate {
    /// An update that changed nothing.
    pub fn unchanged(current: u64, requested: u64) -> Self {
        WatermarkUpdate {
            previous: current,
            requested,
            current,
            moved: false,
        }
    }
}

/// Result of `reclaim`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReclaimReport {
    /// The exclusive threshold in force when the reclaim started (`W - D`).
    pub threshold: u64,
    /// Values physically removed.
    pub values_removed: u64,
    /// Tombstones physically removed.
    pub tombstones_removed: u64,
    /// Corrupt entries met and kept.
    pub corrupt_kept: u64,
    /// Bytes on disk before.
    pub bytes_before: u64,
    /// Bytes on disk after.
    pub bytes_after: u64,
    /// Bytes the reclaim wrote to storage, as the backend measures it: on RocksDB the table
    /// files its compaction wrote (from RocksDB's file metadata), so `bytes_rewritten ÷
    /// (bytes_before − bytes_after)` is the write amplification of reclamation. `None` where the
    /// backend does not measure it: the B-tree sweepers remove rows in place, rewriting only the
    /// pages that held them.
    pub bytes_rewritten: Option<u64>,
    /// Wall time the reclaim took.
    pub duration: Duration,
}

impl ReclaimReport {
    /// Values plus tombstones removed.
    pub fn removed(&self) -> u64 {
        self.values_removed + self.tombstones_removed
    }
}
