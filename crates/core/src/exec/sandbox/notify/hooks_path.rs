//! The directory git runs hooks from when `core.hooksPath` names one (husky's `.husky/_`): inside
//! the workspace, the sandbox could plant a hook there that the host's next `git commit` runs. Read
//! when a command starts, from the configuration git itself would read for the workspace's
//! repository (system, global, the repository's `config` and `config.worktree`; the last value
//! wins), and protected for that command as the protected defaults are (`guard::decide`).
//!
//! Read are only the plain `[core] hooksPath = …` lines of each file's first `CONFIG_MAX_BYTES`;
//! `include`/`includeIf` files, `-c` and `GIT_CONFIG_*` settings of the host's own git are not
//! followed (docs/policy.md). The repository's own config cannot be changed from the sandbox (a
//! protected default), so what is read is the host's.

use std::io::Read;
use std::path::{Component, Path, PathBuf};

/// The rule events name for a refusal beneath the hooks directory.
pub(super) const RULE: &str = "core.hooksPath";
/// What is read of one config file: git's configs are a few KiB; a larger one is read this far.
const CONFIG_MAX_BYTES: u64 = 64 << 10;
/// What is read of a `.git` file (`gitdir: <path>`, one line).
const GITFILE_MAX_BYTES: u64 = 4 << 10;
/// Directories above the workspace searched for its repository (git's own walk stops at `/`).
const SEARCH_DEPTH: usize = 64;

/// The hooks directory `core.hooksPath` names for the repository holding `workspace` (its real
/// path), relative to `workspace` when it lies inside (`None`: unset, or outside).
pub(super) fn hooks_dir(workspace: &Path) -> Option<PathBuf> {
    let (worktree, gitdir) = workspace
        .ancestors()
        .take(SEARCH_DEPTH)
        .find_map(repository)?;
    let common = read_bounded(&gitdir.join("commondir"), GITFILE_MAX_BYTES)
        .map(|text| gitdir.join(text.trim_end_matches(['\n', '\r'])))
        .unwrap_or_else(|| gitdir.clone());
    let home = std::env::var_os("HOME").map(PathBuf::from);
    let global = std::env::var_os("XDG_CONFIG_HOME")
        .map(PathBuf::from)
        .or_else(|| home.as_ref().map(|h| h.join(".config")))
        .map(|c| c.join("git/config"));
    let files = [
        Some(PathBuf::from("/etc/gitconfig")),
        global,
        home.as_ref().map(|h| h.join(".gitconfig")),
        Some(common.join("config")),
        Some(gitdir.join("config.worktree")),
    ];
    // The last file that sets it wins: asked from the last.
    let value = files
        .iter()
        .rev()
        .flatten()
        .find_map(|file| hooks_path_in(&read_bounded(file, CONFIG_MAX_BYTES)?))?;
    let named = match value.strip_prefix("~/") {
        Some(rest) => home?.join(rest),
        None => worktree.join(value),
    };
    let named = std::fs::canonicalize(&named).unwrap_or_else(|_| lexical(&named));
    // The workspace itself: every write would be refused (not protected; docs/policy.md).
    let rel = named.strip_prefix(workspace).ok()?;
    (!rel.as_os_str().is_empty()).then(|| rel.to_path_buf())
}

/// `dir` and its repository's git directory when `dir` holds a `.git` directory or gitfile.
fn repository(dir: &Path) -> Option<(PathBuf, PathBuf)> {
    let dot_git = dir.join(".git");
    let meta = std::fs::symlink_metadata(&dot_git).ok()?;
    if meta.is_dir() {
        return Some((dir.to_path_buf(), dot_git));
    }
    let text = read_bounded(&dot_git, GITFILE_MAX_BYTES)?;
    let target = text.strip_prefix("gitdir:")?.trim();
    Some((dir.to_path_buf(), dir.join(target)))
}

/// The first `max` bytes of `file`, as text (`None`: unreadable or not UTF-8).
fn read_bounded(file: &Path, max: u64) -> Option<String> {
    let mut text = String::new();
    std::fs::File::open(file)
        .ok()?
        .take(max)
        .read_to_string(&mut text)
        .ok()?;
    Some(text)
}

/// `path` with `.` and `..` taken out by name (for a directory that does not exist yet).
fn lexical(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for part in path.components() {
        match part {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

/// The last `core.hooksPath` value of a git config file's text: `[core]` sections (any case, no
/// subsection), `hooksPath` keys (any case), a value quoted or not, comments (`#`, `;`) dropped.
fn hooks_path_in(text: &str) -> Option<String> {
    let mut in_core = false;
    let mut found = None;
    for line in text.lines() {
        let mut line = line.trim();
        if let Some(header) = line.strip_prefix('[') {
            let Some(end) = header.find(']') else {
                in_core = false;
                continue;
            };
            in_core = header[..end].trim().eq_ignore_ascii_case("core");
            // `[core] hooksPath = x` on one line is valid git.
            line = header[end + 1..].trim();
        }
        if !in_core {
            continue;
        }
        let Some((key, value)) = line.split_once('=') else {
            continue;
        };
        if key.trim().eq_ignore_ascii_case("hookspath") {
            found = Some(unquote(value));
        }
    }
    found.filter(|v| !v.is_empty())
}

/// A config value as git reads it: quotes joined, `\"`, `\\`, `\t`, `\n` unescaped, a comment
/// outside quotes ends it, surrounding blanks dropped.
fn unquote(raw: &str) -> String {
    let mut out = String::new();
    let mut quoted = false;
    let mut chars = raw.trim().chars();
    while let Some(c) = chars.next() {
        match c {
            '"' => quoted = !quoted,
            '\\' => match chars.next() {
                Some('t') => out.push('\t'),
                Some('n') => out.push('\n'),
                Some(other) => out.push(other),
                None => {}
            },
            '#' | ';' if !quoted => break,
            c => out.push(c),
        }
    }
    match quoted {
        true => out,
        false => out.trim_end().to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_core_hooks_path_as_git_does() {
        let config = "[core]\n\trepositoryformatversion = 0\n[remote \"o\"]\n\thooksPath = no\n\
                      [Core]\n\tHooksPath = \".husky/_\" ; husky\n";
        assert_eq!(hooks_path_in(config).as_deref(), Some(".husky/_"));
        assert_eq!(
            hooks_path_in("[core] hookspath = hooks # here\n").as_deref(),
            Some("hooks")
        );
        assert_eq!(hooks_path_in("[core \"x\"]\nhooksPath = a\n"), None);
        assert_eq!(hooks_path_in("[core]\nhooksPathX = a\n"), None);
        assert_eq!(
            hooks_path_in("[core]\nhooksPath = a\nhooksPath = \"b c\"\n").as_deref(),
            Some("b c")
        );
    }

    #[test]
    fn finds_the_directory_in_the_workspace() {
        let dir = tempfile::tempdir().unwrap();
        let ws = std::fs::canonicalize(dir.path()).unwrap();
        std::fs::create_dir_all(ws.join(".git")).unwrap();
        assert_eq!(hooks_dir(&ws), None, "no config");
        std::fs::write(ws.join(".git/config"), "[core]\n\thooksPath = .husky/_\n").unwrap();
        assert_eq!(hooks_dir(&ws), Some(PathBuf::from(".husky/_")));
        // From a subdirectory of the repository: relative to the worktree, then to the workspace.
        std::fs::create_dir_all(ws.join(".husky/_")).unwrap();
        std::fs::create_dir_all(ws.join("pkg")).unwrap();
        assert_eq!(hooks_dir(&ws.join("pkg")), None, "outside pkg");
        std::fs::write(ws.join(".git/config"), "[core]\n\thooksPath = pkg/hooks\n").unwrap();
        assert_eq!(hooks_dir(&ws.join("pkg")), Some(PathBuf::from("hooks")));
        // A worktree's gitfile and the common directory's config.
        let wt = ws.join("wt");
        std::fs::create_dir_all(ws.join(".git/worktrees/wt")).unwrap();
        std::fs::create_dir_all(&wt).unwrap();
        std::fs::write(wt.join(".git"), "gitdir: ../.git/worktrees/wt\n").unwrap();
        std::fs::write(ws.join(".git/worktrees/wt/commondir"), "../..\n").unwrap();
        std::fs::write(ws.join(".git/config"), "[core]\n\thooksPath = /elsewhere\n").unwrap();
        assert_eq!(hooks_dir(&wt), None, "an absolute path outside");
        std::fs::write(ws.join(".git/config"), "[core]\n\thooksPath = h\n").unwrap();
        assert_eq!(hooks_dir(&wt), Some(PathBuf::from("h")));
    }
}
