//! rocksdb conformance: the whole suite and the bucket scenarios on the RocksDB backend.

mod rocksdb {
    conformance::engine_cases!(conformance::factories::RocksDbFactory);
    conformance::scale_case!(conformance::factories::RocksDbFactory);
    conformance::headroom_case!(conformance::factories::RocksDbFactory);
    conformance::crash_case!(conformance::factories::RocksDbFactory);
    mod bucket {
        conformance::bucket_cases!(conformance::factories::RocksDbFactory);
    }
}
