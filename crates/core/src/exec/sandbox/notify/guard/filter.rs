//! The guard's block of the notification filter: the calls it must see.

use super::super::super::bpf::{arg_low, Asm, Jump, NR_AT, RET_USER_NOTIF};
use super::WRITE_FLAGS;

/// The calls the guard answers, with their number.
#[cfg(target_arch = "x86_64")]
pub(super) const NAME_CALLS: &[libc::c_long] = &[
    libc::SYS_creat,
    libc::SYS_rename,
    libc::SYS_renameat,
    libc::SYS_renameat2,
    libc::SYS_link,
    libc::SYS_linkat,
    libc::SYS_symlink,
    libc::SYS_symlinkat,
    libc::SYS_unlink,
    libc::SYS_unlinkat,
    libc::SYS_rmdir,
    libc::SYS_mkdir,
    libc::SYS_mkdirat,
    libc::SYS_mknod,
    libc::SYS_mknodat,
    libc::SYS_truncate,
    libc::SYS_bind,
];
#[cfg(target_arch = "aarch64")]
pub(super) const NAME_CALLS: &[libc::c_long] = &[
    libc::SYS_renameat2,
    libc::SYS_linkat,
    libc::SYS_symlinkat,
    libc::SYS_unlinkat,
    libc::SYS_mkdirat,
    libc::SYS_mknodat,
    libc::SYS_truncate,
    libc::SYS_bind,
];
/// The open calls, with the index of their flags argument.
#[cfg(target_arch = "x86_64")]
pub(super) const OPEN_CALLS: &[(libc::c_long, u32)] = &[(libc::SYS_open, 1), (libc::SYS_openat, 2)];
#[cfg(target_arch = "aarch64")]
pub(super) const OPEN_CALLS: &[(libc::c_long, u32)] = &[(libc::SYS_openat, 2)];

/// What the filter must send the guard: write opens and name changes, and with `reads` every
/// open.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::exec) struct Filter {
    /// `denyRead` has rules: reads are checked too.
    pub(in crate::exec) reads: bool,
}

/// The guard's block of the notification program (`notify::program`), which it enters with the
/// call's number loaded: the name calls and the opens the guard must see are notified; every
/// other call falls through with the number loaded again, as the block found it.
pub(in crate::exec::sandbox::notify) fn block(asm: &mut Asm, filter: Filter) {
    let (notify, restore, end) = (asm.label(), asm.label(), asm.label());
    for &nr in NAME_CALLS {
        asm.jeq(nr as u32, notify, Jump::Next);
    }
    let checks: Vec<_> = OPEN_CALLS.iter().map(|_| asm.label()).collect();
    for (&(nr, _), &check) in OPEN_CALLS.iter().zip(&checks) {
        asm.jeq(nr as u32, check, Jump::Next);
    }
    asm.goto(end);
    for (&(_, flags), &check) in OPEN_CALLS.iter().zip(&checks) {
        asm.place(check);
        asm.load(arg_low(flags));
        // O_PATH opens neither read nor write (the kernel ignores the other flags), and their
        // descriptors cannot be handed over (ADDFD takes no O_PATH file): the kernel's.
        asm.jset(libc::O_PATH as u32, restore, Jump::Next);
        match filter.reads {
            true => asm.goto(notify),
            false => asm.jset(WRITE_FLAGS, notify, Jump::Next),
        }
        asm.goto(restore);
    }
    asm.place(notify);
    asm.ret(RET_USER_NOTIF);
    asm.place(restore);
    asm.load(NR_AT);
    asm.place(end);
}
