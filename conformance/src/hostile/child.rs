//! Running one step of a case in a child process: the test binary re-executes itself with only
//! the current test selected and an environment variable naming the step, so a panic or an
//! abort in the engine (a C++ `abort`, a stack overflow) fails the case instead of killing the
//! whole test run.

use std::path::{Path, PathBuf};

/// The environment variable that makes a test run as a child, naming its step.
pub const STEP_VAR: &str = "TIDEMARK_HOSTILE_STEP";
/// The store directory the child works on.
pub const DIR_VAR: &str = "TIDEMARK_HOSTILE_DIR";
/// The workload seed.
pub const SEED_VAR: &str = "TIDEMARK_HOSTILE_SEED";
/// The damaged file, relative to the store directory (absent when nothing was damaged).
pub const FILE_VAR: &str = "TIDEMARK_HOSTILE_FILE";
/// The line prefix a child reports its outcome with.
pub const OUTCOME_PREFIX: &str = "HOSTILE-OUTCOME ";

/// What a child process was asked to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChildStep {
    /// The step's name.
    pub step: String,
    /// The store directory.
    pub dir: PathBuf,
    /// The workload seed.
    pub seed: u64,
    /// The damaged file, relative to `dir`, when one was damaged.
    pub file: Option<PathBuf>,
}

/// The step this process runs when it is a child, `None` in the parent.
pub fn current_step() -> Option<ChildStep> {
    let step = std::env::var(STEP_VAR).ok()?;
    let dir = PathBuf::from(std::env::var_os(DIR_VAR)?);
    let seed = std::env::var(SEED_VAR).ok()?.parse().ok()?;
    let file = std::env::var_os(FILE_VAR).map(PathBuf::from);
    Some(ChildStep {
        step,
        dir,
        seed,
        file,
    })
}

/// Reports the child's outcome to the parent (on stdout, which the parent reads).
pub fn report(outcome: &str) {
    println!("{OUTCOME_PREFIX}{outcome}");
}

/// How a child ended.
#[derive(Debug)]
pub struct ChildRun {
    /// The outcome line it reported, `None` when it reported none.
    pub outcome: Option<String>,
    /// Whether it exited with status 0.
    pub success: bool,
    /// Its exit status and whatever it printed, for failure messages.
    pub transcript: String,
}

/// Runs `step` on `dir` in a child: this test binary, running only the current test; `file`
/// names the file of `dir` that was damaged, if any.
pub fn run(step: &str, dir: &Path, seed: u64, file: Option<&Path>) -> ChildRun {
    let test = std::thread::current()
        .name()
        .map(str::to_owned)
        .expect("libtest runs each test on a thread named after it");
    let mut command = crate::child::command(&test);
    command
        .env(STEP_VAR, step)
        .env(DIR_VAR, dir)
        .env(SEED_VAR, seed.to_string())
        // Engines panic on many damaged files (contained, reported as errors): a symbolised
        // backtrace for each would cost a debug build's child ten times its work. A failing
        // child still prints its panic's message and location.
        .env("RUST_BACKTRACE", "0");
    if let Some(file) = file {
        command.env(FILE_VAR, file);
    }
    let output = command.output().expect("start the child test process");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let outcome = stdout
        .lines()
        // libtest may have printed the test's name on the same line first.
        .find_map(|line| line.split_once(OUTCOME_PREFIX).map(|(_, outcome)| outcome))
        .map(str::to_owned);
    ChildRun {
        outcome,
        success: output.status.success(),
        transcript: format!(
            "child `{test}` step {step} on {}: {}\n--- stdout\n{stdout}\n--- stderr\n{}",
            dir.display(),
            output.status,
            String::from_utf8_lossy(&output.stderr)
        ),
    }
}
