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
//! Two variants share the stream, the kill loop and the checks: [`engine`] drives the engine
//! directly; [`bucket`] drives a `HistoricalBucket` with the reclaim scheduler running and a lake
//! whose committed snapshots persist in the store's directory, recovers from the lake's latest
//! committed snapshot after each kill, replays the WAL from the offset `recover` returns, and
//! checks every key through the bucket (lake fallback included).
//!
//! `TIDEMARK_CRASH_KILLS` sets the number of kills (default 30), `TIDEMARK_CRASH_SEED` the seed
//! (default: from the clock; printed either way, so a failure can be replayed).

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{SystemTime, UNIX_EPOCH};

use tidemark_engine_api::{LocalLookup, WriteBatch};
use tidemark_test_support::rng::SplitMix64;

use crate::child::{self, Role};
use crate::skip::notice;

pub mod bucket;
pub mod engine;
mod lake;
pub mod many;

/// Kills per backend by default.
pub const DEFAULT_KILLS: u64 = 30;

/// Keys of the stream: few, so that keys are overwritten and deleted often.
const KEYS: u64 = 64;

/// Largest batch of the stream.
const MAX_BATCH: u64 = 24;

/// SIGKILL's number, as `ExitStatus::signal` reports it.
const SIGKILL: i32 = 9;

/// Environment variables the parent passes to a child.
const ENV_DIR: &str = "TIDEMARK_CRASH_DIR";
const ENV_SEED: &str = "TIDEMARK_CRASH_STREAM_SEED";
const ENV_CHILD_SEED: &str = "TIDEMARK_CRASH_CHILD_SEED";
const ENV_ACKED_END: &str = "TIDEMARK_CRASH_ACKED_END";
const ENV_ACKED_W: &str = "TIDEMARK_CRASH_ACKED_W";
const ENV_MAX_W: &str = "TIDEMARK_CRASH_MAX_W";
const ENV_ACKED_LAKE: &str = "TIDEMARK_CRASH_ACKED_LAKE";
const ENV_VERIFY_ONLY: &str = "TIDEMARK_CRASH_VERIFY_ONLY";

/// What the killed children acknowledged, as the next child must find it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Acknowledged {
    /// The applied end after the last `apply` that returned.
    pub end: u64,
    /// `W` after the last watermark change that returned.
    pub watermark: u64,
    /// The largest watermark ever requested (returned or not).
    pub max_requested: u64,
    /// The end of the last lake snapshot whose commit returned (bucket variant).
    pub lake_end: u64,
}

/// A line of a child's report, as far as the parent acts on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Event {
    /// `ACK <applied end>`: an apply returned.
    Ack,
    /// `RECLAIM` (a reclaim begins) or `LAKE <end>` (lake progress begins to be published):
    /// the moments a share of the kills aim at.
    Busy,
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
            (Some("LAKE"), Some(end)) => {
                self.lake_end = end;
                self.max_requested = self.max_requested.max(end);
                Event::Busy
            }
            (Some("RECLAIM"), None) => Event::Busy,
            _ => Event::Other,
        }
    }
}

/// What a child process is given.
#[derive(Debug, Clone)]
pub struct ChildEnv {
    /// The store (and lake) directory.
    pub dir: PathBuf,
    /// The stream's seed.
    pub seed: u64,
    /// The seed of this child's own choices (when to advance, reclaim, commit).
    pub child_seed: u64,
    /// What the killed children acknowledged.
    pub acked: Acknowledged,
    /// Check and exit instead of writing.
    pub verify_only: bool,
}

impl ChildEnv {
    fn from_env() -> Self {
        let var = |name: &str| env_u64(name).unwrap_or_else(|| panic!("{name} not set"));
        ChildEnv {
            dir: PathBuf::from(std::env::var_os(ENV_DIR).expect("crash dir")),
            seed: var(ENV_SEED),
            child_seed: var(ENV_CHILD_SEED),
            acked: Acknowledged {
                end: var(ENV_ACKED_END),
                watermark: var(ENV_ACKED_W),
                max_requested: var(ENV_MAX_W),
                lake_end: var(ENV_ACKED_LAKE),
            },
            verify_only: std::env::var_os(ENV_VERIFY_ONLY).is_some(),
        }
    }
}

/// One record of the stream.
#[derive(Debug, Clone, PartialEq, Eq)]
struct StreamRecord {
    key: Vec<u8>,
    offset: u64,
    /// `None` for a delete.
    value: Option<Vec<u8>>,
}

/// The key with index `k`.
fn key(k: u64) -> Vec<u8> {
    format!("key-{k:02}").into_bytes()
}

/// The batch of the stream that starts at `first`.
fn batch_at(seed: u64, first: u64) -> Vec<StreamRecord> {
    let mut rng = SplitMix64::new(seed ^ first.wrapping_mul(0x9E37_79B9_7F4A_7C15));
    let len = 1 + rng.below(MAX_BATCH);
    (first..first + len)
        .map(|offset| {
            let key = key(rng.below(KEYS));
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

/// The end of the batch that starts at the batch boundary `offset` (the batch in flight after a
/// kill whose last acknowledged applied end is `offset`; every acknowledged end is a boundary).
fn next_boundary(seed: u64, offset: u64) -> u64 {
    offset + batch_at(seed, offset).len() as u64
}

#[derive(Debug, Default)]
struct Model {
    /// Ends of the batches, ascending.
    boundaries: Vec<u64>,
    newest: BTreeMap<Vec<u8>, StreamRecord>,
}

impl Model {
    /// The end of the stream prefix this model holds.
    fn end(&self) -> u64 {
        self.boundaries.last().copied().unwrap_or(0)
    }
}

/// What a local lookup of key `k` must find when the store holds the stream below the model's
/// end: its newest record.
fn expected_lookup(model: &Model, k: u64) -> LocalLookup {
    match model.newest.get(&key(k)) {
        None => LocalLookup::Miss,
        Some(r) => match &r.value {
            Some(v) => LocalLookup::Value {
                offset: r.offset,
                bytes: v.clone(),
            },
            None => LocalLookup::Tombstone { offset: r.offset },
        },
    }
}

/// The checks every reopen makes of the applied end and `W` (module docs); returns the model of
/// the stream below the applied end, which the caller checks the keys against.
fn check_progress(end: u64, w: u64, seed: u64, acked: Acknowledged) -> Model {
    let in_flight = next_boundary(seed, acked.end);
    assert!(
        end == acked.end || (end == in_flight && end > acked.end),
        "applied end {end} after a kill: acknowledged {}, the batch in flight ended at \
         {in_flight} (seed {seed})",
        acked.end
    );
    let model = model_below(seed, end);
    assert_eq!(
        model.end(),
        end,
        "applied end {end} is not a batch boundary: a batch was half applied (seed {seed})"
    );
    assert!(
        w >= acked.watermark && w <= acked.max_requested.max(acked.watermark) && w <= end,
        "W {w} after a kill: acknowledged {}, largest requested {}, applied end {end} (seed {seed})",
        acked.watermark,
        acked.max_requested
    );
    model
}

/// The kill loop, shared by both variants: `kills` SIGKILLs of children writing to one store,
/// each reopened and checked by the next; a last child only checks. `child_main` is what the
/// re-executed test runs in the child.
fn run(test_name: &str, child_main: impl FnOnce(ChildEnv)) {
    if child::role(test_name) == Role::Child {
        child_main(ChildEnv::from_env());
        return;
    }
    let kills = env_u64("TIDEMARK_CRASH_KILLS").unwrap_or(DEFAULT_KILLS);
    let seed = env_u64("TIDEMARK_CRASH_SEED").unwrap_or_else(|| {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64)
    });
    // Straight to stderr: CI shows it even when the test passes (libtest captures println!).
    notice(&format!(
        "CRASH {test_name}: {kills} kills, TIDEMARK_CRASH_SEED={seed}"
    ));
    let tmp = tempfile::tempdir().expect("temporary directory");
    let dir = tmp.path().to_path_buf();
    let mut rng = SplitMix64::new(seed);
    let mut acked = Acknowledged::default();
    let mut while_busy = 0;
    for kill in 0..kills {
        // A third of the kills land right after a reclaim or a lake notification began; the
        // rest after a random number of acknowledged batches.
        let when_busy = rng.below(3) == 0;
        let after_acks = 1 + rng.below(60);
        let env = ChildEnv {
            dir: dir.clone(),
            seed,
            child_seed: rng.next_u64(),
            acked,
            verify_only: false,
        };
        let mut child = spawn(test_name, &env);
        let stdout = child.stdout.take().expect("child stdout");
        let mut lines = BufReader::new(stdout).lines();
        let mut acks = 0;
        let mut killed_busy = false;
        for line in lines.by_ref() {
            let Ok(line) = line else { break };
            match acked.record(&line) {
                Event::Busy => killed_busy = when_busy,
                Event::Ack => acks += 1,
                Event::Other => {}
            }
            if killed_busy || (!when_busy && acks >= after_acks) {
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
        while_busy += u64::from(killed_busy);
    }
    let last = ChildEnv {
        dir,
        seed,
        child_seed: 0,
        acked,
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
    notice(&format!(
        "CRASH {test_name}: {kills} kills ({while_busy} right after a reclaim or lake notification \
         began), every reopen checked; applied end {} W {} at the last acknowledgement \
         (seed {seed})",
        acked.end, acked.watermark
    ));
}

fn spawn(test_name: &str, env: &ChildEnv) -> std::process::Child {
    let a = env.acked;
    let mut command = child::command(test_name);
    command
        .env(ENV_DIR, &env.dir)
        .env(ENV_SEED, env.seed.to_string())
        .env(ENV_CHILD_SEED, env.child_seed.to_string())
        .env(ENV_ACKED_END, a.end.to_string())
        .env(ENV_ACKED_W, a.watermark.to_string())
        .env(ENV_MAX_W, a.max_requested.to_string())
        .env(ENV_ACKED_LAKE, a.lake_end.to_string())
        .stdout(Stdio::piped())
        .stderr(if env.verify_only {
            Stdio::piped()
        } else {
            Stdio::inherit()
        });
    if env.verify_only {
        command.env(ENV_VERIFY_ONLY, "1");
    }
    command.spawn().expect("start a crash child")
}

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok()?.trim().parse().ok()
}

/// Opens the store of a crash test's directory as every child does: synced writes, and small
/// sweep chunks so a reclaim takes many transactions and kills land inside one.
fn open_store<F: crate::EngineFactory>(factory: &F, dir: &Path) -> F::Engine {
    let options = tidemark_engine_api::EngineOptions::default()
        .with_sync_writes(true)
        .with_sweep_chunk_rows(8);
    factory
        .open(&dir.join("bucket"), options)
        .unwrap_or_else(|e| panic!("{}: reopen after a kill: {e}", F::NAME))
}

/// Stamps the crash tests for one backend: `#[test] fn crash()` (the engine),
/// `#[test] fn bucket_crash()` (a `HistoricalBucket` with the scheduler and a persisted lake) and
/// `#[test] fn many_crash()` (100 sibling buckets written at once, [`many`]).
#[macro_export]
macro_rules! crash_case {
    ($factory:expr) => {
        /// SIGKILLs of a child writing to the engine (`TIDEMARK_CRASH_KILLS`, default 30; seed
        /// printed, `TIDEMARK_CRASH_SEED` replays it); every reopen is checked.
        #[test]
        fn crash() {
            let name = $crate::child::test_name(module_path!(), "crash");
            $crate::crash::engine::run(&name, &$factory);
        }

        /// The same through a `HistoricalBucket` with the scheduler running and a lake that
        /// persists its committed snapshots: recover, replay, every key checked by lookups.
        #[test]
        fn bucket_crash() {
            let name = $crate::child::test_name(module_path!(), "bucket_crash");
            $crate::crash::bucket::run(&name, &$factory);
        }

        /// SIGKILLs of a child writing 100 sibling buckets at once from 4 threads
        /// (`TIDEMARK_CRASH_MANY_KILLS`, default 8); every bucket of every reopen is checked.
        #[test]
        fn many_crash() {
            let name = $crate::child::test_name(module_path!(), "many_crash");
            $crate::crash::many::run(&name, &$factory);
        }
    };
}
