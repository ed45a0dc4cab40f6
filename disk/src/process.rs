//! What this process holds of the operating system's resources: threads, open file descriptors,
//! resident memory, and the file-descriptor limit.
//!
//! Read where the OS offers it cheaply (Linux `/proc/self`, `getrlimit`); `None` elsewhere, so a
//! caller that checks a budget skips a check it cannot make rather than guess. The budget checks
//! at open ([`crate::budget`]), the scale test and the scale report all read these one way.

use std::fs;
use std::path::Path;

/// Threads, open file descriptors and resident memory of this process at one moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ProcessUsage {
    /// Threads of the process (`Threads:` of `/proc/self/status`).
    pub threads: Option<u64>,
    /// Open file descriptors (entries of `/proc/self/fd`, less the one the count itself holds).
    pub open_fds: Option<u64>,
    /// Resident set size in bytes (`VmRSS:` of `/proc/self/status`).
    pub rss_bytes: Option<u64>,
}

impl ProcessUsage {
    /// Reads the figures now.
    pub fn current() -> Self {
        let status = fs::read_to_string("/proc/self/status").ok();
        let field = |name: &str| status.as_deref().and_then(|s| status_field(s, name));
        ProcessUsage {
            threads: field("Threads:"),
            open_fds: open_fds(),
            rss_bytes: field("VmRSS:").map(|kib| kib.saturating_mul(1024)),
        }
    }
}

/// The number of open file descriptors of this process, `None` where it cannot be read.
pub fn open_fds() -> Option<u64> {
    let entries = fs::read_dir("/proc/self/fd").ok()?;
    // The directory handle that lists the entries is one of them.
    Some((entries.count() as u64).saturating_sub(1))
}

/// The open file descriptors of this process, and how many of them are files (or directories)
/// under one of a set of directories.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FdCount {
    /// Open descriptors (as [`open_fds`] counts them).
    pub open: u64,
    /// Those whose file lies under one of the directories.
    pub under: u64,
}

/// Counts the open descriptors of this process and those whose file lies under one of `dirs`
/// (read from the targets of `/proc/self/fd`); `None` where they cannot be read. The targets are
/// canonical paths, so `dirs` must be too (as [`Path::canonicalize`] returns them). A descriptor
/// whose target cannot be read, or whose file was moved out of the directories, counts as
/// outside them.
pub fn fds_under(dirs: &[&Path]) -> Option<FdCount> {
    #[cfg(unix)]
    {
        use std::collections::HashSet;
        use std::os::unix::ffi::OsStrExt;
        // Byte prefixes rather than `Path`s: the scan runs over every descriptor of a process
        // that may hold tens of thousands.
        let dirs: HashSet<&[u8]> = dirs.iter().map(|d| d.as_os_str().as_bytes()).collect();
        let entries = fs::read_dir("/proc/self/fd").ok()?;
        let (mut open, mut under) = (0u64, 0u64);
        for entry in entries.flatten() {
            open += 1;
            let Ok(target) = fs::read_link(entry.path()) else {
                continue;
            };
            let target = target.as_os_str().as_bytes();
            let mut prefixes = (1..target.len()).filter(|&i| target[i] == b'/');
            if dirs.contains(target) || prefixes.any(|i| dirs.contains(&target[..i])) {
                under += 1;
            }
        }
        Some(FdCount {
            // The directory handle that lists the entries is one of them, under no bucket.
            open: open.saturating_sub(1),
            under,
        })
    }
    #[cfg(not(unix))]
    {
        let _ = dirs;
        None
    }
}

/// The soft and hard limits on open file descriptors (`RLIMIT_NOFILE`); `None` means unlimited
/// or unknown.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FdLimit {
    /// The limit in force (the soft limit), which an open beyond fails with `EMFILE`.
    pub soft: Option<u64>,
    /// The most the soft limit may be raised to without privileges.
    pub hard: Option<u64>,
}

/// This process's file-descriptor limits.
pub fn fd_limit() -> FdLimit {
    #[cfg(unix)]
    {
        let limit = rustix::process::getrlimit(rustix::process::Resource::Nofile);
        FdLimit {
            soft: limit.current,
            hard: limit.maximum,
        }
    }
    #[cfg(not(unix))]
    {
        FdLimit {
            soft: None,
            hard: None,
        }
    }
}

/// Sets this process's soft file-descriptor limit to `soft` (at most the hard limit), as
/// `ulimit -Sn` does in a shell, and returns the limits now in force. A host that knows it needs
/// more descriptors than the default soft limit (often 1,024) calls it once at start-up; tests
/// call it to run under a known limit.
pub fn set_fd_soft_limit(soft: u64) -> std::io::Result<FdLimit> {
    let hard = fd_limit().hard;
    set_fd_limits(hard.map_or(soft, |hard| soft.min(hard)), hard)
}

/// Sets this process's soft file-descriptor limit to `soft`, first raising the hard limit to it
/// when the hard limit is lower, as `ulimit -n` does in a shell (raising the hard limit needs the
/// privilege to: root, or `CAP_SYS_RESOURCE`; without it this fails and changes nothing).
/// Returns the limits now in force. For a host whose buckets need more descriptors than its hard
/// limit allows.
pub fn set_fd_limit(soft: u64) -> std::io::Result<FdLimit> {
    let hard = fd_limit().hard;
    set_fd_limits(soft, hard.map(|hard| hard.max(soft)))
}

/// Sets both limits (`None`: unlimited) and returns the limits now in force.
fn set_fd_limits(soft: u64, hard: Option<u64>) -> std::io::Result<FdLimit> {
    #[cfg(unix)]
    {
        rustix::process::setrlimit(
            rustix::process::Resource::Nofile,
            rustix::process::Rlimit {
                current: Some(soft),
                maximum: hard,
            },
        )?;
        Ok(fd_limit())
    }
    #[cfg(not(unix))]
    {
        let _ = (soft, hard);
        Err(std::io::Error::new(
            std::io::ErrorKind::Unsupported,
            "file-descriptor limits are only managed on unix",
        ))
    }
}

/// The number after `name` on its line of `/proc/self/status` (`VmRSS:   1234 kB` → 1234).
fn status_field(status: &str, name: &str) -> Option<u64> {
    status
        .lines()
        .find_map(|line| line.strip_prefix(name))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_fields_parse_their_number() {
        let status = "Name:\tx\nThreads:\t7\nVmRSS:\t  2048 kB\n";
        assert_eq!(status_field(status, "Threads:"), Some(7));
        assert_eq!(status_field(status, "VmRSS:"), Some(2048));
        assert_eq!(status_field(status, "VmSwap:"), None);
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn the_real_proc_files_parse() {
        let usage = ProcessUsage::current();
        assert!(usage.threads.unwrap() >= 1, "{usage:?}");
        assert!(usage.rss_bytes.unwrap() >= 1 << 20, "{usage:?}");
        assert!(usage.open_fds.is_some());
        let limit = fd_limit();
        assert!(limit.soft.is_some() && limit.soft <= limit.hard.or(Some(u64::MAX)));
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn descriptors_are_attributed_to_the_directory_holding_their_file() {
        let root = tempfile::tempdir().unwrap();
        let root_path = root.path().canonicalize().unwrap();
        let (a, b) = (root_path.join("a"), root_path.join("b"));
        fs::create_dir_all(a.join("db")).unwrap();
        fs::create_dir_all(&b).unwrap();
        let before = fds_under(&[&a, &b]).unwrap();
        let files = [
            fs::File::create(a.join("db").join("x")).unwrap(),
            fs::File::open(a.join("db")).unwrap(),
            fs::File::create(b.join("y")).unwrap(),
        ];
        // Other tests of this process open and close files meanwhile: only what lies under
        // the directories is exact.
        let held = fds_under(&[&a, &b]).unwrap();
        assert_eq!((before.under, held.under), (0, 3));
        assert_eq!(fds_under(&[&a]).unwrap().under, 2);
        // A prefix of a name is not its directory.
        assert_eq!(fds_under(&[&a.join("d")]).unwrap().under, 0);
        drop(files);
        assert_eq!(fds_under(&[&a, &b]).unwrap().under, 0);
    }
}
