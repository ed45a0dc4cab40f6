//! Several writers of one lake table, each through a handle of its own (its own catalog
//! connections and no lock shared with the others), racing on the catalog's compare-and-swap
//! while a compaction and an expiry run: every commit lands, every bucket's end is exact, and
//! every row reads back.
#![allow(clippy::unwrap_used)] // test code

use std::collections::BTreeMap;

use tidemark_bucket::{LakeLookuper, LakeSnapshot};
use tidemark_engine_api::Record;
use tidemark_lake_iceberg::IcebergLake;

/// Writers, buckets each writer owns, and commits each writer makes.
const WRITERS: u64 = 3;
const BUCKETS_PER_WRITER: u64 = 2;
const COMMITS_PER_WRITER: u64 = 20;

fn key(bucket: u64, commit: u64) -> Vec<u8> {
    format!("b{bucket}-k{commit}").into_bytes()
}

fn value(bucket: u64, offset: u64) -> Vec<u8> {
    format!("b{bucket}@{offset}").into_bytes()
}

/// Writer `w`'s commits: each appends one record to each of its buckets and commits them.
async fn write(dir: std::path::PathBuf, w: u64) -> BTreeMap<u64, u64> {
    let lake = IcebergLake::open(&dir).await.unwrap();
    let writer = lake.tiering_writer().await.unwrap();
    let buckets: Vec<u64> = (0..BUCKETS_PER_WRITER)
        .map(|i| w * BUCKETS_PER_WRITER + i)
        .collect();
    let mut ends = BTreeMap::new();
    for commit in 0..COMMITS_PER_WRITER {
        // Offsets 2c and 2c+1: the end skips one offset each time, so ends are not counts.
        let offset = 2 * commit;
        let mut named = Vec::new();
        for &bucket in &buckets {
            writer
                .append(
                    bucket,
                    [Record::put(
                        key(bucket, commit),
                        value(bucket, offset),
                        offset,
                    )],
                )
                .await
                .unwrap();
            named.push((bucket, offset + 2));
            ends.insert(bucket, offset + 2);
        }
        let committed = writer.commit(&named).await.unwrap();
        for &(bucket, end) in &named {
            assert_eq!(committed.snapshot(bucket).end_offset, end);
        }
    }
    ends
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn writers_of_disjoint_buckets_race_and_every_commit_lands_with_its_end() {
    let dir = tempfile::tempdir().unwrap();
    // Created once, so the writers race on commits, not on creating the table.
    drop(IcebergLake::open(dir.path()).await.unwrap());

    let writers: Vec<_> = (0..WRITERS)
        .map(|w| tokio::spawn(write(dir.path().to_path_buf(), w)))
        .collect();
    // Maintenance from a handle of its own, while the writers commit.
    let maintenance = {
        let dir = dir.path().to_path_buf();
        tokio::spawn(async move {
            let lake = IcebergLake::open(&dir).await.unwrap();
            let mut compactions = 0;
            for round in 0..6 {
                if round % 2 == 0 {
                    // A compaction whose base another's replaced fails cleanly; it tries again
                    // next round.
                    if lake.compact().await.is_ok() {
                        compactions += 1;
                    }
                } else {
                    lake.expire_snapshots(5).await.unwrap();
                }
                tokio::task::yield_now().await;
            }
            compactions
        })
    };
    let mut expected = BTreeMap::new();
    for writer in writers {
        expected.extend(writer.await.unwrap());
    }
    assert!(maintenance.await.unwrap() > 0, "no compaction landed");

    let lake = IcebergLake::open(dir.path()).await.unwrap();
    let commits = WRITERS * COMMITS_PER_WRITER;
    let snapshots = lake.snapshots(0).await.unwrap();
    let newest = *snapshots.last().unwrap();
    assert!(
        newest.id >= commits,
        "{commits} commits and a compaction, but the newest sequence is {}",
        newest.id
    );
    for (&bucket, &end) in &expected {
        let latest = lake.latest(bucket).await.unwrap();
        assert_eq!(latest.end_offset, end, "bucket {bucket}");
        let lookuper = lake.lookuper(bucket);
        lookuper.refresh(latest).await.unwrap();
        let keys: Vec<Vec<u8>> = (0..COMMITS_PER_WRITER).map(|c| key(bucket, c)).collect();
        let answers = lookuper.lookup_many(&keys).await.unwrap();
        for (commit, answer) in answers.into_iter().enumerate() {
            assert_eq!(
                answer,
                Some(value(bucket, 2 * commit as u64)),
                "bucket {bucket}, commit {commit}"
            );
        }
    }
    // A bucket no writer owns was never tiered.
    assert_eq!(
        lake.latest(WRITERS * BUCKETS_PER_WRITER).await.unwrap(),
        LakeSnapshot::new(newest.id, 0)
    );
}

/// Two writers that both claim one bucket: the one that finds the bucket moved by the other is
/// refused, and the table keeps the other's end.
#[tokio::test]
async fn a_bucket_committed_by_another_writer_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let a = IcebergLake::open(dir.path()).await.unwrap();
    let b = IcebergLake::open(dir.path()).await.unwrap();
    let (wa, wb) = (
        a.tiering_writer().await.unwrap(),
        b.tiering_writer().await.unwrap(),
    );
    wa.append(1, [Record::put("k", "a", 0)]).await.unwrap();
    wa.commit(&[(1, 1)]).await.unwrap();
    wb.append(1, [Record::put("k", "b", 0)]).await.unwrap();
    let err = wb.commit(&[(1, 1)]).await.unwrap_err().to_string();
    assert!(err.contains("another writer commits it too"), "{err}");
    assert_eq!(b.latest(1).await.unwrap().end_offset, 1);
}
