//! The workspace policy: which paths no tool may read, and which none may
//! write. One definition, asked by the bounded root, the walkers, the index,
//! the sandboxed shell and the server alike.
//!
//! Rules are gitignore lines relative to the workspace root: `.env` and
//! `*.pem` match at any depth, `secrets/**` and `/build` only from the root,
//! `dir/` only directories, `!keep.pem` takes a path back out of the rules
//! above it. A path is denied when it or any directory above it matches.
//!
//! Reads and writes are asked separately: a denied-read path may still be
//! written (that reveals nothing), and a protected path may still be read.
//! The protected defaults ([`PROTECTED`]) are write rules for what runs code
//! on the host later, outside any sandbox; `protect: false` drops them.
//!
//! ```
//! use std::path::Path;
//! use pi_native_ops_core::policy::{Policy, PolicySpec};
//!
//! let policy = Policy::new(&PolicySpec {
//!     deny_read: vec![".env".into(), "secrets/**".into()],
//!     deny_write: vec![],
//!     protect: true,
//! })?;
//! assert_eq!(policy.read_denial(Path::new("app/.env"), false).unwrap().rule, ".env");
//! assert!(policy.read_denial(Path::new("app/env"), false).is_none());
//! assert!(policy.write_denial(Path::new(".git/hooks/pre-commit"), false).is_some());
//! assert!(policy.write_denial(Path::new(".git/index"), false).is_none());
//! // Renaming `secrets` would move its files out of the rule: the directory is guarded.
//! assert!(policy.rename_denial(Path::new("secrets"), true).is_some());
//! # Ok::<(), pi_native_ops_core::Error>(())
//! ```

use std::path::Path;
use std::sync::Arc;

use globset::{Glob, GlobBuilder, GlobSet, GlobSetBuilder};
use ignore::gitignore::{Gitignore, GitignoreBuilder};
use ignore::Match;

use crate::glob_regex::{named, GlobRegex};
use crate::{Error, Result};

/// What runs code on the host later, outside any sandbox, when written by a
/// model: git's hooks and its config (`core.hooksPath`, `core.fsmonitor`,
/// filter and diff drivers run commands), and every way git finds another
/// config or hooks directory (`commondir`, linked worktrees' and submodules'
/// git directories; a `.git` file, [`GITFILE`], names one), husky's hooks
/// (`.husky/_` is git-ignored, so no diff shows a hook planted there),
/// direnv's `.envrc` (sourced on `cd`), the editors' task, launch and settings
/// files (run on open or on a key), and the shell's start files for a
/// workspace that is a home directory. Files that are committed and reviewed
/// as code (`Makefile`, `package.json` scripts) are not here: they run only
/// when the user runs them, and a diff shows them. The directory
/// `core.hooksPath` names is protected by the sandbox for each command (it is
/// read from the repository's config then).
pub const PROTECTED: &[&str] = &[
    "**/.git/hooks/",
    "**/.git/config",
    "**/.git/config.worktree",
    "**/.git/commondir",
    "**/.git/worktrees/",
    "**/.git/modules/**/hooks/",
    "**/.git/modules/**/config",
    "**/.git/modules/**/commondir",
    "**/.husky/",
    ".envrc",
    "**/.vscode/settings.json",
    "**/.vscode/tasks.json",
    "**/.vscode/launch.json",
    "**/.idea/workspace.xml",
    "**/.idea/runConfigurations/",
    "/.bashrc",
    "/.bash_profile",
    "/.bash_login",
    "/.bash_logout",
    "/.profile",
    "/.zshenv",
    "/.zprofile",
    "/.zshrc",
    "/.zlogin",
    "/.config/fish/config.fish",
    "/.gitconfig",
    "/.config/git/config",
];

/// The protected default for a `.git` that is a file (a gitfile: `gitdir:
/// <path>` sends git to another git directory, its config and hooks) or a
/// symlink: gitignore lines cannot name files alone, and `**/.git` would
/// protect every repository's whole git directory.
pub const GITFILE: &str = "**/.git (a file)";

/// Whether the protected defaults apply when `protect` is not given.
pub const PROTECT_BY_DEFAULT: bool = true;

/// A policy as given: rule lines, and whether the protected defaults apply.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PolicySpec {
    /// Paths no tool reads, lists or searches, and the shell cannot open.
    pub deny_read: Vec<String>,
    /// Paths no tool writes, creates, removes or renames.
    pub deny_write: Vec<String>,
    /// Whether [`PROTECTED`] is added to the write rules (`true` unless set).
    pub protect: bool,
}

impl PolicySpec {
    /// The spec of JS-shaped options (absent lists are empty, `protect`
    /// defaults to `true`).
    pub fn from_raw(
        deny_read: Option<Vec<String>>,
        deny_write: Option<Vec<String>>,
        protect: Option<bool>,
    ) -> PolicySpec {
        PolicySpec {
            deny_read: deny_read.unwrap_or_default(),
            deny_write: deny_write.unwrap_or_default(),
            protect: protect.unwrap_or(PROTECT_BY_DEFAULT),
        }
    }

    /// The spec of no options: no rules, the protected defaults.
    pub fn default_raw() -> PolicySpec {
        PolicySpec::from_raw(None, None, None)
    }
}

/// Which kind of access a rule refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Guard {
    /// A `denyRead` rule.
    Read,
    /// A `denyWrite` rule.
    Write,
    /// One of the protected defaults.
    Protected,
}

impl Guard {
    /// The option the rule came from, as events name it.
    pub fn as_str(self) -> &'static str {
        match self {
            Guard::Read => "denyRead",
            Guard::Write => "denyWrite",
            Guard::Protected => "protect",
        }
    }
}

/// A refusal: the rule line that matched and where it came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Denial {
    /// The rule as given (`*.pem`), or the protected default that matched.
    pub rule: String,
    /// The list the rule belongs to.
    pub guard: Guard,
}

/// One list of rules: the gitignore matcher, and each rule's components for
/// the rename question.
#[derive(Debug)]
struct Rules {
    guard: Guard,
    matcher: Gitignore,
    shapes: Vec<Shape>,
    /// The last component of every denying rule, matched against a name
    /// alone: a name none of them matches is denied by no rule, which most
    /// names of a walk show at the cost of a basename match (the rules'
    /// own matcher may run a regex over the whole path). `None` when a rule
    /// ends in `**` (it matches any name).
    names: Option<GlobSet>,
}

/// A rule that names directories (has a `/` before its last component): the
/// globs of the components before the last, and whether it is anchored at the
/// root. A rule of one component matches a basename anywhere, which no
/// directory rename changes.
#[derive(Debug)]
struct Shape {
    rule: String,
    anchored: bool,
    /// One glob per directory component; `None` for `**`.
    dirs: Vec<Option<GlobRegex>>,
}

/// Whether names differ by case only on this target's usual file systems.
const CASE_INSENSITIVE: bool = cfg!(any(target_os = "macos", target_os = "windows"));

impl Rules {
    fn new(guard: Guard, option: &str, lines: &[&str]) -> Result<Rules> {
        // Lines are matched relative to the root, so the builder's own root is empty.
        let mut builder = GitignoreBuilder::new("");
        builder
            .case_insensitive(CASE_INSENSITIVE)
            .map_err(|e| Error::invalid_glob(format!("policy.{option}: {e}")))?;
        let mut shapes = Vec::new();
        for line in lines {
            if line.trim().is_empty() || line.contains('\0') {
                return Err(Error::invalid_glob(format!(
                    "policy.{option}: {line:?} is not a rule (an empty line or a NUL byte)"
                )));
            }
            builder.add_line(None, line).map_err(|e| {
                Error::invalid_glob(format!(
                    "policy.{option}: invalid rule {:?}: {e}",
                    named(line)
                ))
            })?;
            if let Some(shape) = Shape::of(line).map_err(|e| {
                Error::invalid_glob(format!(
                    "policy.{option}: invalid rule {:?}: {e}",
                    named(line)
                ))
            })? {
                shapes.push(shape);
            }
        }
        let matcher = builder
            .build()
            .map_err(|e| Error::invalid_glob(format!("policy.{option}: {e}")))?;
        Ok(Rules {
            guard,
            matcher,
            shapes,
            names: names_of(lines),
        })
    }

    /// As git decides: a path is denied when a directory above it is (a
    /// rule cannot take back a path beneath a denied directory, so a walk
    /// may prune one), else when the path itself matches.
    fn denial(&self, rel: &Path, is_dir: bool) -> Option<Denial> {
        if self.matcher.is_empty() {
            return None;
        }
        // The directories above, from the root down, as prefixes of the bytes.
        let bytes = rel.as_os_str().as_encoded_bytes();
        bytes
            .iter()
            .enumerate()
            .filter(|&(i, &b)| b == b'/' && i > 0)
            .find_map(|(i, _)| {
                // SAFETY: a prefix ending before a `/` of valid OS-string bytes
                // is valid OS-string bytes (split at an ASCII character).
                let dir = unsafe { std::ffi::OsStr::from_encoded_bytes_unchecked(&bytes[..i]) };
                self.entry_denial(Path::new(dir), true)
            })
            .or_else(|| self.entry_denial(rel, is_dir))
    }

    /// The path alone, its directories taken as allowed (a walk that pruned
    /// the denied ones).
    fn entry_denial(&self, rel: &Path, is_dir: bool) -> Option<Denial> {
        let name = rel.file_name()?;
        if let Some(names) = &self.names {
            if !names.is_match(name) {
                return None;
            }
        }
        match self.matcher.matched(rel, is_dir) {
            Match::Ignore(glob) => Some(Denial {
                rule: glob.original().to_string(),
                guard: self.guard,
            }),
            Match::Whitelist(_) | Match::None => None,
        }
    }

    /// The rule whose directory part `dir` (a directory, relative) may stand in.
    fn shape_over(&self, dir: &Path) -> Option<Denial> {
        let parts: Vec<&std::ffi::OsStr> = dir.iter().collect();
        let hit = self.shapes.iter().find(|shape| match shape.anchored {
            // The directory is one of the rule's leading directories.
            true => shape.leads(&parts),
            // The directory's last components are the rule's leading ones.
            false => (1..=parts.len()).any(|n| shape.leads(&parts[parts.len() - n..])),
        })?;
        Some(Denial {
            rule: hit.rule.clone(),
            guard: self.guard,
        })
    }
}

impl Shape {
    /// Whether `parts` match the rule's first directories (a `**` among them
    /// matches any depth from there on).
    fn leads(&self, parts: &[&std::ffi::OsStr]) -> bool {
        for (i, part) in parts.iter().enumerate() {
            match self.dirs.get(i) {
                Some(None) => return true,
                Some(Some(glob)) if glob.is_match(part.as_encoded_bytes()) => {}
                _ => return false,
            }
        }
        true
    }

    /// The shape of a rule line, if it names directories.
    fn of(line: &str) -> std::result::Result<Option<Shape>, String> {
        if line.starts_with('!') || line.starts_with('#') {
            return Ok(None);
        }
        let body = line.trim_end().trim_end_matches('/');
        let (anchored, body) = match body.strip_prefix('/') {
            Some(rest) => (true, rest),
            None => match body.strip_prefix("**/") {
                Some(rest) => (false, rest),
                // gitignore: a slash inside the pattern anchors it.
                None => (body.contains('/'), body),
            },
        };
        let mut parts: Vec<&str> = body.split('/').collect();
        parts.pop();
        if parts.is_empty() {
            return Ok(None);
        }
        let dirs = parts
            .iter()
            .map(|part| match *part {
                "**" => Ok(None),
                part => {
                    let glob = Glob::new(part).map_err(|e| e.kind().to_string())?;
                    GlobRegex::new(&glob).map(Some)
                }
            })
            .collect::<std::result::Result<_, _>>()?;
        Ok(Some(Shape {
            rule: line.to_string(),
            anchored,
            dirs,
        }))
    }
}

/// The [`Rules::names`] prefilter of `lines`: each denying rule's last
/// component as a glob of a name (gitignore's escapes kept, `/` never in a
/// name). `None` when one cannot stand for its rule: it is or holds `**`, or
/// does not parse as a glob alone.
fn names_of(lines: &[&str]) -> Option<GlobSet> {
    let mut set = GlobSetBuilder::new();
    for line in lines {
        if line.starts_with('!') || line.starts_with('#') {
            continue;
        }
        // As gitignore reads a line: a leading `\` escapes `!` or `#`, trailing spaces go.
        let body = line.trim_end().trim_end_matches('/');
        let body = body.strip_prefix('\\').unwrap_or(body);
        let last = body.rsplit('/').next().unwrap_or(body);
        if last.is_empty() || last.contains("**") {
            return None;
        }
        let glob = GlobBuilder::new(last)
            .literal_separator(true)
            .case_insensitive(CASE_INSENSITIVE)
            .backslash_escape(true)
            .build()
            .ok()?;
        set.add(glob);
    }
    set.build().ok()
}

fn lines(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

/// What an event is about: the access a tool or the shell attempted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EventTarget {
    /// A read (open, list, search) of a path, as the agent sees it (runtime form).
    Read(String),
    /// A write (create, remove, rename, link, mode change) of a path (runtime form).
    Write(String),
    /// A network connection through the sandbox's proxy.
    Connect {
        /// The host as asked (a name or an address literal).
        host: String,
        /// The port.
        port: u16,
    },
}

/// One refusal, or one connection decision, reported to the caller's
/// `onPolicyEvent`.
#[derive(Debug, Clone, PartialEq)]
pub struct PolicyEvent {
    /// The tool (`read`, `write`, `edit`, `ls`, `find`, `grep`) or `bash`.
    pub tool: &'static str,
    /// For `bash`: the command the event happened in.
    pub command: Option<String>,
    /// What was attempted.
    pub target: EventTarget,
    /// The rule that decided (`*.pem`, an allow-list entry), if one did; a
    /// connection no rule allows has none.
    pub rule: Option<String>,
    /// `false` for a refusal; `true` only for an allowed connection.
    pub allowed: bool,
    /// When, in milliseconds since the Unix epoch.
    pub time_ms: f64,
}

/// An event as every face hands it on (the object `onPolicyEvent` receives, the wire's `event`
/// frame): these keys, in this order; `access` is `"read"`, `"write"` or `"connect"`; absent
/// ones are left out, but `rule`, which is null when no rule decided.
#[derive(Debug, Clone, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct EventFields {
    /// The tool, or `bash`.
    pub tool: &'static str,
    /// `"read"`, `"write"` or `"connect"`.
    pub access: &'static str,
    /// The path read or written (runtime form).
    #[cfg_attr(feature = "serde", serde(skip_serializing_if = "Option::is_none"))]
    pub path: Option<String>,
    /// The host connected to.
    #[cfg_attr(feature = "serde", serde(skip_serializing_if = "Option::is_none"))]
    pub host: Option<String>,
    /// The port connected to.
    #[cfg_attr(feature = "serde", serde(skip_serializing_if = "Option::is_none"))]
    pub port: Option<u16>,
    /// The rule that decided; null when none did.
    pub rule: Option<String>,
    /// `false` for a refusal.
    pub allowed: bool,
    /// Milliseconds since the Unix epoch.
    pub time: f64,
    /// For `bash`: the command.
    #[cfg_attr(feature = "serde", serde(skip_serializing_if = "Option::is_none"))]
    pub command: Option<String>,
}

impl From<PolicyEvent> for EventFields {
    fn from(e: PolicyEvent) -> EventFields {
        let (access, path, host, port) = match e.target {
            EventTarget::Read(path) => ("read", Some(path), None, None),
            EventTarget::Write(path) => ("write", Some(path), None, None),
            EventTarget::Connect { host, port } => ("connect", None, Some(host), Some(port)),
        };
        EventFields {
            tool: e.tool,
            access,
            path,
            host,
            port,
            rule: e.rule,
            allowed: e.allowed,
            time: e.time_ms,
            command: e.command,
        }
    }
}

/// Where events go: the face's callback (napi's threadsafe function, the
/// server's outbox). Called from any thread; must not block.
pub type EventSink = Arc<dyn Fn(PolicyEvent) + Send + Sync>;

/// The current time as events carry it: whole milliseconds since the Unix epoch, as JS's
/// `Date.now()` gives them, so a caller can compare an event's time with its own clock.
pub fn now_ms() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as f64)
        .unwrap_or(0.0)
}

/// The tools an event may name: pi's file tools and `bash`.
pub const TOOLS: [&str; 7] = ["read", "write", "edit", "ls", "find", "grep", "bash"];

impl PolicyEvent {
    /// A file tool's refusal, now: `tool` (one of `TOOLS`) was refused the `access` (`"read"` or
    /// `"write"`) of `path` (as the tool was given it) by `rule`. `None` for a tool or access
    /// there is no event of.
    pub fn refusal(tool: &str, access: &str, path: String, rule: Option<String>) -> Option<Self> {
        let tool = TOOLS.into_iter().find(|t| *t == tool)?;
        let target = match access {
            "read" => EventTarget::Read(path),
            "write" => EventTarget::Write(path),
            _ => return None,
        };
        Some(PolicyEvent {
            tool,
            command: None,
            target,
            rule,
            allowed: false,
            time_ms: now_ms(),
        })
    }
}

/// A compiled policy. Cheap to ask; share it behind an `Arc`.
#[derive(Debug)]
pub struct Policy {
    spec: PolicySpec,
    read: Rules,
    write: Rules,
    protected: Option<Rules>,
    /// Rules beneath these ones that they cannot take back ([`Policy::over`]).
    floor: Option<Arc<Policy>>,
}

impl Policy {
    /// Compiles `spec`; a rule that does not parse is an `InvalidGlob` error
    /// naming the option and the rule.
    pub fn new(spec: &PolicySpec) -> Result<Policy> {
        Ok(Policy {
            read: Rules::new(Guard::Read, "denyRead", &lines(&spec.deny_read))?,
            write: Rules::new(Guard::Write, "denyWrite", &lines(&spec.deny_write))?,
            protected: match spec.protect {
                true => Some(Rules::new(Guard::Protected, "protect", PROTECTED)?),
                false => None,
            },
            spec: spec.clone(),
            floor: None,
        })
    }

    /// This policy over `floor`: a path either denies is denied, and
    /// `floor`'s rule is the one named. So no rule of this one (a `!` line,
    /// `protect: false`) takes back one of `floor`'s: the server's `--policy`
    /// is the floor of its client's.
    pub fn over(mut self, floor: Arc<Policy>) -> Policy {
        self.floor = Some(floor);
        self
    }

    /// The policy beneath this one, if any ([`Policy::over`]).
    pub fn floor(&self) -> Option<&Policy> {
        self.floor.as_deref()
    }

    /// The spec this policy was compiled from.
    pub fn spec(&self) -> &PolicySpec {
        &self.spec
    }

    /// Whether no read rule exists (reads need no check at all).
    pub fn reads_unrestricted(&self) -> bool {
        self.spec.deny_read.is_empty() && self.floor().is_none_or(Policy::reads_unrestricted)
    }

    /// Whether no write rule exists (`protect: false` and no `denyWrite`).
    pub fn writes_unrestricted(&self) -> bool {
        self.spec.deny_write.is_empty()
            && self.protected.is_none()
            && self.floor().is_none_or(Policy::writes_unrestricted)
    }

    /// The refusal of reading (or listing, or searching) `rel`, a path
    /// relative to the root, symlinks resolved.
    pub fn read_denial(&self, rel: &Path, is_dir: bool) -> Option<Denial> {
        self.floor()
            .and_then(|floor| floor.read_denial(rel, is_dir))
            .or_else(|| self.read.denial(rel, is_dir))
    }

    /// The refusal of reading `rel` alone, for a walk that has pruned every
    /// denied directory above it: what [`Policy::read_denial`] answers there.
    pub fn read_denial_entry(&self, rel: &Path, is_dir: bool) -> Option<Denial> {
        self.floor()
            .and_then(|f| f.read_denial_entry(rel, is_dir))
            .or_else(|| self.read.entry_denial(rel, is_dir))
    }

    /// The refusal of writing `rel` alone, every directory above it known
    /// writable (a walk creating directories one below the other): what
    /// [`Policy::write_denial`] answers there, in time linear in the path.
    pub fn write_denial_entry(&self, rel: &Path, is_dir: bool) -> Option<Denial> {
        if let Some(denial) = self.floor().and_then(|f| f.write_denial_entry(rel, is_dir)) {
            return Some(denial);
        }
        self.write.entry_denial(rel, is_dir).or_else(|| {
            self.protected
                .as_ref()
                .and_then(|rules| rules.entry_denial(rel, is_dir))
        })
    }

    /// The refusal of writing, creating or removing `rel` (relative to the
    /// root, symlinks resolved).
    pub fn write_denial(&self, rel: &Path, is_dir: bool) -> Option<Denial> {
        if let Some(denial) = self.floor().and_then(|f| f.write_denial(rel, is_dir)) {
            return Some(denial);
        }
        self.write.denial(rel, is_dir).or_else(|| {
            let rules = self.protected.as_ref()?;
            rules.denial(rel, is_dir).or_else(|| {
                (!is_dir && rel.file_name() == Some(std::ffi::OsStr::new(".git"))).then(|| Denial {
                    rule: GITFILE.to_string(),
                    guard: Guard::Protected,
                })
            })
        })
    }

    /// Whether the protected defaults apply (here or in the floor).
    pub fn protects(&self) -> bool {
        self.protected.is_some() || self.floor().is_some_and(Policy::protects)
    }

    /// The refusal of renaming `rel` away, or of renaming or linking
    /// something onto it: the path must be writable, and not be a denied-read
    /// file (a new name would reveal it). For a directory also: no rule may
    /// name it as one of its directories (`secrets/**`, `.git/hooks/`), or the
    /// rename would carry the files beneath out of (or into) that rule.
    pub fn rename_denial(&self, rel: &Path, is_dir: bool) -> Option<Denial> {
        if let Some(denial) = self.floor().and_then(|f| f.rename_denial(rel, is_dir)) {
            return Some(denial);
        }
        self.write_denial(rel, is_dir)
            .or_else(|| self.read_denial(rel, is_dir))
            .or_else(|| match is_dir {
                true => self
                    .read
                    .shape_over(rel)
                    .or_else(|| self.write.shape_over(rel))
                    .or_else(|| self.protected.as_ref().and_then(|r| r.shape_over(rel))),
                false => None,
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(read: &[&str], write: &[&str], protect: bool) -> Policy {
        Policy::new(&PolicySpec {
            deny_read: read.iter().map(|s| s.to_string()).collect(),
            deny_write: write.iter().map(|s| s.to_string()).collect(),
            protect,
        })
        .unwrap()
    }

    fn read(p: &Policy, rel: &str) -> Option<String> {
        p.read_denial(Path::new(rel), false).map(|d| d.rule)
    }

    fn write(p: &Policy, rel: &str) -> Option<String> {
        p.write_denial(Path::new(rel), false).map(|d| d.rule)
    }

    #[test]
    fn a_rule_past_the_regex_bound_is_an_error() {
        let huge = format!("{}/x", "*".repeat(100_000));
        let spec = PolicySpec::from_raw(Some(vec![huge]), None, None);
        let err = Policy::new(&spec).unwrap_err();
        assert_eq!(err.kind(), crate::error::ErrorKind::InvalidGlob);
        let text = err.to_string();
        assert!(text.starts_with("policy.denyRead: "), "{text}");
        assert!(text.len() < 400, "the rule is named by its start: {text}");
    }

    #[test]
    fn gitignore_lines_match_relative_to_the_root() {
        let p = policy(
            &[".env", "*.pem", "secrets/**", "/top.txt", "logs/"],
            &[],
            false,
        );
        assert_eq!(read(&p, ".env").as_deref(), Some(".env"));
        assert_eq!(read(&p, "a/b/.env").as_deref(), Some(".env"));
        assert_eq!(read(&p, "a/.env.example"), None);
        assert_eq!(read(&p, "k/x.pem").as_deref(), Some("*.pem"));
        assert_eq!(read(&p, "secrets/a/b").as_deref(), Some("secrets/**"));
        assert_eq!(read(&p, "a/secrets/b"), None, "a slash anchors the rule");
        assert_eq!(read(&p, "top.txt").as_deref(), Some("/top.txt"));
        assert_eq!(read(&p, "a/top.txt"), None);
        // `logs/` names directories: a file called logs is not denied, a file beneath one is.
        assert_eq!(read(&p, "logs"), None);
        assert_eq!(read(&p, "a/logs/x").as_deref(), Some("logs/"));
        assert!(p.read_denial(Path::new("logs"), true).is_some());
        assert_eq!(read(&p, ""), None, "the root itself is never denied");
    }

    #[test]
    fn a_negation_takes_a_path_back() {
        let p = policy(&[".env*", "!.env.example"], &[], false);
        assert!(read(&p, ".env.local").is_some());
        assert_eq!(read(&p, ".env.example"), None);
        // As in git: not from beneath a denied directory (a walk prunes it),
        // only from beneath one whose contents are denied.
        let p = policy(
            &["secrets/", "!secrets/keep", "vault/*", "!vault/keep"],
            &[],
            false,
        );
        assert_eq!(read(&p, "secrets/keep").as_deref(), Some("secrets/"));
        assert_eq!(read(&p, "vault/keep"), None);
        assert_eq!(read(&p, "vault/other").as_deref(), Some("vault/*"));
        assert_eq!(p.read_denial_entry(Path::new("secrets/keep"), false), None);
    }

    #[test]
    fn names_are_case_sensitive_where_the_file_system_is() {
        let p = policy(&[".env"], &[], false);
        assert_eq!(read(&p, ".ENV").is_some(), CASE_INSENSITIVE);
    }

    #[test]
    fn reads_and_writes_are_separate_lists() {
        let p = policy(&["secret.txt"], &["locked/"], false);
        assert_eq!(write(&p, "secret.txt"), None);
        assert_eq!(read(&p, "locked/a"), None);
        assert_eq!(write(&p, "locked/a").as_deref(), Some("locked/"));
        let d = p.write_denial(Path::new("locked/a"), false).unwrap();
        assert_eq!(d.guard, Guard::Write);
    }

    #[test]
    fn the_protected_defaults_guard_what_runs_code_later() {
        let p = policy(&[], &[], true);
        for rel in [
            ".git/hooks/pre-commit",
            ".git/config",
            "sub/.git/hooks/post-checkout",
            ".git/modules/lib/hooks/pre-push",
            ".git/modules/lib/config",
            ".git/commondir",
            ".git/modules/lib/commondir",
            ".git/worktrees/wt/gitdir",
            ".git/worktrees/wt/commondir",
            ".git/worktrees/wt/config.worktree",
            ".git",
            "sub/.git",
            ".husky/_/pre-commit",
            ".husky/pre-commit",
            ".envrc",
            "pkg/.envrc",
            ".vscode/tasks.json",
            ".bashrc",
        ] {
            let d = p.write_denial(Path::new(rel), false);
            assert_eq!(d.map(|d| d.guard), Some(Guard::Protected), "{rel}");
        }
        // What git add and commit write stays writable.
        for rel in [
            ".git/index",
            ".git/objects/ab/cdef",
            ".git/refs/heads/main",
            ".git/COMMIT_EDITMSG",
            ".git/config.lock",
            "src/.bashrc",
            "src/main.rs",
            "src/.gitignore",
            "src/.git-blame-ignore-revs",
        ] {
            assert_eq!(write(&p, rel), None, "{rel}");
        }
        // A `.git` directory is no gitfile: git init makes one, and what is beneath it is asked
        // of its own rules.
        assert_eq!(p.write_denial(Path::new("sub/.git"), true), None);
        assert_eq!(write(&p, "sub/.git").as_deref(), Some(GITFILE));
        assert!(p.protects() && !policy(&[], &[], false).protects());
        assert!(policy(&[], &[], false)
            .over(Arc::new(policy(&[], &[], true)))
            .protects());
        assert!(p.reads_unrestricted());
        assert!(!p.writes_unrestricted());
        assert!(policy(&[], &[], false).writes_unrestricted());
        assert_eq!(write(&policy(&[], &[], false), ".git/config"), None);
    }

    #[test]
    fn renames_guard_the_directories_rules_name() {
        let p = policy(&["secrets/**", "*.pem"], &["/conf/local/*.ini"], true);
        let dir = |rel: &str| p.rename_denial(Path::new(rel), true).map(|d| d.rule);
        assert_eq!(dir("secrets").as_deref(), Some("secrets/**"));
        assert_eq!(dir(".git").as_deref(), Some("**/.git/hooks/"));
        assert_eq!(dir("vendor/lib/.git").as_deref(), Some("**/.git/hooks/"));
        assert_eq!(dir("conf").as_deref(), Some("/conf/local/*.ini"));
        assert_eq!(dir("conf/local").as_deref(), Some("/conf/local/*.ini"));
        assert_eq!(
            dir("other/conf"),
            None,
            "anchored rules name root paths only"
        );
        // A basename rule moves with its file: directories around it are free to rename.
        assert_eq!(dir("build"), None);
        assert_eq!(dir("src/certs"), None);
        assert_eq!(dir(".git/worktrees").as_deref(), Some("**/.git/worktrees/"));
        let w = |rel: &str| p.rename_denial(Path::new(rel), true).map(|d| d.rule);
        assert_eq!(
            w("x/.git/worktrees/wt").as_deref(),
            Some("**/.git/worktrees/")
        );
        assert_eq!(w("x/worktrees/wt"), None);
        // A denied-read file may not take another name; a plain one may.
        assert!(p.rename_denial(Path::new("k/x.pem"), false).is_some());
        assert!(p.rename_denial(Path::new("k/x.txt"), false).is_none());
    }

    #[test]
    fn bad_rules_are_refused_with_the_option_named() {
        let bad = |read: &[&str]| {
            Policy::new(&PolicySpec {
                deny_read: read.iter().map(|s| s.to_string()).collect(),
                ..PolicySpec::default()
            })
            .unwrap_err()
            .to_string()
        };
        assert!(bad(&["a{b"]).starts_with("policy.denyRead: invalid rule \"a{b\""));
        assert!(bad(&[""]).contains("is not a rule"));
        assert!(bad(&["a\0b"]).contains("is not a rule"));
    }

    #[test]
    fn the_name_prefilter_never_changes_an_answer() {
        let rules = [
            ".env",
            ".env.*",
            "*.pem",
            "id_rsa*",
            "secrets/",
            "**/credentials*",
            "/config/*.secret",
            "a/*/b[0-9].txt",
            "\\#hash",
            "!keep.pem",
        ];
        let with = Rules::new(Guard::Read, "denyRead", &rules).unwrap();
        assert!(with.names.is_some());
        let without = Rules {
            names: None,
            ..Rules::new(Guard::Read, "denyRead", &rules).unwrap()
        };
        for rel in [
            ".env",
            "x/.env.local",
            "k/a.pem",
            "keep.pem",
            "id_rsa.pub",
            "secrets",
            "x/secrets",
            "x/credentials.json",
            "config/a.secret",
            "x/config/a.secret",
            "a/z/b1.txt",
            "a/z/bx.txt",
            "#hash",
            "main.c",
            "src/.envrc",
        ] {
            for is_dir in [false, true] {
                let path = Path::new(rel);
                assert_eq!(
                    with.entry_denial(path, is_dir),
                    without.entry_denial(path, is_dir),
                    "{rel} {is_dir}"
                );
            }
        }
        assert!(Rules::new(Guard::Read, "denyRead", &["a/**"])
            .unwrap()
            .names
            .is_none());
        // The prefilter turns most names away before the rules' matcher.
        assert!(!with.names.as_ref().unwrap().is_match("main.c"));
    }

    #[test]
    fn a_policy_over_a_floor_adds_rules_and_takes_none_back() {
        let floor = Arc::new(policy(&["secrets/", "*.key"], &["/ci/"], true));
        let p = policy(&["!secrets/public.txt", "!x.key", ".env"], &[], false).over(floor);
        assert_eq!(read(&p, "secrets/public.txt").as_deref(), Some("secrets/"));
        assert_eq!(read(&p, "x.key").as_deref(), Some("*.key"));
        assert_eq!(read(&p, "a/.env").as_deref(), Some(".env"));
        assert_eq!(read(&p, "src/main.rs"), None);
        // `protect: false` above a protecting floor keeps the defaults.
        assert_eq!(write(&p, ".git/hooks/x").as_deref(), Some("**/.git/hooks/"));
        assert_eq!(write(&p, "ci/run.sh").as_deref(), Some("/ci/"));
        assert_eq!(
            p.rename_denial(Path::new("secrets"), true)
                .map(|d| d.rule)
                .as_deref(),
            Some("secrets/")
        );
        assert!(!p.reads_unrestricted() && !p.writes_unrestricted());
        let open = policy(&[], &[], false).over(Arc::new(policy(&[], &[], false)));
        assert!(open.reads_unrestricted() && open.writes_unrestricted());
        assert!(policy(&[], &[], false)
            .over(Arc::new(policy(&["a"], &[], false)))
            .floor()
            .is_some());
    }

    #[test]
    fn from_raw_protects_unless_told_not_to() {
        assert!(PolicySpec::from_raw(None, None, None).protect);
        assert!(!PolicySpec::from_raw(None, None, Some(false)).protect);
        assert!(PROTECT_BY_DEFAULT && PolicySpec::default_raw().protect);
        // Equal once defaulted: what the faces' "same policy" asks.
        assert_eq!(
            PolicySpec::default_raw(),
            PolicySpec::from_raw(Some(vec![]), None, Some(true))
        );
    }

    /// A file tool's refusal: its fields and time decided here, for every face.
    #[test]
    fn refusals_are_built_once() {
        let before = now_ms();
        let e = PolicyEvent::refusal("edit", "write", "/w/k.pem".into(), Some("*.pem".into()));
        let e = EventFields::from(e.unwrap());
        assert_eq!(
            (
                e.tool,
                e.access,
                e.path.as_deref(),
                e.rule.as_deref(),
                e.allowed,
                e.command
            ),
            (
                "edit",
                "write",
                Some("/w/k.pem"),
                Some("*.pem"),
                false,
                None
            )
        );
        assert!(e.time >= before && e.time <= now_ms() && e.time.fract() == 0.0);
        assert!(PolicyEvent::refusal("rm", "read", "/w".into(), None).is_none());
        assert!(PolicyEvent::refusal("read", "connect", "/w".into(), None).is_none());
    }

    /// Every face hands an event on in these fields (napi's object, the wire's frame).
    #[test]
    fn event_fields_are_decided_once() {
        let event = |target| PolicyEvent {
            tool: "bash",
            command: Some("cat .env".into()),
            target,
            rule: None,
            allowed: false,
            time_ms: 1.5,
        };
        let read = EventFields::from(event(EventTarget::Read("/w/.env".into())));
        assert_eq!(
            (read.access, read.path.as_deref(), read.host, read.port),
            ("read", Some("/w/.env"), None, None)
        );
        assert_eq!(
            (read.tool, read.command.as_deref(), read.time),
            ("bash", Some("cat .env"), 1.5)
        );
        let write = EventFields::from(event(EventTarget::Write("/w/x".into())));
        assert_eq!(write.access, "write");
        let connect = EventFields::from(event(EventTarget::Connect {
            host: "example.com".into(),
            port: 443,
        }));
        assert_eq!(
            (
                connect.access,
                connect.path,
                connect.host.as_deref(),
                connect.port
            ),
            ("connect", None, Some("example.com"), Some(443))
        );
    }
}
