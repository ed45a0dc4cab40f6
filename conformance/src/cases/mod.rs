//! The generic case functions. Each takes a factory, builds its own [`crate::Harness`] and
//! panics (via assertions) when the backend breaks the contract. They are listed, with the
//! capabilities they need, in [`for_each_case!`](crate::for_each_case).

mod apply;
mod basic;
mod batch;
mod concurrent;
mod corrupt;
mod faults;
mod high_water;
mod hostile;
mod hostile_input;
mod input;
pub mod model;
mod open_mode;
mod persistence;
mod reclaim;
mod space;
mod stats;
mod sweeper;
mod unsynced;
pub mod util;
mod verify;
mod watermark;

pub use apply::*;
pub use basic::*;
pub use batch::*;
pub use concurrent::*;
pub use corrupt::*;
pub use faults::*;
pub use high_water::*;
pub use hostile::*;
pub use hostile_input::*;
pub use input::*;
pub use model::model_based;
pub use open_mode::*;
pub use persistence::*;
pub use reclaim::*;
pub use space::*;
pub use stats::*;
pub use sweeper::*;
pub use unsynced::*;
pub use verify::*;
pub use watermark::*;
