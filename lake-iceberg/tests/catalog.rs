//! The table the lake commits, read through the same SQL catalog by another implementation of
//! the catalog (the `iceberg-catalog-sql` crate) and scanned with Iceberg's own reader, not the
//! lake's lookuper: every live key's newest value is there, and deleted keys are not. Once on
//! the embedded default (SQLite, local directory), once on a PostgreSQL catalog with the
//! warehouse on an S3-protocol server (`scripts/lake-servers.sh` starts both).
#![allow(clippy::unwrap_used)] // test code

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use arrow_array::{Array, BooleanArray, Int64Array, LargeBinaryArray};
use futures::TryStreamExt;
use iceberg::io::{LocalFsStorageFactory, StorageFactory};
use iceberg::{Catalog, CatalogBuilder, TableIdent};
use iceberg_catalog_sql::{SQL_CATALOG_PROP_URI, SQL_CATALOG_PROP_WAREHOUSE, SqlCatalogBuilder};
use iceberg_storage_opendal::OpenDalStorageFactory;
use tidemark_engine_api::Record;
use tidemark_lake_iceberg::test_servers::TestServers;
use tidemark_lake_iceberg::{IcebergLake, LakeConfig, OFFSETS_PROPERTY};

/// A row's identity: its bucket and key.
type Id = (i64, Vec<u8>);

#[tokio::test]
async fn another_sql_catalog_reads_every_live_keys_newest_value() {
    let dir = tempfile::tempdir().unwrap();
    let config = LakeConfig::embedded(dir.path());
    reads_every_live_keys_newest_value(&config, Arc::new(LocalFsStorageFactory)).await;
}

#[tokio::test]
async fn another_sql_catalog_reads_every_live_keys_newest_value_on_postgres_and_s3() {
    let servers = TestServers::get();
    let config = servers.table(&TestServers::unique_name("catalog"));
    let storage = Arc::new(OpenDalStorageFactory::S3 {
        customized_credential_load: None,
    });
    reads_every_live_keys_newest_value(&config, storage).await;
}

/// Writes a table through `config`, then reads it with `iceberg-catalog-sql` over the same
/// catalog, with `storage` for its files.
async fn reads_every_live_keys_newest_value(config: &LakeConfig, storage: Arc<dyn StorageFactory>) {
    let lake = IcebergLake::open_with(config).await.unwrap();
    let writer = lake.tiering_writer().await.unwrap();
    let mut model: BTreeMap<Id, Option<Vec<u8>>> = BTreeMap::new();
    let mut offsets = HashMap::from([(1u64, 0u64), (2, 0)]);
    for round in 0..4u64 {
        for bucket in [1u64, 2] {
            let offset = offsets[&bucket];
            let mut records = Vec::new();
            for k in 0..10u64 {
                // Binary keys, some longer than Parquet's 64-byte statistics.
                let mut key = vec![0u8, 0xff, k as u8];
                if k % 3 == 0 {
                    key.extend(std::iter::repeat_n(b'x', 70));
                }
                let at = offset + k;
                if (k + round) % 4 == 0 {
                    records.push(Record::delete(key.clone(), at));
                    model.insert((bucket as i64, key), None);
                } else {
                    let value = format!("{bucket}:{round}:{k}");
                    records.push(Record::put(key.clone(), value.clone(), at));
                    model.insert((bucket as i64, key), Some(value.into_bytes()));
                }
            }
            writer.append(bucket, records).await.unwrap();
            offsets.insert(bucket, offset + 10);
        }
        writer
            .commit(&[(1, offsets[&1]), (2, offsets[&2])])
            .await
            .unwrap();
        if round == 1 {
            lake.compact().await.unwrap();
        }
    }
    let expiry = lake.expire_snapshots(2).await.unwrap();
    // The sweep found the expired snapshots' files in the warehouse's listing and deleted them.
    assert!(expiry.snapshots > 0 && expiry.files > 0, "{expiry:?}");

    // The object store's settings are file IO properties, which the catalog hands its tables.
    let mut props: HashMap<String, String> = config
        .storage
        .iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    props.insert(
        iceberg::io::S3_PATH_STYLE_ACCESS.to_owned(),
        "true".to_owned(),
    );
    props
        .entry(iceberg::io::S3_REGION.to_owned())
        .or_insert_with(|| "us-east-1".to_owned());
    props.insert(SQL_CATALOG_PROP_URI.to_owned(), config.catalog_uri.clone());
    props.insert(
        SQL_CATALOG_PROP_WAREHOUSE.to_owned(),
        lake.location().to_owned(),
    );
    let catalog = SqlCatalogBuilder::default()
        .with_storage_factory(storage)
        .load(&config.catalog_name, props)
        .await
        .unwrap();
    let ident = TableIdent::from_strs([config.namespace.as_str(), config.table.as_str()]).unwrap();
    let table = catalog.load_table(&ident).await.unwrap();
    assert_eq!(
        table.metadata_location(),
        Some(lake.metadata_location().await.unwrap().as_str())
    );
    let summary = &table.metadata().current_snapshot().unwrap().summary();
    assert_eq!(
        summary.additional_properties[OFFSETS_PROPERTY],
        "{\"1\":40,\"2\":40}"
    );

    // Newest version of every (bucket, key) in the table, by Iceberg's own scan.
    let mut newest: BTreeMap<Id, (i64, Option<Vec<u8>>)> = BTreeMap::new();
    let mut batches = table.scan().build().unwrap().to_arrow().await.unwrap();
    while let Some(batch) = batches.try_next().await.unwrap() {
        let column = |name: &str| batch.column_by_name(name).unwrap().clone();
        let bucket = column("bucket");
        let bucket = bucket.as_any().downcast_ref::<Int64Array>().unwrap();
        let key = column("key");
        let key = key.as_any().downcast_ref::<LargeBinaryArray>().unwrap();
        let offset = column("offset");
        let offset = offset.as_any().downcast_ref::<Int64Array>().unwrap();
        let deleted = column("deleted");
        let deleted = deleted.as_any().downcast_ref::<BooleanArray>().unwrap();
        let value = column("value");
        let value = value.as_any().downcast_ref::<LargeBinaryArray>().unwrap();
        for row in 0..batch.num_rows() {
            let answer = (!deleted.value(row)).then(|| value.value(row).to_vec());
            let slot = newest
                .entry((bucket.value(row), key.value(row).to_vec()))
                .or_insert((-1, None));
            if offset.value(row) > slot.0 {
                *slot = (offset.value(row), answer);
            }
        }
    }
    for (id, expected) in &model {
        let found = newest.get(id).and_then(|(_, v)| v.clone());
        assert_eq!(&found, expected, "bucket {} key {:?}", id.0, id.1);
    }
}
