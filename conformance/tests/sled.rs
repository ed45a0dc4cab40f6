//! sled conformance: the whole suite and the bucket scenarios on the sled backend.

mod sled {
    tidemark_conformance::engine_cases!(tidemark_conformance::factories::SledFactory::new());
    tidemark_conformance::scale_case!(tidemark_conformance::factories::SledFactory::new());
    tidemark_conformance::headroom_case!(tidemark_conformance::factories::SledFactory::new());
    tidemark_conformance::crash_case!(tidemark_conformance::factories::SledFactory::new());
    mod bucket {
        tidemark_conformance::bucket_cases!(tidemark_conformance::factories::SledFactory::new());
    }
}
