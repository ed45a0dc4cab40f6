//! The registry of disk backends: `backends!` turns the one table of backends (in `lib.rs`) into
//! everything that names them: the `Backend` enum with `ALL`, `name` and `is_compiled`, the crate
//! re-exports (`tidemark::sled`, ...), the gate macros (`tidemark::sled!`, ...), the dispatch from
//! a `Backend` to its storage type (`visit`, with the `Visit` trait) and the lint allowances of a
//! build without any disk backend. Everything else reaches a backend through its `Storage` and `BackendContext`.

use tidemark_engine_api::Error;

use crate::Backend;

/// Generates, from one row per disk backend (`Variant, "name", module, crate::ItsStorage;`, under the
/// variant's doc comment), every item that names the backends. `name` is at once the backend's
/// name (command line, store marker) and the facade's cargo feature, and `module` (the same
/// word) the path of the crate's re-export; `ItsStorage` is its `Storage` type.
macro_rules! backends {
    // `$d` is a `$` for the gate macros this one defines (a macro cannot write one directly).
    (@with ($d:tt) $(
        $(#[$doc:meta])*
        $variant:ident, $name:literal, $module:ident, $krate:ident :: $marker:ident;
    )*) => {
        /// A storage backend. Every variant exists in every build; opening one whose cargo
        /// feature is off is an [`Error::Unsupported`](crate::Error::Unsupported) naming the
        /// feature.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum Backend {
            /// The in-memory reference engine (always compiled; nothing persists).
            Memory,
            $(
                $(#[$doc])*
                #[doc = concat!("\n\nCargo feature `", $name, "`.")]
                $variant,
            )*
        }

        impl Backend {
            /// Every backend, compiled in or not.
            pub const ALL: [Backend; 1 + [$($name),*].len()] =
                [Backend::Memory, $(Backend::$variant),*];

            /// Every backend's name, for messages: `"memory, sled, ..."`.
            pub(crate) const NAMES: &'static str = concat!("memory" $(, ", ", $name)*);

            /// The backend's name as used on the command line and in store markers (and, for a
            /// disk backend, its cargo feature).
            pub fn name(self) -> &'static str {
                match self {
                    Backend::Memory => "memory",
                    $(Backend::$variant => $name,)*
                }
            }

            /// Whether this build includes the backend.
            pub fn is_compiled(self) -> bool {
                match self {
                    Backend::Memory => true,
                    $(Backend::$variant => cfg!(feature = $name),)*
                }
            }
        }

        $(
            #[doc = concat!("The ", $name, " backend (cargo feature `", $name, "`).")]
            #[cfg(feature = $name)]
            pub use $krate as $module;

            #[doc = concat!(
                "Expands to the items it wraps in a build with the `", $name, "` backend, and to \
                 nothing in one without, so code that names `tidemark::", $name, "` (a test of \
                 that backend, a host's optional support for it) compiles either way without a \
                 cargo feature of its own.\n\n",
                "```\n",
                "tidemark::", $name, "! {\n",
                "    use tidemark::{Backend, EngineHandle, EngineOptions, Result};\n\n",
                "    fn open_one(dir: &std::path::Path) -> Result<EngineHandle> {\n",
                "        let backend: Backend = \"", $name, "\".parse()?;\n",
                "        backend.open(dir, EngineOptions::default())\n",
                "    }\n",
                "}\n",
                "```"
            )]
            #[cfg(feature = $name)]
            #[macro_export]
            macro_rules! $module {
                ($d($d item:item)*) => { $d($d item)* };
            }

            #[doc = concat!("`", $name, "` is not compiled in: this expands to nothing.")]
            #[cfg(not(feature = $name))]
            #[macro_export]
            macro_rules! $module {
                ($d($d item:item)*) => {};
            }
        )*

        /// Items that only a disk backend's code path uses (a `Visit` and what it carries): in a
        /// build without any disk backend they are dead code, and allowed to be.
        macro_rules! disk_backend_items {
            ($d($d item:item)*) => {
                $d(
                    #[cfg_attr(
                        not(any($(feature = $name),*)),
                        allow(dead_code, reason = "no disk backend is compiled in")
                    )]
                    $d item
                )*
            };
        }

        disk_backend_items! {
            /// Something done with one disk backend's types (open a bucket, create a context).
            pub(crate) trait Visit {
                /// What it produces.
                type Output;

                /// Does it with backend `B`.
                fn visit<B: tidemark_disk::Storage>(self) -> $crate::Result<Self::Output>;
            }
        }

        /// Runs `visit` with the disk backend `backend` names; [`Error::Unsupported`] naming the
        /// cargo feature when the backend is not compiled in (and for the memory backend, which
        /// is no disk backend: callers handle it first).
        pub(crate) fn visit<V: Visit>(
            backend: Backend,
            visit: V,
        ) -> $crate::Result<V::Output> {
            match backend {
                $(
                    #[cfg(feature = $name)]
                    Backend::$variant => visit.visit::<$krate::$marker>(),
                )*
                other => {
                    drop(visit);
                    Err($crate::registry::not_compiled(other))
                }
            }
        }
    };
    ($($rows:tt)*) => {
        backends!(@with ($) $($rows)*);
    };
}

/// The error of a backend the generated `visit` cannot reach: not compiled in, or not a disk
/// backend.
pub(crate) fn not_compiled(backend: Backend) -> Error {
    if backend == Backend::Memory {
        return Error::Unsupported("the memory backend is not a disk backend".to_string());
    }
    Error::Unsupported(format!(
        "backend {} is not compiled in; enable the `{}` cargo feature of the tidemark crate",
        backend.name(),
        backend.name()
    ))
}
