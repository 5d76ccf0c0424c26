//! The one cancel and progress handle of a long operation (grep, find, the
//! walk under them): a caller keeps a clone to raise `cancel()` from any
//! thread and to read how far the operation got; the operation polls it.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

/// A cancel flag and a progress count, shared by its clones.
///
/// ```
/// use pi_native_ops_core::Cancel;
///
/// let cancel = Cancel::new();
/// let theirs = cancel.clone();
/// assert!(!theirs.is_cancelled());
/// std::thread::spawn(move || cancel.cancel()).join().unwrap();
/// assert!(theirs.is_cancelled());
/// ```
#[derive(Debug, Clone, Default)]
pub struct Cancel {
    state: Arc<State>,
}

#[derive(Debug, Default)]
struct State {
    cancelled: AtomicBool,
    /// Files whose contents the operation began to read.
    files: AtomicU64,
}

impl Cancel {
    /// A handle not yet cancelled, with no progress.
    pub fn new() -> Cancel {
        Cancel::default()
    }

    /// Asks the operation to stop; it fails with `Aborted` promptly.
    pub fn cancel(&self) {
        self.state.cancelled.store(true, Ordering::Relaxed);
    }

    /// Whether `cancel()` was called (by any clone).
    #[inline]
    pub fn is_cancelled(&self) -> bool {
        self.state.cancelled.load(Ordering::Relaxed)
    }

    /// How many files the operation has begun to read (final once it has
    /// returned), so a caller sees how far a cancelled search got.
    pub fn files_searched(&self) -> u64 {
        self.state.files.load(Ordering::Relaxed)
    }

    /// Counts one file begun.
    #[inline]
    pub(crate) fn file_begun(&self) {
        self.state.files.fetch_add(1, Ordering::Relaxed);
    }

    /// The flag itself, for the walk's halt check (one load per entry).
    #[inline]
    pub(crate) fn flag(&self) -> &AtomicBool {
        &self.state.cancelled
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clones_share_the_flag_and_the_progress() {
        let cancel = Cancel::new();
        let seen = cancel.clone();
        assert!(!seen.is_cancelled());
        cancel.file_begun();
        cancel.file_begun();
        seen.cancel();
        assert!(cancel.is_cancelled());
        assert!(cancel.flag().load(Ordering::Relaxed));
        assert_eq!(seen.files_searched(), 2);
    }
}
