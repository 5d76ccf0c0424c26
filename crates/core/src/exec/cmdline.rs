//! A Windows command line (`CreateProcessW`'s `lpCommandLine`) from an argument vector, so that a
//! program splitting it the MSVCRT way (`CommandLineToArgvW`, the C runtime's startup code, MSYS2's
//! and Cygwin's `bash.exe`) gets back exactly the arguments given. Plain code, tested on every host.

/// Why an argument vector has no command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CmdlineError {
    /// A NUL character: the command line is a NUL-terminated string.
    Nul,
    /// A `"` in the program name, which the MSVCRT rules cannot carry in `argv[0]` (nor can a
    /// Windows file name hold one).
    QuoteInProgram,
}

/// `program` then each of `args`, as one command line.
///
/// `argv[0]` is read by its own rule (everything up to the closing quote, backslashes literal),
/// so the program is always quoted and may not contain `"`. Every other argument is quoted too,
/// even one with no space in it: a quoted argument is never glob-expanded by the Cygwin/MSYS2
/// runtime (which expands an unquoted `*.txt` itself), and the MSVCRT rules give back the same
/// text either way. Inside quotes, backslashes are literal except before a `"`: `n` backslashes
/// then a quote are written as `2n + 1` backslashes and the quote, and `n` backslashes before the
/// closing quote as `2n`.
pub fn command_line(program: &str, args: &[&str]) -> Result<String, CmdlineError> {
    if program.contains('\0') || args.iter().any(|a| a.contains('\0')) {
        return Err(CmdlineError::Nul);
    }
    if program.contains('"') {
        return Err(CmdlineError::QuoteInProgram);
    }
    let mut line = String::with_capacity(
        program.len() + 3 + args.iter().map(|a| a.len() * 2 + 3).sum::<usize>(),
    );
    line.push('"');
    line.push_str(program);
    line.push('"');
    for arg in args {
        line.push(' ');
        push_quoted(&mut line, arg);
    }
    Ok(line)
}

fn push_quoted(line: &mut String, arg: &str) {
    line.push('"');
    let mut backslashes = 0usize;
    for c in arg.chars() {
        match c {
            '\\' => backslashes += 1,
            '"' => {
                line.extend(std::iter::repeat_n('\\', 2 * backslashes + 1));
                line.push('"');
                backslashes = 0;
            }
            _ => {
                line.extend(std::iter::repeat_n('\\', backslashes));
                line.push(c);
                backslashes = 0;
            }
        }
    }
    line.extend(std::iter::repeat_n('\\', 2 * backslashes));
    line.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The MSVCRT (post-2008 UCRT) splitting of a command line, as `CommandLineToArgvW` does it:
    /// `argv[0]` by its own rule, then the backslash/quote rules, `""` inside quotes a literal quote.
    fn split(line: &str) -> Vec<String> {
        let chars: Vec<char> = line.chars().collect();
        let mut i = 0;
        let mut argv = Vec::new();
        // argv[0]
        let mut first = String::new();
        if chars.first() == Some(&'"') {
            i = 1;
            while i < chars.len() && chars[i] != '"' {
                first.push(chars[i]);
                i += 1;
            }
            i += 1;
        } else {
            while i < chars.len() && !matches!(chars[i], ' ' | '\t') {
                first.push(chars[i]);
                i += 1;
            }
        }
        argv.push(first);
        loop {
            while i < chars.len() && matches!(chars[i], ' ' | '\t') {
                i += 1;
            }
            if i >= chars.len() {
                break;
            }
            let mut arg = String::new();
            let mut quoted = false;
            while i < chars.len() {
                let c = chars[i];
                if c == '\\' {
                    let start = i;
                    while i < chars.len() && chars[i] == '\\' {
                        i += 1;
                    }
                    let n = i - start;
                    if i < chars.len() && chars[i] == '"' {
                        arg.extend(std::iter::repeat_n('\\', n / 2));
                        if n % 2 == 1 {
                            arg.push('"');
                            i += 1;
                        }
                    } else {
                        arg.extend(std::iter::repeat_n('\\', n));
                    }
                    continue;
                }
                if c == '"' {
                    if quoted && chars.get(i + 1) == Some(&'"') {
                        arg.push('"');
                        i += 2;
                        continue;
                    }
                    quoted = !quoted;
                    i += 1;
                    continue;
                }
                if !quoted && matches!(c, ' ' | '\t') {
                    break;
                }
                arg.push(c);
                i += 1;
            }
            argv.push(arg);
        }
        argv
    }

    fn round_trip(program: &str, args: &[&str]) {
        let line = command_line(program, args).unwrap();
        let mut expected = vec![program.to_string()];
        expected.extend(args.iter().map(|a| a.to_string()));
        assert_eq!(split(&line), expected, "command line {line:?}");
    }

    #[test]
    fn arguments_come_back_exactly() {
        let program = r"C:\Program Files\Git\bin\bash.exe";
        for command in [
            "echo hi",
            "",
            "plain",
            "*.txt",
            r#"echo "quoted" 'single'"#,
            r"C:\dir\",
            r"C:\dir\\",
            r#"a\"b"#,
            r#"a\\"b"#,
            r#"\\server\share\ "x""#,
            "tab\there\nnewline",
            r#"printf '%s\n' "$HOME" \"#,
            "ünïcödé ✓ 𝄞",
            r#""""#,
            r"\",
        ] {
            round_trip(program, &["-c", command]);
        }
        round_trip(
            r"C:\pwsh.exe",
            &["-NoProfile", "-Command", r#"Write-Output "a b""#],
        );
    }

    #[test]
    fn the_exact_form() {
        assert_eq!(
            command_line(r"C:\bash.exe", &["-c", r#"echo "x" \ "#]).unwrap(),
            r#""C:\bash.exe" "-c" "echo \"x\" \ ""#
        );
        assert_eq!(
            command_line(r"C:\bash.exe", &[r"dir\"]).unwrap(),
            r#""C:\bash.exe" "dir\\""#
        );
    }

    #[test]
    fn what_cannot_be_a_command_line_is_refused() {
        assert_eq!(command_line("bash", &["a\0b"]), Err(CmdlineError::Nul));
        assert_eq!(command_line("ba\0sh", &[]), Err(CmdlineError::Nul));
        assert_eq!(
            command_line("ba\"sh", &[]),
            Err(CmdlineError::QuoteInProgram)
        );
    }
}
