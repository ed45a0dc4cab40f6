//! The descriptor headroom scenario: what admission lets in keeps working. Under a lowered soft
//! descriptor limit, buckets of one backend are opened until admission refuses one (or, for
//! buckets that share instances, whose reservation does not grow with each bucket, until the
//! whole budget is open); then every
//! admitted bucket grows (on RocksDB, with small memtables, enough writes for several table files
//! each, all buckets growing together), is reclaimed and flushed, and reads back exactly. Every
//! one of those calls must succeed: admission reserved what each bucket may come to hold, not
//! what it held when it opened. The refusal must be [`Error::ResourceLimit`] naming the limit to
//! raise to and creating nothing; raised to that value, the context admits its whole budget.
//!
//! Descriptors are process-wide, so the scenario runs in a child process of its own
//! ([`crate::child::run_isolated`]).

use tidemark_disk::process;
use tidemark_engine_api::{Engine, EngineOptions, Error, LocalLookup, WriteBatch};

use tidemark_disk::testing::TestedBackend;

use crate::factories::DiskFactory;

/// The soft descriptor limit the buckets are admitted under.
pub const SOFT_LIMIT: u64 = 256;

/// The context's bucket budget: more than fit under [`SOFT_LIMIT`] on every backend, so the
/// descriptor reservation is what refuses.
pub const BUDGET: usize = 300;

/// Write rounds; every bucket gets one batch per round, all buckets in turn.
const ROUNDS: u64 = 8;

/// Records per batch; with [`VALUE_BYTES`] each, one batch fills a 64 KiB memtable.
const RECORDS_PER_ROUND: u64 = 64;

/// Bytes of each value.
const VALUE_BYTES: usize = 1024;

/// The watermark every bucket is given: half its records become covered.
const WATERMARK: u64 = ROUNDS * RECORDS_PER_ROUND / 2;

/// The limit an [`Error::ResourceLimit`] message says to raise to (the number after
/// "to at least"), if it names one.
pub fn limit_named(message: &str) -> Option<u64> {
    let (_, rest) = message.split_once("to at least ")?;
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}

/// The scenario, in this process (see the module documentation).
pub fn run<B: TestedBackend>(factory: &DiskFactory<B>) {
    let name = B::BACKEND;
    let root = tempfile::tempdir().expect("temporary directory");
    let dir = |i: usize| root.path().join(format!("bucket-{i}"));
    let context = factory.growing_context(BUDGET).expect("context");
    let options = EngineOptions::default().with_sync_writes(false);
    process::set_fd_soft_limit(SOFT_LIMIT).expect("lower the soft fd limit");

    // Buckets that share instances reserve the instances' ceilings, not one each: all of the
    // budget may fit, and what they hold is checked against what their instances reserve.
    // So do buckets whose context releases idle stores: a bucket reserves nothing, its open
    // store does, and a store the limit has no room for releases another.
    let shares = factory.bounds(&context, BUDGET).fds_reserved
        < BUDGET as u64 * factory.bounds(&context, 1).fds_reserved
        || tidemark_disk::BackendContext::open_stores(&context).is_some();
    let mut engines = Vec::new();
    let refused = loop {
        let i = engines.len();
        if i == BUDGET {
            assert!(
                shares,
                "{name}: {BUDGET} buckets admitted under a soft limit of {SOFT_LIMIT}, each \
                 reserving its own ceiling"
            );
            break None;
        }
        match factory.open_in(&context, &dir(i), options.clone()) {
            Ok(engine) => engines.push(engine),
            Err(e) => break Some(e),
        }
    };
    let admitted = engines.len();
    assert!(
        admitted >= 2,
        "{name}: only {admitted} buckets admitted under a soft limit of {SOFT_LIMIT}: {refused:?}"
    );

    // Everything admitted grows together, then is reclaimed and flushed, under the same limit;
    // after every step each bucket (or, sharing, all of them) holds no more than reserved.
    let ceiling = factory.bounds(&context, 1).fds_reserved;
    let reserved = factory.bounds(&context, admitted).fds_reserved;
    let mut most = 0;
    let mut within_ceiling = |step: &str| {
        // The kernel names files by their canonical path (a temporary directory may lie behind
        // a symbolic link), and the count must be readable here (Linux).
        let all = process::fds_under(&[&std::fs::canonicalize(root.path()).unwrap()])
            .expect("descriptors can be told apart by directory on this system");
        assert!(
            all.under <= reserved,
            "{name}: {admitted} buckets hold {} descriptors after {step}, above the {reserved} \
             reserved for them",
            all.under
        );
        if shares {
            most = most.max(all.under);
            return;
        }
        for i in 0..admitted {
            let canonical = std::fs::canonicalize(dir(i)).unwrap();
            let count = process::fds_under(&[&canonical])
                .expect("descriptors can be told apart by directory on this system");
            assert!(
                count.under <= ceiling,
                "{name}: bucket {i} holds {} descriptors after {step}, above its ceiling of \
                 {ceiling}",
                count.under
            );
            most = most.max(count.under);
        }
    };
    for round in 0..ROUNDS {
        for (i, engine) in engines.iter().enumerate() {
            engine
                .apply(&batch(i, round))
                .unwrap_or_else(|e| panic!("{name}: bucket {i} of {admitted}, round {round}: {e}"));
        }
        within_ceiling(&format!("round {round}"));
    }
    for (i, engine) in engines.iter().enumerate() {
        grown(engine).unwrap_or_else(|e| panic!("{name}: bucket {i} of {admitted}: {e}"));
    }
    within_ceiling("its reclaim");
    for (i, engine) in engines.iter().enumerate() {
        check(name, engine, i);
    }

    let Some(refused) = refused else {
        println!(
            "fd_headroom {name}: all {BUDGET} buckets admitted under a soft limit of \
             {SOFT_LIMIT} (they share instances reserving {reserved}), grown and reclaimed, \
             holding at most {most} descriptors together"
        );
        match factory.open_in(&context, &dir(BUDGET), options) {
            Err(Error::ResourceLimit { message, .. }) if message.contains("max_buckets") => {}
            Err(e) => panic!("{name}: bucket {BUDGET} beyond a budget of {BUDGET}: {e}"),
            Ok(_) => panic!("{name}: bucket {BUDGET} opened beyond a budget of {BUDGET}"),
        }
        return;
    };
    let text = refused.to_string();
    assert!(
        matches!(refused, Error::ResourceLimit { .. }) && text.contains("ulimit -n"),
        "{name}: bucket {admitted} under a soft limit of {SOFT_LIMIT} failed without naming \
         the limit: {text}"
    );
    assert!(
        !dir(admitted).exists(),
        "{name}: a refused open created {}",
        dir(admitted).display()
    );
    let raise_to = limit_named(&text)
        .unwrap_or_else(|| panic!("{name}: the refusal names no limit to raise to: {text}"));
    let raised = process::set_fd_soft_limit(raise_to).expect("raise the soft fd limit");
    assert!(
        raised.soft >= Some(raise_to),
        "{name}: the hard limit {:?} is below the {raise_to} the refusal asks for",
        raised.hard
    );
    println!(
        "fd_headroom {name}: {admitted} buckets admitted under a soft limit of {SOFT_LIMIT}, grown \
         and reclaimed, each holding at most {most} descriptors (ceiling {ceiling}); bucket \
         {admitted} refused ({text}); raised to {raise_to}"
    );

    // Raised as the message says, the whole budget opens; one more is the budget's refusal.
    for i in admitted..BUDGET {
        let engine = factory
            .open_in(&context, &dir(i), options.clone())
            .unwrap_or_else(|e| {
                panic!("{name}: bucket {i} of {BUDGET} under the raised limit {raise_to}: {e}")
            });
        engines.push(engine);
    }
    match factory.open_in(&context, &dir(BUDGET), options) {
        Err(Error::ResourceLimit { message, .. }) if message.contains("max_buckets") => {}
        Err(e) => panic!("{name}: bucket {BUDGET} beyond a budget of {BUDGET}: {e}"),
        Ok(_) => panic!("{name}: bucket {BUDGET} opened beyond a budget of {BUDGET}"),
    }
}

/// Round `round` of bucket `i`: [`RECORDS_PER_ROUND`] new keys at the next offsets.
fn batch(i: usize, round: u64) -> WriteBatch {
    let mut batch = WriteBatch::new();
    for j in round * RECORDS_PER_ROUND..(round + 1) * RECORDS_PER_ROUND {
        let (key, value) = record(i, j);
        batch.put(key, value, j);
    }
    batch
}

/// Record `j` of bucket `i`: a key of its own and a value that names both.
fn record(i: usize, j: u64) -> (Vec<u8>, Vec<u8>) {
    let mut value = format!("bucket {i} record {j} ").into_bytes();
    value.resize(VALUE_BYTES, b'.');
    (format!("k{j:05}").into_bytes(), value)
}

/// A grown bucket's watermark advanced over half its records, reclaimed and flushed; the
/// reclaim must remove exactly the covered records.
fn grown<E: Engine>(engine: &E) -> tidemark_engine_api::Result<()> {
    crate::bucket_checks::advance_and_reclaim_exactly(engine, WATERMARK)?;
    engine.flush()
}

/// Every record of bucket `i`: covered ones gone, the rest exact.
fn check<E: Engine>(name: &str, engine: &E, i: usize) {
    for j in 0..ROUNDS * RECORDS_PER_ROUND {
        let (key, value) = record(i, j);
        let expected = if j < WATERMARK {
            LocalLookup::Miss
        } else {
            LocalLookup::Value {
                offset: j,
                bytes: value,
            }
        };
        crate::bucket_checks::assert_record(name, engine, i, j, &key, &expected);
    }
}

/// Runs [`run`] in a child process of its own: the test binary re-executed for the one test
/// `test_name` (see [`crate::child::run_isolated`]).
pub fn run_isolated<B: TestedBackend>(test_name: &str, factory: &DiskFactory<B>) {
    crate::child::run_isolated(test_name, &format!("fd_headroom {}:", B::BACKEND), || {
        run(factory)
    });
}

/// Stamps the headroom test for one backend: `#[test] fn fd_headroom()`, run in a child process.
/// Use it inside the backend's module of the conformance test, whose name is the test's prefix.
#[macro_export]
macro_rules! headroom_case {
    ($factory:expr) => {
        $crate::__child_test! {
            /// Buckets admitted under a soft descriptor limit of 256 all grow, reclaim and flush
            /// without running out of descriptors; the refusal names the limit to raise to, which
            /// then admits the whole budget. In a child process.
            fd_headroom, $crate::headroom::run_isolated, $factory
        }
    };
}
