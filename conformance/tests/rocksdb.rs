//! rocksdb conformance: the whole suite on the RocksDB backend.

mod rocksdb {
    conformance::engine_cases!(conformance::factories::RocksDbFactory);
}
