//! Bucket-layer scenarios: a [`tidemark_bucket::HistoricalBucket`] over each backend, a
//! [`tidemark_bucket::MemoryLake`] and (where the scenario needs it) a
//! [`tidemark_bucket::ReclaimScheduler`], checked against a model of the WAL.
//!
//! [`for_each_bucket_scenario!`](crate::for_each_bucket_scenario) is the **only** list of
//! scenarios. [`bucket_cases!`](crate::bucket_cases) stamps one `#[test]` per scenario at the call
//! site; wrap it in `mod bucket` inside the backend's module so tests read
//! `<backend>::bucket::<scenario>` (as [`disk_suite!`](crate::disk_suite) does for a disk
//! backend):
//!
//! ```text
//! mod memory {
//!     tidemark_conformance::engine_cases!(tidemark_conformance::factories::MemoryFactory);
//!     mod bucket {
//!         tidemark_conformance::bucket_cases!(tidemark_conformance::factories::MemoryFactory);
//!     }
//! }
//! ```
//!
//! Scenarios that reopen a directory need [`crate::Need::Reopen`]; on a backend without it they
//! report `SKIPPED <backend>::bucket::<scenario>: ...` on stderr and pass, like the engine cases.
//! Each stamped test builds its own tokio runtime.

mod continuous;
mod lake_ahead;
mod lake_faults;
pub mod lakes;
mod lookup_many;
mod notifications;
mod ordering;
mod reclaim_faults;
mod reclaim_policy;
mod republish;
mod restart;
mod soak;
pub mod support;

pub use lakes::TestLake;
mod tombstones;

pub use continuous::continuous_writer_with_trailing_lake;
pub use lake_ahead::{
    lake_ahead_across_restart, lake_ahead_delete_stays_deleted,
    lake_ahead_overwrite_never_goes_back, lake_ahead_randomised_trailing_applies,
};
pub use lake_faults::{
    erroring_lake_lookuper, hanging_lake_lookup_times_out, hanging_lake_refresh_times_out,
};
pub use lookup_many::lookup_many_matches_lookup;
pub use notifications::{failed_refresh_leaves_watermark, repeated_and_out_of_order_notifications};
pub use ordering::refresh_ordering_under_slow_refresh;
pub use reclaim_faults::scheduler_retries_failed_reclaims;
pub use reclaim_policy::default_scheduler_reclaims_repeated_offsets_and_gaps;
pub use republish::{
    republish_same_end_refreshes_lookuper, republish_with_failing_refresh,
    snapshot_expiry_under_continuous_writes,
};
pub use restart::{
    lagging_replica_restart_with_retention_distance, leader_change_with_newer_lake_snapshot,
    leader_change_with_older_lake_snapshot, restart_mid_stream,
};
pub use soak::soak;
pub use tombstones::values_and_tombstones_across_watermark;

/// Calls `$callback! { $args  name [Need, ...] "what it checks", ... }` with every bucket
/// scenario. `name` is both the test name and the function in [`crate::bucket`].
#[doc(hidden)]
#[macro_export]
macro_rules! for_each_bucket_scenario {
    ($callback:ident! $args:tt) => {
        $crate::$callback! { $args
            continuous_writer_with_trailing_lake [] "a continuously written bucket, a lake trailing by a moving lag and scheduled reclaims: every lookup answers the model",
            values_and_tombstones_across_watermark [] "values and tombstones on both sides of W, before and after cleanup: a reclaimed tombstone stays deleted, a local tombstone wins over the lake",
            default_scheduler_reclaims_repeated_offsets_and_gaps [] "one batch with repeated offsets and a gap, four fifths covered: the default scheduler (RocksDB: garbage ratio 0.5) reclaims at the first request, never skipping on a low estimate",
            lookup_many_matches_lookup [] "lookup_many answers every key as lookup does (values, tombstones, lake fallbacks, absent), with one lake call for the misses and none for local hits",
            repeated_and_out_of_order_notifications [] "repeated and stale lake progress is ignored and counted; W never decreases; clamped progress advances again later",
            refresh_ordering_under_slow_refresh [] "a held refresh keeps W where it was; lookups racing the publish are always right; a W published without refresh is refused, not answered stale",
            republish_with_failing_refresh [] "a republish whose refresh fails keeps the old snapshot served, publishes nothing and surfaces the error; the retry goes through",
            failed_refresh_leaves_watermark [] "a failed refresh publishes nothing (W, served snapshot, data unchanged); a failing lake lookup is an error",
            hanging_lake_refresh_times_out [] "a refresh that never completes: on_lake_progress and recover return Error::Lake after the configured timeout (paused clock), W unchanged, the previous snapshot still served",
            hanging_lake_lookup_times_out [] "lake lookups that hang: lookup and lookup_many of local misses return Error::Lake after the configured timeout (paused clock); local hits answered; W untouched",
            scheduler_retries_failed_reclaims [Faults] "reclaims failing midway (injected) are retried by the scheduler with backoff and counted (failed, retries, runs); every lookup answers the model; nothing covered is left after the retry",
            soak [] "writers behind one offset sequencer, readers (lookup, lookup_many), a trailing lake and the scheduler at once, bounded by TIDEMARK_SOAK_OPS records: every answer is the model's at an end the lookup could see, no acknowledged write lost, no older version after a newer one, W monotonic",
        }
    };
}

/// Calls `$callback! { $args  name [Need, ...] "what it checks", ... }` with every lake
/// scenario: the bucket scenarios that drive a lake table through its life (commits, compaction,
/// expiry, recovery from its latest snapshot, a lake ahead of the host, a failing lake). Each is
/// generic over the lake ([`TestLake`]): [`bucket_cases!`](crate::bucket_cases) runs them on
/// [`MemoryLake`](tidemark_bucket::lake::MemoryLake) and, with cargo feature `iceberg`,
/// [`iceberg_bucket_cases!`](crate::iceberg_bucket_cases) on an Iceberg table, local or on the
/// shared PostgreSQL and S3-protocol test servers.
#[doc(hidden)]
#[macro_export]
macro_rules! for_each_lake_scenario {
    ($callback:ident! $args:tt) => {
        $crate::$callback! { $args
            republish_same_end_refreshes_lookuper [] "a newer snapshot at the same end offset refreshes the lookuper without moving W (the old one expired); older and repeated ones are ignored and counted; an id newer but ending earlier is refused",
            snapshot_expiry_under_continuous_writes [] "a continuously written bucket while the lake commits, compacts and expires old snapshots: every lookup is answered from a live snapshot, with the model's answer",
            erroring_lake_lookuper [] "a lookuper whose refreshes and lookups fail: every notification is Error::Lake and W never moves; local misses are Error::Lake, local hits still answered; healed, it publishes",
            restart_mid_stream [Reopen] "close and reopen mid-stream, recover from the committed snapshot, replay from the returned offset, continue: same answers as the model",
            leader_change_with_newer_lake_snapshot [Reopen] "a new leader with an older persisted W adopts the newer lake end (also beyond its applied end) and never serves overtaken local versions",
            lagging_replica_restart_with_retention_distance [Reopen] "a lagging replica with a retention distance recovers past its applied end, replays part of the WAL and restarts: no version the lake overtook or deleted is ever served, before or after the restart",
            lake_ahead_overwrite_never_goes_back [] "lake progress beyond the applied end: a key the lake overwrote answers the lake's newest version before and after reclaim and after older records are applied",
            lake_ahead_delete_stays_deleted [] "lake progress beyond the applied end: a key the lake deleted stays deleted when older puts of it are applied",
            lake_ahead_randomised_trailing_applies [] "applies trailing and leading the lake's commits by a varying amount: every lookup answers the newest WAL version up to the later of the applied end and the lake end",
            lake_ahead_across_restart [Reopen] "the lake ahead of the applied end across a stop and restart: recovery, replay and every lookup in between answer the newest version",
            leader_change_with_older_lake_snapshot [Reopen] "a new leader given an older lake snapshot keeps its W and refuses lake answers until the lake catches up",
        }
    };
}

/// One function per lake scenario for lake `$lake`, in a module of its own, so the stamping
/// macros name every scenario by a path with the backend's factory as the only type parameter.
#[doc(hidden)]
#[macro_export]
macro_rules! __lake_scenario_fns {
    (($lake:ty) $($name:ident [$($need:ident),*] $doc:literal,)*) => {
        $(
            #[doc = $doc]
            pub fn $name<F: $crate::EngineFactory>(factory: F) {
                super::$name::<F, $lake>(factory)
            }
        )*
    };
}

/// The lake scenarios on [`MemoryLake`](tidemark_bucket::lake::MemoryLake).
pub mod on_memory_lake {
    crate::for_each_lake_scenario!(__lake_scenario_fns!(tidemark_bucket::lake::MemoryLake));
}

/// The lake scenarios on an Iceberg table ([`lakes::IcebergTestLake`]).
#[cfg(feature = "iceberg")]
pub mod on_iceberg_lake {
    crate::for_each_lake_scenario!(__lake_scenario_fns!(super::lakes::IcebergTestLake));
}

/// The lake scenarios on an Iceberg table with its catalog on PostgreSQL and its warehouse on
/// an S3-protocol server ([`lakes::IcebergSharedTestLake`]).
#[cfg(feature = "iceberg")]
pub mod on_iceberg_shared_lake {
    crate::for_each_lake_scenario!(__lake_scenario_fns!(super::lakes::IcebergSharedTestLake));
}

/// Stamps every bucket scenario for one backend: one `#[test] fn <scenario>()` each; the lake
/// scenarios run on [`MemoryLake`](tidemark_bucket::lake::MemoryLake).
///
/// `$factory` is evaluated once per test; it must implement [`crate::EngineFactory`].
#[macro_export]
macro_rules! bucket_cases {
    ($factory:expr) => {
        $crate::for_each_bucket_scenario!(__stamp_cases!($factory, bucket, "bucket::"));
        $crate::for_each_lake_scenario!(__stamp_cases!($factory, on_memory_lake, "bucket::"));
    };
}

/// Stamps every lake scenario for one backend on an Iceberg table (cargo feature `iceberg`):
/// one `#[test] fn <scenario>()` each.
///
/// - `iceberg_bucket_cases!($factory)`: on a local table ([`lakes::IcebergTestLake`]: SQLite
///   catalog, temporary directory). Wrap it in `mod bucket_iceberg` so tests read
///   `<backend>::bucket_iceberg::<scenario>`.
/// - `iceberg_bucket_cases!(shared: $factory)`: on a shared table
///   ([`lakes::IcebergSharedTestLake`]: PostgreSQL catalog, S3-protocol warehouse, the servers
///   `scripts/lake-servers.sh` starts; without them every test fails saying how to start them).
///   Wrap it in `mod bucket_iceberg_shared` so tests read
///   `<backend>::bucket_iceberg_shared::<scenario>`.
#[cfg(feature = "iceberg")]
#[macro_export]
macro_rules! iceberg_bucket_cases {
    (shared: $factory:expr) => {
        $crate::for_each_lake_scenario!(__stamp_cases!(
            $factory,
            on_iceberg_shared_lake,
            "bucket_iceberg_shared::"
        ));
    };
    ($factory:expr) => {
        $crate::for_each_lake_scenario!(__stamp_cases!(
            $factory,
            on_iceberg_lake,
            "bucket_iceberg::"
        ));
    };
}

crate::for_each_bucket_scenario!(__case_table!(
    SCENARIOS,
    "Every bucket scenario that runs on one lake, in the order `for_each_bucket_scenario!` lists \
     them."
));

crate::for_each_lake_scenario!(__case_table!(
    LAKE_SCENARIOS,
    "Every lake scenario (run on each lake), in the order `for_each_lake_scenario!` lists them."
));
