use super::NameFilter;
use nix::fcntl::OFlag;

#[test]
fn name_filters_never_miss_and_pass_directories_by() {
    let names: [&[u8]; 6] = [b"Kconfig", b"Makefile", b"main.C", b"x.h", b"ab", b"q"];
    let ends = NameFilter::of(names.iter().copied());
    for name in names {
        for at in 0..=name.len() {
            let tail = &name[at..];
            assert!(
                ends.may_end_with(tail),
                "{:?}",
                String::from_utf8_lossy(tail)
            );
            assert!(ends.may_end_with(&tail.to_ascii_uppercase()), "any case");
        }
    }
    assert!(ends.may_end_with(b"x"), "one byte: cannot say");
    let passed = [
        &b".rs"[..],
        b".no-such-extension",
        b".py",
        b"Kbuild",
        b".json",
    ];
    assert!(passed.iter().all(|t| !ends.may_end_with(t)));
    assert!(!NameFilter::of(std::iter::empty()).may_end_with(b"Kconfig"));
    for name in names {
        for at in 0..name.len() {
            for end in at..=name.len() {
                assert!(ends.may_hold(&name[at..end]), "a piece of {name:?}");
                assert!(ends.may_hold(&name[at..end].to_ascii_lowercase()));
            }
        }
    }
    assert!(ends.may_hold(b"zz"), "two bytes: cannot say");
    let absent = [&b"nothing_like_this_"[..], b"Kbuild", b"config.rs", b"xyz"];
    assert!(absent.iter().all(|p| !ends.may_hold(p)));
}

#[test]
fn the_component_walk_opens_what_openat2_opens_and_refuses_the_same() {
    use super::{open_beneath, open_by_components};
    use std::os::fd::AsFd;
    use std::os::unix::fs::{symlink, MetadataExt};

    let dir = tempfile::tempdir().unwrap();
    let at = dir.path();
    std::fs::create_dir_all(at.join("a/b")).unwrap();
    std::fs::write(at.join("a/b/f.txt"), "x").unwrap();
    symlink("b", at.join("a/link")).unwrap();
    symlink("f.txt", at.join("a/b/flink")).unwrap();
    let root = std::fs::File::open(at).unwrap();
    let root = root.as_fd();
    let ino = |fd: std::os::fd::OwnedFd| std::fs::File::from(fd).metadata().unwrap().ino();

    for (rel, dir) in [
        (&b""[..], true),
        (b"a", true),
        (b"a/b", true),
        (b"a/b/f.txt", false),
    ] {
        let kernel = ino(open_beneath(root, rel, dir).unwrap());
        let rel = if rel.is_empty() { &b"."[..] } else { rel };
        let flags = if dir {
            OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC
        } else {
            OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC
        };
        assert_eq!(
            ino(open_by_components(root, rel, flags).unwrap()),
            kernel,
            "{rel:?}"
        );
    }
    let flags = OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
    // A symlink as a directory on the way, or as the last name: never followed.
    assert!(open_beneath(root, b"a/link/f.txt", false).is_err());
    assert!(open_by_components(root, b"a/link/f.txt", flags).is_err());
    assert!(open_beneath(root, b"a/b/flink", false).is_err());
    assert!(open_by_components(root, b"a/b/flink", flags).is_err());
    // No way up or around.
    for rel in [&b".."[..], b"a/../..", b"a//b", b"/etc"] {
        assert!(open_by_components(root, rel, flags).is_err(), "{rel:?}");
    }
}
