use super::*;
use std::fs;

fn query(pattern: &str) -> Query {
    Query::new(RawQuery {
        pattern: pattern.to_string(),
        ..RawQuery::default()
    })
}

/// `super::run` for tests that do not look at the files-searched count.
fn run(
    target: &Target,
    query: &Query,
    opener: &dyn Opener,
    cancel: &Cancel,
) -> crate::Result<Outcome> {
    super::run(target, query, opener, cancel, None)
}

fn lines(out: &Outcome) -> Vec<String> {
    out.lines
        .iter()
        .map(|l| {
            let sep = if l.is_match { ':' } else { '-' };
            format!("{}{sep}{}{sep} {}", l.path, l.line_number, l.text)
        })
        .collect()
}

fn tree() -> tempfile::TempDir {
    let t = tempfile::tempdir().unwrap();
    let p = t.path();
    fs::create_dir_all(p.join("src/deep")).unwrap();
    fs::create_dir_all(p.join(".git")).unwrap();
    fs::write(p.join(".git/config"), "needle\n").unwrap();
    fs::write(p.join(".gitignore"), "ignored.txt\n").unwrap();
    fs::write(p.join("ignored.txt"), "needle\n").unwrap();
    fs::write(p.join("b.txt"), "needle b\n").unwrap();
    fs::write(p.join("a.txt"), "x\nneedle a\ny\n").unwrap();
    fs::write(p.join("src/deep/c.rs"), "needle c\n").unwrap();
    fs::write(p.join("bin.dat"), b"needle\0binary\n").unwrap();
    t
}

#[test]
fn walks_in_path_order_with_the_shared_rules() {
    let t = tree();
    let cancel = Cancel::new();
    let target = Target::Dir(t.path().to_path_buf());
    let out = run(&target, &query("needle"), &PlainFs, &cancel).unwrap();
    assert_eq!(
        lines(&out),
        [
            "a.txt:2: needle a",
            "b.txt:1: needle b",
            "src/deep/c.rs:1: needle c"
        ]
    );
}

#[test]
fn glob_filters_and_negates() {
    let t = tree();
    let cancel = Cancel::new();
    let target = Target::Dir(t.path().to_path_buf());
    let mut q = query("needle");
    q.glob = Some("*.rs".into());
    assert_eq!(
        lines(&run(&target, &q, &PlainFs, &cancel).unwrap()),
        ["src/deep/c.rs:1: needle c"]
    );
    q.glob = Some("!*.rs".into());
    assert_eq!(run(&target, &q, &PlainFs, &cancel).unwrap().lines.len(), 2);
    q.glob = Some("[".into());
    assert!(matches!(
        run(&target, &q, &PlainFs, &cancel),
        Err(e) if e.kind() == crate::ErrorKind::InvalidGlob
    ));
}

#[test]
fn named_binary_file_is_searched_and_context_merges() {
    let t = tree();
    let cancel = Cancel::new();
    let target = Target::File(t.path().join("bin.dat"), "bin.dat".into());
    let out = run(&target, &query("needle"), &PlainFs, &cancel).unwrap();
    assert_eq!(lines(&out), ["bin.dat:1: needle\0binary"]);
    let target = Target::File(t.path().join("a.txt"), "a.txt".into());
    let mut q = query("needle|y");
    q.context = 1;
    assert_eq!(
        lines(&run(&target, &q, &PlainFs, &cancel).unwrap()),
        ["a.txt-1- x", "a.txt:2: needle a", "a.txt:3: y"]
    );
}

#[test]
fn limit_stops_early_and_abort_is_reported() {
    let t = tempfile::tempdir().unwrap();
    for i in 0..50 {
        fs::write(t.path().join(format!("f{i:02}.txt")), "hit\nhit\n").unwrap();
    }
    let cancel = Cancel::new();
    let target = Target::Dir(t.path().to_path_buf());
    let mut q = query("hit");
    q.limit = 3;
    let out = run(&target, &q, &PlainFs, &cancel).unwrap();
    assert_eq!(
        lines(&out),
        ["f00.txt:1: hit", "f00.txt:2: hit", "f01.txt:1: hit"]
    );
    assert!(out.match_limit_reached);
    cancel.cancel();
    assert_eq!(
        run(&target, &q, &PlainFs, &cancel).unwrap_err(),
        crate::Error::aborted()
    );
}

#[test]
fn counts_the_files_it_searched() {
    let t = tempfile::tempdir().unwrap();
    for i in 0..50 {
        fs::write(t.path().join(format!("f{i:02}.txt")), "no match here\n").unwrap();
    }
    fs::write(t.path().join(".gitignore"), "f4*\n").unwrap();
    let target = Target::Dir(t.path().to_path_buf());
    let cancel = Cancel::new();
    super::run(&target, &query("needle"), &PlainFs, &cancel, None).unwrap();
    // The 40 files not ignored, and .gitignore (hidden files are searched, as pi's rg --hidden does).
    assert_eq!(cancel.files_searched(), 41);
    let named = Target::File(t.path().join("f00.txt"), "f00.txt".into());
    let cancel = Cancel::new();
    super::run(&named, &query("needle"), &PlainFs, &cancel, None).unwrap();
    assert_eq!(cancel.files_searched(), 1);
    let cancel = Cancel::new();
    cancel.cancel();
    let err = super::run(&target, &query("needle"), &PlainFs, &cancel, None).unwrap_err();
    assert_eq!(err, crate::Error::aborted());
    assert_eq!(cancel.files_searched(), 0);
}

#[test]
fn huge_lines_fall_back_to_streaming() {
    let t = tempfile::tempdir().unwrap();
    let mut data = vec![b'z'; HEAP_LIMIT + 10];
    data.extend_from_slice(b" needle\nshort needle\n");
    fs::write(t.path().join("big.txt"), &data).unwrap();
    let cancel = Cancel::new();
    let target = Target::Dir(t.path().to_path_buf());
    let out = run(&target, &query("needle"), &PlainFs, &cancel).unwrap();
    assert_eq!(
        lines(&out),
        [
            format!("big.txt:1: {}... [truncated]", "z".repeat(500)),
            "big.txt:2: short needle".to_string()
        ]
    );
    assert!(out.lines_truncated);
}

#[test]
fn walked_files_read_whole_keep_the_readers_binary_semantics() {
    let t = tempfile::tempdir().unwrap();
    // rg's reader searches the first line before it reads the NUL: it shows it.
    fs::write(t.path().join("a.txt"), b"ab\nzz\0\n").unwrap();
    // A NUL in the first read hides every line.
    fs::write(t.path().join("b.txt"), b"x\nab\0\n").unwrap();
    let cancel = Cancel::new();
    let target = Target::Dir(t.path().to_path_buf());
    let out = run(&target, &query("ab"), &PlainFs, &cancel).unwrap();
    assert_eq!(lines(&out), ["a.txt:1: ab"]);
}

#[test]
fn walked_files_larger_than_the_whole_file_buffer_stream_on() {
    let t = tempfile::tempdir().unwrap();
    let filler = "filler line\n".repeat(40_000); // ~480 KB, past the buffer
    let data = format!("needle 1\n{}needle {}\n", &filler[..filler.len() - 5], 2);
    fs::write(t.path().join("big.txt"), data).unwrap();
    let cancel = Cancel::new();
    let target = Target::Dir(t.path().to_path_buf());
    let out = run(&target, &query("needle"), &PlainFs, &cancel).unwrap();
    assert_eq!(
        lines(&out),
        ["big.txt:1: needle 1", "big.txt:40001: filler needle 2"]
    );
}

/// A FIFO named as the target: searched while a writer holds it, and a
/// cancel ends the wait for its data. (Windows has no FIFO.)
#[cfg(unix)]
#[test]
fn a_named_fifo_waits_for_data_until_cancelled() {
    use std::os::unix::fs::OpenOptionsExt;
    let t = tree();
    let fifo = t.path().join("pipe");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    let root = Root::open(t.path(), None).unwrap();
    // No writer: read to its end at once, nothing to find.
    let named = Target::File(fifo.clone(), "pipe".into());
    for opener in [&PlainFs as &dyn Opener, &root] {
        let out = run(&named, &query("needle"), opener, &Cancel::new()).unwrap();
        assert!(out.lines.is_empty());
    }
    // A writer holding it open (read-write: that open does not wait) and writing
    // nothing: the search waits until cancelled.
    let writer = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&fifo)
        .unwrap();
    for opener in [&PlainFs as &dyn Opener, &root] {
        let cancel = Cancel::new();
        std::thread::scope(|s| {
            let search = s.spawn(|| super::run(&named, &query("needle"), opener, &cancel, None));
            // Cancelled once it has opened the FIFO.
            while cancel.files_searched() == 0 {
                std::thread::yield_now();
            }
            cancel.cancel();
            let e = search.join().unwrap().unwrap_err();
            assert_eq!(e.kind(), ErrorKind::Aborted);
        });
    }
    // Data and then the writers' end: searched as ripgrep searches it (a
    // reader kept open holds the data while no writer is left).
    let keep = fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(&fifo)
        .unwrap();
    use std::io::Write;
    (&writer).write_all(b"first\nneedle in a fifo\n").unwrap();
    drop(writer);
    let out = run(&named, &query("needle"), &root, &Cancel::new()).unwrap();
    assert_eq!(lines(&out), ["pipe:2: needle in a fifo"]);
    drop(keep);
}

#[test]
fn a_store_cap_at_the_top_of_its_range_keeps_every_line() {
    let t = tree();
    let cancel = Cancel::new();
    let target = Target::Dir(t.path().to_path_buf());
    let capped = Query {
        store_cap: Some(u64::MAX),
        ..query("needle")
    };
    let out = run(&target, &capped, &PlainFs, &cancel).unwrap();
    assert_eq!(lines(&out).len(), 3);
}

/// Every face hands grep's options over raw; `Query::new` decides each
/// default and bound once.
#[test]
fn query_new_decides_the_defaults_and_bounds() {
    let raw = |context: Option<f64>, limit: Option<f64>| {
        Query::new(RawQuery {
            pattern: "x".into(),
            context,
            limit,
            ..RawQuery::default()
        })
    };
    // Absent: no context, pi's limit of 100.
    let q = raw(None, None);
    assert_eq!((q.context(), q.limit()), (0, DEFAULT_LIMIT));
    assert_eq!(DEFAULT_LIMIT, 100);
    // Fractions floor; a limit is at least 1; a context not above 0 is none.
    for (given, want) in [
        ((Some(2.9), Some(7.5)), (2, 7)),
        ((Some(0.5), Some(0.5)), (0, 1)),
        ((Some(-3.0), Some(0.0)), (0, 1)),
        ((Some(-3.0), Some(-5.0)), (0, 1)),
        ((Some(f64::NAN), Some(f64::NAN)), (0, DEFAULT_LIMIT)),
        ((Some(f64::NEG_INFINITY), Some(f64::NEG_INFINITY)), (0, 1)),
        // At most 2^53 - 1, so the limit a face reports is an exact JS number.
        (
            (Some(f64::INFINITY), Some(f64::INFINITY)),
            (MAX_COUNT, MAX_COUNT),
        ),
        ((Some(1e300), Some(1e300)), (MAX_COUNT, MAX_COUNT)),
        ((Some(9007199254740991.0), Some(42.0)), (MAX_COUNT, 42)),
    ] {
        let q = raw(given.0, given.1);
        assert_eq!((q.context(), q.limit()), want, "{given:?}");
    }
    assert_eq!(MAX_COUNT, 9007199254740991);
    // The store cap: absent stores every line; counts as the others.
    let cap = |c: Option<f64>| {
        Query::new(RawQuery {
            store_cap: c,
            ..RawQuery::default()
        })
        .store_cap
    };
    assert_eq!(cap(None), None);
    assert_eq!(cap(Some(51200.0)), Some(51200));
    assert_eq!(cap(Some(-1.0)), Some(0));
    assert_eq!(cap(Some(f64::INFINITY)), Some(MAX_COUNT));
    // `--glob`: empty is none; leading `./` dropped as pi drops it ("!" kept).
    let glob = |g: &str| {
        Query::new(RawQuery {
            glob: Some(g.into()),
            ..RawQuery::default()
        })
        .glob()
        .map(str::to_string)
    };
    assert_eq!(glob(""), None);
    assert_eq!(glob("*.rs").as_deref(), Some("*.rs"));
    assert_eq!(glob("./src/*.rs").as_deref(), Some("src/*.rs"));
    assert_eq!(glob("././a").as_deref(), Some("a"));
    assert_eq!(glob("!./a/**").as_deref(), Some("!a/**"));
    assert_eq!(glob("!").as_deref(), Some("!"));
    assert_eq!(glob("./").as_deref(), Some(""));
    assert_eq!(glob("a/./b").as_deref(), Some("a/./b"));
    assert_eq!(glob(".//a").as_deref(), Some("/a"));
    assert_eq!(Query::default().limit(), DEFAULT_LIMIT);
}

/// The limit a search ran with comes back with its outcome (pi's notice
/// shows it).
#[test]
fn the_outcome_carries_the_limit() {
    let t = tree();
    let target = Target::Dir(t.path().to_path_buf());
    let q = Query::new(RawQuery {
        pattern: "needle".into(),
        limit: Some(2.5),
        ..RawQuery::default()
    });
    let out = run(&target, &q, &PlainFs, &Cancel::new()).unwrap();
    assert_eq!((out.limit, out.match_limit_reached), (2, true));
    let out = run(&target, &query("needle"), &PlainFs, &Cancel::new()).unwrap();
    assert_eq!((out.limit, out.match_limit_reached), (100, false));
}

#[test]
fn a_policy_leaves_denied_files_unsearched_with_or_without_the_index() {
    use crate::policy::{Policy, PolicySpec};
    let t = tree();
    let p = t.path();
    fs::create_dir_all(p.join("secrets/inner")).unwrap();
    fs::write(p.join("secrets/inner/k.txt"), "needle s\n").unwrap();
    fs::write(p.join("src/.env"), "needle env\n").unwrap();
    fs::write(p.join("src/.ENV"), "needle ENV\n").unwrap();
    fs::write(p.join("vault.txt"), "needle v\n").unwrap();
    let spec = PolicySpec::from_raw(
        Some(vec![
            ".env".into(),
            "secrets/".into(),
            "vault*".into(),
            "!vault.txt".into(),
        ]),
        None,
        None,
    );
    let policy = std::sync::Arc::new(Policy::new(&spec).unwrap());
    let root = std::sync::Arc::new(Root::open(p, None).unwrap().with_policy(policy));
    let expect = [
        "a.txt:2: needle a",
        "b.txt:1: needle b",
        "src/.ENV:1: needle ENV",
        "src/deep/c.rs:1: needle c",
        "vault.txt:1: needle v",
    ];
    // On Windows `.ENV` is `.env` (one file, names compare case-insensitively), denied.
    let expect: Vec<&str> = expect
        .into_iter()
        .filter(|l| !(cfg!(windows) && l.starts_with("src/.ENV")))
        .collect();
    let all = |glob: Option<&str>, index: Option<&crate::index::Index>| {
        let target = target(Some(&root), p, String::new()).unwrap();
        let mut q = query("needle");
        q.glob = glob.map(str::to_string);
        let out = super::run(&target, &q, &*root, &Cancel::new(), index).unwrap();
        lines(&out)
    };
    assert_eq!(all(None, None), expect);
    // A --glob never takes a denied file back.
    assert_eq!(all(Some("*.env"), None), Vec::<String>::new());
    #[cfg(target_os = "linux")]
    {
        use crate::index::{Index, IndexOptions, IndexState};
        let index = Index::start(root.clone(), IndexOptions::default());
        assert_eq!(index.wait_ready().state, IndexState::Ready);
        assert_eq!(all(None, Some(&index)), expect);
        assert_eq!(all(Some("*.env"), Some(&index)), Vec::<String>::new());
        // A file created after the index was built, and after the policy.
        fs::write(p.join("src/deep/.env"), "needle late\n").unwrap();
        assert_eq!(all(None, Some(&index)), expect);
        assert_eq!(all(None, None), expect);
    }
    // An explicit denied target is refused, as a file and as a directory.
    for denied in ["src/.env", "secrets", "secrets/inner/k.txt"] {
        let e = target(Some(&root), &p.join(denied), String::new()).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Protected, "{denied}");
    }
}

/// The outcome with pi's 50 KB store cap and with none: the same counts,
/// and the capped lines are the uncapped ones' start.
fn capped_agrees_with_uncapped(dir: &Path, mut q: Query) -> Outcome {
    let target = Target::Dir(dir.to_path_buf());
    q.store_cap = None;
    let all = run(&target, &q, &PlainFs, &Cancel::new()).unwrap();
    q.store_cap = Some(MAX_OUTPUT_BYTES);
    let capped = run(&target, &q, &PlainFs, &Cancel::new()).unwrap();
    assert_eq!(
        (capped.match_count, capped.match_limit_reached),
        (all.match_count, all.match_limit_reached)
    );
    assert_eq!(
        (
            capped.output_bytes,
            capped.output_lines,
            capped.lines_truncated
        ),
        (all.output_bytes, all.output_lines, all.lines_truncated)
    );
    assert!(capped.lines.len() < all.lines.len());
    assert_eq!(capped.lines[..], all.lines[..capped.lines.len()]);
    capped
}

#[test]
fn a_file_keeps_only_the_lines_pi_can_store_and_sums_the_rest() {
    let t = tempfile::tempdir().unwrap();
    let body: String = (0..50_000).map(|i| format!("needle {i}\n")).collect();
    fs::write(t.path().join("big.txt"), &body).unwrap();
    // Held by the search: the lines under the cap, then only sums.
    let engine = Engine::new(
        "needle",
        EngineOptions {
            limit: u64::MAX,
            store_cap: Some(MAX_OUTPUT_BYTES),
            ..EngineOptions::default()
        },
    )
    .unwrap();
    let file = fs::File::open(t.path().join("big.txt")).unwrap();
    let found = engine.search_walked(&mut engine.worker(), file, &|| false);
    let rest = found.hits.rest.as_ref().unwrap();
    assert_eq!(found.hits.hits.len() as u64 + rest.lines, 50_000);
    assert_eq!(
        (rest.after, rest.matches),
        (found.hits.hits.len() as u64, rest.lines)
    );
    assert!(found.hits.held < 1 << 20, "held {}", found.hits.held);
    assert!(found.file.is_some());
    let mut q = query("needle");
    q.limit = MAX_COUNT;
    let out = capped_agrees_with_uncapped(t.path(), q);
    assert_eq!(out.match_count, 50_000);
}

#[test]
fn a_limit_among_the_summed_lines_searches_the_file_again() {
    let t = tempfile::tempdir().unwrap();
    fs::write(t.path().join("a.txt"), "needle a\nx\nneedle b\n").unwrap();
    let body: String = (0..20_000)
        .map(|i| format!("{} {i}\n", if i % 3 == 0 { "needle" } else { "hay" }))
        .collect();
    fs::write(t.path().join("b.txt"), &body).unwrap();
    fs::write(t.path().join("c.txt"), "needle c\n").unwrap();
    for (limit, context) in [
        (5_000, 0),
        (5_000, 2),
        (6_668, 3),
        (6_669, 0),
        (6_670, 1),
        (10, 0),
    ] {
        let mut q = query("needle");
        q.limit = limit;
        q.context = context;
        let target = Target::Dir(t.path().to_path_buf());
        if limit == 10 {
            // Reached in the kept lines: nothing summed matters.
            let out = run(&target, &q, &PlainFs, &Cancel::new()).unwrap();
            assert!(out.match_limit_reached);
            continue;
        }
        let out = capped_agrees_with_uncapped(t.path(), q);
        assert_eq!(out.match_limit_reached, limit < 6_670, "limit {limit}");
    }
}

#[test]
fn context_before_a_match_in_a_file_of_long_lines_is_held_as_shown() {
    // Lines over the searcher's heap limit go the long-line way; the context
    // waiting before a match is held cut to what pi shows.
    let t = tempfile::tempdir().unwrap();
    let mut body = Vec::new();
    for i in 0..3 {
        body.extend_from_slice(format!("ctx{i} ").as_bytes());
        body.extend(std::iter::repeat_n(b'q', 900_000));
        body.push(b'\n');
    }
    body.extend_from_slice(b"needle ");
    body.extend(std::iter::repeat_n(b'z', HEAP_LIMIT + 1));
    body.push(b'\n');
    fs::write(t.path().join("f.txt"), &body).unwrap();
    let mut q = query("needle");
    q.context = 1000;
    let out = run(
        &Target::Dir(t.path().to_path_buf()),
        &q,
        &PlainFs,
        &Cancel::new(),
    )
    .unwrap();
    let want = |i| format!("ctx{i} {}... [truncated]", "q".repeat(495));
    assert_eq!(out.lines.len(), 4);
    for i in 0..3 {
        assert_eq!(out.lines[i].text, want(i));
        assert!(!out.lines[i].is_match);
    }
    assert!(out.lines[3].is_match && out.lines_truncated);
}

/// `search`, the faces' one entry: the target resolved (bounded or plain), the defaults applied,
/// a file target shown under its display name, a cancelled search `Aborted`.
#[test]
fn search_is_the_one_entry_every_face_calls() {
    let dir = tempfile::tempdir().unwrap();
    fs::write(dir.path().join("a.txt"), "needle\n".repeat(3)).unwrap();
    let root = Root::open(dir.path(), None).unwrap();
    let request = |path: &Path| RawQuery {
        pattern: "needle".into(),
        path: path.to_string_lossy().into_owned(),
        display_name: "shown.txt".into(),
        limit: Some(2.0),
        ..RawQuery::default()
    };
    for bounded in [Some(&root), None] {
        let out = search(bounded, request(dir.path()), &Cancel::new(), None).unwrap();
        assert_eq!(
            (out.match_count, out.limit, out.match_limit_reached),
            (2, 2, true)
        );
        assert_eq!(&*out.lines[0].path, "a.txt");
        let file = search(
            bounded,
            request(&dir.path().join("a.txt")),
            &Cancel::new(),
            None,
        );
        assert_eq!(&*file.unwrap().lines[0].path, "shown.txt");
        let missing = search(
            bounded,
            request(&dir.path().join("no")),
            &Cancel::new(),
            None,
        );
        assert_eq!(missing.unwrap_err().kind(), ErrorKind::PathNotFound);
        let cancel = Cancel::new();
        cancel.cancel();
        let aborted = search(bounded, request(dir.path()), &cancel, None).unwrap_err();
        assert_eq!(aborted.to_string(), crate::error::ABORTED_MESSAGE);
    }
    // The tool's caps are pi's.
    assert_eq!((MAX_OUTPUT_BYTES, MAX_LINE_UNITS), (50 * 1024, 500));
}
