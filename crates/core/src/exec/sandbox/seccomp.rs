//! The seccomp filter both modes install: a hand-assembled BPF program, built before the fork.
//! It refuses (EPERM) what a sandboxed shell never needs: mounting, new namespaces, tracing other
//! processes, kernel modules, bpf, perf, keyrings, kexec, reboot, swap, handle-based opens,
//! userfaultfd, io_uring (whose operations seccomp cannot see); set-id bits in any mode it sets;
//! sockets of any family `Sockets` does not allow; and, where no namespace keeps the host's
//! processes apart (Landlock mode), limits, priorities and placement of other processes and the
//! host's IPC objects. Calls whose arguments lie in memory (`clone3`, `openat2`) get ENOSYS, so the
//! C library falls back to the plain ones the filter can read.

use libc::sock_filter;

use super::bpf::{
    self, arg_high, arg_low, ret_errno, Asm, Jump, Label, ARCH_AT, AUDIT_ARCH, NR_AT, RET_ALLOW,
};

/// x32 system calls carry this bit on x86_64; the filter refuses them all rather than list twice.
#[cfg(target_arch = "x86_64")]
const X32_SYSCALL_BIT: u32 = 0x4000_0000;

/// `clone` flags creating a namespace (CLONE_NEWTIME shares its bit with the exit signal in
/// `clone`, so it can only come through `clone3` and `unshare`, which are refused whole).
const NAMESPACE_FLAGS: u32 = (libc::CLONE_NEWNS
    | libc::CLONE_NEWCGROUP
    | libc::CLONE_NEWUTS
    | libc::CLONE_NEWIPC
    | libc::CLONE_NEWUSER
    | libc::CLONE_NEWPID
    | libc::CLONE_NEWNET) as u32;

/// `kexec_file_load`'s number: the libc crate lacks it for musl on aarch64.
#[cfg(target_arch = "x86_64")]
const SYS_KEXEC_FILE_LOAD: libc::c_long = 320;
#[cfg(target_arch = "aarch64")]
const SYS_KEXEC_FILE_LOAD: libc::c_long = 294;

/// Refused outright with EPERM.
pub(super) const DENIED: &[libc::c_long] = &[
    libc::SYS_mount,
    libc::SYS_umount2,
    libc::SYS_pivot_root,
    libc::SYS_chroot,
    libc::SYS_unshare,
    libc::SYS_setns,
    libc::SYS_ptrace,
    libc::SYS_process_vm_readv,
    libc::SYS_process_vm_writev,
    libc::SYS_init_module,
    libc::SYS_finit_module,
    libc::SYS_delete_module,
    libc::SYS_bpf,
    libc::SYS_perf_event_open,
    libc::SYS_keyctl,
    libc::SYS_add_key,
    libc::SYS_request_key,
    libc::SYS_kexec_load,
    SYS_KEXEC_FILE_LOAD,
    libc::SYS_reboot,
    libc::SYS_swapon,
    libc::SYS_swapoff,
    libc::SYS_open_by_handle_at,
    libc::SYS_userfaultfd,
    libc::SYS_io_uring_setup,
    libc::SYS_io_uring_enter,
    libc::SYS_io_uring_register,
    libc::SYS_fsopen,
    libc::SYS_fsconfig,
    libc::SYS_fsmount,
    libc::SYS_fspick,
    libc::SYS_move_mount,
    libc::SYS_open_tree,
    libc::SYS_mount_setattr,
    libc::SYS_acct,
    libc::SYS_quotactl,
];

/// `setxattrat` and `removexattrat` (Linux 6.13), one number on every architecture.
pub(super) const SYS_SETXATTRAT: libc::c_long = 463;
pub(super) const SYS_REMOVEXATTRAT: libc::c_long = 466;
/// Every call that changes an xattr (ACLs included): Landlock governs none. The notification handler
/// performs them beneath the writable paths; without it, a root caller's shell (which owns the
/// host's system files) gets none.
pub(super) const XATTR_CALLS: &[libc::c_long] = &[
    libc::SYS_setxattr,
    libc::SYS_lsetxattr,
    libc::SYS_fsetxattr,
    libc::SYS_removexattr,
    libc::SYS_lremovexattr,
    libc::SYS_fremovexattr,
    SYS_SETXATTRAT,
    SYS_REMOVEXATTRAT,
];
/// The setuid and setgid bits of a mode: refused in every mode and for every caller, since a
/// set-id file left in the workspace (or any writable path) serves processes outside the sandbox
/// (inside, no_new_privs voids it). Ordinary modes stay (npm, tar and `cp -p` need them).
const SET_ID_BITS: u32 = libc::S_ISUID | libc::S_ISGID;
/// `fchmodat2` (Linux 6.6), one number on every architecture.
const SYS_FCHMODAT2: libc::c_long = 452;
/// `open` flags under which the mode argument is used: `O_CREAT`, and `O_TMPFILE`'s own bit
/// (`O_TMPFILE` is it plus `O_DIRECTORY`).
const CREATE_FLAGS: u32 = (libc::O_CREAT | (libc::O_TMPFILE & !libc::O_DIRECTORY)) as u32;
/// `setpriority`'s `PRIO_USER` and `ioprio_set`'s `IOPRIO_WHO_USER`: every process of a user.
const PRIO_USER: u32 = 2;
const IOPRIO_WHO_USER: u32 = 3;
/// System V IPC and POSIX message queues: host objects Landlock does not govern (namespaces mode
/// gives each command its own IPC namespace instead).
const HOST_IPC_CALLS: &[libc::c_long] = &[
    libc::SYS_shmget,
    libc::SYS_shmat,
    libc::SYS_shmctl,
    libc::SYS_shmdt,
    libc::SYS_semget,
    libc::SYS_semop,
    libc::SYS_semtimedop,
    libc::SYS_semctl,
    libc::SYS_msgget,
    libc::SYS_msgsnd,
    libc::SYS_msgrcv,
    libc::SYS_msgctl,
    libc::SYS_mq_open,
    libc::SYS_mq_unlink,
];

/// The socket families a sandbox may create (`socket`); `socketpair` is `AF_UNIX` only.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Sockets {
    /// Namespaces mode: local sockets, IP (the host's network, or only a private loopback) and
    /// netlink (route queries, which `getaddrinfo` makes). Never `AF_VSOCK` or any other family
    /// a network namespace does not isolate.
    Isolated,
    /// Landlock mode with network: IP and netlink, no `AF_UNIX` (Landlock cannot stop a connect to
    /// a host socket it can name, like `/run/docker.sock`).
    NoUnix,
    /// Landlock mode without network: none.
    None,
}

impl Sockets {
    fn families(self) -> &'static [u32] {
        const UNIX: u32 = libc::AF_UNIX as u32;
        const INET: u32 = libc::AF_INET as u32;
        const INET6: u32 = libc::AF_INET6 as u32;
        const NETLINK: u32 = libc::AF_NETLINK as u32;
        match self {
            Sockets::Isolated => &[UNIX, INET, INET6, NETLINK],
            Sockets::NoUnix => &[INET, INET6, NETLINK],
            Sockets::None => &[],
        }
    }
}

/// What the filter is built for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Options {
    pub(super) sockets: Sockets,
    /// No PID or IPC namespace keeps the host's processes and IPC objects apart (Landlock mode):
    /// resource limits, priorities and CPU placement apply to the caller only, and host IPC
    /// objects are out of reach.
    pub(super) shares_processes: bool,
    /// Refuse xattr changes (Landlock mode with a root caller).
    pub(super) deny_xattrs: bool,
}

/// What the filter answers for one system call.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Rule {
    /// EPERM.
    Deny,
    /// ENOSYS: the caller falls back to a call whose arguments the filter can read.
    NoSys,
    /// Allowed when the check passes, EPERM when not.
    Check(Check),
}

/// A check of a call's arguments (indices count from 0).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Check {
    /// `clone`'s flags create no namespace.
    NoNamespaces,
    /// The mode in argument `mode` has no set-id bit.
    NoSetId { mode: u32 },
    /// A created file (flags in argument `flags` hold a `CREATE_FLAGS` bit) gets no set-id bit.
    NoSetIdCreate { flags: u32, mode: u32 },
    /// Argument 0 is one of the families.
    Family(&'static [u32]),
    /// Argument `pid` is 0: the caller itself.
    Caller { pid: u32 },
    /// `prlimit64`: the caller's own limits, or only reading another's (a NULL new limit).
    OwnLimits,
    /// `setpriority` / `ioprio_set`: `who` (argument 1) is 0, the caller or its group, and `which`
    /// (argument 0) is not `user` (every process of the caller's user).
    OwnPriority { user: u32 },
}

/// Every rule of the filter, by system call number.
fn rules(options: Options) -> Vec<(libc::c_long, Rule)> {
    let mut rules: Vec<(libc::c_long, Rule)> = DENIED.iter().map(|&nr| (nr, Rule::Deny)).collect();
    if options.deny_xattrs {
        rules.extend(XATTR_CALLS.iter().map(|&nr| (nr, Rule::Deny)));
    }
    // clone3 and openat2 pass their flags and modes in memory the filter cannot read: ENOSYS makes
    // the C library fall back to clone and openat, whose arguments it can.
    rules.push((libc::SYS_clone3, Rule::NoSys));
    rules.push((libc::SYS_openat2, Rule::NoSys));
    rules.push((libc::SYS_clone, Rule::Check(Check::NoNamespaces)));
    let no_set_id = |mode| Rule::Check(Check::NoSetId { mode });
    let create = |flags, mode| Rule::Check(Check::NoSetIdCreate { flags, mode });
    #[cfg(target_arch = "x86_64")]
    rules.extend([
        (libc::SYS_chmod, no_set_id(1)),
        (libc::SYS_creat, no_set_id(1)),
        (libc::SYS_mkdir, no_set_id(1)),
        (libc::SYS_mknod, no_set_id(1)),
        (libc::SYS_open, create(1, 2)),
    ]);
    rules.extend([
        (libc::SYS_fchmod, no_set_id(1)),
        (libc::SYS_fchmodat, no_set_id(2)),
        (SYS_FCHMODAT2, no_set_id(2)),
        (libc::SYS_mkdirat, no_set_id(2)),
        (libc::SYS_mknodat, no_set_id(2)),
        (libc::SYS_openat, create(2, 3)),
        (
            libc::SYS_socket,
            Rule::Check(Check::Family(options.sockets.families())),
        ),
        (
            libc::SYS_socketpair,
            Rule::Check(Check::Family(&[libc::AF_UNIX as u32])),
        ),
    ]);
    if options.shares_processes {
        let caller = Rule::Check(Check::Caller { pid: 0 });
        rules.extend([
            (libc::SYS_prlimit64, Rule::Check(Check::OwnLimits)),
            (
                libc::SYS_setpriority,
                Rule::Check(Check::OwnPriority { user: PRIO_USER }),
            ),
            (
                libc::SYS_ioprio_set,
                Rule::Check(Check::OwnPriority {
                    user: IOPRIO_WHO_USER,
                }),
            ),
            (libc::SYS_sched_setaffinity, caller),
            (libc::SYS_sched_setscheduler, caller),
            (libc::SYS_sched_setparam, caller),
            (libc::SYS_sched_setattr, caller),
        ]);
        rules.extend(HOST_IPC_CALLS.iter().map(|&nr| (nr, Rule::Deny)));
    }
    rules
}

/// A check's instructions, each path ending in its own return. Every argument the
/// kernel reads as an `int` is checked in its low 32 bits; a pointer in both halves.
fn body(asm: &mut Asm, check: Check) {
    let (allow, deny) = (asm.label(), asm.label());
    match check {
        Check::NoNamespaces => {
            asm.load(arg_low(0));
            asm.jset(NAMESPACE_FLAGS, deny, Jump::Next);
        }
        Check::NoSetId { mode } => {
            asm.load(arg_low(mode));
            asm.jset(SET_ID_BITS, deny, Jump::Next);
        }
        Check::NoSetIdCreate { flags, mode } => {
            asm.load(arg_low(flags));
            asm.jset(CREATE_FLAGS, Jump::Next, allow);
            asm.load(arg_low(mode));
            asm.jset(SET_ID_BITS, deny, Jump::Next);
        }
        Check::Family(families) => {
            asm.load(arg_low(0));
            for &family in families {
                asm.jeq(family, allow, Jump::Next);
            }
            // No family matched: DENY before ALLOW.
            asm.ret(DENY);
            asm.place(allow);
            asm.ret(RET_ALLOW);
            return;
        }
        Check::Caller { pid } => {
            asm.load(arg_low(pid));
            asm.jeq(0, Jump::Next, deny);
        }
        Check::OwnLimits => {
            asm.load(arg_low(0));
            asm.jeq(0, allow, Jump::Next);
            asm.load(arg_low(2));
            asm.jeq(0, Jump::Next, deny);
            asm.load(arg_high(2));
            asm.jeq(0, Jump::Next, deny);
        }
        Check::OwnPriority { user } => {
            asm.load(arg_low(1));
            asm.jeq(0, Jump::Next, deny);
            asm.load(arg_low(0));
            asm.jeq(user, deny, Jump::Next);
        }
    }
    asm.place(allow);
    asm.ret(RET_ALLOW);
    asm.place(deny);
    asm.ret(DENY);
}

const DENY: u32 = ret_errno(libc::EPERM);

/// The filter program: the architecture, then each rule's system call in turn, then the checks.
pub(super) fn program(options: Options) -> Result<Vec<sock_filter>, bpf::Error> {
    let mut asm = Asm::new();
    let (deny, no_sys) = (asm.label(), asm.label());
    asm.load(ARCH_AT);
    asm.jeq(AUDIT_ARCH, Jump::Next, deny);
    asm.load(NR_AT);
    #[cfg(target_arch = "x86_64")]
    asm.jump(bpf::JGE_K, X32_SYSCALL_BIT, deny, Jump::Next);
    // Each distinct check once, with its label.
    let mut checks: Vec<(Check, Label)> = Vec::new();
    for (nr, rule) in rules(options) {
        let target = match rule {
            Rule::Deny => deny,
            Rule::NoSys => no_sys,
            Rule::Check(check) => match checks.iter().find(|(c, _)| *c == check) {
                Some(&(_, label)) => label,
                None => {
                    let label = asm.label();
                    checks.push((check, label));
                    label
                }
            },
        };
        asm.jeq(nr as u32, target, Jump::Next);
    }
    asm.ret(RET_ALLOW);
    asm.place(deny);
    asm.ret(DENY);
    asm.place(no_sys);
    asm.ret(ret_errno(libc::ENOSYS));
    for (check, label) in checks {
        asm.place(label);
        body(&mut asm, check);
    }
    asm.finish()
}
