//! The helper's plans: what Node encodes is what the helper decodes, and a plan cut short,
//! padded or corrupt is refused without panicking or reserving more than its own size.

use std::ffi::CString;

use super::codec::{Decoder, Encoder};
use super::plan::{decode_template, encode_template, ChildPlan, ChildSandbox};
use super::script::{action_samples, CommandScript, TemplateScript};

fn c(s: &str) -> CString {
    CString::new(s).unwrap()
}

fn sample_template() -> TemplateScript {
    TemplateScript {
        flags: libc::CLONE_NEWUSER | libc::CLONE_NEWNS,
        deny_setgroups: true,
        uid_map: c("1000 1000 1\n"),
        gid_map: c("1000 1000 1\n"),
        actions: action_samples(),
        network: false,
        proxy_listen: true,
    }
}

fn sample_plan(namespaces: bool) -> ChildPlan {
    ChildPlan {
        shell: c("/bin/bash"),
        cwd: c("/workspace"),
        argv: vec![c("/bin/bash"), c("-c"), c("echo 'hi' \u{e9}")],
        envp: vec![c("HOME=/tmp"), c("PATH=/usr/bin"), c("EMPTY=")],
        sandbox: ChildSandbox {
            seccomp: vec![
                libc::sock_filter {
                    code: 0x20,
                    jt: 0,
                    jf: 0,
                    k: 4,
                },
                libc::sock_filter {
                    code: 0x15,
                    jt: 1,
                    jf: 255,
                    k: 0xc000_003e,
                },
            ],
            notify: Some(vec![libc::sock_filter {
                code: 6,
                jt: 0,
                jf: 0,
                k: 0x7fff_0000,
            }]),
            notify_channel: 6,
            ruleset: if namespaces { -1 } else { 7 },
            namespaces: namespaces.then(|| CommandScript {
                clone_flags: libc::CLONE_NEWPID,
                actions: action_samples(),
                first_action: 42,
                pid_max: c("1324"),
                nproc: Some(1024),
                template_fds: [7, 8, -1],
            }),
        },
    }
}

#[test]
fn child_plans_round_trip() {
    for namespaces in [false, true] {
        let plan = sample_plan(namespaces);
        let bytes = plan.encode();
        let back = ChildPlan::decode(&bytes).expect("decodes");
        assert_eq!(back.encode(), bytes, "re-encodes identically");
        assert_eq!(back.argv, plan.argv);
        assert_eq!(back.envp, plan.envp);
        assert_eq!(back.sandbox.namespaces, plan.sandbox.namespaces);
        assert_eq!(back.sandbox.ruleset, plan.sandbox.ruleset);
        assert_eq!(back.sandbox.kept_fds(), plan.sandbox.kept_fds());
        let k: Vec<u32> = back.sandbox.seccomp.iter().map(|i| i.k).collect();
        assert_eq!(k, [4, 0xc000_003e]);
    }
}

#[test]
fn template_plans_round_trip() {
    let script = sample_template();
    let bytes = encode_template(&script);
    assert_eq!(decode_template(&bytes), Ok(script));
}

#[test]
fn every_truncation_and_extension_is_refused() {
    let bytes = sample_plan(true).encode();
    for len in 0..bytes.len() {
        assert!(ChildPlan::decode(&bytes[..len]).is_err(), "cut at {len}");
    }
    let mut longer = bytes.clone();
    longer.push(0);
    assert!(ChildPlan::decode(&longer).is_err(), "a trailing byte");
    let template = encode_template(&sample_template());
    for len in 0..template.len() {
        assert!(
            decode_template(&template[..len]).is_err(),
            "template cut at {len}"
        );
    }
    // A plan of another kind: a template is no command.
    assert!(ChildPlan::decode(&template).is_err());
}

#[test]
fn corrupt_plans_fail_without_panicking() {
    let bytes = sample_plan(true).encode();
    // Every single-byte change either decodes to something or is refused: never a panic.
    for at in 0..bytes.len() {
        for value in [0u8, 1, 0x7f, 0xff] {
            let mut changed = bytes.clone();
            changed[at] = value;
            let _ = ChildPlan::decode(&changed);
        }
    }
    // A count no plan could hold is refused before anything is reserved for it.
    let mut e = Encoder::default();
    e.u32(u32::MAX);
    let huge = e.finish();
    assert!(Decoder::new(&huge).count(1).is_err());
    assert!(Decoder::new(&huge).bytes().is_err());
    // A NUL inside a string, and a flag that is neither 0 nor 1.
    let mut e = Encoder::default();
    e.bytes(b"a\0b");
    assert!(Decoder::new(&e.finish()).cstring().is_err());
    assert!(Decoder::new(&[2]).bool().is_err());
}
