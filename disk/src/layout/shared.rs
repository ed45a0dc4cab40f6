//! Where a bucket's data lives when buckets share an engine instance: the instances' directory
//! beside the bucket directories, and the record a bucket directory keeps of its place in one.
//!
//! A bucket directory of a shared layout holds its marker, its high-water record and a
//! [`SharedRecord`] naming the instance and the bucket's name in it (a keyspace, a key prefix).
//! The record also names the directory it was written in, so a copied or moved bucket directory,
//! which would name the same data as the original, is refused rather than opened as a second
//! store of the same rows.

use std::path::{Path, PathBuf};

use tidemark_engine_api::{Error, Result};

use crate::layout::write_file_atomically;

/// The directory `name` beside `bucket_dir` (in its parent), made absolute and free of symbolic
/// links (once the parent exists), so every path to the same bucket directory finds the same
/// shared instances. `backend` names the backend in the error of a directory without a parent.
pub fn shared_dir_of(bucket_dir: &Path, name: &str, backend: &str) -> Result<PathBuf> {
    // The bucket directory itself may be a link to a directory elsewhere.
    let resolved = std::fs::canonicalize(bucket_dir).ok();
    let bucket_dir = resolved.as_deref().unwrap_or(bucket_dir);
    let parent = match bucket_dir.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent,
        Some(_) => Path::new("."),
        None => {
            return Err(Error::invalid(format!(
                "a {backend} bucket directory needs a parent directory to share an instance in: {}",
                bucket_dir.display()
            )));
        }
    };
    let parent = std::fs::canonicalize(parent).unwrap_or_else(|_| parent.to_path_buf());
    Ok(parent.join(name))
}

/// A bucket directory's record of its place in a shared instance.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SharedRecord {
    /// The bucket's name in the instance (a keyspace name, a key prefix), never empty and
    /// without a line break.
    pub name: String,
    /// The instance's number among its directory's instances.
    pub instance: u32,
    /// The bucket directory the record was written in (absolute, links resolved).
    pub home: PathBuf,
}

impl SharedRecord {
    /// The record for a new bucket at `dir`, named `name` in instance `instance`. Refuses a
    /// directory whose resolved path is not UTF-8 or has a line break (the record could not hold
    /// it), and a name that is empty or has one.
    pub fn new(dir: &Path, name: String, instance: u32) -> Result<Self> {
        let home = std::fs::canonicalize(dir)?;
        if home.to_str().is_none_or(|h| h.contains('\n')) {
            return Err(Error::invalid(format!(
                "a bucket directory's path must be UTF-8 without line breaks: {}",
                home.display()
            )));
        }
        if name.is_empty() || name.contains('\n') {
            return Err(Error::invalid(format!(
                "a bucket's name in its shared instance must be one non-empty line: {name:?}"
            )));
        }
        Ok(SharedRecord {
            name,
            instance,
            home,
        })
    }

    /// Writes the record as the file `file` of `dir`, atomically and durably.
    pub fn write(&self, dir: &Path, file: &str) -> Result<()> {
        let body = format!(
            "name={}\ninstance={}\nhome={}\n",
            self.name,
            self.instance,
            self.home.display()
        );
        write_file_atomically(dir, file, body.as_bytes())
    }

    /// The record in the file `file` of `dir`; `None` when there is none, and
    /// [`Error::Damaged`] when it does not parse.
    pub fn read(dir: &Path, file: &str) -> Result<Option<Self>> {
        let text = match std::fs::read(dir.join(file)) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(Error::Io(e)),
        };
        let parsed = std::str::from_utf8(&text).ok().and_then(|t| {
            let (name, rest) = t.strip_prefix("name=")?.split_once('\n')?;
            let (instance, rest) = rest.strip_prefix("instance=")?.split_once('\n')?;
            let home = rest.strip_prefix("home=")?.strip_suffix('\n')?;
            let instance = instance.parse::<u32>().ok()?;
            (!name.is_empty() && !home.is_empty()).then(|| SharedRecord {
                name: name.to_owned(),
                instance,
                home: PathBuf::from(home),
            })
        });
        match parsed {
            Some(record) => Ok(Some(record)),
            None => Err(Error::Damaged {
                path: dir.to_path_buf(),
                reason: format!("its {file} is unreadable ({} bytes)", text.len()),
            }),
        }
    }

    /// Refuses the record when `dir` is not the directory it was written in: a copied or moved
    /// bucket directory of a shared layout is not a store of its own (its data stays in the
    /// instance beside the original, `shared` names it in the message).
    pub fn check_home(&self, dir: &Path, backend: &'static str, shared: &str) -> Result<()> {
        let home = std::fs::canonicalize(dir)?;
        if home == self.home {
            return Ok(());
        }
        Err(Error::backend(
            backend,
            format!(
                "the {backend} bucket directory {} was created as {}: a copied or moved bucket \
                 directory is not a store of its own (its data stays in the shared instance {} \
                 beside the original)",
                dir.display(),
                self.home.display(),
                shared
            ),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_round_trips_and_knows_its_home() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("b");
        std::fs::create_dir(&dir).unwrap();
        assert_eq!(SharedRecord::read(&dir, "rec").unwrap(), None);
        let record = SharedRecord::new(&dir, "17".to_owned(), 0).unwrap();
        record.write(&dir, "rec").unwrap();
        let read = SharedRecord::read(&dir, "rec").unwrap().unwrap();
        assert_eq!(read, record);
        read.check_home(&dir, "rocksdb", ".shared").unwrap();
        let copy = tmp.path().join("copy");
        std::fs::create_dir(&copy).unwrap();
        let err = read.check_home(&copy, "rocksdb", ".shared").unwrap_err();
        assert!(err.to_string().contains("copied or moved"), "{err}");
        assert_eq!(
            shared_dir_of(&dir, ".shared", "rocksdb").unwrap(),
            std::fs::canonicalize(tmp.path()).unwrap().join(".shared")
        );
    }

    #[test]
    fn a_damaged_record_is_damage_not_absence() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::write(tmp.path().join("rec"), b"name=\ninstance=x\n").unwrap();
        let err = SharedRecord::read(tmp.path(), "rec").unwrap_err();
        assert!(matches!(err, Error::Damaged { .. }), "{err}");
        assert!(SharedRecord::new(tmp.path(), String::new(), 0).is_err());
    }
}
