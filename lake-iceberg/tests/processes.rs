//! Tiering writers in several processes, each owning its buckets, sharing one table through a
//! PostgreSQL catalog with the warehouse on an S3-protocol server (`scripts/lake-servers.sh`
//! starts both): every commit lands with its end while a compaction and an expiry run, and a
//! writer killed mid-commit leaves the table as a committed snapshot left it.
//!
//! Each test re-runs this binary as its writers, telling a child what to do in
//! [`CHILD_ENV`]; a child reports on its standard output in lines that begin with `tidemark:`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

use tidemark_bucket::LakeLookuper;
use tidemark_engine_api::Record;
use tidemark_lake_iceberg::IcebergLake;
use tidemark_lake_iceberg::test_servers::TestServers;

/// What a child does: `<test> <table name> <writer>`.
const CHILD_ENV: &str = "TIDEMARK_LAKE_WRITER_CHILD";

/// Writer processes, buckets each owns, and commits each makes.
const WRITERS: u64 = 3;
const BUCKETS_PER_WRITER: u64 = 2;
const COMMITS_PER_WRITER: u64 = 100;

/// Kills of a writer, and the records each of its commits adds to each bucket.
const KILLS: usize = 20;
const RECORDS_PER_COMMIT: u64 = 5;

fn key(bucket: u64, offset: u64) -> Vec<u8> {
    format!("b{bucket}-k{offset}").into_bytes()
}

fn value(bucket: u64, offset: u64) -> Vec<u8> {
    format!("b{bucket}@{offset}").into_bytes()
}

/// This binary, running the test `test` as a child with `spec`.
fn spawn_child(test: &str, spec: &str) -> Child {
    Command::new(std::env::current_exe().unwrap())
        .args([test, "--exact", "--nocapture", "--test-threads", "1"])
        .env(CHILD_ENV, spec)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap()
}

/// The child's spec when this process is one, for test `test`.
fn child_spec(test: &str) -> Option<(String, u64)> {
    let spec = std::env::var(CHILD_ENV).ok()?;
    let mut parts = spec.split(' ');
    assert_eq!(parts.next(), Some(test), "a child runs only its own test");
    let name = parts.next().unwrap().to_owned();
    let writer = parts.next().unwrap().parse().unwrap();
    Some((name, writer))
}

/// A child's report in `line`: what follows `tidemark: ` (the test harness may print its
/// own words before it on the same line).
fn report(line: &str) -> Option<&str> {
    line.find("tidemark: ")
        .map(|at| &line[at + "tidemark: ".len()..])
}

const RACE_TEST: &str = "writers_in_three_processes_land_every_commit_while_maintenance_runs";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writers_in_three_processes_land_every_commit_while_maintenance_runs() {
    let servers = TestServers::get();
    if let Some((name, w)) = child_spec(RACE_TEST) {
        return race_writer(&servers, &name, w).await;
    }
    let name = TestServers::unique_name("processes");
    let config = servers.table(&name);
    // Created once, so the writers race on commits, not on creating the table.
    let lake = IcebergLake::open_with(&config).await.unwrap();

    let mut children: Vec<Child> = (0..WRITERS)
        .map(|w| spawn_child(RACE_TEST, &format!("{RACE_TEST} {name} {w}")))
        .collect();
    let readers: Vec<_> = children
        .iter_mut()
        .map(|child| {
            let out = child.stdout.take().unwrap();
            std::thread::spawn(move || {
                BufReader::new(out)
                    .lines()
                    .map_while(Result::ok)
                    .filter_map(|l| report(&l).map(str::to_owned))
                    .collect::<Vec<_>>()
            })
        })
        .collect();

    // Maintenance from this process while the writers commit, until they are done.
    let (mut compactions, mut expiries) = (0, 0);
    while readers.iter().any(|r| !r.is_finished()) {
        // A compaction whose base another compaction replaced fails cleanly; the next one runs.
        if lake.compact().await.is_ok() {
            compactions += 1;
        }
        lake.expire_snapshots(5).await.unwrap();
        expiries += 1;
    }
    let mut expected = BTreeMap::new();
    let mut landed = 0;
    for (child, reader) in children.iter_mut().zip(readers) {
        let lines = reader.join().unwrap();
        assert!(child.wait().unwrap().success(), "a writer failed");
        for line in lines {
            let mut fields = line.split(' ');
            match fields.next() {
                Some("landed") => landed += fields.next().unwrap().parse::<u64>().unwrap(),
                Some("end") => {
                    let bucket: u64 = fields.next().unwrap().parse().unwrap();
                    let end: u64 = fields.next().unwrap().parse().unwrap();
                    expected.insert(bucket, end);
                }
                _ => {}
            }
        }
    }
    assert_eq!(landed, WRITERS * COMMITS_PER_WRITER, "commits that landed");
    assert!(compactions > 0, "no compaction landed");
    assert!(expiries > 0, "no expiry ran");

    let lake = IcebergLake::open_with(&config).await.unwrap();
    assert!(lake.latest(0).await.unwrap().id >= WRITERS * COMMITS_PER_WRITER);
    let mut wrong = 0;
    for (&bucket, &end) in &expected {
        let latest = lake.latest(bucket).await.unwrap();
        assert_eq!(latest.end_offset, end, "bucket {bucket}'s end");
        let lookuper = lake.lookuper(bucket);
        lookuper.refresh(latest).await.unwrap();
        let offsets: Vec<u64> = (0..COMMITS_PER_WRITER).map(|c| 2 * c).collect();
        let keys: Vec<Vec<u8>> = offsets.iter().map(|&o| key(bucket, o)).collect();
        let answers = lookuper.lookup_many(&keys).await.unwrap();
        for (&offset, answer) in offsets.iter().zip(answers) {
            if answer != Some(value(bucket, offset)) {
                wrong += 1;
            }
        }
    }
    assert_eq!(expected.len() as u64, WRITERS * BUCKETS_PER_WRITER);
    assert_eq!(wrong, 0, "wrong or lost rows in the lake");
    println!(
        "{landed} commits from {WRITERS} processes landed, with {compactions} compactions and \
         {expiries} expiries"
    );
}

/// Writer `w` of the race: each commit appends one record to each of its buckets (at offset
/// 2c, so an end is never a count) and commits them.
async fn race_writer(servers: &TestServers, name: &str, w: u64) {
    let lake = IcebergLake::open_with(&servers.table(name)).await.unwrap();
    let writer = lake.tiering_writer().await.unwrap();
    let buckets: Vec<u64> = (0..BUCKETS_PER_WRITER)
        .map(|i| w * BUCKETS_PER_WRITER + i)
        .collect();
    let mut landed = 0;
    for commit in 0..COMMITS_PER_WRITER {
        let offset = 2 * commit;
        let mut named = Vec::new();
        for &bucket in &buckets {
            writer
                .append(
                    bucket,
                    [Record::put(
                        key(bucket, offset),
                        value(bucket, offset),
                        offset,
                    )],
                )
                .await
                .unwrap();
            named.push((bucket, offset + 2));
        }
        let committed = writer.commit(&named).await.unwrap();
        for &(bucket, end) in &named {
            assert_eq!(committed.snapshot(bucket).end_offset, end);
        }
        landed += 1;
    }
    println!("tidemark: landed {landed}");
    for &bucket in &buckets {
        println!("tidemark: end {bucket} {}", 2 * COMMITS_PER_WRITER);
    }
}

const KILL_TEST: &str = "a_writer_killed_mid_commit_leaves_the_table_as_a_commit_left_it";

#[tokio::test]
async fn a_writer_killed_mid_commit_leaves_the_table_as_a_commit_left_it() {
    let servers = TestServers::get();
    if let Some((name, _)) = child_spec(KILL_TEST) {
        return endless_writer(&servers, &name).await;
    }
    let name = TestServers::unique_name("killed");
    let config = servers.table(&name);
    drop(IcebergLake::open_with(&config).await.unwrap());

    let mut end = 0;
    let mut mid_commit = 0;
    for kill in 0..KILLS {
        let mut child = spawn_child(KILL_TEST, &format!("{KILL_TEST} {name} 0"));
        let out = child.stdout.take().unwrap();
        let mut lines = BufReader::new(out).lines().map_while(Result::ok);
        // Kill during the (kill % 3 + 1)-th commit this child starts, at a point in it that
        // moves with each kill (commits here take tens of milliseconds).
        let mut said: Vec<String> = Vec::new();
        let mut started = 0;
        for line in lines.by_ref() {
            said.push(line.clone());
            if report(&line).is_some_and(|r| r.starts_with("commit ")) {
                started += 1;
                if started == kill % 3 + 1 {
                    break;
                }
            }
        }
        assert_eq!(
            started,
            kill % 3 + 1,
            "the writer stopped before its commits"
        );
        std::thread::sleep(std::time::Duration::from_millis((kill as u64 * 7) % 40));
        child.kill().unwrap();
        child.wait().unwrap();
        // What the child said before it died: the ends it committed, and whether a commit it
        // began had not returned.
        let (mut committed, mut began) = (None, None);
        said.extend(lines);
        for line in said.iter().filter_map(|l| report(l)) {
            if let Some(e) = line.strip_prefix("commit ") {
                began = Some(e.parse::<u64>().unwrap());
            } else if let Some(e) = line.strip_prefix("committed ") {
                committed = Some(e.parse::<u64>().unwrap());
            }
        }
        if began.is_some() && began != committed {
            mid_commit += 1;
        }

        // The table loads, and its end is one a commit made: what the writer had committed,
        // or the commit it was killed in.
        let lake = IcebergLake::open_with(&config).await.unwrap();
        let latest = lake.latest(1).await.unwrap();
        let was = end;
        end = latest.end_offset;
        assert!(
            end >= was,
            "kill {kill}: the end went back from {was} to {end}"
        );
        assert_eq!(
            end % RECORDS_PER_COMMIT,
            0,
            "kill {kill}: end {end} is no commit's"
        );
        if let Some(committed) = committed {
            assert!(
                end >= committed,
                "kill {kill}: a commit that returned was lost"
            );
        }
        // Every record below the end reads back, none at or above it.
        let lookuper = lake.lookuper(1);
        lookuper.refresh(latest).await.unwrap();
        let offsets: Vec<u64> = (0..end + RECORDS_PER_COMMIT).collect();
        let keys: Vec<Vec<u8>> = offsets.iter().map(|&o| key(1, o)).collect();
        let answers = lookuper.lookup_many(&keys).await.unwrap();
        for (&offset, answer) in offsets.iter().zip(answers) {
            let want = (offset < end).then(|| value(1, offset));
            assert_eq!(answer, want, "kill {kill}: offset {offset} below end {end}");
        }
    }
    assert!(end > 0, "no commit landed in {KILLS} runs");
    assert!(
        mid_commit > 0,
        "no kill landed between a commit's start and its return"
    );
    println!(
        "{KILLS} kills, {mid_commit} of them between a commit's start and its return; end {end}"
    );
}

/// Commits forever from the table's end: each commit adds [`RECORDS_PER_COMMIT`] records to
/// bucket 1, saying `commit <end>` before it and `committed <end>` after.
async fn endless_writer(servers: &TestServers, name: &str) {
    let lake = IcebergLake::open_with(&servers.table(name)).await.unwrap();
    let writer = lake.tiering_writer().await.unwrap();
    let mut end = lake.latest(1).await.unwrap().end_offset;
    loop {
        let records: Vec<Record> = (end..end + RECORDS_PER_COMMIT)
            .map(|o| Record::put(key(1, o), value(1, o), o))
            .collect();
        writer.append(1, records).await.unwrap();
        end += RECORDS_PER_COMMIT;
        println!("tidemark: commit {end}");
        writer.commit(&[(1, end)]).await.unwrap();
        println!("tidemark: committed {end}");
    }
}
