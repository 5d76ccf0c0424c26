// The read floor of a search: the least time any in-process search of a tree can take on this
// machine, measured by doing nothing but the file I/O a search does. bench/grep.js compiles this
// with rustc (std only) and reports it beside the grep rows.
//
// Usage: read-floor <list>   (run in the searched directory; <list> has one relative path per line)
// Each line read from stdin starts one pass over the files; the pass's wall time in ms is written
// back as a line, so the bench can interleave passes with the calls it measures.
//
// A pass reads files as crates/core/src/grep/search.rs does: up to 256 KiB in one go; a file with a NUL byte
// there stops (binary: the searcher quits at its first NUL), a longer one is read on to its end
// in 64 KiB reads. As many threads as the search uses (cores + 1) take runs of 8 files in order.
// Not done here: listing directories, ignore rules, matching, anything else a search needs.

use std::fs::File;
use std::io::{BufRead, Read, Write};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

const WHOLE: usize = 256 << 10;
const CHUNK: usize = 64 << 10;
const RUN: usize = 8;

fn read_like_search(path: &str, buf: &mut [u8]) {
    let Ok(mut file) = File::open(path) else {
        return;
    };
    let mut filled = 0;
    while filled < buf.len() {
        match file.read(&mut buf[filled..]) {
            Ok(0) | Err(_) => return,
            Ok(n) => filled += n,
        }
    }
    if buf.contains(&0) {
        return;
    }
    while let Ok(n) = file.read(&mut buf[..CHUNK]) {
        if n == 0 {
            return;
        }
    }
}

fn pass(files: &[String], threads: usize) -> f64 {
    let next = AtomicUsize::new(0);
    let start = Instant::now();
    std::thread::scope(|scope| {
        for _ in 0..threads {
            scope.spawn(|| {
                let mut buf = vec![0u8; WHOLE];
                loop {
                    let at = next.fetch_add(RUN, Ordering::Relaxed);
                    let Some(run) = files.get(at..(at + RUN).min(files.len())) else {
                        break;
                    };
                    if run.is_empty() {
                        break;
                    }
                    for path in run {
                        read_like_search(path, &mut buf);
                    }
                }
            });
        }
    });
    start.elapsed().as_secs_f64() * 1e3
}

fn main() {
    let list = std::env::args().nth(1).expect("usage: read-floor <list>");
    let text = std::fs::read_to_string(&list).expect("cannot read the list");
    let files: Vec<String> = text
        .lines()
        .filter(|l| !l.is_empty())
        .map(String::from)
        .collect();
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let threads = cores.clamp(1, 8) + 1;
    let stdout = std::io::stdout();
    for line in std::io::stdin().lock().lines() {
        if line.is_err() {
            break;
        }
        let ms = pass(&files, threads);
        let mut out = stdout.lock();
        if writeln!(out, "{ms}").and_then(|()| out.flush()).is_err() {
            break;
        }
    }
}
