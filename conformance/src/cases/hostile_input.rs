//! Hostile input as a property test: the inputs of the `apply` fuzz target, on stable.

use proptest::collection::vec;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestError, TestRunner};

use crate::cases::model::{CASES_ENV, configured_cases};
use crate::hostile_input::{run_against_reference, steps};
use crate::{EngineFactory, Harness};

/// Steps read from one input at most (a fuzz input may be long).
const MAX_STEPS: usize = 64;

/// Random bytes read as batches (keys and values of any length around the limits, offsets that
/// jump, repeat, go backwards or reach `u64::MAX`), watermark requests and reclaims: every
/// outcome and every key agree with [`tidemark_engine_api::MemoryEngine`], and nothing panics.
pub fn hostile_batches_match_the_reference<F: EngineFactory>(factory: F) {
    let factory = std::sync::Arc::new(factory);
    let cases = configured_cases();
    let mut runner = TestRunner::new(Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    });
    let result = runner.run(&vec(any::<u8>(), 0..768), |data| {
        let harness = Harness::shared(std::sync::Arc::clone(&factory), Default::default());
        run_against_reference(harness.engine(), &steps(&data, MAX_STEPS))
            .map_err(proptest::test_runner::TestCaseError::fail)
    });
    match result {
        Ok(()) => crate::skip::notice(&format!(
            "PROPTEST {}::hostile_batches_match_the_reference: {cases} inputs passed \
             (set {CASES_ENV} to change)",
            F::NAME
        )),
        Err(TestError::Fail(reason, data)) => panic!(
            "{}::hostile_batches_match_the_reference failed: {reason}\nminimal input ({} bytes): \
             {data:?}",
            F::NAME,
            data.len()
        ),
        Err(TestError::Abort(reason)) => panic!("aborted: {reason}"),
    }
}
