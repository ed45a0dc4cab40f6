//! The directory marker that tells which backend and format version own a bucket directory,
//! so that opening a directory with the wrong backend (or a newer build's files) is a clear error
//! instead of a confusing engine failure or, worse, an engine silently creating files beside
//! another engine's.

use std::fs;
use std::io::Write;
use std::path::Path;

use crate::codec::FORMAT_VERSION;
use crate::error::{Error, Result};

/// Name of the marker file inside every bucket directory.
pub const MARKER_FILE: &str = "TIDEMARK";

/// Creates `dir` when missing and checks (or, for an empty directory, writes) its marker.
///
/// Errors: [`Error::WrongBackend`] when the marker names another backend,
/// [`Error::UnsupportedFormat`] when it names a newer format, [`Error::ForeignDirectory`] when the
/// directory holds files but no marker (or an unreadable one).
pub fn claim_directory(dir: &Path, backend: &'static str) -> Result<()> {
    fs::create_dir_all(dir)?;
    let marker = dir.join(MARKER_FILE);
    match fs::read_to_string(&marker) {
        Ok(text) => check_marker(dir, backend, &text),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let mut entries = fs::read_dir(dir)?
                .filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect::<Vec<_>>();
            if !entries.is_empty() {
                entries.sort();
                entries.truncate(5);
                return Err(Error::ForeignDirectory {
                    path: dir.to_path_buf(),
                    reason: format!("no {MARKER_FILE} marker, but found {}", entries.join(", ")),
                });
            }
            write_marker(dir, backend)
        }
        Err(e) => Err(Error::Io(e)),
    }
}

fn check_marker(dir: &Path, backend: &'static str, text: &str) -> Result<()> {
    let field = |name: &str| {
        text.lines()
            .filter_map(|l| l.split_once('='))
            .find(|(k, _)| k.trim() == name)
            .map(|(_, v)| v.trim().to_string())
    };
    let foreign = |reason: &str| Error::ForeignDirectory {
        path: dir.to_path_buf(),
        reason: reason.to_string(),
    };
    let found = field("backend").ok_or_else(|| foreign("marker has no backend line"))?;
    let format: u32 = field("format")
        .ok_or_else(|| foreign("marker has no format line"))?
        .parse()
        .map_err(|_| foreign("marker format is not a number"))?;
    if found != backend {
        return Err(Error::WrongBackend {
            path: dir.to_path_buf(),
            found,
            expected: backend,
        });
    }
    if format > FORMAT_VERSION || format == 0 {
        return Err(Error::UnsupportedFormat {
            path: dir.to_path_buf(),
            found: format,
            supported: FORMAT_VERSION,
        });
    }
    Ok(())
}

fn write_marker(dir: &Path, backend: &str) -> Result<()> {
    // Write-then-rename so a crash never leaves a half-written marker behind.
    let tmp = dir.join(format!("{MARKER_FILE}.tmp"));
    {
        let mut f = fs::File::create(&tmp)?;
        writeln!(f, "backend={backend}")?;
        writeln!(f, "format={FORMAT_VERSION}")?;
        f.sync_all()?;
    }
    fs::rename(&tmp, dir.join(MARKER_FILE))?;
    if let Ok(d) = fs::File::open(dir) {
        // Directory fsync makes the rename durable; some platforms cannot open directories.
        let _ = d.sync_all();
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn claims_empty_and_reopens() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("bucket");
        claim_directory(&dir, "sled").unwrap();
        claim_directory(&dir, "sled").unwrap();
        assert!(matches!(
            claim_directory(&dir, "redb"),
            Err(Error::WrongBackend { .. })
        ));
    }

    #[test]
    fn rejects_foreign_and_newer() {
        let tmp = tempfile::tempdir().unwrap();
        fs::write(tmp.path().join("CURRENT"), "x").unwrap();
        let err = claim_directory(tmp.path(), "sled").unwrap_err();
        assert!(err.to_string().contains("CURRENT"), "{err}");

        let tmp = tempfile::tempdir().unwrap();
        fs::write(tmp.path().join(MARKER_FILE), "backend=sled\nformat=9\n").unwrap();
        assert!(matches!(
            claim_directory(tmp.path(), "sled"),
            Err(Error::UnsupportedFormat { found: 9, .. })
        ));
    }
}
