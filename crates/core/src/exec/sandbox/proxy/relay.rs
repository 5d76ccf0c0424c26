//! The relay of an accepted connection: both directions moved with `splice` through a pipe (the
//! bytes stay in the kernel), or through a buffer where a pipe cannot be had, until both ended,
//! either side failed, the connection idled or the proxy stopped.

use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::time::Duration;

use super::*;

pub(super) fn set_nonblocking(fd: RawFd) -> io::Result<()> {
    // SAFETY: plain fcntl on a descriptor the caller holds.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    // SAFETY: as above.
    if flags < 0 || unsafe { libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// One direction of a relay: from `src` to `dst`, through a pipe with `splice` (the bytes stay
/// in the kernel: no copy through this process), or through a buffer where a pipe cannot be had.
struct Mover {
    pipe: Option<(OwnedFd, OwnedFd)>,
    buf: Vec<u8>,
    /// Bytes moved so far, until the pipe was offered `BULK_SPLICE_BYTES` (then `None`).
    moved: Option<u64>,
    /// Bytes asked of each splice: the pipe's size.
    splice_bytes: usize,
}

impl Mover {
    fn new() -> Mover {
        let pipe = if std::env::var_os("PNO_NO_SPLICE").is_some() {
            None
        } else {
            pipe().ok()
        };
        if let Some((_, write)) = &pipe {
            // A larger pipe moves a download in fewer calls; refused (the user's pipe memory is
            // used up), the default size still works.
            // SAFETY: plain fcntl on our own pipe.
            unsafe {
                libc::fcntl(
                    write.as_raw_fd(),
                    libc::F_SETPIPE_SZ,
                    RELAY_BUFFER_BYTES as libc::c_int,
                )
            };
        }
        Mover {
            pipe,
            buf: Vec::new(),
            moved: Some(0),
            splice_bytes: RELAY_BUFFER_BYTES,
        }
    }

    /// Counts `n` bytes moved; past `BULK_AFTER_BYTES`, asks once for the bulk pipe size (the
    /// pipe is empty between moves, so the kernel can resize it).
    fn count(&mut self, n: usize) {
        let Some(moved) = self.moved.as_mut() else {
            return;
        };
        *moved += n as u64;
        if *moved < BULK_AFTER_BYTES {
            return;
        }
        self.moved = None;
        if let Some((_, write)) = &self.pipe {
            // SAFETY: plain fcntl on our own pipe.
            let size = unsafe {
                libc::fcntl(
                    write.as_raw_fd(),
                    libc::F_SETPIPE_SZ,
                    BULK_SPLICE_BYTES as libc::c_int,
                )
            };
            // Refused (the quota), the pipe keeps its size.
            if size >= BULK_SPLICE_BYTES as libc::c_int {
                self.splice_bytes = BULK_SPLICE_BYTES;
            }
        }
    }

    /// Moves what `src` has, at most `max` bytes, all of it to `dst`: the count, 0 at
    /// end-of-file.
    fn move_once(&mut self, src: &TcpStream, dst: &TcpStream, max: usize) -> io::Result<usize> {
        if let Some((read, write)) = &self.pipe {
            let max = max.min(self.splice_bytes);
            // SAFETY: descriptors we hold; null offsets (sockets and pipes have none).
            let n = unsafe {
                libc::splice(
                    src.as_raw_fd(),
                    std::ptr::null_mut(),
                    write.as_raw_fd(),
                    std::ptr::null_mut(),
                    max,
                    libc::SPLICE_F_MOVE | libc::SPLICE_F_NONBLOCK,
                )
            };
            if n >= 0 {
                let n = n as usize;
                let mut left = n;
                while left > 0 {
                    // SAFETY: as above; the pipe holds `left` bytes, all of them this call's.
                    let m = unsafe {
                        libc::splice(
                            read.as_raw_fd(),
                            std::ptr::null_mut(),
                            dst.as_raw_fd(),
                            std::ptr::null_mut(),
                            left,
                            libc::SPLICE_F_MOVE,
                        )
                    };
                    if m < 0 {
                        let e = io::Error::last_os_error();
                        if e.kind() == io::ErrorKind::Interrupted {
                            continue;
                        }
                        return Err(e);
                    }
                    if m == 0 {
                        return Err(io::Error::from(io::ErrorKind::WriteZero));
                    }
                    left -= m as usize;
                }
                self.count(n);
                return Ok(n);
            }
            let e = io::Error::last_os_error();
            if e.raw_os_error() != Some(libc::EINVAL) {
                return Err(e);
            }
            // This pair cannot be spliced: the buffer from now on.
            self.pipe = None;
        }
        if self.buf.is_empty() {
            self.buf = vec![0u8; RELAY_BUFFER_BYTES];
        }
        let mut reader = src;
        let n = reader.read(&mut self.buf[..max.min(RELAY_BUFFER_BYTES)])?;
        let mut writer = dst;
        writer.write_all(&self.buf[..n])?;
        Ok(n)
    }
}

/// Moves bytes both ways until both directions ended, either side failed, nothing moved for
/// `idle` (`IDLE_TIMEOUT`), or the proxy stopped. `to_upstream_left`: how many more bytes of the client's
/// go upstream (`None`: all, a tunnel).
pub(super) fn relay(
    client: &TcpStream,
    upstream: &TcpStream,
    mut to_upstream_left: Option<u64>,
    stop: RawFd,
    idle: Duration,
) {
    let mut up = Mover::new();
    let mut down = Mover::new();
    // A request body fully sent: the client's further bytes are not read (not forwarded either).
    let mut client_open = to_upstream_left != Some(0);
    let mut upstream_open = true;
    let idle_ms = idle.as_millis().min(i32::MAX as u128) as i32;
    while client_open || upstream_open {
        // Once the response ended, the request side is over too (one request per connection).
        if !upstream_open && to_upstream_left.is_some() {
            break;
        }
        let mut fds = [
            libc::pollfd {
                fd: if client_open { client.as_raw_fd() } else { -1 },
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: if upstream_open {
                    upstream.as_raw_fd()
                } else {
                    -1
                },
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: stop,
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        // SAFETY: a valid array of three pollfd.
        let n = unsafe { libc::poll(fds.as_mut_ptr(), 3, idle_ms) };
        if n < 0 {
            if io::Error::last_os_error().kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return;
        }
        if n == 0 || stopped(fds[2].revents) {
            return;
        }
        if fds[0].revents != 0 {
            let want = match to_upstream_left {
                Some(left) => usize::try_from(left).unwrap_or(usize::MAX),
                None => usize::MAX,
            };
            match up.move_once(client, upstream, want) {
                Ok(0) => {
                    client_open = false;
                    if to_upstream_left.is_none() {
                        let _ = upstream.shutdown(Shutdown::Write);
                    }
                }
                Ok(n) => {
                    if let Some(left) = to_upstream_left.as_mut() {
                        *left -= n as u64;
                        client_open = *left > 0;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(_) => return,
            }
        }
        if fds[1].revents != 0 {
            match down.move_once(upstream, client, usize::MAX) {
                Ok(0) => {
                    upstream_open = false;
                    let _ = client.shutdown(Shutdown::Write);
                }
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(_) => return,
            }
        }
    }
}
