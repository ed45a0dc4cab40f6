//! The one case list and the macros that stamp it.
//!
//! [`for_each_case!`](crate::for_each_case) is the **only** place cases are listed. It hands the
//! list to a callback macro: [`engine_cases!`](crate::engine_cases) stamps one `#[test]` per case
//! at the call site, and the crate itself builds [`CASES`](crate::CASES), the documented list
//! used by the capability report and checked against `conformance/README.md`.

/// Calls `$callback! { $args  name [Need, ...] "what it checks", ... }` with every case.
///
/// Each entry is `name [needs] "doc"`: `name` is both the test name and the function in
/// [`crate::cases`]; `needs` are [`crate::Need`] variants the backend must provide, or the case
/// is reported as skipped.
#[doc(hidden)]
#[macro_export]
macro_rules! for_each_case {
    ($callback:ident! $args:tt) => {
        $crate::$callback! { $args
            // basics
            put_then_lookup [] "a put is found with its offset and bytes; other keys miss",
            overwrite_returns_newest [] "later writes of a key replace earlier ones (value, tombstone, value)",
            binary_keys_and_values [] "arbitrary binary keys and values (NUL, 0xff, prefixes, empty value) round-trip",
            max_size_key_and_value [] "a 64 KiB key and a 64 MiB value are accepted and read back intact",
            tombstone_distinct_from_miss [] "a delete stores a tagged tombstone, distinct from a miss, even for a never-written key",
            fresh_engine_is_empty [] "a new engine has W = 0, applied end 0, no entries, zero counters",
            flush_succeeds [] "flush succeeds on an empty and a written engine and changes nothing",
            // batches
            batch_applies_every_record [] "every record of a batch is applied; outcome and applied end say so",
            batch_same_key_last_wins [] "the same key twice in a batch: the last record wins",
            batch_offsets_with_gaps [] "offsets may skip; the applied end follows the highest; a gap offset is already applied",
            empty_batch_is_noop [] "an empty batch writes nothing and reports the unchanged applied end",
            // skipped records
            already_applied_skipped_and_counted [] "records below the applied end are skipped, counted and not written",
            covered_skipped_and_counted [] "records below W are skipped and counted as covered (before already-applied)",
            wal_replay_is_idempotent [] "replaying the whole WAL, before and after a reclaim, changes nothing",
            // watermark
            watermark_advances_and_reports [] "advance_watermark reports previous / requested / current / moved",
            watermark_repeat_and_stale_are_noops [] "repeated and stale watermark requests change nothing and say so",
            watermark_clamped_to_applied_end [] "W becomes min(w, applied end); an empty engine stays at 0",
            advance_does_not_reclaim [] "advancing W does not reclaim: covered entries stay readable until reclaim",
            adopt_lake_watermark_unclamped [] "adopt_lake_watermark raises W past the applied end, monotonic; later records below it are covered",
            // reclaim
            reclaim_removes_exactly_covered [] "reclaim removes exactly the covered values and tombstones and nothing else",
            reclaim_is_incremental [] "a later reclaim removes only what became covered since",
            reclaim_with_zero_watermark_removes_nothing [] "with W = 0 reclaim removes nothing",
            retention_distance_keeps_margin [] "retention distance D: reclaim removes offset < W - D (saturating)",
            rewritten_key_survives_reclaim [] "a key rewritten above W survives the reclaim of its old version",
            older_version_never_reappears [] "after the newest version of a key is reclaimed, no older version (settled deep) reappears",
            reclaim_below_removes_exactly_below_threshold [] "reclaim_below(t) removes exactly offset < min(t, W), ignoring D; never touches >= W; reports and counts like reclaim",
            reclaim_below_purges_a_lagging_replica [] "after adopt_lake_watermark past the applied end, reclaim_below(W) removes every local entry despite D; replayed records survive",
            // stats
            stats_counters_match_operations [] "stats and counters match exactly what happened",
            live_entries_exact [ExactLiveEntries] "live_entries counts values and tombstones exactly",
            reclaim_report_consistent [] "reclaim report: threshold, counts, sane byte fields, counters agree",
            covered_estimate_never_low_with_repeated_offsets_and_gaps [] "one batch that repeats an offset and skips one: the covered estimate, reclaimable entries and bytes and the garbage ratio never read low, before and after a reclaim cuts the batch and after a reopen",
            // space on disk
            bytes_on_disk_bounded_by_the_window [Files] "a long stream (100,000 records of 150-byte values over 10M keys, 5 % deletes) with W trailing 10,000 records behind and a reclaim every 2,000: bytes on disk over the last half and at the end stay within the backend's stated multiple of the uncovered window's bytes plus the empty store; then every key answers its latest record in the window, a miss below W",
            covered_bucket_gives_its_space_back [Files] "a bucket of 60,000 records with ever-new keys, absorbed by the lake in ten watermark steps with a reclaim each: once wait_for_background_work returns its bytes on disk are at most 2 x the empty store + 1 MiB and no key answers; it still takes writes and (where it reopens) keeps W, the new writes and its size across a reopen",
            // corruption
            corrupt_value_lookup_names_key [RawInjection] "lookup of an undecodable value is Error::Corrupt naming the key",
            reclaim_keeps_and_counts_corrupt [RawInjection] "reclaim keeps and counts undecodable values",
            damaged_entries_are_never_served [RawInjection] "a format-2 entry with any byte damaged, or stored under another key, is Corrupt (checksum mismatch); a tag at or above the applied end is Corrupt; format-1 entries still read",
            // the offset-index sweeper
            sweep_visits_only_covered_index_rows [OffsetIndex] "a sweep visits exactly the covered index rows (not the table), in bounded chunks, and drops stale rows of overwritten keys",
            purge_sweep_ignores_distance_and_drops_stale_rows [OffsetIndex] "a purge sweep ignores the retention distance, drops stale index rows, keeps the newer tombstone and never passes W",
            unreadable_index_rows_are_kept_and_counted [OffsetIndex] "an index row too short to name an entry is kept and counted by every sweep, never deleted",
            unsynced_writes_survive_a_clean_close [Reopen] "with sync_writes=false, batches and a tombstone applied after the last durable point (flush, adopted W) survive a clean close",
            copies_of_an_unsynced_store_open_to_a_durable_prefix [Reopen, Files, SelfContained] "lost unsynced writes: copies of a live sync_writes=false store taken between calls open to whole-batch prefixes no shorter than the last watermark change, W as it was, every key right; replay restores the rest",
            // injected storage faults
            failed_commit_writes_nothing [Faults] "an apply whose commit fails (a full disk) returns the error and writes nothing, also across a reopen; the retry applies once",
            failed_watermark_write_keeps_w [Faults] "a watermark change whose durable write fails returns the error, W stays (reclaim, reopen); a retry moves it",
            failed_reclaim_midway_keeps_uncovered [Faults] "a reclaim failing midway returns the error, every uncovered entry intact, only covered ones gone; the next reclaim finishes",
            storage_panic_fails_the_store [Faults] "a storage panicking in a commit, a watermark write, a reclaim or a flush (as on damaged files): the call returns StoreFailed, nothing is poisoned, every later write is StoreFailed while lookups, stats and verify work; a reopen restores a working store with every acknowledged write",
            // input limits
            invalid_input_rejected_nothing_written [] "empty key, key > 64 KiB, value > 64 MiB, offsets backwards, offset u64::MAX: InvalidInput, nothing written",
            lookup_rejects_invalid_keys [] "lookup with an empty or oversized key is InvalidInput",
            hostile_batches_match_the_reference [] "proptest: arbitrary bytes read as batches (keys and values around the limits, offsets backwards or u64::MAX), watermarks and reclaims agree with MemoryEngine; nothing panics",
            lookup_inline_agrees_with_lookup [] "lookup_inline answers what lookup does whenever it answers, and answers a key just written",
            largest_offset_accepted [] "offset u64::MAX - 1 works end to end (applied end and W of u64::MAX)",
            // persistence
            reopen_restores_data [Reopen] "reopen restores values, tombstones, misses, W and the applied end",
            covered_estimate_survives_reopen [Reopen] "the covered estimate (stats and reclaimable) survives a reopen and never reads low; a reclaim then removes what it counted",
            watermark_durable_across_reopen [Reopen] "W (advanced or adopted) and the applied end survive reopen on their own",
            replay_after_reopen_is_idempotent [Reopen] "after reopen, replaying the WAL is idempotent",
            reclaim_after_reopen [Reopen] "reclaim after reopen removes exactly the covered entries; they stay gone",
            missing_directory_created [Reopen] "a missing directory (and its parents) is created",
            foreign_directory_rejected [Reopen] "another backend's, a newer format's or foreign files' directory is a clear error",
            open_existing_creates_nothing [OpenExisting] "an open requiring an existing store of a missing path, an empty directory or a bare marker is NoStore and creates nothing",
            read_only_open_reads_and_refuses_writes [OpenExisting] "a read-only open reads data, W and the applied end, refuses every write with ReadOnly and changes nothing (no file at all where the engine opens read-only)",
            must_exist_open_writes [OpenExisting] "an open requiring an existing store opens it read-write",
            // the offline check
            verify_clean_store [] "verify of a consistent store is clean and counts values, tombstones, covered entries and (offset index) rows and stale rows",
            verify_finds_undecodable_values [RawInjection] "verify finds every undecodable value with its key, and nothing else; it repairs nothing",
            verify_finds_tags_at_or_above_applied_end [RawInjection] "verify finds every entry tagged at or above the applied end, and nothing else",
            verify_reports_lagging_watermark_without_damage [] "W above the applied end (an adopted lake end) is reported, not counted as damage",
            verify_finds_index_damage [OffsetIndex] "verify finds unparsable index rows, index rows without their data, and data rows without their index row",
            // damage and rollback detection
            high_water_record_refuses_rollback [Files] "the high-water record follows advance, adopt, flush and close; a store below it is RolledBack and a damaged record Damaged in every open mode; a deleted one is recorded again",
            // hostile files
            hostile_files_after_clean_close [Files, SelfContained] "each file of a cleanly closed store deleted, truncated, zeroed or overwritten: the open (in a child process) is a clear error, or the store reads back its closed state with damaged entries reported as Corrupt; never a panic, an abort, an older state or a wrong value",
            hostile_files_after_crash [Files, SelfContained] "the same for a store whose writer died without closing: a clear error, or a state between its high-water record and its last acknowledged write, every entry right for it or reported",
            hostile_byte_flips [Files, SelfContained] "one byte flipped at each of 200 positions spread over the files of a cleanly closed store whose newest versions lie under later writes (400 keys written twice, then hot keys): each open (in a child process) is a clear error, or the store reads back its closed state with damaged entries reported (Corrupt, or a clear refusal where the damage is in the engine's own structures); never an older version of a key or a miss of a live one",
            // concurrency and the model
            concurrent_apply_reclaim_lookup [] "writer, watermark-advancing reclaimer and readers at once: nothing uncovered lost, no older version seen",
            model_based [] "proptest: random apply / advance / adopt / reclaim / reopen / lookup sequences match MemoryEngine step by step",
        }
    };
}

/// Stamps the whole engine conformance suite for one backend: one `#[test] fn <case>()` per
/// case plus `capability_report`. Wrap it in `mod <backend> { ... }` so test names read
/// `<backend>::<case>`:
///
/// ```text
/// mod memory {
///     tidemark_conformance::engine_cases!(tidemark_conformance::factories::MemoryFactory);
/// }
/// ```
///
/// `$factory` is evaluated once per test; it must implement [`crate::EngineFactory`].
#[macro_export]
macro_rules! engine_cases {
    ($factory:expr) => {
        $crate::for_each_case!(__stamp_cases!($factory, cases, ""));

        /// Prints which cases this backend skips and why.
        #[test]
        fn capability_report() {
            $crate::skip::report_capabilities(&$factory);
        }
    };
}

/// Stamps one `#[test]` per entry of a case list (engine cases or bucket scenarios): the test
/// `name` runs `$crate::$module::name` through [`crate::skip::run_case`], reported as
/// `$prefix` + `name`.
#[doc(hidden)]
#[macro_export]
macro_rules! __stamp_cases {
    (($factory:expr, $module:ident, $prefix:expr) $($name:ident [$($need:ident),*] $doc:literal,)*) => {
        $(
            #[doc = $doc]
            #[test]
            fn $name() {
                $crate::skip::run_case(
                    $factory,
                    concat!($prefix, stringify!($name)),
                    &[$($crate::Need::$need),*],
                    $crate::$module::$name,
                );
            }
        )*
    };
}

/// Builds the documented table `$table` of a case list, in the order the list gives.
#[doc(hidden)]
#[macro_export]
macro_rules! __case_table {
    (($table:ident, $table_doc:literal) $($name:ident [$($need:ident),*] $doc:literal,)*) => {
        #[doc = $table_doc]
        pub const $table: &[$crate::CaseInfo] = &[
            $($crate::CaseInfo {
                name: stringify!($name),
                needs: &[$($crate::Need::$need),*],
                doc: $doc,
            },)*
        ];
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __case_fns {
    (() $($name:ident [$($need:ident),*] $doc:literal,)*) => {
        /// Every case function for factory type `F`, with its entry in [`CASES`] (same order), so
        /// tools and self-tests can run the whole suite on an engine without the macro.
        pub fn all_cases<F: $crate::EngineFactory>() -> Vec<(&'static $crate::CaseInfo, fn(F))> {
            let fns: Vec<fn(F)> = vec![$($crate::cases::$name::<F>,)*];
            CASES.iter().zip(fns).collect()
        }
    };
}

/// Stamps `#[test] fn $name()` that hands its full test name and `$factory` to `$run` (a
/// `run_isolated` that re-executes the test binary for that one test, see
/// [`crate::child::run_isolated`]). Used by the per-backend macros of the tests that run in a
/// child process of their own.
#[doc(hidden)]
#[macro_export]
macro_rules! __child_test {
    ($(#[$attr:meta])* $name:ident, $run:path, $factory:expr) => {
        $(#[$attr])*
        #[test]
        fn $name() {
            let name = $crate::child::test_name(module_path!(), stringify!($name));
            $run(&name, &$factory);
        }
    };
}
