use std::path::Path;

use tidemark_disk::testing::Declared;
use tidemark_engine_api::{EngineOptions, MemoryEngine, Result};

use crate::factory::{Capabilities, EngineFactory};

/// The in-memory reference engine: no persistence, so no reopen.
#[derive(Debug, Default, Clone, Copy)]
pub struct MemoryFactory;

impl MemoryFactory {
    /// What the memory engine can do: exact counts and raw injection, nothing that needs a
    /// directory. A factory built on it (the mutants') starts from these.
    pub const CAPABILITIES: Capabilities = Capabilities {
        declared: Declared {
            exact_live_entries: true,
            background_reclaim: false,
            offset_index: false,
            read_only_files: false,
            self_contained_directory: false,
            // It keeps no files: the space case, which needs them, never reads these.
            window_multiple: 0.0,
            window_peak_multiple: 0.0,
        },
        reopen: false,
        raw_injection: true,
        open_existing: false,
        files: false,
        faults: false,
    };
}

impl EngineFactory for MemoryFactory {
    type Engine = MemoryEngine;
    const NAME: &'static str = "memory";

    fn capabilities(&self) -> Capabilities {
        Self::CAPABILITIES
    }

    fn open(&self, _dir: &Path, options: EngineOptions) -> Result<MemoryEngine> {
        Ok(MemoryEngine::new(options))
    }

    fn inject_raw(&self, engine: &MemoryEngine, key: &[u8], stored: &[u8]) -> Result<()> {
        engine.insert_raw(key, stored)
    }
}
