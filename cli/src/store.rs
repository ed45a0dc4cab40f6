//! Finding and opening the store an inspection command names: the backend comes from the
//! directory's marker unless `--backend` is given (and must then agree with it), and the store
//! must already exist; nothing is ever created.

use std::path::PathBuf;

use clap::Args;
use serde::Serialize;
use tidemark::{Backend, EngineHandle, EngineOptions, Error, OpenMode, Result};
use tidemark_disk::layout;

/// The store a command works on.
#[derive(Debug, Args)]
pub struct StoreArgs {
    /// Bucket directory (it must hold a Tidemark store; nothing is created).
    pub dir: PathBuf,
    /// Backend of the store (default: the one its TIDEMARK marker names; a different one is an
    /// error).
    #[arg(long)]
    pub backend: Option<Backend>,
}

/// An opened store and what its marker says.
pub struct Store {
    /// The bucket directory.
    pub dir: PathBuf,
    /// Its backend.
    pub backend: Backend,
    /// The format version its marker names.
    pub format: u32,
    /// The engine, opened in the mode the command asked for.
    pub engine: EngineHandle,
}

impl StoreArgs {
    /// Opens the store in `mode` (never [`OpenMode::CreateIfMissing`]: an inspection command
    /// must not create a store where a path is mistyped).
    pub fn open(&self, mode: OpenMode) -> Result<Store> {
        let detected = Backend::detect(&self.dir)?;
        if let Some(given) = self.backend
            && given != detected
        {
            return Err(Error::WrongBackend {
                path: self.dir.clone(),
                found: detected.name().to_string(),
                expected: given.name(),
            });
        }
        let format = layout::read_marker(&self.dir)?.format;
        let options = EngineOptions::default().with_open_mode(mode);
        let engine = detected.open(&self.dir, options)?;
        tracing::debug!(dir = %self.dir.display(), backend = %detected, ?mode, "store opened");
        Ok(Store {
            dir: self.dir.clone(),
            backend: detected,
            format,
            engine,
        })
    }
}

/// The fields every JSON document starts with: which schema, and which store.
#[derive(Debug, Serialize)]
pub struct StoreJson {
    schema: &'static str,
    path: String,
    backend: &'static str,
    format_version: u32,
}

impl Store {
    /// The leading fields of a JSON document of `schema` about this store.
    pub fn json_header(&self, schema: &'static str) -> StoreJson {
        StoreJson {
            schema,
            path: self.dir.display().to_string(),
            backend: self.backend.name(),
            format_version: self.format,
        }
    }
}
