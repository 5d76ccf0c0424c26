//! The index's answers equal the live walk's: for every start directory of
//! trees full of ignore rules (equivalence), right after every kind of
//! change (freshness), and when it steps aside or closes.

use super::content::{Ids, Refresh};
use super::reader::{read_up_to, READ_RESERVE};
use super::thread::large_files;
use super::*;
use std::ffi::OsString;
use std::fs;
use std::os::unix::ffi::OsStringExt;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crate::cancel::Cancel;
use crate::find::{self, Search};
use crate::grep::{self, Query, RawQuery};

/// Creates `files` (a trailing `/` makes a directory) with `text` as each
/// file's contents.
pub(super) fn populate(dir: &Path, files: &[&str]) {
    for f in files {
        if let Some(d) = f.strip_suffix('/') {
            fs::create_dir_all(dir.join(d)).unwrap();
        } else {
            let p = dir.join(f);
            fs::create_dir_all(p.parent().unwrap()).unwrap();
            fs::write(p, format!("needle in {f}\nhay\n")).unwrap();
        }
    }
}

/// A tree with every kind of rule the walker honours.
pub(super) fn rich_tree(repo_at_root: bool) -> tempfile::TempDir {
    let t = tempfile::tempdir().unwrap();
    let d = t.path();
    populate(
        d,
        &[
            "a.txt",
            "b.log",
            "keep.log",
            "top_only",
            "sub/top_only",
            "sub/x.rs",
            "build/x.txt",
            "src/main.rs",
            "src/lib.rs",
            "src/gen/g.rs",
            "src/x.tmp",
            "src/nested/x.tmp",
            "src/nested/y.rs",
            "secret.txt",
            "repo/inner/i.rs",
            "repo/excluded.rs",
            "repo/ok.rs",
            "repo/.git/HEAD",
            "repo/.git/info/exclude",
            "node_modules/p/index.js",
            "d1/d2/d3/f.rs",
            "empty/",
            ".hidden/h.rs",
            "worktree/w.rs",
        ],
    );
    fs::write(
        d.join(".gitignore"),
        "*.log\nbuild/\n!keep.log\n/top_only\n",
    )
    .unwrap();
    fs::write(d.join(".ignore"), "secret*\n").unwrap();
    fs::write(d.join("src/.gitignore"), "gen/\n*.tmp\n").unwrap();
    fs::write(d.join("src/nested/.ignore"), "!x.tmp\n").unwrap();
    fs::write(d.join("repo/.gitignore"), "inner/\n").unwrap();
    fs::write(d.join("repo/.git/info/exclude"), "excluded.rs\n").unwrap();
    std::os::unix::fs::symlink("src", d.join("link")).unwrap();
    std::os::unix::fs::symlink("a.txt", d.join("flink")).unwrap();
    std::os::unix::fs::symlink("nowhere", d.join("dangling")).unwrap();
    let odd = d.join(OsString::from_vec(b"caf\xe9.rs".to_vec()));
    fs::write(odd, "needle odd\n").unwrap();
    if repo_at_root {
        populate(d, &[".git/HEAD", ".git/info/exclude"]);
        fs::write(d.join(".git/info/exclude"), "a.txt\n").unwrap();
    }
    t
}

/// Every directory under `dir` (itself first), symlinks not followed.
pub(super) fn all_dirs(dir: &Path) -> Vec<PathBuf> {
    let mut out = vec![dir.to_path_buf()];
    let mut i = 0;
    while i < out.len() {
        let mut subs: Vec<PathBuf> = fs::read_dir(&out[i])
            .unwrap()
            .flatten()
            .filter(|e| e.file_type().unwrap().is_dir())
            .map(|e| e.path())
            .collect();
        subs.sort();
        out.extend(subs);
        i += 1;
    }
    out
}

pub(super) fn root_of(t: &Path) -> Arc<Root> {
    Arc::new(Root::open(t, None).unwrap())
}

pub(super) fn find(
    root: &Root,
    dir: &Path,
    pattern: &str,
    ignore: &[&str],
    limit: usize,
    index: Option<&Index>,
) -> String {
    let ignore: Vec<String> = ignore.iter().map(|s| s.to_string()).collect();
    let search = Search {
        pattern,
        ignore: &ignore,
        limit,
    };
    format!("{:?}", find::glob(root, dir, &search, index))
}

/// A search that records nothing: whether the index answers from `dir`.
struct Probe;
impl TreeSearch for Probe {
    fn left_out(&mut self, _: &[u8], child: &Child) -> bool {
        child.ignored || &*child.name == b".git" || &*child.name == b"node_modules"
    }
    fn visit(&mut self, _: &[u8], _: &Child, _: &DirNode) -> bool {
        true
    }
}

fn answers(index: &Index, dir: &Path) -> bool {
    let real = fs::canonicalize(dir).unwrap();
    index.walk(&real, &mut Probe).is_some()
}

pub(super) fn grep(root: &Root, dir: &Path, q: &Query, index: Option<&Index>) -> String {
    let target = grep::target(Some(root), dir, String::new()).unwrap();
    format!("{:?}", grep::run(&target, q, root, &Cancel::new(), index))
}

pub(super) fn query(pattern: &str, ignore_case: bool, literal: bool, glob: Option<&str>) -> Query {
    Query::new(RawQuery {
        pattern: pattern.to_string(),
        ignore_case,
        literal,
        glob: glob.map(str::to_string),
        ..RawQuery::default()
    })
}

/// grep with and without the index agree from every directory, for
/// selective and unselective patterns, globs that whitelist ignored files
/// (and directories: then the index declines), context and limits.
pub(super) fn assert_grep_equal(root: &Root, index: &Index, top: &Path, patterns: &[&str]) {
    let globs = [
        None,
        Some("*.rs"),
        Some("!*.rs"),
        Some("*.log"),
        Some("build/**"),
        Some("**/x.tmp"),
    ];
    for dir in all_dirs(top) {
        for &pattern in patterns {
            let modes = [
                (false, false, &globs[..]),
                (true, false, &[None][..]),
                (false, true, &[None][..]),
            ];
            for (ignore_case, literal, globs) in modes {
                for &glob in globs {
                    let mut q = query(pattern, ignore_case, literal, glob);
                    let live = grep(root, &dir, &q, None);
                    let warm = grep(root, &dir, &q, Some(index));
                    assert_eq!(
                        warm, live,
                        "grep {pattern:?} -i={ignore_case} -F={literal} {glob:?} in {dir:?}"
                    );
                    if glob.is_none() && !literal {
                        (q.context, q.limit) = (1, 2);
                        let live = grep(root, &dir, &q, None);
                        let warm = grep(root, &dir, &q, Some(index));
                        assert_eq!(warm, live, "grep -C1 -m2 {pattern:?} in {dir:?}");
                    }
                }
            }
        }
    }
}

pub(super) const GREP_PATTERNS: &[&str] = &[
    "needle",
    "needle in src/main",
    "NEEDLE IN",
    // Unicode classes (`\w`) compile slowly in debug builds: ASCII ones.
    r"ne+dle[ \t]+in[ \t]+[a-z/]+\.rs",
    r"[a-z]+",
    "hay",
    "odd",
    "changed",
    "nomatch_xyz",
    "(x.tmp|g.rs)$",
];

pub(super) const PI_PRUNE: &[&str] = &["**/.git/**", "**/node_modules/**"];

/// find with and without the index agree from every directory.
pub(super) fn assert_find_equal(root: &Root, index: &Index, top: &Path) -> usize {
    let patterns = [
        "",
        "*",
        "*.rs",
        "src/*.rs",
        "**/x.tmp",
        "*.log",
        "f*",
        "caf*",
        "*/*",
        "*ai*",
        "m?in.*",
        "*este*",
        "src/*i*.rs",
        "*.tm?",
    ];
    let prunes: [&[&str]; 4] = [&[], PI_PRUNE, &["src/**"], &["**/nested/**", "**/.git/**"]];
    let mut answered = 0;
    for dir in all_dirs(top) {
        answered += usize::from(answers(index, &dir));
        for pattern in patterns {
            for prune in prunes {
                for limit in [usize::MAX, 3] {
                    let live = find(root, &dir, pattern, prune, limit, None);
                    let warm = find(root, &dir, pattern, prune, limit, Some(index));
                    assert_eq!(warm, live, "find {pattern:?} {prune:?} {limit} in {dir:?}");
                }
            }
        }
    }
    answered
}

/// Names a find's pattern holds literally (`Kconfig`, `nothing_like_*`,
/// `*onfi*`) let the walk pass directories by or read one child of each:
/// the answers stay the live walk's, directories of that name included.
#[test]
fn find_by_literal_names_equals_the_live_walk() {
    let t = tempfile::tempdir().unwrap();
    populate(
        t.path(),
        &[
            "Kconfig",
            "a/Kconfig",
            "a/Kconfig.old",
            "a/xKconfig",
            "a/b/Kconfig",
            "a/b/kconfig",
            "c/Kconfig/x.c",
            "d/nothing_like_this_1",
            "d/e/Nothing_Like_This_2",
            "f/zz.c",
        ],
    );
    let root = root_of(t.path());
    let index = ready(&root, IndexOptions::default());
    let patterns = [
        "Kconfig",
        "**/Kconfig",
        "a/**/Kconfig",
        "kconfig",
        "*onfi*",
        "K*g",
        "Kconfig*",
        "nothing_like_*",
        "Nothing_Like_*",
        "*Like*",
        "x.c",
        "**/K?onfig",
    ];
    for dir in all_dirs(t.path()) {
        for pattern in patterns {
            let live = find(&root, &dir, pattern, PI_PRUNE, usize::MAX, None);
            let warm = find(&root, &dir, pattern, PI_PRUNE, usize::MAX, Some(&index));
            assert_eq!(warm, live, "find {pattern:?} in {dir:?}");
        }
    }
    let all = find(&root, t.path(), "**/Kconfig", &[], usize::MAX, Some(&index));
    assert_eq!(all.matches("Kconfig").count(), 4, "{all}");
}

/// A ready index: built, or with `PI_INDEX_PERSISTED` set (the suites'
/// persisted leg), built, saved, and built again from its cache file.
pub(super) fn ready(root: &Arc<Root>, options: IndexOptions) -> Index {
    let index = match std::env::var_os("PI_INDEX_PERSISTED") {
        Some(_) => cache::tests::restored(root, options),
        None => Index::start(root.clone(), options),
    };
    let stats = index.wait_ready();
    assert_eq!(stats.state, IndexState::Ready, "{stats:?}");
    index
}

#[test]
fn find_equals_the_live_walk_from_every_directory() {
    for repo_at_root in [false, true] {
        let t = rich_tree(repo_at_root);
        let root = root_of(t.path());
        let index = ready(&root, IndexOptions::default());
        let answered = assert_find_equal(&root, &index, t.path());
        assert_grep_equal(&root, &index, t.path(), GREP_PATTERNS);
        // Not vacuous: a selective pattern is answered from few candidates.
        let files = index
            .grep_files(
                &root.host().join("src"),
                "needle in src/main",
                false,
                false,
                None,
            )
            .unwrap();
        let shown: Vec<&str> = files.files.iter().map(|f| &*f.shown).collect();
        assert_eq!(shown, ["main.rs"]);
        // Not vacuous: most directories are answered from the tree (not
        // ignored ones, `.git`, nor the nested repository when git is not
        // required from the root).
        assert!(answered >= 10, "answered from {answered} directories");
        assert!(answers(&index, &t.path().join("src/nested")));
        assert!(!answers(&index, &t.path().join("build")));
        assert_eq!(answers(&index, &t.path().join("repo")), repo_at_root);
        let stats = index.stats();
        assert!(stats.files > 10 && stats.directories > 5, "{stats:?}");
        assert!(
            stats.bytes_indexed > 0 && stats.memory_bytes > 0,
            "{stats:?}"
        );
    }
}

/// Applies `change`, then checks find (and, from the root, the answer
/// being the index's) at once, with no wait.
fn check_fresh(root: &Arc<Root>, index: &Index, top: &Path, what: &str) {
    for dir in all_dirs(top) {
        for (pattern, prune) in [
            ("*", PI_PRUNE),
            ("*.rs", &[][..]),
            ("", &["**/.git/**"][..]),
        ] {
            let live = find(root, &dir, pattern, prune, usize::MAX, None);
            let warm = find(root, &dir, pattern, prune, usize::MAX, Some(index));
            assert_eq!(warm, live, "after {what}: find {pattern:?} in {dir:?}");
        }
    }
    for pattern in ["needle", "changed", "needle in p"] {
        let q = query(pattern, false, false, None);
        let live = grep(root, top, &q, None);
        let warm = grep(root, top, &q, Some(index));
        assert_eq!(warm, live, "after {what}: grep {pattern:?}");
    }
    assert!(answers(index, top), "after {what}: the index answers");
}

#[test]
fn the_next_search_sees_every_change() {
    let t = rich_tree(false);
    let d = t.path().to_path_buf();
    // Hard links: one from outside the root, two names inside it.
    let outside = tempfile::tempdir().unwrap();
    let o = outside.path().to_path_buf();
    fs::hard_link(d.join("src/nested/y.rs"), o.join("y.rs")).unwrap();
    fs::hard_link(d.join("worktree/w.rs"), d.join("worktree/w2.rs")).unwrap();
    let root = root_of(&d);
    let index = ready(&root, IndexOptions::default());
    // Linked files are indexed (their inodes watched), not always searched.
    let in_src = index
        .grep_files(
            &root.host().join("src"),
            "needle in src/main",
            false,
            false,
            None,
        )
        .unwrap();
    let shown: Vec<&str> = in_src.files.iter().map(|f| &*f.shown).collect();
    assert_eq!(shown, ["main.rs"]);
    index.inner().paused.store(true, Ordering::SeqCst);
    type Step<'a> = (&'a str, Box<dyn Fn() + 'a>);
    let steps: Vec<Step> = vec![
        (
            "create",
            Box::new(|| fs::write(d.join("src/new.rs"), "x").unwrap()),
        ),
        (
            "a write through a hard link outside the root",
            Box::new(|| fs::write(o.join("y.rs"), "changed through a link").unwrap()),
        ),
        (
            "a write through another name in the tree",
            Box::new(|| fs::write(d.join("worktree/w2.rs"), "changed w").unwrap()),
        ),
        (
            "modify",
            Box::new(|| fs::write(d.join("src/main.rs"), "changed").unwrap()),
        ),
        (
            "delete",
            Box::new(|| fs::remove_file(d.join("src/lib.rs")).unwrap()),
        ),
        (
            "rename a file",
            Box::new(|| fs::rename(d.join("a.txt"), d.join("sub/a2.rs")).unwrap()),
        ),
        (
            "rename a directory",
            Box::new(|| fs::rename(d.join("d1"), d.join("sub/moved")).unwrap()),
        ),
        (
            "mkdir -p with files",
            Box::new(|| populate(&d, &["p/q/r/s.rs", "p/q/t.rs"])),
        ),
        (
            "a new .gitignore rule",
            Box::new(|| fs::write(d.join("sub/.gitignore"), "*.rs\n").unwrap()),
        ),
        (
            "an edited .gitignore",
            Box::new(|| fs::write(d.join(".gitignore"), "*.log\n").unwrap()),
        ),
        (
            "a deleted .gitignore",
            Box::new(|| fs::remove_file(d.join("src/.gitignore")).unwrap()),
        ),
        (
            "an un-ignored directory filled",
            Box::new(|| populate(&d, &["build/more/m.rs"])),
        ),
        (
            "rm -r",
            Box::new(|| fs::remove_dir_all(d.join("sub")).unwrap()),
        ),
        (
            "a directory replaced",
            Box::new(|| {
                fs::rename(d.join("p"), d.join("old_p")).unwrap();
                populate(&d, &["p/other.rs"]);
            }),
        ),
        (
            "a dir swapped for a symlink",
            Box::new(|| {
                fs::rename(d.join("p"), d.join("p2")).unwrap();
                std::os::unix::fs::symlink("src", d.join("p")).unwrap();
            }),
        ),
        (
            "git init at the root",
            Box::new(|| populate(&d, &[".git/HEAD"])),
        ),
        (
            "exclude at the root",
            Box::new(|| populate(&d, &[".git/info/exclude"])),
        ),
    ];
    for (what, change) in steps {
        change();
        check_fresh(&root, &index, &d, what);
    }
    assert_eq!(index.stats().state, IndexState::Ready);
    // The thread re-indexes the dirty files; answers stay the same.
    assert!(index.stats().dirty_files > 0);
    index.inner().paused.store(false, Ordering::SeqCst);
    index.inner().wake();
    let mut stats = index.stats();
    for _ in 0..600 {
        if stats.dirty_files == 0 {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
        stats = index.stats();
    }
    assert_eq!(stats.dirty_files, 0, "{stats:?}");
    assert_grep_equal(&root, &index, &d, &["needle", "changed", "x"]);
}

/// Hard links made after the build, inside the root: `ln a b`
/// raises an event only where `b` is created, and a write through `b` only
/// there (and on `b`'s inode once watched), yet `a` has the new contents too.
#[test]
fn a_link_made_later_in_the_tree_keeps_every_name_fresh() {
    let t = tempfile::tempdir().unwrap();
    let d = t.path().to_path_buf();
    populate(
        &d,
        &["a/one.txt", "a/two.txt", "a/three.txt", "a/four.txt", "b/"],
    );
    fs::write(d.join(".gitignore"), "*.log\n").unwrap();
    let root = root_of(&d);
    let index = ready(&root, IndexOptions::default());
    // Only searches drain the queue: the background thread re-reads nothing.
    index.inner().paused.store(true, Ordering::SeqCst);
    type Step<'a> = (&'a str, Box<dyn Fn() + 'a>);
    let steps: Vec<Step> = vec![
        (
            "ln into another directory, then a write through the new name",
            Box::new(|| {
                fs::hard_link(d.join("a/one.txt"), d.join("b/one-link.txt")).unwrap();
                fs::write(d.join("b/one-link.txt"), "changed one\n").unwrap();
            }),
        ),
        (
            "ln, a search, then a write through the new name",
            Box::new(|| {
                fs::hard_link(d.join("a/two.txt"), d.join("b/two-link.txt")).unwrap();
                assert!(answers(&index, &d));
                fs::write(d.join("b/two-link.txt"), "changed two\n").unwrap();
            }),
        ),
        (
            "ln in the same directory",
            Box::new(|| {
                fs::hard_link(d.join("a/three.txt"), d.join("a/three-link.txt")).unwrap();
                fs::write(d.join("a/three-link.txt"), "changed three\n").unwrap();
            }),
        ),
        (
            "ln to an ignored name",
            Box::new(|| {
                fs::hard_link(d.join("a/four.txt"), d.join("four.log")).unwrap();
                fs::write(d.join("four.log"), "changed four\n").unwrap();
            }),
        ),
    ];
    for (what, change) in steps {
        change();
        check_fresh(&root, &index, &d, what);
    }
    // Re-indexed, then written again through the new names: the old names
    // are watched through their inodes now.
    index.inner().paused.store(false, Ordering::SeqCst);
    index.inner().wake();
    let mut stats = index.stats();
    for _ in 0..600 {
        if stats.dirty_files == 0 {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
        stats = index.stats();
    }
    assert_eq!(stats.dirty_files, 0, "{stats:?}");
    index.inner().paused.store(true, Ordering::SeqCst);
    for (link, what) in [
        ("b/one-link.txt", "a second write through b/one-link.txt"),
        ("b/two-link.txt", "a second write through b/two-link.txt"),
        (
            "a/three-link.txt",
            "a second write through a/three-link.txt",
        ),
        ("four.log", "a second write through four.log"),
    ] {
        fs::write(d.join(link), "needle in p, changed again\n").unwrap();
        check_fresh(&root, &index, &d, what);
    }
    assert_eq!(index.stats().state, IndexState::Ready);
}

#[test]
fn changes_during_the_build_are_seen() {
    let t = tempfile::tempdir().unwrap();
    let d = t.path().to_path_buf();
    let files: Vec<String> = (0..3000)
        .map(|i| format!("d{}/e{}/f{i}.rs", i % 13, i % 7))
        .collect();
    let refs: Vec<&str> = files.iter().map(String::as_str).collect();
    populate(&d, &refs);
    let root = root_of(&d);
    let index = Index::start(root.clone(), IndexOptions::default());
    for i in 0..40 {
        fs::write(d.join(format!("d{}/late{i}.rs", i % 13)), "x").unwrap();
        if i % 10 == 0 {
            fs::remove_dir_all(d.join(format!("d{}/e{}", i % 13, i % 7))).unwrap();
        }
    }
    fs::write(d.join(".gitignore"), "d1/\n").unwrap();
    assert_eq!(index.wait_ready().state, IndexState::Ready);
    check_fresh(&root, &index, &d, "changes during the build");
}

#[test]
fn watch_limit_steps_aside_and_searches_stay_right() {
    let t = rich_tree(false);
    let root = root_of(t.path());
    let options = IndexOptions {
        max_watches: Some(3),
        ..IndexOptions::default()
    };
    let index = Index::start(root.clone(), options);
    let stats = index.wait_ready();
    assert_eq!(stats.state, IndexState::Aside);
    assert!(
        stats.reason.as_deref().unwrap().contains("watch limit"),
        "{stats:?}"
    );
    assert!(!answers(&index, t.path()));
    assert_find_equal(&root, &index, t.path());
}

#[test]
fn overflow_steps_aside_then_rebuilds() {
    let t = rich_tree(false);
    let d = t.path().to_path_buf();
    let root = root_of(&d);
    let index = ready(&root, IndexOptions::default());
    // Hold the index lock (the thread cannot drain) while more events
    // than the queue holds (16384 by default) arrive.
    {
        let _held = index.inner().lock();
        let max: usize = fs::read_to_string("/proc/sys/fs/inotify/max_queued_events")
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        for i in 0..max / 2 + 100 {
            // Two events each: IN_CREATE and IN_DELETE.
            let p = d.join(format!("src/flood{}", i % 50));
            fs::create_dir(&p).unwrap();
            fs::remove_dir(&p).unwrap();
        }
    }
    fs::write(d.join("src/after.rs"), "x").unwrap();
    check_fresh_live(&root, &index, &d);
    let stats = index.stats();
    assert_eq!(stats.state, IndexState::Aside, "{stats:?}");
    assert!(
        stats.reason.as_deref().unwrap().contains("overflow"),
        "{stats:?}"
    );
    // Rebuilt after the backoff.
    let mut stats = index.stats();
    for _ in 0..600 {
        if stats.state == IndexState::Ready {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
        stats = index.stats();
    }
    assert_eq!(stats.state, IndexState::Ready, "{stats:?}");
    check_fresh(&root, &index, &d, "a rebuild");
}

/// find with and without the index agree (whether or not it answers).
fn check_fresh_live(root: &Arc<Root>, index: &Index, top: &Path) {
    for dir in all_dirs(top) {
        let live = find(root, &dir, "*", PI_PRUNE, usize::MAX, None);
        let warm = find(root, &dir, "*", PI_PRUNE, usize::MAX, Some(index));
        assert_eq!(warm, live, "find in {dir:?}");
    }
}

#[test]
fn root_deleted_steps_aside() {
    let t = tempfile::tempdir().unwrap();
    let d = t.path().join("ws");
    populate(&d, &["a/b.rs", "c.rs"]);
    let root = root_of(&d);
    let index = ready(&root, IndexOptions::default());
    fs::remove_dir_all(&d).unwrap();
    let live = find(&root, &d, "*", &[], usize::MAX, None);
    let warm = find(&root, &d, "*", &[], usize::MAX, Some(&index));
    assert_eq!(warm, live);
    let stats = index.stats();
    assert_eq!(stats.state, IndexState::Aside, "{stats:?}");
    assert!(
        stats.reason.as_deref().unwrap().contains("root"),
        "{stats:?}"
    );
}

/// A root rule file's change re-watches the root's ancestors, and the
/// events still queued for their old watches are lost: a root deleted
/// between that change's drain and the new watches must still be noticed.
#[test]
fn root_deleted_while_its_ancestors_are_rewatched() {
    let t = tempfile::tempdir().unwrap();
    let d = t.path().join("ws");
    populate(&d, &["a/b.rs", "c.rs"]);
    fs::write(d.join(".gitignore"), "*.log\n").unwrap();
    let root = root_of(&d);
    let fd = root.open_dir(root.host()).unwrap();
    let mut ids = Ids::default();
    let mut pending = Vec::new();
    let cancel = AtomicBool::new(false);
    let mut tree = Tree::build(
        fd,
        d.clone(),
        None,
        usize::MAX,
        &mut Refresh(&mut ids),
        &cancel,
        &mut pending,
    )
    .unwrap();
    tree.inotify.drain(&mut pending).unwrap();
    tree.apply(&pending, &mut Refresh(&mut ids)).unwrap();
    fs::remove_file(d.join(".gitignore")).unwrap();
    let mut first = Vec::new();
    tree.inotify.drain(&mut first).unwrap();
    fs::remove_dir_all(&d).unwrap();
    let mut second = Vec::new();
    let outcome = tree.apply(&first, &mut Refresh(&mut ids)).and_then(|()| {
        tree.inotify.drain(&mut second).unwrap();
        tree.apply(&second, &mut Refresh(&mut ids))
    });
    let reason = outcome.expect_err("the deleted root went unnoticed");
    assert!(reason.contains("root"), "{reason}");
}

#[test]
fn close_mid_build_returns_and_drop_stops_the_thread() {
    let t = tempfile::tempdir().unwrap();
    let files: Vec<String> = (0..4000)
        .map(|i| format!("d{}/e{}/f{i}", i % 17, i % 11))
        .collect();
    let refs: Vec<&str> = files.iter().map(String::as_str).collect();
    populate(t.path(), &refs);
    let root = root_of(t.path());
    let index = Index::start(root.clone(), IndexOptions::default());
    index.close();
    assert_eq!(index.stats().state, IndexState::Closed);
    assert_eq!(index.wait_ready().state, IndexState::Closed);
    index.close();
    // A closed index never answers; searches walk.
    assert!(!answers(&index, t.path()));
    let other = Index::start(root.clone(), IndexOptions::default());
    let inner = Arc::downgrade(&other.handle.inner);
    let clone = other.clone();
    drop(other);
    assert!(inner.upgrade().is_some(), "a clone keeps it open");
    drop(clone);
    assert!(
        inner.upgrade().is_none(),
        "the thread ended with the last handle"
    );
}

/// Figures on the kernel corpus (`npm run bench` makes bench/.corpus/linux),
/// copied once into target/ because the corpus's files are hard links (the
/// monorepo corpus links to them), which the index always searches. Run:
/// `cargo test --release -p pi-native-ops-core index::tests::kernel_figures -- --ignored --nocapture`
/// (`PI_INDEX_CORPUS=<absolute dir>` measures that directory instead).
#[test]
#[ignore]
fn kernel_figures() {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let corpus = manifest.join("../../bench/.corpus/linux");
    let copy = manifest.join("../../target/index-figures/linux");
    let dirs = match std::env::var_os("PI_INDEX_CORPUS") {
        Some(dir) => vec![PathBuf::from(dir)],
        None => vec![corpus.clone(), copy.clone()],
    };
    if dirs.contains(&copy) && !copy.exists() {
        fs::create_dir_all(copy.parent().unwrap()).unwrap();
        let ok = std::process::Command::new("cp")
            .arg("-r")
            .arg(&corpus)
            .arg(&copy)
            .status()
            .unwrap();
        assert!(ok.success());
    }
    for dir in &dirs {
        let root = root_of(dir);
        let t0 = Instant::now();
        let index = Index::start(root.clone(), IndexOptions::default());
        let stats = index.wait_ready();
        println!(
            "{}: ready in {:.0} ms: {} files, {} dirs, {:.1} MB indexed, memory {:.1} MB ({:.1}%), {} watches",
            dir.display(),
            t0.elapsed().as_secs_f64() * 1000.0,
            stats.files,
            stats.directories,
            stats.bytes_indexed as f64 / 1e6,
            stats.memory_bytes as f64 / 1e6,
            100.0 * stats.memory_bytes as f64 / stats.bytes_indexed.max(1) as f64,
            stats.watches
        );
        let t1 = Instant::now();
        wait_for("large files filtered", || {
            index.stats().unfiltered_files == 0
        });
        println!(
            "  exact filters: {} made in {:.0} ms more; memory now {:.1} MB",
            exact_filters(&index),
            t1.elapsed().as_secs_f64() * 1000.0,
            index.stats().memory_bytes as f64 / 1e6
        );
        let median = |f: &dyn Fn() -> String| {
            let mut times: Vec<f64> = (0..7)
                .map(|_| {
                    let t = Instant::now();
                    f();
                    t.elapsed().as_secs_f64() * 1000.0
                })
                .collect();
            times.sort_by(f64::total_cmp);
            times[3]
        };
        for pattern in ["*.rs", "drivers/**/Kconfig", "no_such_file_xyz"] {
            let warm = || find(&root, dir, pattern, PI_PRUNE, 1000, Some(&index));
            let live = || find(&root, dir, pattern, PI_PRUNE, 1000, None);
            assert_eq!(warm(), live(), "find {pattern}");
            println!(
                "  find {pattern}: warm {:.2} ms, live {:.2} ms",
                median(&warm),
                median(&live)
            );
        }
        for pattern in [
            r"\w+",
            "static",
            "irq_set_affinity_hint",
            r"EXPORT_SYMBOL\(usb_",
            "truncateHead",
            "zzqq_no_match",
        ] {
            let q = query(pattern, false, false, None);
            let warm = || grep(&root, dir, &q, Some(&index));
            let live = || grep(&root, dir, &q, None);
            assert_eq!(warm(), live(), "grep {pattern}");
            let target = grep::target(Some(&root), dir, String::new()).unwrap();
            let searched = Cancel::new();
            let _ = grep::run(&target, &q, &*root, &searched, Some(&index));
            println!(
                "  grep {pattern}: warm {:.2} ms ({} files read), live {:.2} ms",
                median(&warm),
                searched.files_searched(),
                median(&live)
            );
        }
    }
}

/// The first build alone, three times over (the first also warms the page
/// cache): `PI_INDEX_CORPUS=<absolute dir> cargo test --release -p
/// pi-native-ops-core index::tests::build_figures -- --ignored --nocapture`
#[test]
#[ignore]
fn build_figures() {
    let dir = PathBuf::from(std::env::var_os("PI_INDEX_CORPUS").expect("PI_INDEX_CORPUS"));
    let root = root_of(&dir);
    for _ in 0..3 {
        let t0 = Instant::now();
        let options = IndexOptions {
            exact_min_bytes: u64::MAX,
            ..IndexOptions::default()
        };
        let stats = Index::start(root.clone(), options).wait_ready();
        println!(
            "ready in {:.0} ms ({} files, {:.1} MB)",
            t0.elapsed().as_secs_f64() * 1000.0,
            stats.files,
            stats.bytes_indexed as f64 / 1e6
        );
    }
}

/// Warm finds alone, many times over (for a profiler):
/// `PI_INDEX_CORPUS=<absolute dir> PI_FIND=<glob> cargo test --release -p
/// pi-native-ops-core index::tests::find_figures -- --ignored --nocapture`
#[test]
#[ignore]
fn find_figures() {
    let dir = PathBuf::from(std::env::var_os("PI_INDEX_CORPUS").expect("PI_INDEX_CORPUS"));
    let pattern = std::env::var("PI_FIND").unwrap_or("drivers/**/Kconfig".into());
    let root = root_of(&dir);
    let index = Index::start(root.clone(), IndexOptions::default());
    index.wait_ready();
    let runs = 500;
    // find::glob itself: the helper's Debug formatting of the paths would
    // cost as much as the search.
    let ignore: Vec<String> = PI_PRUNE.iter().map(|s| s.to_string()).collect();
    let search = Search {
        pattern: &pattern,
        ignore: &ignore,
        limit: 1000,
    };
    let t0 = Instant::now();
    for _ in 0..runs {
        find::glob(&root, &dir, &search, Some(&index)).unwrap();
    }
    println!(
        "find {pattern}: {:.3} ms a call",
        t0.elapsed().as_secs_f64() * 1000.0 / runs as f64
    );
}

/// Random changes (files written, moved, deleted; directories made, moved,
/// removed; ignore files written and removed; symlinks), each followed by
/// searches that must equal the live walk's. The thread runs in the second
/// half (events then race between it and the searches).
#[test]
fn random_changes_never_show_stale_answers() {
    let t = tempfile::tempdir().unwrap();
    let d = t.path().to_path_buf();
    populate(&d, &["a/x.rs", "a/b/y.rs", "c/z.txt", "c/d/e/w.rs"]);
    let root = root_of(&d);
    let index = ready(&root, IndexOptions::default());
    index.inner().paused.store(true, Ordering::SeqCst);
    // A small linear congruential generator: the same run every time.
    let mut seed: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut next = move |n: usize| {
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((seed >> 33) as usize) % n
    };
    let names = [
        "a", "b", "c", "d", "e", "x.rs", "y.rs", "z.txt", "w.rs", "n.log",
    ];
    let mut answered = 0;
    for step in 0..240 {
        if step == 120 {
            index.inner().paused.store(false, Ordering::SeqCst);
            index.inner().wake();
        }
        let dirs = all_dirs(&d);
        let dir = &dirs[next(dirs.len())];
        let name = names[next(names.len())];
        let p = dir.join(name);
        let other = dirs[next(dirs.len())].join(names[next(names.len())]);
        let what = next(9);
        let _ = match what {
            0 | 1 => fs::write(&p, format!("needle {step}\n")),
            2 => fs::create_dir(&p),
            3 => fs::remove_file(&p),
            4 => fs::remove_dir_all(&p),
            5 if !other.starts_with(&p) => fs::rename(&p, &other),
            6 => fs::write(dir.join(".gitignore"), format!("{name}\n")),
            7 => fs::remove_file(dir.join(".gitignore")),
            _ => std::os::unix::fs::symlink(name, &p),
        };
        let sub = &all_dirs(&d)[next(all_dirs(&d).len())];
        for at in [&d, sub] {
            answered += usize::from(answers(&index, at));
            let live = find(&root, at, "*", PI_PRUNE, usize::MAX, None);
            let warm = find(&root, at, "*", PI_PRUNE, usize::MAX, Some(&index));
            assert_eq!(
                warm, live,
                "step {step} (change {what} at {p:?}): find in {at:?}"
            );
            let q = query("needle", false, false, None);
            let live = grep(&root, at, &q, None);
            let warm = grep(&root, at, &q, Some(&index));
            assert_eq!(
                warm, live,
                "step {step} (change {what} at {p:?}): grep in {at:?}"
            );
        }
    }
    assert_eq!(index.stats().state, IndexState::Ready);
    // Not vacuous: most searches were answered from the tree.
    assert!(answered > 240, "answered {answered} of 480");
}

/// A tmpfs mounted on an indexed directory raises no inotify event: the
/// index notices the mount table and steps aside. Needs the right to mount
/// (root); skipped otherwise. The mount is removed when the test ends.
#[test]
fn a_mount_inside_the_root_steps_aside() {
    struct Mounted(std::ffi::CString);
    impl Drop for Mounted {
        fn drop(&mut self) {
            // SAFETY: a valid path; detaching never blocks.
            unsafe { libc::umount2(self.0.as_ptr(), libc::MNT_DETACH) };
        }
    }
    let t = tempfile::tempdir().unwrap();
    let d = fs::canonicalize(t.path()).unwrap();
    populate(&d, &["sub/a.rs", "b.rs"]);
    let root = root_of(&d);
    let index = ready(&root, IndexOptions::default());
    let target = std::ffi::CString::new(d.join("sub").as_os_str().as_bytes()).unwrap();
    let tmpfs = std::ffi::CString::new("tmpfs").unwrap();
    // SAFETY: valid NUL-terminated strings; no data.
    let rc = unsafe {
        libc::mount(
            tmpfs.as_ptr(),
            target.as_ptr(),
            tmpfs.as_ptr(),
            0,
            std::ptr::null(),
        )
    };
    if rc != 0 {
        eprintln!(
            "skipped: cannot mount ({})",
            std::io::Error::last_os_error()
        );
        return;
    }
    let _mounted = Mounted(target);
    let live = find(&root, &d, "*", &[], usize::MAX, None);
    let warm = find(&root, &d, "*", &[], usize::MAX, Some(&index));
    assert_eq!(warm, live);
    assert!(!live.contains("a.rs"), "{live}");
    let stats = index.stats();
    assert_eq!(stats.state, IndexState::Aside, "{stats:?}");
    assert!(stats.reason.unwrap().contains("mounted"));
}

/// A file read for the index: its size as fstat gave it, more if it grew
/// since, and never much past the limit.
#[test]
fn files_are_read_whole_up_to_the_limit() {
    let t = tempfile::tempdir().unwrap();
    let p = t.path().join("f");
    fs::write(&p, b"0123456789").unwrap();
    let mut buf = b"stale".to_vec();
    let mut read = |size: usize, max: u64| {
        let file = fs::File::open(&p).unwrap();
        read_up_to(&file, size, max, &mut buf).unwrap();
        buf.clone()
    };
    assert_eq!(read(10, 100), b"0123456789");
    // Grown since its size was taken: read on to the end.
    assert_eq!(read(4, 100), b"0123456789");
    // Grown past the limit: one byte more than the limit, so it shows.
    assert_eq!(read(4, 6), b"0123456");
    // Shrunk since.
    assert_eq!(read(50, 100), b"0123456789");
}

/// Exact filters made so far (after the build, in rounds).
fn exact_filters(index: &Index) -> usize {
    let shared = index.inner().lock();
    shared.live.as_ref().map_or(0, |l| l.content.exact.len())
}

fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !done() {
        assert!(std::time::Instant::now() < deadline, "never: {what}");
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

/// Files grep reads, and its output.
fn grep_counted(root: &Root, dir: &Path, q: &Query, index: Option<&Index>) -> (u64, String) {
    let target = grep::target(Some(root), dir, String::new()).unwrap();
    let searched = Cancel::new();
    let out = format!("{:?}", grep::run(&target, q, root, &searched, index));
    (searched.files_searched(), out)
}

/// A large file whose folded grams hold a literal but whose bytes do not
/// is passed by (not read); ignoring case it is read; written with the
/// literal, the next search finds it, and its new filter holds it.
#[test]
fn exact_filters_pass_by_large_files_without_the_literal() {
    let t = rich_tree(false);
    let d = t.path();
    let regs: String = (0..2000)
        .map(|i| format!("#define IRQ_SET_AFFINITY_{i} 0x{i:x}\n"))
        .collect();
    fs::write(d.join("regs.h"), &regs).unwrap();
    let root = root_of(d);
    let options = IndexOptions {
        exact_min_bytes: 4096,
        ..IndexOptions::default()
    };
    // Paused before the build ends (unless the thread won that race): the
    // stats say a filter is owed from the moment the index is ready, until
    // it is made.
    let index = Index::start(root.clone(), options);
    index.inner().paused.store(true, Ordering::SeqCst);
    index.wait_ready();
    let (owed, made) = {
        let shared = index.inner().lock();
        let live = shared.live.as_ref().unwrap();
        (shared.unfiltered_files, live.content.exact.len())
    };
    // Read under one lock: the filter is either owed or made, never both
    // or neither (paused, it is owed; a build that counted nothing fails).
    assert_eq!(owed + made as u64, 1, "owed {owed}, made {made}");
    index.inner().paused.store(false, Ordering::SeqCst);
    index.inner().wake();
    wait_for("regs.h filtered", || index.stats().unfiltered_files == 0);
    assert_eq!(exact_filters(&index), 1);
    let check = |pattern: &str, ignore_case: bool, reads: u64| {
        let q = query(pattern, ignore_case, false, None);
        let (n, warm) = grep_counted(&root, d, &q, Some(&index));
        assert_eq!(warm, grep(&root, d, &q, None), "{pattern} -i={ignore_case}");
        assert_eq!(n, reads, "files read for {pattern} -i={ignore_case}");
        warm
    };
    check("irq_set_affinity", false, 0);
    check(r"irq_set_affinity_\d", false, 0);
    check("irq_set_affinity", true, 1);
    check("IRQ_SET_AFFINITY_1999", false, 1);
    fs::write(d.join("regs.h"), format!("{regs}irq_set_affinity here\n")).unwrap();
    assert!(check("irq_set_affinity", false, 1).contains("here"));
    wait_for("regs.h re-indexed", || index.stats().dirty_files == 0);
    assert_eq!(exact_filters(&index), 1, "re-indexed with a new filter");
    assert!(check("irq_set_affinity", false, 1).contains("here"));
}

/// With every file filtered, grep still agrees with the live walk.
#[test]
fn exact_filters_keep_grep_equal_to_the_walk() {
    let t = rich_tree(true);
    let root = root_of(t.path());
    let options = IndexOptions {
        exact_min_bytes: 0,
        ..IndexOptions::default()
    };
    let index = ready(&root, options);
    wait_for("every indexed file filtered", || {
        let shared = index.inner().lock();
        let live = shared.live.as_ref().unwrap();
        large_files(&live.tree, &live.content, 0).is_empty()
    });
    assert!(
        exact_filters(&index) >= 15,
        "{} filters",
        exact_filters(&index)
    );
    assert_grep_equal(&root, &index, t.path(), GREP_PATTERNS);
}

/// A size the file only claims reserves at most `READ_RESERVE`:
/// the read grows as bytes arrive and ends at the file's end.
#[test]
fn a_claimed_size_is_not_reserved() {
    let t = tempfile::tempdir().unwrap();
    let p = t.path().join("f");
    fs::write(&p, "ten bytes!").unwrap();
    let file = fs::File::open(&p).unwrap();
    let mut buf = Vec::new();
    read_up_to(&file, 1 << 40, 1 << 41, &mut buf).unwrap();
    assert_eq!(buf, b"ten bytes!");
    assert!(buf.capacity() <= READ_RESERVE + 1);
}

/// Every face hands the index's options over raw; `from_raw` decides them.
#[test]
fn options_from_raw_take_the_defaults_for_absent_ones() {
    let d = IndexOptions::default();
    let o = IndexOptions::from_raw(None, None);
    assert_eq!((o.max_watches, o.max_file_bytes), (None, d.max_file_bytes));
    let o = IndexOptions::from_raw(Some(8.0), Some(0.0));
    assert_eq!((o.max_watches, o.max_file_bytes), (Some(8), 0));
    let o = IndexOptions::from_raw(Some(1e300), Some(f64::INFINITY));
    assert_eq!(
        (o.max_watches, o.max_file_bytes),
        (Some(usize::MAX), u64::MAX)
    );
    assert_eq!(o.exact_min_bytes, d.exact_min_bytes);
    assert_eq!(UNSUPPORTED, None);
}
