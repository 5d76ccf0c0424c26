//! The ordered parallel walk: directories and runs of files are tasks keyed
//! by their place in path order; worker threads take the first pending one,
//! and the calling thread hands outputs to the sink in that order.

use std::cmp::Ordering as CmpOrdering;
use std::collections::{BinaryHeap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

use super::listing::{borrow, open_dir_at, DirHandle, Listing};
use super::rules::{Level, Rules};
use super::{Entry, Halt, Kind, Visitor};
use crate::cancel::Cancel;

/// A directory being walked: its descriptor, path, rules and entries.
pub(super) struct Dir {
    pub(super) fd: DirHandle,
    pub(super) rel: Vec<u8>,
    pub(super) level: Arc<Level>,
    pub(super) key: Vec<u32>,
    pub(super) listing: Listing,
}

impl Dir {
    /// Entry `index`, its path written into `path`.
    pub(super) fn entry<'a>(
        &'a self,
        index: usize,
        path: &'a mut Vec<u8>,
        halt: Halt<'a>,
    ) -> Entry<'a> {
        let listed = &self.listing.entries[index];
        let name = self.listing.name(listed);
        join(path, &self.rel, name);
        Entry {
            dir: borrow(&self.fd),
            name,
            rel: path,
            kind: listed.kind.unwrap_or(Kind::Other),
            halt,
        }
    }

    /// The path of entry `index` (its name joined to this directory's path).
    pub(super) fn child_path(&self, index: usize) -> Vec<u8> {
        let mut path = Vec::new();
        join(
            &mut path,
            &self.rel,
            self.listing.name(&self.listing.entries[index]),
        );
        path
    }

    pub(super) fn child_key(&self, index: usize) -> Vec<u32> {
        let mut key = Vec::with_capacity(self.key.len() + 1);
        key.extend_from_slice(&self.key);
        key.push(u32::try_from(index).unwrap_or(u32::MAX));
        key
    }
}

/// `path` := `dir/name` (or `name` at the top).
fn join(path: &mut Vec<u8>, dir: &[u8], name: &[u8]) {
    path.clear();
    path.extend_from_slice(dir);
    if !dir.is_empty() {
        path.push(b'/');
    }
    path.extend_from_slice(name);
}

enum Work {
    /// List the start directory.
    Start(DirHandle, Arc<Level>),
    /// List entry `index` of a listed directory.
    List(Arc<Dir>, usize),
    /// Visit a run of files of a listed directory (searching visitors).
    Files(Arc<Dir>, Vec<usize>),
}

/// A task, ordered by its place in path order: the indices of the sorted
/// entries leading to it (a run of files by its first file).
struct Task {
    key: Vec<u32>,
    id: usize,
    work: Work,
}

impl PartialEq for Task {
    fn eq(&self, other: &Self) -> bool {
        self.key == other.key
    }
}
impl Eq for Task {}
impl PartialOrd for Task {
    fn partial_cmp(&self, other: &Self) -> Option<CmpOrdering> {
        Some(self.cmp(other))
    }
}
impl Ord for Task {
    /// Reversed: `BinaryHeap` pops its greatest, and we want the first.
    fn cmp(&self, other: &Self) -> CmpOrdering {
        other.key.cmp(&self.key)
    }
}

/// A piece of a task's output: a visit's result, or the place where another
/// task's output goes.
enum Part<T> {
    Out(T),
    Task(usize),
}

struct State<T> {
    queue: BinaryHeap<Task>,
    /// Outputs of finished tasks not yet handed to the sink.
    done: HashMap<usize, Vec<Part<T>>>,
    /// Bytes the outputs in `done` hold (`Visitor::held`).
    held: usize,
    over: bool,
    /// Threads waiting on `changed`: wake-ups (a system call each) are only
    /// made when someone waits.
    waiting: usize,
}

impl<T> State<T> {
    /// Whether threads may finish more tasks ahead of the sink.
    fn room_ahead(&self) -> bool {
        self.done.len() < AHEAD && self.held < AHEAD_BYTES
    }
}

/// What a task's outputs hold.
fn held<V: Visitor>(parts: &[Part<V::Out>]) -> usize {
    parts
        .iter()
        .map(|part| match part {
            Part::Out(out) => V::held(out),
            Part::Task(_) => 0,
        })
        .sum()
}

struct Shared<'a, V: Visitor> {
    rules: &'a Rules,
    visitor: &'a V,
    state: Mutex<State<V::Out>>,
    changed: Condvar,
    next_id: AtomicUsize,
    halt: Halt<'a>,
}

/// Finished tasks whose outputs the threads may hold ahead of the sink:
/// bounds memory when the sink waits on one long task, while leaving the
/// threads thousands of directories or runs of files to work ahead on.
const AHEAD: usize = 4096;
/// Bytes the finished outputs may hold ahead of the sink (`Visitor::held`):
/// what a search keeps of the files past one slow file. Past it threads stop
/// taking tasks (the first pending one excepted, for the sink), so at most
/// this plus what the running tasks make is held.
pub(super) const AHEAD_BYTES: usize = 8 << 20;
/// Files per task for searching visitors: small, so a search that ends in
/// its first files searches few past them.
pub(super) const FILES_PER_TASK: usize = 8;

/// Walks the directory open at `start` (whose real host path `rules` was
/// made for), handing each visit's output to `sink` in path order until it
/// returns `false`, or until `cancel` is raised (from any thread). Entries
/// that cannot be read are skipped, as fd and ripgrep do.
///
/// ```
/// use pi_native_ops_core::walk::{self, Entry, Rules, Visitor};
/// use pi_native_ops_core::Cancel;
///
/// /// Yields every entry's path.
/// struct Paths;
/// impl Visitor for Paths {
///     type Out = String;
///     type Local = ();
///     fn local(&self) {}
///     fn visit(&self, _: &mut (), entry: &Entry<'_>) -> Option<String> {
///         Some(entry.rel().display().to_string())
///     }
/// }
///
/// let dir = tempfile::tempdir()?;
/// std::fs::create_dir(dir.path().join("b"))?;
/// std::fs::write(dir.path().join("b/c.txt"), "")?;
/// std::fs::write(dir.path().join("a.txt"), "")?;
/// std::fs::write(dir.path().join(".ignore"), "a.txt\n")?;
/// # #[cfg(unix)]
/// let start = std::fs::File::open(dir.path())?.into();
/// # #[cfg(windows)]
/// # let start = pi_native_ops_core::root::Root::open(dir.path(), None)?.open_dir(dir.path())?;
/// let mut seen = Vec::new();
/// let rules = Rules::new(dir.path(), None);
/// walk::walk(start, &rules, &Paths, &Cancel::new(), |path| {
///     seen.push(path);
///     true
/// });
/// assert_eq!(seen, [".ignore", "b", "b/c.txt"]);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn walk<V: Visitor>(
    start: DirHandle,
    rules: &Rules,
    visitor: &V,
    cancel: &Cancel,
    mut sink: impl FnMut(V::Out) -> bool,
) {
    let stop = AtomicBool::new(false);
    let above = rules.above_start();
    let shared = Shared {
        rules,
        visitor,
        state: Mutex::new(State {
            queue: BinaryHeap::from([Task {
                key: Vec::new(),
                id: 0,
                work: Work::Start(start, above),
            }]),
            done: HashMap::new(),
            held: 0,
            over: false,
            waiting: 0,
        }),
        changed: Condvar::new(),
        next_id: AtomicUsize::new(1),
        halt: Halt {
            stop: &stop,
            cancel: cancel.flag(),
        },
    };
    std::thread::scope(|scope| {
        for _ in 1..threads() {
            scope.spawn(|| shared.work());
        }
        shared.consume(&mut sink);
        shared.lock().over = true;
        shared.changed.notify_all();
    });
}

/// Cores a walk uses at most, so one walk does not take every core of a
/// large machine (each thread also holds its own buffers and searcher).
const MAX_CORES: usize = 8;

/// Threads per walk: one per core (at most `MAX_CORES`) besides the calling
/// thread, which waits whenever another thread holds the task it needs next;
/// the extra thread keeps every core busy then.
pub(crate) fn threads() -> usize {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    cores.clamp(1, MAX_CORES) + 1
}

impl<V: Visitor> Shared<'_, V> {
    fn lock(&self) -> MutexGuard<'_, State<V::Out>> {
        // Nothing panics while holding the lock; recover regardless.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn halted(&self) -> bool {
        self.halt.halted()
    }

    fn wait<'s>(
        &'s self,
        mut state: MutexGuard<'s, State<V::Out>>,
    ) -> MutexGuard<'s, State<V::Out>> {
        state.waiting += 1;
        let mut state = self.changed.wait(state).unwrap_or_else(|e| e.into_inner());
        state.waiting -= 1;
        state
    }

    fn wake(&self, state: MutexGuard<'_, State<V::Out>>) {
        let anyone = state.waiting > 0;
        drop(state);
        if anyone {
            self.changed.notify_all();
        }
    }

    /// A worker thread: runs the first pending task, while the sink is not
    /// too far behind, until the walk is over.
    fn work(&self) {
        let mut local = self.visitor.local();
        let mut state = self.lock();
        while !state.over && !self.halted() {
            if state.room_ahead() {
                if let Some(task) = state.queue.pop() {
                    drop(state);
                    self.run(task, &mut local);
                    state = self.lock();
                    continue;
                }
            }
            state = self.wait(state);
        }
    }

    /// The calling thread: hands outputs to the sink in path order, running
    /// tasks itself while the one it needs is not done.
    fn consume(&self, sink: &mut impl FnMut(V::Out) -> bool) {
        let mut local = self.visitor.local();
        let mut stack: Vec<std::vec::IntoIter<Part<V::Out>>> = Vec::new();
        let mut needed = Some(0);
        while !self.halted() {
            if let Some(id) = needed.take() {
                match self.wait_for(id, &mut local) {
                    Some(parts) => stack.push(parts.into_iter()),
                    None => return,
                }
            }
            let Some(top) = stack.last_mut() else { return };
            match top.next() {
                None => {
                    stack.pop();
                }
                Some(Part::Out(out)) => {
                    if !sink(out) {
                        self.halt.stop.store(true, Ordering::Relaxed);
                        return;
                    }
                }
                Some(Part::Task(id)) => needed = Some(id),
            }
        }
    }

    /// The output of task `id`, running pending tasks meanwhile (`id` itself
    /// first: nothing before it in path order is pending, so when it is
    /// queued it is the queue's first). `None` when the walk was stopped.
    fn wait_for(&self, id: usize, local: &mut V::Local) -> Option<Vec<Part<V::Out>>> {
        let mut state = self.lock();
        loop {
            if let Some(parts) = state.done.remove(&id) {
                state.held -= held::<V>(&parts);
                // Room ahead again for workers that wait for it.
                self.wake(state);
                return Some(parts);
            }
            if self.halted() {
                return None;
            }
            let first_is_needed = state.queue.peek().is_some_and(|t| t.id == id);
            if first_is_needed || state.room_ahead() {
                if let Some(task) = state.queue.pop() {
                    drop(state);
                    self.run(task, local);
                    state = self.lock();
                    continue;
                }
            }
            state = self.wait(state);
        }
    }

    fn run(&self, task: Task, local: &mut V::Local) {
        let mut new_tasks = Vec::new();
        let parts = if self.halted() {
            Vec::new()
        } else {
            match task.work {
                Work::Start(fd, above) => {
                    self.list(fd, Vec::new(), above, task.key, &mut new_tasks, local)
                }
                Work::List(parent, index) => {
                    let name = parent.listing.name(&parent.listing.entries[index]);
                    match open_dir_at(borrow(&parent.fd), name) {
                        Ok(fd) => {
                            let rel = parent.child_path(index);
                            let level = parent.level.clone();
                            drop(parent);
                            self.list(fd, rel, level, task.key, &mut new_tasks, local)
                        }
                        // Unreadable, or swapped for a symlink since it was listed.
                        Err(_) => Vec::new(),
                    }
                }
                Work::Files(dir, files) => self.visit_files(&dir, &files, local),
            }
        };
        let held = held::<V>(&parts);
        let mut state = self.lock();
        state.queue.extend(new_tasks);
        state.held += held;
        state.done.insert(task.id, parts);
        self.wake(state);
    }

    /// Queues `work` (once the running task ends) and returns its place.
    fn new_task(&self, work: Work, new_tasks: &mut Vec<Task>) -> Part<V::Out> {
        let key = match &work {
            Work::Start(..) => Vec::new(),
            Work::List(dir, index) => dir.child_key(*index),
            Work::Files(dir, files) => dir.child_key(files[0]),
        };
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        new_tasks.push(Task { key, id, work });
        Part::Task(id)
    }

    /// Makes the run of files gathered so far (if any) a task in its place.
    fn files_task(
        &self,
        dir: &Arc<Dir>,
        files: &mut Vec<usize>,
        parts: &mut Vec<Part<V::Out>>,
        new_tasks: &mut Vec<Task>,
    ) {
        if !files.is_empty() {
            let run = std::mem::take(files);
            parts.push(self.new_task(Work::Files(dir.clone(), run), new_tasks));
        }
    }

    /// Lists a directory and visits its entries in order; subdirectories
    /// (and runs of files, for searching visitors) become tasks.
    fn list(
        &self,
        fd: DirHandle,
        rel: Vec<u8>,
        above: Arc<Level>,
        key: Vec<u32>,
        new_tasks: &mut Vec<Task>,
        local: &mut V::Local,
    ) -> Vec<Part<V::Out>> {
        let listing = Listing::of(borrow(&fd));
        let level = Level::for_listing(borrow(&fd), &rel, &listing.markers, self.rules, above);
        let dir = Arc::new(Dir {
            fd,
            rel,
            level,
            key,
            listing,
        });
        let mut parts = Vec::new();
        let mut files: Vec<usize> = Vec::new();
        let mut path = Vec::new();
        let mut scratch = Vec::new();
        for index in 0..dir.listing.entries.len() {
            let entry = dir.entry(index, &mut path, self.halt);
            let is_dir = entry.kind == Kind::Dir;
            let left_out = |scratch: &mut Vec<u8>| {
                self.rules
                    .is_ignored(&dir.level, entry.rel, is_dir, scratch)
                    || self.visitor.skip(&entry)
            };
            if !is_dir && !V::SEARCHES_FILES {
                // Visit first: the rules only matter for a file that yields.
                match self.visitor.visit(local, &entry) {
                    Some(out) if !left_out(&mut scratch) => parts.push(Part::Out(out)),
                    _ => {}
                }
                continue;
            }
            if left_out(&mut scratch) {
                continue;
            }
            if V::SEARCHES_FILES && !is_dir {
                files.push(index);
                if files.len() == FILES_PER_TASK {
                    self.files_task(&dir, &mut files, &mut parts, new_tasks);
                }
                continue;
            }
            self.files_task(&dir, &mut files, &mut parts, new_tasks);
            if let Some(out) = self.visitor.visit(local, &entry) {
                parts.push(Part::Out(out));
            }
            if is_dir {
                parts.push(self.new_task(Work::List(dir.clone(), index), new_tasks));
            }
        }
        self.files_task(&dir, &mut files, &mut parts, new_tasks);
        parts
    }

    fn visit_files(&self, dir: &Dir, files: &[usize], local: &mut V::Local) -> Vec<Part<V::Out>> {
        let mut parts = Vec::new();
        let mut path = Vec::new();
        for &index in files {
            if self.halted() {
                break;
            }
            let entry = dir.entry(index, &mut path, self.halt);
            if let Some(out) = self.visitor.visit(local, &entry) {
                parts.push(Part::Out(out));
            }
        }
        parts
    }
}
