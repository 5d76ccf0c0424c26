//! What both modes show the shell of the host, decided once: the system directories it may read
//! and execute, the device nodes it may use, and the secrets under `/etc` it never sees.
//! Namespaces mode binds and masks these; Landlock mode allows and leaves out the same paths.

use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;

/// Host directories the shell may read and execute (namespaces mode: bound read-only at the same
/// path, or recreated as the same symlink).
pub(super) const SYSTEM_DIRS: &[&str] = &[
    "/usr", "/bin", "/sbin", "/lib", "/lib64", "/lib32", "/libx32",
];
/// The host's configuration: readable, but for `SECRETS` and the keys of `KEY_DIRS`.
pub(super) const ETC: &str = "/etc";
/// Files and directories under `/etc` that hold secrets: masked by an empty file or directory
/// (namespaces mode), left out of the ruleset (Landlock mode).
pub(super) const SECRETS: &[&str] = &[
    "/etc/shadow",
    "/etc/shadow-",
    "/etc/gshadow",
    "/etc/gshadow-",
    "/etc/sudoers",
    "/etc/sudoers.d",
    "/etc/security/opasswd",
    "/etc/ssl/private",
    "/etc/krb5.keytab",
    "/etc/NetworkManager/system-connections",
    "/etc/wireguard",
    "/etc/ppp/chap-secrets",
    "/etc/ppp/pap-secrets",
    "/etc/credstore",
    "/etc/credstore.encrypted",
];
/// Directories whose entries ending in `_key` are private keys (sshd's host keys).
pub(super) const KEY_DIRS: &[&str] = &["/etc/ssh"];
/// Device nodes of the host's `/dev` the shell may read and write.
pub(super) const DEVICES: &[&str] = &["null", "zero", "full", "random", "urandom", "tty"];
/// Where `DEVICES` live on the host.
pub(super) const DEV: &str = "/dev";

/// Secret paths under `/etc` present on this host: (path, is a directory).
pub(super) fn present_secrets() -> Vec<(PathBuf, bool)> {
    let mut found: Vec<(PathBuf, bool)> = SECRETS
        .iter()
        .filter_map(|path| {
            let meta = std::fs::symlink_metadata(path).ok()?;
            // A symlink is masked through its target only if that is under /etc too; masking
            // the link itself is not possible (a mount follows it).
            (!meta.file_type().is_symlink()).then(|| (PathBuf::from(path), meta.is_dir()))
        })
        .collect();
    for dir in KEY_DIRS {
        let Ok(entries) = std::fs::read_dir(dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let is_key = entry.file_name().as_bytes().ends_with(b"_key");
            if is_key && entry.file_type().is_ok_and(|t| t.is_file()) {
                found.push((entry.path(), false));
            }
        }
    }
    found
}
