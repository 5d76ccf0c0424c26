//! Searching a given, ordered list of files (the index's candidates) on
//! the walk's threads, handing each file's hits to the sink in list order.
//!
//! Threads claim the next file of the list, at most `WINDOW` files past the
//! one the sink waits for, so a sink that has enough early (pi's limit)
//! leaves few files searched for nothing, and memory held for hits not yet
//! handed on stays bounded (`WINDOW` files, each's hits bounded by
//! `FileHits`). The calling thread searches too while the file
//! it needs next is not done.

use std::collections::HashMap;
use std::fs::File;
use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard};

use super::search::{Engine, Found, Worker};
use crate::cancel::Cancel;
use crate::walk;

/// Files claimed ahead of the one the sink waits for, at most: enough to
/// keep every thread busy past one slow (large) file, few enough that an
/// early stop wastes little.
const WINDOW: usize = 64;

struct State {
    /// Next file to claim.
    next: usize,
    /// Files handed to the sink (or skipped) so far.
    consumed: usize,
    /// Hits of finished files not yet handed on, by position.
    done: HashMap<usize, Option<Found>>,
    /// The sink had enough, or the list is through.
    over: bool,
}

struct Shared<'a, T, O> {
    engine: &'a Engine,
    files: &'a [T],
    open: &'a O,
    /// Raised by the caller; counts the files opened for reading.
    cancel: &'a Cancel,
    stop: AtomicBool,
    state: Mutex<State>,
    changed: Condvar,
}

impl<T: Sync, O: Fn(&T) -> io::Result<File> + Sync> Shared<'_, T, O> {
    fn lock(&self) -> MutexGuard<'_, State> {
        // Nothing panics while holding the lock; recover regardless.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn halted(&self) -> bool {
        self.stop.load(Ordering::Relaxed) || self.cancel.is_cancelled()
    }

    /// The next file to search, if it is within the window.
    fn claim(&self, state: &mut State) -> Option<usize> {
        if state.over || state.next >= self.files.len() || state.next >= state.consumed + WINDOW {
            return None;
        }
        state.next += 1;
        Some(state.next - 1)
    }

    fn search(&self, worker: &mut Worker, i: usize) -> Option<Found> {
        if self.halted() {
            return None;
        }
        // Unreadable, or swapped for a symlink: nothing to search, as in the walk.
        let file = (self.open)(&self.files[i]).ok()?;
        self.cancel.file_begun();
        let found = self.engine.search_walked(worker, file, &|| self.halted());
        (!found.hits.is_empty()).then_some(found)
    }

    fn finish(&self, i: usize, hits: Option<Found>) {
        let mut state = self.lock();
        state.done.insert(i, hits);
        drop(state);
        self.changed.notify_all();
    }

    /// A helper thread: searches claimed files until the list is through or
    /// the search halted.
    fn work(&self) {
        let mut worker = self.engine.worker();
        let mut state = self.lock();
        loop {
            if state.over || self.halted() {
                return;
            }
            match self.claim(&mut state) {
                Some(i) => {
                    drop(state);
                    let hits = self.search(&mut worker, i);
                    self.finish(i, hits);
                    state = self.lock();
                }
                None if state.next >= self.files.len() => return,
                None => state = self.changed.wait(state).unwrap_or_else(|e| e.into_inner()),
            }
        }
    }

    /// The calling thread: hands hits to the sink in list order, searching
    /// itself while the file it needs is not done.
    fn consume(&self, sink: &mut impl FnMut(&T, Found) -> bool) {
        let mut worker = self.engine.worker();
        let mut state = self.lock();
        while state.consumed < self.files.len() && !self.halted() {
            let i = state.consumed;
            if let Some(hits) = state.done.remove(&i) {
                state.consumed += 1;
                drop(state);
                // Room in the window again.
                self.changed.notify_all();
                if hits.is_some_and(|found| !sink(&self.files[i], found)) {
                    self.stop.store(true, Ordering::Relaxed);
                    return;
                }
                state = self.lock();
                continue;
            }
            match self.claim(&mut state) {
                Some(j) => {
                    drop(state);
                    let hits = self.search(&mut worker, j);
                    state = self.lock();
                    state.done.insert(j, hits);
                }
                None => state = self.changed.wait(state).unwrap_or_else(|e| e.into_inner()),
            }
        }
    }
}

/// Searches `files` (in the order their hits are wanted), each opened by
/// `open`, on up to the walk's thread count, handing each file's hits (files
/// without any skipped) to `sink` in list order, until it returns `false`
/// or `cancel` is raised. `cancel`'s progress counts the files opened for
/// reading.
pub(crate) fn search_listed<T, O>(
    engine: &Engine,
    files: &[T],
    open: &O,
    cancel: &Cancel,
    mut sink: impl FnMut(&T, Found) -> bool,
) where
    T: Sync,
    O: Fn(&T) -> io::Result<File> + Sync,
{
    let shared = Shared {
        engine,
        files,
        open,
        cancel,
        stop: AtomicBool::new(false),
        state: Mutex::new(State {
            next: 0,
            consumed: 0,
            done: HashMap::new(),
            over: false,
        }),
        changed: Condvar::new(),
    };
    // No more helpers than files beyond the caller's first.
    let helpers = (walk::threads() - 1).min(files.len().saturating_sub(1));
    std::thread::scope(|scope| {
        for _ in 0..helpers {
            scope.spawn(|| shared.work());
        }
        shared.consume(&mut sink);
        shared.lock().over = true;
        shared.changed.notify_all();
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::grep::EngineOptions;
    use std::path::PathBuf;

    fn engine(pattern: &str, limit: u64) -> Engine {
        Engine::new(
            pattern,
            EngineOptions {
                limit,
                ..EngineOptions::default()
            },
        )
        .unwrap()
    }

    /// `n` files named `f0000`..; file `i` holds a match when `hit(i)`.
    fn files(n: usize, hit: impl Fn(usize) -> bool) -> (tempfile::TempDir, Vec<PathBuf>) {
        let t = tempfile::tempdir().unwrap();
        let paths = (0..n)
            .map(|i| {
                let p = t.path().join(format!("f{i:04}"));
                let body = if hit(i) {
                    format!("line\nneedle {i}\n")
                } else {
                    "nothing\n".to_string()
                };
                std::fs::write(&p, body).unwrap();
                p
            })
            .collect();
        (t, paths)
    }

    fn open(p: &PathBuf) -> io::Result<File> {
        File::open(p)
    }

    #[test]
    fn hands_hits_on_in_list_order_skipping_files_without() {
        let (_t, paths) = files(500, |i| i.is_multiple_of(3));
        // A list order that is not the path order: reversed.
        let list: Vec<PathBuf> = paths.iter().rev().cloned().collect();
        let e = engine("needle", 100);
        let searched = Cancel::new();
        let mut seen = Vec::new();
        search_listed(&e, &list, &open, &searched, |p, hits| {
            assert_eq!(hits.hits.hits.len(), 1);
            assert_eq!(hits.hits.hits[0].number, 2);
            seen.push(p.clone());
            true
        });
        let want: Vec<PathBuf> = list
            .iter()
            .filter(|p| {
                let i: usize = p.file_name().unwrap().to_str().unwrap()[1..]
                    .parse()
                    .unwrap();
                i.is_multiple_of(3)
            })
            .cloned()
            .collect();
        assert_eq!(seen, want);
        assert_eq!(searched.files_searched(), 500);
    }

    #[test]
    fn unreadable_files_are_skipped_and_not_counted() {
        let (_t, mut paths) = files(10, |_| true);
        paths.insert(5, PathBuf::from("/nonexistent/file"));
        let searched = Cancel::new();
        let mut n = 0;
        search_listed(&engine("needle", 1), &paths, &open, &searched, |_, _| {
            n += 1;
            true
        });
        assert_eq!(n, 10);
        assert_eq!(searched.files_searched(), 10);
    }

    #[test]
    fn an_early_stop_searches_few_files_past_it() {
        let (_t, paths) = files(2000, |_| true);
        let searched = Cancel::new();
        let mut n = 0;
        search_listed(&engine("needle", 1), &paths, &open, &searched, |_, _| {
            n += 1;
            // A slow sink gives the other threads every chance to run
            // ahead: only the window holds them.
            std::thread::sleep(std::time::Duration::from_millis(30));
            n < 3
        });
        assert_eq!(n, 3);
        let s = searched.files_searched();
        assert!(s <= (3 + WINDOW) as u64, "searched {s}");
    }

    #[test]
    fn cancel_stops_the_search() {
        let (_t, paths) = files(2000, |_| true);
        let searched = Cancel::new();
        let cancel = searched.clone();
        let mut n = 0;
        search_listed(&engine("needle", 1), &paths, &open, &cancel, |_, _| {
            n += 1;
            if n == 2 {
                cancel.cancel();
            }
            true
        });
        assert_eq!(n, 2);
        assert!(searched.files_searched() <= (2 + WINDOW) as u64);
    }

    #[test]
    fn empty_and_single_lists() {
        let e = engine("needle", 1);
        let none: Vec<PathBuf> = Vec::new();
        search_listed(&e, &none, &open, &Cancel::new(), |_, _| panic!("no files"));
        let (_t, paths) = files(1, |_| true);
        let mut n = 0;
        search_listed(&e, &paths, &open, &Cancel::new(), |_, _| {
            n += 1;
            true
        });
        assert_eq!(n, 1);
    }
}
