//! Running one test of the current test binary in a child process of its own: for measurements
//! that must see only that test (threads, descriptors, memory), and for tests that kill the
//! process under test.
//!
//! The child is the test binary re-executed with the test's exact name and an environment
//! variable naming that test; [`role`] tells the test which side it is on.

use std::process::Command;

/// Environment variable naming the test a child process runs.
const CHILD_ENV: &str = "TIDEMARK_CHILD_TEST";

/// Which side of a re-executed test this process is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// The test as the harness started it: it spawns children.
    Parent,
    /// The child process re-executed for this test.
    Child,
}

/// Whether this process is the child re-executed for `test_name`.
pub fn role(test_name: &str) -> Role {
    if std::env::var(CHILD_ENV).as_deref() == Ok(test_name) {
        Role::Child
    } else {
        Role::Parent
    }
}

/// The command that runs `test_name` alone, in a child process, with its output not captured
/// (add environment variables and stdio as needed).
pub fn command(test_name: &str) -> Command {
    let exe = std::env::current_exe().expect("the test binary");
    let mut command = Command::new(exe);
    command
        .args([test_name, "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, test_name);
    command
}

/// Runs `body` in a child process of its own: the test binary re-executed for the one test
/// `test_name` (its full name as the harness lists it, e.g. `sled::scale`), where `body` runs.
/// In the parent, the lines of the child's output that contain `prefix` are shown, and a child
/// that fails, panics or aborts fails the test with its output.
pub fn run_isolated(test_name: &str, prefix: &str, body: impl FnOnce()) {
    if role(test_name) == Role::Child {
        body();
        return;
    }
    let out = command(test_name)
        .output()
        .expect("start the child process");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    // libtest may print the test's name on the same line first.
    for line in stdout
        .lines()
        .filter_map(|l| l.find(prefix).map(|at| &l[at..]))
    {
        crate::skip::notice(line);
    }
    assert!(
        out.status.success() && stdout.contains("1 passed"),
        "{test_name} child process failed ({}):\n{stdout}\n{stderr}",
        out.status
    );
}

/// The full name the harness gives test `name` in the module at `module_path` (what
/// `module_path!()` says there): the path without the crate.
pub fn test_name(module_path: &str, name: &str) -> String {
    let module = module_path
        .split_once("::")
        .map_or(module_path, |(_, rest)| rest);
    format!("{module}::{name}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_names_drop_the_crate() {
        assert_eq!(test_name("sled::sled", "scale"), "sled::scale");
        assert_eq!(
            test_name("rocksdb::rocksdb::bucket", "x"),
            "rocksdb::bucket::x"
        );
        assert_eq!(role("no::such::test"), Role::Parent);
    }
}
