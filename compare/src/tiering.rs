//! Where a run's records go once the host has logged them, besides the model: nowhere more
//! (`--lake memory`: the model answers lake lookups), or through a tiering writer into an
//! Apache Iceberg table beside the store (`--lake iceberg`), which a maintenance task compacts
//! and expires while the run goes on, as a lake service would.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use tidemark::{LakeLookuper, LakeSnapshot, Record};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::Result;
use crate::config::{LakeKind, LakeSite};
use crate::histogram::Histogram;
use crate::lake::StreamLake;

/// The lake side of a run.
pub enum Tiering {
    /// The model is the lake.
    Memory,
    /// A real table.
    #[cfg(feature = "iceberg")]
    Iceberg(iceberg_table::IcebergTiering),
}

/// What the table's maintenance did during a run.
#[derive(Debug, Clone, Default)]
pub struct Maintenance {
    /// How long each compaction took.
    pub compactions: Histogram,
    /// Files expiry deleted.
    pub files_deleted: u64,
}

impl Tiering {
    /// The lake of `kind`; an Iceberg table is created at `dir` (which must not hold one) or
    /// where `site` says.
    pub async fn open(
        kind: LakeKind,
        dir: &Path,
        site: &LakeSite,
        snapshots_kept: usize,
    ) -> Result<Tiering> {
        match kind {
            LakeKind::Memory => Ok(Tiering::Memory),
            #[cfg(feature = "iceberg")]
            LakeKind::Iceberg => Ok(Tiering::Iceberg(
                iceberg_table::IcebergTiering::open(dir, site, snapshots_kept).await?,
            )),
            #[cfg(not(feature = "iceberg"))]
            LakeKind::Iceberg => {
                let _ = (dir, site, snapshots_kept);
                Err(crate::Error::Unsupported(
                    "--lake iceberg: this build has no `iceberg` feature".into(),
                ))
            }
        }
    }

    /// The lookuper a bucket of the run falls back to.
    pub fn lookuper(&self, model: &Arc<StreamLake>) -> Arc<dyn LakeLookuper> {
        match self {
            Tiering::Memory => model.clone(),
            #[cfg(feature = "iceberg")]
            Tiering::Iceberg(table) => table.lookuper(),
        }
    }

    /// Hands logged records to the tiering writer.
    pub async fn append(&self, records: &[Record]) -> Result<()> {
        match self {
            Tiering::Memory => {
                let _ = records;
                Ok(())
            }
            #[cfg(feature = "iceberg")]
            Tiering::Iceberg(table) => table.append(records).await,
        }
    }

    /// Commits what the model just committed (`model`); returns the snapshot the bucket hears
    /// of.
    pub async fn commit(&self, model: LakeSnapshot) -> Result<LakeSnapshot> {
        match self {
            Tiering::Memory => Ok(model),
            #[cfg(feature = "iceberg")]
            Tiering::Iceberg(table) => table.commit(model.end_offset).await,
        }
    }

    /// Starts the table's maintenance, every `interval` until `stopped` (nothing to maintain in
    /// memory).
    pub fn maintain(
        &self,
        interval: Duration,
        stopped: watch::Receiver<bool>,
    ) -> JoinHandle<Result<Maintenance>> {
        match self {
            Tiering::Memory => {
                drop((interval, stopped));
                tokio::spawn(async { Ok(Maintenance::default()) })
            }
            #[cfg(feature = "iceberg")]
            Tiering::Iceberg(table) => tokio::spawn(table.clone().maintain(interval, stopped)),
        }
    }
}

#[cfg(feature = "iceberg")]
mod iceberg_table {
    use std::path::Path;
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    use tidemark::iceberg::{IcebergLake, LakeConfig, TableLocation, TieringWriter};
    use tidemark::{LakeLookuper, LakeSnapshot, Record};
    use tokio::sync::watch;

    use super::{LakeSite, Maintenance};
    use crate::{Error, Result};

    /// The run's one bucket in the table.
    const BUCKET: u64 = 0;

    /// An Iceberg table with its tiering writer.
    #[derive(Clone)]
    pub struct IcebergTiering {
        lake: IcebergLake,
        writer: Arc<TieringWriter>,
        snapshots_kept: usize,
    }

    /// The run's own table: at `dir` with an embedded catalog by default; named in the site's
    /// catalog and under its warehouse when it has them, in both cases by a name no other run
    /// has.
    fn table_config(dir: &Path, site: &LakeSite) -> LakeConfig {
        let run = format!(
            "{}-{}-{}",
            dir.file_name()
                .map_or_else(|| "run".into(), |n| n.to_string_lossy()),
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos())
        );
        let location: TableLocation = match &site.warehouse {
            Some(warehouse) => format!("{}/{run}", warehouse.trim_end_matches('/')).into(),
            None => dir.into(),
        };
        let mut config = match &site.catalog {
            Some(uri) => LakeConfig::shared(uri.clone(), location),
            None => LakeConfig {
                location,
                ..LakeConfig::embedded(dir)
            },
        };
        config.catalog_name = run;
        config.storage = site.storage.clone();
        config
    }

    impl IcebergTiering {
        pub async fn open(dir: &Path, site: &LakeSite, snapshots_kept: usize) -> Result<Self> {
            if std::fs::read_dir(dir).is_ok_and(|mut entries| entries.next().is_some()) {
                return Err(Error::Config(format!(
                    "{} is not empty (a lake of an earlier comparison?): give --dir an empty or \
                     new directory",
                    dir.display()
                )));
            }
            let lake = IcebergLake::open_with(&table_config(dir, site)).await?;
            let writer = Arc::new(lake.tiering_writer().await?);
            Ok(IcebergTiering {
                lake,
                writer,
                snapshots_kept,
            })
        }

        pub fn lookuper(&self) -> Arc<dyn LakeLookuper> {
            Arc::new(self.lake.lookuper(BUCKET))
        }

        pub async fn append(&self, records: &[Record]) -> Result<()> {
            Ok(self.writer.append(BUCKET, records.iter().cloned()).await?)
        }

        pub async fn commit(&self, end: u64) -> Result<LakeSnapshot> {
            Ok(self.writer.commit(&[(BUCKET, end)]).await?.snapshot(BUCKET))
        }

        pub async fn maintain(
            self,
            interval: Duration,
            mut stopped: watch::Receiver<bool>,
        ) -> Result<Maintenance> {
            let mut ticker = tokio::time::interval(interval);
            ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            // The first tick is immediate: there is nothing to compact yet.
            ticker.tick().await;
            let mut done = Maintenance::default();
            loop {
                tokio::select! {
                    _ = ticker.tick() => {}
                    _ = stopped.changed() => break,
                }
                let began = Instant::now();
                self.lake.compact().await?;
                done.compactions.record(began.elapsed());
                let expiry = self.lake.expire_snapshots(self.snapshots_kept).await?;
                done.files_deleted += u64::try_from(expiry.files).unwrap_or(u64::MAX);
            }
            Ok(done)
        }
    }
}
