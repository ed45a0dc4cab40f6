//! The `tidemark` binary as an operator runs it: `compare` (with cargo feature `compare`) prints
//! and writes its figures; inspection never creates or changes a store,
//! JSON output parses back to what the store holds, and `verify` finds every kind of damage it
//! knows (and exits 1), on every disk backend.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

#[cfg(feature = "compare")]
mod compare;
#[cfg(not(feature = "compare"))]
mod compare_absent;
mod engine_panic;
mod no_store;
mod reclaim;
mod stats;
mod support;
mod verify;
