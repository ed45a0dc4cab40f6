//! rocksdb conformance: the whole suite and the bucket scenarios on the RocksDB backend.

mod rocksdb {
    conformance::engine_cases!(conformance::factories::RocksDbFactory::new());
    conformance::scale_case!(conformance::factories::RocksDbFactory::new());
    conformance::headroom_case!(conformance::factories::RocksDbFactory::new());
    conformance::crash_case!(conformance::factories::RocksDbFactory::new());
    mod bucket {
        conformance::bucket_cases!(conformance::factories::RocksDbFactory::new());
    }
}
