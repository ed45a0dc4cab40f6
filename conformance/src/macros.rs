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
            // persistence
            reopen_restores_data [Reopen] "reopen restores values, tombstones, misses, W and the applied end",
        }
    };
}

/// Stamps the whole engine conformance suite for one backend: one `#[test] fn <case>()` per
/// case plus `capability_report`. Wrap it in `mod <backend> { ... }` so test names read
/// `<backend>::<case>`:
///
/// ```text
/// mod memory {
///     conformance::engine_cases!(conformance::factories::MemoryFactory);
/// }
/// ```
///
/// `$factory` is evaluated once per test; it must implement [`crate::EngineFactory`].
#[macro_export]
macro_rules! engine_cases {
    ($factory:expr) => {
        $crate::for_each_case!(__stamp_engine_cases!($factory));
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __stamp_engine_cases {
    (($factory:expr) $($name:ident [$($need:ident),*] $doc:literal,)*) => {
        $(
            #[doc = $doc]
            #[test]
            fn $name() {
                $crate::skip::run_case(
                    $factory,
                    stringify!($name),
                    &[$($crate::Need::$need),*],
                    $crate::cases::$name,
                );
            }
        )*

        /// Prints which cases this backend skips and why.
        #[test]
        fn capability_report() {
            $crate::skip::report_capabilities(&$factory);
        }
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __case_table {
    (() $($name:ident [$($need:ident),*] $doc:literal,)*) => {
        /// Every case of the suite, in the order [`for_each_case!`](crate::for_each_case) lists
        /// them.
        pub const CASES: &[$crate::CaseInfo] = &[
            $($crate::CaseInfo {
                name: stringify!($name),
                needs: &[$($crate::Need::$need),*],
                doc: $doc,
            },)*
        ];
    };
}
