//! Searching one file the way ripgrep 15 does (same matcher and searcher
//! configuration), keeping only the lines pi's output can use.

use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom};
use std::sync::OnceLock;

use grep_matcher::{LineTerminator, Matcher};
use grep_regex::{RegexMatcher, RegexMatcherBuilder};
use grep_searcher::{
    BinaryDetection, MmapChoice, Searcher, SearcherBuilder, Sink, SinkContext, SinkMatch,
};

use super::long_lines::{self, StreamMatcher};
pub(crate) use super::text::Hit;
use super::text::{show_line, FileHits, Limiter};
use crate::error::{Error, Result};

/// Largest line the searcher buffers. A longer line (or a context window that
/// does not fit) makes the searcher fail, and the file is searched again by
/// `long_lines`, which never holds a whole line. Bounds what one search
/// thread's buffer grows to, while lines of a few MiB (minified bundles) stay
/// on the searcher's path.
pub const HEAP_LIMIT: usize = 8 << 20;

/// Walked files up to this size are read whole, in two reads (the data, then
/// the end) instead of the searcher's three: most source files fit, and the
/// buffer, one per search thread, stays small.
const WHOLE_FILE: usize = 256 << 10;

/// rg's for walked files: the search stops at the first NUL byte.
fn walked_binary_detection() -> BinaryDetection {
    BinaryDetection::quit(b'\x00')
}

/// A search thread's own tools for walked files: a searcher, a buffer to
/// read files whole, and a copy of the matcher (a copy has its own scratch
/// pool, owned by the one thread using it, so no file takes a lock for it).
pub struct Worker {
    searcher: Searcher,
    buf: Vec<u8>,
    matcher: RegexMatcher,
}

/// How a pattern is matched, and how much of each file is kept.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EngineOptions {
    /// Case-insensitive matching (rg `-i`).
    pub ignore_case: bool,
    /// The pattern is a literal string, not a regex (rg `-F`).
    pub literal: bool,
    /// Lines kept before and after each match.
    pub context: u64,
    /// Matches kept per file (at least one).
    pub limit: u64,
    /// Lines of a file kept only while its output is under this many bytes
    /// (`FileHits`); `None` keeps every line.
    pub store_cap: Option<u64>,
}

/// A walked file's lines, and the file itself when some were only summed
/// (`FileHits::rest`): the limit may fall among them, and then the file is
/// searched again.
pub struct Found {
    /// The file's lines, bounded.
    pub hits: FileHits,
    /// The open file, when its lines were summed.
    pub file: Option<File>,
}

/// The compiled query, shared by all search threads.
pub struct Engine {
    pattern: String,
    options: EngineOptions,
    matcher: RegexMatcher,
    stream: OnceLock<Result<StreamMatcher, String>>,
    pub context: u64,
    pub limit: u64,
}

/// ripgrep's hints appended to some regex errors (`suggest_multiline`,
/// `suggest_text` in rg's hiargs.rs), reproduced because pi shows rg's text.
fn rg_error_text(msg: String) -> String {
    if msg.contains("the literal") && msg.contains("not allowed") {
        format!(
            "{msg}\n\nConsider enabling multiline mode with the --multiline flag (or -U for short).\nWhen multiline mode is enabled, new line characters can be matched."
        )
    } else if msg.contains("pattern contains \"\\0\"") {
        format!(
            "{msg}\n\nConsider enabling text mode with the --text flag (or -a for short). Otherwise,\nbinary detection is enabled and matching a NUL byte is impossible."
        )
    } else {
        msg
    }
}

impl Engine {
    pub fn new(pattern: &str, options: EngineOptions) -> Result<Engine> {
        let EngineOptions {
            ignore_case,
            literal,
            context,
            limit,
            store_cap: _,
        } = options;
        // rg's `matcher_rust` for `--json -n [-i] [-F]` without multiline.
        let matcher = RegexMatcherBuilder::new()
            .multi_line(true)
            .unicode(true)
            .octal(false)
            .fixed_strings(literal)
            .case_insensitive(ignore_case)
            .line_terminator(Some(b'\n'))
            .dot_matches_new_line(false)
            .ban_byte(Some(b'\x00'))
            .build_many(&[pattern])
            .map_err(|e| Error::invalid_regex(format!("rg: {}", rg_error_text(e.to_string()))))?;
        Ok(Engine {
            pattern: pattern.to_string(),
            options,
            matcher,
            stream: OnceLock::new(),
            context,
            limit: limit.max(1),
        })
    }

    /// A searcher configured as rg's: walked files stop at a NUL byte (binary
    /// files skipped). A named file rg memory-maps, where its `convert` mode
    /// leaves the bytes alone; reading it with no binary detection gives the
    /// same lines in bounded memory.
    pub fn searcher(&self, walked: bool) -> Searcher {
        let context = usize::try_from(self.context).unwrap_or(usize::MAX);
        SearcherBuilder::new()
            .line_terminator(LineTerminator::byte(b'\n'))
            .line_number(true)
            .before_context(context)
            .after_context(context)
            .memory_map(MmapChoice::never())
            .heap_limit(Some(HEAP_LIMIT))
            .binary_detection(if walked {
                walked_binary_detection()
            } else {
                BinaryDetection::none()
            })
            .build()
    }

    pub fn is_match(&self, line: &[u8]) -> bool {
        self.matcher.is_match(line).unwrap_or(false)
    }

    /// The tools of one thread searching walked files.
    pub fn worker(&self) -> Worker {
        Worker {
            searcher: self.searcher(true),
            buf: vec![0; WHOLE_FILE],
            matcher: self.matcher.clone(),
        }
    }

    fn stream_matcher(&self) -> Result<&StreamMatcher, String> {
        self.stream
            .get_or_init(|| {
                StreamMatcher::new(
                    &self.pattern,
                    self.options.ignore_case,
                    self.options.literal,
                )
            })
            .as_ref()
            .map_err(Clone::clone)
    }

    /// The lines of a walked file pi may show, bounded (`FileHits`). `file`
    /// is freshly opened: read from where it stands, its start.
    pub fn search_walked(
        &self,
        worker: &mut Worker,
        file: File,
        halted: &dyn Fn() -> bool,
    ) -> Found {
        let mut hits = FileHits::new(self.options.store_cap);
        self.stream_opened(worker, &file, halted, &mut |hit| {
            hits.push(hit);
            true
        });
        let file = hits.rest.is_some().then_some(file);
        Found { hits, file }
    }

    /// `stream_opened` over a walked file read before (`Found::file`), from
    /// its start again.
    pub fn stream_walked(
        &self,
        worker: &mut Worker,
        mut file: &File,
        halted: &dyn Fn() -> bool,
        on_hit: &mut dyn FnMut(Hit) -> bool,
    ) {
        if file.rewind().is_ok() {
            self.stream_opened(worker, file, halted, on_hit);
        }
    }

    /// The lines of a walked file pi may show, from its current position
    /// (a fresh file's start: no seek, one system call less per file), each
    /// handed to `on_hit` (which says whether to go on), read through the
    /// worker's buffer: a file that fits is read whole with two reads, the data and
    /// the end (ripgrep's reader adds a third, its BOM peek) and, without a
    /// NUL byte, searched as a slice, which yields the same lines as the
    /// reader. A file with a NUL is searched as a reader over the same
    /// bytes, so binary detection behaves exactly as on the file; a larger
    /// file streams on from where the buffer ends.
    fn stream_opened(
        &self,
        worker: &mut Worker,
        file: &File,
        halted: &dyn Fn() -> bool,
        on_hit: &mut dyn FnMut(Hit) -> bool,
    ) {
        let Worker {
            searcher,
            buf,
            matcher,
        } = worker;
        let Ok(filled) = read_full(file, buf) else {
            return;
        };
        let whole = filled < buf.len();
        let head = &buf[..filled];
        let mut sink = Collect {
            on_hit: &mut *on_hit,
            limiter: Limiter::new(self.limit, self.context),
            halted,
            emitted: 0,
        };
        if !whole {
            let reader = Halting {
                inner: head.chain(file),
                halted,
            };
            if searcher
                .search_reader(&*matcher, reader, &mut sink)
                .is_err()
            {
                let emitted = sink.emitted;
                self.search_long_lines(file, true, halted, emitted, on_hit);
            }
            return;
        }
        let searched = if memchr::memchr(0, head).is_some() {
            searcher.search_reader(&*matcher, head, &mut sink)
        } else {
            // Known to have no NUL: spare the searcher a second scan for one.
            searcher.set_binary_detection(BinaryDetection::none());
            let searched = searcher.search_slice(&*matcher, head, &mut sink);
            searcher.set_binary_detection(walked_binary_detection());
            searched
        };
        let _ = searched;
    }

    /// The lines of `file` pi may show, each handed to `on_hit` (which says
    /// whether to go on). `halted` is polled while reading.
    pub fn search_file(
        &self,
        searcher: &mut Searcher,
        file: &File,
        walked: bool,
        halted: &dyn Fn() -> bool,
        on_hit: &mut dyn FnMut(Hit) -> bool,
    ) {
        let mut sink = Collect {
            on_hit: &mut *on_hit,
            limiter: Limiter::new(self.limit, self.context),
            halted,
            emitted: 0,
        };
        let reader = Halting {
            inner: Waiting { file, halted },
            halted,
        };
        if searcher
            .search_reader(&self.matcher, reader, &mut sink)
            .is_err()
        {
            let emitted = sink.emitted;
            self.search_long_lines(file, walked, halted, emitted, on_hit);
        }
    }

    /// After the searcher failed on a line longer than the heap limit (or an
    /// unreadable file): search again from the start without buffering whole
    /// lines. The first `emitted` lines were handed on already (the searcher
    /// reports lines before it fails), so they are not handed on again.
    fn search_long_lines(
        &self,
        mut file: &File,
        walked: bool,
        halted: &dyn Fn() -> bool,
        emitted: u64,
        on_hit: &mut dyn FnMut(Hit) -> bool,
    ) {
        if halted() || file.seek(SeekFrom::Start(0)).is_err() {
            return;
        }
        let Ok(stream) = self.stream_matcher() else {
            return;
        };
        let mut seen = 0u64;
        let mut on_new = |hit: Hit| {
            seen += 1;
            seen <= emitted || on_hit(hit)
        };
        let reader = Halting {
            inner: file,
            halted,
        };
        let short = |line: &[u8]| self.is_match(line);
        let (limit, context) = (self.limit, self.context);
        let _ = long_lines::search(
            stream,
            &short,
            (limit, context),
            reader,
            walked,
            halted,
            &mut on_new,
        );
    }
}

/// A reader that reports end of file once the search is halted, so a long
/// file without matches still stops promptly.
pub struct Halting<'a, R> {
    pub inner: R,
    pub halted: &'a dyn Fn() -> bool,
}

impl<R: Read> Read for Halting<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if (self.halted)() {
            return Ok(0);
        }
        self.inner.read(buf)
    }
}

/// How long a read of a file opened without blocking (a FIFO named as the
/// target) waits for data between two looks at `halted`: a cancelled search
/// of an idle FIFO ends within this.
#[cfg(unix)]
const WAIT_STEP_MS: i32 = 100;

/// A file opened `O_NONBLOCK` read as if blocking: a read that would block
/// waits for data (or the writers' end) in steps of `WAIT_STEP_MS`, and
/// reports end of file once the search is halted. A regular file never
/// would block, so this costs it nothing.
/// Reads `file` until `buf` is full or the file ends; the bytes read.
#[cfg(unix)]
fn read_full(file: &File, buf: &mut [u8]) -> io::Result<usize> {
    use std::os::fd::AsFd;
    crate::sys::read_full(file.as_fd(), buf)
}

/// Reads `file` until `buf` is full or the file ends; the bytes read.
#[cfg(not(unix))]
fn read_full(mut file: &File, buf: &mut [u8]) -> io::Result<usize> {
    let mut filled = 0;
    while filled < buf.len() {
        match file.read(&mut buf[filled..]) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(filled)
}

struct Waiting<'a> {
    file: &'a File,
    halted: &'a dyn Fn() -> bool,
}

/// Windows has no FIFO in a walk or as a file opened by name (a named pipe
/// is no directory entry, and `open_named` never opens one without waiting
/// semantics of its own): a read never would block, so it is a plain read.
#[cfg(not(unix))]
impl Read for Waiting<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let _ = self.halted;
        (&mut &*self.file).read(buf)
    }
}

#[cfg(unix)]
impl Read for Waiting<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        use std::os::fd::AsRawFd;
        loop {
            match (&mut &*self.file).read(buf) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                other => return other,
            }
            if (self.halted)() {
                return Ok(0);
            }
            let mut fd = libc::pollfd {
                fd: self.file.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: one valid pollfd, for the duration of the call.
            if unsafe { libc::poll(&mut fd, 1, WAIT_STEP_MS) } < 0 {
                let e = io::Error::last_os_error();
                if e.kind() != io::ErrorKind::Interrupted {
                    return Err(e);
                }
            }
        }
    }
}

/// The searcher's sink: lines through the file's limiter to `on_hit`.
struct Collect<'a> {
    on_hit: &'a mut dyn FnMut(Hit) -> bool,
    limiter: Limiter,
    halted: &'a dyn Fn() -> bool,
    /// Lines handed to `on_hit` so far.
    emitted: u64,
}

impl Collect<'_> {
    fn line(&mut self, number: Option<u64>, bytes: &[u8], is_match: bool) -> bool {
        let number = number.unwrap_or(0);
        let (record, mut go_on) = self.limiter.accept(number, is_match);
        if record {
            self.emitted += 1;
            go_on &= (self.on_hit)(Hit {
                number,
                shown: show_line(bytes, true),
                is_match,
            });
        }
        go_on && !(self.halted)()
    }
}

impl Sink for Collect<'_> {
    type Error = io::Error;

    fn matched(&mut self, _s: &Searcher, m: &SinkMatch<'_>) -> Result<bool, io::Error> {
        Ok(self.line(m.line_number(), m.bytes(), true))
    }

    fn context(&mut self, _s: &Searcher, c: &SinkContext<'_>) -> Result<bool, io::Error> {
        Ok(self.line(c.line_number(), c.bytes(), false))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn regex_errors_read_like_rg() {
        let Err(err) = Engine::new(
            "foo(",
            EngineOptions {
                limit: 1,
                ..EngineOptions::default()
            },
        ) else {
            panic!("expected an error");
        };
        assert_eq!(err.kind(), crate::ErrorKind::InvalidRegex);
        assert_eq!(
            err.to_string(),
            "rg: regex parse error:\n    (?:foo()\n    ^\nerror: unclosed group"
        );
        assert!(Engine::new(
            "foo(",
            EngineOptions {
                literal: true,
                limit: 1,
                ..EngineOptions::default()
            }
        )
        .is_ok());
    }
}
