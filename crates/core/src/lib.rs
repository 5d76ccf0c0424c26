//! pi-native-ops-core: the work behind pi-native-ops's Operations, in pure Rust.
//!
//! One module per capability, each usable without Node: `root` (the bounded
//! filesystem), `walk` (the ordered parallel walker), `find` and `grep` (the two
//! searches on it), `exec` (streaming shell execution with whole-tree kill) and
//! `image` (MIME sniffing), with one error type for all of them (`error`) and
//! one cancel and progress handle for the searches (`cancel`). The
//! napi binding and any other face only convert.

#![deny(clippy::all)]
// Every unsafe operation sits in an `unsafe` block with a `// SAFETY:` comment giving its reason,
// also inside an `unsafe fn` (whose `# Safety` section states what its callers must keep).
#![deny(unsafe_op_in_unsafe_fn)]
#![deny(clippy::undocumented_unsafe_blocks)]
#![deny(missing_docs)]

// The cancel handle of the searches below.
#[cfg(any(unix, windows))]
pub mod cancel;
pub mod error;
pub mod exec;
// The bounded root and the walk are built on unix descriptors (openat2,
// O_NOFOLLOW opens relative to a directory) or Windows handles (NtCreateFile
// relative to a directory); find and grep depend on them. On other targets
// the faces say these are unsupported.
#[cfg(any(unix, windows))]
pub mod find;
// One glob's regex, its size bound an error (find, the policy).
mod glob_regex;
#[cfg(any(unix, windows))]
pub mod grep;
pub mod image;
// A JS number option as JSON carries it (the server's wire types).
#[cfg(feature = "serde")]
pub mod js_number;
// Deny-read, deny-write and protected paths: one definition for every face.
pub mod policy;
// The warm search index: inotify, so Linux only (elsewhere searches walk).
#[cfg(target_os = "linux")]
pub mod index;
/// Elsewhere there is no index: a type without values keeps find's and
/// grep's signatures the same on every target.
#[cfg(not(target_os = "linux"))]
pub mod index {
    /// No index can exist here: find and grep always walk.
    pub enum Index {}
    /// Why this target keeps no index (see the Linux module's).
    pub const UNSUPPORTED: Option<&str> = Some("the index needs Linux (inotify)");
}
// The bounded root: descriptors on unix, handles (NtCreateFile relative to a
// directory) on Windows, one API.
#[cfg(any(unix, windows))]
pub mod root;
// Node's whole-file read of an opened file, for the root of every target.
#[cfg(any(unix, windows))]
mod whole_read;
// System-call helpers shared by the walk, grep and exec (also safe in a
// forked child).
#[cfg(unix)]
mod sys;
#[cfg(any(unix, windows))]
pub mod walk;

#[cfg(any(unix, windows))]
pub use cancel::Cancel;
pub use error::{Error, ErrorKind, NodeClass, NodeFields, Result};
