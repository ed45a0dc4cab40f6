//! The engine-level crash child: reopen the engine, check it against what the killed child
//! acknowledged, then write, advance the watermark and reclaim until killed.

use tidemark_engine_api::{Engine, LocalLookup};
use tidemark_test_support::rng::SplitMix64;

use super::{
    Acknowledged, ChildEnv, KEYS, batch_at, check_progress, expected_lookup, open_store,
    to_write_batch,
};
use crate::factory::EngineFactory;

/// The engine crash test (module docs of [`crate::crash`]).
pub fn run<F: EngineFactory>(test_name: &str, factory: &F) {
    super::run(test_name, |env| child_main(factory, env));
}

/// The child: reopen, check against what was acknowledged, then write until killed.
fn child_main<F: EngineFactory>(factory: &F, env: ChildEnv) {
    // libtest has printed "test <name> ... " without a newline: end that line, so the first
    // report line the parent reads starts with its own word.
    println!();
    let engine = open_store(factory, &env.dir);
    check_reopened(&engine, env.seed, env.acked);
    println!("VERIFIED {} {}", engine.applied_end(), engine.watermark());
    if env.verify_only {
        return;
    }
    let mut rng = SplitMix64::new(env.child_seed);
    loop {
        let first = engine.applied_end();
        let records = batch_at(env.seed, first);
        let outcome = engine
            .apply(&to_write_batch(&records))
            .unwrap_or_else(|e| panic!("apply at {first}: {e}"));
        println!("ACK {}", outcome.applied_end);
        if rng.below(4) == 0 {
            let lag = rng.below(200);
            let w = outcome.applied_end.saturating_sub(lag);
            println!("WREQ {w}");
            let update = engine
                .advance_watermark(w)
                .unwrap_or_else(|e| panic!("advance to {w}: {e}"));
            println!("WACK {}", update.current);
            if rng.below(3) == 0 {
                println!("RECLAIM");
                engine.reclaim().unwrap_or_else(|e| panic!("reclaim: {e}"));
                println!("RECLAIMED");
            }
        }
    }
}

/// The checks of a reopened engine (module docs of [`crate::crash`]).
fn check_reopened<E: Engine>(engine: &E, seed: u64, acked: Acknowledged) {
    let end = engine.applied_end();
    let w = engine.watermark();
    let model = check_progress(end, w, seed, acked);
    // Without an adopted lake end, W never exceeds the applied end: replay starts at the latter.
    assert_eq!(end.max(w), end, "the WAL replay offset is the applied end");
    for k in 0..KEYS {
        let found = engine
            .lookup(&super::key(k))
            .unwrap_or_else(|e| panic!("lookup {k} after a kill: {e} (seed {seed})"));
        let expected = expected_lookup(&model, k);
        let covered = expected.offset().is_some_and(|o| o < w);
        assert!(
            found == expected || (covered && found == LocalLookup::Miss),
            "key {k} after a kill: found {found:?}, the newest record is {expected:?}, W {w} \
             (seed {seed})"
        );
    }
}
