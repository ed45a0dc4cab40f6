//! redb conformance: the whole suite on the redb backend.

mod redb {
    conformance::engine_cases!(conformance::factories::RedbFactory);
    conformance::scale_case!(conformance::factories::RedbFactory);
    conformance::headroom_case!(conformance::factories::RedbFactory);
    conformance::crash_case!(conformance::factories::RedbFactory);
    mod bucket {
        conformance::bucket_cases!(conformance::factories::RedbFactory);
    }
}
