//! The bounded encoding of a helper's plan: fixed-width little-endian integers and length-prefixed
//! byte strings, each read checked against what is left, so a short or corrupt plan is an error,
//! never a panic or an allocation larger than the plan itself.

use std::ffi::CString;

/// Why a plan could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecodeError(pub &'static str);

impl std::fmt::Display for DecodeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "malformed helper plan: {}", self.0)
    }
}

/// Appends values to a plan.
#[derive(Default)]
pub struct Encoder {
    pub(super) bytes: Vec<u8>,
}

impl Encoder {
    pub fn u8(&mut self, v: u8) {
        self.bytes.push(v);
    }
    pub fn bool(&mut self, v: bool) {
        self.u8(u8::from(v));
    }
    pub fn u32(&mut self, v: u32) {
        self.bytes.extend_from_slice(&v.to_le_bytes());
    }
    pub fn i32(&mut self, v: i32) {
        self.bytes.extend_from_slice(&v.to_le_bytes());
    }
    pub fn u64(&mut self, v: u64) {
        self.bytes.extend_from_slice(&v.to_le_bytes());
    }
    /// A count or length. Plans are far below 4 GiB (the helper refuses more than `MAX_PLAN_BYTES`).
    pub fn len(&mut self, n: usize) {
        self.u32(u32::try_from(n).unwrap_or(u32::MAX));
    }
    pub fn bytes(&mut self, v: &[u8]) {
        self.len(v.len());
        self.bytes.extend_from_slice(v);
    }
    pub fn cstring(&mut self, v: &CString) {
        self.bytes(v.as_bytes());
    }
    pub fn cstrings(&mut self, v: &[CString]) {
        self.len(v.len());
        for s in v {
            self.cstring(s);
        }
    }
    pub fn filter(&mut self, program: &[libc::sock_filter]) {
        self.len(program.len());
        for insn in program {
            self.u32(u32::from(insn.code));
            self.u8(insn.jt);
            self.u8(insn.jf);
            self.u32(insn.k);
        }
    }
    /// The encoded plan.
    pub fn finish(self) -> Vec<u8> {
        self.bytes
    }
}

/// Reads values back from a plan, in the order they were written.
pub struct Decoder<'a> {
    rest: &'a [u8],
}

impl<'a> Decoder<'a> {
    pub fn new(bytes: &'a [u8]) -> Self {
        Decoder { rest: bytes }
    }
    fn take(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        if n > self.rest.len() {
            return Err(DecodeError("truncated"));
        }
        let (head, tail) = self.rest.split_at(n);
        self.rest = tail;
        Ok(head)
    }
    fn array<const N: usize>(&mut self) -> Result<[u8; N], DecodeError> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.take(N)?);
        Ok(out)
    }
    pub fn u8(&mut self) -> Result<u8, DecodeError> {
        Ok(self.take(1)?[0])
    }
    pub fn bool(&mut self) -> Result<bool, DecodeError> {
        match self.u8()? {
            0 => Ok(false),
            1 => Ok(true),
            _ => Err(DecodeError("a flag is neither 0 nor 1")),
        }
    }
    pub fn u32(&mut self) -> Result<u32, DecodeError> {
        Ok(u32::from_le_bytes(self.array()?))
    }
    pub fn i32(&mut self) -> Result<i32, DecodeError> {
        Ok(i32::from_le_bytes(self.array()?))
    }
    pub fn u64(&mut self) -> Result<u64, DecodeError> {
        Ok(u64::from_le_bytes(self.array()?))
    }
    /// A count of items each at least `min_item_bytes` long: never more than the rest could hold,
    /// so a corrupt count cannot make the decoder reserve more than the plan's size.
    pub fn count(&mut self, min_item_bytes: usize) -> Result<usize, DecodeError> {
        let n = self.u32()? as usize;
        if n.saturating_mul(min_item_bytes.max(1)) > self.rest.len() {
            return Err(DecodeError("a count exceeds the plan"));
        }
        Ok(n)
    }
    pub fn bytes(&mut self) -> Result<&'a [u8], DecodeError> {
        let n = self.count(1)?;
        self.take(n)
    }
    pub fn cstring(&mut self) -> Result<CString, DecodeError> {
        CString::new(self.bytes()?).map_err(|_| DecodeError("a string holds a NUL byte"))
    }
    pub fn cstrings(&mut self) -> Result<Vec<CString>, DecodeError> {
        let n = self.count(4)?;
        (0..n).map(|_| self.cstring()).collect()
    }
    pub fn filter(&mut self) -> Result<Vec<libc::sock_filter>, DecodeError> {
        /// code (u32), jt, jf, k.
        const INSN_BYTES: usize = 10;
        let n = self.count(INSN_BYTES)?;
        (0..n)
            .map(|_| {
                let code = u16::try_from(self.u32()?)
                    .map_err(|_| DecodeError("a BPF opcode exceeds 16 bits"))?;
                Ok(libc::sock_filter {
                    code,
                    jt: self.u8()?,
                    jf: self.u8()?,
                    k: self.u32()?,
                })
            })
            .collect()
    }
    /// Fails unless every byte was read: a plan of another version is refused, not half-read.
    pub fn end(&self) -> Result<(), DecodeError> {
        if self.rest.is_empty() {
            Ok(())
        } else {
            Err(DecodeError("trailing bytes"))
        }
    }
}
