//! pi-native-ops: native Operations for pi-coding-agent's tools.
//!
//! The crate is split in two layers:
//! - a pure-Rust core, one module per capability, with no napi types inside
//!   (`root`, `exec`, `walk`, `find`, `grep`);
//! - `binding`, a thin napi layer per capability that converts arguments,
//!   errors and Buffers, and nothing else.

#![deny(clippy::all)]

pub mod exec;
// The bounded root is built on unix descriptors (openat2 / O_NOFOLLOW walks);
// find depends on it. On other targets the JS layer says these are unsupported.
#[cfg(unix)]
pub mod find;
pub mod grep;
pub mod image;
#[cfg(unix)]
pub mod root;
pub mod walk;

mod binding;
