//! Request heads: tokenized by `httparse`, then held to the proxy's own rules (no control bytes,
//! CONNECT or an absolute `http://` URI, one `Host`, a plain `Content-Length`), and the head sent
//! upstream built from the parsed fields alone, never from the client's bytes.

/// The most bytes of a request head (request line and headers) the proxy reads: far above what
/// package managers and git send (a few hundred bytes), far below what costs memory per
/// connection. A longer head is answered `431`.
pub const MAX_HEAD_BYTES: usize = 32 << 10;
/// The most header lines a request head may have (`431` beyond): as many as common servers take.
pub const MAX_HEADERS: usize = 100;

/// Where a request goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Target {
    /// `CONNECT host:port`: a tunnel.
    Tunnel { host: String, port: u16 },
    /// `GET http://authority/path`: one forwarded request.
    Http {
        host: String,
        port: u16,
        /// `host[:port]` as the URI gave it: the `Host` header sent upstream.
        authority: String,
        /// The origin-form target (`/path?query`).
        path: String,
    },
}

impl Target {
    pub(crate) fn host_port(&self) -> (&str, u16) {
        match self {
            Target::Tunnel { host, port } | Target::Http { host, port, .. } => (host, *port),
        }
    }
}

/// A parsed request head.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Head {
    pub(crate) method: String,
    pub(crate) target: Target,
    pub(crate) headers: Vec<(String, String)>,
    /// The request body's length (`Content-Length`; 0 without one).
    pub(crate) body: u64,
}

/// How much of a head the bytes so far hold.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Parsed {
    /// Not all of it yet, and nothing wrong so far.
    Partial,
    /// All of it: the head, and its length in bytes (what follows is the body).
    Complete(Head, usize),
}

/// Why a request head is refused, and the status it is answered with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum HeadError {
    /// `400`: not HTTP/1.x, a control byte, or a line the proxy cannot read.
    Malformed(&'static str),
    /// `431`: more than `MAX_HEAD_BYTES` or `MAX_HEADERS`.
    TooLarge,
    /// `411`: a chunked request body (only `Content-Length` bodies are forwarded).
    LengthRequired,
    /// `501`: an `https://` URI without `CONNECT`, another scheme, or an origin-form target.
    Unsupported(&'static str),
}

impl HeadError {
    pub(crate) fn status(self) -> (u16, &'static str, &'static str) {
        match self {
            HeadError::Malformed(why) => (400, "Bad Request", why),
            HeadError::TooLarge => (
                431,
                "Request Header Fields Too Large",
                "request head too large",
            ),
            HeadError::LengthRequired => (
                411,
                "Length Required",
                "chunked request bodies are not forwarded; send Content-Length",
            ),
            HeadError::Unsupported(why) => (501, "Not Implemented", why),
        }
    }
}

/// How a head with a control byte is refused.
const CONTROL: HeadError = HeadError::Malformed("control character in the request head");

/// Whether `head`, from byte `from` on, holds a control byte other than a tab, or a CR or LF
/// that is not one CRLF: servers disagree on where a bare LF or CR ends a line, which is how one
/// request is made to read as two. `more`: bytes may follow, so a CR at the very end may still
/// get its LF (the byte before `from` is looked at again for that).
fn has_bad_control(head: &[u8], from: usize, more: bool) -> bool {
    (from.saturating_sub(1)..head.len()).any(|i| match head[i] {
        b'\r' => match head.get(i + 1) {
            Some(next) => *next != b'\n',
            None => !more,
        },
        b'\n' => i == 0 || head[i - 1] != b'\r',
        b'\t' => false,
        b => b < 0x20 || b == 0x7f,
    })
}

/// `host[:port]` (`[v6]:port` for IPv6); the port is required unless `default` is given.
fn split_authority(authority: &str, default: Option<u16>) -> Option<(String, u16)> {
    let (host, port) = if let Some(rest) = authority.strip_prefix('[') {
        let (v6, after) = rest.split_once(']')?;
        let port = match after {
            "" => None,
            p => Some(p.strip_prefix(':')?),
        };
        (format!("[{v6}]"), port)
    } else {
        match authority.split_once(':') {
            Some((host, port)) => (host.to_string(), Some(port)),
            None => (authority.to_string(), None),
        }
    };
    let port = match port {
        Some(p) if !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()) => p.parse().ok()?,
        Some(_) => return None,
        None => default?,
    };
    (port != 0 && super::rules::Host::parse(&host).is_some()).then_some((host, port))
}

/// Parses the start of `buf` as a request head: `Partial` until its blank line has arrived.
/// The bytes are tokenized by `httparse`; a control byte anywhere in the head (a bare LF
/// included, which `httparse` would take as a line end) refuses it.
pub(crate) fn parse_head(buf: &[u8]) -> Result<Parsed, HeadError> {
    let mut slots = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut request = httparse::Request::new(&mut slots);
    let len = match request.parse(buf) {
        Err(_) if has_bad_control(buf, 0, true) => return Err(CONTROL),
        Err(httparse::Error::TooManyHeaders) => return Err(HeadError::TooLarge),
        Err(httparse::Error::Version) => return Err(HeadError::Malformed("not HTTP/1.x")),
        Err(httparse::Error::HeaderName) => return Err(HeadError::Malformed("bad header name")),
        Err(httparse::Error::HeaderValue) => return Err(HeadError::Malformed("bad header value")),
        Err(_) => {
            return Err(HeadError::Malformed(
                "request line is not METHOD TARGET VERSION",
            ))
        }
        Ok(httparse::Status::Partial) if has_bad_control(buf, 0, true) => return Err(CONTROL),
        Ok(httparse::Status::Partial) if buf.len() >= MAX_HEAD_BYTES => {
            return Err(HeadError::TooLarge)
        }
        Ok(httparse::Status::Partial) => return Ok(Parsed::Partial),
        Ok(httparse::Status::Complete(len)) => len,
    };
    if len > MAX_HEAD_BYTES {
        return Err(HeadError::TooLarge);
    }
    if has_bad_control(&buf[..len], 0, false) {
        return Err(CONTROL);
    }
    let (Some(method), Some(target)) = (request.method, request.path) else {
        return Err(HeadError::Malformed(
            "request line is not METHOD TARGET VERSION",
        ));
    };
    let mut headers = Vec::with_capacity(request.headers.len());
    for header in request.headers.iter() {
        let value = std::str::from_utf8(header.value)
            .map_err(|_| HeadError::Malformed("head is not UTF-8"))?;
        headers.push((
            header.name.to_string(),
            value.trim_matches([' ', '\t']).to_string(),
        ));
    }
    let head = semantics(method, target, headers)?;
    Ok(Parsed::Complete(head, len))
}

/// `parse_head` for a head arriving in reads, `buf` the bytes so far and `from` where the last
/// read's began: each read costs what it brought. Its bytes are checked for control bytes up to
/// the first blank line (past it, the body's bytes are the body's), and the head is parsed again
/// only when a line ended (a head is complete only at a LF), so a client sending a byte at a time
/// cannot make the proxy parse up to `MAX_HEAD_BYTES` for each.
pub(crate) fn scan(buf: &[u8], from: usize) -> Result<Parsed, HeadError> {
    let new = &buf[from..];
    let back = from.saturating_sub(3);
    let head_so_far =
        memchr::memmem::find(&buf[back..], b"\r\n\r\n").map_or(buf.len(), |i| back + i + 4);
    if from < head_so_far && has_bad_control(&buf[..head_so_far], from, true) {
        return Err(CONTROL);
    }
    if !new.contains(&b'\n') {
        return match buf.len() >= MAX_HEAD_BYTES {
            true => Err(HeadError::TooLarge),
            false => Ok(Parsed::Partial),
        };
    }
    parse_head(buf)
}

/// The proxy's rules on a tokenized head: what it asks for and whether it can be forwarded.
fn semantics(
    method: &str,
    target: &str,
    headers: Vec<(String, String)>,
) -> Result<Head, HeadError> {
    let named = |wanted: &'static str| {
        headers
            .iter()
            .filter(move |(n, _)| n.eq_ignore_ascii_case(wanted))
            .map(|(_, v)| v.as_str())
    };
    // RFC 9112 3.2: one Host at most. Whatever it says, the one sent upstream is the target's.
    if named("host").count() > 1 {
        return Err(HeadError::Malformed("more than one Host header"));
    }
    let target = if method == "CONNECT" {
        let (host, port) =
            split_authority(target, None).ok_or(HeadError::Malformed("bad CONNECT authority"))?;
        Target::Tunnel { host, port }
    } else {
        let scheme_end = target.find("://");
        let rest = match scheme_end.map(|i| (&target[..i], &target[i + 3..])) {
            Some((scheme, rest)) if scheme.eq_ignore_ascii_case("http") => rest,
            Some((scheme, _)) if scheme.eq_ignore_ascii_case("https") => {
                return Err(HeadError::Unsupported(
                    "https:// goes through CONNECT (set HTTPS_PROXY)",
                ))
            }
            Some(_) => return Err(HeadError::Unsupported("only http:// is proxied")),
            None => {
                return Err(HeadError::Unsupported(
                    "this is a proxy: ask for an absolute http:// URI or CONNECT",
                ))
            }
        };
        let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
        let (authority, path) = rest.split_at(end);
        if authority.contains('@') {
            return Err(HeadError::Malformed("user info in the URI"));
        }
        let (host, port) =
            split_authority(authority, Some(80)).ok_or(HeadError::Malformed("bad URI host"))?;
        let path = path.split('#').next().unwrap_or("");
        let path = match path.chars().next() {
            None => "/".to_string(),
            Some('?') => format!("/{path}"),
            _ => path.to_string(),
        };
        Target::Http {
            host,
            port,
            authority: authority.to_string(),
            path,
        }
    };
    let mut body = 0;
    if matches!(target, Target::Http { .. }) {
        if named("transfer-encoding").next().is_some() {
            return Err(HeadError::LengthRequired);
        }
        let mut lengths = named("content-length");
        if let Some(first) = lengths.next() {
            if !first.bytes().all(|b| b.is_ascii_digit()) || lengths.any(|l| l != first) {
                return Err(HeadError::Malformed("bad Content-Length"));
            }
            body = first
                .parse()
                .map_err(|_| HeadError::Malformed("bad Content-Length"))?;
        }
    }
    Ok(Head {
        method: method.to_string(),
        target,
        headers,
        body,
    })
}

/// Headers a proxy consumes or sets itself rather than forwarding (hop-by-hop, RFC 9110 7.6.1,
/// and `Host`, which is set from the URI so a request cannot name another site than the one
/// allowed).
pub(crate) const NOT_FORWARDED: &[&str] = &[
    "host",
    "connection",
    "proxy-connection",
    "keep-alive",
    "proxy-authorization",
    "proxy-authenticate",
    "te",
    "trailer",
    "upgrade",
];

/// The head sent upstream for a plain HTTP request: origin-form, `Host` from the URI first, the
/// client's other headers, the configured headers in place of any the client sent of the same
/// name, `Connection: close`. Every field comes from `head` as parsed (no control bytes) or from
/// the configuration (checked by `Rules::new`).
pub(crate) fn upstream_head(head: &Head, added: &[(&str, &str)]) -> Vec<u8> {
    let Target::Http {
        authority, path, ..
    } = &head.target
    else {
        return Vec::new();
    };
    let mut out = format!(
        "{} {} HTTP/1.1\r\nHost: {}\r\n",
        head.method, path, authority
    );
    for (name, value) in &head.headers {
        let lower = name.to_ascii_lowercase();
        if NOT_FORWARDED.contains(&lower.as_str())
            || added.iter().any(|(n, _)| n.eq_ignore_ascii_case(name))
        {
            continue;
        }
        out.push_str(&format!("{name}: {value}\r\n"));
    }
    for (name, value) in added {
        out.push_str(&format!("{name}: {value}\r\n"));
    }
    out.push_str("Connection: close\r\n\r\n");
    out.into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A whole head: parsed, and complete at its last byte.
    fn parse(head: &[u8]) -> Result<Head, HeadError> {
        match parse_head(head)? {
            Parsed::Complete(parsed, len) => {
                assert_eq!(len, head.len(), "{}", String::from_utf8_lossy(head));
                Ok(parsed)
            }
            Parsed::Partial => panic!("partial: {}", String::from_utf8_lossy(head)),
        }
    }

    #[test]
    fn request_heads_parse_into_targets() {
        let head = parse(b"CONNECT registry.npmjs.org:443 HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
        assert_eq!(
            head.target,
            Target::Tunnel {
                host: "registry.npmjs.org".into(),
                port: 443
            }
        );
        let head = parse(b"CONNECT [::1]:8080 HTTP/1.1\r\n\r\n").unwrap();
        assert_eq!(head.target.host_port(), ("[::1]", 8080));
        let head = parse(
            b"POST http://Example.org:8080/a/b?c=d#frag HTTP/1.1\r\nContent-Length: 5\r\n\r\n",
        )
        .unwrap();
        assert_eq!(
            head.target,
            Target::Http {
                host: "Example.org".into(),
                port: 8080,
                authority: "Example.org:8080".into(),
                path: "/a/b?c=d".into()
            }
        );
        assert_eq!(head.body, 5);
        let head = parse(b"GET http://x.org?q HTTP/1.0\r\n\r\n").unwrap();
        assert_eq!(head.target.host_port(), ("x.org", 80));
        assert!(matches!(head.target, Target::Http { ref path, .. } if path == "/?q"));
        // A tab in a value is whitespace; the value is trimmed.
        let head = parse(b"GET http://x.org/ HTTP/1.1\r\nA:\t a\tb \t\r\n\r\n").unwrap();
        assert_eq!(head.headers, vec![("A".to_string(), "a\tb".to_string())]);
    }

    #[test]
    fn a_head_is_partial_until_its_blank_line_and_the_body_is_not_part_of_it() {
        let full = b"POST http://x.org/ HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc";
        let end = full.len() - 3;
        for cut in 0..end {
            assert_eq!(parse_head(&full[..cut]), Ok(Parsed::Partial), "{cut}");
        }
        // The body's bytes are the body's, control bytes and all.
        let mut with_body = full[..end].to_vec();
        with_body.extend_from_slice(b"\n\0\r");
        assert!(matches!(parse_head(&with_body), Ok(Parsed::Complete(_, e)) if e == end));
    }

    #[test]
    fn control_bytes_anywhere_in_the_head_are_refused_even_before_it_ends() {
        let control = Err(CONTROL);
        let heads: &[&[u8]] = &[
            // The smuggling the issue found: a bare LF in the target puts a Host line first.
            b"GET http://x.org/a\nHost: other.example HTTP/1.1\r\nX: y\r\n\r\n",
            b"GET http://x.org/ HTTP/1.1\nHost: other.example\r\n\r\n",
            b"GET http://x.org/ HTTP/1.1\r\nA: b\nHost: other.example\r\n\r\n",
            b"GET http://x.org/ HTTP/1.1\r\nA: b\rHost: other.example\r\n\r\n",
            b"GET http://x.org/ HTTP/1.1\r\nA: b\r\n\n",
            b"GET http://x.org/ HTTP/1.1\n\n",
            b"\nGET http://x.org/ HTTP/1.1\r\n\r\n",
            b"GET http://x.org/ HTTP/1.1\r\nA: b\0c\r\n\r\n",
            b"GET http://x.org/ HTTP/1.1\r\nA: b\x7fc\r\n\r\n",
            b"GET http://x.org/ HTTP/1.1\r\nA: \x1bc\r\n\r\n",
            b"GET http://x.org/\x0b HTTP/1.1\r\n\r\n",
            // Not yet complete: refused at once, not after the head timeout.
            b"GET http://x.org/a\nHost: other",
            b"GET http://x.org/ HTTP/1.1\r\nA: b\r\r",
        ];
        for head in heads {
            assert_eq!(
                parse_head(head),
                control,
                "{}",
                String::from_utf8_lossy(head)
            );
        }
        // A CR at the end of what arrived may still get its LF.
        assert_eq!(
            parse_head(b"GET http://x.org/ HTTP/1.1\r"),
            Ok(Parsed::Partial)
        );
    }

    #[test]
    fn a_head_read_in_pieces_is_checked_piece_by_piece_and_its_body_is_not() {
        // `scan` over `buf` cut at `cuts`: the first answer that is not `Partial`.
        let read = |buf: &[u8], cuts: &[usize]| {
            let mut from = 0;
            for &to in cuts.iter().chain([buf.len()].iter()) {
                match scan(&buf[..to], from) {
                    Ok(Parsed::Partial) => from = to,
                    done => return done,
                }
            }
            Ok(Parsed::Partial)
        };
        let post = b"POST http://x.org/ HTTP/1.1\r\nContent-Length: 4\r\n\r\n\n\0\r\x01";
        let end = post.len() - 4;
        for cuts in [&[][..], &[5], &[28], &[29], &[end - 1], &[end - 2, end - 1]] {
            assert!(
                matches!(read(post, cuts), Ok(Parsed::Complete(_, e)) if e == end),
                "{cuts:?}"
            );
        }
        let smuggled = b"GET http://x.org/a HTTP/1.1\r\nA: b\rHost: other\r\n\r\n";
        for cut in 1..smuggled.len() {
            assert_eq!(read(smuggled, &[cut]), Err(CONTROL), "{cut}");
        }
        // A CR that ends one read and the LF that begins the next are one line end.
        assert_eq!(
            read(b"GET http://x.org/ HTTP/1.1\r", &[]),
            Ok(Parsed::Partial)
        );
        let mut long = b"GET http://x.org/ HTTP/1.1\r\nX: ".to_vec();
        long.resize(MAX_HEAD_BYTES, b'a');
        assert_eq!(read(&long, &[100, 200]), Err(HeadError::TooLarge));
    }

    #[test]
    fn malformed_and_oversized_heads_are_refused() {
        let cases: &[(&[u8], HeadError)] = &[
            (
                b"GET / HTTP/1.1\r\n\r\n",
                HeadError::Unsupported(
                    "this is a proxy: ask for an absolute http:// URI or CONNECT",
                ),
            ),
            (
                b"GET https://x.org/ HTTP/1.1\r\n\r\n",
                HeadError::Unsupported("https:// goes through CONNECT (set HTTPS_PROXY)"),
            ),
            (
                b"GET ftp://x.org/ HTTP/1.1\r\n\r\n",
                HeadError::Unsupported("only http:// is proxied"),
            ),
            (
                b"GET http://u:p@x.org/ HTTP/1.1\r\n\r\n",
                HeadError::Malformed("user info in the URI"),
            ),
            (
                b"GET http://x.org/ HTTP/2\r\n\r\n",
                HeadError::Malformed("not HTTP/1.x"),
            ),
            (
                b"GET  http://x.org/ HTTP/1.1\r\n\r\n",
                HeadError::Malformed("request line is not METHOD TARGET VERSION"),
            ),
            (
                b"GET http://\xff/ HTTP/1.1\r\n\r\n",
                HeadError::Malformed("request line is not METHOD TARGET VERSION"),
            ),
            (
                b"CONNECT x.org HTTP/1.1\r\n\r\n",
                HeadError::Malformed("bad CONNECT authority"),
            ),
            (
                b"CONNECT x.org:0 HTTP/1.1\r\n\r\n",
                HeadError::Malformed("bad CONNECT authority"),
            ),
            (
                b"CONNECT x.org:99999 HTTP/1.1\r\n\r\n",
                HeadError::Malformed("bad CONNECT authority"),
            ),
            (
                b"GET http://x.org/ HTTP/1.1\r\nNo colon\r\n\r\n",
                HeadError::Malformed("bad header name"),
            ),
            (
                b"GET http://x.org/ HTTP/1.1\r\n folded: x\r\n\r\n",
                HeadError::Malformed("bad header name"),
            ),
            (
                b"GET http://x.org/ HTTP/1.1\r\nHost: x.org\r\nhost: other\r\n\r\n",
                HeadError::Malformed("more than one Host header"),
            ),
            (
                b"GET http://x.org/ HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
                HeadError::Malformed("bad Content-Length"),
            ),
            (
                b"GET http://x.org/ HTTP/1.1\r\nContent-Length: -1\r\n\r\n",
                HeadError::Malformed("bad Content-Length"),
            ),
            (
                b"POST http://x.org/ HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n",
                HeadError::LengthRequired,
            ),
            (
                b"GET http://x.org/ HTTP/1.1\r\nA: \xff\r\n\r\n",
                HeadError::Malformed("head is not UTF-8"),
            ),
        ];
        for (head, want) in cases {
            assert_eq!(
                parse_head(head),
                Err(*want),
                "{}",
                String::from_utf8_lossy(head)
            );
        }
        let mut many = b"GET http://x.org/ HTTP/1.1\r\n".to_vec();
        for i in 0..=MAX_HEADERS {
            many.extend_from_slice(format!("X-{i}: v\r\n").as_bytes());
        }
        many.extend_from_slice(b"\r\n");
        assert_eq!(parse_head(&many), Err(HeadError::TooLarge));
        let mut long = b"GET http://x.org/ HTTP/1.1\r\nX: ".to_vec();
        long.resize(MAX_HEAD_BYTES + 1, b'a');
        assert_eq!(parse_head(&long), Err(HeadError::TooLarge));
        long.extend_from_slice(b"\r\n\r\n");
        assert_eq!(parse_head(&long), Err(HeadError::TooLarge));
    }

    #[test]
    fn upstream_heads_carry_the_uri_host_first_and_the_configured_headers() {
        let head = parse(
            b"GET http://x.org:81/p HTTP/1.1\r\nHost: evil.example\r\nProxy-Connection: keep-alive\r\n\
              authorization: from-shell\r\nAccept: */*\r\n\r\n",
        )
        .unwrap();
        let out = upstream_head(&head, &[("Authorization", "Bearer t")]);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "GET /p HTTP/1.1\r\nHost: x.org:81\r\nAccept: */*\r\nAuthorization: Bearer t\r\n\
             Connection: close\r\n\r\n"
        );
    }
}
