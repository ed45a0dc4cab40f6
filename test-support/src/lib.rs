//! # Tidemark test support
//!
//! Helpers shared by the workspace's tests, benchmarks and `tidemark compare`, kept out of the
//! engine contract and free of any backend:
//!
//! - [`rng`]: the one deterministic pseudo-random generator;
//! - [`stream`]: deterministic record streams (each record a function of its offset) and a
//!   cursor that hands one out batch by batch;
//! - [`history`]: every write of a WAL, per key, and what a lookup that ran while the WAL end
//!   moved may answer;
//! - [`observe`]: an engine wrapper that observes every reclaim (when it ran, how long it took,
//!   what it removed, and whether one overlapped a given stretch of time).

pub mod history;
pub mod observe;
pub mod rng;
pub mod stream;
