//! The Iceberg lake on its own: tiering, lookups at snapshots, restart, failed commits, damaged
//! files, expiry and compaction.
#![allow(clippy::unwrap_used)] // test code

use tidemark_bucket::{Error, LakeLookuper, LakeSnapshot};
use tidemark_engine_api::Record;
use tidemark_lake_iceberg::{
    EMBEDDED_CATALOG_FILE, IcebergLake, IcebergLookuper, LakeConfig, OFFSETS_PROPERTY,
    TieringWriter,
};

fn put(key: &str, offset: u64) -> Record {
    Record::put(key, format!("{key}@{offset}"), offset)
}

fn value(key: &str, offset: u64) -> Option<Vec<u8>> {
    Some(format!("{key}@{offset}").into_bytes())
}

fn keys(names: &[&str]) -> Vec<Vec<u8>> {
    names.iter().map(|k| k.as_bytes().to_vec()).collect()
}

/// A new lake in a temporary directory (which must outlive it), and its tiering writer.
async fn new_lake() -> (tempfile::TempDir, IcebergLake, TieringWriter) {
    let dir = tempfile::tempdir().unwrap();
    let lake = IcebergLake::open(dir.path()).await.unwrap();
    let writer = lake.tiering_writer().await.unwrap();
    (dir, lake, writer)
}

/// Appends `records` to `bucket` and commits them below `end`: the snapshot as the bucket sees
/// it.
async fn tier(
    writer: &TieringWriter,
    bucket: u64,
    records: impl IntoIterator<Item = Record>,
    end: u64,
) -> LakeSnapshot {
    writer.append(bucket, records).await.unwrap();
    writer
        .commit(&[(bucket, end)])
        .await
        .unwrap()
        .snapshot(bucket)
}

/// A lookuper of `bucket` refreshed to `snapshot`.
async fn serving(lake: &IcebergLake, bucket: u64, snapshot: LakeSnapshot) -> IcebergLookuper {
    let lookuper = lake.lookuper(bucket);
    lookuper.refresh(snapshot).await.unwrap();
    lookuper
}

#[tokio::test]
async fn commits_are_snapshots_ordered_by_sequence_with_each_buckets_end() {
    let (_dir, lake, writer) = new_lake().await;
    assert_eq!(lake.latest(1).await.unwrap(), LakeSnapshot::default());
    writer
        .append(
            1,
            [
                put("a", 0),
                put("b", 1),
                Record::delete("a", 2),
                put("b", 3),
            ],
        )
        .await
        .unwrap();
    writer.append(2, [put("a", 0)]).await.unwrap();

    let first = writer.commit(&[(1, 2), (2, 1)]).await.unwrap();
    assert_eq!(first.snapshot(1), LakeSnapshot::new(1, 2));
    assert_eq!(first.snapshot(2), LakeSnapshot::new(1, 1));
    assert_eq!(first.rows(), 3);
    // Bucket 2 keeps its end when only bucket 1 moves; an untiered bucket ends at 0.
    let second = writer.commit(&[(1, 4)]).await.unwrap();
    assert_eq!(second.snapshot(1), LakeSnapshot::new(2, 4));
    assert_eq!(second.snapshot(2), LakeSnapshot::new(2, 1));
    assert_eq!(second.snapshot(9), LakeSnapshot::new(2, 0));
    assert_eq!(lake.latest(1).await.unwrap(), LakeSnapshot::new(2, 4));
    assert_eq!(
        lake.snapshots(1).await.unwrap(),
        vec![LakeSnapshot::new(1, 2), LakeSnapshot::new(2, 4)]
    );

    let one = lake.lookuper(1);
    // Before a refresh the lookuper serves the empty lake.
    assert_eq!(one.lookup(b"b").await.unwrap(), None);
    one.refresh(first.snapshot(1)).await.unwrap();
    assert_eq!(one.lookup(b"a").await.unwrap(), value("a", 0));
    assert_eq!(one.lookup(b"b").await.unwrap(), value("b", 1));
    one.refresh(second.snapshot(1)).await.unwrap();
    assert_eq!(one.lookup(b"a").await.unwrap(), None, "deleted at offset 2");
    assert_eq!(one.lookup(b"b").await.unwrap(), value("b", 3));
    assert_eq!(one.lookup(b"never").await.unwrap(), None);
    // Time travel back to the first snapshot still answers as of it.
    one.refresh(first.snapshot(1)).await.unwrap();
    assert_eq!(one.lookup(b"b").await.unwrap(), value("b", 1));

    // Buckets do not see each other's keys.
    let two = serving(&lake, 2, second.snapshot(2)).await;
    assert_eq!(two.lookup(b"a").await.unwrap(), value("a", 0));
    assert_eq!(two.lookup(b"b").await.unwrap(), None);
}

#[tokio::test]
async fn refreshes_to_unknown_or_mismatched_snapshots_are_refused_and_keep_what_is_served() {
    let (_dir, lake, writer) = new_lake().await;
    let s1 = tier(&writer, 1, [put("a", 0)], 1).await;
    let lookuper = serving(&lake, 1, s1).await;
    for bad in [
        LakeSnapshot::new(5, 1),
        LakeSnapshot::new(1, 2),
        LakeSnapshot::new(0, 1),
    ] {
        let err = lookuper.refresh(bad).await.unwrap_err();
        assert!(matches!(err, Error::Lake { .. }), "{bad:?}: {err}");
    }
    assert_eq!(lookuper.served(), s1);
    assert_eq!(lookuper.lookup(b"a").await.unwrap(), value("a", 0));
    lookuper.refresh(LakeSnapshot::default()).await.unwrap();
    assert_eq!(lookuper.lookup(b"a").await.unwrap(), None);
}

#[tokio::test]
async fn invalid_appends_and_commits_are_refused_and_change_nothing() {
    let (_dir, lake, writer) = new_lake().await;
    writer.append(1, [put("a", 5)]).await.unwrap();
    assert!(matches!(
        writer.append(1, [put("a", 4)]).await,
        Err(Error::InvalidInput(_))
    ));
    assert!(matches!(
        writer.append(u64::MAX, [put("a", 4)]).await,
        Err(Error::InvalidInput(_))
    ));
    writer.commit(&[(1, 6)]).await.unwrap();
    assert!(matches!(
        writer.commit(&[(1, 5)]).await,
        Err(Error::InvalidInput(_))
    ));
    assert!(matches!(
        writer.commit(&[(2, 3), (2, 4)]).await,
        Err(Error::InvalidInput(_))
    ));
    assert_eq!(lake.latest(1).await.unwrap(), LakeSnapshot::new(1, 6));
    assert_eq!(lake.latest(2).await.unwrap(), LakeSnapshot::new(1, 0));
    // An end beyond the records appended is an offset range the log skipped.
    let skip = writer.commit(&[(1, 9)]).await.unwrap();
    assert_eq!(skip.rows(), 0);
    assert_eq!(skip.snapshot(1), LakeSnapshot::new(2, 9));
}

#[tokio::test]
async fn a_reopened_table_keeps_every_commit_and_the_writer_resumes_from_its_ends() {
    let (dir, lake, writer) = new_lake().await;
    tier(&writer, 3, [put("a", 0), put("a", 1)], 1).await;
    writer.commit(&[(3, 2)]).await.unwrap();
    drop((writer, lake));
    let lake = IcebergLake::open(dir.path()).await.unwrap();
    assert_eq!(lake.latest(3).await.unwrap(), LakeSnapshot::new(2, 2));
    let writer = lake.tiering_writer().await.unwrap();
    assert_eq!(writer.committed_end(3).await, 2);
    // A replay from an older position skips what the table holds.
    writer
        .append(3, [put("a", 0), put("a", 1), put("b", 2)])
        .await
        .unwrap();
    let commit = writer.commit(&[(3, 3)]).await.unwrap();
    assert_eq!(commit.rows(), 1);
    let lookuper = serving(&lake, 3, commit.snapshot(3)).await;
    assert_eq!(
        lookuper.lookup_many(&keys(&["a", "b"])).await.unwrap(),
        vec![value("a", 1), value("b", 2)]
    );
}

#[tokio::test]
async fn a_failed_commit_changes_nothing_and_its_records_commit_on_the_retry() {
    let (dir, lake, writer) = new_lake().await;
    let s1 = tier(&writer, 1, [put("a", 0)], 1).await;
    writer.append(1, [put("a", 1), put("b", 2)]).await.unwrap();

    // The data directory is replaced by a file: writing the commit's data file fails.
    let data = dir.path().join("data");
    let moved = dir.path().join("data-moved");
    std::fs::rename(&data, &moved).unwrap();
    std::fs::write(&data, b"not a directory").unwrap();
    let err = writer.commit(&[(1, 3)]).await.unwrap_err();
    assert!(matches!(err, Error::Lake { .. }), "{err}");
    assert_eq!(lake.latest(1).await.unwrap(), s1);
    assert_eq!(writer.committed_end(1).await, 1);

    std::fs::remove_file(&data).unwrap();
    std::fs::rename(&moved, &data).unwrap();
    let reopened = IcebergLake::open(dir.path()).await.unwrap();
    assert_eq!(reopened.latest(1).await.unwrap(), s1);
    let s2 = writer.commit(&[(1, 3)]).await.unwrap().snapshot(1);
    assert_eq!(s2, LakeSnapshot::new(2, 3));
    let lookuper = serving(&lake, 1, s2).await;
    assert_eq!(
        lookuper.lookup_many(&keys(&["a", "b"])).await.unwrap(),
        vec![value("a", 1), value("b", 2)]
    );
}

#[tokio::test]
async fn metadata_written_without_its_catalog_entry_is_not_a_commit() {
    let (dir, lake, writer) = new_lake().await;
    let s1 = tier(&writer, 1, [put("a", 0)], 1).await;
    drop((writer, lake));

    // A commit that crashed after writing its metadata file (here: half of one).
    let metadata = dir.path().join("metadata");
    std::fs::write(
        metadata.join("00099-0190c0de-0000-7000-8000-000000000000.metadata.json"),
        b"{\"format-version\": 2, \"tab",
    )
    .unwrap();
    let lake = IcebergLake::open(dir.path()).await.unwrap();
    assert_eq!(lake.latest(1).await.unwrap(), s1);
}

/// A table whose metadata a pointer file named (before the SQL catalog) is registered in the
/// catalog at its first open, and the pointer goes; a pointer naming no metadata is an error and
/// registers nothing.
#[tokio::test]
async fn a_pointer_file_table_moves_into_the_catalog_and_a_damaged_pointer_is_an_error() {
    let (dir, lake, writer) = new_lake().await;
    let s1 = tier(&writer, 1, [put("a", 0)], 1).await;
    let location = lake.metadata_location().await.unwrap();
    drop((writer, lake));
    let catalog_files = |dir: &std::path::Path| {
        std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| {
                p.file_name()
                    .is_some_and(|n| n.to_string_lossy().starts_with(EMBEDDED_CATALOG_FILE))
            })
            .collect::<Vec<_>>()
    };
    let legacy = |dir: &std::path::Path, pointer: &[u8]| {
        for file in catalog_files(dir) {
            std::fs::remove_file(file).unwrap();
        }
        std::fs::write(dir.join("metadata/tidemark-current"), pointer).unwrap();
    };

    legacy(dir.path(), b"/nowhere/x.metadata.json");
    let err = IcebergLake::open(dir.path()).await.unwrap_err();
    assert!(matches!(err, Error::Lake { .. }), "{err}");
    legacy(dir.path(), b"");
    assert!(IcebergLake::open(dir.path()).await.is_err());

    legacy(dir.path(), location.as_bytes());
    let lake = IcebergLake::open(dir.path()).await.unwrap();
    assert_eq!(lake.latest(1).await.unwrap(), s1);
    assert_eq!(lake.metadata_location().await.unwrap(), location);
    assert!(!dir.path().join("metadata/tidemark-current").exists());
    let lookuper = lake.lookuper(1);
    lookuper.refresh(s1).await.unwrap();
    assert_eq!(lookuper.lookup(b"a").await.unwrap(), value("a", 0));
}

#[tokio::test]
async fn expired_snapshots_are_refused_and_a_reader_of_one_moves_forward_once() {
    let (dir, lake, writer) = new_lake().await;
    let records = [
        put("a", 0),
        put("b", 1),
        Record::delete("b", 2),
        put("a", 3),
    ];
    let s1 = tier(&writer, 1, records, 2).await;
    let s2 = writer.commit(&[(1, 4)]).await.unwrap().snapshot(1);
    let old = serving(&lake, 1, s1).await;
    assert_eq!(old.lookup(b"b").await.unwrap(), value("b", 1));
    let reader = serving(&lake, 1, s2).await;

    // Compaction: one file with each key's newest version, a snapshot at the same end.
    let s3 = lake.compact().await.unwrap().unwrap();
    assert_eq!(s3, 3);
    assert_eq!(lake.latest(1).await.unwrap(), LakeSnapshot::new(3, 4));
    let expiry = lake.expire_snapshots(1).await.unwrap();
    assert_eq!(expiry.snapshots, 2);
    assert!(expiry.files >= 2, "{expiry:?}");
    assert_eq!(
        lake.snapshots(1).await.unwrap(),
        vec![LakeSnapshot::new(3, 4)]
    );
    // The old data files are gone.
    let parquet: Vec<_> = std::fs::read_dir(dir.path().join("data"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(parquet.len(), 1, "{parquet:?}");
    assert!(parquet[0].starts_with("compact"), "{parquet:?}");

    // Refreshing to an expired snapshot says so.
    let fresh = lake.lookuper(1);
    let err = fresh.refresh(s2).await.unwrap_err();
    assert!(err.to_string().contains("expired"), "{err}");

    // The reader still served s2: its read fails, it moves to the compaction's snapshot, which
    // ends where s2 did, and retries once.
    assert_eq!(reader.lookup(b"b").await.unwrap(), None);
    assert_eq!(reader.lookup(b"a").await.unwrap(), value("a", 3));
    assert_eq!(reader.served(), LakeSnapshot::new(3, 4));
    assert_eq!(reader.counters().retries, 1);
    assert_eq!(reader.counters().lookup_failures, 0);

    // The reader of s1 has no live snapshot at its end: it fails, and keeps failing until
    // refreshed, rather than answer from records past its end.
    let err = old.lookup(b"b").await.unwrap_err();
    assert!(matches!(err, Error::Lake { .. }), "{err}");
    assert_eq!(old.served(), s1);
    assert_eq!(old.counters().lookup_failures, 1);
    old.refresh(LakeSnapshot::new(3, 4)).await.unwrap();
    assert_eq!(old.lookup(b"b").await.unwrap(), None);

    assert!(matches!(
        lake.expire_snapshots(0).await,
        Err(Error::InvalidInput(_))
    ));
}

#[tokio::test]
async fn a_reader_moves_only_to_a_newer_snapshot_at_its_own_end() {
    let (_dir, lake, writer) = new_lake().await;
    let s1 = tier(&writer, 1, [put("a", 0), put("a", 1)], 1).await;
    let s2 = writer.commit(&[(1, 2)]).await.unwrap().snapshot(1);
    let reader = serving(&lake, 1, s2).await;
    let old = serving(&lake, 1, s1).await;
    // A compaction at the same end and a later commit: after expiry of everything older than
    // the compaction, the reader of s2 moves to the compaction (same end), not to the newest.
    let compacted = lake.compact().await.unwrap().unwrap();
    tier(&writer, 1, [put("a", 2)], 3).await;
    lake.expire_snapshots(2).await.unwrap();
    assert_eq!(reader.lookup(b"a").await.unwrap(), value("a", 1));
    assert_eq!(reader.served(), LakeSnapshot::new(compacted, 2));

    // A reader of s1, whose snapshot and every snapshot ending at 1 are gone, does not move to a
    // larger end: the lookup fails.
    assert!(old.lookup(b"a").await.is_err());
    assert_eq!(old.served(), s1);
    assert_eq!(old.counters().retries, 0);
    assert!(lake.lookuper(1).refresh(s1).await.is_err(), "s1 expired");
}

#[tokio::test]
async fn lookup_many_answers_as_single_lookups_across_many_files() {
    let (_dir, lake, writer) = new_lake().await;
    let mut offset = 0;
    let mut ends = Vec::new();
    // Ten commits, each rewriting and deleting some of 200 keys: ten data files.
    for round in 0..10u64 {
        let mut records = Vec::new();
        for k in 0..200u64 {
            if (k + round) % 3 == 0 {
                continue;
            }
            let key = format!("key-{k:04}");
            records.push(if (k * 7 + round) % 11 == 0 {
                Record::delete(key, offset)
            } else {
                put(&key, offset)
            });
            offset += 1;
        }
        ends.push(tier(&writer, 4, records, offset).await);
    }
    let all: Vec<Vec<u8>> = (0..210u64)
        .map(|k| format!("key-{k:04}").into_bytes())
        .collect();
    let lookuper = lake.lookuper(4);
    for snapshot in [ends[0], ends[4], ends[9]] {
        lookuper.refresh(snapshot).await.unwrap();
        let many = lookuper.lookup_many(&all).await.unwrap();
        for (key, answer) in all.iter().zip(&many) {
            assert_eq!(&lookuper.lookup(key).await.unwrap(), answer);
        }
        assert!(many.iter().any(Option::is_some));
        assert!(many.iter().any(Option::is_none));
    }
    assert_eq!(
        lookuper.lookup_many(&[]).await.unwrap(),
        Vec::<Option<Vec<u8>>>::new()
    );
}

#[tokio::test]
async fn the_table_is_plain_iceberg_with_the_offsets_in_each_snapshot_summary() {
    let (_dir, lake, writer) = new_lake().await;
    tier(&writer, 6, [put("a", 0)], 1).await;
    let location = lake.metadata_location().await.unwrap();
    let metadata: serde_json::Value =
        serde_json::from_slice(&std::fs::read(location).unwrap()).unwrap();
    assert_eq!(metadata["format-version"], 2);
    let summary = &metadata["snapshots"][0]["summary"];
    assert_eq!(summary["operation"], "append");
    assert_eq!(summary[OFFSETS_PROPERTY], "{\"6\":1}");
}

/// Keys longer than Parquet's default statistics length, at the top of files of several row
/// groups: every key answers the model, as tiered and after compaction, one by one and in
/// batches. (With statistics cut at 64 bytes, Iceberg left the long keys' row group out of the
/// file's upper bound, and lookups skipped the file.)
#[tokio::test]
async fn long_keys_at_a_files_edge_answer_the_model() {
    use std::collections::BTreeMap;

    let (_dir, lake, writer) = new_lake().await;
    let long = |i: u64| format!("z{i:03}{}", "-long".repeat(20)).into_bytes();
    let short = |i: u64| format!("k-{i:05}").into_bytes();
    let mut model: BTreeMap<Vec<u8>, Option<Vec<u8>>> = BTreeMap::new();
    let mut offset = 0;
    let mut records = Vec::new();
    for i in 0..5_000 {
        records.push(Record::put(short(i), format!("s{offset}"), offset));
        model.insert(short(i), Some(format!("s{offset}").into_bytes()));
        offset += 1;
    }
    for i in 0..100 {
        records.push(Record::put(long(i), format!("l{offset}"), offset));
        model.insert(long(i), Some(format!("l{offset}").into_bytes()));
        offset += 1;
    }
    tier(&writer, 1, records, offset).await;
    let mut records = Vec::new();
    for i in (0..100).step_by(3) {
        if i % 2 == 0 {
            records.push(Record::delete(long(i), offset));
            model.insert(long(i), None);
        } else {
            records.push(Record::put(long(i), format!("l{offset}"), offset));
            model.insert(long(i), Some(format!("l{offset}").into_bytes()));
        }
        offset += 1;
    }
    let tiered = tier(&writer, 1, records, offset).await;
    let compacted = LakeSnapshot::new(lake.compact().await.unwrap().unwrap(), offset);

    let keys: Vec<Vec<u8>> = model.keys().cloned().collect();
    let lookuper = lake.lookuper(1);
    for snapshot in [tiered, compacted] {
        lookuper.refresh(snapshot).await.unwrap();
        for key in keys
            .iter()
            .filter(|k| k.starts_with(b"z"))
            .chain(keys.iter().step_by(97))
        {
            assert_eq!(
                &lookuper.lookup(key).await.unwrap(),
                &model[key],
                "{snapshot:?}"
            );
        }
        for batch in keys.chunks(50) {
            let want: Vec<_> = batch.iter().map(|k| model[k].clone()).collect();
            assert_eq!(
                lookuper.lookup_many(batch).await.unwrap(),
                want,
                "{snapshot:?}"
            );
        }
    }
}

/// Each data file's index is read once, by the first lookup that needs the file, and shared by
/// every lookuper of the handle; later lookups read only pages, and every read is counted.
#[tokio::test]
async fn each_data_files_index_is_read_once_and_every_read_is_counted() {
    let (_dir, lake, writer) = new_lake().await;
    // Two commits, two data files, both spanning keys a..c.
    tier(&writer, 1, [put("a", 0), put("c", 1)], 2).await;
    let snapshot = tier(&writer, 1, [put("a", 2), put("b", 3), put("c", 4)], 5).await;
    let lookuper = serving(&lake, 1, snapshot).await;
    assert_eq!(
        lake.data_file_reads().reads,
        0,
        "nothing is read before a lookup"
    );

    assert_eq!(lookuper.lookup(b"c").await.unwrap(), value("c", 4));
    let first = lake.data_file_reads();
    assert_eq!(
        first.indexes, 2,
        "the first lookup reads both files' indexes"
    );
    assert!(first.reads > first.indexes && first.bytes > 0, "{first:?}");

    for _ in 0..3 {
        let other = lake.lookuper(1);
        other.refresh(snapshot).await.unwrap();
        let answers = other.lookup_many(&keys(&["a", "b", "c"])).await.unwrap();
        assert_eq!(answers, vec![value("a", 2), value("b", 3), value("c", 4)]);
    }
    let later = lake.data_file_reads();
    assert_eq!(
        later.indexes, 2,
        "indexes are read once per file: {later:?}"
    );
    assert!(
        later.reads > first.reads,
        "page reads are counted: {later:?}"
    );
}

/// A catalog entry whose table was created at another location is refused at open: expiry
/// would match the table's files against the configured location's listing and take every
/// file the table names for an orphan.
#[tokio::test]
async fn a_table_opened_at_another_location_than_its_own_is_refused() {
    let (dir, lake, writer) = new_lake().await;
    tier(&writer, 1, [put("a", 0)], 1).await;
    drop((writer, lake));
    let elsewhere = tempfile::tempdir().unwrap();
    let catalog = format!(
        "sqlite://{}",
        dir.path().join(EMBEDDED_CATALOG_FILE).display()
    );
    let err = IcebergLake::open_with(&LakeConfig::shared(catalog.clone(), elsewhere.path()))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::InvalidInput(_)), "{err}");
    assert!(
        err.to_string().contains("open it with the location"),
        "{err}"
    );
    // At its own location it opens, and nothing was changed.
    let lake = IcebergLake::open_with(&LakeConfig::shared(catalog, dir.path()))
        .await
        .unwrap();
    assert_eq!(lake.latest(1).await.unwrap().end_offset, 1);
}
