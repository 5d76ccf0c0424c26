//! Windows path spellings as the bounded root compares them: one normal form, names compared
//! case-insensitively (as NTFS's upcase table does). Shared by the root and the runtime mapping.

use std::ffi::OsStr;

/// A path in one spelling: `/` as `\`, the `\\?\` and `\??\` prefixes removed
/// (`\\?\UNC\s\x` as `\\s\x`), the drive letter upper-case, no trailing `\`
/// past a drive's root. `None` unless absolute: `X:\…` or `\\server\share…`
/// (a device path `\\.\…` or `\\?\GLOBALROOT…` is not a place in a workspace).
pub(crate) fn normalize(path: &OsStr) -> Option<String> {
    let mut s = path.to_str()?.replace('/', "\\");
    for verbatim in ["\\\\?\\", "\\??\\"] {
        if let Some(rest) = s.strip_prefix(verbatim) {
            s = match rest.get(..4) {
                Some(unc) if unc.eq_ignore_ascii_case("UNC\\") => format!("\\\\{}", &rest[4..]),
                _ => rest.to_string(),
            };
            break;
        }
    }
    // `\x` is rooted on the current directory's drive, as Win32 reads it (pi
    // resolves the model's `/workspace/x` to `\workspace\x` on Windows).
    if s.starts_with('\\') && !s.starts_with("\\\\") {
        let cwd = std::env::current_dir().ok()?;
        let drive = cwd
            .to_str()?
            .trim_start_matches("\\\\?\\")
            .get(..2)?
            .to_string();
        s.insert_str(0, &drive);
    }
    let bytes = s.as_bytes();
    let absolute = match bytes {
        [d, b':', b'\\', ..] if d.is_ascii_alphabetic() => true,
        [b'\\', b'\\', c, ..] => *c != b'.' && *c != b'?' && *c != b'\\',
        _ => false,
    };
    if !absolute {
        return None;
    }
    if bytes[1] == b':' {
        s.replace_range(..1, &s[..1].to_ascii_uppercase());
    }
    while s.ends_with('\\') && s.len() > 3 {
        s.pop();
    }
    Some(s)
}

/// The rest of `path` after `prefix` (both normalized), compared as the
/// filesystem compares names (case-insensitively); `None` unless the prefix
/// ends at a separator.
pub(crate) fn strip_prefix_ci<'a>(path: &'a str, prefix: &str) -> Option<&'a str> {
    let mut chars = path.char_indices();
    for p in prefix.chars() {
        let (_, c) = chars.next()?;
        if upper(c) != upper(p) {
            return None;
        }
    }
    let rest = chars.as_str();
    if rest.is_empty() {
        Some("")
    } else if let Some(rest) = rest.strip_prefix('\\') {
        Some(rest)
    } else if prefix.ends_with('\\') {
        Some(rest)
    } else {
        None
    }
}

/// Whether two names are the same to the filesystem (case-insensitively).
pub(crate) fn eq_ci(a: &str, b: &str) -> bool {
    strip_prefix_ci(a, b) == Some("")
}

/// One character upper-cased, when that is one character (the filesystem's
/// upcase table maps one UTF-16 unit to one).
fn upper(c: char) -> char {
    let mut up = c.to_uppercase();
    match (up.next(), up.next()) {
        (Some(u), None) => u,
        _ => c,
    }
}
