//! The seccomp filter both modes install: a hand-assembled BPF program, built before the fork.
//! It refuses (EPERM) what a sandboxed shell never needs: mounting, new namespaces, tracing other
//! processes, kernel modules, bpf, perf, keyrings, kexec, reboot, swap, handle-based opens,
//! userfaultfd, io_uring (whose operations seccomp cannot see), and `socket` of the families
//! `Sockets` names (`socketpair` stays: pipes between the shell's own processes).

use libc::sock_filter;

pub(super) const RET_ALLOW: u32 = 0x7fff_0000;
const RET_ERRNO: u32 = 0x0005_0000;
const LD_W_ABS: u16 = (libc::BPF_LD | libc::BPF_W | libc::BPF_ABS) as u16;
const JEQ_K: u16 = (libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K) as u16;
const JGE_K: u16 = (libc::BPF_JMP | libc::BPF_JGE | libc::BPF_K) as u16;
const JSET_K: u16 = (libc::BPF_JMP | libc::BPF_JSET | libc::BPF_K) as u16;
const RET_K: u16 = (libc::BPF_RET | libc::BPF_K) as u16;
/// Offsets in `struct seccomp_data`: nr (u32), arch (u32), instruction pointer (u64), args (u64 × 6).
const NR_AT: u32 = 0;
const ARCH_AT: u32 = 4;
/// The low 32 bits of the first argument (clone's flags, socket's family).
const ARG0_LOW_AT: u32 = if cfg!(target_endian = "little") {
    16
} else {
    20
};

#[cfg(target_arch = "x86_64")]
pub(super) const AUDIT_ARCH: u32 = 0xc000_003e;
#[cfg(target_arch = "aarch64")]
pub(super) const AUDIT_ARCH: u32 = 0xc000_00b7;
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

/// Where a jump goes: resolved to a relative offset once the program is laid out.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Label {
    Next,
    /// Skip the next instruction (BPF only jumps forward: checks keep their own returns).
    SkipOne,
    Deny,
    NoSys,
    CloneCheck,
    SocketCheck,
    ModeArg1,
    ModeArg2,
    Allow,
}

fn stmt(code: u16, k: u32) -> (sock_filter, Label, Label) {
    (
        sock_filter {
            code,
            jt: 0,
            jf: 0,
            k,
        },
        Label::Next,
        Label::Next,
    )
}

fn jump(code: u16, k: u32, jt: Label, jf: Label) -> (sock_filter, Label, Label) {
    (
        sock_filter {
            code,
            jt: 0,
            jf: 0,
            k,
        },
        jt,
        jf,
    )
}

/// In Landlock mode a root caller's shell owns the host's system files, and Landlock governs
/// no modes: the filter refuses setuid/setgid bits in a mode (which would serve processes outside
/// the sandbox: no_new_privs voids them inside). Other metadata (modes, owners, times, xattrs and
/// ACLs) outside the writable areas is refused by the user-notification filter of `notify.rs`.
/// The setuid and setgid bits of a mode.
const SET_ID_BITS: u32 = libc::S_ISUID | libc::S_ISGID;
/// `fchmodat2` (Linux 6.6), one number on every architecture.
const SYS_FCHMODAT2: libc::c_long = 452;
/// Mode-setting calls whose mode is the second argument.
#[cfg(target_arch = "x86_64")]
const MODE_IN_ARG1: &[libc::c_long] = &[libc::SYS_chmod, libc::SYS_fchmod];
#[cfg(target_arch = "aarch64")]
const MODE_IN_ARG1: &[libc::c_long] = &[libc::SYS_fchmod];
/// Mode-setting calls whose mode is the third argument.
const MODE_IN_ARG2: &[libc::c_long] = &[libc::SYS_fchmodat, SYS_FCHMODAT2];
/// The low 32 bits of the second and third arguments.
const ARG1_LOW_AT: u32 = ARG0_LOW_AT + 8;
const ARG2_LOW_AT: u32 = ARG0_LOW_AT + 16;

/// Which `socket` families the filter refuses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Sockets {
    /// None (namespaces mode: the network namespace and the bare filesystem isolate).
    AllowAll,
    /// `AF_UNIX` only: Landlock cannot stop a connect to a host socket it can name
    /// (`/run/docker.sock`), so none is created; TCP/UDP stay for a shared network.
    DenyUnix,
    /// Every family (Landlock mode without network).
    DenyAll,
}

/// The filter program; `guard_permissions` adds the set-id mode refusals.
pub(super) fn program(sockets: Sockets, guard_permissions: bool) -> Vec<sock_filter> {
    let mut code = vec![
        stmt(LD_W_ABS, ARCH_AT),
        jump(JEQ_K, AUDIT_ARCH, Label::Next, Label::Deny),
        stmt(LD_W_ABS, NR_AT),
    ];
    #[cfg(target_arch = "x86_64")]
    code.push(jump(JGE_K, X32_SYSCALL_BIT, Label::Deny, Label::Next));
    #[cfg(not(target_arch = "x86_64"))]
    let _ = JGE_K;
    for &nr in DENIED {
        code.push(jump(JEQ_K, nr as u32, Label::Deny, Label::Next));
    }
    if guard_permissions {
        for &nr in MODE_IN_ARG1 {
            code.push(jump(JEQ_K, nr as u32, Label::ModeArg1, Label::Next));
        }
        for &nr in MODE_IN_ARG2 {
            code.push(jump(JEQ_K, nr as u32, Label::ModeArg2, Label::Next));
        }
    }
    // clone3 passes its flags in memory the filter cannot read: ENOSYS makes the C library
    // fall back to clone, whose flags it can.
    code.push(jump(
        JEQ_K,
        libc::SYS_clone3 as u32,
        Label::NoSys,
        Label::Next,
    ));
    code.push(jump(
        JEQ_K,
        libc::SYS_clone as u32,
        Label::CloneCheck,
        Label::Next,
    ));
    if sockets != Sockets::AllowAll {
        code.push(jump(
            JEQ_K,
            libc::SYS_socket as u32,
            Label::SocketCheck,
            Label::Next,
        ));
    }
    let mut labels = vec![(Label::Allow, code.len())];
    code.push(stmt(RET_K, RET_ALLOW));
    labels.push((Label::Deny, code.len()));
    code.push(stmt(RET_K, RET_ERRNO | libc::EPERM as u32));
    labels.push((Label::NoSys, code.len()));
    code.push(stmt(RET_K, RET_ERRNO | libc::ENOSYS as u32));
    labels.push((Label::CloneCheck, code.len()));
    code.push(stmt(LD_W_ABS, ARG0_LOW_AT));
    code.push(jump(JSET_K, NAMESPACE_FLAGS, Label::SkipOne, Label::Next));
    code.push(stmt(RET_K, RET_ALLOW));
    code.push(stmt(RET_K, RET_ERRNO | libc::EPERM as u32));
    if guard_permissions {
        for (label, at) in [
            (Label::ModeArg1, ARG1_LOW_AT),
            (Label::ModeArg2, ARG2_LOW_AT),
        ] {
            labels.push((label, code.len()));
            code.push(stmt(LD_W_ABS, at));
            code.push(jump(JSET_K, SET_ID_BITS, Label::SkipOne, Label::Next));
            code.push(stmt(RET_K, RET_ALLOW));
            code.push(stmt(RET_K, RET_ERRNO | libc::EPERM as u32));
        }
    }
    match sockets {
        Sockets::AllowAll => {}
        Sockets::DenyUnix => {
            labels.push((Label::SocketCheck, code.len()));
            code.push(stmt(LD_W_ABS, ARG0_LOW_AT));
            code.push(jump(
                JEQ_K,
                libc::AF_UNIX as u32,
                Label::SkipOne,
                Label::Next,
            ));
            code.push(stmt(RET_K, RET_ALLOW));
            code.push(stmt(RET_K, RET_ERRNO | libc::EPERM as u32));
        }
        Sockets::DenyAll => {
            labels.push((Label::SocketCheck, code.len()));
            code.push(stmt(RET_K, RET_ERRNO | libc::EPERM as u32));
        }
    }
    let at = |label: Label, from: usize| -> u8 {
        match label {
            Label::Next => return 0,
            Label::SkipOne => return 1,
            _ => {}
        }
        let target = labels
            .iter()
            .find(|(l, _)| *l == label)
            .map(|(_, at)| *at)
            .expect("every label is placed");
        u8::try_from(target - from - 1).expect("BPF jumps reach at most 255 instructions")
    };
    code.iter()
        .enumerate()
        .map(|(i, (filter, jt, jf))| sock_filter {
            jt: at(*jt, i),
            jf: at(*jf, i),
            ..*filter
        })
        .collect()
}
