//! rocksdb conformance: the whole suite and the bucket scenarios on the RocksDB backend.

mod rocksdb {
    tidemark_conformance::engine_cases!(tidemark_conformance::factories::RocksDbFactory::new());
    tidemark_conformance::scale_case!(tidemark_conformance::factories::RocksDbFactory::new());
    tidemark_conformance::headroom_case!(tidemark_conformance::factories::RocksDbFactory::new());
    tidemark_conformance::crash_case!(tidemark_conformance::factories::RocksDbFactory::new());
    mod bucket {
        tidemark_conformance::bucket_cases!(tidemark_conformance::factories::RocksDbFactory::new());
    }
}
