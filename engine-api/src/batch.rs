//! Write batches and the input limits every backend enforces identically.

use crate::codec::display_key;
use crate::error::{Error, Result};

/// Largest accepted key, in bytes (64 KiB − 2): fjall's keys have a 16-bit length, and its
/// backend keeps the one longer key for a marker of its own, which no user key can meet.
pub const MAX_KEY_LEN: usize = 64 * 1024 - 2;
/// Largest accepted value payload, in bytes (64 MiB).
pub const MAX_VALUE_LEN: usize = 64 * 1024 * 1024;
/// Largest accepted offset: `u64::MAX` is reserved because the applied end (`offset + 1`) could
/// not be represented.
pub const MAX_OFFSET: u64 = u64::MAX - 1;

/// One change produced by one WAL record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Record {
    /// Store `value` under `key`, tagged with `offset`.
    Put {
        /// Non-empty key, at most [`MAX_KEY_LEN`] bytes.
        key: Vec<u8>,
        /// Payload, at most [`MAX_VALUE_LEN`] bytes.
        value: Vec<u8>,
        /// WAL offset that produced it.
        offset: u64,
    },
    /// Store a tombstone for `key`, tagged with `offset` (not a physical delete).
    Delete {
        /// Non-empty key, at most [`MAX_KEY_LEN`] bytes.
        key: Vec<u8>,
        /// WAL offset that produced it.
        offset: u64,
    },
}

impl Record {
    /// A put record.
    pub fn put(key: impl Into<Vec<u8>>, value: impl Into<Vec<u8>>, offset: u64) -> Self {
        Record::Put {
            key: key.into(),
            value: value.into(),
            offset,
        }
    }

    /// A delete record.
    pub fn delete(key: impl Into<Vec<u8>>, offset: u64) -> Self {
        Record::Delete {
            key: key.into(),
            offset,
        }
    }

    /// The record's key.
    pub fn key(&self) -> &[u8] {
        match self {
            Record::Put { key, .. } | Record::Delete { key, .. } => key,
        }
    }

    /// The record's WAL offset.
    pub fn offset(&self) -> u64 {
        match self {
            Record::Put { offset, .. } | Record::Delete { offset, .. } => *offset,
        }
    }

    /// Bytes the record occupies stored: its key plus its encoded value.
    pub fn stored_len(&self) -> u64 {
        let value = match self {
            Record::Put { value, .. } => value.len(),
            Record::Delete { .. } => 0,
        };
        (self.key().len() + crate::codec::HEADER_LEN + value) as u64
    }

    /// The record encoded in the stored value format.
    pub fn encoded_value(&self) -> Vec<u8> {
        match self {
            Record::Put { key, value, offset } => crate::codec::encode_value(key, *offset, value),
            Record::Delete { key, offset } => crate::codec::encode_tombstone(key, *offset).to_vec(),
        }
    }
}

/// An ordered group of records applied atomically.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WriteBatch {
    records: Vec<Record>,
}

impl WriteBatch {
    /// An empty batch.
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends a put.
    pub fn put(
        &mut self,
        key: impl Into<Vec<u8>>,
        value: impl Into<Vec<u8>>,
        offset: u64,
    ) -> &mut Self {
        self.records.push(Record::put(key, value, offset));
        self
    }

    /// Appends a delete (tombstone).
    pub fn delete(&mut self, key: impl Into<Vec<u8>>, offset: u64) -> &mut Self {
        self.records.push(Record::delete(key, offset));
        self
    }

    /// Appends any record.
    pub fn push(&mut self, record: Record) -> &mut Self {
        self.records.push(record);
        self
    }

    /// The records in order.
    pub fn records(&self) -> &[Record] {
        &self.records
    }

    /// Number of records.
    pub fn len(&self) -> usize {
        self.records.len()
    }

    /// Whether the batch holds no record.
    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    /// Checks every limit of the contract; on error nothing may be written.
    pub fn validate(&self) -> Result<()> {
        let mut previous: Option<u64> = None;
        for (index, record) in self.records.iter().enumerate() {
            validate_key(record.key())?;
            if let Record::Put { key, value, .. } = record
                && value.len() > MAX_VALUE_LEN
            {
                return Err(Error::invalid(format!(
                    "value for key {} is {} bytes, above the {MAX_VALUE_LEN}-byte limit",
                    display_key(key),
                    value.len()
                )));
            }
            let offset = record.offset();
            if offset > MAX_OFFSET {
                return Err(Error::invalid(format!(
                    "record {index} has offset {offset}; the largest accepted offset is {MAX_OFFSET}"
                )));
            }
            if let Some(prev) = previous
                && offset < prev
            {
                return Err(Error::invalid(format!(
                    "batch offsets go backwards: record {index} has offset {offset} after {prev}"
                )));
            }
            previous = Some(offset);
        }
        Ok(())
    }
}

impl FromIterator<Record> for WriteBatch {
    fn from_iter<I: IntoIterator<Item = Record>>(iter: I) -> Self {
        WriteBatch {
            records: iter.into_iter().collect(),
        }
    }
}

impl From<Vec<Record>> for WriteBatch {
    fn from(records: Vec<Record>) -> Self {
        WriteBatch { records }
    }
}

/// Rejects an empty key or one above [`MAX_KEY_LEN`].
pub fn validate_key(key: &[u8]) -> Result<()> {
    if key.is_empty() {
        return Err(Error::invalid("key is empty; keys must be at least 1 byte"));
    }
    if key.len() > MAX_KEY_LEN {
        return Err(Error::invalid(format!(
            "key is {} bytes, above the {MAX_KEY_LEN}-byte limit",
            key.len()
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_are_enforced_with_named_problems() {
        let mut b = WriteBatch::new();
        b.put("", "v", 1);
        assert!(b.validate().unwrap_err().to_string().contains("empty"));

        let mut b = WriteBatch::new();
        b.put(vec![1u8; MAX_KEY_LEN + 1], "v", 1);
        assert!(b.validate().unwrap_err().to_string().contains("key is"));

        let mut b = WriteBatch::new();
        b.put("k", vec![0u8; MAX_VALUE_LEN + 1], 1);
        assert!(b.validate().unwrap_err().to_string().contains("value"));

        let mut b = WriteBatch::new();
        b.put("a", "v", 5).put("b", "v", 4);
        assert!(b.validate().unwrap_err().to_string().contains("backwards"));

        let mut b = WriteBatch::new();
        b.delete("a", u64::MAX);
        assert!(b.validate().unwrap_err().to_string().contains("largest"));

        let mut b = WriteBatch::new();
        b.put(vec![1u8; MAX_KEY_LEN], "v", 5)
            .delete("a", 5)
            .put("b", "", 6);
        b.validate().unwrap();
    }
}
