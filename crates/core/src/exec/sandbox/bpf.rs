//! Classic BPF for seccomp, the one place the sandbox's filters are assembled: the instructions
//! and return values they use, where `struct seccomp_data` holds what they read, and an assembler
//! whose jumps name labels. `finish` resolves every jump and fails (never miscompiles) when one
//! names a label that was never placed, goes backward, or lies beyond what the instruction can
//! encode. Tests run the programs with `run`, an interpreter of the same instructions.

use std::fmt;

use libc::sock_filter;

/// `SECCOMP_RET_ALLOW`.
pub(super) const RET_ALLOW: u32 = 0x7fff_0000;
/// `SECCOMP_RET_USER_NOTIF`: the call waits for the listener's answer.
pub(super) const RET_USER_NOTIF: u32 = 0x7fc0_0000;
/// `SECCOMP_RET_ERRNO`: the call fails with the errno in the low 16 bits.
const RET_ERRNO: u32 = 0x0005_0000;

/// The return value that fails a call with `code`.
pub(super) const fn ret_errno(code: i32) -> u32 {
    RET_ERRNO | code as u32
}

pub(super) const LD_W_ABS: u16 = (libc::BPF_LD | libc::BPF_W | libc::BPF_ABS) as u16;
pub(super) const JEQ_K: u16 = (libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K) as u16;
// Only x86_64's filter uses it outside tests (refusing x32 calls).
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
pub(super) const JGE_K: u16 = (libc::BPF_JMP | libc::BPF_JGE | libc::BPF_K) as u16;
pub(super) const JSET_K: u16 = (libc::BPF_JMP | libc::BPF_JSET | libc::BPF_K) as u16;
const JA: u16 = (libc::BPF_JMP | libc::BPF_JA) as u16;
const RET_K: u16 = (libc::BPF_RET | libc::BPF_K) as u16;

/// Offsets in `struct seccomp_data`: nr (u32), arch (u32), instruction pointer (u64), args (u64 × 6).
pub(super) const NR_AT: u32 = 0;
pub(super) const ARCH_AT: u32 = 4;
const ARGS_AT: u32 = 16;

/// Where the low 32 bits of argument `n` (counting from 0) lie in `struct seccomp_data`.
pub(super) const fn arg_low(n: u32) -> u32 {
    ARGS_AT + 8 * n + if cfg!(target_endian = "little") { 0 } else { 4 }
}

/// Where the high 32 bits of argument `n` lie.
pub(super) const fn arg_high(n: u32) -> u32 {
    ARGS_AT + 8 * n + if cfg!(target_endian = "little") { 4 } else { 0 }
}

#[cfg(target_arch = "x86_64")]
pub(super) const AUDIT_ARCH: u32 = 0xc000_003e;
#[cfg(target_arch = "aarch64")]
pub(super) const AUDIT_ARCH: u32 = 0xc000_00b7;

/// A place in a program, made by `Asm::label` and placed once by `Asm::place`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Label(usize);

/// Where a conditional jump goes on one outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Jump {
    /// The next instruction.
    Next,
    To(Label),
}

impl From<Label> for Jump {
    fn from(label: Label) -> Jump {
        Jump::To(label)
    }
}

/// Why a program could not be assembled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Error {
    /// A jump names a label never placed.
    Unplaced(Label),
    /// A label placed twice.
    PlacedTwice(Label),
    /// A jump to a label at or before it (BPF only jumps forward).
    Backward(Label),
    /// A conditional jump over more than 255 instructions.
    TooFar(Label),
    /// More instructions than a `sock_fprog` can hold.
    TooLong(usize),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Unplaced(l) => write!(f, "BPF: a jump to label {} never placed", l.0),
            Error::PlacedTwice(l) => write!(f, "BPF: label {} placed twice", l.0),
            Error::Backward(l) => write!(f, "BPF: a backward jump to label {}", l.0),
            Error::TooFar(l) => write!(f, "BPF: a jump to label {} beyond 255 instructions", l.0),
            Error::TooLong(n) => write!(f, "BPF: {n} instructions, more than a filter holds"),
        }
    }
}

impl std::error::Error for Error {}

impl From<Error> for std::io::Error {
    fn from(e: Error) -> std::io::Error {
        std::io::Error::other(e)
    }
}

/// One instruction, its jumps still labels (for `JA`, `jt` holds the target).
struct Insn {
    code: u16,
    k: u32,
    jt: Jump,
    jf: Jump,
}

/// A program under assembly.
#[derive(Default)]
pub(super) struct Asm {
    code: Vec<Insn>,
    /// Where each label was placed (an index into `code`), by label number.
    placed: Vec<Option<usize>>,
    twice: Option<Label>,
}

impl Asm {
    pub(super) fn new() -> Asm {
        Asm::default()
    }

    /// A new label, to be placed later.
    pub(super) fn label(&mut self) -> Label {
        self.placed.push(None);
        Label(self.placed.len() - 1)
    }

    /// Places `label` at the next instruction.
    pub(super) fn place(&mut self, label: Label) {
        match self.placed.get_mut(label.0) {
            Some(at @ None) => *at = Some(self.code.len()),
            _ => self.twice = self.twice.or(Some(label)),
        }
    }

    fn push(&mut self, code: u16, k: u32, jt: Jump, jf: Jump) {
        self.code.push(Insn { code, k, jt, jf });
    }

    /// Loads the 32-bit word at `at` of `struct seccomp_data`.
    pub(super) fn load(&mut self, at: u32) {
        self.push(LD_W_ABS, at, Jump::Next, Jump::Next);
    }

    /// Returns `value` (an action).
    pub(super) fn ret(&mut self, value: u32) {
        self.push(RET_K, value, Jump::Next, Jump::Next);
    }

    /// A conditional jump (`JEQ_K`, `JGE_K`, `JSET_K`) against `k`.
    pub(super) fn jump(&mut self, code: u16, k: u32, jt: impl Into<Jump>, jf: impl Into<Jump>) {
        self.push(code, k, jt.into(), jf.into());
    }

    pub(super) fn jeq(&mut self, k: u32, jt: impl Into<Jump>, jf: impl Into<Jump>) {
        self.jump(JEQ_K, k, jt, jf);
    }

    pub(super) fn jset(&mut self, k: u32, jt: impl Into<Jump>, jf: impl Into<Jump>) {
        self.jump(JSET_K, k, jt, jf);
    }

    /// An unconditional jump.
    pub(super) fn goto(&mut self, to: Label) {
        self.push(JA, 0, Jump::To(to), Jump::Next);
    }

    /// The program, every jump resolved to its offset.
    pub(super) fn finish(self) -> Result<Vec<sock_filter>, Error> {
        if let Some(label) = self.twice {
            return Err(Error::PlacedTwice(label));
        }
        if self.code.len() > usize::from(u16::MAX) {
            return Err(Error::TooLong(self.code.len()));
        }
        // An offset counts from the instruction after the jump.
        let offset = |from: usize, jump: Jump| -> Result<usize, Error> {
            let Jump::To(label) = jump else {
                return Ok(0);
            };
            let at = self
                .placed
                .get(label.0)
                .copied()
                .flatten()
                .ok_or(Error::Unplaced(label))?;
            at.checked_sub(from + 1).ok_or(Error::Backward(label))
        };
        let short = |from: usize, jump: Jump| -> Result<u8, Error> {
            let n = offset(from, jump)?;
            u8::try_from(n).map_err(|_| match jump {
                Jump::To(label) => Error::TooFar(label),
                Jump::Next => Error::TooLong(n),
            })
        };
        let mut program = Vec::with_capacity(self.code.len());
        for (i, insn) in self.code.iter().enumerate() {
            program.push(if insn.code == JA {
                sock_filter {
                    code: JA,
                    jt: 0,
                    jf: 0,
                    k: offset(i, insn.jt)? as u32,
                }
            } else {
                sock_filter {
                    code: insn.code,
                    jt: short(i, insn.jt)?,
                    jf: short(i, insn.jf)?,
                    k: insn.k,
                }
            });
        }
        Ok(program)
    }
}

/// Runs `program` over one call of this architecture, as the kernel would: the action it returns.
#[cfg(test)]
pub(super) fn run(program: &[sock_filter], nr: libc::c_long, args: [u64; 6]) -> u32 {
    run_as(program, AUDIT_ARCH, nr, args)
}

/// `run` for a call of architecture `arch`.
#[cfg(test)]
pub(super) fn run_as(program: &[sock_filter], arch: u32, nr: libc::c_long, args: [u64; 6]) -> u32 {
    let mut data = [0u8; 64];
    data[0..4].copy_from_slice(&(nr as u32).to_ne_bytes());
    data[4..8].copy_from_slice(&arch.to_ne_bytes());
    for (i, arg) in args.iter().enumerate() {
        let at = ARGS_AT as usize + 8 * i;
        data[at..at + 8].copy_from_slice(&arg.to_ne_bytes());
    }
    let (mut pc, mut acc) = (0usize, 0u32);
    loop {
        let insn = program[pc];
        pc += 1;
        let taken = match insn.code {
            LD_W_ABS => {
                let at = insn.k as usize;
                acc = u32::from_ne_bytes(data[at..at + 4].try_into().expect("a word"));
                continue;
            }
            RET_K => return insn.k,
            JA => {
                pc += insn.k as usize;
                continue;
            }
            JEQ_K => acc == insn.k,
            JGE_K => acc >= insn.k,
            JSET_K => acc & insn.k != 0,
            other => panic!("unexpected BPF instruction {other:#x}"),
        };
        pc += usize::from(if taken { insn.jt } else { insn.jf });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jumps_resolve_to_their_labels() {
        let mut asm = Asm::new();
        let (deny, skip) = (asm.label(), asm.label());
        asm.load(NR_AT);
        asm.jeq(7, deny, Jump::Next);
        asm.jset(0x10, skip, Jump::Next);
        asm.ret(RET_ALLOW);
        asm.place(skip);
        asm.goto(deny);
        asm.ret(RET_USER_NOTIF);
        asm.place(deny);
        asm.ret(ret_errno(libc::EPERM));
        let program = asm.finish().unwrap();
        let offsets: Vec<_> = program.iter().map(|i| (i.jt, i.jf, i.k)).collect();
        assert_eq!(offsets[1], (4, 0, 7));
        assert_eq!(offsets[2], (1, 0, 0x10));
        assert_eq!(offsets[4], (0, 0, 1));
        assert_eq!(run(&program, 7, [0; 6]), ret_errno(libc::EPERM));
        assert_eq!(run(&program, 0x10, [0; 6]), ret_errno(libc::EPERM));
        assert_eq!(run(&program, 1, [0; 6]), RET_ALLOW);
    }

    #[test]
    fn a_wrong_jump_is_an_error() {
        // A label never placed.
        let mut asm = Asm::new();
        let nowhere = asm.label();
        asm.jeq(1, nowhere, Jump::Next);
        asm.ret(RET_ALLOW);
        assert_eq!(asm.finish().unwrap_err(), Error::Unplaced(nowhere));
        // Placed twice.
        let mut asm = Asm::new();
        let end = asm.label();
        asm.place(end);
        asm.ret(RET_ALLOW);
        asm.place(end);
        assert_eq!(asm.finish().unwrap_err(), Error::PlacedTwice(end));
        // Backward.
        let mut asm = Asm::new();
        let top = asm.label();
        asm.place(top);
        asm.load(NR_AT);
        asm.jeq(1, top, Jump::Next);
        asm.ret(RET_ALLOW);
        assert_eq!(asm.finish().unwrap_err(), Error::Backward(top));
        // 256 instructions between a conditional jump and its target; 255 is the most.
        for (between, fits) in [(255, true), (256, false)] {
            let mut asm = Asm::new();
            let far = asm.label();
            asm.load(NR_AT);
            asm.jeq(1, far, Jump::Next);
            for _ in 0..between {
                asm.ret(RET_ALLOW);
            }
            asm.place(far);
            asm.ret(RET_USER_NOTIF);
            match fits {
                true => assert_eq!(run(&asm.finish().unwrap(), 1, [0; 6]), RET_USER_NOTIF),
                false => assert_eq!(asm.finish().unwrap_err(), Error::TooFar(far)),
            }
        }
    }

    #[test]
    fn the_interpreter_reads_arguments_and_the_architecture() {
        let mut asm = Asm::new();
        let (foreign, high) = (asm.label(), asm.label());
        asm.load(ARCH_AT);
        asm.jeq(AUDIT_ARCH, Jump::Next, foreign);
        asm.load(arg_high(5));
        asm.jump(JGE_K, 2, high, Jump::Next);
        asm.ret(0);
        asm.place(high);
        asm.ret(1);
        asm.place(foreign);
        asm.ret(2);
        let program = asm.finish().unwrap();
        assert_eq!(run(&program, 0, [0, 0, 0, 0, 0, 1 << 33]), 1);
        assert_eq!(run(&program, 0, [0, 0, 0, 0, 0, 1 << 32]), 0);
        assert_eq!(run_as(&program, 0, 0, [0; 6]), 2);
    }
}
