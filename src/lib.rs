//! pi-native-ops: the napi binding of `pi_native_ops_core`.
//!
//! One module per capability; each converts JS arguments into core types and
//! core results and errors into JS values, and decides nothing itself.

#![deny(clippy::all)]

mod error;
mod exec;
#[cfg(unix)]
mod find;
#[cfg(unix)]
mod fs;
#[cfg(unix)]
mod grep;
#[cfg(unix)]
mod index;
#[cfg(unix)]
mod task;

#[cfg(unix)]
use task::{blocking, Blocking};
