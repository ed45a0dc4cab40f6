//! memory conformance: the whole suite on the reference engine.

mod memory {
    tidemark_conformance::engine_cases!(tidemark_conformance::factories::MemoryFactory);
    mod bucket {
        tidemark_conformance::bucket_cases!(tidemark_conformance::factories::MemoryFactory);
    }
}
