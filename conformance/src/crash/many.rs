//! The many-bucket crash test: a child opens [`BUCKETS`] sibling buckets (on the backends that
//! share an instance among siblings, all in one instance) and writes to all of them at once from
//! [`WRITERS`] threads with `sync_writes = true`, advancing their watermarks and reclaiming, and
//! is killed with SIGKILL at random moments; the next child reopens every bucket and checks each
//! against what the killed child acknowledged for it, with the checks of the single-bucket test
//! (module docs of [`crate::crash`]): no acknowledged write lost, no batch half applied, no
//! watermark regressed, every key right.
//!
//! Each bucket has a stream of its own (the test's seed mixed with its index). A child reports
//! one line per acknowledged event, prefixed with the bucket: `B <i> ACK <end>`, `B <i> WREQ <w>`,
//! `B <i> WACK <W>`, `B <i> RECLAIM`. The parent hands what was acknowledged to the next child in
//! a file beside the buckets.
//!
//! `TIDEMARK_CRASH_MANY_KILLS` sets the number of kills (default [`DEFAULT_KILLS`]);
//! `TIDEMARK_CRASH_SEED` the seed, as for the single-bucket test.

use std::io::{BufRead, BufReader};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use tidemark_engine_api::{Engine, EngineOptions, LocalLookup};
use tidemark_test_support::rng::SplitMix64;

use super::{
    Acknowledged, ChildEnv, Event, KEYS, SIGKILL, batch_at, check_progress, env_u64,
    expected_lookup, spawn, to_write_batch,
};
use crate::child::{self, Role};
use crate::factory::EngineFactory;
use crate::skip::notice;

/// Buckets written at once.
pub const BUCKETS: usize = 100;
/// Threads writing them (bucket `i` is written by thread `i % WRITERS`).
pub const WRITERS: usize = 4;
/// Kills by default.
pub const DEFAULT_KILLS: u64 = 8;
/// The file beside the buckets holding what the killed children acknowledged, one line per
/// bucket: `<end> <W> <largest requested>`.
const ACKED_FILE: &str = "acknowledged";

/// The many-bucket crash test (module docs).
pub fn run<F: EngineFactory>(test_name: &str, factory: &F) {
    if child::role(test_name) == Role::Child {
        child_main(factory, ChildEnv::from_env());
        return;
    }
    let kills = env_u64("TIDEMARK_CRASH_MANY_KILLS").unwrap_or(DEFAULT_KILLS);
    let seed = env_u64("TIDEMARK_CRASH_SEED").unwrap_or_else(|| {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64)
    });
    notice(&format!(
        "CRASH {test_name}: {kills} kills of {BUCKETS} buckets written at once, \
         TIDEMARK_CRASH_SEED={seed}"
    ));
    let tmp = tempfile::tempdir().expect("temporary directory");
    let dir = tmp.path().to_path_buf();
    let mut rng = SplitMix64::new(seed);
    let mut acked = vec![Acknowledged::default(); BUCKETS];
    let mut while_busy = 0;
    for kill in 0..kills {
        write_acked(&dir, &acked);
        let when_busy = rng.below(3) == 0;
        let after_acks = 1 + rng.below(40 * BUCKETS as u64);
        let env = ChildEnv {
            dir: dir.clone(),
            seed,
            child_seed: rng.next_u64(),
            acked: Acknowledged::default(),
            verify_only: false,
        };
        let mut child = spawn(test_name, &env);
        let stdout = child.stdout.take().expect("child stdout");
        let mut lines = BufReader::new(stdout).lines();
        let (mut acks, mut killed_busy) = (0, false);
        for line in lines.by_ref() {
            let Ok(line) = line else { break };
            match record(&mut acked, &line) {
                Event::Busy => killed_busy = when_busy && acks > 0,
                Event::Ack => acks += 1,
                Event::Other => {}
            }
            if killed_busy || (!when_busy && acks >= after_acks) {
                break;
            }
        }
        let _ = child.kill();
        let status = child.wait().expect("wait for the killed child");
        assert_eq!(
            status.signal(),
            Some(SIGKILL),
            "{test_name}: child {kill} ended by itself ({status}), not by the kill (seed {seed})"
        );
        for line in lines.map_while(std::result::Result::ok) {
            record(&mut acked, &line);
        }
        while_busy += u64::from(killed_busy);
    }
    write_acked(&dir, &acked);
    let last = ChildEnv {
        dir,
        seed,
        child_seed: 0,
        acked: Acknowledged::default(),
        verify_only: true,
    };
    let out = spawn(test_name, &last)
        .wait_with_output()
        .expect("run the last checking child");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("VERIFIED"),
        "{test_name}: the last check failed (seed {seed}):\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let writes: u64 = acked.iter().map(|a| a.end).sum();
    notice(&format!(
        "CRASH {test_name}: {kills} kills of {BUCKETS} buckets ({while_busy} right after a \
         reclaim began), every bucket checked at every reopen; {writes} records acknowledged \
         in all (seed {seed})"
    ));
}

/// Takes in one line of a child's report for the bucket it names.
fn record(acked: &mut [Acknowledged], line: &str) -> Event {
    let Some(rest) = line.strip_prefix("B ") else {
        return Event::Other;
    };
    let Some((bucket, event)) = rest.split_once(' ') else {
        return Event::Other;
    };
    match bucket.parse::<usize>().ok().and_then(|i| acked.get_mut(i)) {
        Some(a) => a.record(event),
        None => Event::Other,
    }
}

fn write_acked(dir: &Path, acked: &[Acknowledged]) {
    let body: String = acked
        .iter()
        .map(|a| format!("{} {} {}\n", a.end, a.watermark, a.max_requested))
        .collect();
    std::fs::write(dir.join(ACKED_FILE), body).expect("write what was acknowledged");
}

fn read_acked(dir: &Path) -> Vec<Acknowledged> {
    let text = std::fs::read_to_string(dir.join(ACKED_FILE)).expect("read what was acknowledged");
    text.lines()
        .map(|line| {
            let n: Vec<u64> = line
                .split_whitespace()
                .map(|w| w.parse().expect("acknowledged figure"))
                .collect();
            Acknowledged {
                end: n[0],
                watermark: n[1],
                max_requested: n[2],
                lake_end: 0,
            }
        })
        .collect()
}

fn bucket_dir(dir: &Path, i: usize) -> PathBuf {
    dir.join(format!("bucket-{i:03}"))
}

/// Bucket `i`'s stream seed.
fn stream_seed(seed: u64, i: usize) -> u64 {
    seed ^ (i as u64 + 1).wrapping_mul(0xA24B_AED4_963E_E407)
}

/// The child: reopen every bucket, check each, then write to all of them until killed.
fn child_main<F: EngineFactory>(factory: &F, env: ChildEnv) {
    println!();
    let acked = read_acked(&env.dir);
    let options = EngineOptions::default()
        .with_sync_writes(true)
        .with_sweep_chunk_rows(8);
    let engines: Vec<F::Engine> = (0..BUCKETS)
        .map(|i| {
            factory
                .open(&bucket_dir(&env.dir, i), options.clone())
                .unwrap_or_else(|e| panic!("{}: reopen bucket {i} after a kill: {e}", F::NAME))
        })
        .collect();
    for (i, engine) in engines.iter().enumerate() {
        check_reopened(engine, i, stream_seed(env.seed, i), acked[i]);
        // What the reopen found is durable: a batch that was in flight at the kill is now
        // acknowledged, so the next kill may find one more batch beyond it, not two. (The
        // single-bucket test needs no such line: each of its children acknowledges a batch
        // before it is killed; here a bucket may get no write before the kill.)
        println!("B {i} ACK {}", engine.applied_end());
        println!("B {i} WACK {}", engine.watermark());
    }
    println!("VERIFIED {BUCKETS} buckets");
    if env.verify_only {
        return;
    }
    std::thread::scope(|s| {
        for writer in 0..WRITERS {
            let engines = &engines;
            let seed = env.seed;
            let mut rng = SplitMix64::new(env.child_seed ^ writer as u64);
            s.spawn(move || {
                loop {
                    for i in (writer..BUCKETS).step_by(WRITERS) {
                        write_once(&engines[i], i, stream_seed(seed, i), &mut rng);
                    }
                }
            });
        }
    });
}

/// One batch of bucket `i`'s stream, and now and then a watermark change and a reclaim.
fn write_once<E: Engine>(engine: &E, i: usize, seed: u64, rng: &mut SplitMix64) {
    let first = engine.applied_end();
    let records = batch_at(seed, first);
    let outcome = engine
        .apply(&to_write_batch(&records))
        .unwrap_or_else(|e| panic!("bucket {i}: apply at {first}: {e}"));
    println!("B {i} ACK {}", outcome.applied_end);
    if rng.below(4) == 0 {
        let w = outcome.applied_end.saturating_sub(rng.below(100));
        println!("B {i} WREQ {w}");
        let update = engine
            .advance_watermark(w)
            .unwrap_or_else(|e| panic!("bucket {i}: advance to {w}: {e}"));
        println!("B {i} WACK {}", update.current);
        if rng.below(3) == 0 {
            println!("B {i} RECLAIM");
            engine
                .reclaim()
                .unwrap_or_else(|e| panic!("bucket {i}: reclaim: {e}"));
        }
    }
}

/// The checks of one reopened bucket (those of the single-bucket test).
fn check_reopened<E: Engine>(engine: &E, i: usize, seed: u64, acked: Acknowledged) {
    let end = engine.applied_end();
    let w = engine.watermark();
    let model = check_progress(end, w, seed, acked);
    for k in 0..KEYS {
        let found = engine
            .lookup(&super::key(k))
            .unwrap_or_else(|e| panic!("bucket {i}: lookup {k} after a kill: {e} (seed {seed})"));
        let expected = expected_lookup(&model, k);
        let covered = expected.offset().is_some_and(|o| o < w);
        assert!(
            found == expected || (covered && found == LocalLookup::Miss),
            "bucket {i}, key {k} after a kill: found {found:?}, the newest record is \
             {expected:?}, W {w} (stream seed {seed})"
        );
    }
}
