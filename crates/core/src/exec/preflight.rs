//! What an exec decides before anything is forked, as pi's `createLocalBashOperations` decides it:
//! which shell runs, where the `cwd` the agent gave is on the host, and pi's refusals of a missing
//! custom shell or working directory. Every face (the napi binding, the remote server) gets these
//! through `spawn`, so their texts and order are the same everywhere.

use std::path::{Path, PathBuf};

use super::ExecRequest;
use crate::error::{Error, Result};

/// The shell pi prefers, when it exists.
const BASH: &str = "/bin/bash";
/// The shell of last resort (found on `PATH` when spawned, as `spawn("sh")` finds it).
const SH: &str = "sh";

/// Where an agent's paths are on the host: `runtime` (the root as the agent sees it) is `host`.
/// A path under `runtime` is the same path under `host`; any other path is the host's own.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CwdMap {
    /// The workspace on the host.
    pub host: PathBuf,
    /// The workspace as the agent sees it.
    pub runtime: PathBuf,
}

impl CwdMap {
    /// `cwd` on the host, mapped by components (so `/workspaces` is not under `/workspace`), as
    /// the shell would be given it locally (no `..` resolved).
    pub fn host_path(&self, cwd: &Path) -> PathBuf {
        if self.host == self.runtime {
            return cwd.to_path_buf();
        }
        match cwd.strip_prefix(&self.runtime) {
            Ok(rel) if rel.as_os_str().is_empty() => self.host.clone(),
            Ok(rel) => self.host.join(rel),
            Err(_) => cwd.to_path_buf(),
        }
    }
}

/// pi's Unix shell resolution: the custom shell (`shellPath`) if it exists, else `/bin/bash`,
/// else `bash` on this process's `PATH`, else `sh`. An empty custom shell is none, as in pi.
pub fn resolve_shell(custom: Option<&str>) -> Result<String> {
    if let Some(shell) = custom.filter(|s| !s.is_empty()) {
        if Path::new(shell).exists() {
            return Ok(shell.to_string());
        }
        return Err(Error::shell_not_found(shell));
    }
    if Path::new(BASH).exists() {
        return Ok(BASH.to_string());
    }
    #[cfg(unix)]
    {
        let search_path = std::env::var("PATH").unwrap_or_default();
        if let Some(bash) = super::find_on_path("bash", &search_path) {
            return Ok(bash);
        }
    }
    Ok(SH.to_string())
}

/// The working directory `cwd` (as the agent gave it) exists at `host` (anything that can be
/// `stat`ed, following symlinks, as pi's `access(cwd, F_OK)`); a `cwd` no system call can take
/// (a NUL byte) does not.
pub fn check_cwd(cwd: &str, host: &Path) -> Result<()> {
    if cwd.contains('\0') || std::fs::metadata(host).is_err() {
        return Err(Error::working_directory(cwd));
    }
    Ok(())
}

/// An exec that passed its preflight: the shell to run and the directory to start it in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ready {
    /// The shell binary to run as `shell -c command`.
    pub shell: String,
    /// As the shell is given it: the host path, or in a sandbox the runtime form (namespaces
    /// mode remaps the root; Landlock mode requires both forms to be equal).
    pub cwd: String,
}

/// The preflight of `request`, in pi's order: the shell, then the working directory (on the host:
/// through the sandbox's root, or the request's `cwd_map`).
pub fn check(request: &ExecRequest) -> Result<Ready> {
    let shell = resolve_shell(request.shell.as_deref())?;
    let sandbox_map = request.sandbox.as_ref().map(|s| {
        let spec = s.spec();
        CwdMap {
            host: spec.root.clone(),
            runtime: spec.runtime_root.clone(),
        }
    });
    let map = sandbox_map.as_ref().or(request.cwd_map.as_ref());
    let cwd = Path::new(&request.cwd);
    let host = map.map_or_else(|| cwd.to_path_buf(), |m| m.host_path(cwd));
    check_cwd(&request.cwd, &host)?;
    let cwd = if request.sandbox.is_some() {
        request.cwd.clone()
    } else {
        host.to_string_lossy().into_owned()
    };
    Ok(Ready { shell, cwd })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ErrorKind;

    fn request(shell: Option<&str>, cwd: &str) -> ExecRequest {
        ExecRequest {
            shell: shell.map(str::to_string),
            command: "true".into(),
            cwd: cwd.into(),
            env: None,
            cwd_map: None,
            sandbox: None,
            events: None,
        }
    }

    #[test]
    fn shells_resolve_as_pi_resolves_them() {
        let missing = resolve_shell(Some("/no/such/shell")).unwrap_err();
        assert_eq!(missing.kind(), ErrorKind::ShellNotFound);
        assert_eq!(
            missing.to_string(),
            "Custom shell path not found: /no/such/shell"
        );
        assert_eq!(resolve_shell(Some("/bin/sh")).unwrap(), "/bin/sh");
        let default = resolve_shell(None).unwrap();
        assert_eq!(resolve_shell(Some("")).unwrap(), default);
        if Path::new(BASH).exists() {
            assert_eq!(default, BASH);
        }
    }

    #[test]
    fn cwd_under_the_runtime_root_moves_to_the_host() {
        let map = CwdMap {
            host: "/home/u/proj".into(),
            runtime: "/workspace".into(),
        };
        let host = |cwd: &str| map.host_path(Path::new(cwd));
        assert_eq!(host("/workspace"), Path::new("/home/u/proj"));
        assert_eq!(host("/workspace/"), Path::new("/home/u/proj"));
        assert_eq!(host("/workspace/src"), Path::new("/home/u/proj/src"));
        assert_eq!(host("/workspaces"), Path::new("/workspaces"));
        assert_eq!(host("/tmp"), Path::new("/tmp"));
        let same = CwdMap {
            host: "/w".into(),
            runtime: "/w".into(),
        };
        assert_eq!(
            same.host_path(Path::new("/w/x/../y")),
            Path::new("/w/x/../y")
        );
    }

    #[test]
    fn a_missing_or_unusable_cwd_is_pis_refusal_with_the_cwd_as_given() {
        let missing = check(&request(None, "/definitely/missing")).unwrap_err();
        assert_eq!(missing.kind(), ErrorKind::WorkingDirectory);
        assert_eq!(
            missing.to_string(),
            "Working directory does not exist: /definitely/missing\nCannot execute bash commands."
        );
        let nul = check(&request(None, "/tmp\0x")).unwrap_err();
        assert_eq!(nul.kind(), ErrorKind::WorkingDirectory);
        // Mapped: checked on the host, reported as the agent wrote it.
        let dir = tempfile::tempdir().unwrap();
        let mut mapped = request(None, "/workspace/sub");
        mapped.cwd_map = Some(CwdMap {
            host: dir.path().into(),
            runtime: "/workspace".into(),
        });
        let err = check(&mapped).unwrap_err();
        assert_eq!(
            err.to_string(),
            "Working directory does not exist: /workspace/sub\nCannot execute bash commands."
        );
        std::fs::create_dir(dir.path().join("sub")).unwrap();
        let ready = check(&mapped).unwrap();
        assert_eq!(Path::new(&ready.cwd), dir.path().join("sub"));
    }

    #[test]
    fn the_shell_is_checked_before_the_cwd() {
        let err = check(&request(Some("/no/such/shell"), "/definitely/missing")).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::ShellNotFound);
    }

    #[test]
    fn a_sandboxed_cwd_is_checked_under_the_root_and_kept_in_runtime_form() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("src")).unwrap();
        let mut req = request(Some("/bin/sh"), "/workspace/src");
        req.sandbox = Some(super::super::sandbox::Sandbox::new(dir.path()).into());
        assert_eq!(
            check(&req).unwrap(),
            Ready {
                shell: "/bin/sh".into(),
                cwd: "/workspace/src".into()
            }
        );
        req.cwd = "/workspace/none".into();
        assert_eq!(check(&req).unwrap_err().kind(), ErrorKind::WorkingDirectory);
        // The sandbox's default runtime root is the core's.
        assert_eq!(
            super::super::sandbox::Sandbox::new(dir.path()).runtime_root,
            Path::new(super::super::sandbox::DEFAULT_RUNTIME_ROOT)
        );
    }
}
