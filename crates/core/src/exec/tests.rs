use super::*;
use std::time::Instant;

fn request(command: &str) -> ExecRequest {
    ExecRequest {
        shell: Some("/bin/sh".into()),
        command: command.into(),
        cwd: "/".into(),
        env: Some(vec!["PATH=/usr/bin:/bin".into()]),
        cwd_map: None,
        sandbox: None,
        events: None,
    }
}

fn run(command: &str) -> (Vec<u8>, Outcome) {
    let mut execution = spawn(&request(command)).expect("spawn");
    let mut output = Vec::new();
    let outcome = execution.pump(&mut |chunk| {
        output.extend_from_slice(&chunk);
        true
    });
    (output, outcome)
}

fn alive(pid: libc::pid_t) -> bool {
    // Zombies count as gone: read the state letter from /proc where available.
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => !stat
            .rsplit(')')
            .next()
            .unwrap_or("")
            .trim_start()
            .starts_with('Z'),
        // SAFETY: signal 0 only checks that the process exists.
        Err(_) => unsafe { libc::kill(pid, 0) == 0 },
    }
}

#[test]
fn streams_stdout_then_stderr_in_order() {
    let (output, outcome) = run("echo out; echo err >&2; exit 3");
    assert_eq!(output, b"out\nerr\n");
    assert_eq!(
        outcome,
        Outcome {
            exit_code: Some(3),
            killed: false
        }
    );
}

#[test]
fn signal_death_is_128_plus_signal() {
    let (_, outcome) = run("kill -9 $$");
    assert_eq!(outcome.exit_code, Some(137));
}

#[test]
fn environment_is_exactly_the_given_one() {
    let (output, _) = run("echo \"[$PATH][$HOME]\"");
    assert_eq!(output, b"[/usr/bin:/bin][]\n");
}

#[test]
fn missing_cwd_and_shell_fail_at_spawn() {
    let mut bad_cwd = request("true");
    bad_cwd.cwd = "/definitely/not/here".into();
    let err = spawn(&bad_cwd).err().unwrap();
    assert_eq!(err.kind(), crate::ErrorKind::WorkingDirectory);
    let mut bad_shell = request("true");
    bad_shell.shell = Some("/no/such/shell".into());
    let err = spawn(&bad_shell).err().unwrap();
    assert_eq!(err.kind(), crate::ErrorKind::ShellNotFound);
    // A shell that exists and cannot be executed is Node's spawn error.
    let mut not_exec = request("true");
    not_exec.shell = Some("/".into());
    let err = spawn(&not_exec).err().unwrap();
    assert_eq!(err.to_string(), "spawn / EACCES");
    assert_eq!(err.syscall(), Some("spawn /"));
    let mut nul = request("a\0b");
    nul.command = "a\0b".into();
    let err = spawn(&nul).err().unwrap();
    assert_eq!(err.to_string(), "spawn /bin/sh EINVAL");
}

#[test]
fn background_holder_does_not_block_settling() {
    let started = Instant::now();
    let (output, outcome) = run("echo hi; sleep 5 & echo $! ");
    assert!(started.elapsed() < Duration::from_secs(2));
    assert_eq!(outcome.exit_code, Some(0));
    let text = String::from_utf8(output).unwrap();
    let pid: libc::pid_t = text.lines().nth(1).unwrap().trim().parse().unwrap();
    assert!(alive(pid), "background child is left running");
    // SAFETY: kills the test's own background child (its pid read just above).
    unsafe { libc::kill(pid, libc::SIGKILL) };
}

#[test]
fn kill_reaches_setsid_descendants() {
    let mut execution = spawn(&request(
        "setsid sh -c 'trap \"\" TERM; sleep 30' & echo $!; wait",
    ))
    .expect("spawn");
    let control = execution.control();
    let mut pids = Vec::new();
    let outcome = execution.pump(&mut |chunk| {
        pids.extend(
            String::from_utf8_lossy(&chunk)
                .split_whitespace()
                .filter_map(|p| p.parse::<libc::pid_t>().ok()),
        );
        control.kill();
        true
    });
    assert!(outcome.killed);
    assert!(!pids.is_empty());
    for pid in pids {
        assert!(!alive(pid), "pid {pid} survived the kill");
    }
}

#[test]
fn refusing_sink_kills_a_flood() {
    let mut execution = spawn(&request("yes")).expect("spawn");
    let mut calls = 0;
    let outcome = execution.pump(&mut |_| {
        calls += 1;
        calls < 3
    });
    assert!(outcome.killed);
    assert_eq!(calls, 3);
}

#[test]
fn exit_codes_follow_the_shell_convention() {
    assert_eq!(exit_code_of(7 << 8), Some(7));
    assert_eq!(exit_code_of(libc::SIGKILL), Some(137));
}
