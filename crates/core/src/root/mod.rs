//! The bounded root: resolving and opening paths beneath a workspace root
//! without check-then-use races. One API on every target: `unix.rs` on
//! descriptors, `windows.rs` on handles.

#[cfg(unix)]
mod unix;
#[cfg(unix)]
pub use unix::*;
#[cfg(windows)]
mod windows;
#[cfg(windows)]
pub use windows::*;
