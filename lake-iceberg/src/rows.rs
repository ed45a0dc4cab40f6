//! The table's rows: one versioned row per WAL record (bucket, key, offset, deleted, value), the
//! Iceberg schema that holds them, and their conversion to and from Arrow record batches.

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow_array::Array as _;
use arrow_array::cast::AsArray;
use arrow_array::{ArrayRef, BooleanArray, Int64Array, LargeBinaryArray, RecordBatch};
use iceberg::spec::{NestedField, PrimitiveType, Schema, Type};
use tidemark_bucket::{Error, Result};
use tidemark_engine_api::Record;

use crate::error::lake_error;

/// Column names, as the schema and the lookuper's filters spell them.
pub(crate) const BUCKET: &str = "bucket";
pub(crate) const KEY: &str = "key";
pub(crate) const OFFSET: &str = "offset";
pub(crate) const DELETED: &str = "deleted";
pub(crate) const VALUE: &str = "value";

/// One version of a key: what the WAL record at `offset` left (`None`: it was deleted).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Row {
    pub bucket: u64,
    pub key: Vec<u8>,
    pub offset: u64,
    pub value: Option<Vec<u8>>,
}

impl Row {
    /// The row a WAL record of `bucket` becomes.
    pub fn from_record(bucket: u64, record: &Record) -> Row {
        let value = match record {
            Record::Put { value, .. } => Some(value.clone()),
            Record::Delete { .. } => None,
        };
        Row {
            bucket,
            key: record.key().to_vec(),
            offset: record.offset(),
            value,
        }
    }
}

/// The newest version of each `(bucket, key)` among the rows added: the key's answer. A row
/// replaces the one kept unless that one has a higher offset, so a record that repeats an offset
/// for its key replaces the one before it, as it does in the engine.
#[derive(Debug, Default)]
pub(crate) struct Newest(BTreeMap<u64, BTreeMap<Vec<u8>, Row>>);

impl Newest {
    pub fn add(&mut self, row: Row) {
        let keys = self.0.entry(row.bucket).or_default();
        if keys
            .get(&row.key)
            .is_none_or(|kept| kept.offset <= row.offset)
        {
            keys.insert(row.key.clone(), row);
        }
    }

    /// The newest version of `key` in `bucket`.
    pub fn get(&self, bucket: u64, key: &[u8]) -> Option<&Row> {
        self.0.get(&bucket)?.get(key)
    }

    /// The newest versions, sorted by (bucket, key).
    pub fn into_rows(self) -> impl Iterator<Item = Row> {
        self.0.into_values().flat_map(BTreeMap::into_values)
    }
}

/// The table schema: the identity of a version is (bucket, key, offset).
pub(crate) fn table_schema() -> Result<Schema> {
    Schema::builder()
        .with_schema_id(0)
        .with_fields(vec![
            NestedField::required(1, BUCKET, Type::Primitive(PrimitiveType::Long)).into(),
            NestedField::required(2, KEY, Type::Primitive(PrimitiveType::Binary)).into(),
            NestedField::required(3, OFFSET, Type::Primitive(PrimitiveType::Long)).into(),
            NestedField::required(4, DELETED, Type::Primitive(PrimitiveType::Boolean)).into(),
            NestedField::optional(5, VALUE, Type::Primitive(PrimitiveType::Binary)).into(),
        ])
        .build()
        .map_err(|e| lake_error("cannot build the lake table's schema", e))
}

/// The rows as one record batch of the table's Arrow schema (with Iceberg field ids).
pub(crate) fn to_batch(schema: &Schema, rows: &[Row]) -> Result<RecordBatch> {
    let arrow_schema = iceberg::arrow::schema_to_arrow_schema(schema)
        .map_err(|e| lake_error("cannot map the lake schema to Arrow", e))?;
    let bucket: Int64Array = rows.iter().map(|r| Some(to_i64(r.bucket))).collect();
    let key: LargeBinaryArray = rows.iter().map(|r| Some(r.key.as_slice())).collect();
    let offset: Int64Array = rows.iter().map(|r| Some(to_i64(r.offset))).collect();
    let deleted: BooleanArray = rows.iter().map(|r| Some(r.value.is_none())).collect();
    let value: LargeBinaryArray = rows.iter().map(|r| r.value.as_deref()).collect();
    let columns: Vec<ArrayRef> = vec![
        Arc::new(bucket),
        Arc::new(key),
        Arc::new(offset),
        Arc::new(deleted),
        Arc::new(value),
    ];
    RecordBatch::try_new(Arc::new(arrow_schema), columns)
        .map_err(|e| lake_error("cannot build a record batch of lake rows", e))
}

/// The rows of a batch read from the table. Columns that were not selected read as empty
/// (bucket 0, empty key, offset 0); `deleted` decides whether `value` is read.
pub(crate) fn from_batch(batch: &RecordBatch) -> Result<Vec<Row>> {
    let n = batch.num_rows();
    let longs = |name: &str| -> Result<Option<Int64Array>> {
        batch
            .column_by_name(name)
            .map(|c| {
                c.as_primitive_opt::<arrow_array::types::Int64Type>()
                    .cloned()
                    .ok_or_else(|| corrupt(name))
            })
            .transpose()
    };
    let binary = |name: &str| -> Result<Option<LargeBinaryArray>> {
        batch
            .column_by_name(name)
            .map(|c| {
                c.as_binary_opt::<i64>()
                    .cloned()
                    .ok_or_else(|| corrupt(name))
            })
            .transpose()
    };
    let bucket = longs(BUCKET)?;
    let offset = longs(OFFSET)?;
    let key = binary(KEY)?;
    let value = binary(VALUE)?;
    let deleted = batch
        .column_by_name(DELETED)
        .map(|c| c.as_boolean_opt().cloned().ok_or_else(|| corrupt(DELETED)))
        .transpose()?;
    let mut rows = Vec::with_capacity(n);
    for i in 0..n {
        let deleted = deleted.as_ref().is_some_and(|d| d.value(i));
        let value = match (&value, deleted) {
            (Some(v), false) if v.is_valid(i) => Some(v.value(i).to_vec()),
            (Some(_), false) => return Err(corrupt("value (null in a put row)")),
            _ => None,
        };
        rows.push(Row {
            bucket: bucket.as_ref().map_or(0, |b| from_i64(b.value(i))),
            key: key.as_ref().map_or_else(Vec::new, |k| k.value(i).to_vec()),
            offset: offset.as_ref().map_or(0, |o| from_i64(o.value(i))),
            value,
        });
    }
    Ok(rows)
}

/// Offsets and bucket ids are `u64` in Tidemark and `long` in Iceberg; every offset a validated
/// batch carries is below 2^63, and bucket ids are checked on the way in.
pub(crate) fn to_i64(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

fn from_i64(v: i64) -> u64 {
    u64::try_from(v).unwrap_or(0)
}

fn corrupt(column: &str) -> Error {
    Error::lake(format!(
        "a lake data file has an unexpected `{column}` column: the table was not written by \
         Tidemark's tiering writer"
    ))
}
