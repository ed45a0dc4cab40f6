//! sled conformance: the whole suite on the sled backend.

mod sled {
    conformance::engine_cases!(conformance::factories::SledFactory);
}
