//! pi-native-ops: the napi binding of `pi_native_ops_core`.
//!
//! One module per capability; each converts JS arguments into core types and
//! core results and errors into JS values, and decides nothing itself.

#![deny(clippy::all)]
// Every unsafe operation sits in an `unsafe` block with a `// SAFETY:` comment giving its reason,
// also inside an `unsafe fn` (whose `# Safety` section states what its callers must keep).
#![deny(unsafe_op_in_unsafe_fn)]
#![deny(clippy::undocumented_unsafe_blocks)]

mod error;
mod exec;
#[cfg(any(unix, windows))]
mod find;
#[cfg(any(unix, windows))]
mod fs;
#[cfg(any(unix, windows))]
mod grep;
#[cfg(any(unix, windows))]
mod index;
mod policy_events;
#[cfg(any(unix, windows))]
mod task;

#[cfg(any(unix, windows))]
use task::{blocking, Blocking};
