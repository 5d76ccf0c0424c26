//! The `--listen` token, kept from the commands the server runs (docs/protocol.md, "Secrets").
//!
//! Commands without `--sandbox` run as the server's user, so the server keeps nothing they could
//! read back as the token: the process is non-dumpable from the start (its `/proc/PID/mem` and
//! `environ` are closed to its own user, and its forks, the exec supervisors, inherit that); the
//! token is read straight from the initial environment block and blanked there (what
//! `/proc/PID/environ` shows, which `unsetenv` leaves alone), then removed from the environment;
//! and only its SHA-256 digest is kept, so even a root command reading the server's memory finds no
//! token to present.

use std::ffi::{c_char, CStr};

use sha2::{Digest, Sha256};

pub const TOKEN_VAR: &str = "PI_NATIVE_OPS_TOKEN";

/// Stack bytes overwritten after hashing a token: well beyond the hash's frames (its state and a
/// 64-byte block, a few hundred bytes), which would otherwise keep the token's last bytes.
const STACK_SCRUB_BYTES: usize = 16 << 10;

extern "C" {
    /// The C library's environment: NUL-terminated `NAME=value` strings, then a null pointer.
    static mut environ: *mut *mut c_char;
}

/// What the server keeps of the token: its SHA-256.
#[derive(Clone, Copy)]
pub struct TokenDigest([u8; 32]);

impl TokenDigest {
    fn of(token: &[u8]) -> TokenDigest {
        TokenDigest(Sha256::digest(token).into())
    }

    /// Whether `given` is the token. Digests are compared without an early exit, and hashing
    /// hides even the length of the token.
    pub fn matches(&self, given: &[u8]) -> bool {
        let given = Self::of(given);
        scrub_stack();
        let diff = given
            .0
            .iter()
            .zip(&self.0)
            .fold(0u8, |acc, (a, b)| acc | (a ^ b));
        std::hint::black_box(diff) == 0
    }
}

/// Whether `token` can travel in both the Authorization header and a Sec-WebSocket-Protocol
/// entry.
pub fn token_is_valid(token: &[u8]) -> bool {
    !token.is_empty()
        && token
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || b"._~-".contains(b))
}

/// Makes the process non-dumpable (Linux): its `/proc/PID/{mem,environ,...}` belong to root and
/// ptrace needs CAP_SYS_PTRACE, so a command running as the server's user cannot read them. Forks
/// keep it until they exec; exec'd helpers (the sandbox's) make themselves non-dumpable.
pub fn forbid_dumps() {
    #[cfg(target_os = "linux")]
    // SAFETY: prctl with integer arguments only.
    unsafe {
        libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0)
    };
}

#[derive(Debug, PartialEq, Eq)]
pub enum TokenError {
    Missing,
    Invalid,
}

/// Takes the token out of the environment: hashes the first `PI_NATIVE_OPS_TOKEN` entry (as
/// `getenv` would find it) where it lies, blanks the value of every such entry in place, and
/// removes the variable, so neither commands nor `/proc/PID/environ` see it. Call it while the
/// process has one thread.
pub fn take_token() -> Result<TokenDigest, TokenError> {
    let name = TOKEN_VAR.as_bytes();
    let mut found: Option<Result<TokenDigest, TokenError>> = None;
    // SAFETY: one thread (our contract), so nothing changes the environment meanwhile; each entry
    // is a NUL-terminated string the C library owns (at start, in the initial environment block),
    // writable, and a value blanked with NULs keeps its terminator.
    unsafe {
        let mut entry = environ;
        while !entry.is_null() && !(*entry).is_null() {
            let bytes = CStr::from_ptr(*entry).to_bytes();
            if bytes.len() > name.len() && bytes.starts_with(name) && bytes[name.len()] == b'=' {
                let value = &bytes[name.len() + 1..];
                if found.is_none() {
                    found = Some(match value {
                        [] => Err(TokenError::Missing),
                        _ if !token_is_valid(value) => Err(TokenError::Invalid),
                        _ => Ok(TokenDigest::of(value)),
                    });
                }
                let len = value.len();
                std::ptr::write_bytes((*entry).add(name.len() + 1), 0, len);
            }
            entry = entry.add(1);
        }
    }
    scrub_stack();
    std::env::remove_var(TOKEN_VAR);
    found.unwrap_or(Err(TokenError::Missing))
}

/// Overwrites the stack below the caller's frame, where the frames of a finished hash lie.
#[inline(never)]
fn scrub_stack() {
    let mut area = [0u8; STACK_SCRUB_BYTES];
    // The zeroes must be written: the optimizer cannot know what black_box does with them.
    std::hint::black_box(&mut area);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_token_matches_its_digest() {
        let digest = TokenDigest::of(b"tok-1");
        assert!(digest.matches(b"tok-1"));
        for other in [&b"tok-2"[..], b"tok-1 ", b"", b"tok-"] {
            assert!(!digest.matches(other));
        }
        assert!(token_is_valid(b"a.B_~-9"));
        assert!(!token_is_valid(b"has space"));
        assert!(!token_is_valid(b""));
    }
}
