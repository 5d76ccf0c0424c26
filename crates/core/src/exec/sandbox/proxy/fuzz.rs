//! A differential fuzzer of the proxy's head parsing, run by `cargo test` (a fixed number of
//! cases from a fixed seed: the same cases every run). Heads are generated from request-like
//! pieces (targets and values carrying CR, LF, NUL and other control bytes, bare line ends,
//! duplicate and hop-by-hop headers), then mutated byte by byte. Each is checked against
//! `httparse`'s own verdict on the same bytes, and every head the proxy accepts against what it
//! would send upstream: a head `httparse` reads as the proxy built it, the proxy's `Host` first
//! and its configured header once, nothing the proxy did not accept, no control byte.
//!
//! `PI_NATIVE_OPS_FUZZ_SEED` and `PI_NATIVE_OPS_FUZZ_CASES` run other cases.

use super::head::{
    parse_head, scan, upstream_head, HeadError, Parsed, Target, MAX_HEADERS, NOT_FORWARDED,
};

/// Cases per run: a second or two of a debug build.
const DEFAULT_CASES: usize = 30_000;
const DEFAULT_SEED: u64 = 0x7072_6f78_7968_6561; // "proxyhea"

/// xorshift64*: small, seedable, good enough to pick cases.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }

    fn chance(&mut self, percent: usize) -> bool {
        self.below(100) < percent
    }

    fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
        items[self.below(items.len())]
    }

    /// One of `good` mostly, one of `bad` now and then: most heads get far enough to be
    /// accepted, and every piece shows up somewhere.
    fn piece<'a>(&mut self, (good, bad): (&[&'a str], &[&'a str])) -> &'a str {
        match self.chance(6) {
            true => self.pick(bad),
            false => self.pick(good),
        }
    }
}

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

const METHODS: (&[&str], &[&str]) = (
    &["GET", "POST", "CONNECT", "HEAD"],
    &["PUT", "get", "G\0T", "GET /", ""],
);
const SCHEMES: (&[&str], &[&str]) = (&["http://", "HTTP://"], &["https://", "ftp://", ""]);
const HOSTS: (&[&str], &[&str]) = (
    &[
        "x.org",
        "localhost",
        "127.0.0.1",
        "[::1]",
        "a.b.example",
        "x.org:8080",
    ],
    &[
        "[::1]:443",
        "x.org:0",
        "x.org:99999",
        "u@x.org",
        "x..org",
        "x.org\nHost: other.example",
        "x.org\r\nX-Token: stolen",
        "",
    ],
);
const PATHS: (&[&str], &[&str]) = (
    &["/", "/a?b=c", "", "?q", "#frag"],
    &[
        "/a\nHost: other.example",
        "/a\rHost: other.example",
        "/a\r\nHost: other.example",
        "/a b",
        "/%0d%0aHost:%20x",
        "/\t",
        "/\u{e9}",
    ],
);
const VERSIONS: (&[&str], &[&str]) = (
    &["HTTP/1.1", "HTTP/1.0"],
    &["HTTP/2", "http/1.1", "HTTP/1.1 ", ""],
);
const ENDS: (&[&str], &[&str]) = (
    &["\r\n"],
    &[
        "\r\n", "\r\n", "\r\n", "\r\n", "\r\n", "\n", "\r", "\r\r\n", "\n\r",
    ],
);
const NAMES: (&[&str], &[&str]) = (
    &[
        "Host",
        "host",
        "Content-Length",
        "Transfer-Encoding",
        "Connection",
        "Proxy-Connection",
        "Proxy-Authorization",
        "X-Token",
        "x-token",
        "Accept",
    ],
    &["Bad Name", " Folded", "X\0", ""],
);
const VALUES: (&[&str], &[&str]) = (
    &[
        "x.org",
        "other.example",
        "5",
        "chunked",
        "close",
        "from-shell",
        "a\tb",
        " spaced \t",
    ],
    &[
        "\u{1}",
        "a\nHost: other.example",
        "a\rb",
        "\u{e9}",
        "\u{7f}",
        "1, 2",
        "",
    ],
);
/// Bytes a mutation inserts or writes: the ones that end lines and split fields, and others.
const MUTATION_BYTES: &[u8] = b"\r\n\0 :\t\x7f\x80\x0bHh/";

/// One generated head (maybe with body bytes after it).
fn generate(rng: &mut Rng) -> Vec<u8> {
    let method = rng.piece(METHODS);
    let target = if method == "CONNECT" && rng.chance(80) {
        rng.piece(HOSTS).to_string()
    } else {
        format!(
            "{}{}{}",
            rng.piece(SCHEMES),
            rng.piece(HOSTS),
            rng.piece(PATHS)
        )
    };
    let sep = if rng.chance(95) {
        " "
    } else {
        rng.pick(&["  ", "\t", ""])
    };
    let mut out = format!("{method}{sep}{target} {}", rng.piece(VERSIONS));
    out.push_str(rng.piece(ENDS));
    let headers = match rng.below(50) {
        0 => MAX_HEADERS - 1 + rng.below(3),
        _ => rng.below(6),
    };
    for _ in 0..headers {
        let colon = if rng.chance(95) {
            ": "
        } else {
            rng.pick(&[":", " : ", ""])
        };
        out.push_str(&format!("{}{colon}{}", rng.piece(NAMES), rng.piece(VALUES)));
        out.push_str(rng.piece(ENDS));
    }
    out.push_str(rng.piece(ENDS));
    if rng.chance(20) {
        out.push_str("body\n\0\r");
    }
    let mut bytes = out.into_bytes();
    let mutations = if rng.chance(30) { 1 + rng.below(3) } else { 0 };
    for _ in 0..mutations {
        if bytes.is_empty() {
            break;
        }
        let at = rng.below(bytes.len());
        let byte = match rng.chance(80) {
            true => MUTATION_BYTES[rng.below(MUTATION_BYTES.len())],
            false => rng.next() as u8,
        };
        match rng.below(4) {
            0 => bytes.insert(at, byte),
            1 => bytes[at] = byte,
            2 => {
                bytes.remove(at);
            }
            _ => bytes.truncate(at),
        }
    }
    bytes
}

/// Whether `head` has a control byte other than a tab, or a CR or LF outside a CRLF.
fn has_control(head: &[u8]) -> bool {
    let mut i = 0;
    while i < head.len() {
        match head[i] {
            b'\r' if head.get(i + 1) == Some(&b'\n') => i += 1,
            b'\t' => {}
            b if b < 0x20 || b == 0x7f => return true,
            _ => {}
        }
        i += 1;
    }
    false
}

/// The head the proxy sends upstream for `head`, checked against what the proxy accepted.
fn check_upstream(case: &str, head: &super::head::Head) {
    let Target::Http {
        authority, path, ..
    } = &head.target
    else {
        return;
    };
    let out = upstream_head(head, &[("X-Token", "secret")]);
    assert!(!has_control(&out), "{case}: control byte upstream");
    let mut slots = vec![httparse::EMPTY_HEADER; head.headers.len() + 3];
    let mut parsed = httparse::Request::new(&mut slots);
    assert_eq!(
        parsed.parse(&out),
        Ok(httparse::Status::Complete(out.len())),
        "{case}: upstream head {:?}",
        String::from_utf8_lossy(&out)
    );
    assert_eq!(parsed.method, Some(head.method.as_str()), "{case}");
    assert_eq!(parsed.path, Some(path.as_str()), "{case}");
    let fields: Vec<(&str, &[u8])> = parsed.headers.iter().map(|h| (h.name, h.value)).collect();
    let (first, rest) = fields.split_first().expect("a Host header");
    assert_eq!(*first, ("Host", authority.as_bytes()), "{case}");
    assert_eq!(rest.last(), Some(&("Connection", &b"close"[..])), "{case}");
    let named = |wanted: &str| {
        fields
            .iter()
            .filter(|(n, _)| n.eq_ignore_ascii_case(wanted))
            .count()
    };
    assert_eq!(named("host"), 1, "{case}");
    assert_eq!(named("connection"), 1, "{case}");
    assert_eq!(named("x-token"), 1, "{case}");
    assert!(fields.contains(&("X-Token", &b"secret"[..])), "{case}");
    // Everything else is a header the proxy accepted, forwarded as it was.
    for (name, value) in &rest[..rest.len() - 1] {
        if *name == "X-Token" {
            continue;
        }
        assert!(
            !NOT_FORWARDED.contains(&name.to_ascii_lowercase().as_str()),
            "{case}: {name} forwarded"
        );
        assert!(
            head.headers
                .iter()
                .any(|(n, v)| n == name && v.as_bytes() == *value),
            "{case}: {name} was not accepted"
        );
    }
}

#[test]
fn head_parsing_agrees_with_httparse_and_forwards_only_what_it_accepted() {
    let seed = env_or("PI_NATIVE_OPS_FUZZ_SEED", DEFAULT_SEED).max(1);
    let cases = env_or("PI_NATIVE_OPS_FUZZ_CASES", DEFAULT_CASES);
    eprintln!("proxy head fuzz: seed {seed}, {cases} cases");
    let mut rng = Rng(seed);
    let mut accepted = 0;
    for _ in 0..cases {
        let buf = generate(&mut rng);
        let case = format!("{:?}", String::from_utf8_lossy(&buf));
        let ours = parse_head(&buf);
        // Read in pieces as the proxy reads it: the same answer, where the whole head has one.
        let mut from = 0;
        let pieces = loop {
            let to = (from + 1 + rng.below(12)).min(buf.len());
            match scan(&buf[..to], from) {
                Ok(Parsed::Partial) if to < buf.len() => from = to,
                answer => break answer,
            }
        };
        // Read in pieces, an error after the last line end waits for the next one.
        let lines = buf.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
        match (&ours, &pieces) {
            (Ok(_), _) => assert_eq!(pieces, ours, "{case}: in pieces"),
            (Err(_), Err(_)) => {}
            (Err(_), Ok(Parsed::Partial)) => {
                assert_eq!(parse_head(&buf[..lines]), Ok(Parsed::Partial), "{case}")
            }
            (Err(_), Ok(_)) => panic!("{case}: in pieces {pieces:?}"),
        }
        let mut slots = [httparse::EMPTY_HEADER; MAX_HEADERS];
        let mut theirs = httparse::Request::new(&mut slots);
        match (theirs.parse(&buf), &ours) {
            // What httparse refuses, the proxy refuses.
            (Err(httparse::Error::TooManyHeaders), _) => {
                assert_eq!(ours, Err(HeadError::TooLarge), "{case}")
            }
            (Err(_), _) => assert!(matches!(ours, Err(HeadError::Malformed(_))), "{case}"),
            // Incomplete for httparse: the proxy waits, unless the bytes so far are refused.
            (Ok(httparse::Status::Partial), Ok(Parsed::Complete(..))) => panic!("{case}"),
            (Ok(httparse::Status::Partial), Err(_)) => {
                assert!(
                    has_control(buf.strip_suffix(b"\r").unwrap_or(&buf)),
                    "{case}"
                )
            }
            (Ok(httparse::Status::Partial), Ok(Parsed::Partial)) => {}
            (Ok(httparse::Status::Complete(_)), Ok(Parsed::Partial)) => panic!("{case}"),
            (Ok(httparse::Status::Complete(end)), Err(HeadError::Malformed(why))) => {
                if *why == "control character in the request head" {
                    assert!(has_control(&buf[..end]), "{case}");
                }
            }
            (Ok(httparse::Status::Complete(_)), Err(_)) => {}
            // Accepted: where httparse says the head ends, with httparse's fields.
            (Ok(httparse::Status::Complete(end)), Ok(Parsed::Complete(head, len))) => {
                accepted += 1;
                assert_eq!(*len, end, "{case}");
                assert!(!has_control(&buf[..end]), "{case}");
                assert_eq!(theirs.method, Some(head.method.as_str()), "{case}");
                assert_eq!(theirs.headers.len(), head.headers.len(), "{case}");
                for (t, (name, value)) in theirs.headers.iter().zip(&head.headers) {
                    assert_eq!(t.name, name, "{case}");
                    let trimmed = std::str::from_utf8(t.value)
                        .unwrap()
                        .trim_matches([' ', '\t']);
                    assert_eq!(trimmed, value, "{case}");
                }
                check_upstream(&case, head);
            }
        }
    }
    // The generator reaches the accepting path often enough for the second half to mean much.
    assert!(accepted > cases / 20, "only {accepted} of {cases} accepted");
    eprintln!("proxy head fuzz: {accepted} of {cases} heads accepted");
}
