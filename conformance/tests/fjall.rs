//! fjall conformance: the whole suite and the bucket scenarios on the fjall backend.

mod fjall {
    conformance::engine_cases!(conformance::factories::FjallFactory::new());
    conformance::scale_case!(conformance::factories::FjallFactory::new());
    conformance::headroom_case!(conformance::factories::FjallFactory::new());
    conformance::crash_case!(conformance::factories::FjallFactory::new());
    mod bucket {
        conformance::bucket_cases!(conformance::factories::FjallFactory::new());
    }
}
