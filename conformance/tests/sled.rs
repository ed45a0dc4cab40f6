//! sled conformance: the whole suite and the bucket scenarios on the sled backend.

mod sled {
    conformance::engine_cases!(conformance::factories::SledFactory::new());
    conformance::scale_case!(conformance::factories::SledFactory::new());
    conformance::headroom_case!(conformance::factories::SledFactory::new());
    conformance::crash_case!(conformance::factories::SledFactory::new());
    mod bucket {
        conformance::bucket_cases!(conformance::factories::SledFactory::new());
    }
}
