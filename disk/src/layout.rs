//! The directory marker that tells which backend and format version own a bucket directory,
//! so that opening a directory with the wrong backend (or a newer build's files) is a clear error
//! instead of a confusing engine failure or, worse, an engine silently creating files beside
//! another engine's.

pub mod high_water;
pub mod shared;

use std::fs;
use std::io::ErrorKind;
use std::path::Path;

use tidemark_engine_api::OpenMode;
use tidemark_engine_api::codec::FORMAT_VERSION;
use tidemark_engine_api::{Error, Result};

/// Name of the marker file inside every bucket directory.
pub const MARKER_FILE: &str = "TIDEMARK";

/// What a bucket directory's marker says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Marker {
    /// The backend that owns the directory (`"sled"`, `"redb"`, `"rocksdb"`, ...).
    pub backend: String,
    /// The on-disk format version the store was created with.
    pub format: u32,
}

impl Marker {
    /// Checks that the marker of `dir` names `backend` and a format this build reads:
    /// [`Error::WrongBackend`] or [`Error::UnsupportedFormat`] otherwise.
    pub fn check(&self, dir: &Path, backend: &'static str) -> Result<()> {
        if self.backend != backend {
            return Err(Error::WrongBackend {
                path: dir.to_path_buf(),
                found: self.backend.clone(),
                expected: backend,
            });
        }
        if self.format > FORMAT_VERSION || self.format == 0 {
            return Err(Error::UnsupportedFormat {
                path: dir.to_path_buf(),
                found: self.format,
                supported: FORMAT_VERSION,
            });
        }
        Ok(())
    }
}

/// Reads the marker of the store at `dir`, creating and changing nothing.
///
/// Errors: [`Error::NoStore`] when `dir` does not exist, is not a directory, or is an empty
/// directory; [`Error::ForeignDirectory`] when it holds files but no marker, or a marker that
/// cannot be read.
pub fn read_marker(dir: &Path) -> Result<Marker> {
    let no_store = |reason: &str| Error::NoStore {
        path: dir.to_path_buf(),
        reason: reason.to_string(),
    };
    match fs::metadata(dir) {
        Ok(meta) if meta.is_dir() => {}
        Ok(_) => return Err(no_store("it is not a directory")),
        Err(e) if e.kind() == ErrorKind::NotFound => {
            return Err(no_store("no such directory"));
        }
        Err(e) => return Err(Error::Io(e)),
    }
    match fs::read(dir.join(MARKER_FILE)) {
        Ok(bytes) => parse_marker(dir, &bytes),
        Err(e) if e.kind() == ErrorKind::NotFound => match foreign_entries(dir)? {
            Some(found) => Err(unmarked(dir, &found)),
            None => Err(no_store(&format!(
                "the directory is empty (no {MARKER_FILE} marker)"
            ))),
        },
        Err(e) => Err(Error::Io(e)),
    }
}

/// Prepares `dir` for an open in `mode`: [`claim_directory`] when the mode creates, otherwise
/// [`check_directory`] (which never creates anything).
pub fn open_directory(dir: &Path, backend: &'static str, mode: OpenMode) -> Result<()> {
    if mode.creates() {
        claim_directory(dir, backend)
    } else {
        check_directory(dir, backend)
    }
}

/// Checks that `dir` holds an existing store of `backend` ([`read_marker`], then
/// [`Marker::check`]), creating and changing nothing.
pub fn check_directory(dir: &Path, backend: &'static str) -> Result<()> {
    read_marker(dir)?.check(dir, backend)
}

/// How much of an engine file's start is read to tell a blank (zeroed) file: every engine's
/// header (redb's magic, sled's first segment header, RocksDB's `CURRENT` line) lies within it.
const BLANK_PROBE_BYTES: usize = 4096;

/// Checks the engine's own file or directory `path` (`what` names it in errors) inside the
/// marked directory `dir` before the engine opens it, so that an engine never silently creates
/// a new, empty store where one lived:
///
/// - missing, when `store_existed` (the directory holds a high-water record): [`Error::Damaged`],
///   in every mode;
/// - missing otherwise (a crash between writing the marker and creating the engine's files):
///   fine when `mode` creates, [`Error::NoStore`] when it does not (nothing is created);
/// - a file that is empty, or (for a [`FileStart::Header`] file) whose first 4 KiB are all zero,
///   when `store_existed`: [`Error::Damaged`] (no engine writes such a file once it holds a
///   store).
pub fn check_engine_file(
    dir: &Path,
    path: &Path,
    what: &str,
    start: FileStart,
    mode: OpenMode,
    store_existed: bool,
) -> Result<()> {
    let damaged = |problem: &str| Error::Damaged {
        path: dir.to_path_buf(),
        reason: format!(
            "its high-water record says a store lives here, but the {what} {} {problem}",
            path.display()
        ),
    };
    match fs::metadata(path) {
        Ok(meta) if meta.is_file() && store_existed => match blank(path, start)? {
            Some(problem) => Err(damaged(problem)),
            None => Ok(()),
        },
        Ok(_) => Ok(()),
        Err(e) if e.kind() == ErrorKind::NotFound => {
            if store_existed {
                Err(damaged("is missing"))
            } else if mode.creates() {
                Ok(())
            } else {
                Err(Error::NoStore {
                    path: dir.to_path_buf(),
                    reason: format!(
                        "it has a {MARKER_FILE} marker but no {what} ({} is missing)",
                        path.display()
                    ),
                })
            }
        }
        Err(e) => Err(Error::Io(e)),
    }
}

/// How an engine's main file begins, which decides what counts as blank.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileStart {
    /// With a header the engine writes when it creates the file and never clears (redb's magic,
    /// RocksDB's `CURRENT` line): leading zeros are damage.
    Header,
    /// With a log whose leading segments the engine may legitimately zero once they are freed
    /// (sled): only an empty file is damage here. A zeroed log reads as an older (empty) store,
    /// which the high-water record then refuses as [`Error::RolledBack`].
    Log,
}

/// `Some(problem)` when the file at `path` is empty or, for a [`FileStart::Header`] file, starts
/// with [`BLANK_PROBE_BYTES`] zeros.
fn blank(path: &Path, start: FileStart) -> Result<Option<&'static str>> {
    use std::io::Read;
    let mut probe = Vec::with_capacity(BLANK_PROBE_BYTES);
    fs::File::open(path)?
        .take(BLANK_PROBE_BYTES as u64)
        .read_to_end(&mut probe)?;
    Ok(if probe.is_empty() {
        Some("is empty")
    } else if start == FileStart::Header && probe.iter().all(|&b| b == 0) {
        Some("is zeroed")
    } else {
        None
    })
}

/// Creates `dir` when missing and checks (or, for an empty directory, writes) its marker.
///
/// Errors: [`Error::WrongBackend`] when the marker names another backend,
/// [`Error::UnsupportedFormat`] when it names a newer format, [`Error::ForeignDirectory`] when the
/// directory holds files but no marker (or an unreadable one).
pub fn claim_directory(dir: &Path, backend: &'static str) -> Result<()> {
    fs::create_dir_all(dir)?;
    match fs::read(dir.join(MARKER_FILE)) {
        Ok(bytes) => parse_marker(dir, &bytes)?.check(dir, backend),
        Err(e) if e.kind() == ErrorKind::NotFound => match foreign_entries(dir)? {
            Some(found) => Err(unmarked(dir, &found)),
            None => write_marker(dir, backend),
        },
        Err(e) => Err(Error::Io(e)),
    }
}

/// Rewrites the marker of `dir` (a store of `backend` being upgraded) with this build's
/// [`FORMAT_VERSION`], atomically.
pub fn upgrade_marker(dir: &Path, backend: &'static str) -> Result<()> {
    write_marker(dir, backend)
}

/// The first few entries of `dir` (sorted), `None` when it is empty.
fn foreign_entries(dir: &Path) -> Result<Option<String>> {
    let mut entries = fs::read_dir(dir)?
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect::<Vec<_>>();
    if entries.is_empty() {
        return Ok(None);
    }
    entries.sort();
    entries.truncate(5);
    Ok(Some(entries.join(", ")))
}

fn unmarked(dir: &Path, found: &str) -> Error {
    Error::ForeignDirectory {
        path: dir.to_path_buf(),
        reason: format!("no {MARKER_FILE} marker, but found {found}"),
    }
}

fn parse_marker(dir: &Path, bytes: &[u8]) -> Result<Marker> {
    let text = std::str::from_utf8(bytes).map_err(|_| Error::ForeignDirectory {
        path: dir.to_path_buf(),
        reason: format!("its {MARKER_FILE} marker is not text (damaged?)"),
    })?;
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
    let backend = field("backend").ok_or_else(|| foreign("marker has no backend line"))?;
    let format = field("format")
        .ok_or_else(|| foreign("marker has no format line"))?
        .parse()
        .map_err(|_| foreign("marker format is not a number"))?;
    Ok(Marker { backend, format })
}

fn write_marker(dir: &Path, backend: &str) -> Result<()> {
    write_file_atomically(
        dir,
        MARKER_FILE,
        format!("backend={backend}\nformat={FORMAT_VERSION}\n").as_bytes(),
    )
}

/// Writes `contents` as the file `name` in `dir`, atomically and durably: written to a temporary
/// file, synced, renamed over `name`, and the directory synced, so a crash leaves either the old
/// file or the whole new one, never a half-written file.
pub fn write_file_atomically(dir: &Path, name: &str, contents: &[u8]) -> Result<()> {
    use std::io::Write as _;
    let tmp = dir.join(format!("{name}.tmp"));
    {
        let mut f = fs::File::create(&tmp)?;
        f.write_all(contents)?;
        f.sync_all()?;
    }
    fs::rename(&tmp, dir.join(name))?;
    // The rename is durable only once the directory is synced.
    fs::File::open(dir)?.sync_all()?;
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
        fs::write(tmp.path().join(MARKER_FILE), b"backend=sl\xffed\n").unwrap();
        let err = claim_directory(tmp.path(), "sled").unwrap_err();
        assert!(matches!(err, Error::ForeignDirectory { .. }), "{err}");
        assert!(err.to_string().contains(MARKER_FILE), "{err}");

        let tmp = tempfile::tempdir().unwrap();
        fs::write(tmp.path().join(MARKER_FILE), "backend=sled\nformat=9\n").unwrap();
        assert!(matches!(
            claim_directory(tmp.path(), "sled"),
            Err(Error::UnsupportedFormat { found: 9, .. })
        ));
    }

    /// The names in `dir`, sorted, to show that a check changed nothing.
    fn listing(dir: &Path) -> Vec<String> {
        let mut out = Vec::new();
        for entry in fs::read_dir(dir).unwrap() {
            let entry = entry.unwrap();
            out.push(entry.file_name().to_string_lossy().into_owned());
        }
        out.sort();
        out
    }

    #[test]
    fn existing_stores_are_checked_without_creating_anything() {
        let tmp = tempfile::tempdir().unwrap();
        let missing = tmp.path().join("no").join("such");
        for mode in [OpenMode::MustExist, OpenMode::ReadOnly] {
            let err = open_directory(&missing, "redb", mode).unwrap_err();
            assert!(matches!(err, Error::NoStore { .. }), "{err}");
            assert!(err.to_string().contains("no such directory"), "{err}");
        }
        assert!(!tmp.path().join("no").exists());

        let empty = tmp.path().join("empty");
        fs::create_dir(&empty).unwrap();
        let err = check_directory(&empty, "redb").unwrap_err();
        assert!(matches!(err, Error::NoStore { .. }), "{err}");
        assert!(listing(&empty).is_empty());

        let file = tmp.path().join("file");
        fs::write(&file, "x").unwrap();
        assert!(matches!(read_marker(&file), Err(Error::NoStore { .. })));

        let stray = tmp.path().join("stray");
        fs::create_dir(&stray).unwrap();
        fs::write(stray.join("CURRENT"), "x").unwrap();
        let err = check_directory(&stray, "redb").unwrap_err();
        assert!(matches!(err, Error::ForeignDirectory { .. }), "{err}");
        assert_eq!(listing(&stray), ["CURRENT"]);

        let claimed = tmp.path().join("claimed");
        claim_directory(&claimed, "sled").unwrap();
        assert_eq!(
            read_marker(&claimed).unwrap(),
            Marker {
                backend: "sled".into(),
                format: FORMAT_VERSION
            }
        );
        check_directory(&claimed, "sled").unwrap();
        assert!(matches!(
            check_directory(&claimed, "redb"),
            Err(Error::WrongBackend { .. })
        ));
        let db = claimed.join("db");
        let err = check_engine_file(
            &claimed,
            &db,
            "sled database",
            FileStart::Log,
            OpenMode::MustExist,
            false,
        )
        .unwrap_err();
        assert!(matches!(err, Error::NoStore { .. }), "{err}");
        assert!(err.to_string().contains("sled database"), "{err}");
        assert_eq!(listing(&claimed), [MARKER_FILE]);
        check_engine_file(
            &claimed,
            &db,
            "sled database",
            FileStart::Log,
            OpenMode::CreateIfMissing,
            false,
        )
        .unwrap();
    }

    #[test]
    fn a_recorded_store_without_its_engine_file_is_damaged_in_every_mode() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        claim_directory(dir, "redb").unwrap();
        let file = dir.join("bucket.redb");
        let modes = [
            OpenMode::CreateIfMissing,
            OpenMode::MustExist,
            OpenMode::ReadOnly,
        ];
        let check = |mode| {
            check_engine_file(
                dir,
                &file,
                "redb database file",
                FileStart::Header,
                mode,
                true,
            )
        };
        let assert_damaged = |needle: &str| {
            for mode in modes {
                let err = check(mode).unwrap_err();
                assert!(matches!(err, Error::Damaged { .. }), "{err}");
                assert!(err.to_string().contains(needle), "{err}");
                assert!(err.to_string().contains("bucket.redb"), "{err}");
            }
        };
        assert_damaged("is missing");
        fs::write(&file, b"").unwrap();
        assert_damaged("is empty");
        fs::write(&file, vec![0u8; 10_000]).unwrap();
        assert_damaged("is zeroed");
        let mut header = vec![0u8; 10_000];
        header[4095] = 1;
        fs::write(&file, header).unwrap();
        for mode in modes {
            check(mode).unwrap();
        }
        // A log may begin with zeroed, freed segments: only an empty one is damage.
        fs::write(&file, vec![0u8; 10_000]).unwrap();
        check_engine_file(dir, &file, "sled database", FileStart::Log, modes[0], true).unwrap();
        fs::write(&file, b"").unwrap();
        let err = check_engine_file(dir, &file, "sled database", FileStart::Log, modes[0], true)
            .unwrap_err();
        assert!(matches!(err, Error::Damaged { .. }), "{err}");
    }
}
