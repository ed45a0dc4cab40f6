//! The factories of the suite: the memory reference engine's, and one generic [`DiskFactory`]
//! for every disk backend, named here once per backend compiled into the suite.

mod disk;
mod memory;

pub use self::disk::DiskFactory;
pub use memory::MemoryFactory;

/// The sled backend's factory.
#[cfg(feature = "sled")]
pub type SledFactory = DiskFactory<tidemark_backend_sled::Sled>;

/// The redb backend's factory.
#[cfg(feature = "redb")]
pub type RedbFactory = DiskFactory<tidemark_backend_redb::Redb>;

/// The RocksDB backend's factory.
#[cfg(feature = "rocksdb")]
pub type RocksDbFactory = DiskFactory<tidemark_backend_rocksdb::RocksDb>;

/// The fjall backend's factory.
#[cfg(feature = "fjall")]
pub type FjallFactory = DiskFactory<tidemark_backend_fjall::Fjall>;
