//! The generic case functions. Each takes a factory, builds its own [`crate::Harness`] and
//! panics (via assertions) when the backend breaks the contract. They are listed, with the
//! capabilities they need, in [`for_each_case!`](crate::for_each_case).

mod basic;
mod persistence;
pub mod util;

pub use basic::*;
pub use persistence::*;
