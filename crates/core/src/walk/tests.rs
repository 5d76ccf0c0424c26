use super::*;
use std::fs;

use crate::cancel::Cancel;
use std::sync::atomic::AtomicUsize;

use ignore::overrides::Override;

/// Collects every entry's relative path (directories with a `/`).
struct Paths<const SEARCH: bool>;

impl<const SEARCH: bool> Visitor for Paths<SEARCH> {
    type Out = String;
    type Local = ();
    const SEARCHES_FILES: bool = SEARCH;
    fn local(&self) {}
    fn skip(&self, entry: &Entry<'_>) -> bool {
        entry.name() == ".git"
    }
    fn visit(&self, _: &mut (), entry: &Entry<'_>) -> Option<String> {
        let slash = if entry.kind == Kind::Dir { "/" } else { "" };
        Some(format!("{}{slash}", entry.rel().display()))
    }
}

fn walk_all(dir: &Path, limit: usize) -> Vec<String> {
    let searching = walk_with(Paths::<true>, dir, limit);
    assert_eq!(walk_with(Paths::<false>, dir, limit), searching);
    searching
}

fn walk_with<V: Visitor<Out = String>>(v: V, dir: &Path, limit: usize) -> Vec<String> {
    walk_rules(v, dir, None, &Cancel::new(), limit)
}

fn walk_rules<V: Visitor<Out = String>>(
    v: V,
    dir: &Path,
    overrides: Option<Override>,
    cancel: &Cancel,
    limit: usize,
) -> Vec<String> {
    let fd = open_start(dir);
    let rules = Rules::new(&fs::canonicalize(dir).unwrap(), overrides);
    let mut out = Vec::new();
    walk(fd, &rules, &v, cancel, |p| {
        out.push(p);
        out.len() < limit
    });
    out
}

/// The start directory, as find and grep open it.
#[cfg(unix)]
fn open_start(dir: &Path) -> DirHandle {
    use nix::fcntl::OFlag;
    let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY;
    nix::fcntl::open(dir, flags, nix::sys::stat::Mode::empty()).unwrap()
}
#[cfg(windows)]
fn open_start(dir: &Path) -> DirHandle {
    crate::root::Root::open(dir, None)
        .unwrap()
        .open_dir(dir)
        .unwrap()
}

fn tree(files: &[&str]) -> tempfile::TempDir {
    let t = tempfile::tempdir().unwrap();
    for f in files {
        if let Some(d) = f.strip_suffix('/') {
            fs::create_dir_all(t.path().join(d)).unwrap();
        } else {
            let p = t.path().join(f);
            fs::create_dir_all(p.parent().unwrap()).unwrap();
            fs::write(p, "").unwrap();
        }
    }
    t
}

#[test]
fn honours_gitignore_outside_git_and_includes_hidden() {
    let t = tree(&[
        "ignored.txt",
        ".hidden",
        "b.txt",
        "a.txt",
        "d/ignored.txt",
        "d/keep",
    ]);
    fs::write(t.path().join(".gitignore"), "ignored.txt\n").unwrap();
    assert_eq!(
        walk_all(t.path(), usize::MAX),
        [".gitignore", ".hidden", "a.txt", "b.txt", "d/", "d/keep"]
    );
}

#[test]
fn path_order_and_limits() {
    let t = tree(&["a/x", "a-b/x", "a.b/x", "B/x", "ab/x", "a/y/z"]);
    let all = walk_all(t.path(), usize::MAX);
    assert_eq!(
        all,
        [
            "B/", "B/x", "a/", "a/x", "a/y/", "a/y/z", "a-b/", "a-b/x", "a.b/", "a.b/x", "ab/",
            "ab/x"
        ]
    );
    for limit in 1..all.len() {
        assert_eq!(walk_all(t.path(), limit), all[..limit]);
    }
}

#[test]
fn many_directories_keep_path_order() {
    let files: Vec<String> = (0..900)
        .map(|i| format!("d{}/e{}/g{}/f{i}", i % 7, i % 5, i % 3))
        .collect();
    let refs: Vec<&str> = files.iter().map(String::as_str).collect();
    let t = tree(&refs);
    let all = walk_all(t.path(), usize::MAX);
    let mut sorted = all.clone();
    sorted.sort_by(|a, b| Path::new(a).cmp(Path::new(b)));
    assert_eq!(all, sorted);
    assert_eq!(all.len(), 900 + 7 + 35 + 105);
    assert_eq!(walk_all(t.path(), 500), all[..500]);
}

#[test]
fn ignore_files_nest_negate_and_stop_at_repositories() {
    let t = tree(&[
        ".git/",
        "a.out",
        "keep.out",
        "sub/b.out",
        "sub/c.log",
        "sub/deep/d.log",
        "nested/.git/",
        "nested/n.out",
        "plain/p.out",
        "only/.ignore",
    ]);
    fs::write(t.path().join(".gitignore"), "*.out\n!keep.out\n/only\n").unwrap();
    fs::write(t.path().join("sub/.gitignore"), "*.log\n!deep/\n").unwrap();
    fs::write(t.path().join("sub/.ignore"), "!b.out\n").unwrap();
    fs::write(t.path().join(".git/info"), "").ok();
    assert_eq!(
        walk_all(t.path(), usize::MAX),
        [
            ".gitignore",
            "keep.out",
            "nested/",
            "nested/n.out",
            "plain/",
            "sub/",
            "sub/.gitignore",
            "sub/.ignore",
            "sub/b.out",
            "sub/deep/",
        ]
    );
}

#[test]
fn git_exclude_and_ancestors_rules() {
    let t = tree(&[".git/info/", "w/x.tmp", "w/y.skip", "w/z"]);
    fs::write(t.path().join(".git/info/exclude"), "*.tmp\n").unwrap();
    fs::write(t.path().join(".gitignore"), "*.skip\n").unwrap();
    // Walking `w`: the repository's rules above it still apply.
    assert_eq!(walk_all(&t.path().join("w"), usize::MAX), ["z"]);
}

#[cfg(unix)]
#[test]
fn symlinks_are_entries_never_followed() {
    let t = tree(&["d/f", "outside/secret"]);
    std::os::unix::fs::symlink(t.path().join("outside"), t.path().join("d/link")).unwrap();
    std::os::unix::fs::symlink("..", t.path().join("d/loop")).unwrap();
    assert_eq!(
        walk_all(&t.path().join("d"), usize::MAX),
        ["f", "link", "loop"]
    );
}

#[test]
fn a_large_directory_interleaving_files_and_subdirectories_stays_in_order() {
    let files: Vec<String> = (0..300)
        .map(|i| {
            if i % 10 == 0 {
                format!("f{i:03}/inner")
            } else {
                format!("f{i:03}")
            }
        })
        .collect();
    let refs: Vec<&str> = files.iter().map(String::as_str).collect();
    let t = tree(&refs);
    let all = walk_all(t.path(), usize::MAX);
    assert_eq!(all.len(), 300 + 30);
    let mut sorted = all.clone();
    sorted.sort_by(|a, b| Path::new(a).cmp(Path::new(b)));
    assert_eq!(all, sorted);
    for limit in [1, 9, 10, 11, 100, 329] {
        assert_eq!(walk_all(t.path(), limit), all[..limit]);
    }
}

#[test]
fn overrides_come_first_and_whitelist_ignored_files() {
    let t = tree(&["a.c", "b.h", "gen/x.c", "gen/y.h"]);
    fs::write(t.path().join(".gitignore"), "gen/\n*.c\n").unwrap();
    let mut b = ignore::overrides::OverrideBuilder::new(".");
    b.add("*.c").unwrap();
    let ov = b.build().unwrap();
    // `gen/` stays ignored (directories unmatched by a whitelist fall
    // through to the rules); `a.c` is searched although `.gitignore`
    // ignores it, as with `rg --glob`.
    let out = walk_rules(
        Paths::<true>,
        t.path(),
        Some(ov),
        &Cancel::new(),
        usize::MAX,
    );
    assert_eq!(out, ["a.c"]);
}

#[test]
fn cancel_ends_the_walk() {
    let files: Vec<String> = (0..200).map(|i| format!("d{}/f{i}", i % 20)).collect();
    let refs: Vec<&str> = files.iter().map(String::as_str).collect();
    let t = tree(&refs);
    let cancel = Cancel::new();
    cancel.cancel();
    assert!(walk_rules(Paths::<true>, t.path(), None, &cancel, usize::MAX).is_empty());
}

/// Concurrent walks past the `AHEAD` window, each stopped at a limit or
/// cancelled from another thread midway, all end (bounded by a timeout
/// rather than hanging the suite), and every limit cut is a prefix.
#[test]
fn stopped_and_cancelled_walks_always_end() {
    let files: Vec<String> = (0..3000).map(|i| format!("d{}/e{i}/f", i % 3)).collect();
    let refs: Vec<&str> = files.iter().map(String::as_str).collect();
    let t = tree(&refs);
    let all = walk_with(Paths::<true>, t.path(), usize::MAX);
    assert_eq!(all.len(), 3 + 3000 * 2);
    let (done, finished) = std::sync::mpsc::channel();
    std::thread::scope(|scope| {
        for lane in 0..4usize {
            let (done, all, dir) = (done.clone(), &all, t.path());
            scope.spawn(move || {
                for round in 0..12usize {
                    let limit = 1 + (lane * 12 + round) * 97 % all.len();
                    assert_eq!(walk_with(Paths::<true>, dir, limit), all[..limit]);
                    let cancel = Cancel::new();
                    let out = std::thread::scope(|inner| {
                        inner.spawn(|| {
                            std::thread::sleep(std::time::Duration::from_micros(
                                round as u64 * 300,
                            ));
                            cancel.cancel();
                        });
                        walk_rules(Paths::<false>, dir, None, &cancel, usize::MAX)
                    });
                    assert_eq!(out, all[..out.len()]);
                }
                done.send(()).unwrap();
            });
        }
        for _ in 0..4 {
            let ended = finished.recv_timeout(std::time::Duration::from_secs(60));
            assert!(ended.is_ok(), "a walk did not end");
        }
    });
}

#[cfg(unix)]
#[test]
fn ancestors_are_those_of_the_real_directory() {
    let t = tree(&["a/sub/x.tmp", "a/sub/y", "b/"]);
    fs::write(t.path().join("a/.gitignore"), "*.tmp\n").unwrap();
    let link = t.path().join("b/link");
    std::os::unix::fs::symlink(t.path().join("a/sub"), &link).unwrap();
    let fd = open_start(&link);
    let rules = Rules::new(&link, None);
    let mut out = Vec::new();
    walk(fd, &rules, &Paths::<false>, &Cancel::new(), |p| {
        out.push(p);
        true
    });
    assert_eq!(out, ["y"]);
}

#[test]
#[cfg(unix)]
fn hostile_ancestor_rule_files_read_as_none() {
    // `.gitignore → /dev/zero` and a FIFO `.ignore` above the start: no
    // rules, at once (before: the first grew without end, the second hung).
    let t = tree(&["ws/a.txt", "ws/b.log"]);
    std::os::unix::fs::symlink("/dev/zero", t.path().join(".gitignore")).unwrap();
    nix::unistd::mkfifo(&t.path().join(".ignore"), nix::sys::stat::Mode::S_IRWXU).unwrap();
    assert_eq!(walk_all(&t.path().join("ws"), 10), ["a.txt", "b.log"]);
}

#[test]
#[cfg(unix)]
fn a_gitfile_names_its_git_directory_relative_to_itself() {
    // ws/sub/.git says `gitdir: ../../wt` (from ws/sub, not from the
    // process's directory); wt/commondir leads to `common`, whose exclude
    // file leaves out `secret.txt`.
    let t = tree(&[
        "ws/sub/secret.txt",
        "ws/sub/kept.txt",
        "wt/commondir",
        "common/info/exclude",
    ]);
    fs::write(t.path().join("ws/sub/.git"), "gitdir: ../../wt\n").unwrap();
    fs::write(t.path().join("wt/commondir"), "../common\n").unwrap();
    fs::write(t.path().join("common/info/exclude"), "secret.txt\n").unwrap();
    assert_eq!(walk_all(&t.path().join("ws"), 10), ["sub/", "sub/kept.txt"]);
}

#[test]
fn an_ignore_file_past_the_glob_bound_gives_no_rules() {
    use super::rules::MAX_RULE_GLOBS;
    let lines = |n: usize| -> String {
        let mut text = String::from("# comments and blank lines are not globs\n\n");
        for i in 0..n {
            text.push_str(&format!("never{i}/*.x\n"));
        }
        text + "*.log\n"
    };
    let t = tree(&["a.txt", "b.log"]);
    fs::write(t.path().join(".ignore"), lines(MAX_RULE_GLOBS - 1)).unwrap();
    assert_eq!(walk_all(t.path(), 10), [".ignore", "a.txt"]);
    fs::write(t.path().join(".ignore"), lines(MAX_RULE_GLOBS)).unwrap();
    assert_eq!(walk_all(t.path(), 10), [".ignore", "a.txt", "b.log"]);
}

#[test]
fn a_walks_ignore_files_past_the_walk_bound_give_no_rules() {
    use super::rules::{MAX_RULE_GLOBS, MAX_WALK_RULE_GLOBS};
    // Five nested ignore files of `per` globs each, the deepest last: with
    // 4,500 each, four fit the walk's bound and the fifth gives no rules.
    let nested = |per: usize| {
        let t = tree(&["a/b/c/d/e/"]);
        let mut dir = t.path().to_path_buf();
        for name in ["a", "b", "c", "d", "e"] {
            dir = dir.join(name);
            let mut text: String = (0..per - 1)
                .map(|i| format!("{name}never{i}/*.x\n"))
                .collect();
            text.push_str(&format!("{name}.log\n"));
            fs::write(dir.join(".ignore"), text).unwrap();
            fs::write(dir.join(format!("{name}.log")), "").unwrap();
        }
        t
    };
    let logs = |t: &tempfile::TempDir| -> Vec<String> {
        walk_all(t.path(), 100)
            .into_iter()
            .filter(|p| p.ends_with(".log"))
            .collect()
    };
    const { assert!(4 * 4_500 <= MAX_WALK_RULE_GLOBS && 5 * 4_500 > MAX_WALK_RULE_GLOBS) };
    const { assert!(4_500 <= MAX_RULE_GLOBS) };
    assert_eq!(logs(&nested(4_500)), ["a/b/c/d/e/e.log"]);
    assert_eq!(logs(&nested(3_000)), Vec::<String>::new());
}

/// Files visited, each output said to hold `HELD` bytes.
struct Heavy<'a>(&'a AtomicUsize);

const HELD: usize = 1 << 20;

impl Visitor for Heavy<'_> {
    type Out = ();
    type Local = ();
    const SEARCHES_FILES: bool = true;
    fn local(&self) {}
    fn visit(&self, _: &mut (), _: &Entry<'_>) -> Option<()> {
        self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Some(())
    }
    fn held(_: &()) -> usize {
        HELD
    }
}

#[test]
fn outputs_held_ahead_of_a_slow_sink_are_bounded_in_bytes() {
    use std::sync::atomic::Ordering::SeqCst;
    let t = tempfile::tempdir().unwrap();
    let total = 2000;
    for i in 0..total {
        fs::write(t.path().join(format!("f{i:05}")), "").unwrap();
    }
    let visited = AtomicUsize::new(0);
    let rules = Rules::new(&fs::canonicalize(t.path()).unwrap(), None);
    let mut first = true;
    let mut ahead = 0;
    let mut handed = 0;
    walk(
        open_start(t.path()),
        &rules,
        &Heavy(&visited),
        &Cancel::new(),
        |()| {
            if first {
                first = false;
                // A sink stuck on its first output: the other threads run ahead
                // until the bound holds them (or, unbounded, visit everything).
                let give_up = std::time::Instant::now() + std::time::Duration::from_secs(2);
                while visited.load(SeqCst) < total && std::time::Instant::now() < give_up {
                    std::thread::sleep(std::time::Duration::from_millis(10));
                }
                ahead = visited.load(SeqCst);
            }
            handed += 1;
            true
        },
    );
    assert_eq!(handed, total);
    // The bound's worth of finished tasks, one more, and one per thread.
    let tasks = scheduler::AHEAD_BYTES / (HELD * scheduler::FILES_PER_TASK) + 1;
    let bound = (tasks + scheduler::threads()) * scheduler::FILES_PER_TASK;
    assert!(ahead <= bound, "{ahead} files visited ahead, bound {bound}");
}
