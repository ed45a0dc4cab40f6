//! `apply` with arbitrary batches: the fuzzer's bytes are read as batches, watermark requests and
//! reclaims (`tidemark_conformance::hostile_input::steps`) and run on a redb bucket and on the memory reference
//! side by side; any difference or panic is a finding. The stable property test
//! `hostile_batches_match_the_reference` runs the same reader in CI on every backend.
#![no_main]

use tidemark_conformance::EngineFactory;
use tidemark_conformance::factories::DiskFactory;
use tidemark_engine_api::EngineOptions;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let dir = tempfile::tempdir().expect("temporary directory");
    let engine = DiskFactory::<tidemark::redb::RedbStorage>::new()
        .open(&dir.path().join("bucket"), EngineOptions::default())
        .expect("open a redb bucket");
    let steps = tidemark_conformance::hostile_input::steps(data, 64);
    if let Err(difference) = tidemark_conformance::hostile_input::run_against_reference(&engine, &steps) {
        panic!("{difference}");
    }
});
