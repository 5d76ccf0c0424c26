//! Which command a proxied connection came from: the sandbox's commands share one network
//! namespace, so the connection's other end is looked up in `/proc/net/tcp{,6}` and found among
//! the descriptors of a command's process tree (bounded by `MAX_OWNER_SCAN`).

use std::net::{IpAddr, SocketAddr, TcpStream};

/// The most processes one search for a connection's owner looks at: bounds what a connection
/// costs when commands run at once (a command's tree rarely has more than a few dozen).
const MAX_OWNER_SCAN: usize = 4096;

/// `/proc/net/tcp`'s form of an address and port: the address's 32-bit words in host byte order,
/// then the port, in upper-case hex.
fn proc_net_addr(addr: SocketAddr) -> String {
    let words: Vec<u8> = match addr.ip() {
        IpAddr::V4(ip) => ip.octets().to_vec(),
        IpAddr::V6(ip) => ip.octets().to_vec(),
    };
    let mut out = String::new();
    for word in words.chunks(4) {
        let word = u32::from_ne_bytes([word[0], word[1], word[2], word[3]]);
        out.push_str(&format!("{word:08X}"));
    }
    out.push_str(&format!(":{:04X}", addr.port()));
    out
}

/// The inode of the sandbox's end of `client` (a connection we accepted), from the TCP table of
/// the sandbox's network namespace as `pid`, a process in it, sees it.
pub(super) fn peer_inode(client: &TcpStream, pid: libc::pid_t) -> Option<u64> {
    let (peer, local) = (client.peer_addr().ok()?, client.local_addr().ok()?);
    let table = if peer.is_ipv4() { "tcp" } else { "tcp6" };
    let text = std::fs::read_to_string(format!("/proc/{pid}/net/{table}")).ok()?;
    let (want_local, want_remote) = (proc_net_addr(peer), proc_net_addr(local));
    text.lines().skip(1).find_map(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        (fields.len() > 9 && fields[1] == want_local && fields[2] == want_remote)
            .then(|| fields[9].parse().ok())
            .flatten()
    })
}

/// Whether a process of the tree under `root` holds the socket `link` (`socket:[inode]`).
pub(super) fn tree_holds(root: libc::pid_t, link: &str) -> bool {
    let mut queue = vec![root];
    let mut seen = 0;
    while let Some(pid) = queue.pop() {
        seen += 1;
        if seen > MAX_OWNER_SCAN {
            return false;
        }
        if let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) {
            if fds
                .flatten()
                .any(|fd| std::fs::read_link(fd.path()).is_ok_and(|l| l.as_os_str() == link))
            {
                return true;
            }
        }
        if let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) {
            for task in tasks.flatten() {
                if let Ok(children) = std::fs::read_to_string(task.path().join("children")) {
                    queue.extend(
                        children
                            .split_whitespace()
                            .filter_map(|c| c.parse::<libc::pid_t>().ok()),
                    );
                }
            }
        }
    }
    false
}
