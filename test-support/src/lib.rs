//! # Tidemark test support
//!
//! Helpers shared by the workspace's tests, benchmarks and `tidemark compare`, kept out of the
//! engine contract: [`rng`], the one deterministic pseudo-random generator.

pub mod rng;
