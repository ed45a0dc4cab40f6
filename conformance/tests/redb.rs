//! redb conformance: the whole suite on the redb backend.

mod redb {
    tidemark_conformance::engine_cases!(tidemark_conformance::factories::RedbFactory::new());
    tidemark_conformance::scale_case!(tidemark_conformance::factories::RedbFactory::new());
    tidemark_conformance::headroom_case!(tidemark_conformance::factories::RedbFactory::new());
    tidemark_conformance::crash_case!(tidemark_conformance::factories::RedbFactory::new());
    mod bucket {
        tidemark_conformance::bucket_cases!(tidemark_conformance::factories::RedbFactory::new());
    }
}
