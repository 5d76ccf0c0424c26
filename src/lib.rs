//! pi-native-ops: native Operations for pi-coding-agent's tools.
//!
//! The crate is split in two layers:
//! - a pure-Rust core, one module per capability, with no napi types inside
//!   (`root`, `exec`, `walk`, `find`, `grep`);
//! - `binding`, a thin napi layer per capability that converts arguments,
//!   errors and Buffers, and nothing else.

#![deny(clippy::all)]

pub mod exec;
// The bounded root and the walk are built on unix descriptors (openat2,
// O_NOFOLLOW opens relative to a directory); find and grep depend on them.
// On other targets the JS layer says these are unsupported.
#[cfg(unix)]
pub mod find;
#[cfg(unix)]
pub mod grep;
pub mod image;
#[cfg(unix)]
pub mod root;
#[cfg(unix)]
pub mod walk;

mod binding;
