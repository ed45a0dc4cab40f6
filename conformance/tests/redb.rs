//! redb conformance: the whole suite on the redb backend.

mod redb {
    conformance::engine_cases!(conformance::factories::RedbFactory::new());
    conformance::scale_case!(conformance::factories::RedbFactory::new());
    conformance::headroom_case!(conformance::factories::RedbFactory::new());
    conformance::crash_case!(conformance::factories::RedbFactory::new());
    mod bucket {
        conformance::bucket_cases!(conformance::factories::RedbFactory::new());
    }
}
