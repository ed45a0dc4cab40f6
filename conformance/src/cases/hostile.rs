//! Hostile files: every file of a written store is deleted, truncated, zeroed or overwritten in
//! turn, and the damaged copy is opened (in the default `CreateIfMissing` mode), read in full and
//! then written to in a child process. The open must be a clear error, or the store must read
//! back a state no older than its high-water record with every entry either exactly right or
//! reported as damaged (as `Corrupt` where the backend's checksums cover the damaged file), and
//! each write must succeed or be a clear refusal; never a panic, an abort, a poisoned lock, a
//! silently older state or a wrong value.

use std::collections::BTreeMap;
use std::path::Path;

use tidemark_engine_api::{Engine, EngineOptions, Error, LocalLookup};
use tidemark_test_support::rng::SplitMix64;

use crate::EngineFactory;
use crate::hostile::workload::acceptable;
use crate::hostile::{self, Damage, Workload, child};
use crate::skip::notice;

/// How the writer of the store ended before the damage.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ending {
    /// Dropped: a clean close (flushed; the high-water record holds the final state).
    Close,
    /// The process exited without closing (no destructor ran): the record holds the last
    /// watermark advance, and the engine's log holds the acknowledged writes after it.
    Crash,
}

/// Damages each file of a cleanly closed store in each way; each damaged copy opens to a clear
/// error or to exactly the state it was closed with (damaged entries reported as such).
pub fn hostile_files_after_clean_close<F: EngineFactory>(factory: F) {
    hostile_files(factory, Ending::Close);
}

/// The same for a store whose writer process died without closing (`sync_writes`): each damaged
/// copy opens to a clear error or to a state between its last high-water record and its last
/// acknowledged write, every entry right for that state or reported as damaged.
pub fn hostile_files_after_crash<F: EngineFactory>(factory: F) {
    hostile_files(factory, Ending::Crash);
}

fn hostile_files<F: EngineFactory>(factory: F, ending: Ending) {
    if let Some(step) = child::current_step() {
        serve(&factory, &step, ending, Workload::new);
        return;
    }
    let case = match ending {
        Ending::Close => "hostile_files_after_clean_close",
        Ending::Crash => "hostile_files_after_crash",
    };
    let (seed, scratch) = begin::<F>(case);
    let template = scratch.path().join("template");
    match ending {
        Ending::Close => {
            let engine = factory.open(&template, EngineOptions::default()).unwrap();
            Workload::new(seed).run(&engine);
        }
        Ending::Crash => {
            let populated = expect_success(child::run("populate-crash", &template, seed, None));
            assert_eq!(populated, "populated");
        }
    }

    let mut rng = SplitMix64::new(seed);
    let mut tally: BTreeMap<String, u64> = BTreeMap::new();
    let undamaged = open_in_child(
        &scratch.path().join("undamaged"),
        &template,
        seed,
        None,
        |_| Ok(()),
    );
    assert!(
        undamaged.starts_with("opened"),
        "{}: the undamaged store must open: {undamaged}",
        F::NAME
    );
    let mut runs = 0;
    for (rel, is_dir) in hostile::damage::store_entries(&template) {
        for damage in Damage::ALL {
            if is_dir && !damage.applies_to_dirs() {
                continue;
            }
            runs += 1;
            let copy = scratch.path().join(format!("case-{runs}"));
            let outcome = open_in_child(&copy, &template, seed, Some(&rel), |dir| {
                damage.apply(&dir.join(&rel), &mut rng)
            });
            let kind = outcome.split(':').next().unwrap_or("").to_owned();
            *tally.entry(kind).or_default() += 1;
            notice(&format!(
                "HOSTILE {}::{case} {} {}: {outcome}",
                F::NAME,
                rel.display(),
                damage.name()
            ));
            let _ = std::fs::remove_dir_all(&copy);
        }
    }
    notice(&format!(
        "HOSTILE {}::{case}: {runs} damaged opens, outcomes {tally:?} (seed {seed})",
        F::NAME
    ));
    assert!(runs >= 6, "{}: the store has no files to damage", F::NAME);
}

/// How many single-byte flips [`hostile_byte_flips`] makes: a count, not a time (each costs a
/// copy of the store and a child process, tens of milliseconds).
const FLIPS: u64 = 200;

/// Flips one byte at each of `FLIPS` positions spread evenly over the files of a cleanly
/// closed store written by [`Workload::layered`] (the files' bytes taken in order, so the
/// engine's largest file gets most of them); each damaged copy opens (in a child process) to a
/// clear error or to exactly the state it was closed with, damaged entries reported as such:
/// never an older version of a key, never a miss of a live one.
///
/// The random overwrites of [`hostile_files_after_clean_close`] rarely meet the positions where
/// an engine's recovery skips damage silently and serves older pages under the newest metadata
/// (on sled, most of an older log segment); an even sweep over a store whose newest versions sit
/// under later writes does.
pub fn hostile_byte_flips<F: EngineFactory>(factory: F) {
    if let Some(step) = child::current_step() {
        serve(&factory, &step, Ending::Close, Workload::layered);
        return;
    }
    let (seed, scratch) = begin::<F>("hostile_byte_flips");
    let template = scratch.path().join("template");
    {
        let engine = factory.open(&template, EngineOptions::default()).unwrap();
        Workload::layered(seed).run(&engine);
    }
    let files = hostile::damage::FileBytes::of(&template);
    let mut rng = SplitMix64::new(seed);
    let mut tally: BTreeMap<String, u64> = BTreeMap::new();
    let positions = hostile::damage::spread_positions(files.len(), FLIPS, &mut rng);
    for (run, at) in positions.iter().enumerate() {
        let (rel, within) = files.locate(*at);
        let mask = 1 + rng.below(255) as u8;
        let copy = scratch.path().join(format!("flip-{run}"));
        let outcome = open_in_child(&copy, &template, seed, Some(rel), |dir| {
            hostile::damage::flip_byte(&dir.join(rel), within, mask)
        });
        let kind = outcome.split(':').next().unwrap_or("").to_owned();
        *tally.entry(kind).or_default() += 1;
        notice(&format!(
            "HOSTILE {}::hostile_byte_flips {} byte {within} ^ {mask:#04x}: {outcome}",
            F::NAME,
            rel.display()
        ));
        let _ = std::fs::remove_dir_all(&copy);
    }
    notice(&format!(
        "HOSTILE {}::hostile_byte_flips: {} flips over {} bytes, outcomes {tally:?} (seed {seed})",
        F::NAME,
        positions.len(),
        files.len()
    ));
    assert!(
        positions.len() as u64 == FLIPS.min(files.len()),
        "{}: flipped {} bytes of {}",
        F::NAME,
        positions.len(),
        files.len()
    );
}

/// The start of a hostile case `case` in the parent: its seed (printed) and a scratch directory.
fn begin<F: EngineFactory>(case: &str) -> (u64, tempfile::TempDir) {
    let seed = hostile::seed();
    notice(&format!(
        "SEED {}::{case}: {seed} (rerun with {}={seed})",
        F::NAME,
        child::SEED_VAR
    ));
    let scratch = tempfile::Builder::new()
        .prefix(&format!("tidemark-hostile-{}-", F::NAME))
        .tempdir()
        .unwrap();
    (seed, scratch)
}

/// Copies `template` to `copy`, damages its `file` with `damage` and opens it in a child;
/// returns the child's outcome (failing the case when the child failed or reported nothing).
fn open_in_child(
    copy: &Path,
    template: &Path,
    seed: u64,
    file: Option<&Path>,
    damage: impl FnOnce(&Path) -> std::io::Result<()>,
) -> String {
    hostile::damage::copy_tree(template, copy);
    damage(copy).unwrap();
    expect_success(child::run("open", copy, seed, file))
}

#[track_caller]
fn expect_success(run: child::ChildRun) -> String {
    match (run.success, run.outcome) {
        (true, Some(outcome)) => outcome,
        _ => panic!("the child failed or reported nothing:\n{}", run.transcript),
    }
}

/// The child's side: one step on the store at `step.dir`, written by the workload `shape`
/// builds from the seed, reported on stdout.
fn serve<F: EngineFactory>(
    factory: &F,
    step: &child::ChildStep,
    ending: Ending,
    shape: fn(u64) -> Workload,
) {
    let workload = shape(step.seed);
    match step.step.as_str() {
        "populate-crash" => {
            let engine = factory.open(&step.dir, EngineOptions::default()).unwrap();
            workload.run(&engine);
            child::report("populated");
            // No destructor runs: the store is left as a killed writer leaves it.
            std::process::exit(0);
        }
        "open" => {
            let outcome = open_and_read(factory, step, &workload, ending);
            child::report(&outcome);
        }
        other => panic!("unknown hostile step {other:?}"),
    }
}

/// Opens the damaged store, reads every key of the workload and every row (`verify`), then
/// writes to it, asserting what the case promises; returns a one-line outcome.
fn open_and_read<F: EngineFactory>(
    factory: &F,
    step: &child::ChildStep,
    workload: &Workload,
    ending: Ending,
) -> String {
    // Damage the engine's checksums cover must be reported as such, naming the key.
    let corrupt_only = step
        .file
        .as_deref()
        .is_some_and(|file| factory.reads_detect_damage_in(file));
    let engine = match factory.open(&step.dir, EngineOptions::default()) {
        Ok(engine) => engine,
        Err(e) => {
            let kind = refusal_kind(&e).unwrap_or_else(|| {
                panic!("{}: open failed with an unexpected error: {e:?}", F::NAME)
            });
            return format!("refused {kind}: {e}");
        }
    };
    let (watermark, applied_end) = (engine.watermark(), engine.applied_end());
    let recorded = match ending {
        Ending::Close => workload.final_state,
        Ending::Crash => workload.last_advance,
    };
    let written = workload.final_state;
    assert!(
        watermark >= recorded.0 && applied_end >= recorded.1,
        "{}: silently reopened older than its high-water record: W {watermark}, applied end \
         {applied_end}, recorded {recorded:?}",
        F::NAME
    );
    assert!(
        watermark <= written.0 && applied_end <= written.1,
        "{}: reopened newer than anything written: W {watermark}, applied end {applied_end}, \
         written {written:?}",
        F::NAME
    );
    // Lookups reported as damaged, by error kind.
    let mut reported: BTreeMap<&str, u64> = BTreeMap::new();
    for (key, expected) in workload.state_at(applied_end) {
        match engine.lookup(&key) {
            Ok(got) => assert!(
                acceptable(expected.as_ref(), &got, watermark),
                "{}: key {} read {}, expected {} (W {watermark}, applied end {applied_end})",
                F::NAME,
                String::from_utf8_lossy(&key),
                brief(Some(&got)),
                brief(expected.as_ref())
            ),
            Err(Error::Corrupt { key: named, .. }) if named == key => {
                *reported.entry("Corrupt").or_default() += 1;
            }
            Err(e) if corrupt_only => panic!(
                "{}: lookup of {} in a store whose damaged file its checksums cover ({:?}) \
                 failed with an error other than Corrupt naming the key: {e:?}",
                F::NAME,
                String::from_utf8_lossy(&key),
                step.file
            ),
            Err(e) => match refusal_kind(&e) {
                Some(kind) => *reported.entry(kind).or_default() += 1,
                None => panic!("{}: lookup of {key:?} failed unexpectedly: {e:?}", F::NAME),
            },
        }
    }
    let verified = match engine.verify() {
        Ok(report) => format!("verify found {} damaged", report.damaged()),
        Err(e) if refusal_kind(&e).is_some() => format!("verify refused: {e}"),
        Err(e) => panic!("{}: verify failed unexpectedly: {e:?}", F::NAME),
    };
    let wrote = write_after_damage::<F>(&engine, applied_end);
    format!(
        "opened: W {watermark}, applied end {applied_end}, entries reported damaged {reported:?}, \
         {verified}, then {wrote}"
    )
}

/// Writes to the damaged store that opened, as a host goes on after its reads: a put (read
/// back), a watermark advance past it, a reclaim, another put and a flush. Each is `Ok` or a
/// clear refusal (a damaged store may fail, and then refuse every later write with
/// `StoreFailed`); never a panic (this child would die), never a poisoned lock. Returns what
/// each did.
fn write_after_damage<F: EngineFactory>(engine: &F::Engine, applied_end: u64) -> String {
    let key = b"after-damage";
    let bytes = b"written after the damage".to_vec();
    let mut done = Vec::new();
    let mut note = |call: &str, result: tidemark_engine_api::Result<()>| match result {
        Ok(()) => done.push(format!("{call} ok")),
        Err(e) => {
            let kind = refusal_kind(&e).unwrap_or_else(|| {
                panic!(
                    "{}: {call} after the damage failed unexpectedly: {e:?}",
                    F::NAME
                )
            });
            done.push(format!("{call} {kind}"));
        }
    };
    let put = engine.put(key, &bytes, applied_end).map(drop);
    let put_ok = put.is_ok();
    note("put", put);
    if put_ok {
        match engine.lookup(key) {
            Ok(got) => assert_eq!(
                got,
                LocalLookup::Value {
                    offset: applied_end,
                    bytes
                },
                "{}: the write after the damage read back wrong",
                F::NAME
            ),
            Err(e) => note("read back", Err(e)),
        }
    }
    note(
        "advance",
        engine.advance_watermark(applied_end + 1).map(drop),
    );
    note("reclaim", engine.reclaim().map(drop));
    // After a reclaim that may have failed the store.
    let again = engine.put(b"after-damage-2", &[7], applied_end + 1);
    note("put", again.map(drop));
    note("flush", engine.flush());
    done.join(", ")
}

/// A lookup result without its bytes (values are kilobytes), for failure messages.
fn brief(lookup: Option<&LocalLookup>) -> String {
    match lookup {
        None => "nothing (never written below the applied end)".to_owned(),
        Some(LocalLookup::Value { offset, bytes }) => {
            format!("a value at {offset} ({} bytes)", bytes.len())
        }
        Some(LocalLookup::Tombstone { offset }) => format!("a tombstone at {offset}"),
        Some(LocalLookup::Miss) => "a miss".to_owned(),
    }
}

/// The kind of a clear refusal: an error that names the damaged file or entry or says what is
/// wrong. `None` for errors that would mean a bug (a panicked task, a poisoned lock, ...).
fn refusal_kind(e: &Error) -> Option<&'static str> {
    let kind = match e {
        Error::Corrupt { .. } => "Corrupt",
        Error::Damaged { .. } => "Damaged",
        Error::RolledBack { .. } => "RolledBack",
        Error::Backend { .. } => "Backend",
        Error::Io(_) => "Io",
        Error::ForeignDirectory { .. } => "ForeignDirectory",
        Error::WrongBackend { .. } => "WrongBackend",
        Error::UnsupportedFormat { .. } => "UnsupportedFormat",
        Error::NoStore { .. } => "NoStore",
        // A write the damaged store could not finish (or a panic during one) fails it.
        Error::StoreFailed { .. } => "StoreFailed",
        _ => return None,
    };
    (!e.to_string().is_empty()).then_some(kind)
}
