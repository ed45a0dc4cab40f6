//! Retrying a commit that lost the catalog's compare-and-swap to another writer: the loser
//! reloads the table, recomputes what it commits from the table that won (the merged bucket
//! ends, the files a compaction keeps, the snapshots an expiry removes) and tries again, after a
//! short randomised pause so that writers who collided do not collide again in step.

use std::time::Duration;

use iceberg::ErrorKind;
use tidemark_bucket::Error;

/// Attempts of one commit before it gives up: each lost attempt means another writer's commit
/// landed, so the table moves on whatever happens.
pub(crate) const MAX_ATTEMPTS: u32 = 64;

/// Whether `e` is a commit that lost the swap (the table is unchanged by it).
pub(crate) fn lost(e: &iceberg::Error) -> bool {
    e.kind() == ErrorKind::CatalogCommitConflicts
}

/// Waits before retry `attempt` (1 for the first): within a window of 2 ms doubled per
/// attempt, at most 100 ms, at a random point of that window.
pub(crate) async fn pause(attempt: u32) {
    let window_us = (1_000u64 << attempt.min(7)).min(100_000);
    // A version 7 UUID's last eight bytes are random.
    let mut low = [0u8; 8];
    low.copy_from_slice(&uuid::Uuid::now_v7().as_bytes()[8..]);
    let random = u64::from_le_bytes(low);
    tokio::time::sleep(Duration::from_micros(random % window_us.max(1))).await;
}

/// The error of a commit that lost `MAX_ATTEMPTS` times.
pub(crate) fn gave_up(what: &str) -> Error {
    Error::lake(format!(
        "{what} lost to other writers' commits {MAX_ATTEMPTS} times in a row; try again"
    ))
}
