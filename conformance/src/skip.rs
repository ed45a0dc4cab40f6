//! Capability requirements of cases, and the visible (never `#[ignore]`d) skip report.

use std::io::Write;

use crate::factory::{Capabilities, EngineFactory};

/// A capability a case needs beyond the core contract.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Need {
    /// The backend persists and can be reopened ([`Capabilities::reopen`]).
    Reopen,
    /// `stats().live_entries` is exact (the declared `exact_live_entries`).
    ExactLiveEntries,
    /// Arbitrary bytes can be stored ([`Capabilities::raw_injection`]).
    RawInjection,
    /// Reclaim sweeps an offset index (the declared `offset_index`).
    OffsetIndex,
    /// Opens follow the open mode ([`Capabilities::open_existing`]).
    OpenExisting,
    /// The store lives in files of its directory ([`Capabilities::files`]).
    Files,
    /// Storage faults can be injected ([`Capabilities::faults`]).
    Faults,
    /// A copy of the store's directory is a copy of the store (the declared
    /// `self_contained_directory`).
    SelfContained,
}

impl Need {
    /// Whether `caps` provides this capability.
    pub fn met_by(self, caps: Capabilities) -> bool {
        match self {
            Need::Reopen => caps.reopen,
            Need::ExactLiveEntries => caps.declared.exact_live_entries,
            Need::RawInjection => caps.raw_injection,
            Need::OffsetIndex => caps.declared.offset_index,
            Need::OpenExisting => caps.open_existing,
            Need::Files => caps.files,
            Need::Faults => caps.faults,
            Need::SelfContained => caps.declared.self_contained_directory,
        }
    }

    /// Why a case needing this is skipped.
    pub fn missing(self) -> &'static str {
        match self {
            Need::Reopen => "backend cannot reopen",
            Need::ExactLiveEntries => "backend does not count live entries exactly",
            Need::RawInjection => "backend cannot store raw (corrupt) bytes",
            Need::OffsetIndex => "backend does not reclaim by sweeping an offset index",
            Need::OpenExisting => "backend has no existing store to open (nothing persists)",
            Need::Files => "backend keeps no files: none to damage, no bytes on disk to bound",
            Need::Faults => "backend has no storage faults to inject (no disk skeleton)",
            Need::SelfContained => {
                "backend keeps a bucket's data outside its directory: a copy of the directory is not a copy of the store"
            }
        }
    }
}

/// One entry of the documented case list.
#[derive(Debug, Clone, Copy)]
pub struct CaseInfo {
    /// Case (and test function) name.
    pub name: &'static str,
    /// Capabilities it needs; it is skipped when one is missing.
    pub needs: &'static [Need],
    /// What it checks.
    pub doc: &'static str,
}

impl CaseInfo {
    /// The first need `caps` does not meet.
    pub fn unmet(&self, caps: Capabilities) -> Option<Need> {
        self.needs.iter().copied().find(|n| !n.met_by(caps))
    }
}

/// Writes a line straight to the process's stderr. libtest captures `print!`/`eprint!` of
/// passing tests but not direct writes to the stderr handle, so skips are always visible.
pub fn notice(line: &str) {
    let mut err = std::io::stderr().lock();
    let _ = writeln!(err, "{line}");
}

/// Runs `case` unless the backend lacks one of `needs`, in which case it reports
/// `SKIPPED <backend>::<case>: <reason>` on stderr and returns (the test passes).
pub fn run_case<F: EngineFactory>(factory: F, name: &str, needs: &[Need], case: fn(F)) {
    let caps = factory.capabilities();
    if let Some(need) = needs.iter().copied().find(|n| !n.met_by(caps)) {
        notice(&format!("SKIPPED {}::{name}: {}", F::NAME, need.missing()));
        return;
    }
    case(factory);
}

/// Prints how many cases the backend skips and why (the `capability_report` test), and returns
/// the skipped case names.
pub fn report_capabilities<F: EngineFactory>(factory: &F) -> Vec<&'static str> {
    let caps = factory.capabilities();
    let skipped: Vec<(&'static str, Need)> = crate::CASES
        .iter()
        .filter_map(|c| c.unmet(caps).map(|n| (c.name, n)))
        .collect();
    notice(&format!(
        "CAPABILITIES {}: {:?}; {} of {} cases skipped{}",
        F::NAME,
        caps,
        skipped.len(),
        crate::CASES.len(),
        if skipped.is_empty() {
            String::new()
        } else {
            format!(
                ": {}",
                skipped
                    .iter()
                    .map(|(name, need)| format!("{name} ({})", need.missing()))
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        }
    ));
    skipped.into_iter().map(|(name, _)| name).collect()
}
