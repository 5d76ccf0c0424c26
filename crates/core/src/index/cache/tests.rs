//! The persisted index: saved and read back it answers as a fresh build,
//! a change made while no session ran is seen, a corrupt or forged file is
//! refused, and the decoder survives any bytes (a mutation fuzz).

use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::*;
use crate::index::grams::tests::Rng;
use crate::index::query;
use crate::index::tests::{
    all_dirs, assert_find_equal, assert_grep_equal, find, grep, populate, query, rich_tree,
    root_of, GREP_PATTERNS, PI_PRUNE,
};
use crate::index::{Index, IndexOptions, IndexState, Stats};
use crate::root::Root;

/// Returns once a file changed now gets another ctime than one changed
/// before the call (the kernel's coarse clock ticked): a change made after
/// it cannot share a stamp saved before it. Waits on the clock's state.
pub(crate) fn next_tick() {
    let t = tempfile::tempdir().unwrap();
    let probe = t.path().join("probe");
    fs::write(&probe, "0").unwrap();
    let ctime = |p: &Path| {
        let m = fs::metadata(p).unwrap();
        (m.ctime(), m.ctime_nsec())
    };
    let before = ctime(&probe);
    while ctime(&probe) == before {
        fs::write(&probe, "1").unwrap();
        std::thread::yield_now();
    }
}

/// Builds an index of `root` with a cache in `options`, saves it at close
/// (every file, however recently written: the clock's tick is awaited
/// instead of the racy margin) and returns the first build's stats.
fn save(root: &Arc<Root>, options: &IndexOptions) -> Stats {
    let first = Index::start(root.clone(), options.clone());
    let stats = first.wait_ready();
    assert_eq!(stats.state, IndexState::Ready, "{stats:?}");
    RACY_NS_FOR_TESTS.set(Some(0));
    first.close();
    RACY_NS_FOR_TESTS.set(None);
    next_tick();
    stats
}

/// The cache file a save left in `dir` (the first one listed).
fn saved_file(dir: &Path) -> PathBuf {
    fs::read_dir(dir).unwrap().flatten().next().unwrap().path()
}

fn with_cache(dir: &Path) -> IndexOptions {
    IndexOptions {
        cache_dir: Some(dir.to_path_buf()),
        ..IndexOptions::default()
    }
}

/// An index built from the cache file of a first one (the suites'
/// persisted leg): saved, then read back; every file restored.
pub(crate) fn restored(root: &Arc<Root>, options: IndexOptions) -> Index {
    let dir = tempfile::tempdir().unwrap().keep();
    let options = IndexOptions {
        cache_dir: Some(dir),
        ..options
    };
    let first = save(root, &options);
    let index = Index::start(root.clone(), options);
    let stats = index.wait_ready();
    if stats.state == IndexState::Ready {
        assert_eq!(stats.cache.as_deref(), Some("restored"), "{stats:?}");
        assert!(stats.restored_files > 0 || first.files == 0, "{stats:?}");
    }
    index
}

/// find and grep from every directory equal the live walk's, and the
/// patterns `extra` (the changed text) too.
fn assert_parity(root: &Root, index: &Index, top: &Path, extra: &[&str], what: &str) {
    assert_find_equal(root, index, top);
    assert_grep_equal(root, index, top, GREP_PATTERNS);
    for dir in all_dirs(top) {
        for pattern in extra {
            let q = query(pattern, false, false, None);
            let (live, warm) = (
                grep(root, &dir, &q, None),
                grep(root, &dir, &q, Some(index)),
            );
            assert_eq!(warm, live, "after {what}: grep {pattern:?} in {dir:?}");
            let live = find(root, &dir, pattern, PI_PRUNE, usize::MAX, None);
            let warm = find(root, &dir, pattern, PI_PRUNE, usize::MAX, Some(index));
            assert_eq!(warm, live, "after {what}: find {pattern:?} in {dir:?}");
        }
    }
}

fn set_mtime(path: &Path, to: std::time::SystemTime) {
    let file = fs::OpenOptions::new().write(true).open(path).unwrap();
    file.set_modified(to).unwrap();
}

/// Each kind of change made while no index ran, then a start from the
/// cache: the answers are the live walk's (the changed files re-read, the
/// others restored).
#[test]
fn changes_made_while_no_session_ran_are_seen() {
    type Change = fn(&Path);
    let changes: [(&str, Change); 9] = [
        ("a same-size edit with the mtime set back", |d| {
            let p = d.join("src/main.rs");
            let old = fs::metadata(&p).unwrap().modified().unwrap();
            let text = fs::read_to_string(&p).unwrap().replace("hay", "odd");
            fs::write(&p, text).unwrap();
            set_mtime(&p, old);
        }),
        ("an edit that grows a file", |d| {
            fs::write(d.join("src/lib.rs"), "changed and longer than before\n").unwrap()
        }),
        ("a file deleted", |d| {
            fs::remove_file(d.join("src/main.rs")).unwrap()
        }),
        ("a file renamed", |d| {
            fs::rename(d.join("src/main.rs"), d.join("src/renamed.rs")).unwrap()
        }),
        ("two files swapped by rename", |d| {
            fs::rename(d.join("src/main.rs"), d.join("tmp")).unwrap();
            fs::rename(d.join("src/lib.rs"), d.join("src/main.rs")).unwrap();
            fs::rename(d.join("tmp"), d.join("src/lib.rs")).unwrap();
        }),
        ("a directory renamed", |d| {
            fs::rename(d.join("d1"), d.join("d9")).unwrap()
        }),
        ("a checkout of another branch", |d| {
            // As git does: new files renamed over the old, some removed and
            // added, an ignore file changed.
            for (name, text) in [("src/main.rs", "changed in main\n"), ("sub/x.rs", "odd\n")] {
                let tmp = d.join(format!("{name}.lock"));
                fs::write(&tmp, text).unwrap();
                fs::rename(&tmp, d.join(name)).unwrap();
            }
            fs::remove_file(d.join("a.txt")).unwrap();
            fs::write(d.join("src/added.rs"), "changed: added\n").unwrap();
            fs::write(d.join(".ignore"), "secret*\n*.txt\n").unwrap();
        }),
        ("a chmod and a hard link", |d| {
            let p = d.join("src/lib.rs");
            fs::set_permissions(&p, fs::Permissions::from_mode(0o600)).unwrap();
            fs::hard_link(&p, d.join("sub/lib-link.rs")).unwrap();
        }),
        ("a file replaced by a directory", |d| {
            fs::remove_file(d.join("sub/x.rs")).unwrap();
            populate(d, &["sub/x.rs/inner.rs"]);
        }),
    ];
    for (what, change) in changes {
        let t = rich_tree(false);
        let cache = tempfile::tempdir().unwrap();
        let root = root_of(t.path());
        let options = with_cache(cache.path());
        let built = save(&root, &options);
        change(t.path());
        let index = Index::start(root.clone(), options);
        let stats = index.wait_ready();
        assert_eq!(
            stats.cache.as_deref(),
            Some("restored"),
            "{what}: {stats:?}"
        );
        assert_parity(&root, &index, t.path(), &["odd", "changed", "needle"], what);
        assert!(stats.restored_files > 0, "{what}: {stats:?}");
        assert!(
            stats.restored_files < built.files,
            "{what}: {stats:?} {built:?}"
        );
    }
}

/// A cache file that is cut short, altered, forged (a right checksum over
/// counts and offsets that lie), of another format or another workspace,
/// or not private, is not used: the index is built from the tree, answers
/// as the live walk, and says why.
#[test]
fn a_corrupt_or_forged_cache_file_is_refused_and_the_index_built() {
    let t = rich_tree(false);
    let cache = tempfile::tempdir().unwrap();
    let root = root_of(t.path());
    let options = with_cache(cache.path());
    save(&root, &options);
    let file = saved_file(cache.path());
    let good = fs::read(&file).unwrap();
    // Made private: the directory 0700, the file 0600.
    assert_eq!(fs::metadata(cache.path()).unwrap().mode() & 0o777, 0o700);
    assert_eq!(fs::metadata(&file).unwrap().mode() & 0o777, 0o600);
    let body = &good[52..];
    let mut flipped = good.clone();
    flipped[good.len() / 2] ^= 0x10;
    let mut count_forged = body.to_vec();
    // The ids' count (after the key) made huge, the checksum made right.
    let at = 8 + root.host().as_os_str().len() + 32;
    count_forged[at..at + 8].copy_from_slice(&u64::MAX.to_le_bytes());
    let mut other_version = good.clone();
    other_version[8] ^= 1;
    let mut other_root = body.to_vec();
    other_root[8] ^= 1;
    let cases: [(&str, Vec<u8>, &str); 7] = [
        ("cut short", good[..good.len() / 2].to_vec(), "truncated"),
        ("empty", Vec::new(), "truncated"),
        ("one bit flipped", flipped, "checksum mismatch"),
        ("a forged count", frame(&count_forged), "malformed"),
        ("a forged tail", frame(&body[..body.len() - 3]), "malformed"),
        ("another version", other_version, "another format"),
        (
            "another workspace",
            frame(&other_root),
            "written for another workspace or options",
        ),
    ];
    for (what, bytes, why) in cases {
        fs::write(&file, &bytes).unwrap();
        let index = Index::start(root.clone(), options.clone());
        let stats = index.wait_ready();
        assert_eq!(stats.state, IndexState::Ready, "{what}");
        assert_eq!(stats.cache.as_deref(), Some(why), "{what}");
        assert_eq!(stats.restored_files, 0, "{what}");
        assert_parity(&root, &index, t.path(), &[], what);
        drop(index);
        // The close saved a good file again.
        assert_eq!(
            fs::read(&file).unwrap().len(),
            good.len(),
            "{what}: saved again"
        );
    }
    fs::write(&file, &good).unwrap();
    fs::set_permissions(&file, fs::Permissions::from_mode(0o644)).unwrap();
    let stats = Index::start(root.clone(), options.clone()).wait_ready();
    assert_eq!(
        stats.cache.as_deref(),
        Some("not a private file of the user's")
    );
}

/// The cache directory stays within its bound: a file larger is not
/// written, and the least recently saved workspace goes first.
#[test]
fn the_cache_directory_keeps_to_its_bound() {
    let cache = tempfile::tempdir().unwrap();
    let (a, b) = (rich_tree(false), rich_tree(true));
    let options = IndexOptions {
        cache_max_bytes: 1,
        ..with_cache(cache.path())
    };
    save(&root_of(a.path()), &options);
    assert_eq!(
        fs::read_dir(cache.path()).unwrap().count(),
        0,
        "larger than 1 byte"
    );
    save(&root_of(a.path()), &with_cache(cache.path()));
    let one = saved_file(cache.path());
    let bound = fs::metadata(&one).unwrap().len() + 1;
    let options = IndexOptions {
        cache_max_bytes: bound + bound / 2,
        ..with_cache(cache.path())
    };
    save(&root_of(b.path()), &options);
    let left: Vec<PathBuf> = fs::read_dir(cache.path())
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .collect();
    assert_eq!(left.len(), 1, "{left:?}");
    assert_ne!(left[0], one, "the older one went");
    // Deleted, the cache is only a cold start.
    fs::remove_dir_all(cache.path()).unwrap();
    let stats = Index::start(root_of(a.path()), with_cache(cache.path())).wait_ready();
    assert_eq!((stats.state, stats.restored_files), (IndexState::Ready, 0));
}

/// A save is skipped when an event is still queued (some stamp may
/// postdate the content indexed): the lock held, the thread cannot drain
/// the write first. Events about other names in the root's ancestors (a
/// file made beside the root) do not stop it.
#[test]
fn a_change_pending_at_close_skips_the_save() {
    let top = tempfile::tempdir().unwrap();
    let t = top.path().join("ws");
    populate(&t, &["src/main.rs", "a.txt"]);
    let cache = tempfile::tempdir().unwrap();
    let root = root_of(&t);
    let index = Index::start(root.clone(), with_cache(cache.path()));
    index.wait_ready();
    let inner = index.inner();
    let mut shared = inner.lock();
    fs::write(top.path().join("beside.txt"), "x").unwrap();
    assert_eq!(inner.save(&mut shared, cache.path()), Ok(()));
    fs::write(t.join("src/main.rs"), "odd\n").unwrap();
    assert_eq!(
        inner.save(&mut shared, cache.path()),
        Err("the tree changed while it was saved".into())
    );
}

/// Mutations of a valid file's body (bytes flipped, numbers overwritten
/// with edge values, cut or grown), framed with a right checksum so that
/// the decoder meets them: it never panics, and whatever it accepts is
/// within bounds (every list's ids inside the ids, increasing; queries run).
#[test]
fn the_decoder_survives_mutated_files() {
    let t = rich_tree(true);
    let cache = tempfile::tempdir().unwrap();
    let root = root_of(t.path());
    save(&root, &with_cache(cache.path()));
    let file = saved_file(cache.path());
    let good = fs::read(file).unwrap();
    let body = &good[52..];
    let key = Key {
        root: root.host(),
        root_id: root.identity(),
        max_file_bytes: IndexOptions::default().max_file_bytes,
        exact_min_bytes: IndexOptions::default().exact_min_bytes,
    };
    assert!(decode(&good, &key).is_ok());
    let mut rng = Rng(0x5eed);
    let edges = [
        0u64,
        1,
        7,
        0x7f,
        0x80,
        0xffff,
        u32::MAX as u64,
        1 << 31,
        u64::MAX,
    ];
    let (mut accepted, runs) = (0, 3000);
    for _ in 0..runs {
        let mut b = body.to_vec();
        for _ in 0..=rng.below(3) {
            let at = rng.below(b.len() as u64) as usize;
            match rng.below(4) {
                0 => b[at] ^= 1 << rng.below(8),
                1 if at + 8 <= b.len() => {
                    let v = edges[rng.below(edges.len() as u64) as usize];
                    b[at..at + 8].copy_from_slice(&v.to_le_bytes());
                }
                2 => b.truncate(at),
                _ => b.insert(at, rng.below(256) as u8),
            }
            if b.is_empty() {
                break;
            }
        }
        let Ok(saved) = decode(&frame(&b), &key) else {
            continue;
        };
        accepted += 1;
        let ids = saved.content.ids.sizes.len() as u32;
        for segment in saved.content.postings.segments() {
            for list in segment.lists() {
                let mut last = None;
                list.for_each(|id| {
                    assert!(id < ids && last.is_none_or(|l| l < id));
                    last = Some(id);
                });
            }
        }
        for pattern in ["needle", "hay", "x"] {
            let _ = query::candidates(&query::plan(pattern, false, false), &saved.content.postings);
        }
    }
    // Not vacuous: some mutations decode (a flipped bit in a list's bitmap,
    // a stamp, a size).
    assert!(
        accepted > 0 && accepted < runs,
        "{accepted} of {runs} accepted"
    );
}

/// A file changed within the racy margin before the save is not saved (a
/// write later in the same clock tick could leave its stamp as it was);
/// one changed before it is.
#[test]
fn stamps_within_the_racy_margin_are_not_saved() {
    let t = tempfile::tempdir().unwrap();
    populate(t.path(), &["a.rs", "b/c.rs"]);
    let root = root_of(t.path());
    let index = Index::start(root.clone(), IndexOptions::default());
    index.wait_ready();
    let key = Key {
        root: root.host(),
        root_id: root.identity(),
        max_file_bytes: IndexOptions::default().max_file_bytes,
        exact_min_bytes: IndexOptions::default().exact_min_bytes,
    };
    let latest = ["a.rs", "b/c.rs"]
        .iter()
        .map(|f| {
            let m = fs::metadata(t.path().join(f)).unwrap();
            let ns = |s: i64, n: i64| i128::from(s) * 1_000_000_000 + i128::from(n);
            ns(m.ctime(), m.ctime_nsec()).max(ns(m.mtime(), m.mtime_nsec()))
        })
        .max()
        .unwrap();
    let shared = index.inner().lock();
    let live = shared.live.as_ref().unwrap();
    let saved = |now_ns| {
        let bytes = encode(&key, &live.tree, &live.content, now_ns).unwrap();
        decode(&bytes, &key).unwrap().files.len()
    };
    assert_eq!(saved(latest + RACY_NS - 1), 0, "changed within the margin");
    assert_eq!(saved(latest + RACY_NS + 1), 2, "changed before it");
}
