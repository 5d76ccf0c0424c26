//! What an exec decides before anything is started, as pi's `createLocalBashOperations` (and pi 1.6's
//! `createLocalPowerShellOperations`) decide it: which shell runs and with which arguments, where the
//! `cwd` the agent gave is on the host, and pi's refusals of a missing shell or working directory.
//! Every face (the napi binding, the remote server) gets these through `spawn`, so their texts and
//! order are the same everywhere. pi's lookup is JavaScript reading its settings; it lives here, once,
//! because the remote server runs commands without any JavaScript, and a face must not decide it again.

use std::path::Path;

use super::ExecRequest;
use crate::error::{Error, Result};
use crate::root::RuntimeMap;

/// The shell pi prefers on unix, when it exists.
#[cfg(not(windows))]
const BASH: &str = "/bin/bash";
/// The shell of last resort on unix (found on `PATH` when spawned, as `spawn("sh")` finds it).
#[cfg(not(windows))]
const SH: &str = "sh";

/// Which of pi's shell tools an exec serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ShellKind {
    /// pi's `bash` tool: `shell -c command`, the shell found by `getShellConfig`.
    #[default]
    Bash,
    /// pi 1.6's `powershell` tool (Windows only): `getPowerShellConfig`'s shell and arguments, the
    /// command wrapped as `createLocalPowerShellOperations` wraps it.
    PowerShell,
}

impl ShellKind {
    /// How pi names the shell in its working-directory refusal.
    pub fn name(self) -> &'static str {
        match self {
            ShellKind::Bash => "bash",
            ShellKind::PowerShell => "PowerShell",
        }
    }
}

/// pi's arguments for PowerShell before the command (`POWERSHELL_ARGS`).
pub const POWERSHELL_ARGS: [&str; 5] = [
    "-NoProfile",
    "-NonInteractive",
    "-ExecutionPolicy",
    "Bypass",
    "-Command",
];
/// pi 1.6 puts this before every PowerShell command, so output is UTF-8 whatever the console's code page.
pub const POWERSHELL_UTF8_PREFIX: &str =
    "try { [Console]::OutputEncoding=[System.Text.Encoding]::UTF8 } catch {}\n";
/// pi 1.6 puts this after a command for Windows PowerShell 5.1 (`powershell.exe`), whose redirected native
/// stderr sets `$?` false: exit 0 when the last failure is only such a record and the native command exited
/// 0, else the `-Command` rule (pi's `WINDOWS_POWERSHELL_EXIT_SUFFIX`, byte for byte).
pub const POWERSHELL_EXIT_SUFFIX: &str = "\n;\nif ($?) { exit 0 }\nif (($LASTEXITCODE -eq 0) -and (\"$($Error[0].FullyQualifiedErrorId)\" -like \"NativeCommandError*\")) { exit 0 }\nexit 1";

/// A shell as pi's `getShellConfig` / `getPowerShellConfig` give it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShellConfig {
    /// The binary.
    pub shell: String,
    /// The arguments before the command (`-c`; WSL's legacy `bash.exe`: `-s`; PowerShell's five).
    pub args: Vec<String>,
    /// The command goes to the shell's standard input instead of the command line (WSL's legacy
    /// `bash.exe`, which cannot take it as an argument).
    pub command_on_stdin: bool,
}

impl ShellConfig {
    fn bash(shell: String) -> ShellConfig {
        // pi 1.6: `System32\bash.exe` (WSL's legacy launcher) reads the command from stdin (`-s`).
        let legacy_wsl = cfg!(windows) && is_legacy_wsl_bash(&shell);
        ShellConfig {
            shell,
            args: vec![if legacy_wsl { "-s" } else { "-c" }.to_string()],
            command_on_stdin: legacy_wsl,
        }
    }
}

/// pi 1.6's `isLegacyWslBashPath`: `%SystemRoot%\System32\bash.exe` or `...\Sysnative\bash.exe`
/// (case-insensitive, either separator), or under `C:\Windows` when `SystemRoot` is unset.
pub fn is_legacy_wsl_bash(shell: &str) -> bool {
    let normalized = shell.replace('/', "\\").to_lowercase();
    match std::env::var("SystemRoot") {
        Ok(root) => {
            let bytes = root.as_bytes();
            let drive_rooted = bytes.len() >= 3
                && bytes[0].is_ascii_alphabetic()
                && bytes[1] == b':'
                && matches!(bytes[2], b'\\' | b'/');
            if !drive_rooted {
                return false;
            }
            let root = root
                .replace('/', "\\")
                .trim_end_matches('\\')
                .to_lowercase();
            ["system32", "sysnative"]
                .iter()
                .any(|dir| normalized == format!("{root}\\{dir}\\bash.exe"))
        }
        Err(_) => {
            let rest = normalized.get(1..).unwrap_or("");
            normalized
                .as_bytes()
                .first()
                .is_some_and(u8::is_ascii_alphabetic)
                && (rest == ":\\windows\\system32\\bash.exe"
                    || rest == ":\\windows\\sysnative\\bash.exe")
        }
    }
}

/// Whether `path` names something, as pi's `accessSync(path, F_OK)`. On Windows a link is not
/// followed (pi 1.6 avoids `existsSync` there: the Store's app execution aliases do not stat).
fn shell_path_exists(path: &str) -> bool {
    if cfg!(windows) {
        std::fs::symlink_metadata(path).is_ok()
    } else {
        Path::new(path).exists()
    }
}

/// Where `where NAME` finds `name` first (the current directory, then each `PATH` entry), kept if
/// it exists, as pi's `findExecutableOnPath` on Windows.
#[cfg(windows)]
fn where_exe(name: &str) -> Option<String> {
    let here = std::env::current_dir().ok();
    let path = std::env::var_os("PATH").unwrap_or_default();
    let dirs = here.into_iter().chain(std::env::split_paths(&path));
    dirs.filter(|dir| !dir.as_os_str().is_empty())
        .map(|dir| dir.join(name))
        .find(|candidate| candidate.is_file())
        .map(|candidate| candidate.to_string_lossy().into_owned())
}

/// pi's message when Windows has no bash (`getShellConfig`), listing the Git Bash paths it tried.
pub fn no_bash_message(searched: &[String]) -> String {
    let list: Vec<String> = searched.iter().map(|p| format!("  {p}")).collect();
    format!(
        "No bash shell found. Options:\n  1. Install Git for Windows: https://git-scm.com/download/win\n  2. Add your bash to PATH (Cygwin, MSYS2, etc.)\n  3. Set shellPath in settings.json\n\nSearched Git Bash in:\n{}",
        list.join("\n")
    )
}

/// pi's refusal of the PowerShell tool where no PowerShell was found.
pub const NO_POWERSHELL: &str =
    "No PowerShell executable found. Install PowerShell or add powershell.exe/pwsh.exe to PATH.";
/// pi's refusal of the PowerShell tool off Windows.
pub const POWERSHELL_ONLY_ON_WINDOWS: &str = "The powershell tool is only available on Windows.";

/// pi's shell resolution (`getShellConfig`): the custom shell (`shellPath`) if it exists; else on
/// Windows Git Bash in `%ProgramFiles%`, then `%ProgramFiles(x86)%`, then `bash.exe` as `where`
/// finds it, else pi's "No bash shell found" refusal; on unix `/bin/bash`, then `bash` on this
/// process's `PATH`, then `sh`. An empty custom shell is none, as in pi.
pub fn resolve_shell(custom: Option<&str>) -> Result<String> {
    Ok(bash_config(custom)?.shell)
}

/// As [`resolve_shell`], with the arguments pi gives that shell.
pub fn bash_config(custom: Option<&str>) -> Result<ShellConfig> {
    if let Some(shell) = custom.filter(|s| !s.is_empty()) {
        if shell_path_exists(shell) {
            return Ok(ShellConfig::bash(shell.to_string()));
        }
        return Err(Error::shell_not_found(shell));
    }
    #[cfg(windows)]
    {
        let searched: Vec<String> = ["ProgramFiles", "ProgramFiles(x86)"]
            .iter()
            .filter_map(|var| std::env::var(var).ok().filter(|v| !v.is_empty()))
            .map(|dir| format!("{dir}\\Git\\bin\\bash.exe"))
            .collect();
        if let Some(found) = searched.iter().find(|p| shell_path_exists(p)) {
            return Ok(ShellConfig::bash(found.clone()));
        }
        if let Some(found) = where_exe("bash.exe") {
            return Ok(ShellConfig::bash(found));
        }
        Err(Error::no_shell(no_bash_message(&searched)))
    }
    #[cfg(not(windows))]
    {
        if Path::new(BASH).exists() {
            return Ok(ShellConfig::bash(BASH.to_string()));
        }
        #[cfg(unix)]
        {
            let search_path = std::env::var("PATH").unwrap_or_default();
            if let Some(bash) = super::find_on_path("bash", &search_path) {
                return Ok(ShellConfig::bash(bash));
            }
        }
        Ok(ShellConfig::bash(SH.to_string()))
    }
}

/// pi 1.6's `getPowerShellConfig`: `pwsh.exe` as `where` finds it, then
/// `%ProgramFiles%\PowerShell\7\pwsh.exe`, then `powershell.exe` as `where` finds it, then
/// `%SystemRoot%\System32\WindowsPowerShell\v1.0\powershell.exe`; off Windows pi's refusal.
pub fn powershell_config() -> Result<ShellConfig> {
    #[cfg(windows)]
    {
        let env_dir = |var: &str, rest: &str| {
            let dir = std::env::var(var).ok().filter(|v| !v.is_empty())?;
            let path = format!("{}\\{rest}", dir.trim_end_matches(['\\', '/']));
            shell_path_exists(&path).then_some(path)
        };
        let shell = where_exe("pwsh.exe")
            .or_else(|| env_dir("ProgramFiles", "PowerShell\\7\\pwsh.exe"))
            .or_else(|| where_exe("powershell.exe"))
            .or_else(|| {
                env_dir(
                    "SystemRoot",
                    "System32\\WindowsPowerShell\\v1.0\\powershell.exe",
                )
            })
            .ok_or_else(|| Error::no_shell(NO_POWERSHELL))?;
        Ok(ShellConfig {
            shell,
            args: POWERSHELL_ARGS.iter().map(|a| a.to_string()).collect(),
            command_on_stdin: false,
        })
    }
    #[cfg(not(windows))]
    Err(Error::no_shell(POWERSHELL_ONLY_ON_WINDOWS))
}

/// The command PowerShell is given for `command`, as pi 1.6 wraps it: the UTF-8 prefix, and for
/// Windows PowerShell (`powershell.exe`) the exit suffix, unless the command ends in a backtick
/// (which would continue its last line into the suffix).
pub fn powershell_command(shell: &str, command: &str) -> String {
    let base = shell.rsplit(['\\', '/']).next().unwrap_or(shell);
    let suffix = if base.eq_ignore_ascii_case("powershell.exe") && !command.ends_with('`') {
        POWERSHELL_EXIT_SUFFIX
    } else {
        ""
    };
    format!("{POWERSHELL_UTF8_PREFIX}{command}{suffix}")
}

/// The working directory `cwd` (as the agent gave it) exists at `host` (anything that can be
/// `stat`ed, following symlinks, as pi's `access(cwd, F_OK)`); a `cwd` no system call can take
/// (a NUL byte) does not.
pub fn check_cwd(cwd: &str, host: &Path) -> Result<()> {
    check_cwd_of(cwd, host, ShellKind::Bash)
}

/// As [`check_cwd`], the refusal naming the shell of `kind`.
fn check_cwd_of(cwd: &str, host: &Path, kind: ShellKind) -> Result<()> {
    if cwd.contains('\0') || std::fs::metadata(host).is_err() {
        return Err(Error::working_directory_of(cwd, kind.name()));
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
    /// The arguments before the command (`-c` for bash).
    pub args: Vec<String>,
    /// The command as the shell gets it (PowerShell's: wrapped as pi wraps it).
    pub command: String,
    /// The command goes to standard input, not the command line (WSL's legacy `bash.exe`).
    pub command_on_stdin: bool,
}

/// The preflight of `request`, in pi's order: the shell, then the working directory (on the host:
/// through the sandbox's root, or the request's `cwd_map`).
pub fn check(request: &ExecRequest) -> Result<Ready> {
    check_kind(request, ShellKind::Bash)
}

/// As [`check`], for the shell tool `kind` (PowerShell ignores `request.shell`, as pi has no
/// setting for it).
pub fn check_kind(request: &ExecRequest, kind: ShellKind) -> Result<Ready> {
    let config = match kind {
        ShellKind::Bash => bash_config(request.shell.as_deref())?,
        ShellKind::PowerShell => powershell_config()?,
    };
    let command = match kind {
        ShellKind::Bash => request.command.clone(),
        ShellKind::PowerShell => powershell_command(&config.shell, &request.command),
    };
    let sandbox_map = request.sandbox.as_ref().map(|s| {
        let spec = s.spec();
        RuntimeMap::new(&spec.root, &spec.runtime_root)
    });
    let map = sandbox_map.as_ref().or(request.cwd_map.as_ref());
    let cwd = Path::new(&request.cwd);
    let host = map.map_or_else(|| cwd.to_path_buf(), |m| m.to_host(cwd));
    check_cwd_of(&request.cwd, &host, kind)?;
    let cwd = if request.sandbox.is_some() {
        request.cwd.clone()
    } else {
        host.to_string_lossy().into_owned()
    };
    Ok(Ready {
        shell: config.shell,
        cwd,
        args: config.args,
        command,
        command_on_stdin: config.command_on_stdin,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ErrorKind;

    #[test]
    fn powershell_commands_are_wrapped_as_pi_wraps_them() {
        let plain = powershell_command(r"C:\Program Files\PowerShell\7\pwsh.exe", "Get-Date");
        assert_eq!(plain, format!("{POWERSHELL_UTF8_PREFIX}Get-Date"));
        let windows = powershell_command(r"C:\WINDOWS\System32\PowerShell.EXE", "git push");
        assert_eq!(
            windows,
            format!("{POWERSHELL_UTF8_PREFIX}git push{POWERSHELL_EXIT_SUFFIX}")
        );
        let continued = powershell_command("powershell.exe", "dir `");
        assert_eq!(continued, format!("{POWERSHELL_UTF8_PREFIX}dir `"));
        assert!(POWERSHELL_EXIT_SUFFIX.starts_with("\n;\nif ($?) { exit 0 }\n"));
        assert!(POWERSHELL_EXIT_SUFFIX.ends_with("\nexit 1"));
    }

    #[test]
    fn the_no_bash_message_is_pis() {
        let text = no_bash_message(&[
            r"C:\Program Files\Git\bin\bash.exe".into(),
            r"C:\Program Files (x86)\Git\bin\bash.exe".into(),
        ]);
        assert_eq!(
            text,
            "No bash shell found. Options:\n  1. Install Git for Windows: https://git-scm.com/download/win\n  \
             2. Add your bash to PATH (Cygwin, MSYS2, etc.)\n  3. Set shellPath in settings.json\n\n\
             Searched Git Bash in:\n  C:\\Program Files\\Git\\bin\\bash.exe\n  \
             C:\\Program Files (x86)\\Git\\bin\\bash.exe"
        );
        assert_eq!(
            Error::no_shell(text.clone()).node_fields().message,
            text,
            "the whole message, no code"
        );
        assert_eq!(Error::no_shell(text).code(), None);
    }

    #[test]
    fn the_working_directory_refusal_names_the_shell() {
        let err = Error::working_directory_of(r"C:\gone", ShellKind::PowerShell.name());
        assert_eq!(
            err.to_string(),
            "Working directory does not exist: C:\\gone\nCannot execute PowerShell commands."
        );
        assert_eq!(err.kind(), ErrorKind::WorkingDirectory);
    }

    #[cfg(not(windows))]
    #[test]
    fn powershell_is_refused_off_windows_in_pis_words() {
        let err = powershell_config().unwrap_err();
        assert_eq!(
            err.to_string(),
            "The powershell tool is only available on Windows."
        );
        assert_eq!(err.kind(), ErrorKind::NoShell);
    }

    #[cfg(unix)]
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

    #[cfg(unix)]
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

    #[cfg(unix)]
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
        mapped.cwd_map = Some(RuntimeMap::new(dir.path(), "/workspace"));
        let err = check(&mapped).unwrap_err();
        assert_eq!(
            err.to_string(),
            "Working directory does not exist: /workspace/sub\nCannot execute bash commands."
        );
        std::fs::create_dir(dir.path().join("sub")).unwrap();
        let ready = check(&mapped).unwrap();
        assert_eq!(Path::new(&ready.cwd), dir.path().join("sub"));
    }

    #[cfg(unix)]
    #[test]
    fn the_shell_is_checked_before_the_cwd() {
        let err = check(&request(Some("/no/such/shell"), "/definitely/missing")).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::ShellNotFound);
    }

    #[cfg(unix)]
    #[test]
    fn a_sandboxed_cwd_is_checked_under_the_root_and_kept_in_runtime_form() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("src")).unwrap();
        let mut req = request(Some("/bin/sh"), "/workspace/src");
        req.sandbox = Some(super::super::sandbox::Sandbox::new(dir.path()).into());
        let ready = check(&req).unwrap();
        assert_eq!(
            (ready.shell.as_str(), ready.cwd.as_str(), &ready.args[..]),
            ("/bin/sh", "/workspace/src", &["-c".to_string()][..])
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
