//! Reading the table's snapshots the way a bucket sees them: a [`LakeSnapshot`]'s id is the
//! Iceberg snapshot's *sequence number* (Iceberg snapshot ids are random, sequence numbers grow
//! with every commit), its end offset the bucket's entry in the snapshot's offsets property.

use iceberg::spec::{SnapshotRef, TableMetadata};
use tidemark_bucket::{LakeSnapshot, Result};

use crate::offsets::{BucketEnds, OFFSETS_PROPERTY};

/// The bucket end offsets a snapshot records.
pub(crate) fn ends(snapshot: &SnapshotRef) -> Result<BucketEnds> {
    BucketEnds::decode(
        snapshot
            .summary()
            .additional_properties
            .get(OFFSETS_PROPERTY),
    )
}

/// Every bucket's end offset in the table's current snapshot; none before the first commit.
pub(crate) fn current_ends(metadata: &TableMetadata) -> Result<BucketEnds> {
    match metadata.current_snapshot() {
        Some(snapshot) => ends(snapshot),
        None => Ok(BucketEnds::default()),
    }
}

/// The sequence number of a snapshot as a lake snapshot id (sequence numbers start at 1).
pub(crate) fn sequence(snapshot: &SnapshotRef) -> u64 {
    u64::try_from(snapshot.sequence_number()).unwrap_or(0)
}

/// The snapshot `bucket` sees in `snapshot`.
pub(crate) fn for_bucket(snapshot: &SnapshotRef, bucket: u64) -> Result<LakeSnapshot> {
    Ok(LakeSnapshot::new(
        sequence(snapshot),
        ends(snapshot)?.get(bucket),
    ))
}

/// The live snapshots, oldest commit first.
pub(crate) fn by_sequence(metadata: &TableMetadata) -> Vec<SnapshotRef> {
    let mut snapshots: Vec<SnapshotRef> = metadata.snapshots().cloned().collect();
    snapshots.sort_by_key(|s| s.sequence_number());
    snapshots
}

/// The live snapshot with sequence number `id`.
pub(crate) fn with_sequence(metadata: &TableMetadata, id: u64) -> Option<SnapshotRef> {
    metadata.snapshots().find(|s| sequence(s) == id).cloned()
}

/// The table's current snapshot as `bucket` sees it; the empty lake before the first commit.
pub(crate) fn latest(metadata: &TableMetadata, bucket: u64) -> Result<LakeSnapshot> {
    match metadata.current_snapshot() {
        Some(snapshot) => for_bucket(snapshot, bucket),
        None => Ok(LakeSnapshot::default()),
    }
}
