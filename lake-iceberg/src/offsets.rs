//! The snapshot summary property that records how far each bucket's WAL is in the table, as
//! Fluss's tiering service records its log end offsets.

use std::collections::BTreeMap;

use tidemark_bucket::{Error, Result};

/// The summary property: a JSON object from bucket id (a decimal string) to the bucket's
/// exclusive end offset.
pub const OFFSETS_PROPERTY: &str = "fluss-offsets";

/// Every bucket's exclusive end offset in one snapshot (a bucket never tiered ends at 0).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct BucketEnds(BTreeMap<u64, u64>);

impl BucketEnds {
    /// The end offset of `bucket`.
    pub fn get(&self, bucket: u64) -> u64 {
        self.0.get(&bucket).copied().unwrap_or(0)
    }

    /// Sets the end offset of `bucket`.
    pub fn set(&mut self, bucket: u64, end: u64) {
        self.0.insert(bucket, end);
    }

    /// The property's value.
    pub fn encode(&self) -> String {
        let map: serde_json::Map<String, serde_json::Value> = self
            .0
            .iter()
            .map(|(b, e)| (b.to_string(), serde_json::Value::from(*e)))
            .collect();
        serde_json::Value::Object(map).to_string()
    }

    /// Reads the property of a snapshot summary (absent: nothing tiered yet).
    pub fn decode(value: Option<&String>) -> Result<BucketEnds> {
        let Some(value) = value else {
            return Ok(BucketEnds::default());
        };
        let bad = || {
            Error::lake(format!(
                "the lake snapshot's `{OFFSETS_PROPERTY}` property is not a map of bucket ids to \
                 end offsets: {value}"
            ))
        };
        let parsed: serde_json::Value = serde_json::from_str(value).map_err(|_| bad())?;
        let object = parsed.as_object().ok_or_else(bad)?;
        let mut ends = BTreeMap::new();
        for (bucket, end) in object {
            let bucket: u64 = bucket.parse().map_err(|_| bad())?;
            let end = end.as_u64().ok_or_else(bad)?;
            ends.insert(bucket, end);
        }
        Ok(BucketEnds(ends))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ends_round_trip_and_bad_values_are_refused() {
        let mut ends = BucketEnds::default();
        ends.set(3, 17);
        ends.set(0, u64::MAX >> 1);
        let encoded = ends.encode();
        assert_eq!(BucketEnds::decode(Some(&encoded)).unwrap(), ends);
        assert_eq!(ends.get(9), 0);
        assert_eq!(BucketEnds::decode(None).unwrap(), BucketEnds::default());
        for bad in ["[]", "{\"x\":1}", "{\"1\":-2}", "not json"] {
            assert!(BucketEnds::decode(Some(&bad.to_owned())).is_err(), "{bad}");
        }
    }
}
