use std::path::Path;

use tidemark_engine_api::{EngineOptions, MemoryEngine, Result};

use crate::factory::{Capabilities, EngineFactory};

/// The in-memory reference engine: no persistence, so no reopen.
#[derive(Debug, Default, Clone, Copy)]
pub struct MemoryFactory;

impl EngineFactory for MemoryFactory {
    type Engine = MemoryEngine;
    const NAME: &'static str = "memory";

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            reopen: false,
            exact_live_entries: true,
            raw_injection: true,
            background_reclaim: false,
            offset_index: false,
            open_existing: false,
            read_only_files: false,
            files: false,
            self_contained: false,
            faults: false,
        }
    }

    fn open(&self, _dir: &Path, options: EngineOptions) -> Result<MemoryEngine> {
        Ok(MemoryEngine::new(options))
    }

    fn inject_raw(&self, engine: &MemoryEngine, key: &[u8], stored: &[u8]) -> Result<()> {
        engine.insert_raw(key, stored)
    }
}
