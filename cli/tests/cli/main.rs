//! The `tidemark` binary as an operator runs it: `compare` prints and writes its figures;
//! inspection never creates or changes a store,
//! JSON output parses back to what the store holds, and `verify` finds every kind of damage it
//! knows (and exits 1), on every disk backend.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

mod compare;
mod engine_panic;
mod no_store;
mod reclaim;
mod stats;
mod support;
mod verify;
