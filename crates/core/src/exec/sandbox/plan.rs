//! The sandbox of one exec prepared in Node (`Plan`): the plain data of it the sandbox helper is
//! handed (`child_sandbox`), and the services Node runs for it (the notification handler's
//! policy, the proxy, a private temp dir).

use std::io;
use std::os::fd::RawFd;
use std::path::{Path, PathBuf};

use super::landlock::{self, Ruleset};
use super::namespaces::{NsPlan, TemplateError};
use super::paths::{Kind, Resolved};
use super::seccomp;
use super::setup::{
    invalid_spec, step_index, unavailable, userns_hint, Step, FIXED_STEPS, STEP_BASE,
};
use super::{Mode, Sandbox};

/// `PATH` inside the sandbox: the usual system order, `/usr/local` first.
pub(super) const SANDBOX_PATH: &str =
    "/usr/local/bin:/usr/local/sbin:/usr/bin:/usr/sbin:/bin:/sbin";
/// Why `mode` cannot hold the shell to a policy here: every rule rests on user notification.
pub(super) fn policy_unenforceable(mode: Mode) -> String {
    format!(
        "{} mode cannot enforce the policy (denyRead, denyWrite, the protected defaults) without \
         seccomp user notification, which this machine lacks; pass policy: {{ protect: false }} and \
         no rules to run without it",
        match mode {
            Mode::Auto => "the sandbox",
            mode => mode.name(),
        }
    )
}

/// The sandbox of one exec, prepared in Node: what the helper is handed, and the services Node runs.
pub(in crate::exec) struct Plan {
    env: Vec<String>,
    ns: Option<NsPlan>,
    ruleset: Option<Ruleset>,
    seccomp: Vec<libc::sock_filter>,
    temp_dir: Option<super::TempDir>,
    /// The calls answered by a handler thread (seccomp user notification); shared with the
    /// handler threads of the plan's execs.
    notify: Option<std::sync::Arc<super::notify::Policy>>,
    /// The network allow-list's proxy (namespaces mode with `network_allow`), running while the
    /// plan lives: from the first exec of its sandbox until the sandbox is dropped.
    proxy: Option<super::proxy::Proxy>,
}

impl Plan {
    pub(in crate::exec) fn new(
        sandbox: &Sandbox,
        paths: &Resolved,
        guard: Option<super::notify::guard::Filter>,
        mode: Mode,
    ) -> io::Result<Plan> {
        let root = paths.root().real.clone();
        if guard.is_some() && !super::notify::available() {
            return Err(unavailable(policy_unenforceable(mode)));
        }
        let mut plan = Plan {
            env: Vec::new(),
            ns: None,
            ruleset: None,
            seccomp: Vec::new(),
            temp_dir: None,
            notify: None,
            proxy: None,
        };
        let home = match mode {
            Mode::Namespaces | Mode::Auto => {
                plan.ns = Some(NsPlan::new(sandbox, paths)?);
                plan.seccomp = seccomp::program(seccomp::Options {
                    sockets: seccomp::Sockets::Isolated,
                    shares_processes: false,
                    deny_xattrs: false,
                })?;
                plan.notify = super::notify::available()
                    .then(|| super::notify::Policy::namespaces(guard))
                    .transpose()?
                    .map(std::sync::Arc::new);
                PathBuf::from("/tmp")
            }
            Mode::Landlock => {
                if sandbox.network_allow.is_some() {
                    return Err(invalid_spec(super::network_allow_needs_namespaces()));
                }
                let runtime = std::fs::canonicalize(&sandbox.runtime_root).ok();
                if runtime.as_deref() != Some(root.as_path()) {
                    return Err(invalid_spec(format!(
                        "Landlock mode cannot remap paths: runtimeRoot ({}) must be the root ({})",
                        sandbox.runtime_root.display(),
                        sandbox.root.display()
                    )));
                }
                let abi = landlock::abi().map_err(unavailable)?;
                if !seccomp_available() {
                    return Err(unavailable(
                        "Landlock mode needs seccomp (CONFIG_SECCOMP_FILTER)".into(),
                    ));
                }
                let temp = super::TempDir::new()?;
                plan.ruleset = Some(Ruleset::new(sandbox, paths, &temp.0, abi)?);
                let sockets = if sandbox.network {
                    seccomp::Sockets::NoUnix
                } else {
                    seccomp::Sockets::None
                };
                // xattrs (ACLs included) are the notification handler's: refused outside the
                // writable areas, for every caller. Without user notification a root caller's
                // shell (which owns the host's system files) gets none at all.
                // SAFETY: a plain getter.
                let root_caller = unsafe { libc::geteuid() } == 0;
                plan.seccomp = seccomp::program(seccomp::Options {
                    sockets,
                    shares_processes: true,
                    deny_xattrs: root_caller && !super::notify::available(),
                })?;
                if super::notify::available() {
                    // The root and readWrite paths by the descriptors held since the sandbox
                    // was made; the private temp dir is this command's own.
                    let mut writable = Vec::new();
                    for held in &paths.held {
                        if matches!(held.kind, Kind::Root | Kind::ReadWrite) {
                            writable.push((held.real.clone(), held.fd.try_clone()?));
                        }
                    }
                    writable.push(super::notify::area(&temp.0)?);
                    let ruleset =
                        plan.ruleset.as_ref().map(Ruleset::raw_fd).ok_or_else(|| {
                            invalid_spec("Landlock mode without a ruleset".into())
                        })?;
                    // SAFETY: the ruleset's open descriptor, held by `plan` (borrowed here only
                    // to be duplicated).
                    let ruleset = unsafe { std::os::fd::BorrowedFd::borrow_raw(ruleset) };
                    plan.notify = Some(std::sync::Arc::new(
                        super::notify::Policy::landlock(writable, ruleset, guard).map_err(|e| {
                            invalid_spec(format!("cannot prepare the notification handler: {e}"))
                        })?,
                    ));
                }
                let home = temp.0.clone();
                plan.temp_dir = Some(temp);
                home
            }
        };
        if let Some(built) = plan.ns.as_mut().map(NsPlan::build_template) {
            match built {
                Ok(listeners) if listeners.is_empty() => {}
                Ok(listeners) => {
                    let allow = sandbox.network_allow.as_ref().ok_or_else(|| {
                        invalid_spec("proxy listeners without network.allow".into())
                    })?;
                    let rules = super::proxy::Rules::new(allow).map_err(invalid_spec)?;
                    plan.proxy = Some(super::proxy::Proxy::start(rules, listeners)?);
                }
                Err(TemplateError::Io(e)) => return Err(e),
                Err(TemplateError::Step(code)) => {
                    return Err(plan
                        .setup_error(code)
                        .unwrap_or_else(|| io::Error::from_raw_os_error(code)))
                }
            }
        }
        // The proxy's variables first: `sandbox.env` may still replace them.
        let mut extra = plan.proxy.as_ref().map(proxy_env).unwrap_or_default();
        extra.extend(sandbox.env.iter().cloned());
        plan.env = clean_env(&home, &extra)?;
        Ok(plan)
    }

    /// The network allow-list's proxy, when the sandbox has one.
    pub(in crate::exec) fn proxy(&self) -> Option<&super::proxy::Proxy> {
        self.proxy.as_ref()
    }

    /// Whether every exec of the sandbox may use this plan (namespaces mode: the template); a
    /// Landlock plan holds one exec's private temp dir.
    pub(in crate::exec) fn reusable(&self) -> bool {
        self.ns.is_some()
    }

    /// The shell's whole environment, `KEY=VALUE`.
    pub(in crate::exec) fn env(&self) -> &[String] {
        &self.env
    }

    /// What the user-notification handler allows, when the plan has one.
    pub(in crate::exec) fn notify(&self) -> Option<&std::sync::Arc<super::notify::Policy>> {
        self.notify.as_ref()
    }

    /// What the sandbox helper is handed for one command: plain data, its descriptors (the
    /// notification channel `notify_channel`, the ruleset, the template's namespaces) numbered as
    /// `hand` places them in the helper (`hand` takes one of ours and answers the helper's
    /// number; -1 stays -1).
    pub(in crate::exec) fn child_sandbox(
        &self,
        notify_channel: RawFd,
        hand: &mut dyn FnMut(RawFd) -> RawFd,
    ) -> crate::exec::child::ChildSandbox {
        let [ruleset, user, mnt, net] = self.kept_fds();
        crate::exec::child::ChildSandbox {
            seccomp: self.seccomp.clone(),
            notify: self.notify.as_ref().map(|policy| policy.program().to_vec()),
            notify_channel: hand(notify_channel),
            ruleset: hand(ruleset),
            namespaces: self
                .ns
                .as_ref()
                .map(|ns| crate::exec::child::CommandScript {
                    template_fds: [hand(user), hand(mnt), hand(net)],
                    ..ns.command_script.clone()
                }),
        }
    }

    /// The descriptors the supervisor must keep open (-1: none): the Landlock ruleset for the
    /// shell's process, the template's namespaces to join.
    fn kept_fds(&self) -> [std::os::fd::RawFd; 4] {
        let [user, mnt, net] = self.ns.as_ref().map_or([-1; 3], NsPlan::kept_fds);
        [
            self.ruleset.as_ref().map_or(-1, Ruleset::raw_fd),
            user,
            mnt,
            net,
        ]
    }

    /// The private temp dir to remove once the exec is over (Landlock mode).
    pub(in crate::exec) fn take_temp_dir(&mut self) -> Option<super::TempDir> {
        self.temp_dir.take()
    }

    /// The error a spawn failure `value` stands for, if it is a setup step's.
    pub(in crate::exec) fn setup_error(&self, value: i32) -> Option<io::Error> {
        if value < STEP_BASE {
            return None;
        }
        let (index, errno) = ((value / STEP_BASE - 1) as usize, value % STEP_BASE);
        let step = match FIXED_STEPS.get(index) {
            Some((_, text)) => text.to_string(),
            None => self
                .ns
                .as_ref()
                .and_then(|ns| ns.descriptions.get(index - FIXED_STEPS.len()))
                .cloned()
                .unwrap_or_else(|| format!("setup step {index}")),
        };
        // The template's bind of a configured path found another file there (`Verified`).
        if errno == libc::ESTALE && index >= FIXED_STEPS.len() {
            return Some(unavailable(format!(
                "the sandbox setup refused {step}: it is no longer what the sandbox was made \
                 with (replaced, moved or swapped for a symlink)"
            )));
        }
        let os = io::Error::from_raw_os_error(errno);
        // What to do: a namespaces step the machine refuses has a fallback.
        let advice = if self.ns.is_some() && index >= step_index(Step::Clone) {
            format!(
                "{}; mode \"auto\" uses Landlock where namespaces are refused",
                userns_hint()
            )
        } else {
            String::new()
        };
        Some(unavailable(format!(
            "the sandbox setup failed {step}: {os}{advice}"
        )))
    }
}

/// Loopback names that stay on the sandbox's own loopback (`NO_PROXY`) unless the allow-list
/// names them (then they mean the host's, through the proxy).
const LOOPBACK_NAMES: [&str; 3] = ["localhost", "127.0.0.1", "::1"];

/// The variables that point HTTP clients (curl, npm, pip, git, Node's fetch with
/// `NODE_USE_ENV_PROXY`) at the proxy, in both spellings tools read.
fn proxy_env(proxy: &super::proxy::Proxy) -> Vec<String> {
    let url = format!("http://127.0.0.1:{}", proxy.port());
    let no_proxy: Vec<&str> = LOOPBACK_NAMES
        .into_iter()
        .filter(|name| !proxy.rules().names(name))
        .collect();
    let no_proxy = no_proxy.join(",");
    let mut env = Vec::new();
    for key in ["HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"] {
        env.push(format!("{key}={url}"));
        env.push(format!("{}={url}", key.to_ascii_lowercase()));
    }
    // Node (22.21, 24+) reads the variables only when told to.
    env.push("NODE_USE_ENV_PROXY=1".to_string());
    env.push(format!("NO_PROXY={no_proxy}"));
    env.push(format!("no_proxy={no_proxy}"));
    env
}

/// HOME, PATH, TMPDIR, LANG and TERM, then `extra` (which may replace them).
pub(super) fn clean_env(home: &Path, extra: &[String]) -> io::Result<Vec<String>> {
    let home = home.to_string_lossy();
    let mut env: Vec<(String, String)> = [
        ("HOME", home.as_ref()),
        ("PATH", SANDBOX_PATH),
        ("TMPDIR", home.as_ref()),
        ("LANG", "C.UTF-8"),
        ("TERM", "dumb"),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    for entry in extra {
        let Some((key, value)) = entry.split_once('=') else {
            return Err(invalid_spec(format!("env entry {entry:?} has no \"=\"")));
        };
        let (key, value) = (key.to_string(), value.to_string());
        if key.is_empty() || key.contains('=') || key.contains('\0') || value.contains('\0') {
            return Err(invalid_spec(format!("invalid environment entry {key:?}")));
        }
        match env.iter_mut().find(|(k, _)| *k == key) {
            Some(entry) => entry.1 = value,
            None => env.push((key, value)),
        }
    }
    Ok(env.into_iter().map(|(k, v)| format!("{k}={v}")).collect())
}

pub(super) fn seccomp_available() -> bool {
    // SAFETY: a query; EINVAL means the kernel has no seccomp.
    unsafe { libc::prctl(libc::PR_GET_SECCOMP, 0, 0, 0, 0) >= 0 }
}
