//! Idle buckets release their redb files under a context bound smaller than the buckets open
//! (`tidemark_disk::release`): nothing acknowledged is lost, watermarks and reclaims reach
//! released buckets, the bound holds under concurrency and across a killed process.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

use tidemark_backend_redb::{BackendContext, RedbContext, RedbContextOptions, RedbStorage};
use tidemark_disk::release::checks;

fn bounded(max_open_stores: usize) -> RedbContext {
    RedbContext::new(RedbContextOptions {
        max_open_stores,
        ..RedbContextOptions::default()
    })
    .unwrap()
}

#[test]
fn five_buckets_under_a_bound_of_two() {
    let root = tempfile::tempdir().unwrap();
    checks::round_trip::<RedbStorage>(&bounded(2), root.path(), 5);
}

#[test]
fn readers_and_writers_on_more_buckets_than_the_bound() {
    let root = tempfile::tempdir().unwrap();
    checks::concurrent::<RedbStorage>(&bounded(2), root.path(), 5, 60);
}

#[test]
fn a_killed_process_loses_nothing_acknowledged_while_releasing() {
    let root = tempfile::tempdir().unwrap();
    checks::crash_while_releasing::<RedbStorage>(
        "a_killed_process_loses_nothing_acknowledged_while_releasing",
        || Ok(bounded(2)),
        root.path(),
        5,
        6,
    );
}
