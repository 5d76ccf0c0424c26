//! Thin napi bindings: argument conversion, error mapping, Buffers. No logic.

mod exec;
#[cfg(unix)]
mod find;
#[cfg(unix)]
mod fs;
#[cfg(unix)]
mod grep;
#[cfg(unix)]
mod task;

#[cfg(unix)]
pub use task::{blocking, Blocking};
