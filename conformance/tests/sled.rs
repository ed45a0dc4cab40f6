//! sled conformance: the whole suite and the bucket scenarios on the sled backend.

mod sled {
    conformance::engine_cases!(conformance::factories::SledFactory);
    conformance::scale_case!(conformance::factories::SledFactory);
    conformance::headroom_case!(conformance::factories::SledFactory);
    conformance::crash_case!(conformance::factories::SledFactory);
    mod bucket {
        conformance::bucket_cases!(conformance::factories::SledFactory);
    }
}
