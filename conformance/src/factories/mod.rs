//! One [`crate::EngineFactory`] per backend compiled into the suite.

mod memory;
pub use memory::MemoryFactory;

#[cfg(feature = "sled")]
mod sled;
#[cfg(feature = "sled")]
pub use self::sled::SledFactory;

#[cfg(feature = "redb")]
mod redb;
#[cfg(feature = "redb")]
pub use self::redb::RedbFactory;

#[cfg(feature = "rocksdb")]
mod rocksdb;
#[cfg(feature = "rocksdb")]
pub use self::rocksdb::RocksDbFactory;
