//! The allow-list: which host and port a request may name, which addresses a connection may
//! reach, and which configured headers go where.
//!
//! An entry is a host (`registry.npmjs.org`), a subdomain pattern (`*.github.com`) or an IP
//! address (`10.0.0.5`, `::1`, `[::1]`), optionally with a port (`localhost:3000`,
//! `*.corp.example:8443`, `10.0.0.5:8080`, `[::1]:8080`). Without a port it allows ports 80 and
//! 443 (`DEFAULT_PORTS`); with one, that port only. A name reaches what it resolves to only where
//! that is a public address: loopback, link-local, private and the other non-public ranges
//! (`is_public`) are reached only when an entry is that address (at that port).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use super::super::NetworkAllow;

/// Ports an entry without a port allows: HTTP and HTTPS, what registries and forges serve on.
pub const DEFAULT_PORTS: [u16; 2] = [80, 443];
/// Entries of `allow` and of `headers`: an allow-list, not a block list of the internet.
pub const MAX_ENTRIES: usize = 1024;
/// The longest host name DNS allows (RFC 1035, without the trailing dot).
const MAX_NAME_BYTES: usize = 253;

/// A host as a request names it: a name (lowercase, no trailing dot) or an address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Host {
    Name(String),
    Address(IpAddr),
}

impl Host {
    /// `host` as given in a URI or an allow entry (`[::1]` or `::1` for IPv6); `None` when it is
    /// neither a valid name nor an address. A name whose last label is numeric (`127.1`,
    /// `0x7f.1`, `2130706433`) is refused: the resolver reads those as addresses, which would let
    /// a name reach an address no entry lists.
    pub(crate) fn parse(host: &str) -> Option<Host> {
        let bare = host
            .strip_prefix('[')
            .and_then(|h| h.strip_suffix(']'))
            .unwrap_or(host);
        if let Ok(ip) = bare.parse::<IpAddr>() {
            return Some(Host::Address(ip.to_canonical()));
        }
        if bare.len() != host.len() {
            return None; // brackets around a name
        }
        let name = host.strip_suffix('.').unwrap_or(host).to_ascii_lowercase();
        let label_ok = |l: &str| {
            !l.is_empty()
                && l.len() <= 63
                && l.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        };
        let last = name.rsplit('.').next().unwrap_or("");
        let numeric = last.bytes().all(|b| b.is_ascii_digit())
            || (last.starts_with("0x") && last[2..].bytes().all(|b| b.is_ascii_hexdigit()));
        (!name.is_empty()
            && name.len() <= MAX_NAME_BYTES
            && name.split('.').all(label_ok)
            && !numeric)
            .then_some(Host::Name(name))
    }
}

/// Whether `ip` is an address of the public internet. Not: unspecified and "this network"
/// (`0.0.0.0/8`, `::`), loopback (`127.0.0.0/8`, `::1`), link-local (`169.254.0.0/16`, where
/// cloud metadata services live; `fe80::/10`), private (RFC 1918; ULA `fc00::/7`; site-local
/// `fec0::/10`), shared (CGNAT, `100.64.0.0/10`), multicast, broadcast and reserved
/// (`224.0.0.0/3`, `ff00::/8`), and the IPv4 forms inside IPv6 that reach those
/// (`::/96`, `::ffff:0:0/96`, NAT64 `64:ff9b::/96`, 6to4 `2002::/16`).
pub(crate) fn is_public(ip: IpAddr) -> bool {
    match ip.to_canonical() {
        IpAddr::V4(v4) => is_public_v4(v4),
        IpAddr::V6(v6) => is_public_v6(v6),
    }
}

fn is_public_v4(ip: Ipv4Addr) -> bool {
    let [a, b, ..] = ip.octets();
    !(a == 0
        || ip.is_loopback()
        || ip.is_private()
        || ip.is_link_local()
        || (a == 100 && (b & 0xc0) == 64)
        || a >= 224)
}

fn is_public_v6(ip: Ipv6Addr) -> bool {
    let s = ip.segments();
    let embedded = |hi: u16, lo: u16| {
        is_public_v4(Ipv4Addr::new(
            (hi >> 8) as u8,
            hi as u8,
            (lo >> 8) as u8,
            lo as u8,
        ))
    };
    match s {
        // `::/96`: unspecified, loopback and the deprecated IPv4-compatible form.
        [0, 0, 0, 0, 0, 0, _, _] => false,
        [0x64, 0xff9b, 0, 0, 0, 0, hi, lo] => embedded(hi, lo),
        [0x2002, hi, lo, ..] => embedded(hi, lo),
        [first, ..] => {
            (first & 0xfe00) != 0xfc00 // unique local
                && (first & 0xffc0) != 0xfe80 // link-local
                && (first & 0xffc0) != 0xfec0 // site-local
                && (first & 0xff00) != 0xff00 // multicast
        }
    }
}

/// RFC 9110's `tchar`: what a configured header's name is made of.
fn is_token(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// What an entry's host part matches.
#[derive(Debug, Clone)]
enum Pattern {
    /// Exactly this name.
    Name(String),
    /// Any name ending in this suffix (`.example.com`), with at least one label before it.
    Subdomains(String),
    /// Exactly this address.
    Address(IpAddr),
}

/// One allow or header entry, compiled.
#[derive(Debug, Clone)]
struct Entry {
    given: String,
    pattern: Pattern,
    /// The one port it allows; `None`: `DEFAULT_PORTS`.
    port: Option<u16>,
}

impl Entry {
    fn new(given: &str, what: &str) -> Result<Entry, String> {
        let bad = || {
            format!(
                "{what} entry {given:?} is not a host name, a \"*.\" subdomain pattern or an IP \
                 address, with an optional \":port\" (\"[v6]:port\" for IPv6)"
            )
        };
        let (host, port) = split_port(given).ok_or_else(bad)?;
        let pattern = match host.strip_prefix("*.") {
            Some(rest) => match Host::parse(rest) {
                Some(Host::Name(name)) => Pattern::Subdomains(format!(".{name}")),
                _ => return Err(bad()),
            },
            None => match Host::parse(host).ok_or_else(bad)? {
                Host::Name(name) => Pattern::Name(name),
                Host::Address(ip) => Pattern::Address(ip),
            },
        };
        Ok(Entry {
            given: given.to_string(),
            pattern,
            port,
        })
    }

    fn matches_host(&self, host: &Host) -> bool {
        match (&self.pattern, host) {
            (Pattern::Name(n), Host::Name(h)) => n == h,
            (Pattern::Subdomains(suffix), Host::Name(h)) => {
                h.len() > suffix.len() && h.ends_with(suffix.as_str())
            }
            (Pattern::Address(a), Host::Address(h)) => a == h,
            _ => false,
        }
    }

    fn allows_port(&self, port: u16) -> bool {
        match self.port {
            Some(p) => p == port,
            None => DEFAULT_PORTS.contains(&port),
        }
    }

    fn matches(&self, host: &Host, port: u16) -> bool {
        self.matches_host(host) && self.allows_port(port)
    }
}

/// An entry's host and port: `[v6]:port`, `host:port`, or no port (a bare IPv6 address has
/// colons of its own: with a port it is bracketed). `None` for a port that is not 1..=65535.
fn split_port(given: &str) -> Option<(&str, Option<u16>)> {
    let parse_port = |p: &str| {
        (!p.is_empty() && p.len() <= 5 && p.bytes().all(|b| b.is_ascii_digit()))
            .then(|| p.parse::<u16>().ok())
            .flatten()
            .filter(|&p| p != 0)
    };
    if given.starts_with('[') {
        let close = given.find(']')?;
        let (host, after) = given.split_at(close + 1);
        return match after {
            "" => Some((host, None)),
            _ => Some((host, Some(parse_port(after.strip_prefix(':')?)?))),
        };
    }
    if given.parse::<Ipv6Addr>().is_ok() {
        return Some((given, None));
    }
    match given.split_once(':') {
        Some((host, port)) => Some((host, Some(parse_port(port)?))),
        None => Some((given, None)),
    }
}

/// The allow-list and the headers to add, compiled from `NetworkAllow`.
#[derive(Debug, Clone)]
pub(crate) struct Rules {
    allow: Vec<Entry>,
    headers: Vec<(Entry, String, String)>,
}

impl Rules {
    /// Checks every entry; the error names the first bad one (for `SandboxUnavailable`).
    pub(crate) fn new(spec: &NetworkAllow) -> Result<Rules, String> {
        if spec.allow.len() > MAX_ENTRIES || spec.headers.len() > MAX_ENTRIES {
            return Err(format!(
                "network.allow and network.headers take at most {MAX_ENTRIES} entries each"
            ));
        }
        let allow = spec
            .allow
            .iter()
            .map(|given| Entry::new(given, "network.allow"))
            .collect::<Result<_, _>>()?;
        let mut headers = Vec::new();
        for (host, name, value) in &spec.headers {
            let entry = Entry::new(host, "network.headers")?;
            if name.is_empty() || !name.bytes().all(is_token) {
                return Err(format!(
                    "network.headers[{host:?}]: {name:?} is not a header name"
                ));
            }
            if value.bytes().any(|b| (b < 0x20 && b != b'\t') || b == 0x7f) {
                return Err(format!(
                    "network.headers[{host:?}][{name:?}] must not contain control characters \
                     (CR, LF, NUL...)"
                ));
            }
            headers.push((entry, name.clone(), value.clone()));
        }
        Ok(Rules { allow, headers })
    }

    /// The allow entry (as given) that lets a request name `host` at `port`, if one does.
    pub(crate) fn decide(&self, host: &str, port: u16) -> Option<&str> {
        let host = Host::parse(host)?;
        self.allow
            .iter()
            .find(|e| e.matches(&host, port))
            .map(|e| e.given.as_str())
    }

    /// Whether a connection may go to `addr`: a public address, or one an entry is (at its
    /// port). Asked of every address a name resolved to, and of the one connected to.
    pub(crate) fn reaches(&self, addr: SocketAddr) -> bool {
        let ip = addr.ip().to_canonical();
        is_public(ip)
            || self
                .allow
                .iter()
                .any(|e| e.matches(&Host::Address(ip), addr.port()))
    }

    /// The configured headers for a request to `host` at `port`, in their order: only those
    /// whose entry names that host and that port.
    pub(crate) fn headers_for<'a>(&'a self, host: &str, port: u16) -> Vec<(&'a str, &'a str)> {
        let Some(host) = Host::parse(host) else {
            return Vec::new();
        };
        self.headers
            .iter()
            .filter(|(entry, _, _)| entry.matches(&host, port))
            .map(|(_, name, value)| (name.as_str(), value.as_str()))
            .collect()
    }

    /// Whether the allow-list names this loopback host at any port (then it goes through the
    /// proxy to the host's loopback; else `NO_PROXY` keeps it on the sandbox's own).
    pub(crate) fn names(&self, host: &str) -> bool {
        Host::parse(host).is_some_and(|host| self.allow.iter().any(|e| e.matches_host(&host)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules(allow: &[&str]) -> Rules {
        Rules::new(&NetworkAllow {
            allow: allow.iter().map(|s| s.to_string()).collect(),
            headers: Vec::new(),
        })
        .unwrap()
    }

    #[test]
    fn allow_list_matches_names_subdomains_and_literal_addresses_only() {
        let r = rules(&[
            "registry.npmjs.org",
            "*.github.com",
            "localhost",
            "10.0.0.1",
            "::1",
        ]);
        let decide = |host| r.decide(host, 443);
        assert_eq!(decide("registry.npmjs.org"), Some("registry.npmjs.org"));
        assert_eq!(decide("Registry.NPMJS.org."), Some("registry.npmjs.org"));
        assert_eq!(decide("npmjs.org"), None);
        assert_eq!(decide("evil-registry.npmjs.org"), None);
        assert_eq!(decide("api.github.com"), Some("*.github.com"));
        assert_eq!(decide("a.b.github.com"), Some("*.github.com"));
        // `*.` is subdomains only; a suffix that is not a label boundary is not one.
        assert_eq!(decide("github.com"), None);
        assert_eq!(decide("evilgithub.com"), None);
        assert_eq!(decide("localhost"), Some("localhost"));
        // An address is allowed only by the literal entry, never by a name that resolves to it.
        assert_eq!(decide("127.0.0.1"), None);
        assert_eq!(decide("10.0.0.1"), Some("10.0.0.1"));
        assert_eq!(decide("[::1]"), Some("::1"));
        assert_eq!(decide("::ffff:10.0.0.1"), Some("10.0.0.1"));
        // Numeric forms the resolver reads as addresses are not names.
        for host in ["127.1", "2130706433", "0x7f.1", "10.0.1", "localhost.1"] {
            assert_eq!(decide(host), None, "{host}");
        }
        assert_eq!(decide(""), None);
        assert_eq!(decide("a..github.com"), None);
        assert_eq!(decide("[localhost]"), None);
    }

    #[test]
    fn an_entry_without_a_port_allows_80_and_443_and_one_with_a_port_that_port_only() {
        let r = rules(&[
            "x.org",
            "dev.test:3000",
            "*.corp.test:8443",
            "10.1.2.3:8080",
            "[::1]:9000",
            "fe80::1",
        ]);
        assert_eq!(r.decide("x.org", 80), Some("x.org"));
        assert_eq!(r.decide("x.org", 443), Some("x.org"));
        for port in [22, 8080, 3000, 1] {
            assert_eq!(r.decide("x.org", port), None, "{port}");
        }
        assert_eq!(r.decide("dev.test", 3000), Some("dev.test:3000"));
        assert_eq!(r.decide("dev.test", 443), None);
        assert_eq!(r.decide("a.corp.test", 8443), Some("*.corp.test:8443"));
        assert_eq!(r.decide("a.corp.test", 443), None);
        assert_eq!(r.decide("10.1.2.3", 8080), Some("10.1.2.3:8080"));
        assert_eq!(r.decide("10.1.2.3", 80), None);
        assert_eq!(r.decide("[::1]", 9000), Some("[::1]:9000"));
        assert_eq!(r.decide("::1", 9000), Some("[::1]:9000"));
        assert_eq!(r.decide("[fe80::1]", 443), Some("fe80::1"));
        // Whatever the port, the name is listed (NO_PROXY).
        assert!(r.names("dev.test") && r.names("::1") && !r.names("localhost"));
    }

    #[test]
    fn non_public_addresses_are_reached_only_when_an_entry_is_that_address_and_port() {
        let public = [
            "1.1.1.1",
            "8.8.8.8",
            "100.63.255.255",
            "100.128.0.0",
            "172.32.0.1",
            "223.255.255.255",
            "2606:4700::1111",
            "::ffff:1.1.1.1",
            "64:ff9b::808:808",
            "2002:808:808::1",
        ];
        for ip in public {
            assert!(is_public(ip.parse().unwrap()), "{ip}");
        }
        let not_public = [
            "0.0.0.0",
            "0.1.2.3",
            "127.0.0.1",
            "127.255.0.9",
            "10.0.0.1",
            "172.16.0.1",
            "172.31.255.255",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "100.127.255.255",
            "224.0.0.1",
            "239.255.255.250",
            "240.0.0.1",
            "255.255.255.255",
            "::",
            "::1",
            "::127.0.0.1",
            "::ffff:127.0.0.1",
            "::ffff:169.254.169.254",
            "fe80::1",
            "febf::1",
            "fec0::1",
            "fc00::1",
            "fd12:3456::1",
            "ff02::1",
            "64:ff9b::a9fe:a9fe",
            "2002:7f00:1::1",
            "2002:c0a8:101::1",
        ];
        for ip in not_public {
            assert!(!is_public(ip.parse().unwrap()), "{ip}");
        }
        let addr = |s: &str| s.parse::<SocketAddr>().unwrap();
        let r = rules(&["x.org", "127.0.0.1:3000", "10.0.0.5", "[::1]:3000"]);
        assert!(r.reaches(addr("1.1.1.1:443")));
        assert!(
            r.reaches(addr("1.1.1.1:22")),
            "ports are the request's business"
        );
        assert!(r.reaches(addr("127.0.0.1:3000")));
        assert!(!r.reaches(addr("127.0.0.1:3001")));
        assert!(!r.reaches(addr("127.0.0.2:3000")));
        assert!(r.reaches(addr("[::ffff:127.0.0.1]:3000")));
        assert!(r.reaches(addr("[::1]:3000")));
        assert!(r.reaches(addr("10.0.0.5:443")));
        assert!(!r.reaches(addr("10.0.0.5:8080")));
        assert!(!r.reaches(addr("10.0.0.6:443")));
        assert!(!r.reaches(addr("169.254.169.254:80")));
        assert!(!r.reaches(addr("[fd00::1]:443")));
    }

    #[test]
    fn bad_entries_are_refused_by_name() {
        for bad in [
            "",
            "*",
            "*.",
            "a*.b",
            "http://x.org",
            "x.org/",
            "x.org:",
            "x.org:0",
            "x.org:65536",
            "x.org:+80",
            "x.org:80:80",
            "x.org:*",
            "*.:80",
            "[::1",
            "[::1]80",
            "[::1]:",
            "[x.org]:80",
            "::1:80:x",
            "1.2.3",
            "1.2.3:80",
        ] {
            let e = Rules::new(&NetworkAllow {
                allow: vec![bad.into()],
                headers: vec![],
            })
            .unwrap_err();
            assert!(e.contains(&format!("{bad:?}")), "{e}");
        }
        let header = |host: &str, name: &str, value: &str| {
            Rules::new(&NetworkAllow {
                allow: vec![],
                headers: vec![(host.into(), name.into(), value.into())],
            })
        };
        assert!(header("x.org", "Authorization", "Bearer t").is_ok());
        assert!(header("x.org:8080", "Authorization", "Bearer\tt").is_ok());
        assert!(header("x.org", "Bad Name", "v").is_err());
        for value in [
            "a\r\nInjected: 1",
            "a\nb",
            "a\rb",
            "a\0b",
            "a\x7fb",
            "a\x0bb",
        ] {
            assert!(header("x.org", "X", value).is_err(), "{value:?}");
        }
        assert!(header("x.org:0", "X", "v").is_err());
    }

    #[test]
    fn headers_go_only_to_the_host_and_port_their_entry_names() {
        let r = Rules::new(&NetworkAllow {
            allow: vec!["x.org".into()],
            headers: vec![
                ("*.x.org".into(), "A".into(), "1".into()),
                ("x.org".into(), "B".into(), "2".into()),
                ("x.org:8080".into(), "C".into(), "3".into()),
            ],
        })
        .unwrap();
        assert_eq!(r.headers_for("X.org", 80), vec![("B", "2")]);
        assert_eq!(r.headers_for("x.org", 8080), vec![("C", "3")]);
        assert_eq!(r.headers_for("x.org", 8081), Vec::<(&str, &str)>::new());
        assert_eq!(r.headers_for("a.x.org", 80), vec![("A", "1")]);
        assert_eq!(r.headers_for("a.x.org", 8080), Vec::<(&str, &str)>::new());
    }
}
