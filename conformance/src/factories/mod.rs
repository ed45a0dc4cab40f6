//! One [`crate::EngineFactory`] per backend compiled into the suite.

mod memory;
pub use memory::MemoryFactory;

#[cfg(feature = "sled")]
mod sled;
#[cfg(feature = "sled")]
pub use self::sled::{SLED_WINDOW_MULTIPLE, SledFactory};

#[cfg(feature = "redb")]
mod redb;
#[cfg(feature = "redb")]
pub use self::redb::{REDB_WINDOW_MULTIPLE, RedbFactory};

#[cfg(feature = "rocksdb")]
mod rocksdb;
#[cfg(feature = "rocksdb")]
pub use self::rocksdb::{ROCKSDB_WINDOW_MULTIPLE, RocksDbFactory};
