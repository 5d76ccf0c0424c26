//! The one cancel and progress handle of a long operation (grep, find, the
//! walk under them): a caller keeps a clone to raise `cancel()` from any
//! thread and to read how far the operation got; the operation polls it.
//! [`shutdown`] raises every one at once when the process exits, so no
//! operation holds up the exit (Node joins libuv's thread pool then).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};

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
#[derive(Debug, Clone)]
pub struct Cancel {
    state: Arc<State>,
}

#[derive(Debug, Default)]
struct State {
    cancelled: AtomicBool,
    /// Files whose contents the operation began to read.
    files: AtomicU64,
}

/// Set once the process is exiting: every operation stops.
static SHUTTING_DOWN: AtomicBool = AtomicBool::new(false);

/// The handles alive, for [`shutdown`] to raise.
static LIVE: Mutex<Vec<Weak<State>>> = Mutex::new(Vec::new());

/// Cancels every operation running and every one started from now on: the
/// process is exiting. Faces call it from their exit hook.
pub fn shutdown() {
    let mut live = LIVE.lock().unwrap_or_else(|e| e.into_inner());
    // Under the lock, so a handle made meanwhile is either in the list or
    // sees the flag.
    SHUTTING_DOWN.store(true, Ordering::Relaxed);
    for state in live.drain(..).filter_map(|w| w.upgrade()) {
        state.cancelled.store(true, Ordering::Relaxed);
    }
}

/// Whether [`shutdown`] was called: for work that holds no [`Cancel`].
pub fn shutting_down() -> bool {
    SHUTTING_DOWN.load(Ordering::Relaxed)
}

impl Default for Cancel {
    fn default() -> Cancel {
        let state = Arc::new(State::default());
        let mut live = LIVE.lock().unwrap_or_else(|e| e.into_inner());
        if shutting_down() {
            state.cancelled.store(true, Ordering::Relaxed);
        } else {
            // Dropped handles go as new ones come: the list holds those alive.
            live.retain(|w| w.strong_count() > 0);
            live.push(Arc::downgrade(&state));
        }
        Cancel { state }
    }
}

impl Cancel {
    /// A handle not yet cancelled (unless the process is exiting), with no
    /// progress.
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
