use super::NameEnds;

#[test]
fn name_ends_never_miss_and_pass_directories_by() {
    let names: [&[u8]; 6] = [b"Kconfig", b"Makefile", b"main.C", b"x.h", b"ab", b"q"];
    let ends = NameEnds::of(names.iter().copied());
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
    assert!(!NameEnds::of(std::iter::empty()).may_end_with(b"Kconfig"));
}
