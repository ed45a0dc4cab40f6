//! # Tidemark conformance suite
//!
//! One suite every backend runs: generic case functions over an [`EngineFactory`], a macro that
//! stamps one `#[test]` per case per backend ([`engine_cases!`]), and a model-based property test
//! against [`engine_api::MemoryEngine`]. See `conformance/README.md` for how to add a backend and
//! for the mapping from every clause of the engine contract to the cases that check it.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

pub mod cases;
pub mod factories;
pub mod factory;
pub mod harness;
mod macros;
pub mod skip;

pub use factory::{Capabilities, EngineFactory};
pub use harness::Harness;
pub use skip::{CaseInfo, Need};

for_each_case!(__case_table!());
