//! The factories of the suite: the memory reference engine's, and one generic [`DiskFactory`]
//! for every disk backend (`DiskFactory<tidemark::redb::RedbStorage>`, ...).

mod disk;
mod memory;

pub use self::disk::DiskFactory;
pub use memory::MemoryFactory;

/// Stamps the whole suite for one disk backend in a module named after it, so tests read
/// `<backend>::<case>`: every engine case ([`engine_cases!`](crate::engine_cases)), the scale,
/// descriptor-headroom and crash tests, and the bucket scenarios (`<backend>::bucket::<scenario>`,
/// [`bucket_cases!`](crate::bucket_cases)), each on a [`DiskFactory`] of `$backend`.
///
/// A backend's test file, `tests/<backend>.rs`, is this one line inside the facade's gate macro
/// for the backend, which makes it empty in a build without that backend:
///
/// ```text
/// tidemark::redb! { tidemark_conformance::disk_suite!(redb: tidemark::redb::RedbStorage); }
/// ```
#[macro_export]
macro_rules! disk_suite {
    ($module:ident: $backend:ty) => {
        mod $module {
            $crate::engine_cases!($crate::factories::DiskFactory::<$backend>::new());
            $crate::scale_case!($crate::factories::DiskFactory::<$backend>::new());
            $crate::headroom_case!($crate::factories::DiskFactory::<$backend>::new());
            $crate::crash_case!($crate::factories::DiskFactory::<$backend>::new());
            mod bucket {
                $crate::bucket_cases!($crate::factories::DiskFactory::<$backend>::new());
            }
        }
    };
}
