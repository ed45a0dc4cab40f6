//! # Tidemark conformance suite
//!
//! One suite every backend runs: generic case functions over an [`EngineFactory`], a macro that
//! stamps one `#[test]` per case per backend, and a model-based property test against
//! [`engine_api::MemoryEngine`].
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

pub mod factories;
pub mod factory;

pub use factory::{Capabilities, EngineFactory};
