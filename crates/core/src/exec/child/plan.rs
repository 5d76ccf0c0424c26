//! What a sandbox helper is handed: plain data (no pointer into Node's memory), encoded by Node
//! and decoded by the helper (`codec`). The descriptors it names are the helper's own numbers,
//! where `launch` places them.

use std::ffi::CString;
use std::os::fd::RawFd;

use super::codec::{DecodeError, Decoder, Encoder};
use super::script::{CommandScript, TemplateScript};

/// The first bytes of every plan: a helper of another build refuses the plan instead of
/// misreading it.
const MAGIC: &[u8; 8] = b"pi-plan1";

/// One sandboxed command, for the helper's supervisor.
/// (`sock_filter` has no `PartialEq`: tests compare encodings.)
pub(in crate::exec) struct ChildPlan {
    /// The shell's path, resolved.
    pub(in crate::exec) shell: CString,
    pub(in crate::exec) cwd: CString,
    /// `execve`'s arguments and environment.
    pub(in crate::exec) argv: Vec<CString>,
    pub(in crate::exec) envp: Vec<CString>,
    pub(in crate::exec) sandbox: ChildSandbox,
}

/// The confinement of one command, as the helper's processes apply it.
pub(in crate::exec) struct ChildSandbox {
    /// The seccomp filter both modes install.
    pub(in crate::exec) seccomp: Vec<libc::sock_filter>,
    /// The user-notification filter, when a handler in Node answers its calls.
    pub(in crate::exec) notify: Option<Vec<libc::sock_filter>>,
    /// The socket the notification filter's listener is sent to Node over (-1: none).
    pub(in crate::exec) notify_channel: RawFd,
    /// Landlock mode's ruleset (-1: namespaces mode).
    pub(in crate::exec) ruleset: RawFd,
    /// Namespaces mode: the init's script, with the template's namespaces to join.
    pub(in crate::exec) namespaces: Option<CommandScript>,
}

impl ChildSandbox {
    /// The descriptors the supervisor keeps (-1: none): the ruleset for the shell's process, the
    /// template's namespaces to join.
    pub(in crate::exec) fn kept_fds(&self) -> [RawFd; 4] {
        let [user, mnt, net] = self
            .namespaces
            .as_ref()
            .map_or([-1; 3], |ns| ns.template_fds);
        [self.ruleset, user, mnt, net]
    }
}

fn start(e: &mut Encoder) {
    e.bytes.extend_from_slice(MAGIC);
}

fn check(d: &mut Decoder<'_>) -> Result<(), DecodeError> {
    for &byte in MAGIC {
        if d.u8()? != byte {
            return Err(DecodeError("not a plan of this helper"));
        }
    }
    Ok(())
}

impl ChildPlan {
    pub(in crate::exec) fn encode(&self) -> Vec<u8> {
        let mut e = Encoder::default();
        start(&mut e);
        e.cstring(&self.shell);
        e.cstring(&self.cwd);
        e.cstrings(&self.argv);
        e.cstrings(&self.envp);
        let s = &self.sandbox;
        e.filter(&s.seccomp);
        match &s.notify {
            Some(program) => {
                e.bool(true);
                e.filter(program);
            }
            None => e.bool(false),
        }
        e.i32(s.notify_channel);
        e.i32(s.ruleset);
        match &s.namespaces {
            Some(ns) => {
                e.bool(true);
                ns.encode(&mut e);
            }
            None => e.bool(false),
        }
        e.finish()
    }

    pub(in crate::exec) fn decode(bytes: &[u8]) -> Result<ChildPlan, DecodeError> {
        let mut d = Decoder::new(bytes);
        check(&mut d)?;
        let plan = ChildPlan {
            shell: d.cstring()?,
            cwd: d.cstring()?,
            argv: d.cstrings()?,
            envp: d.cstrings()?,
            sandbox: ChildSandbox {
                seccomp: d.filter()?,
                notify: if d.bool()? { Some(d.filter()?) } else { None },
                notify_channel: d.i32()?,
                ruleset: d.i32()?,
                namespaces: if d.bool()? {
                    Some(CommandScript::decode(&mut d)?)
                } else {
                    None
                },
            },
        };
        d.end()?;
        Ok(plan)
    }
}

/// The template builder's plan.
pub(in crate::exec) fn encode_template(script: &TemplateScript) -> Vec<u8> {
    let mut e = Encoder::default();
    start(&mut e);
    script.encode(&mut e);
    e.finish()
}

pub(in crate::exec) fn decode_template(bytes: &[u8]) -> Result<TemplateScript, DecodeError> {
    let mut d = Decoder::new(bytes);
    check(&mut d)?;
    let script = TemplateScript::decode(&mut d)?;
    d.end()?;
    Ok(script)
}
