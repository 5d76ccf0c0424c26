//! The sandbox helper binary as Node starts it: a role and a plan it cannot decode are refused,
//! and it reports the refusal instead of running anything.

#![cfg(target_os = "linux")]

use std::io::Write;
use std::process::{Command, Stdio};

const HELPER: &str = env!("CARGO_BIN_EXE_pi-sandbox-helper");

/// Runs the helper as `argv0` with `role`, the plan `plan` on stdin; returns its exit code.
fn run(argv0: &str, role: &str, plan: &[u8]) -> Option<i32> {
    use std::os::unix::process::CommandExt;
    let mut child = Command::new(HELPER)
        .arg0(argv0)
        .arg(role)
        .env_clear()
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("the helper starts");
    let mut stdin = child.stdin.take().expect("piped");
    let _ = stdin.write_all(plan);
    drop(stdin);
    child.wait().expect("reaped").code()
}

#[test]
fn refuses_what_it_does_not_know() {
    // Not started as the helper: the binary says so and runs nothing.
    assert_eq!(run("something-else", "supervisor", b""), Some(2));
    // An unknown role.
    assert_eq!(run("pi-sandbox-helper", "shell", b""), Some(2));
    // A plan of another build, or cut short.
    assert_eq!(
        run("pi-sandbox-helper", "supervisor", b"not a plan"),
        Some(2)
    );
    assert_eq!(
        run("pi-sandbox-helper", "template", b"pi-plan1\x01"),
        Some(2)
    );
}
