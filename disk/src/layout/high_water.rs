//! The durable high-water record: `W` and the applied end a store is known to have reached,
//! kept in a small file beside the marker, outside the engine.
//!
//! An engine that restores less than it acknowledged (a truncated or damaged log that its
//! recovery silently stops at, a file replaced by an older copy) looks like a valid store to
//! itself. The record is written only after the engine made the state it records durable (at
//! each watermark change, at `flush` and at close) and checked at every open, so such a rollback
//! below the record is [`Error::RolledBack`] instead of an older store served as current.
//! Damage newer than the last record cannot be told from writes that were never made.
//!
//! The file is text, written atomically (temporary file, fsync, rename, fsync of the directory):
//!
//! ```text
//! watermark=<W>
//! applied_end=<applied end>
//! crc32=<8 hex digits of the CRC-32 of the two lines above, newlines included>
//! ```

use std::fs;
use std::io::ErrorKind;
use std::path::Path;

use tidemark_engine_api::{Error, Result};

/// Name of the high-water record inside a bucket directory.
pub const HIGH_WATER_FILE: &str = "TIDEMARK.high-water";

/// What a store is known to have reached durably.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HighWater {
    /// The watermark `W`.
    pub watermark: u64,
    /// The applied end.
    pub applied_end: u64,
}

impl HighWater {
    /// Whether `self` is at or above `other` in both positions.
    pub fn covers(&self, other: &HighWater) -> bool {
        self.watermark >= other.watermark && self.applied_end >= other.applied_end
    }

    /// The larger of each position.
    pub fn max(&self, other: &HighWater) -> HighWater {
        HighWater {
            watermark: self.watermark.max(other.watermark),
            applied_end: self.applied_end.max(other.applied_end),
        }
    }

    /// [`Error::RolledBack`] when `restored` (what the engine reopened with) is below this
    /// record in either position.
    pub fn check(&self, dir: &Path, restored: &HighWater) -> Result<()> {
        if restored.covers(self) {
            return Ok(());
        }
        Err(Error::RolledBack {
            path: dir.to_path_buf(),
            file: HIGH_WATER_FILE,
            watermark: restored.watermark,
            applied_end: restored.applied_end,
            recorded_watermark: self.watermark,
            recorded_applied_end: self.applied_end,
        })
    }

    fn body(&self) -> String {
        format!(
            "watermark={}\napplied_end={}\n",
            self.watermark, self.applied_end
        )
    }
}

/// Reads the record of the store at `dir`: `None` when there is none (a store created before
/// records existed, or one whose creation was interrupted before its first record).
///
/// Errors: [`Error::Damaged`] naming the file when it exists but does not parse or its checksum
/// fails; [`Error::Io`] when it cannot be read.
pub fn read(dir: &Path) -> Result<Option<HighWater>> {
    let text = match fs::read(dir.join(HIGH_WATER_FILE)) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(Error::Io(e)),
    };
    parse(&text).map(Some).map_err(|reason| Error::Damaged {
        path: dir.to_path_buf(),
        reason: format!("its high-water record {HIGH_WATER_FILE} is unreadable: {reason}"),
    })
}

/// Writes `record` as the record of the store at `dir`, atomically and durably.
pub fn write(dir: &Path, record: &HighWater) -> Result<()> {
    let body = record.body();
    let text = format!("{body}crc32={:08x}\n", crc32fast::hash(body.as_bytes()));
    super::write_file_atomically(dir, HIGH_WATER_FILE, text.as_bytes())
}

fn parse(bytes: &[u8]) -> std::result::Result<HighWater, String> {
    let text = std::str::from_utf8(bytes).map_err(|_| "not UTF-8 text".to_string())?;
    let (body, sum_line) = match text.trim_end_matches('\n').rsplit_once('\n') {
        Some((body, sum)) => (format!("{body}\n"), sum),
        None => return Err(format!("{} bytes, not three lines", bytes.len())),
    };
    let stored = sum_line
        .strip_prefix("crc32=")
        .and_then(|hex| u32::from_str_radix(hex, 16).ok())
        .ok_or_else(|| "no crc32 line".to_string())?;
    let computed = crc32fast::hash(body.as_bytes());
    if stored != computed {
        return Err(format!(
            "checksum mismatch (stored {stored:08x}, computed {computed:08x})"
        ));
    }
    let field = |name: &str| {
        body.lines()
            .find_map(|line| line.strip_prefix(name)?.strip_prefix('='))
            .and_then(|v| v.parse::<u64>().ok())
            .ok_or_else(|| format!("no {name} line"))
    };
    Ok(HighWater {
        watermark: field("watermark")?,
        applied_end: field("applied_end")?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_is_absent_until_written() {
        let tmp = tempfile::tempdir().unwrap();
        assert_eq!(read(tmp.path()).unwrap(), None);
        let record = HighWater {
            watermark: 7,
            applied_end: u64::MAX,
        };
        write(tmp.path(), &record).unwrap();
        assert_eq!(read(tmp.path()).unwrap(), Some(record));
        assert!(!tmp.path().join(format!("{HIGH_WATER_FILE}.tmp")).exists());
    }

    #[test]
    fn damaged_records_are_named_errors() {
        let tmp = tempfile::tempdir().unwrap();
        write(
            tmp.path(),
            &HighWater {
                watermark: 3,
                applied_end: 9,
            },
        )
        .unwrap();
        let path = tmp.path().join(HIGH_WATER_FILE);
        let good = fs::read(&path).unwrap();
        let mut flipped = good.clone();
        flipped[10] ^= 0x01;
        for bad in [
            Vec::new(),
            vec![0; good.len()],
            flipped,
            good[..good.len() / 2].to_vec(),
        ] {
            fs::write(&path, &bad).unwrap();
            let err = read(tmp.path()).unwrap_err();
            assert!(matches!(err, Error::Damaged { .. }), "{err}");
            assert!(err.to_string().contains(HIGH_WATER_FILE), "{err}");
        }
    }

    #[test]
    fn a_restore_below_the_record_is_a_rollback() {
        let record = HighWater {
            watermark: 3,
            applied_end: 9,
        };
        let dir = Path::new("/x");
        record.check(dir, &record).unwrap();
        record
            .check(
                dir,
                &HighWater {
                    watermark: 4,
                    applied_end: 9,
                },
            )
            .unwrap();
        for restored in [
            HighWater {
                watermark: 2,
                applied_end: 9,
            },
            HighWater {
                watermark: 3,
                applied_end: 8,
            },
            HighWater::default(),
        ] {
            let err = record.check(dir, &restored).unwrap_err();
            assert!(matches!(err, Error::RolledBack { .. }), "{err}");
        }
    }
}
