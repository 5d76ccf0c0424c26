//! The policy's answer for one access to a resolved path in the workspace.

use std::ffi::OsStr;
use std::os::fd::AsFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use super::super::resolve::{Kind, Resolved};
use super::{is_tmpfile, Guard, Place, Refusal, PROBE, REFUSED, WRITE_FLAGS};
use crate::policy::{Denial, Policy};

/// The policy's answer for one access, pure (the unit tests' subject).
///
/// - `Open`: a write (`flags` can write) asks `write_denial`, a read (`O_RDONLY`, `O_RDWR`)
///   `read_denial`; a directory opened for reading also asks whether a name inside it would be
///   denied (listing `secrets` under `secrets/**`).
/// - `Name`: a name made, removed or renamed: `rename_denial` when it moves or links (`moves`),
///   else `write_denial`; for each kind the object is or becomes.
///
/// `hooks`: the directory `core.hooksPath` names in the workspace (`hooks_path`), protected as
/// the protected defaults are: nothing is written beneath it, and no directory above it is moved
/// away or replaced by a symlink.
pub(super) fn decide(
    policy: &Policy,
    hooks: Option<&Path>,
    rel: &Path,
    access: Access,
) -> Option<(bool, Denial)> {
    if let Some(hooks) = hooks {
        let writes = match access {
            Access::Open { flags, .. } => flags & WRITE_FLAGS as i32 != 0,
            Access::Name { .. } => true,
        };
        let above = match access {
            Access::Name { kind, moves } => kind != Kind::File && (moves || kind == Kind::Symlink),
            Access::Open { .. } => false,
        };
        if writes && (rel.starts_with(hooks) || (above && hooks.starts_with(rel))) {
            let denial = Denial {
                rule: super::super::hooks_path::RULE.to_string(),
                guard: crate::policy::Guard::Protected,
            };
            return Some((false, denial));
        }
    }
    match access {
        Access::Open { flags, kind } => {
            let is_dir = kind == Kind::Dir;
            if flags & (libc::O_WRONLY | libc::O_RDWR | libc::O_CREAT | libc::O_TRUNC) != 0 {
                for &dir in kind.dirs() {
                    if let Some(d) = policy.write_denial(rel, dir) {
                        return Some((false, d));
                    }
                }
            }
            let path_only = flags & libc::O_PATH != 0;
            if !path_only && flags & libc::O_ACCMODE != libc::O_WRONLY {
                if let Some(d) = policy.read_denial(rel, is_dir) {
                    return Some((true, d));
                }
                if is_dir {
                    if let Some(d) = policy.read_denial(&rel.join(PROBE), false) {
                        return Some((true, d));
                    }
                }
            }
            None
        }
        Access::Name { kind, moves } => kind.dirs().iter().find_map(|&dir| {
            match moves {
                true => policy.rename_denial(rel, dir),
                false => policy.write_denial(rel, dir),
            }
            .map(|d| (false, d))
        }),
    }
}

#[derive(Debug, Clone, Copy)]
pub(super) enum Access {
    Open { flags: i32, kind: Kind },
    Name { kind: Kind, moves: bool },
}

impl Guard {
    /// Where `resolved` is and what it is: `None` outside the workspace.
    fn locate(&self, resolved: &Resolved) -> Result<Option<(PathBuf, Option<Kind>)>, Refusal> {
        let (place, name) = match resolved {
            Resolved::Entry { dir, name, .. } => (self.place(dir.as_fd()), Some(name)),
            Resolved::Object(fd) => (self.place(fd.as_fd()), None),
        };
        let kind = resolved.kind();
        match place {
            Place::Outside => Ok(None),
            Place::Unknown => Err(Refusal::Errno(REFUSED)),
            Place::Inside(mut rel) => {
                if let Some(name) = name {
                    rel.push(OsStr::from_bytes(name));
                }
                Ok(Some((rel, kind)))
            }
        }
    }

    pub(super) fn check_open(
        &self,
        resolved: &Resolved,
        flags: i32,
        hooks: Option<&Path>,
    ) -> Result<(), Refusal> {
        let Some((rel, kind)) = self.locate(resolved)? else {
            return Ok(());
        };
        let kind = match kind {
            Some(kind) => kind,
            None if is_tmpfile(flags) || flags & libc::O_DIRECTORY != 0 => Kind::Dir,
            None => Kind::File,
        };
        match decide(&self.policy, hooks, &rel, Access::Open { flags, kind }) {
            Some((read, denial)) => Err(Refusal::Policy(rel, read, denial)),
            None => Ok(()),
        }
    }

    /// Checks a name made, removed, renamed or linked; `becomes`: the kind it takes (a rename's
    /// or link's source kind), else what is there now. Returns the kind there now (a file when
    /// nothing is).
    pub(super) fn check_name(
        &self,
        resolved: &Resolved,
        becomes: Option<Kind>,
        moves: bool,
        hooks: Option<&Path>,
    ) -> Result<Kind, Refusal> {
        let located = self.locate(resolved)?;
        let now = match &located {
            Some((_, kind)) => kind.unwrap_or(Kind::File),
            None => resolved.kind().unwrap_or(Kind::File),
        };
        let Some((rel, there)) = located else {
            return Ok(now);
        };
        // What is there now, and what the name becomes: with nothing there, only the latter
        // (`mkdir .git` makes no gitfile); an unlink of nothing is asked as of a file.
        let now_asked = match (there, becomes) {
            (None, Some(_)) => None,
            _ => Some(now),
        };
        for kind in [now_asked, becomes].into_iter().flatten() {
            let access = Access::Name { kind, moves };
            if let Some((read, denial)) = decide(&self.policy, hooks, &rel, access) {
                return Err(Refusal::Policy(rel, read, denial));
            }
        }
        Ok(now)
    }
}
