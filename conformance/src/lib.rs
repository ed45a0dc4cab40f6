//! # Tidemark conformance suite
//!
//! One suite every backend runs: generic case functions over an [`EngineFactory`], a macro that
//! stamps one `#[test]` per case per backend ([`engine_cases!`]), and a model-based property test
//! against [`tidemark_engine_api::MemoryEngine`]. See `conformance/README.md` for how to add a backend and
//! for the mapping from every clause of the engine contract to the cases that check it.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

pub mod bucket;
mod bucket_checks;
pub mod cases;
pub mod child;
pub mod crash;
pub mod factories;
pub mod factory;
pub mod harness;
pub mod headroom;
pub mod hostile;
pub mod hostile_input;
mod macros;
pub mod scale;
pub mod skip;

pub use factory::{Capabilities, EngineFactory};
// The lake scenarios' modules at the root, where the stamping macro names case modules.
#[doc(hidden)]
#[cfg(feature = "iceberg")]
pub use bucket::on_iceberg_lake;
#[doc(hidden)]
#[cfg(feature = "iceberg")]
pub use bucket::on_iceberg_shared_lake;
#[doc(hidden)]
pub use bucket::on_memory_lake;
pub use harness::Harness;
pub use skip::{CaseInfo, Need};

for_each_case!(__case_table!(
    CASES,
    "Every case of the suite, in the order `for_each_case!` lists them."
));
for_each_case!(__case_fns!());

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn case_names_are_unique() {
        let mut names: Vec<_> = CASES.iter().map(|c| c.name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), CASES.len());
        assert!(CASES.len() >= 30, "the suite has shrunk below 30 cases");
    }

    /// The README's clause table must name every case, so the mapping cannot silently rot.
    #[test]
    fn readme_maps_every_case() {
        let readme = include_str!("../README.md");
        let table = readme
            .split("## Contract clause → cases")
            .nth(1)
            .expect("README has the clause table");
        for case in CASES {
            assert!(
                table.contains(&format!("`{}`", case.name)),
                "conformance/README.md's clause table does not mention `{}`",
                case.name
            );
        }
    }

    #[test]
    fn all_cases_follow_the_list() {
        let fns = all_cases::<factories::MemoryFactory>();
        assert_eq!(fns.len(), CASES.len());
        assert!(
            fns.iter()
                .zip(CASES)
                .all(|((info, _), c)| info.name == c.name)
        );
    }
}
