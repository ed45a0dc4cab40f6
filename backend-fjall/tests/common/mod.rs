//! A test that runs its first half in a child process which dies without closing anything, and
//! checks what it left in its second half.

use std::path::{Path, PathBuf};

/// Set in the child process: the directory its buckets go in.
const CRASH_CHILD_DIR: &str = "TIDEMARK_FJALL_CRASH_CHILD_DIR";
/// The child's exit code once it has done its part (and closed nothing).
pub const CRASH_CHILD_EXIT: i32 = 42;

/// In the child process: the directory to write in; `None` in the test's own process.
pub fn crash_child_dir() -> Option<PathBuf> {
    std::env::var_os(CRASH_CHILD_DIR).map(PathBuf::from)
}

/// Runs the test `name` of this test binary again as a child process writing in `dir`, and
/// checks that it exited with [`CRASH_CHILD_EXIT`].
pub fn run_crash_child(name: &str, dir: &Path) {
    let status = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", name, "--test-threads=1"])
        .env(CRASH_CHILD_DIR, dir)
        .stdout(std::process::Stdio::null())
        .status()
        .unwrap();
    assert_eq!(status.code(), Some(CRASH_CHILD_EXIT), "{status:?}");
}
