use super::setup::{step_error, Step};
use super::*;
use crate::exec::{spawn, ExecRequest};
use std::path::Path;

/// Runs `command` with bash in `sandbox` at `cwd`, with a caller environment holding a secret.
fn run(sandbox: &Sandbox, cwd: &str, command: &str) -> crate::Result<(String, Option<i32>)> {
    run_in(&sandbox.clone().into(), cwd, command)
}

/// `run` in a sandbox prepared once for several commands.
fn run_in(sandbox: &Prepared, cwd: &str, command: &str) -> crate::Result<(String, Option<i32>)> {
    let mut execution = spawn(&ExecRequest {
        shell: Some("/bin/bash".into()),
        command: command.into(),
        cwd: cwd.into(),
        env: Some(vec![
            "API_KEY=sk-secret".into(),
            "PATH=/usr/bin:/bin".into(),
        ]),
        cwd_map: None,
        sandbox: Some(sandbox.clone()),
        events: None,
    })?;
    let mut output = Vec::new();
    let outcome = execution.pump(&mut |chunk| {
        output.extend_from_slice(&chunk);
        true
    });
    Ok((
        String::from_utf8_lossy(&output).into_owned(),
        outcome.exit_code,
    ))
}

fn namespaces_or_skip() -> bool {
    match support().namespaces {
        Ok(()) => true,
        Err(why) => {
            eprintln!("skipped: namespaces mode unavailable here: {why}");
            false
        }
    }
}

fn landlock_or_skip() -> bool {
    let s = support();
    if s.landlock_abi >= 1 && s.seccomp {
        true
    } else {
        eprintln!(
            "skipped: Landlock mode unavailable here: {:?}",
            s.landlock_error
        );
        false
    }
}

/// Files a sandbox must not have been able to create on the host; removed if it did.
fn assert_no_probe_files() {
    let made: Vec<&str> = [
        "/usr/pi-sandbox-probe",
        "/etc/pi-sandbox-probe",
        "/pi-sandbox-probe",
    ]
    .into_iter()
    .filter(|p| std::fs::remove_file(p).is_ok())
    .collect();
    assert!(made.is_empty(), "the sandbox created {made:?}");
}

fn workspace() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("hello.txt"), "hi from the root\n").unwrap();
    std::fs::create_dir(dir.path().join("src")).unwrap();
    dir
}

fn ns_sandbox(root: &Path) -> Sandbox {
    Sandbox {
        mode: Mode::Namespaces,
        ..Sandbox::new(root)
    }
}

const ALLOWED: u32 = 0x7fff_0000;
const EPERM: u32 = 0x0005_0000 | libc::EPERM as u32;
const ENOSYS: u32 = 0x0005_0000 | libc::ENOSYS as u32;

fn options(sockets: seccomp::Sockets, shares_processes: bool) -> seccomp::Options {
    seccomp::Options {
        sockets,
        shares_processes,
        deny_xattrs: false,
    }
}

#[test]
fn seccomp_program_jumps_stay_inside_and_deny_with_eperm() {
    let program = seccomp::program(options(seccomp::Sockets::NoUnix, true)).unwrap();
    assert_eq!(program[0].k, 4, "loads seccomp_data.arch first");
    for (i, insn) in program.iter().enumerate() {
        let is_jump = insn.code & 0x07 == libc::BPF_JMP as u16;
        if is_jump {
            assert!(i + 1 + (insn.jt as usize) < program.len());
            assert!(i + 1 + (insn.jf as usize) < program.len());
        }
    }
    for nr in [
        libc::SYS_mount,
        libc::SYS_unshare,
        libc::SYS_ptrace,
        libc::SYS_bpf,
    ] {
        assert_eq!(bpf::run(&program, nr, [0; 6]), EPERM, "{nr}");
    }
    assert_eq!(bpf::run(&program, libc::SYS_read, [0; 6]), ALLOWED);
    assert_eq!(bpf::run(&program, libc::SYS_clone3, [0; 6]), ENOSYS);
    assert_eq!(bpf::run(&program, libc::SYS_openat2, [0; 6]), ENOSYS);
    let newuser = libc::CLONE_NEWUSER as u64;
    assert_eq!(
        bpf::run(&program, libc::SYS_clone, [newuser, 0, 0, 0, 0, 0]),
        EPERM
    );
    let thread = (libc::CLONE_VM | libc::CLONE_THREAD) as u64;
    assert_eq!(
        bpf::run(&program, libc::SYS_clone, [thread, 0, 0, 0, 0, 0]),
        ALLOWED
    );
}

#[test]
fn seccomp_refuses_set_id_bits_in_every_mode_set() {
    for program in [
        seccomp::program(options(seccomp::Sockets::Isolated, false)).unwrap(),
        seccomp::program(options(seccomp::Sockets::None, true)).unwrap(),
    ] {
        let calls: &[(libc::c_long, usize)] = &[
            (libc::SYS_fchmod, 1),
            (libc::SYS_fchmodat, 2),
            (452, 2), // fchmodat2
            (libc::SYS_mkdirat, 2),
            (libc::SYS_mknodat, 2),
            #[cfg(target_arch = "x86_64")]
            (libc::SYS_chmod, 1),
            #[cfg(target_arch = "x86_64")]
            (libc::SYS_creat, 1),
            #[cfg(target_arch = "x86_64")]
            (libc::SYS_mkdir, 1),
            #[cfg(target_arch = "x86_64")]
            (libc::SYS_mknod, 1),
        ];
        for &(nr, at) in calls {
            for (mode, want) in [
                (0o755, ALLOWED),
                (0o4755, EPERM),
                (0o2755, EPERM),
                (0o1777, ALLOWED),
            ] {
                let mut args = [0u64; 6];
                args[at] = mode;
                assert_eq!(bpf::run(&program, nr, args), want, "{nr} mode {mode:o}");
            }
        }
        // open and openat: the mode counts only when a file is created.
        let creates = [
            (libc::O_WRONLY | libc::O_CREAT) as u64,
            libc::O_TMPFILE as u64 | libc::O_WRONLY as u64,
        ];
        let openat = |flags: u64, mode: u64| [libc::AT_FDCWD as u64, 0, flags, mode, 0, 0];
        for flags in creates {
            assert_eq!(
                bpf::run(&program, libc::SYS_openat, openat(flags, 0o6755)),
                EPERM
            );
            assert_eq!(
                bpf::run(&program, libc::SYS_openat, openat(flags, 0o644)),
                ALLOWED
            );
        }
        assert_eq!(
            bpf::run(&program, libc::SYS_openat, openat(0, 0o4755)),
            ALLOWED,
            "without O_CREAT the mode is unused"
        );
        #[cfg(target_arch = "x86_64")]
        {
            let creat = (libc::O_WRONLY | libc::O_CREAT) as u64;
            assert_eq!(
                bpf::run(&program, libc::SYS_open, [0, creat, 0o4755, 0, 0, 0]),
                EPERM
            );
            assert_eq!(
                bpf::run(&program, libc::SYS_open, [0, creat, 0o644, 0, 0, 0]),
                ALLOWED
            );
        }
    }
}

#[test]
fn seccomp_allows_only_listed_socket_families() {
    let family = |program: &[libc::sock_filter], nr, family: i32| {
        bpf::run(
            program,
            nr,
            [family as u64, libc::SOCK_STREAM as u64, 0, 0, 0, 0],
        )
    };
    let cases = [
        (
            seccomp::Sockets::Isolated,
            &[
                libc::AF_UNIX,
                libc::AF_INET,
                libc::AF_INET6,
                libc::AF_NETLINK,
            ][..],
        ),
        (
            seccomp::Sockets::NoUnix,
            &[libc::AF_INET, libc::AF_INET6, libc::AF_NETLINK][..],
        ),
        (seccomp::Sockets::None, &[][..]),
    ];
    for (sockets, allowed) in cases {
        let program =
            seccomp::program(options(sockets, sockets != seccomp::Sockets::Isolated)).unwrap();
        for f in [
            libc::AF_UNIX,
            libc::AF_INET,
            libc::AF_INET6,
            libc::AF_NETLINK,
            libc::AF_VSOCK,
            libc::AF_PACKET,
            libc::AF_BLUETOOTH,
            libc::AF_ALG,
            libc::AF_XDP,
        ] {
            let want = if allowed.contains(&f) { ALLOWED } else { EPERM };
            assert_eq!(
                family(&program, libc::SYS_socket, f),
                want,
                "{sockets:?} family {f}"
            );
        }
        assert_eq!(
            family(&program, libc::SYS_socketpair, libc::AF_UNIX),
            ALLOWED
        );
        assert_eq!(
            family(&program, libc::SYS_socketpair, libc::AF_VSOCK),
            EPERM
        );
    }
}

#[test]
fn seccomp_keeps_other_processes_out_of_reach_where_they_are_shared() {
    let shared = seccomp::program(options(seccomp::Sockets::None, true)).unwrap();
    let isolated = seccomp::program(options(seccomp::Sockets::Isolated, false)).unwrap();
    let other = 4242u64;
    let limit_ptr = 0x7fff_0000_1000u64;
    let calls: &[(libc::c_long, [u64; 6], [u64; 6])] = &[
        // prlimit64(pid, RLIMIT_NOFILE, new, old): own limits, or only reading another's.
        (
            libc::SYS_prlimit64,
            [0, 7, limit_ptr, 0, 0, 0],
            [other, 7, limit_ptr, 0, 0, 0],
        ),
        (
            libc::SYS_prlimit64,
            [other, 7, 0, limit_ptr, 0, 0],
            [other, 7, 1 << 32, 0, 0, 0],
        ),
        // setpriority(PRIO_PROCESS, who, prio), setpriority(PRIO_USER, 0, prio).
        (
            libc::SYS_setpriority,
            [0, 0, 10, 0, 0, 0],
            [0, other, 10, 0, 0, 0],
        ),
        (
            libc::SYS_setpriority,
            [1, 0, 10, 0, 0, 0],
            [2, 0, 10, 0, 0, 0],
        ),
        // ioprio_set(IOPRIO_WHO_PROCESS, who, prio), ioprio_set(IOPRIO_WHO_USER, 0, prio).
        (
            libc::SYS_ioprio_set,
            [1, 0, 0, 0, 0, 0],
            [1, other, 0, 0, 0, 0],
        ),
        (libc::SYS_ioprio_set, [1, 0, 0, 0, 0, 0], [3, 0, 0, 0, 0, 0]),
        (
            libc::SYS_sched_setaffinity,
            [0, 8, limit_ptr, 0, 0, 0],
            [other, 8, limit_ptr, 0, 0, 0],
        ),
        (
            libc::SYS_sched_setscheduler,
            [0, 5, limit_ptr, 0, 0, 0],
            [other, 5, limit_ptr, 0, 0, 0],
        ),
        (
            libc::SYS_sched_setparam,
            [0, limit_ptr, 0, 0, 0, 0],
            [other, limit_ptr, 0, 0, 0, 0],
        ),
        (
            libc::SYS_sched_setattr,
            [0, limit_ptr, 0, 0, 0, 0],
            [other, limit_ptr, 0, 0, 0, 0],
        ),
    ];
    for (nr, own, others) in calls {
        assert_eq!(bpf::run(&shared, *nr, *own), ALLOWED, "{nr} {own:?}");
        assert_eq!(bpf::run(&shared, *nr, *others), EPERM, "{nr} {others:?}");
        // A PID namespace already keeps them apart: nothing to refuse.
        assert_eq!(
            bpf::run(&isolated, *nr, *others),
            ALLOWED,
            "{nr} {others:?}"
        );
    }
    for nr in [
        libc::SYS_shmget,
        libc::SYS_semctl,
        libc::SYS_msgget,
        libc::SYS_mq_open,
    ] {
        assert_eq!(bpf::run(&shared, nr, [0; 6]), EPERM, "{nr}");
        assert_eq!(bpf::run(&isolated, nr, [0; 6]), ALLOWED, "{nr}");
    }
}

#[test]
fn setup_steps_encode_above_every_errno() {
    assert!(step_error(Step::NoNewPrivs, 4095) >= 4096);
    assert_ne!(
        step_error(Step::UidMap, libc::EPERM),
        step_error(Step::GidMap, libc::EPERM)
    );
}

#[test]
fn setup_errors_name_the_step_and_what_to_do() {
    let dir = workspace();
    let spec = ns_sandbox(dir.path());
    let resolved = paths::Resolved::open(&spec, Some(Mode::Namespaces)).unwrap();
    let plan = plan::Plan::new(&spec, &resolved, None, spec.mode).unwrap();
    let err = plan
        .setup_error(step_error(Step::UidMap, libc::EPERM))
        .unwrap()
        .to_string();
    assert!(err.starts_with("sandbox unavailable: the sandbox setup failed writing /proc/self/uid_map: Operation not permitted"), "{err}");
    assert!(
        err.ends_with("mode \"auto\" uses Landlock where namespaces are refused"),
        "{err}"
    );
    let err = plan
        .setup_error(step_error(Step::Action(0), libc::ENOENT))
        .unwrap()
        .to_string();
    assert!(
        err.contains("failed binding /usr")
            || err.contains("failed linking /bin")
            || err.contains("failed creating /usr"),
        "{err}"
    );
    // A plain errno is a plain spawn error.
    assert!(plan.setup_error(libc::ENOENT).is_none());
}

#[test]
fn support_names_the_kernel_and_landlock() {
    let s = support();
    assert_eq!(s.platform, "linux");
    assert!(s.kernel.as_deref().is_some_and(|k| !k.is_empty()));
    assert_eq!(s.landlock_abi == 0, s.landlock_error.is_some());
    if s.auto().is_none() {
        assert!(s.explain().contains("kernel"));
    }
}

#[test]
fn invalid_specs_are_refused_before_anything_runs() {
    let dir = workspace();
    // (cwd outside the runtime root: the preflight checks it on the host, where it exists.)
    let err = run(&Sandbox::new("relative/root"), "/", "true").unwrap_err();
    assert_eq!(err.kind(), crate::ErrorKind::SandboxUnavailable);
    let landlock = Sandbox {
        mode: Mode::Landlock,
        ..Sandbox::new(dir.path())
    };
    let err = run(&landlock, "/workspace", "true").unwrap_err();
    assert!(err.to_string().contains("cannot remap"), "{err}");
}

#[test]
fn namespaces_workspace_is_shared_and_the_rest_is_not() {
    if !namespaces_or_skip() {
        return;
    }
    let dir = workspace();
    let sandbox = ns_sandbox(dir.path());
    let (out, code) = run(
        &sandbox,
        "/workspace/src",
        "pwd; cat ../hello.txt; echo made > ../made.txt; \
         echo \"[$API_KEY][$HOME][$PATH]\"; \
         cat /etc/shadow >/dev/null 2>&1 && echo shadow-read; \
         ls /root /home >/dev/null 2>&1 && echo home-seen; \
         for f in /usr/pi-sandbox-probe /etc/pi-sandbox-probe /pi-sandbox-probe; do \
           (echo x > $f) 2>/dev/null && echo wrote-outside; done; \
         echo tmp > /tmp/t && cat /tmp/t; \
         tr '\\0' ' ' < /proc/1/cmdline | grep -q pi_native_ops && echo cmdline-leaked; \
         ls /proc | grep -E '^[0-9]+$' | wc -l; \
         mount -t tmpfs none /mnt 2>/dev/null && echo mounted; \
         unshare -U true 2>/dev/null && echo unshared; unshare -r true 2>/dev/null && echo mapped; \
         chroot / true 2>/dev/null && echo chrooted; \
         v=$(cat /proc/sys/vm/swappiness); (echo $v > /proc/sys/vm/swappiness) 2>/dev/null \
           && echo sysctl-written; \
         cat /proc/keys 2>/dev/null | grep -q . && echo keys-read; \
         test -e /dev/null && test -d /dev/shm && echo dev-ok",
    )
    .unwrap();
    assert_eq!(code, Some(0), "{out}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[0], "/workspace/src");
    assert_eq!(lines[1], "hi from the root");
    assert_eq!(
        lines[2],
        "[][/tmp][/usr/local/bin:/usr/local/sbin:/usr/bin:/usr/sbin:/bin:/sbin]"
    );
    assert_eq!(lines[3], "tmp");
    // bash, ls, grep and wc: a handful of processes, none of the host's.
    let pids: usize = lines[4].trim().parse().unwrap();
    assert!((1..=6).contains(&pids), "{out}");
    assert_eq!(lines[5], "dev-ok", "{out}");
    assert_eq!(lines.len(), 6, "{out}");
    assert_eq!(
        std::fs::read_to_string(dir.path().join("made.txt")).unwrap(),
        "made\n"
    );
    assert_no_probe_files();
    // /tmp was private to that command.
    let (out, _) = run(&sandbox, "/workspace", "ls /tmp | wc -l").unwrap();
    assert_eq!(out.trim(), "0");
}

#[test]
fn namespaces_without_network_cannot_reach_the_host() {
    if !namespaces_or_skip() {
        return;
    }
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let dir = workspace();
    let probe =
        format!("(echo x > /dev/tcp/127.0.0.1/{port}) 2>/dev/null && echo reached || echo refused");
    let (out, _) = run(&ns_sandbox(dir.path()), "/workspace", &probe).unwrap();
    assert_eq!(out.trim(), "refused");
    let open = Sandbox {
        network: true,
        ..ns_sandbox(dir.path())
    };
    let (out, _) = run(&open, "/workspace", &probe).unwrap();
    assert_eq!(out.trim(), "reached");
}

#[test]
fn namespaces_keep_exit_codes_and_signals() {
    if !namespaces_or_skip() {
        return;
    }
    let dir = workspace();
    let sandbox = ns_sandbox(dir.path());
    assert_eq!(run(&sandbox, "/workspace", "exit 3").unwrap().1, Some(3));
    assert_eq!(
        run(&sandbox, "/workspace", "kill -9 $$").unwrap().1,
        Some(137)
    );
    let err = run(&sandbox, "/nonexistent", "true").unwrap_err();
    assert_eq!(err.kind(), crate::ErrorKind::WorkingDirectory);
    // On the host and not in the sandbox: the shell cannot start there.
    let err = run(&sandbox, "/root", "true").unwrap_err();
    assert_eq!(err.to_string(), "spawn /bin/bash ENOENT");
}

#[test]
fn namespaces_limit_processes() {
    if !namespaces_or_skip() {
        return;
    }
    let dir = workspace();
    let sandbox = Sandbox {
        max_processes: Some(100),
        ..ns_sandbox(dir.path())
    };
    // perl (essential on Debian) forks without bash's minutes of fork retries.
    let forks = "command -v perl >/dev/null || { echo no-perl; exit; }; \
         perl -e 'my $n = 0; for (1..800) { my $p = fork; last unless defined $p; \
         if (!$p) { sleep 30; exit } $n++ } print $n'";
    let (out, code) = run(&sandbox, "/workspace", forks).unwrap();
    if out.trim() == "no-perl" {
        eprintln!("skipped: no perl to fork with");
        return;
    }
    let live: usize = out
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("{out} {code:?}"));
    // pid_max bounds every caller at the limit + the kernel's 300 reserved pids; a non-root
    // caller's RLIMIT_NPROC is exact (bash, perl and init count too).
    assert!((100..=400).contains(&live), "{live} processes");
    // SAFETY: a plain getter.
    if unsafe { libc::geteuid() } != 0 {
        assert!(live <= 100, "{live} processes");
    }
    // Many short-lived processes do not use the room up (pids wrap around within it).
    let churn = "for i in $(seq 400); do /bin/true; done; \
         for i in $(seq 90); do sleep 0.3 & done; wait; echo done";
    let (out, _) = run(&sandbox, "/workspace", churn).unwrap();
    assert_eq!(out, "done\n");
}

#[test]
fn landlock_confines_reads_writes_and_network() {
    if !landlock_or_skip() {
        return;
    }
    let dir = workspace();
    let root = std::fs::canonicalize(dir.path()).unwrap();
    let other = workspace();
    let sandbox = Sandbox {
        mode: Mode::Landlock,
        runtime_root: root.clone(),
        ..Sandbox::new(&root)
    };
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let command = format!(
        "cat hello.txt; echo made > made.txt; echo \"[$API_KEY]\"; \
         echo t > \"$TMPDIR/t\" && cat \"$TMPDIR/t\"; echo \"$TMPDIR\"; \
         cat /etc/shadow >/dev/null 2>&1 && echo shadow-read; \
         cat {other}/hello.txt 2>/dev/null && echo other-read; \
         ls /root >/dev/null 2>&1 && echo root-seen; \
         for f in /usr/pi-sandbox-probe /etc/pi-sandbox-probe /pi-sandbox-probe; do \
           (echo x > $f) 2>/dev/null && echo wrote-outside; done; \
         (echo x > /dev/tcp/127.0.0.1/{port}) 2>/dev/null && echo reached; \
         chmod 4755 {other}/hello.txt 2>/dev/null; chmod 755 made.txt || echo no-chmod; \
         perl -e 'open(my $f, q(<), q(made.txt)); chmod 04755, $f'; \
         perl -MSocket -e 'socket(my $s, AF_UNIX, SOCK_STREAM, 0) and print qq(unix-socket\\n)'; \
         test -r /etc/passwd && echo passwd-ok",
        other = other.path().display()
    );
    let (out, code) = run(&sandbox, &root.to_string_lossy(), &command).unwrap();
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[0], "hi from the root", "{out}");
    assert_eq!(lines[1], "[]");
    assert_eq!(lines[2], "t");
    let tmpdir = lines[3].to_string();
    assert_eq!(lines[4], "passwd-ok", "{out}");
    assert_eq!(lines.len(), 5, "{out}");
    assert_eq!(code, Some(0));
    assert!(root.join("made.txt").exists());
    assert_no_probe_files();
    // A root caller's shell owns the host's system files: Landlock cannot stop chmod, seccomp does.
    // SAFETY: a plain getter.
    if unsafe { libc::geteuid() } == 0 {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(other.path().join("hello.txt"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o7777, 0o644);
        // fchmod (perl's chmod of a handle) takes the mode in another argument.
        let mode = std::fs::metadata(root.join("made.txt"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o7777, 0o755);
    }
    assert!(
        !Path::new(&tmpdir).exists(),
        "the private temp dir is removed"
    );
}

/// Host processes whose command line is `sleep <seconds>`.
fn host_sleeps(seconds: &str) -> usize {
    let wanted = format!("sleep\0{seconds}\0");
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter(|e| std::fs::read(e.path().join("cmdline")).is_ok_and(|c| c == wanted.as_bytes()))
        .count()
}

#[test]
fn namespaces_kill_takes_the_whole_tree() {
    if !namespaces_or_skip() {
        return;
    }
    let dir = workspace();
    let mut execution = spawn(&ExecRequest {
        shell: Some("/bin/bash".into()),
        command: "setsid sleep 4242 & sleep 4243 & echo started; wait".into(),
        cwd: "/workspace".into(),
        env: None,
        cwd_map: None,
        sandbox: Some(ns_sandbox(dir.path()).into()),
        events: None,
    })
    .unwrap();
    let control = execution.control();
    let outcome = execution.pump(&mut |chunk| {
        if String::from_utf8_lossy(&chunk).contains("started") {
            control.kill();
        }
        true
    });
    assert!(outcome.killed);
    drop(execution);
    assert_eq!(host_sleeps("4242") + host_sleeps("4243"), 0);
}

#[test]
fn namespaces_background_jobs_end_with_the_shell() {
    if !namespaces_or_skip() {
        return;
    }
    let dir = workspace();
    let (_, code) = run(
        &ns_sandbox(dir.path()),
        "/workspace",
        "sleep 4244 >/dev/null 2>&1 &",
    )
    .unwrap();
    assert_eq!(code, Some(0));
    // The PID namespace ended with its init, right after the shell.
    assert_eq!(host_sleeps("4244"), 0);
}

#[test]
fn namespaces_bind_extra_paths_read_only_and_read_write() {
    if !namespaces_or_skip() {
        return;
    }
    let dir = workspace();
    let shared = workspace();
    let docs = workspace();
    let shared_path = shared.path().to_path_buf();
    let docs_path = docs.path().to_path_buf();
    let sandbox = Sandbox {
        read_write: vec![shared_path.clone()],
        read_only: vec![docs_path.clone()],
        ..ns_sandbox(dir.path())
    };
    let command = format!(
        "echo rw > {s}/w.txt && echo rw-ok; cat {d}/hello.txt; \
         (echo x > {d}/w.txt) 2>/dev/null && echo ro-written; echo done",
        s = shared_path.display(),
        d = docs_path.display()
    );
    let (out, _) = run(&sandbox, "/workspace", &command).unwrap();
    assert_eq!(out, "rw-ok\nhi from the root\ndone\n");
    assert!(shared_path.join("w.txt").exists());
    assert!(!docs_path.join("w.txt").exists());
    let relative = Sandbox {
        read_only: vec!["docs".into()],
        ..ns_sandbox(dir.path())
    };
    let err = run(&relative, "/workspace", "true").unwrap_err();
    assert!(err.to_string().contains("must be absolute"), "{err}");
}

#[test]
fn namespaces_commands_share_the_template_and_nothing_they_write_outside_the_workspace() {
    if !namespaces_or_skip() {
        return;
    }
    let dir = workspace();
    let sandbox = Prepared::from(ns_sandbox(dir.path()));
    let (first, _) = run_in(
        &sandbox,
        "/workspace",
        "echo a > /tmp/left; echo b > /dev/shm/left; cat /tmp/left /dev/shm/left; echo c > out.txt",
    )
    .unwrap();
    assert_eq!(first, "a\nb\n");
    let (plan, _) = sandbox.plan().unwrap();
    let (second, _) = run_in(
        &sandbox,
        "/workspace",
        "ls -A /tmp /dev/shm; cat out.txt; tr -d '\\0' < /proc/1/cmdline; echo",
    )
    .unwrap();
    // The init is the sandbox helper (its command line, not pi's).
    assert_eq!(
        second,
        "/dev/shm:\n\n/tmp:\nc\npi-sandbox-helpersupervisor\n"
    );
    // Built once: the second command used the same plan and template.
    assert!(std::sync::Arc::ptr_eq(&plan, &sandbox.plan().unwrap().0));
}

#[test]
fn namespaces_refuse_a_root_removed_and_recreated() {
    if !namespaces_or_skip() {
        return;
    }
    let dir = workspace();
    let sandbox = Prepared::from(ns_sandbox(dir.path()));
    assert_eq!(
        run_in(&sandbox, "/workspace", "cat hello.txt").unwrap().0,
        "hi from the root\n"
    );
    std::fs::remove_dir_all(dir.path()).unwrap();
    std::fs::create_dir(dir.path()).unwrap();
    std::fs::write(dir.path().join("hello.txt"), "a new root\n").unwrap();
    let err = run_in(&sandbox, "/workspace", "cat hello.txt").unwrap_err();
    assert_eq!(err.kind(), crate::ErrorKind::SandboxUnavailable);
    assert!(
        err.to_string().contains("is no longer the directory"),
        "{err}"
    );
    // A new sandbox takes the new directory.
    assert_eq!(
        run(&ns_sandbox(dir.path()), "/workspace", "cat hello.txt")
            .unwrap()
            .0,
        "a new root\n"
    );
}

#[test]
fn namespaces_template_binds_only_what_was_resolved() {
    if !namespaces_or_skip() {
        return;
    }
    // Swapped between the check of an exec and the build of the template: the builder finds the
    // path again without following symlinks and refuses another inode.
    let dir = workspace();
    let docs = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    let spec = Sandbox {
        read_only: vec![docs.path().to_path_buf()],
        ..ns_sandbox(dir.path())
    };
    let resolved = paths::Resolved::open(&spec, Some(Mode::Namespaces)).unwrap();
    std::fs::remove_dir(docs.path()).unwrap();
    std::os::unix::fs::symlink(outside.path(), docs.path()).unwrap();
    let err = plan::Plan::new(&spec, &resolved, None, spec.mode)
        .err()
        .unwrap()
        .to_string();
    assert!(
        err.contains(&format!("refused binding {}", docs.path().display()))
            && err.contains("no longer what the sandbox was made with"),
        "{err}"
    );
    std::fs::remove_file(docs.path()).unwrap();
    std::fs::create_dir(docs.path()).unwrap();
    let err = plan::Plan::new(&spec, &resolved, None, spec.mode)
        .err()
        .unwrap()
        .to_string();
    assert!(
        err.contains("no longer what the sandbox was made with"),
        "{err}"
    );
}

#[test]
fn planted_links_are_found_inside_writable_areas_only() {
    let area = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    let area_real = std::fs::canonicalize(area.path()).unwrap();
    let outside_real = std::fs::canonicalize(outside.path()).unwrap();
    std::fs::create_dir(outside_real.join("target")).unwrap();
    std::os::unix::fs::symlink(outside_real.join("target"), area_real.join("link")).unwrap();
    std::os::unix::fs::symlink(&area_real, outside_real.join("to-area")).unwrap();
    // A relative link inside the area, then one outside it, chained.
    std::os::unix::fs::symlink("link", area_real.join("rel")).unwrap();
    let writable = [area_real.clone()];
    assert_eq!(
        paths::planted_link(&area_real.join("link/x"), &writable),
        Some(area_real.join("link"))
    );
    assert_eq!(
        paths::planted_link(&outside_real.join("to-area/rel"), &writable),
        Some(area_real.join("rel"))
    );
    // A link outside every writable area is the caller's own.
    assert_eq!(
        paths::planted_link(&outside_real.join("to-area"), &writable),
        None
    );
    assert_eq!(
        paths::planted_link(&outside_real.join("target"), &writable),
        None
    );
}

#[test]
fn read_only_nestings_are_refused_where_the_mode_cannot_enforce_them() {
    use paths::Kind::{ReadOnly, ReadWrite, Root};
    let areas = |extra: &[(paths::Kind, &'static str)]| {
        let mut all = vec![(Root, Path::new("/ws"))];
        all.extend(extra.iter().map(|(k, p)| (*k, Path::new(*p))));
        all
    };
    let inside_root = areas(&[(ReadOnly, "/ws/docs")]);
    let inside_rw = areas(&[(ReadWrite, "/data"), (ReadOnly, "/data/ro")]);
    let rw_inside_ro = areas(&[(ReadOnly, "/data"), (ReadWrite, "/data/cache")]);
    let apart = areas(&[(ReadOnly, "/wsx"), (ReadWrite, "/data")]);
    for ok in [&inside_root, &inside_rw, &rw_inside_ro, &apart] {
        assert_eq!(paths::conflicts(ok, Some(Mode::Namespaces)), Ok(()));
    }
    let err = paths::conflicts(&inside_root, Some(Mode::Landlock)).unwrap_err();
    assert!(
        err.contains("readOnly /ws/docs lies inside the workspace root /ws"),
        "{err}"
    );
    let err = paths::conflicts(&inside_rw, Some(Mode::Landlock)).unwrap_err();
    assert!(
        err.contains("readOnly /data/ro lies inside the readWrite path /data"),
        "{err}"
    );
    assert_eq!(
        paths::conflicts(&rw_inside_ro, Some(Mode::Landlock)),
        Ok(())
    );
    assert_eq!(paths::conflicts(&apart, Some(Mode::Landlock)), Ok(()));
    let both = areas(&[(ReadOnly, "/data"), (ReadWrite, "/data")]);
    for mode in [Mode::Namespaces, Mode::Landlock] {
        let err = paths::conflicts(&both, Some(mode)).unwrap_err();
        assert!(err.contains("is also the readWrite path"), "{err}");
    }
}

#[test]
fn more_specific_binds_land_last_and_read_only_shows_wherever_its_directory_does() {
    let p = Path::new;
    // The root at /workspace; readWrite /data; readOnly /data/ro and /ws/docs.
    let areas = [
        (p("/ws"), p("/workspace"), false),
        (p("/ws/docs"), p("/ws/docs"), true),
        (p("/data/ro"), p("/data/ro"), true),
        (p("/data"), p("/data"), false),
    ];
    let got: Vec<(String, usize, bool, bool)> = paths::mounts(&areas)
        .into_iter()
        .map(|m| {
            (
                m.dst.display().to_string(),
                m.source,
                m.read_only,
                m.inside_bind,
            )
        })
        .collect();
    let want = [
        ("/workspace", 0, false, false),
        ("/data", 3, false, false),
        ("/ws/docs", 1, true, false),
        ("/workspace/docs", 1, true, true),
        ("/data/ro", 2, true, true),
    ];
    let want: Vec<(String, usize, bool, bool)> = want
        .iter()
        .map(|(d, s, r, i)| (d.to_string(), *s, *r, *i))
        .collect();
    assert_eq!(got, want);
    // A readWrite path inside the workspace is a second bind only under a readOnly one.
    let nested = [
        (p("/ws"), p("/workspace"), false),
        (p("/ws/cache"), p("/ws/cache"), false),
        (p("/ws/docs"), p("/ws/docs"), true),
        (p("/ws/docs/out"), p("/ws/docs/out"), false),
    ];
    let got: Vec<(String, bool)> = paths::mounts(&nested)
        .into_iter()
        .map(|m| (m.dst.display().to_string(), m.read_only))
        .collect();
    let want = [
        ("/workspace", false),
        ("/ws/cache", false),
        ("/ws/docs", true),
        ("/workspace/docs", true),
        ("/ws/docs/out", false),
        ("/workspace/docs/out", false),
    ];
    let want: Vec<(String, bool)> = want.iter().map(|(d, r)| (d.to_string(), *r)).collect();
    assert_eq!(got, want);
    // Without runtime remapping the readOnly path's two places are one.
    let same = [
        (p("/ws"), p("/ws"), false),
        (p("/ws/docs"), p("/ws/docs"), true),
    ];
    let got = paths::mounts(&same);
    assert_eq!(got.len(), 2);
    assert!(got[1].read_only && got[1].inside_bind);
}

#[test]
fn private_tmpfs_options_bound_size_and_inodes() {
    let small = namespaces::tmpfs_options(1 << 20);
    assert_eq!(
        small.to_str().unwrap(),
        "mode=1777,size=1048576,nr_inodes=1024"
    );
    let large = namespaces::tmpfs_options(2 << 30);
    assert_eq!(
        large.to_str().unwrap(),
        "mode=1777,size=2147483648,nr_inodes=524288"
    );
    let default = default_tmp_size();
    assert!(default > 0 && default <= DEFAULT_TMP_SIZE_MAX, "{default}");
}

#[test]
fn namespaces_binds_under_the_private_tmp_stay_visible() {
    if !namespaces_or_skip() {
        return;
    }
    let dir = workspace();
    let shared = workspace();
    let inside = tempfile::tempdir_in("/tmp").unwrap();
    let runtime_root = format!("/tmp/pno-ws-{}", std::process::id());
    std::fs::write(inside.path().join("f.txt"), "under tmp\n").unwrap();
    let sandbox = Prepared::from(Sandbox {
        read_only: vec![inside.path().to_path_buf()],
        read_write: vec![shared.path().to_path_buf()],
        runtime_root: runtime_root.clone().into(),
        ..ns_sandbox(dir.path())
    });
    let command = format!(
        "cat {i}/f.txt hello.txt; pwd; echo x > /tmp/own && ls /tmp | grep -c own",
        i = inside.path().display()
    );
    for _ in 0..2 {
        let (out, code) = run_in(&sandbox, &runtime_root, &command).unwrap();
        let wanted = format!("under tmp\nhi from the root\n{runtime_root}\n1\n");
        assert_eq!((out, code), (wanted, Some(0)));
    }
}

/// Sandboxes built and run from several threads at once (Node runs commands on libuv's pool): a
/// forked child must not keep another spawn's pipe ends, or that spawn's end-of-file never comes
/// and both wait forever. A hang fails the test through the watchdog instead of blocking the suite.
#[test]
fn namespaces_concurrent_spawns_do_not_hold_each_others_pipes() {
    use std::sync::mpsc::RecvTimeoutError;
    /// Threads building at once, and the sandboxes each builds (each a fork for its template):
    /// enough overlapping forks that an inherited pipe end shows at once (8 x 100 hung in the
    /// first rounds every time before).
    const THREADS: usize = 8;
    const ROUNDS: usize = 100;
    /// How long all of them may take: far beyond what they need on a loaded machine, far below
    /// forever.
    const WATCHDOG: std::time::Duration = std::time::Duration::from_secs(120);
    if !namespaces_or_skip() {
        return;
    }
    let dir = workspace();
    let (done, finished) = std::sync::mpsc::channel();
    for _ in 0..THREADS {
        let root = dir.path().to_path_buf();
        let done = done.clone();
        std::thread::spawn(move || {
            for round in 0..ROUNDS {
                let sandbox = Prepared::from(ns_sandbox(&root));
                sandbox.plan().unwrap();
                if round % 10 == 0 {
                    // Execs overlap the other threads' builds (and each other) too.
                    let result = run_in(&sandbox, "/workspace", "cat hello.txt");
                    assert_eq!(result.unwrap(), ("hi from the root\n".into(), Some(0)));
                }
            }
            done.send(()).unwrap();
        });
    }
    drop(done);
    for _ in 0..THREADS {
        match finished.recv_timeout(WATCHDOG) {
            Ok(()) => {}
            Err(RecvTimeoutError::Timeout) => panic!(
                "concurrent sandbox spawns still running after {WATCHDOG:?}: hung on each \
                 other's pipes"
            ),
            Err(RecvTimeoutError::Disconnected) => panic!("a spawning thread failed (above)"),
        }
    }
}

#[test]
fn guarantees_follow_what_the_kernel_offers() {
    let support = |namespaces: Result<(), String>, landlock_abi| Support {
        platform: "linux",
        kernel: None,
        namespaces,
        landlock_abi,
        landlock_error: None,
        seccomp: true,
        user_notification: true,
    };
    let old = support(Err("refused".into()), 5);
    assert_eq!(old.guarantees(Mode::Namespaces), None);
    let landlock = old.guarantees(Mode::Landlock).unwrap();
    assert!(landlock.files && landlock.truncate && landlock.device_ioctl);
    assert!(!landlock.signals && !landlock.abstract_unix_sockets);
    assert_eq!(old.guarantees(Mode::Auto), Some(landlock));
    let older = support(Err("refused".into()), 2)
        .guarantees(Mode::Landlock)
        .unwrap();
    assert!(!older.truncate && !older.device_ioctl);
    assert_eq!(
        support(Err("refused".into()), 0).guarantees(Mode::Landlock),
        None
    );
    let new = support(Ok(()), 7);
    assert!(new.guarantees(Mode::Landlock).unwrap().signals);
    assert_eq!(new.guarantees(Mode::Auto), new.guarantees(Mode::Namespaces));
}

#[test]
fn the_sandbox_env_is_key_value_entries_like_the_exec_env() {
    let home = Path::new("/tmp/h");
    let env = super::plan::clean_env(
        home,
        &["TERM=xterm".into(), "A=b=c".into(), "EMPTY=".into()],
    )
    .unwrap();
    assert_eq!(
        env,
        [
            "HOME=/tmp/h",
            format!("PATH={}", super::plan::SANDBOX_PATH).as_str(),
            "TMPDIR=/tmp/h",
            "LANG=C.UTF-8",
            "TERM=xterm",
            "A=b=c",
            "EMPTY=",
        ]
    );
    for bad in ["NOEQUALS", "=value", "K=a\0b"] {
        let err = super::plan::clean_env(home, &[bad.into()]).unwrap_err();
        let text = err.into_inner().unwrap().to_string();
        assert!(text.starts_with("sandbox unavailable: "), "{bad:?}: {text}");
    }
}

#[test]
fn modes_are_named_once() {
    for mode in [Mode::Auto, Mode::Namespaces, Mode::Landlock] {
        assert_eq!(Mode::from_name(mode.name()).unwrap(), mode);
    }
    let err = Mode::from_name("chroot").unwrap_err();
    assert_eq!(
        err.to_string(),
        "sandbox unavailable: mode must be \"auto\", \"namespaces\" or \"landlock\", got \"chroot\""
    );
}

/// A loopback HTTP server on the host answering every request with `hello` and keeping the
/// heads it read; never a non-loopback address.
fn loopback_server() -> (u16, std::sync::Arc<std::sync::Mutex<Vec<String>>>) {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let heads = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = std::sync::Arc::clone(&heads);
    std::thread::spawn(move || {
        for mut conn in listener.incoming().flatten() {
            let mut buf = vec![0u8; 8192];
            let mut len = 0;
            while !buf[..len].windows(4).any(|w| w == b"\r\n\r\n") && len < buf.len() {
                match conn.read(&mut buf[len..]) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => len += n,
                }
            }
            seen.lock()
                .unwrap()
                .push(String::from_utf8_lossy(&buf[..len]).into_owned());
            let _ = conn.write_all(
                b"HTTP/1.1 200 OK\r\nContent-Length: 6\r\nConnection: close\r\n\r\nhello\n",
            );
        }
    });
    (port, heads)
}

/// The descriptors of this process open on `inode` (a socket's, as `/proc/self/fd` shows it).
fn fds_on(link: &str) -> usize {
    std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .flatten()
        .filter(|e| std::fs::read_link(e.path()).is_ok_and(|l| l.to_string_lossy() == link))
        .count()
}

#[test]
fn namespaces_network_allow_goes_through_the_proxy_only() {
    if !namespaces_or_skip() || crate::exec::find_on_path("curl", "/usr/bin:/bin").is_none() {
        return;
    }
    let dir = workspace();
    let (port, heads) = loopback_server();
    let spec = Sandbox {
        // Loopback is reached only when an entry is the address, at that port.
        network_allow: Some(NetworkAllow {
            allow: vec![format!("localhost:{port}"), format!("127.0.0.1:{port}")],
            headers: vec![(
                format!("localhost:{port}"),
                "X-Token".into(),
                "from-host".into(),
            )],
        }),
        ..ns_sandbox(dir.path())
    };
    let prepared = Prepared::open(spec).unwrap();
    let events = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let sink_events = std::sync::Arc::clone(&events);
    let sink: crate::policy::EventSink =
        std::sync::Arc::new(move |e| sink_events.lock().unwrap().push(e));
    let run_with_events = |command: &str| {
        let mut execution = spawn(&ExecRequest {
            shell: Some("/bin/bash".into()),
            command: command.into(),
            cwd: "/workspace".into(),
            env: None,
            cwd_map: None,
            sandbox: Some(prepared.clone()),
            events: Some(sink.clone()),
        })
        .unwrap();
        let mut output = Vec::new();
        let outcome = execution.pump(&mut |chunk| {
            output.extend_from_slice(&chunk);
            true
        });
        (
            String::from_utf8_lossy(&output).into_owned(),
            outcome.exit_code,
        )
    };
    // Allowed by name: through the proxy, with the configured header (the shell's own replaced).
    let (out, code) = run_with_events(&format!(
        "curl -sS -H 'X-Token: from-shell' http://localhost:{port}/a"
    ));
    assert_eq!((out.as_str(), code), ("hello\n", Some(0)));
    let head = heads.lock().unwrap().pop().unwrap();
    assert!(head.starts_with("GET /a HTTP/1.1\r\n"), "{head}");
    assert!(
        head.contains("X-Token: from-host\r\n") && !head.contains("from-shell"),
        "{head}"
    );
    // An address no entry is: refused by the proxy.
    let (out, code) = run_with_events(&format!(
        "curl -sS -o /dev/null -w '%{{http_code}}' --noproxy '' http://127.0.0.2:{port}/"
    ));
    assert_eq!((out.as_str(), code), ("403", Some(0)));
    // A tunnel, and a client that ignores the proxy (no route out of the sandbox's loopback).
    let (out, code) = run_with_events(&format!(
        "curl -sS -p http://localhost:{port}/t; echo; \
         (exec 3<>/dev/tcp/127.0.0.1/{port}) 2>/dev/null && echo reached || echo refused"
    ));
    assert_eq!((out.as_str(), code), ("hello\n\nrefused\n", Some(0)));
    let got: Vec<(String, u16, Option<String>, bool)> = events
        .lock()
        .unwrap()
        .iter()
        .map(|e| match &e.target {
            crate::policy::EventTarget::Connect { host, port } => {
                (host.clone(), *port, e.rule.clone(), e.allowed)
            }
            other => panic!("{other:?}"),
        })
        .collect();
    let localhost = (
        "localhost".to_string(),
        port,
        Some(format!("localhost:{port}")),
        true,
    );
    assert_eq!(
        got,
        vec![
            localhost.clone(),
            ("127.0.0.2".to_string(), port, None, false),
            localhost
        ]
    );
    assert!(events.lock().unwrap()[1]
        .command
        .as_deref()
        .is_some_and(|c| c.contains("127.0.0.2")));
    // Dropping the sandbox stops the proxy: its threads end and its sockets close.
    let (listener, held) = {
        let plan = prepared.plan().unwrap().0;
        let proxy = plan.proxy().unwrap();
        let fd = proxy.listener_fd();
        (
            std::fs::read_link(format!("/proc/self/fd/{fd}"))
                .unwrap()
                .to_string_lossy()
                .into_owned(),
            proxy.threads_hold(),
        )
    };
    assert!(held.upgrade().is_some() && fds_on(&listener) == 1);
    drop(prepared);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while (held.upgrade().is_some() || fds_on(&listener) > 0)
        && std::time::Instant::now() < deadline
    {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert!(held.upgrade().is_none() && fds_on(&listener) == 0);
}

#[test]
fn network_allow_is_refused_where_it_cannot_be_enforced() {
    let dir = workspace();
    let allow = Some(NetworkAllow {
        allow: vec!["localhost".into()],
        headers: vec![],
    });
    let landlock = Sandbox {
        mode: Mode::Landlock,
        network_allow: allow.clone(),
        ..Sandbox::new(dir.path())
    };
    let e = Prepared::open(landlock).err().unwrap();
    assert!(
        e.to_string()
            .contains("network.allow needs namespaces mode"),
        "{e}"
    );
    let both = Sandbox {
        network: true,
        network_allow: allow,
        ..ns_sandbox(dir.path())
    };
    assert!(Prepared::open(both).is_err());
    let bad = Sandbox {
        network_allow: Some(NetworkAllow {
            allow: vec!["http://x.org".into()],
            headers: vec![],
        }),
        ..ns_sandbox(dir.path())
    };
    let e = Prepared::open(bad).err().unwrap();
    assert!(e.to_string().contains("\"http://x.org\""), "{e}");
}

#[test]
fn namespaces_network_allow_reports_a_connection_as_its_own_commands() {
    if !namespaces_or_skip() || crate::exec::find_on_path("curl", "/usr/bin:/bin").is_none() {
        return;
    }
    let dir = workspace();
    let (port, _heads) = loopback_server();
    let prepared = Prepared::open(Sandbox {
        network_allow: Some(NetworkAllow {
            allow: vec![format!("localhost:{port}"), format!("127.0.0.1:{port}")],
            headers: vec![],
        }),
        ..ns_sandbox(dir.path())
    })
    .unwrap();
    let events = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let sink_events = std::sync::Arc::clone(&events);
    let sink: crate::policy::EventSink =
        std::sync::Arc::new(move |e| sink_events.lock().unwrap().push(e));
    let start = |command: String| {
        spawn(&ExecRequest {
            shell: Some("/bin/bash".into()),
            command,
            cwd: "/workspace".into(),
            env: None,
            cwd_map: None,
            sandbox: Some(prepared.clone()),
            events: Some(sink.clone()),
        })
        .unwrap()
    };
    // The first command connects while the second (started later) runs: the event is the first's.
    let first = format!(
        "until [ -e b-started ]; do sleep 0.01; done; curl -sS http://localhost:{port}/a; touch a-done"
    );
    let second = "touch b-started; until [ -e a-done ]; do sleep 0.01; done".to_string();
    let mut a = start(first.clone());
    let mut b = start(second);
    let pump_b = std::thread::spawn(move || b.pump(&mut |_| true).exit_code);
    let mut out = Vec::new();
    let code = a.pump(&mut |chunk| {
        out.extend_from_slice(&chunk);
        true
    });
    assert_eq!((out.as_slice(), code.exit_code), (&b"hello\n"[..], Some(0)));
    assert_eq!(pump_b.join().unwrap(), Some(0));
    let events = events.lock().unwrap();
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].command.as_deref(), Some(first.as_str()));
}

#[test]
fn open_with_policy_holds_the_compiled_policy_floor_included_not_the_specs() {
    if !namespaces_or_skip() {
        return;
    }
    use crate::policy::{Policy, PolicySpec};
    let dir = workspace();
    std::fs::write(dir.path().join(".env"), "KEY=secret\n").unwrap();
    std::fs::write(dir.path().join("open.txt"), "open\n").unwrap();
    let floor = Policy::new(&PolicySpec::from_raw(Some(vec![".env".into()]), None, None));
    // A `!` line above the floor takes nothing back; the spec's own policy (denying open.txt) is
    // not the one held.
    let policy = Policy::new(&PolicySpec::from_raw(
        Some(vec!["!.env".into()]),
        None,
        None,
    ))
    .unwrap()
    .over(std::sync::Arc::new(floor.unwrap()));
    let spec = Sandbox {
        policy: PolicySpec::from_raw(Some(vec!["open.txt".into()]), None, None),
        ..ns_sandbox(dir.path())
    };
    let prepared = Prepared::open_with_policy(spec, std::sync::Arc::new(policy), None).unwrap();
    let (out, code) = run_in(&prepared, "/workspace", "cat open.txt; cat .env").unwrap();
    assert_eq!(out.lines().next(), Some("open"), "{out}");
    assert!(!out.contains("secret") && code != Some(0), "{out} {code:?}");
    // A path the sandbox cannot hold is refused when it is made, as `open_with_events` does.
    let missing = Sandbox {
        read_only: vec![dir.path().join("missing")],
        ..ns_sandbox(dir.path())
    };
    let policy = std::sync::Arc::new(Policy::new(&PolicySpec::from_raw(None, None, None)).unwrap());
    assert!(Prepared::open_with_policy(missing, policy, None).is_err());
}

/// Every face hands its sandbox options over raw; `Sandbox::from_raw` gives each its default and
/// refuses bad values with the texts the faces show.
#[test]
fn from_raw_decides_defaults_and_refusals() {
    let raw = |f: &dyn Fn(&mut RawSandbox)| {
        let mut raw = RawSandbox {
            root: "/w".into(),
            ..RawSandbox::default()
        };
        f(&mut raw);
        Sandbox::from_raw(raw)
    };
    // Nothing given: `Sandbox::new`'s defaults, the protected paths among them.
    let plain = raw(&|_| {}).unwrap();
    assert_eq!(plain, Sandbox::new("/w"));
    assert!(plain.policy.protect);
    assert_eq!(plain.runtime_root, Path::new(DEFAULT_RUNTIME_ROOT));
    let given = raw(&|r| {
        r.mode = Some("landlock".into());
        r.runtime_root = Some("/w".into());
        r.network_allow = Some(vec!["example.com".into()]);
        r.network_headers = Some(vec![vec!["example.com".into(), "X-A".into(), "1".into()]]);
        r.tmp_size = Some(1 << 20);
        r.policy = Some(crate::policy::PolicySpec::from_raw(None, None, Some(false)));
    })
    .unwrap();
    assert_eq!(given.mode, Mode::Landlock);
    assert!(!given.network && !given.policy.protect);
    assert_eq!(given.tmp_size, Some(1 << 20));
    assert_eq!(
        given.network_allow.unwrap().headers,
        [("example.com".into(), "X-A".into(), "1".into())]
    );
    let refused = |f: &dyn Fn(&mut RawSandbox)| {
        let e = raw(f).unwrap_err();
        assert_eq!(e.kind(), crate::ErrorKind::SandboxUnavailable);
        e.to_string()
    };
    assert!(refused(&|r| r.mode = Some("chroot".into()))
        .contains(r#"mode must be "auto", "namespaces" or "landlock", got "chroot""#));
    assert!(
        refused(&|r| r.network_headers = Some(vec![vec!["a".into()]]))
            .contains("network headers must be [host, name, value] triples")
    );
    assert!(
        refused(&|r| r.tmp_size = Some(-1)).contains("tmpSize must be a number of bytes, got -1")
    );
    // The mode names the faces list are the ones `from_name` takes.
    for (mode, name) in Mode::NAMES {
        assert_eq!((Mode::from_name(name).unwrap(), mode.name()), (mode, name));
    }
}
