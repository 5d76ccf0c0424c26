//! The proxy's unit tests: bounds, forwarding, tunnels, timeouts, header placement, address
//! checks, events.

use std::io::{Read, Write};
use std::net::Shutdown;
use std::time::Instant;

use super::*;

/// A proxy on a listener of the host's loopback (the sandbox's is the same kind of socket).
/// Allow entries for a test server on the host's loopback at `port`: its name and its
/// addresses (loopback is reached only when an entry is the address).
fn loopback(port: u16) -> Vec<String> {
    ["localhost", "127.0.0.1", "[::1]"]
        .iter()
        .map(|host| format!("{host}:{port}"))
        .collect()
}

/// Where a head ends in `buf` (tests: what an upstream server received).
fn head_end(buf: &[u8]) -> Option<usize> {
    memchr::memmem::find(buf, b"\r\n\r\n").map(|i| i + 4)
}

fn proxy_on_host<S: AsRef<str>>(allow: &[S]) -> (Proxy, u16) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let proxy = Proxy::start(rules(allow), vec![OwnedFd::from(listener)]).unwrap();
    (proxy, port)
}

fn until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !done() {
        assert!(Instant::now() < deadline, "{what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn connections_beyond_the_bound_get_503_and_every_thread_ends_with_the_proxy() {
    let (proxy, port) = proxy_on_host(&["localhost"]);
    let held = proxy.threads_hold();
    let open = |proxy: &Proxy| proxy.shared.connections.load(Ordering::Acquire);
    // Connections that never send their head hold a thread each, up to the bound.
    let idle: Vec<TcpStream> = (0..MAX_CONNECTIONS)
        .map(|_| TcpStream::connect(("127.0.0.1", port)).unwrap())
        .collect();
    until("the idle connections were accepted", || {
        open(&proxy) == MAX_CONNECTIONS
    });
    let mut extra = TcpStream::connect(("127.0.0.1", port)).unwrap();
    let mut answer = String::new();
    extra.read_to_string(&mut answer).unwrap();
    assert!(answer.starts_with("HTTP/1.1 503 "), "{answer}");
    // Once they are gone, a fresh connection is served: an address not listed is refused.
    drop(idle);
    until("the idle connections ended", || open(&proxy) == 0);
    let mut refused = TcpStream::connect(("127.0.0.1", port)).unwrap();
    refused
        .write_all(b"CONNECT 127.0.0.1:9 HTTP/1.1\r\n\r\n")
        .unwrap();
    let mut answer = String::new();
    refused.read_to_string(&mut answer).unwrap();
    assert!(answer.starts_with("HTTP/1.1 403 Forbidden\r\n"), "{answer}");
    drop(refused);
    // Dropped with connections waiting for their heads: every thread ends.
    let waiting: Vec<TcpStream> = (0..8)
        .map(|_| TcpStream::connect(("127.0.0.1", port)).unwrap())
        .collect();
    until("the waiting connections were accepted", || {
        open(&proxy) == 8
    });
    drop(proxy);
    until("every proxy thread ended", || held.upgrade().is_none());
    drop(waiting);
}

#[test]
fn a_forwarded_request_carries_its_body_and_nothing_after_it() {
    // The upstream: reads the head and the 5-byte body, answers, then reads whatever else the
    // proxy sends until the proxy closes.
    let upstream = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let upstream_port = upstream.local_addr().unwrap().port();
    let server = std::thread::spawn(move || {
        let (mut conn, _) = upstream.accept().unwrap();
        let mut got = Vec::new();
        let mut buf = [0u8; 4096];
        while !got.windows(4).any(|w| w == b"\r\n\r\n")
            || got.len() < head_end(&got).unwrap_or(usize::MAX).saturating_add(5)
        {
            let n = conn.read(&mut buf).unwrap();
            assert!(n > 0, "closed early: {}", String::from_utf8_lossy(&got));
            got.extend_from_slice(&buf[..n]);
        }
        let end = head_end(&got).unwrap() + 5;
        let request = String::from_utf8_lossy(&got[..end]).into_owned();
        let mut after = got[end..].to_vec();
        conn.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
            .unwrap();
        conn.shutdown(Shutdown::Write).unwrap();
        conn.read_to_end(&mut after).unwrap();
        (request, after)
    });
    let (proxy, port) = proxy_on_host(&loopback(upstream_port));
    let mut client = TcpStream::connect(("127.0.0.1", port)).unwrap();
    let smuggled = "GET http://elsewhere.example/ HTTP/1.1\r\n\r\n";
    client
        .write_all(
            format!(
                "POST http://localhost:{upstream_port}/up HTTP/1.1\r\nContent-Length: 5\r\n\
                 Proxy-Connection: keep-alive\r\n\r\nhello{smuggled}"
            )
            .as_bytes(),
        )
        .unwrap();
    let mut answer = String::new();
    client.read_to_string(&mut answer).unwrap();
    assert_eq!(answer, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok");
    let (request, after) = server.join().unwrap();
    assert_eq!(
        request,
        format!(
            "POST /up HTTP/1.1\r\nHost: localhost:{upstream_port}\r\nContent-Length: 5\r\n\
             Connection: close\r\n\r\nhello"
        )
    );
    assert_eq!(String::from_utf8_lossy(&after), "");
    drop(proxy);
}

/// `len` bytes that differ by `seed` and by position (so a lost, repeated or reordered
/// chunk shows).
fn pattern(seed: u8, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i % 251) as u8 ^ seed.wrapping_mul(37))
        .collect()
}

/// Opens a tunnel through the proxy on `port` to `localhost:target`.
fn open_tunnel(port: u16, target: u16) -> TcpStream {
    let mut client = TcpStream::connect(("127.0.0.1", port)).unwrap();
    client
        .write_all(format!("CONNECT localhost:{target} HTTP/1.1\r\n\r\n").as_bytes())
        .unwrap();
    let answer = b"HTTP/1.1 200 Connection Established\r\n\r\n";
    let mut got = vec![0u8; answer.len()];
    client.read_exact(&mut got).unwrap();
    assert_eq!(got, answer);
    client
}

/// Past `BULK_AFTER_BYTES` each way (the pipes grow mid-transfer): every byte arrives, and
/// each side's end-of-file reaches the other; the client sends only after the server's
/// end-of-file arrived, so the tunnel must keep that direction open past it.
#[test]
fn a_tunnel_carries_bulk_both_ways_and_each_half_close() {
    const DOWN: usize = 3 * BULK_AFTER_BYTES as usize;
    const UP: usize = 2 * BULK_AFTER_BYTES as usize;
    let upstream = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let upstream_port = upstream.local_addr().unwrap().port();
    let server = std::thread::spawn(move || {
        let (mut conn, _) = upstream.accept().unwrap();
        conn.write_all(&pattern(1, DOWN)).unwrap();
        conn.shutdown(Shutdown::Write).unwrap();
        let mut got = Vec::new();
        conn.read_to_end(&mut got).unwrap();
        got
    });
    let (proxy, port) = proxy_on_host(&loopback(upstream_port));
    let mut client = open_tunnel(port, upstream_port);
    let mut down = Vec::new();
    client.read_to_end(&mut down).unwrap();
    assert!(down == pattern(1, DOWN), "{} bytes down", down.len());
    client.write_all(&pattern(2, UP)).unwrap();
    client.shutdown(Shutdown::Write).unwrap();
    let up = server.join().unwrap();
    assert!(up == pattern(2, UP), "{} bytes up", up.len());
    drop(proxy);
}

#[test]
fn many_tunnels_at_once_each_get_their_own_bytes() {
    const TUNNELS: u8 = 24;
    const BYTES: usize = 1 << 20;
    let echo = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let echo_port = echo.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for conn in echo.incoming().take(TUNNELS as usize).flatten() {
            std::thread::spawn(move || {
                let mut reader = conn.try_clone().unwrap();
                let _ = std::io::copy(&mut reader, &mut &conn);
                let _ = conn.shutdown(Shutdown::Write);
            });
        }
    });
    let (proxy, port) = proxy_on_host(&loopback(echo_port));
    let tunnels: Vec<_> = (0..TUNNELS)
        .map(|seed| {
            std::thread::spawn(move || {
                let client = open_tunnel(port, echo_port);
                let mut writer = client.try_clone().unwrap();
                let sending = std::thread::spawn(move || {
                    writer.write_all(&pattern(seed, BYTES)).unwrap();
                    writer.shutdown(Shutdown::Write).unwrap();
                });
                let mut back = Vec::new();
                (&client).read_to_end(&mut back).unwrap();
                sending.join().unwrap();
                back == pattern(seed, BYTES)
            })
        })
        .collect();
    for (seed, tunnel) in tunnels.into_iter().enumerate() {
        assert!(tunnel.join().unwrap(), "tunnel {seed} got other bytes");
    }
    drop(proxy);
}

/// A proxy dropped in the middle of a bulk download closes both sides and every thread
/// ends (with it, each socket and pipe it held).
#[test]
fn a_proxy_dropped_mid_transfer_closes_both_sides() {
    let upstream = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let upstream_port = upstream.local_addr().unwrap().port();
    let server = std::thread::spawn(move || {
        let (mut conn, _) = upstream.accept().unwrap();
        let chunk = pattern(3, 64 << 10);
        // Sends until the proxy's end of the connection is gone.
        while conn.write_all(&chunk).is_ok() {}
    });
    let (proxy, port) = proxy_on_host(&loopback(upstream_port));
    let held = proxy.threads_hold();
    let mut client = open_tunnel(port, upstream_port);
    let mut buf = vec![0u8; 64 << 10];
    let mut got = 0;
    while got < 2 * BULK_AFTER_BYTES as usize {
        let n = client.read(&mut buf).unwrap();
        assert!(n > 0);
        got += n;
    }
    drop(proxy);
    // The client reads on until the proxy closed its end (end-of-file or a reset): what was
    // in flight, far less than a relay that kept going would deliver.
    let mut after = 0;
    while let Ok(n @ 1..) = client.read(&mut buf) {
        after += n;
        assert!(
            after < 256 << 20,
            "the relay went on after the proxy was dropped"
        );
    }
    server.join().unwrap();
    until("every proxy thread ended", || held.upgrade().is_none());
}

#[test]
fn a_silent_client_and_an_idle_tunnel_are_closed() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let short = Timeouts {
        head: Duration::from_millis(50),
        idle: Duration::from_millis(50),
    };
    // A server that never speaks.
    let quiet = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let quiet_port = quiet.local_addr().unwrap().port();
    let proxy = Proxy::start_with(
        rules(&loopback(quiet_port)),
        vec![OwnedFd::from(listener)],
        short,
        system_resolver,
    )
    .unwrap();
    // No head: closed without an answer.
    let mut silent = TcpStream::connect(("127.0.0.1", port)).unwrap();
    let mut got = Vec::new();
    silent.read_to_end(&mut got).unwrap();
    assert!(got.is_empty());
    // A tunnel to it, and a client that says nothing more: closed.
    let mut tunnel = TcpStream::connect(("127.0.0.1", port)).unwrap();
    tunnel
        .write_all(format!("CONNECT localhost:{quiet_port} HTTP/1.1\r\n\r\n").as_bytes())
        .unwrap();
    let (_held, _) = quiet.accept().unwrap();
    let mut answer = String::new();
    tunnel.read_to_string(&mut answer).unwrap();
    assert_eq!(answer, "HTTP/1.1 200 Connection Established\r\n\r\n");
    drop(proxy);
}

/// A loopback server that records every connection's bytes (until the client's end or a
/// blank line) and answers each `200`; the record of each accepted connection.
fn recording_server() -> (u16, Arc<Mutex<Vec<Vec<u8>>>>) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let record = Arc::clone(&seen);
    std::thread::spawn(move || {
        for mut conn in listener.incoming().flatten() {
            let mut got = Vec::new();
            let mut buf = [0u8; 4096];
            while head_end(&got).is_none() {
                match conn.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => got.extend_from_slice(&buf[..n]),
                }
            }
            record.lock().unwrap().push(got);
            let _ = conn.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok");
        }
    });
    (port, seen)
}

/// Sends `request` through the proxy on `port`; its whole answer.
fn ask(port: u16, request: &[u8]) -> String {
    let mut client = TcpStream::connect(("127.0.0.1", port)).unwrap();
    client.write_all(request).unwrap();
    let mut answer = String::new();
    let _ = client.read_to_string(&mut answer);
    answer
}

#[test]
fn a_bare_lf_cannot_put_a_host_before_the_proxys_nor_take_the_configured_header() {
    let (up, seen) = recording_server();
    let rules = Rules::new(&super::super::NetworkAllow {
        allow: loopback(up),
        headers: vec![(format!("localhost:{up}"), "X-Token".into(), "secret".into())],
    })
    .unwrap();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let proxy = Proxy::start(rules, vec![OwnedFd::from(listener)]).unwrap();
    for smuggling in [
        format!("GET http://localhost:{up}/a\nHost: other.example HTTP/1.1\r\n\r\n"),
        format!("GET http://localhost:{up}/a HTTP/1.1\nHost: other.example\r\n\r\n"),
        format!("GET http://localhost:{up}/a HTTP/1.1\r\nA: b\nHost: other.example\r\n\r\n"),
    ] {
        let answer = ask(port, smuggling.as_bytes());
        assert!(
            answer.starts_with("HTTP/1.1 400 Bad Request\r\n"),
            "{answer}"
        );
    }
    // The server is reached by a well-formed request only: the proxy's Host first, then the
    // header, which went nowhere else.
    let answer = ask(
        port,
        format!("GET http://localhost:{up}/b HTTP/1.1\r\n\r\n").as_bytes(),
    );
    assert!(answer.ends_with("ok"), "{answer}");
    let seen = seen.lock().unwrap();
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert!(
        seen[0].starts_with(
            format!("GET /b HTTP/1.1\r\nHost: localhost:{up}\r\nX-Token: secret\r\n").as_bytes()
        ),
        "{}",
        String::from_utf8_lossy(&seen[0])
    );
    drop(proxy);
}

#[test]
fn headers_go_to_the_port_their_entry_names_and_not_another_port_of_the_name() {
    let (a, seen_a) = recording_server();
    let (b, seen_b) = recording_server();
    let rules = Rules::new(&super::super::NetworkAllow {
        allow: [loopback(a), loopback(b)].concat(),
        headers: vec![
            (format!("localhost:{a}"), "X-Token".into(), "secret".into()),
            ("localhost".into(), "X-Default".into(), "80-and-443".into()),
        ],
    })
    .unwrap();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let proxy = Proxy::start(rules, vec![OwnedFd::from(listener)]).unwrap();
    for up in [a, b] {
        let answer = ask(
            port,
            format!("GET http://localhost:{up}/ HTTP/1.1\r\n\r\n").as_bytes(),
        );
        assert!(answer.ends_with("ok"), "{answer}");
    }
    let to_a = String::from_utf8(seen_a.lock().unwrap().pop().unwrap()).unwrap();
    let to_b = String::from_utf8(seen_b.lock().unwrap().pop().unwrap()).unwrap();
    assert!(to_a.contains("X-Token: secret\r\n"), "{to_a}");
    assert!(
        !to_b.contains("secret") && !to_b.contains("X-Token"),
        "{to_b}"
    );
    assert!(!to_a.contains("X-Default") && !to_b.contains("X-Default"));
    drop(proxy);
}

/// A resolver that gives `*.test` names the addresses their first label spells (`private`:
/// 10.0.0.1, `metadata`: 169.254.169.254, `v6`: fd00::1, `mixed`: those and the loopback
/// server `up` names, `loop`: the loopback server), counting its calls.
static LOOKUPS: AtomicUsize = AtomicUsize::new(0);
fn test_resolver(name: &str, port: u16) -> io::Result<Vec<SocketAddr>> {
    LOOKUPS.fetch_add(1, Ordering::SeqCst);
    let at = |ip: &str| SocketAddr::new(ip.parse().unwrap(), port);
    Ok(match name.split('.').next().unwrap() {
        "private" => vec![at("10.0.0.1")],
        "metadata" => vec![at("169.254.169.254")],
        "v6" => vec![at("fd00::1"), at("fe80::1")],
        "unspecified" => vec![at("0.0.0.0"), at("::")],
        "mixed" => vec![at("10.0.0.1"), at("169.254.169.254"), at("127.0.0.1")],
        "loop" => vec![at("127.0.0.1")],
        _ => return Err(io::Error::other("no such name")),
    })
}

#[test]
fn names_reach_non_public_addresses_only_where_an_entry_is_the_address() {
    let (up, seen) = recording_server();
    let mut allow: Vec<String> = ["private", "metadata", "v6", "unspecified", "mixed", "loop"]
        .iter()
        .map(|n| format!("{n}.test:{up}"))
        .collect();
    allow.push("metadata.test".into());
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let proxy = Proxy::start_with(
        rules(&allow),
        vec![OwnedFd::from(listener)],
        Timeouts::DEFAULT,
        test_resolver,
    )
    .unwrap();
    let events = Arc::new(Mutex::new(Vec::new()));
    let sink_events = Arc::clone(&events);
    let _registration = proxy.register(
        "cmd",
        Some(Arc::new(move |e: PolicyEvent| {
            sink_events.lock().unwrap().push(e)
        })),
    );
    // Refused after the lookup, before any connection (none of these addresses is dialed).
    for host in ["private", "v6", "unspecified", "loop"] {
        let answer = ask(
            port,
            format!("CONNECT {host}.test:{up} HTTP/1.1\r\n\r\n").as_bytes(),
        );
        assert!(
            answer.starts_with("HTTP/1.1 403 Forbidden\r\n"),
            "{host}: {answer}"
        );
        assert!(
            answer.contains("resolves to no address the sandbox may reach"),
            "{answer}"
        );
    }
    let answer = ask(
        port,
        b"GET http://metadata.test/latest/meta-data/ HTTP/1.1\r\n\r\n",
    );
    assert!(answer.starts_with("HTTP/1.1 403 Forbidden\r\n"), "{answer}");
    // The loopback address listed: the mixed name reaches it, and only it.
    let rules_with = |extra: &str| {
        let mut allow = allow.clone();
        allow.push(extra.to_string());
        rules(&allow)
    };
    drop(proxy);
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let proxy = Proxy::start_with(
        rules_with(&format!("127.0.0.1:{up}")),
        vec![OwnedFd::from(listener)],
        Timeouts::DEFAULT,
        test_resolver,
    )
    .unwrap();
    let before = LOOKUPS.load(Ordering::SeqCst);
    for host in ["mixed", "loop"] {
        let answer = ask(
            port,
            format!("GET http://{host}.test:{up}/ HTTP/1.1\r\n\r\n").as_bytes(),
        );
        assert!(answer.ends_with("ok"), "{host}: {answer}");
    }
    // One lookup per connection: the address checked is the address connected to.
    assert_eq!(LOOKUPS.load(Ordering::SeqCst) - before, 2);
    assert_eq!(seen.lock().unwrap().len(), 2);
    let events = events.lock().unwrap();
    let refused: Vec<_> = events.iter().map(|e| (e.allowed, e.rule.clone())).collect();
    assert_eq!(refused, vec![(false, None); 5]);
    drop(proxy);
}

#[test]
fn a_command_reports_at_most_max_events_connections() {
    let (proxy, port) = proxy_on_host(&["x.org"]);
    let count = Arc::new(AtomicUsize::new(0));
    let counting = Arc::clone(&count);
    let registration = proxy.register(
        "loop",
        Some(Arc::new(move |_: PolicyEvent| {
            counting.fetch_add(1, Ordering::SeqCst);
        })),
    );
    for _ in 0..MAX_EVENTS_PER_COMMAND + 20 {
        let answer = ask(port, b"CONNECT 127.0.0.1:9 HTTP/1.1\r\n\r\n");
        assert!(answer.starts_with("HTTP/1.1 403 "), "{answer}");
    }
    assert_eq!(count.load(Ordering::SeqCst), MAX_EVENTS_PER_COMMAND);
    // Another command has its own count.
    drop(registration);
    let other = Arc::new(AtomicUsize::new(0));
    let counting = Arc::clone(&other);
    let _registration = proxy.register(
        "next",
        Some(Arc::new(move |_: PolicyEvent| {
            counting.fetch_add(1, Ordering::SeqCst);
        })),
    );
    ask(port, b"CONNECT 127.0.0.1:9 HTTP/1.1\r\n\r\n");
    assert_eq!(other.load(Ordering::SeqCst), 1);
    drop(proxy);
}

fn rules<S: AsRef<str>>(allow: &[S]) -> Rules {
    Rules::new(&super::super::NetworkAllow {
        allow: allow.iter().map(|s| s.as_ref().to_string()).collect(),
        headers: Vec::new(),
    })
    .unwrap()
}
