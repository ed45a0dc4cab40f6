//! Running the built binary and looking at what it left behind.

use std::path::Path;
use std::process::Command;

use tidemark::Backend;

/// What one run of the binary did.
#[derive(Debug)]
pub struct Run {
    /// Exit status (`None` if killed by a signal).
    pub code: Option<i32>,
    /// Standard output.
    pub stdout: String,
    /// Standard error.
    pub stderr: String,
}

impl Run {
    /// The run, asserting that it exited with 0.
    #[track_caller]
    pub fn success(self) -> Self {
        assert_eq!(self.code, Some(0), "{self:?}");
        self
    }

    /// stdout as JSON.
    #[track_caller]
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|e| panic!("stdout is not JSON ({e}): {self:?}"))
    }
}

/// Runs `tidemark <args>` with `RUST_LOG` unset (so stderr holds only what the tool says).
pub fn tidemark(args: &[&str]) -> Run {
    run_with(args, None)
}

/// Runs `tidemark <args>` with `RUST_LOG` set to `log` (or unset).
pub fn run_with(args: &[&str], log: Option<&str>) -> Run {
    let mut command = Command::new(env!("CARGO_BIN_EXE_tidemark"));
    command.args(args).env_remove("RUST_LOG");
    if let Some(log) = log {
        command.env("RUST_LOG", log);
    }
    let out = command.output().unwrap();
    Run {
        code: out.status.code(),
        stdout: String::from_utf8(out.stdout).unwrap(),
        stderr: String::from_utf8(out.stderr).unwrap(),
    }
}

/// The path as an argument.
pub fn arg(path: &Path) -> &str {
    path.to_str().expect("temporary paths are UTF-8")
}

/// The backends that keep a store on disk.
pub fn disk_backends() -> Vec<Backend> {
    Backend::compiled()
        .into_iter()
        .filter(|b| b.is_persistent())
        .collect()
}

/// Waits until no handle of this process still holds sled's lock on the store in `dir`, so that
/// the binary (another process) can open it.
///
/// sled 0.34 keeps its log locked (`flock`) for as long as any handle lives, and some belong to
/// its background I/O threads, which finish a moment after the last `Db` is dropped. A blocking
/// `flock` of the same file returns exactly when they are gone; no other backend keeps a handle
/// past its drop.
pub fn release_sled_lock(dir: &Path) {
    let log = dir.join(tidemark::sled::DB_SUBDIR).join("db");
    if let Ok(file) = std::fs::File::open(&log) {
        file.lock().unwrap();
    }
}
