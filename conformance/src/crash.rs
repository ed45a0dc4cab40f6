//! The crash test: a child process writes to a bucket with `sync_writes = true`, advancing the
//! watermark and reclaiming, and is killed with SIGKILL at random moments (a share of them while
//! a reclaim runs); the next child reopens the store, checks it against what the killed child
//! acknowledged, and goes on from the applied end it finds.
//!
//! The record stream is a pure function of the seed: the batch starting at offset `o` is always
//! the same records, so any child can rebuild the model of everything below an applied end, and a
//! store restored after a kill must hold exactly a prefix of that stream that ends on a batch
//! boundary (batches are atomic). A child reports on stdout, one line per acknowledged event:
//! `ACK <applied end>` after an `apply` returned, `WREQ <w>` before it asks for a watermark and
//! `WACK <W>` after it returned, `RECLAIM` before a reclaim and `RECLAIMED` after it. The parent
//! kills the child after a random number of acknowledged batches, or right after a `RECLAIM`
//! line, and passes what was acknowledged to the next child, which checks on reopen:
//!
//! - the applied end is the last acknowledged one, or the end of the batch that was in flight
//!   (never in between: no batch is half applied);
//! - `W` is at least the last acknowledged watermark and at most the largest requested;
//! - every key whose newest record is at or above `W` reads back exactly (value or tombstone);
//!   a key whose newest record is covered reads that record or a miss (it may have been
//!   reclaimed), never an older version;
//! - the applied end is the WAL replay offset (`max(W, applied end)`).
//!
//! SIGKILL leaves the operating system's page cache intact, so this shows crash consistency of
//! the process, not of the machine: a write the kernel accepted survives a kill even without an
//! fsync. Power loss is not simulated here.
//!
//! `TIDEMARK_CRASH_KILLS` sets the number of kills (default 30), `TIDEMARK_CRASH_SEED` the seed
//! (default: from the clock; printed either way, so a failure can be replayed).

use std::io::{BufRead, BufReader};
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::Stdio;
use std::time::{SystemTime, UNIX_EPOCH};

use engine_api::rng::SplitMix64;
use engine_api::{Engine, EngineOptions, LocalLookup, WriteBatch};

use crate::child::{self, Role};
use crate::factory::EngineFactory;

/// Kills per backend by default.
pub const DEFAULT_KILLS: u64 = 30;

/// Keys of the stream: few, so that keys are overwritten and deleted often.
const KEYS: u64 = 64;

/// Largest batch of the stream.
const MAX_BATCH: u64 = 24;

/// Environment variables the parent passes to a child.
const ENV_DIR: &str = "TIDEMARK_CRASH_DIR";
const ENV_SEED: &str = "TIDEMARK_CRASH_STREAM_SEED";
const ENV_CHILD_SEED: &str = "TIDEMARK_CRASH_CHILD_SEED";
const ENV_ACKED_END: &str = "TIDEMARK_CRASH_ACKED_END";
const ENV_ACKED_W: &str = "TIDEMARK_CRASH_ACKED_W";
const ENV_MAX_W: &str = "TIDEMARK_CRASH_MAX_W";
const ENV_VERIFY_ONLY: &str = "TIDEMARK_CRASH_VERIFY_ONLY";

/// What the killed children acknowledged, as the next child must find it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Acknowledged {
    /// The applied end after the last `apply` that returned.
    end: u64,
    /// `W` after the last watermark call that returned.
    watermark: u64,
    /// The largest watermark ever requested (returned or not).
    max_requested: u64,
}

/// A line of a child's report, as far as the parent acts on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Event {
    Ack,
    Reclaim,
    Other,
}

impl Acknowledged {
    /// Takes in one line of a child's report.
    fn record(&mut self, line: &str) -> Event {
        let mut words = line.split_whitespace();
        match (
            words.next(),
            words.next().and_then(|n| n.parse::<u64>().ok()),
        ) {
            (Some("ACK"), Some(end)) => {
                self.end = end;
                Event::Ack
            }
            (Some("WREQ"), Some(w)) => {
                self.max_requested = self.max_requested.max(w);
                Event::Other
            }
            (Some("WACK"), Some(w)) => {
                self.watermark = w;
                Event::Other
            }
            (Some("RECLAIM"), None) => Event::Reclaim,
            _ => Event::Other,
        }
    }
}

/// SIGKILL's number, as `ExitStatus::signal` reports it.
const SIGKILL: i32 = 9;

/// One record of the stream.
#[derive(Debug, Clone, PartialEq, Eq)]
struct StreamRecord {
    key: Vec<u8>,
    offset: u64,
    /// `None` for a delete.
    value: Option<Vec<u8>>,
}

/// The batch of the stream that starts at `first`.
fn batch_at(seed: u64, first: u64) -> Vec<StreamRecord> {
    let mut rng = SplitMix64::new(seed ^ first.wrapping_mul(0x9E37_79B9_7F4A_7C15));
    let len = 1 + rng.below(MAX_BATCH);
    (first..first + len)
        .map(|offset| {
            let key = format!("key-{:02}", rng.below(KEYS)).into_bytes();
            let value = (rng.below(8) != 0).then(|| {
                let mut v = format!("value@{offset}:").into_bytes();
                let extra = rng.below(64) as usize;
                v.extend(rng.bytes(extra));
                v
            });
            StreamRecord { key, offset, value }
        })
        .collect()
}

fn to_write_batch(records: &[StreamRecord]) -> WriteBatch {
    let mut batch = WriteBatch::new();
    for r in records {
        match &r.value {
            Some(v) => batch.put(r.key.clone(), v.clone(), r.offset),
            None => batch.delete(r.key.clone(), r.offset),
        };
    }
    batch
}

/// The batch boundaries of the stream up to `end` and the newest record of every key below it.
fn model_below(seed: u64, end: u64) -> Model {
    let mut model = Model::default();
    let mut first = 0;
    while first < end {
        let batch = batch_at(seed, first);
        first += batch.len() as u64;
        model.boundaries.push(first);
        for r in batch {
            model.newest.insert(r.key.clone(), r);
        }
    }
    model
}

#[derive(Debug, Default)]
struct Model {
    /// Ends of the batches, ascending.
    boundaries: Vec<u64>,
    newest: std::collections::BTreeMap<Vec<u8>, StreamRecord>,
}

/// The test: `kills` SIGKILLs of children writing to one store, each followed by a child that
/// checks what it reopened; a last child only checks.
pub fn run<F: EngineFactory>(test_name: &str, factory: &F) {
    if child::role(test_name) == Role::Child {
        child_main(factory);
        return;
    }
    let kills = env_u64("TIDEMARK_CRASH_KILLS").unwrap_or(DEFAULT_KILLS);
    let seed = env_u64("TIDEMARK_CRASH_SEED").unwrap_or_else(|| {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64)
    });
    println!("{test_name}: {kills} kills, TIDEMARK_CRASH_SEED={seed}");
    let tmp = tempfile::tempdir().expect("temporary directory");
    let dir = tmp.path().join("bucket");
    let mut rng = SplitMix64::new(seed);
    let mut acked = Acknowledged::default();
    let mut mid_reclaim = 0;
    for kill in 0..kills {
        // A third of the kills land right after a reclaim began; the rest after a random
        // number of acknowledged batches.
        let during_reclaim = rng.below(3) == 0;
        let after_acks = 1 + rng.below(60);
        let mut child = spawn(test_name, &dir, seed, rng.next_u64(), acked, false);
        let stdout = child.stdout.take().expect("child stdout");
        let mut lines = BufReader::new(stdout).lines();
        let mut acks = 0;
        let mut killed_in_reclaim = false;
        for line in lines.by_ref() {
            let Ok(line) = line else { break };
            match acked.record(&line) {
                Event::Reclaim => killed_in_reclaim = during_reclaim,
                Event::Ack => acks += 1,
                Event::Other => {}
            }
            if killed_in_reclaim || (!during_reclaim && acks >= after_acks) {
                break;
            }
        }
        // SIGKILL on unix: no destructor, no flush, no close runs in the child.
        let _ = child.kill();
        let status = child.wait().expect("wait for the killed child");
        assert_eq!(
            status.signal(),
            Some(SIGKILL),
            "{test_name}: child {kill} ended by itself ({status}), not by the kill (seed {seed})"
        );
        // What it printed before it died was acknowledged too.
        for line in lines.map_while(std::result::Result::ok) {
            acked.record(&line);
        }
        mid_reclaim += u64::from(killed_in_reclaim);
    }
    let out = spawn(test_name, &dir, seed, 0, acked, true)
        .wait_with_output()
        .expect("run the last checking child");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("VERIFIED"),
        "{test_name}: the last check failed (seed {seed}):\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    println!(
        "{test_name}: {kills} kills ({mid_reclaim} during a reclaim), every reopen checked; \
         applied end {} W {} at the last acknowledgement (seed {seed})",
        acked.end, acked.watermark
    );
}

fn spawn(
    test_name: &str,
    dir: &Path,
    seed: u64,
    child_seed: u64,
    acked: Acknowledged,
    verify_only: bool,
) -> std::process::Child {
    let mut command = child::command(test_name);
    command
        .env(ENV_DIR, dir)
        .env(ENV_SEED, seed.to_string())
        .env(ENV_CHILD_SEED, child_seed.to_string())
        .env(ENV_ACKED_END, acked.end.to_string())
        .env(ENV_ACKED_W, acked.watermark.to_string())
        .env(ENV_MAX_W, acked.max_requested.to_string())
        .stdout(Stdio::piped())
        .stderr(if verify_only {
            Stdio::piped()
        } else {
            Stdio::inherit()
        });
    if verify_only {
        command.env(ENV_VERIFY_ONLY, "1");
    }
    command.spawn().expect("start a crash child")
}

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok()?.trim().parse().ok()
}

/// The child: reopen, check against what was acknowledged, then write until killed.
fn child_main<F: EngineFactory>(factory: &F) {
    let var = |name: &str| env_u64(name).unwrap_or_else(|| panic!("{name} not set"));
    let dir = std::env::var_os(ENV_DIR).expect("crash dir");
    let seed = var(ENV_SEED);
    let acked = Acknowledged {
        end: var(ENV_ACKED_END),
        watermark: var(ENV_ACKED_W),
        max_requested: var(ENV_MAX_W),
    };
    // Small sweep chunks: a reclaim takes many transactions, so kills land inside one.
    let options = EngineOptions::default()
        .with_sync_writes(true)
        .with_sweep_chunk_rows(8);
    let engine = factory
        .open(Path::new(&dir), options)
        .unwrap_or_else(|e| panic!("{}: reopen after a kill: {e}", F::NAME));
    check_reopened(&engine, seed, acked);
    println!("VERIFIED {} {}", engine.applied_end(), engine.watermark());
    if std::env::var_os(ENV_VERIFY_ONLY).is_some() {
        return;
    }
    let mut rng = SplitMix64::new(var(ENV_CHILD_SEED));
    loop {
        let first = engine.applied_end();
        let records = batch_at(seed, first);
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

/// The checks of a reopened store (module docs).
fn check_reopened<E: Engine>(engine: &E, seed: u64, acked: Acknowledged) {
    let end = engine.applied_end();
    let w = engine.watermark();
    let model = model_below(seed, end);
    let next_boundary = model_below(seed, acked.end + 1)
        .boundaries
        .last()
        .copied()
        .unwrap_or(0);
    assert!(
        end == acked.end || (end == next_boundary && end > acked.end),
        "applied end {end} after a kill: acknowledged {}, the batch in flight ended at \
         {next_boundary} (seed {seed})",
        acked.end
    );
    assert!(
        model.boundaries.last().copied().unwrap_or(0) == end,
        "applied end {end} is not a batch boundary: a batch was half applied (seed {seed})"
    );
    assert!(
        w >= acked.watermark && w <= acked.max_requested.max(acked.watermark) && w <= end,
        "W {w} after a kill: acknowledged {}, largest requested {}, applied end {end} (seed {seed})",
        acked.watermark,
        acked.max_requested
    );
    assert_eq!(end.max(w), end, "the WAL replay offset is the applied end");
    for k in 0..KEYS {
        let key = format!("key-{k:02}").into_bytes();
        let found = engine
            .lookup(&key)
            .unwrap_or_else(|e| panic!("lookup {k} after a kill: {e} (seed {seed})"));
        let expected = match model.newest.get(&key) {
            None => LocalLookup::Miss,
            Some(r) => match &r.value {
                Some(v) => LocalLookup::Value {
                    offset: r.offset,
                    bytes: v.clone(),
                },
                None => LocalLookup::Tombstone { offset: r.offset },
            },
        };
        let covered = expected.offset().is_some_and(|o| o < w);
        assert!(
            found == expected || (covered && found == LocalLookup::Miss),
            "key {k} after a kill: found {found:?}, the newest record is {expected:?}, W {w} \
             (seed {seed})"
        );
    }
}

/// Stamps the crash test for one backend: `#[test] fn crash()`.
#[macro_export]
macro_rules! crash_case {
    ($factory:expr) => {
        /// SIGKILLs of a writing child (`TIDEMARK_CRASH_KILLS`, default 30; seed printed,
        /// `TIDEMARK_CRASH_SEED` replays it); every reopen is checked.
        #[test]
        fn crash() {
            let name = $crate::child::test_name(module_path!(), "crash");
            $crate::crash::run(&name, &$factory);
        }
    };
}
