//! A kernel-side relay, measured against the proxy's splice relay (`measure_relay`) and not
//! used by it: on this kernel it moved a loopback download at a third to two thirds of splice's
//! rate (bench/NOTES.md, 2026-12-05 03:50).
//!
//! A BPF sockmap (`BPF_MAP_TYPE_SOCKHASH`) and an `SK_SKB` verdict program
//! (`BPF_SK_SKB_VERDICT`) hand each segment arriving on a linked source socket to its target
//! socket (`bpf_sk_redirect_hash`): to the target's send path, or with `ingress` onto its receive
//! queue. Two maps: `sources` (the program is attached to it: the sockets whose incoming bytes are
//! redirected, keyed by their own socket cookie) and `targets` (no program: where each source's
//! bytes go, keyed by the source's cookie). Needs CAP_BPF and CAP_NET_ADMIN. No libbpf: the
//! program is eleven hand-assembled instructions.

use std::io;
use std::net::TcpStream;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// Sockets each map holds at most (a measurement links a few).
const MAX_LINKED: u32 = 64;

const BPF_MAP_CREATE: libc::c_long = 0;
const BPF_MAP_UPDATE_ELEM: libc::c_long = 2;
const BPF_MAP_DELETE_ELEM: libc::c_long = 3;
const BPF_PROG_LOAD: libc::c_long = 5;
const BPF_PROG_ATTACH: libc::c_long = 8;
const BPF_MAP_TYPE_SOCKHASH: u32 = 18;
const BPF_PROG_TYPE_SK_SKB: u32 = 14;
const BPF_SK_SKB_VERDICT: u32 = 38;
const BPF_NOEXIST: u64 = 1;
const BPF_F_INGRESS: i32 = 1;
/// `SO_COOKIE` (asm-generic; the same on x86-64 and arm64).
const SO_COOKIE: libc::c_int = 57;

/// `union bpf_attr`, as large as the kernel's; each command's fields are written at their
/// offsets.
#[repr(C, align(8))]
struct Attr([u8; 128]);

impl Attr {
    fn new() -> Attr {
        Attr([0; 128])
    }
    fn u32(&mut self, at: usize, v: u32) -> &mut Attr {
        self.0[at..at + 4].copy_from_slice(&v.to_ne_bytes());
        self
    }
    fn u64(&mut self, at: usize, v: u64) -> &mut Attr {
        self.0[at..at + 8].copy_from_slice(&v.to_ne_bytes());
        self
    }
}

fn bpf(cmd: libc::c_long, attr: &mut Attr) -> io::Result<libc::c_long> {
    // SAFETY: `attr` is a zero-filled `bpf_attr`-sized buffer with the command's fields set; the
    // pointers in it point to memory the caller keeps alive across the call.
    let r = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            cmd,
            attr.0.as_mut_ptr(),
            size_of::<Attr>() as libc::c_uint,
        )
    };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

fn owned(r: libc::c_long) -> OwnedFd {
    // SAFETY: `r` is a descriptor the kernel just returned (a map or a program), owned by nobody
    // else.
    unsafe { OwnedFd::from_raw_fd(r as RawFd) }
}

/// One `struct bpf_insn`.
const fn insn(code: u8, dst: u8, src: u8, off: i16, imm: i32) -> u64 {
    (code as u64)
        | (((dst & 0xf) | ((src & 0xf) << 4)) as u64) << 8
        | ((off as u16) as u64) << 16
        | ((imm as u32) as u64) << 32
}

/// `key = bpf_get_socket_cookie(skb); return bpf_sk_redirect_hash(skb, targets, &key, flags)`.
/// No target: the segment is dropped, which linking the target before the source rules out.
fn program(targets: RawFd, flags: i32) -> [u64; 11] {
    const MOV64_X: u8 = 0xbf; // BPF_ALU64 | BPF_MOV | BPF_X
    const MOV64_K: u8 = 0xb7; // BPF_ALU64 | BPF_MOV | BPF_K
    const ADD64_K: u8 = 0x07; // BPF_ALU64 | BPF_ADD | BPF_K
    const STX_DW: u8 = 0x7b; // BPF_STX | BPF_MEM | BPF_DW
    const LD_IMM64: u8 = 0x18; // BPF_LD | BPF_IMM | BPF_DW
    const CALL: u8 = 0x85; // BPF_JMP | BPF_CALL
    const EXIT: u8 = 0x95; // BPF_JMP | BPF_EXIT
    const PSEUDO_MAP_FD: u8 = 1;
    const GET_SOCKET_COOKIE: i32 = 46;
    const SK_REDIRECT_HASH: i32 = 72;
    [
        insn(MOV64_X, 6, 1, 0, 0),                    // r6 = skb
        insn(CALL, 0, 0, 0, GET_SOCKET_COOKIE),       // r0 = the receiving socket's cookie
        insn(STX_DW, 10, 0, -8, 0),                   // *(u64 *)(fp - 8) = r0
        insn(MOV64_X, 1, 6, 0, 0),                    // r1 = skb
        insn(LD_IMM64, 2, PSEUDO_MAP_FD, 0, targets), // r2 = &targets
        insn(0, 0, 0, 0, 0),                          //   (its upper half)
        insn(MOV64_X, 3, 10, 0, 0),                   // r3 = fp
        insn(ADD64_K, 3, 0, 0, -8),                   // r3 = &key
        insn(MOV64_K, 4, 0, 0, flags),                // r4 = flags
        insn(CALL, 0, 0, 0, SK_REDIRECT_HASH),
        insn(EXIT, 0, 0, 0, 0),
    ]
}

fn sockhash() -> io::Result<OwnedFd> {
    let mut attr = Attr::new();
    attr.u32(0, BPF_MAP_TYPE_SOCKHASH)
        .u32(4, 8) // key: a socket cookie
        .u32(8, 8) // value: a descriptor (its u64 form)
        .u32(12, MAX_LINKED);
    bpf(BPF_MAP_CREATE, &mut attr).map(owned)
}

/// A program and its two maps; dropping it frees them (the kernel unlinks what is left).
pub(super) struct Kernel {
    sources: OwnedFd,
    targets: OwnedFd,
    _program: OwnedFd,
}

impl Kernel {
    /// Loads the program (to the targets' receive queues with `ingress`, else their send path).
    pub(super) fn load(ingress: bool) -> io::Result<Kernel> {
        let sources = sockhash()?;
        let targets = sockhash()?;
        let flags = if ingress { BPF_F_INGRESS } else { 0 };
        let insns = program(targets.as_raw_fd(), flags);
        let license = b"GPL\0";
        let mut attr = Attr::new();
        attr.u32(0, BPF_PROG_TYPE_SK_SKB)
            .u32(4, insns.len() as u32)
            .u64(8, insns.as_ptr() as u64)
            .u64(16, license.as_ptr() as u64);
        let program = bpf(BPF_PROG_LOAD, &mut attr).map(owned)?;
        let mut attr = Attr::new();
        attr.u32(0, sources.as_raw_fd() as u32)
            .u32(4, program.as_raw_fd() as u32)
            .u32(8, BPF_SK_SKB_VERDICT);
        bpf(BPF_PROG_ATTACH, &mut attr)?;
        Ok(Kernel {
            sources,
            targets,
            _program: program,
        })
    }

    fn update(&self, map: &OwnedFd, key: u64, sock: RawFd) -> io::Result<()> {
        let value = sock as u64;
        let mut attr = Attr::new();
        attr.u32(0, map.as_raw_fd() as u32)
            .u64(8, &key as *const u64 as u64)
            .u64(16, &value as *const u64 as u64)
            .u64(24, BPF_NOEXIST);
        bpf(BPF_MAP_UPDATE_ELEM, &mut attr).map(drop)
    }

    fn delete(&self, map: &OwnedFd, key: u64) {
        let mut attr = Attr::new();
        attr.u32(0, map.as_raw_fd() as u32)
            .u64(8, &key as *const u64 as u64);
        let _ = bpf(BPF_MAP_DELETE_ELEM, &mut attr);
    }

    /// From now on, bytes arriving on `source` go to `target` in the kernel; bytes already
    /// queued on `source` too (see `kick`).
    pub(super) fn link(&self, source: &TcpStream, target: &TcpStream) -> io::Result<Link<'_>> {
        let key = cookie(source.as_raw_fd())?;
        self.update(&self.targets, key, target.as_raw_fd())?;
        if let Err(e) = self.update(&self.sources, key, source.as_raw_fd()) {
            self.delete(&self.targets, key);
            return Err(e);
        }
        kick(source.as_raw_fd());
        Ok(Link { kernel: self, key })
    }
}

/// A linked source; dropping it unlinks (the source first, so no segment finds its target
/// gone).
pub(super) struct Link<'a> {
    kernel: &'a Kernel,
    key: u64,
}

impl Drop for Link<'_> {
    fn drop(&mut self) {
        self.kernel.delete(&self.kernel.sources, self.key);
        self.kernel.delete(&self.kernel.targets, self.key);
    }
}

fn cookie(fd: RawFd) -> io::Result<u64> {
    let mut value = 0u64;
    let mut len = size_of::<u64>() as libc::socklen_t;
    // SAFETY: an 8-byte buffer and its length.
    let r = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            SO_COOKIE,
            (&mut value as *mut u64).cast(),
            &mut len,
        )
    };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(value)
}

/// Runs the source's data-ready callback (now the verdict) on bytes that arrived before the
/// link, which would otherwise wait for the next segment: setting `SO_RCVLOWAT` checks the queue
/// at once (`tcp_set_rcvlowat` calls `tcp_data_ready`).
fn kick(fd: RawFd) {
    let one: libc::c_int = 1;
    // SAFETY: a c_int option value and its length.
    unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_RCVLOWAT,
            (&one as *const libc::c_int).cast(),
            size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
}
