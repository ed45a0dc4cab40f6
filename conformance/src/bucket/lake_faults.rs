//! A lake lookuper that errors or hangs: every failure is a clear [`Error::Lake`], local hits are
//! still answered, and a failed or timed-out refresh never advances the watermark.
//!
//! The hanging cases run on a paused tokio clock: the lookuper parks (a held refresh gate, or an
//! injected lookup latency far beyond the timeout) and tokio jumps straight to the bucket's
//! timeout, so nothing sleeps for real and nothing depends on the machine's speed.

use std::sync::Arc;
use std::time::Duration;

use tidemark_bucket::Error;
use tidemark_bucket::lake::{LakeLookuper, MemoryLake};
use tidemark_bucket::{HistoricalBucket, LakeTimeouts, Progress};
use tidemark_engine_api::{Engine, LocalLookup};

use super::lakes::TestLake;
use super::support::{self, Bucket, Wal, show};
use crate::EngineFactory;

const REFRESH_TIMEOUT: Duration = Duration::from_secs(5);
const LOOKUP_TIMEOUT: Duration = Duration::from_secs(2);
/// Far beyond the lookup timeout: a lookup this slow hangs as far as the bucket is concerned.
const HANG: Duration = Duration::from_secs(3_600);
const RECORDS: u64 = 120;
/// Lake progress before the fault: entries below it are reclaimed, so those keys miss locally.
const FIRST_END: u64 = 60;
/// The lake progress the faulty lookuper cannot deliver.
const SECOND_END: u64 = 100;

/// A bucket over a new engine with the scenario's timeouts, recovered from the empty lake, the
/// whole WAL applied and lake progress to [`FIRST_END`] published and reclaimed.
async fn setup<F: EngineFactory, L: TestLake>(
    site: &support::Site<F>,
    wal: &Wal,
) -> (Arc<F::Engine>, L, Arc<L::Reader>, Bucket) {
    let engine = site.open();
    let lake = L::create().await;
    let reader = lake.reader();
    let bucket = timed_bucket(Arc::clone(&engine), Arc::clone(&reader));
    bucket
        .recover(Default::default())
        .await
        .unwrap_or_else(|e| panic!("{}: recover a new bucket: {e}", F::NAME));
    support::write::<F>(&bucket, &lake, wal, 0, RECORDS).await;
    support::progress::<F>(&bucket, &lake, FIRST_END).await;
    support::reclaim::<F>(&bucket).await;
    (engine, lake, reader, bucket)
}

fn timed_bucket<E: Engine + 'static, R: LakeLookuper + 'static>(
    engine: Arc<E>,
    lake: Arc<R>,
) -> Bucket {
    let timeouts = LakeTimeouts::default()
        .with_refresh(REFRESH_TIMEOUT)
        .with_lookup(LOOKUP_TIMEOUT);
    HistoricalBucket::new(engine, lake)
        .with_lake_timeouts(timeouts)
        .unwrap()
}

/// Asserts `e` is [`Error::Lake`] and, for a timeout, that it names the call and the timeout.
fn assert_lake_error(e: &Error, timeout: Option<(&str, Duration)>, when: &str) {
    assert!(support::is_lake_error(e), "{when}: not a lake error: {e}");
    if let Some((call, timeout)) = timeout {
        let text = e.to_string();
        assert!(
            text.contains(call) && text.contains(&format!("lake timeout of {timeout:?}")),
            "{when}: the timeout error does not say what timed out after how long: {text}"
        );
    }
}

/// What the lookups of a failing lake came to.
struct Split {
    /// Local misses that failed with the lake's error.
    misses: u64,
    /// Local misses of keys the lake never held, answered from the table's metadata alone.
    answered_from_metadata: u64,
}

/// Looks every key up while the lake fails or hangs: a key the engine answers locally gets the
/// model's answer, every local miss is the lake error, except (on a lake whose metadata still
/// answers, [`TestLake::METADATA_ANSWERS_ABSENT_KEYS`]) a key no data file can hold, which is
/// absent. Then `lookup_many` fails as a whole when a failing miss is among its keys and answers
/// the local hits alone.
async fn lookups_split_at_the_lake<F: EngineFactory>(
    engine: &F::Engine,
    bucket: &Bucket,
    wal: &Wal,
    timeout: Option<(&str, Duration)>,
    metadata_answers: bool,
) -> Split {
    let mut hits = Vec::new();
    let mut misses = 0;
    let mut answered_from_metadata = 0;
    for key in wal.keys() {
        let when = format!("{}: lookup {}", F::NAME, show(&key));
        let local = engine.lookup(&key).unwrap();
        match bucket.lookup(&key).await {
            Ok(got) if local == LocalLookup::Miss => {
                assert!(metadata_answers, "{when}: a miss answered without a lake");
                assert_eq!(
                    key,
                    support::ABSENT,
                    "{when}: the lake answered a written key"
                );
                assert_eq!(got, None, "{when}");
                answered_from_metadata += 1;
            }
            Ok(got) => {
                assert_eq!(got, wal.answer_at(&key, RECORDS), "{when}");
                hits.push(key);
            }
            Err(e) => {
                assert_eq!(local, LocalLookup::Miss, "{when}: a local hit failed: {e}");
                assert_lake_error(&e, timeout, &when);
                misses += 1;
            }
        }
    }
    assert!(
        !hits.is_empty() && misses > 0,
        "{}: {} hits, {misses} misses",
        F::NAME,
        hits.len()
    );
    let err = bucket.lookup_many(&wal.keys()).await.unwrap_err();
    let many = timeout.map(|(_, t)| ("lookup_many", t));
    assert_lake_error(&err, many, &format!("{}: lookup_many", F::NAME));
    let answers = bucket.lookup_many(&hits).await.unwrap();
    let model: Vec<_> = hits.iter().map(|k| wal.answer_at(k, RECORDS)).collect();
    assert_eq!(answers, model, "{}: lookup_many of local hits", F::NAME);
    Split {
        misses,
        answered_from_metadata,
    }
}

/// Lake progress to [`SECOND_END`] once the lake works again: published, and every key answers
/// the model.
async fn heals<F: EngineFactory>(bucket: &Bucket, lake: &impl TestLake, wal: &Wal) {
    let snapshot = lake.latest().await;
    let p = bucket.on_lake_progress(snapshot).await.unwrap();
    assert!(
        matches!(p, Progress::Published { .. }),
        "{}: {p:?}",
        F::NAME
    );
    assert_eq!(bucket.watermark(), SECOND_END);
    support::reclaim::<F>(bucket).await;
    support::assert_model::<F>(bucket, wal, RECORDS, "after the lake healed").await;
}

/// A lookuper whose refreshes and lookups fail: every notification returns `Error::Lake` and
/// leaves `W`, the served snapshot and the data as they were (each failure counted); lookups of
/// local misses fail with `Error::Lake` while local values and tombstones are still answered;
/// `lookup_many` fails as a whole on a miss and answers local hits alone. Healed, the same
/// notification publishes.
pub fn erroring_lake_lookuper<F: EngineFactory, L: TestLake>(factory: F) {
    let site = support::Site::new(factory);
    let wal = Wal::generate(0xE_44, RECORDS, 24, 6);
    support::runtime().block_on(async {
        let (engine, lake, reader, bucket) = setup::<F, L>(&site, &wal).await;
        let served = L::served(&reader);
        let second = lake.commit(SECOND_END).await;
        lake.fail(&reader, true).await;
        for attempt in 1..=3 {
            let err = bucket.on_lake_progress(second).await.unwrap_err();
            assert_lake_error(&err, None, &format!("{}: notification {attempt}", F::NAME));
            assert_eq!(engine.watermark(), FIRST_END, "{}: W moved", F::NAME);
            assert_eq!(bucket.lake_end(), FIRST_END);
            assert_eq!(L::served(&reader), served);
            assert_eq!(bucket.stats().refresh_failures, attempt);
        }
        assert_eq!(support::reclaim::<F>(&bucket).await.removed(), 0);

        let split = lookups_split_at_the_lake::<F>(
            &engine,
            &bucket,
            &wal,
            None,
            L::METADATA_ANSWERS_ABSENT_KEYS,
        )
        .await;
        let stats = bucket.stats();
        // Each single lookup that failed, and each local miss of the lookup_many.
        assert_eq!(
            stats.lake_failures,
            2 * split.misses + split.answered_from_metadata,
            "{}: {stats:?}",
            F::NAME
        );
        assert_eq!(stats.lake_timeouts, 0);
        assert_eq!(engine.watermark(), FIRST_END);

        lake.fail(&reader, false).await;
        heals::<F>(&bucket, &lake, &wal).await;
    });
}

/// A refresh that never completes (held open): `on_lake_progress` returns `Error::Lake` naming
/// the refresh and the timeout, the held refresh is abandoned, `W` stays and the lookuper still
/// serves the previous snapshot, whose answers the bucket keeps giving. `recover` through a
/// hanging lookuper fails the same way and changes nothing. Released, the notification publishes.
pub fn hanging_lake_refresh_times_out<F: EngineFactory>(factory: F) {
    let site = support::Site::new(factory);
    let wal = Wal::generate(0x4A6, RECORDS, 24, 6);
    support::paused_runtime().block_on(async {
        let (engine, lake, reader, bucket) = setup::<F, MemoryLake>(&site, &wal).await;
        let served = reader.served();
        let second = lake.commit(SECOND_END).unwrap();
        reader.hold_refreshes();
        let err = bucket.on_lake_progress(second).await.unwrap_err();
        let refresh = Some(("lake refresh to snapshot", REFRESH_TIMEOUT));
        assert_lake_error(&err, refresh, &format!("{}: hanging refresh", F::NAME));
        assert_eq!(
            reader.held_refreshes(),
            0,
            "{}: the refresh was not dropped",
            F::NAME
        );
        assert_eq!(engine.watermark(), FIRST_END, "{}: W moved", F::NAME);
        assert_eq!(bucket.lake_end(), FIRST_END);
        assert_eq!(reader.served(), served);
        let stats = bucket.stats();
        assert_eq!((stats.lake_timeouts, stats.refresh_failures), (1, 1));
        // The previous snapshot still answers the keys whose local entries were reclaimed.
        support::assert_model::<F>(&bucket, &wal, RECORDS, "after the timed-out refresh").await;
        assert!(bucket.stats().lake_fallbacks > 0);

        // Recovery of another bucket over this engine, through a lookuper that hangs too.
        let other_reader = Arc::new(MemoryLake::reader(&lake));
        other_reader.hold_refreshes();
        let other = timed_bucket(Arc::clone(&engine), Arc::clone(&other_reader));
        let err = other.recover(second).await.unwrap_err();
        assert_lake_error(&err, refresh, &format!("{}: hanging recovery", F::NAME));
        assert_eq!(
            engine.watermark(),
            FIRST_END,
            "{}: recovery moved W",
            F::NAME
        );
        assert_eq!(other_reader.served(), None);
        let stats = other.stats();
        assert_eq!((stats.lake_timeouts, stats.recoveries), (1, 0));
        drop(other);

        reader.release_refreshes();
        heals::<F>(&bucket, &lake, &wal).await;
        assert_eq!(reader.served(), Some(second));
    });
}

/// Lake lookups that take far longer than the lookup timeout: every local miss (`lookup` and
/// `lookup_many`) is `Error::Lake` naming the call and the timeout, local hits are answered
/// without waiting, `W` is untouched, and once the lake answers again so does the bucket.
pub fn hanging_lake_lookup_times_out<F: EngineFactory>(factory: F) {
    let site = support::Site::new(factory);
    let wal = Wal::generate(0x4A61, RECORDS, 24, 6);
    support::paused_runtime().block_on(async {
        let (engine, lake, reader, bucket) = setup::<F, MemoryLake>(&site, &wal).await;
        reader.set_lookup_delay(HANG);
        let timeout = Some(("lake lookup", LOOKUP_TIMEOUT));
        let misses = lookups_split_at_the_lake::<F>(&engine, &bucket, &wal, timeout, false)
            .await
            .misses;
        let stats = bucket.stats();
        // Each single lookup that missed, and the one lookup_many that had misses.
        assert_eq!(stats.lake_timeouts, misses + 1, "{}: {stats:?}", F::NAME);
        assert_eq!(stats.lake_failures, 2 * misses, "{}: {stats:?}", F::NAME);
        assert_eq!(reader.counters().lookup_calls, 0);
        assert_eq!(engine.watermark(), FIRST_END);

        reader.set_lookup_delay(Duration::ZERO);
        lake.commit(SECOND_END).unwrap();
        heals::<F>(&bucket, &lake, &wal).await;
        assert!(reader.lookup(support::ABSENT).await.unwrap().is_none());
    });
}
