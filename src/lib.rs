//! pi-native-ops: native Operations for pi-coding-agent's tools.
//!
//! The crate is split in two layers:
//! - a pure-Rust core, one module per capability, with no napi types inside
//!   (`root`, `exec`, `walk`, `find`, `grep`);
//! - `binding`, a thin napi layer per capability that converts arguments,
//!   errors and Buffers, and nothing else.

#![deny(clippy::all)]

pub mod exec;
pub mod find;
pub mod grep;
pub mod image;
pub mod root;
pub mod walk;

mod binding;
