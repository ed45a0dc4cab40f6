//! Report: what a lake lookup through an Apache Iceberg table costs beside a local hit, and what
//! `lookup_many` saves over single lookups, measured in one run through a `HistoricalBucket`
//! whose lookuper is an `IcebergLookuper` (feature `iceberg`).
//!
//! `cargo run -q -p tidemark-benches --features iceberg --bin lake-cost -- [--backend redb]
//! [--keys 100000] [--commits 10] [--local 10000] [--lookups 2000] [--batches 50]
//! [--lake-warehouse s3://bucket/prefix [--lake-catalog postgres://…] [--lake-storage K=V]…]`
//!
//! With `--lake-warehouse`, the same measurement runs again in the same process on a table
//! there (an S3-protocol object store, say), and the ratios to the local table are printed.
//!
//! Setup (untimed): `--keys` distinct keys with 100-byte values are tiered into bucket 0 of a
//! fresh Iceberg table in `--commits` commits of equal size, the keys shuffled across commits
//! (every commit's file spans the whole key range, as a real log's does). The bucket opens over
//! an empty store, recovers from the empty lake, applies `--local` of those keys again with new
//! values at offsets from the lake's end on (local hits, shadowing the lake's versions), and is
//! told of the lake's latest snapshot. The other keys miss locally: only the lake has them.
//!
//! Timed, for the table as tiered (one file per commit) and then compacted and expired to one
//! file (the same bucket, told of the compacted snapshot):
//!
//! 1. **Local hit**: `lookup` of keys held locally, mean per lookup.
//! 2. **Lake lookup**: `lookup` of keys that miss locally, mean, p50 and p99; interleaved with
//!    it, the same keys through the lookuper alone (no bucket), which shows what the bucket adds.
//! 3. **Batch**: `lookup_many` of 100 distinct keys that all miss locally vs 100 single
//!    `lookup`s of the same keys (which goes first alternates), `--batches` random batches. The
//!    target for the ratio is ≤ 0.2.
//!
//! Every answer is checked (values follow from the key and whether it is held locally), and the
//! bucket's and lookuper's counters must move as the phase says (local hits local, lake lookups
//! from the lake, no retries); a wrong answer or count fails the run. Setup, warm-up, answer
//! checks and drops are outside every timed region.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a report, not library code

use std::collections::HashSet;
use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Parser;
use tidemark::bucket::{HistoricalBucket, LakeLookuper, LakeSnapshot, Progress};
use tidemark::{Backend, BucketStats, EngineOptions, Record, WriteBatch};
use tidemark_lake_iceberg::{IcebergLake, IcebergLookuper, LakeConfig, LookuperCounters};
use tidemark_test_support::rng::SplitMix64;

/// A run fails with an engine, bucket, lake or I/O error, or a wrong answer, each printed as it is.
type Result<T> = std::result::Result<T, Box<dyn std::error::Error + Send + Sync>>;

#[derive(Debug, Parser)]
struct Args {
    /// The local store's backend (memory, sled, redb, rocksdb, fjall).
    #[arg(long, default_value = "redb")]
    backend: Backend,
    /// Distinct keys tiered into the lake.
    #[arg(long, default_value_t = 100_000)]
    keys: u64,
    /// Lake commits the keys are tiered in (one data file each).
    #[arg(long, default_value_t = 10)]
    commits: u64,
    /// Keys written again locally (local hits); the rest miss locally.
    #[arg(long, default_value_t = 10_000)]
    local: u64,
    /// Lookups per single-lookup measurement.
    #[arg(long, default_value_t = 2_000)]
    lookups: u64,
    /// Batches of 100 keys for `lookup_many` vs 100 single lookups.
    #[arg(long, default_value_t = 50)]
    batches: u64,
    /// Also measure, in the same run, a table under this location (`s3://bucket/prefix`), and
    /// report its figures beside the local table's.
    #[arg(long, value_name = "LOCATION")]
    lake_warehouse: Option<String>,
    /// The catalog of the --lake-warehouse table (default: an SQLite file in a temporary
    /// directory).
    #[arg(long, value_name = "URI")]
    lake_catalog: Option<String>,
    /// An object store setting for --lake-warehouse, as an Iceberg file IO property
    /// (s3.endpoint=…, s3.access-key-id=…); repeatable; unset ones come from the AWS_*
    /// environment.
    #[arg(long, value_name = "KEY=VALUE")]
    lake_storage: Vec<String>,
}

/// The lake's bucket.
const BUCKET: u64 = 0;
/// Value bytes.
const VALUE: usize = 100;
/// Keys per `lookup_many`.
const BATCH: usize = 100;
/// Records per local write batch.
const WRITE_BATCH: usize = 1_000;
/// Warm-up lookups of each kind before timing.
const WARM_UP: u64 = 200;
/// Warm-up batches before timing.
const WARM_UP_BATCHES: u64 = 3;

fn key(i: u64) -> Vec<u8> {
    format!("key-{i:010}").into_bytes()
}

/// The value the lake holds for key `i`.
fn lake_value(i: u64) -> Vec<u8> {
    SplitMix64::new(i).bytes(VALUE)
}

/// The value written locally for key `i` (differs from the lake's, so a lake answer for a local
/// key is caught).
fn local_value(i: u64) -> Vec<u8> {
    SplitMix64::new(!i).bytes(VALUE)
}

fn shuffle(items: &mut [u64], rng: &mut SplitMix64) {
    for i in (1..items.len()).rev() {
        let j = rng.below(i as u64 + 1) as usize;
        items.swap(i, j);
    }
}

/// Which keys are held locally, and what every key's answer is.
struct KeySpace {
    /// Keys held locally (with [`local_value`]).
    local: Vec<u64>,
    /// Keys only the lake has (with [`lake_value`]).
    lake_only: Vec<u64>,
    is_local: Vec<bool>,
}

impl KeySpace {
    fn new(keys: u64, local: u64) -> Self {
        let mut order: Vec<u64> = (0..keys).collect();
        shuffle(&mut order, &mut SplitMix64::new(0x10CA1));
        let lake_only = order.split_off(local as usize);
        let mut is_local = vec![false; keys as usize];
        for &i in &order {
            is_local[i as usize] = true;
        }
        KeySpace {
            local: order,
            lake_only,
            is_local,
        }
    }

    fn expected(&self, i: u64) -> Vec<u8> {
        if self.is_local[i as usize] {
            local_value(i)
        } else {
            lake_value(i)
        }
    }

    /// Fails the run on any answer that is not key `i`'s value.
    fn check(&self, what: &str, keys: &[u64], answers: &[Option<Vec<u8>>]) -> Result<()> {
        if keys.len() != answers.len() {
            return Err(
                format!("{what}: {} answers for {} keys", answers.len(), keys.len()).into(),
            );
        }
        for (&i, answer) in keys.iter().zip(answers) {
            let expected = self.expected(i);
            if answer.as_deref() != Some(expected.as_slice()) {
                let got = match answer {
                    None => "none".to_owned(),
                    Some(v) if *v == lake_value(i) => "the lake's value".to_owned(),
                    Some(v) if *v == local_value(i) => "the local value".to_owned(),
                    Some(v) => format!("{} unknown bytes", v.len()),
                };
                return Err(format!(
                    "{what}: wrong answer for {}: {got}, expected the {} value",
                    String::from_utf8_lossy(&key(i)),
                    if self.is_local[i as usize] {
                        "local"
                    } else {
                        "lake's"
                    }
                )
                .into());
            }
        }
        Ok(())
    }
}

/// `n` random keys drawn from `from` (with repeats).
fn sample(from: &[u64], n: u64, rng: &mut SplitMix64) -> Vec<u64> {
    (0..n)
        .map(|_| from[rng.below(from.len() as u64) as usize])
        .collect()
}

/// `n` distinct random keys drawn from `from`.
fn distinct(from: &[u64], n: usize, rng: &mut SplitMix64) -> Vec<u64> {
    let mut seen = HashSet::with_capacity(n);
    let mut out = Vec::with_capacity(n);
    while out.len() < n {
        let i = from[rng.below(from.len() as u64) as usize];
        if seen.insert(i) {
            out.push(i);
        }
    }
    out
}

fn ensure(ok: bool, what: impl FnOnce() -> String) -> Result<()> {
    if ok { Ok(()) } else { Err(what().into()) }
}

/// The Parquet data files under the table's directory.
fn data_files(dir: &Path) -> Result<DataFiles> {
    let mut files = DataFiles::default();
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let path = entry.path();
        if entry.file_type()?.is_dir() {
            let inner = data_files(&path)?;
            files.count += inner.count;
            files.bytes += inner.bytes;
        } else if path.extension().is_some_and(|e| e == "parquet") {
            files.count += 1;
            files.bytes += entry.metadata()?.len();
        }
    }
    Ok(files)
}

/// The Parquet files under a lake directory.
#[derive(Debug, Default, Clone, Copy)]
struct DataFiles {
    count: usize,
    bytes: u64,
}

impl DataFiles {
    fn mib(self) -> f64 {
        self.bytes as f64 / (1024.0 * 1024.0)
    }
}

/// Whether `std::backtrace::Backtrace::capture` captures in this process (as std decides it).
fn backtraces_captured() -> bool {
    let on = |v: std::ffi::OsString| v != "0";
    match std::env::var_os("RUST_LIB_BACKTRACE") {
        Some(v) => on(v),
        None => std::env::var_os("RUST_BACKTRACE").is_some_and(on),
    }
}

fn human(d: Duration) -> String {
    let s = d.as_secs_f64();
    if s >= 1e-3 {
        format!("{:.3} ms", s * 1e3)
    } else {
        format!("{:.2} µs", s * 1e6)
    }
}

fn mean(total: Duration, n: u64) -> Duration {
    total / u32::try_from(n.max(1)).unwrap_or(u32::MAX)
}

/// The `q` quantile of sorted durations (nearest rank).
fn quantile(sorted: &[Duration], q: f64) -> Duration {
    let at = ((sorted.len().saturating_sub(1)) as f64 * q).round() as usize;
    sorted.get(at).copied().unwrap_or_default()
}

/// One configuration's figures.
struct Figures {
    local_mean: Duration,
    lake_mean: Duration,
    lake_p50: Duration,
    lake_p99: Duration,
    lookuper_mean: Duration,
    many_total: Duration,
    singles_total: Duration,
    batches: u64,
    /// Data file reads (object store requests) per lake lookup, per `lookup_many`, and per
    /// single lookup of a batch; and indexes read during the timed phases.
    reads_per_lookup: f64,
    reads_per_many: f64,
    reads_per_batch_single: f64,
    timed_index_reads: u64,
}

/// What the counters moved by during a phase.
fn moved(before: BucketStats, after: BucketStats) -> BucketStats {
    BucketStats {
        local_values: after.local_values - before.local_values,
        lake_fallbacks: after.lake_fallbacks - before.lake_fallbacks,
        distrusted_local: after.distrusted_local - before.distrusted_local,
        lake_failures: after.lake_failures - before.lake_failures,
        local_tombstones: after.local_tombstones - before.local_tombstones,
        ..BucketStats::default()
    }
}

/// Checks a phase's counter moves: the bucket answered `local` lookups locally and `lake` from
/// the lake, the lookuper read `keys` keys in `calls` calls (its own lookups included), nothing
/// was distrusted, failed or retried.
fn check_counts(
    phase: &str,
    bucket: (BucketStats, BucketStats),
    lookuper: (LookuperCounters, LookuperCounters),
    local: u64,
    lake: u64,
    keys: u64,
    calls: u64,
) -> Result<()> {
    let b = moved(bucket.0, bucket.1);
    let (l0, l1) = lookuper;
    let lake_keys = l1.lookups - l0.lookups;
    let lake_calls = l1.lookup_calls - l0.lookup_calls;
    ensure(
        b.local_values == local
            && b.lake_fallbacks == lake
            && b.distrusted_local == 0
            && b.lake_failures == 0
            && b.local_tombstones == 0
            && lake_keys == keys
            && lake_calls == calls
            && l1.retries == 0
            && l1.lookup_failures == 0,
        || {
            format!(
                "{phase}: expected {local} local hits and {lake} lake fallbacks, and {keys} lake \
                 keys in {calls} lookuper calls; the bucket counted {} local values, {} lake fallbacks, {} distrusted, {} lake \
                 failures, {} tombstones; the lookuper {lake_keys} keys in {lake_calls} calls, \
                 {} retries, {} failures",
                b.local_values,
                b.lake_fallbacks,
                b.distrusted_local,
                b.lake_failures,
                b.local_tombstones,
                l1.retries,
                l1.lookup_failures
            )
        },
    )
}

async fn measure(
    lake: &IcebergLake,
    bucket: &HistoricalBucket,
    lookuper: &IcebergLookuper,
    space: &KeySpace,
    args: &Args,
    seed: u64,
) -> Result<Figures> {
    let mut rng = SplitMix64::new(seed);

    // Warm-up: every timed path, on keys drawn as the timed ones are.
    for &i in &sample(&space.local, WARM_UP, &mut rng) {
        std::hint::black_box(bucket.lookup(&key(i)).await?);
    }
    for &i in &sample(&space.lake_only, WARM_UP, &mut rng) {
        std::hint::black_box(bucket.lookup(&key(i)).await?);
        std::hint::black_box(lookuper.lookup(&key(i)).await?);
    }
    for _ in 0..WARM_UP_BATCHES {
        let keys: Vec<Vec<u8>> = distinct(&space.lake_only, BATCH, &mut rng)
            .into_iter()
            .map(key)
            .collect();
        std::hint::black_box(bucket.lookup_many(&keys).await?);
    }

    let timed_from = lake.data_file_reads();
    // 1. Local hits.
    let ids = sample(&space.local, args.lookups, &mut rng);
    let keys: Vec<Vec<u8>> = ids.iter().map(|&i| key(i)).collect();
    let mut answers = Vec::with_capacity(keys.len());
    let (s0, c0) = (bucket.stats(), lookuper.counters());
    let started = Instant::now();
    for k in &keys {
        answers.push(bucket.lookup(k).await?);
    }
    let local_time = started.elapsed();
    check_counts(
        "local hits",
        (s0, bucket.stats()),
        (c0, lookuper.counters()),
        args.lookups,
        0,
        0,
        0,
    )?;
    space.check("local hits", &ids, &answers)?;
    drop(answers);

    // 2. Lake lookups through the bucket, each timed; and the same key through the lookuper
    // alone (no local miss, no bucket), which of the two goes first alternating.
    let ids = sample(&space.lake_only, args.lookups, &mut rng);
    let keys: Vec<Vec<u8>> = ids.iter().map(|&i| key(i)).collect();
    let mut answers = Vec::with_capacity(keys.len());
    let mut direct = Vec::with_capacity(keys.len());
    let mut each = Vec::with_capacity(keys.len());
    let mut lookuper_time = Duration::ZERO;
    let (s0, c0) = (bucket.stats(), lookuper.counters());
    let reads_before = lake.data_file_reads().reads;
    for (n, k) in keys.iter().enumerate() {
        if n % 2 == 1 {
            let started = Instant::now();
            direct.push(lookuper.lookup(k).await?);
            lookuper_time += started.elapsed();
        }
        let started = Instant::now();
        let answer = bucket.lookup(k).await?;
        each.push(started.elapsed());
        answers.push(answer);
        if n % 2 == 0 {
            let started = Instant::now();
            direct.push(lookuper.lookup(k).await?);
            lookuper_time += started.elapsed();
        }
    }
    let lookup_reads = lake.data_file_reads().reads - reads_before;
    check_counts(
        "lake lookups",
        (s0, bucket.stats()),
        (c0, lookuper.counters()),
        0,
        args.lookups,
        2 * args.lookups,
        2 * args.lookups,
    )?;
    space.check("lake lookups", &ids, &answers)?;
    space.check("lookuper lookups", &ids, &direct)?;
    drop((answers, direct));
    let lake_total: Duration = each.iter().sum();
    each.sort_unstable();

    // 3. lookup_many of 100 keys vs 100 single lookups of the same keys; which goes first
    // alternates, so neither always meets the other's warmed caches.
    let mut many_total = Duration::ZERO;
    let mut singles_total = Duration::ZERO;
    let (mut many_reads, mut singles_reads) = (0, 0);
    let (s0, c0) = (bucket.stats(), lookuper.counters());
    for b in 0..args.batches {
        let ids = distinct(&space.lake_only, BATCH, &mut rng);
        let keys: Vec<Vec<u8>> = ids.iter().map(|&i| key(i)).collect();
        let mut singles = Vec::with_capacity(BATCH);
        let (many, many_time, singles_time);
        let reads = || lake.data_file_reads().reads;
        if b % 2 == 0 {
            let (r0, started) = (reads(), Instant::now());
            many = bucket.lookup_many(&keys).await?;
            many_time = started.elapsed();
            many_reads += reads() - r0;
            let (r0, started) = (reads(), Instant::now());
            for k in &keys {
                singles.push(bucket.lookup(k).await?);
            }
            singles_time = started.elapsed();
            singles_reads += reads() - r0;
        } else {
            let (r0, started) = (reads(), Instant::now());
            for k in &keys {
                singles.push(bucket.lookup(k).await?);
            }
            singles_time = started.elapsed();
            singles_reads += reads() - r0;
            let (r0, started) = (reads(), Instant::now());
            many = bucket.lookup_many(&keys).await?;
            many_time = started.elapsed();
            many_reads += reads() - r0;
        }
        many_total += many_time;
        singles_total += singles_time;
        space.check("lookup_many", &ids, &many)?;
        space.check("single lookups of a batch", &ids, &singles)?;
    }
    let batch_keys = args.batches * BATCH as u64;
    check_counts(
        "batches",
        (s0, bucket.stats()),
        (c0, lookuper.counters()),
        0,
        2 * batch_keys,
        2 * batch_keys,
        args.batches + batch_keys,
    )?;

    Ok(Figures {
        local_mean: mean(local_time, args.lookups),
        lake_mean: mean(lake_total, args.lookups),
        lake_p50: quantile(&each, 0.50),
        lake_p99: quantile(&each, 0.99),
        lookuper_mean: mean(lookuper_time, args.lookups),
        many_total,
        singles_total,
        batches: args.batches,
        // Bucket and lookuper lookups alike: each of the keys was looked up twice.
        reads_per_lookup: lookup_reads as f64 / (2 * args.lookups) as f64,
        reads_per_many: many_reads as f64 / args.batches.max(1) as f64,
        reads_per_batch_single: singles_reads as f64 / batch_keys.max(1) as f64,
        timed_index_reads: lake.data_file_reads().indexes - timed_from.indexes,
    })
}

fn report(name: &str, f: &Figures) {
    let many_ratio = f.many_total.as_secs_f64() / f.singles_total.as_secs_f64().max(1e-12);
    println!("{name}:");
    println!("  local hit                mean {}", human(f.local_mean));
    println!(
        "  lake lookup              mean {}, p50 {}, p99 {}",
        human(f.lake_mean),
        human(f.lake_p50),
        human(f.lake_p99)
    );
    println!(
        "  lake lookup, lookuper    mean {} alone (the bucket adds {:+.1} µs)",
        human(f.lookuper_mean),
        (f.lake_mean.as_secs_f64() - f.lookuper_mean.as_secs_f64()) * 1e6
    );
    println!(
        "  lookup_many({BATCH})         mean {} per batch; {BATCH} single lookups {} ({} each)",
        human(mean(f.many_total, f.batches)),
        human(mean(f.singles_total, f.batches)),
        human(mean(f.singles_total, f.batches * BATCH as u64)),
    );
    println!(
        "  data file reads (object store requests): {:.2} per lake lookup, {:.1} per \
         lookup_many({BATCH}), {:.2} per single lookup of a batch; file indexes read while \
         timed: {}",
        f.reads_per_lookup, f.reads_per_many, f.reads_per_batch_single, f.timed_index_reads
    );
    println!(
        "  ratios: lake lookup / local hit {:.0}; lookup_many({BATCH}) / {BATCH} lookups {:.3} \
         (target <= 0.2: {})",
        f.lake_mean.as_secs_f64() / f.local_mean.as_secs_f64().max(1e-12),
        many_ratio,
        if many_ratio <= 0.2 { "met" } else { "MISSED" }
    );
}

/// Where a measured table is: a local directory (embedded catalog), or named by a config.
enum Site {
    Local,
    Shared(LakeConfig),
}

async fn run(args: Args) -> Result<()> {
    let local = run_on(&args, &Site::Local).await?;
    let Some(warehouse) = &args.lake_warehouse else {
        return Ok(());
    };
    let tmp = tempfile::tempdir()?;
    let catalog = match &args.lake_catalog {
        Some(uri) => uri.clone(),
        None => format!("sqlite://{}", tmp.path().join("catalog.sqlite").display()),
    };
    let run_name = format!(
        "lake-cost-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)?
            .as_nanos()
    );
    let mut config = LakeConfig::shared(
        catalog,
        format!("{}/{run_name}", warehouse.trim_end_matches('/')),
    );
    config.catalog_name = run_name;
    for setting in &args.lake_storage {
        let (key, value) = setting
            .split_once('=')
            .ok_or_else(|| format!("--lake-storage takes KEY=VALUE, not {setting:?}"))?;
        config.storage.insert(key.to_owned(), value.to_owned());
    }
    println!();
    let shared = run_on(&args, &Site::Shared(config)).await?;
    for (name, local, shared) in [
        ("as tiered", &local.0, &shared.0),
        ("compacted", &local.1, &shared.1),
    ] {
        println!(
            "{name}, {warehouse} / local: lake lookup {:.1}x (mean), lookup_many({BATCH}) {:.1}x; \
             reads per lake lookup {:.2} vs {:.2}",
            shared.lake_mean.as_secs_f64() / local.lake_mean.as_secs_f64().max(1e-12),
            shared.many_total.as_secs_f64() / local.many_total.as_secs_f64().max(1e-12),
            shared.reads_per_lookup,
            local.reads_per_lookup,
        );
    }
    Ok(())
}

/// Tiers the keys into a new table at `site`, measures it as tiered and compacted, and prints
/// both; returns their figures.
async fn run_on(args: &Args, site: &Site) -> Result<(Figures, Figures)> {
    ensure(args.commits >= 1, || {
        "--commits must be at least 1".to_owned()
    })?;
    ensure(args.local >= 1 && args.local < args.keys, || {
        "--local must be at least 1 and below --keys".to_owned()
    })?;
    ensure(args.keys - args.local >= BATCH as u64, || {
        format!("--keys - --local must leave at least {BATCH} lake-only keys")
    })?;
    ensure(args.lookups >= 1, || {
        "--lookups must be at least 1".to_owned()
    })?;
    let n = args.keys;
    let space = KeySpace::new(n, args.local);
    let tmp = tempfile::tempdir()?;
    let lake_dir = tmp.path().join("lake");

    // Tier every key into the lake, shuffled across equal commits.
    let lake = match site {
        Site::Local => IcebergLake::open(&lake_dir).await?,
        Site::Shared(config) => IcebergLake::open_with(config).await?,
    };
    let writer = lake.tiering_writer().await?;
    let mut order: Vec<u64> = (0..n).collect();
    shuffle(&mut order, &mut SplitMix64::new(0x71E4));
    let mut tiered = LakeSnapshot::default();
    for c in 0..args.commits {
        let (lo, hi) = (c * n / args.commits, (c + 1) * n / args.commits);
        let records: Vec<Record> = (lo..hi)
            .map(|offset| {
                let i = order[offset as usize];
                Record::put(key(i), lake_value(i), offset)
            })
            .collect();
        writer.append(BUCKET, records).await?;
        tiered = writer.commit(&[(BUCKET, hi)]).await?.snapshot(BUCKET);
    }
    drop(writer);
    ensure(tiered.end_offset == n, || {
        format!("the lake ends at {}, not {n}", tiered.end_offset)
    })?;
    let files = match site {
        Site::Local => data_files(&lake_dir)?,
        Site::Shared(_) => DataFiles::default(),
    };
    let site_name = match site {
        Site::Local => "on a local directory".to_owned(),
        Site::Shared(config) => format!("at {}", config.location),
    };

    // The bucket: an empty store, recovered from the empty lake, then the local keys applied at
    // offsets from the lake's end on, then told of the lake's snapshot.
    let engine = args.backend.open_with(
        &tmp.path().join("store"),
        EngineOptions::default().with_sync_writes(false),
        &tidemark_benches::config(),
    )?;
    let lookuper = Arc::new(lake.lookuper(BUCKET));
    let bucket = HistoricalBucket::new(engine, Arc::clone(&lookuper) as Arc<dyn LakeLookuper>);
    let replay_from = bucket.recover(LakeSnapshot::default()).await?;
    ensure(replay_from == 0, || {
        format!("an empty store replays from {replay_from}")
    })?;
    for (chunk, ids) in space.local.chunks(WRITE_BATCH).enumerate() {
        let first = n + (chunk * WRITE_BATCH) as u64;
        let batch: WriteBatch = ids
            .iter()
            .zip(first..)
            .map(|(&i, offset)| Record::put(key(i), local_value(i), offset))
            .collect();
        let outcome = bucket.apply(batch).await?;
        ensure(outcome.applied == ids.len() as u64, || {
            format!("a local batch applied {} of {}", outcome.applied, ids.len())
        })?;
    }
    bucket.engine().flush()?;
    let progress = bucket.on_lake_progress(tiered).await?;
    ensure(
        matches!(progress, Progress::Published { refreshed: true, update, .. } if update.current == n),
        || format!("lake progress to {tiered:?}: {progress:?}"),
    )?;
    ensure(
        bucket.watermark() == n
            && bucket.lake_end() == n
            && bucket.engine().applied_end() == n + args.local,
        || {
            format!(
                "after setup W = {}, lake end {}, applied end {}",
                bucket.watermark(),
                bucket.lake_end(),
                bucket.engine().applied_end()
            )
        },
    )?;
    // The lake holds its own, older value of a local key: a local hit really is local.
    let shadowed = space.local[0];
    ensure(
        lookuper.lookup(&key(shadowed)).await? == Some(lake_value(shadowed)),
        || "the lake does not hold the tiered value of a local key".to_owned(),
    )?;

    println!(
        "lake-cost: {} store holding {} keys locally; Iceberg lake {site_name} of {n} keys \
         ({VALUE}-byte values) tiered in {} commits, keys shuffled across them; {} lookups, {} \
         batches of {BATCH}",
        args.backend.name(),
        args.local,
        args.commits,
        args.lookups,
        args.batches
    );
    if backtraces_captured() {
        println!(
            "note: RUST_BACKTRACE / RUST_LIB_BACKTRACE enable std backtraces; iceberg captures one \
             in every error it creates, including some it creates and discards on the lookup \
             path, so lake lookups here cost more than with RUST_LIB_BACKTRACE=0"
        );
    }
    let tiered_figures = measure(&lake, &bucket, &lookuper, &space, args, 1).await?;
    report(
        &match site {
            Site::Local => format!(
                "as tiered ({} data files, one per commit, {:.1} MiB)",
                files.count,
                files.mib()
            ),
            Site::Shared(_) => format!("as tiered ({} data files, one per commit)", args.commits),
        },
        &tiered_figures,
    );

    // Compact and expire to one file; the same bucket is told of the compacted snapshot.
    let compacted = lake
        .compact()
        .await?
        .ok_or("compaction of a non-empty lake made no snapshot")?;
    let expiry = lake.expire_snapshots(1).await?;
    let latest = lake.latest(BUCKET).await?;
    ensure(latest == LakeSnapshot::new(compacted, n), || {
        format!("after compaction the lake's latest snapshot is {latest:?}")
    })?;
    let progress = bucket.on_lake_progress(latest).await?;
    ensure(
        matches!(progress, Progress::Published { refreshed: true, update, .. } if !update.moved),
        || format!("lake progress to the compacted {latest:?}: {progress:?}"),
    )?;
    let files = match site {
        Site::Local => data_files(&lake_dir)?,
        Site::Shared(_) => DataFiles::default(),
    };
    ensure(files.count == 1 || matches!(site, Site::Shared(_)), || {
        format!(
            "the compacted, expired lake has {} data files, not 1",
            files.count
        )
    })?;
    let compacted_figures = measure(&lake, &bucket, &lookuper, &space, args, 2).await?;
    let held = match site {
        Site::Local => format!("{} data file, {:.1} MiB; ", files.count, files.mib()),
        Site::Shared(_) => String::new(),
    };
    report(
        &format!(
            "compacted ({held}expiry removed {} snapshots, {} files)",
            expiry.snapshots, expiry.files
        ),
        &compacted_figures,
    );
    println!(
        "one file vs {} files: lake lookup {:.2}x, lookup_many({BATCH}) {:.2}x",
        args.commits,
        compacted_figures.lake_mean.as_secs_f64() / tiered_figures.lake_mean.as_secs_f64(),
        compacted_figures.many_total.as_secs_f64() / tiered_figures.many_total.as_secs_f64(),
    );

    bucket.close().await?;
    Ok((tiered_figures, compacted_figures))
}

fn main() -> ExitCode {
    let args = Args::parse();
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("lake-cost: {e}");
            return ExitCode::FAILURE;
        }
    };
    // On a worker thread, as a host's request handler would run.
    let result = rt
        .block_on(rt.spawn(run(args)))
        .unwrap_or_else(|e| Err(format!("the report task failed: {e}").into()));
    tidemark_benches::exit_code("lake-cost", result)
}
