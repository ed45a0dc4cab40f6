//! memory conformance: the whole suite on the reference engine.

mod memory {
    conformance::engine_cases!(conformance::factories::MemoryFactory);
    mod bucket {
        conformance::bucket_cases!(conformance::factories::MemoryFactory);
    }
}
