//! What this process holds of the operating system's resources: threads, open file descriptors,
//! resident memory, and the file-descriptor limit.
//!
//! Read where the OS offers it cheaply (Linux `/proc/self`, `getrlimit`); `None` elsewhere, so a
//! caller that checks a budget skips a check it cannot make rather than guess. The budget checks
//! at open ([`crate::budget`]), the scale test and the scale report all read these one way.

use std::fs;

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
/// `ulimit -n` does in a shell, and returns the limits now in force. A host that knows it needs
/// more descriptors than the default soft limit (often 1,024) calls it once at start-up; tests
/// call it to run under a known limit.
pub fn set_fd_soft_limit(soft: u64) -> std::io::Result<FdLimit> {
    #[cfg(unix)]
    {
        let current = fd_limit();
        let soft = current.hard.map_or(soft, |hard| soft.min(hard));
        rustix::process::setrlimit(
            rustix::process::Resource::Nofile,
            rustix::process::Rlimit {
                current: Some(soft),
                maximum: current.hard,
            },
        )?;
        Ok(fd_limit())
    }
    #[cfg(not(unix))]
    {
        let _ = soft;
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
}
