//! The server's side of stdout: every thread queues whole frames on one channel, and one writer
//! thread owns stdout, writing whatever is queued before each flush (so frames produced together
//! leave in one write).

use std::io::{self, BufWriter, Write};
use std::sync::mpsc;

use serde_json::{Map, Value};

use crate::frame::{encode_head, MAX_PAYLOAD};
use crate::wire::{Outgoing, WireError};

/// Bytes gathered before the writer writes: small frames queued together leave in one write.
const WRITE_BUFFER: usize = 64 << 10;

pub enum Out {
    Frame {
        head: Vec<u8>,
        payload: Vec<u8>,
    },
    /// Everything queued before it has been written and flushed.
    Flushed(mpsc::Sender<()>),
}

/// A cheap handle any thread sends frames through. Sending after the writer has gone (stdout
/// broken) does nothing: the connection is ending.
#[derive(Clone)]
pub struct Outbox(mpsc::Sender<Out>);

impl Outbox {
    pub fn new() -> (Outbox, mpsc::Receiver<Out>) {
        let (tx, rx) = mpsc::channel();
        (Outbox(tx), rx)
    }

    fn send(&self, message: &Outgoing<'_>, payload: Vec<u8>) {
        match serde_json::to_vec(message) {
            Ok(header) => {
                let head = encode_head(&header, payload.len());
                let _ = self.0.send(Out::Frame { head, payload });
            }
            // Our own messages are maps with string keys: serializing them cannot fail.
            Err(e) => eprintln!("pi-native-ops-server: cannot encode a message: {e}"),
        }
    }

    pub fn hello(&self, root: &str, platform: &str) {
        let hello = Outgoing::Hello {
            protocol: crate::wire::PROTOCOL,
            server: crate::wire::SERVER_VERSION,
            root,
            platform,
        };
        self.send(&hello, Vec::new());
    }

    /// The answer of call `id`: its fields and payload.
    pub fn ok(&self, id: u64, answer: Map<String, Value>, payload: Vec<u8>) {
        if payload.len() > MAX_PAYLOAD as usize {
            let message = format!(
                "the answer is {} bytes, more than a frame carries ({MAX_PAYLOAD} bytes)",
                payload.len()
            );
            return self.error(Some(id), &WireError::protocol(message));
        }
        self.send(&Outgoing::Ok { id, answer }, payload);
    }

    pub fn error(&self, id: Option<u64>, error: &WireError) {
        self.send(&Outgoing::Error { id, error }, Vec::new());
    }

    /// One chunk of a stream; the caller keeps it within a frame's and the window's size.
    pub fn data(&self, id: u64, chunk: Vec<u8>) {
        self.send(&Outgoing::Data { id }, chunk);
    }

    /// Answers once every frame queued before it is written (the sender drops unanswered when the
    /// writer is gone).
    pub fn flushed(&self) -> mpsc::Receiver<()> {
        let (tx, rx) = mpsc::channel();
        let _ = self.0.send(Out::Flushed(tx));
        rx
    }
}

/// Writes queued frames to `output` until every sender is gone; fails when `output` does.
pub fn write_frames<W: Write>(queue: mpsc::Receiver<Out>, output: W) -> io::Result<()> {
    let mut output = BufWriter::with_capacity(WRITE_BUFFER, output);
    let mut waiting = Vec::new();
    while let Ok(first) = queue.recv() {
        let mut next = Some(first);
        while let Some(out) = next {
            match out {
                Out::Frame { head, payload } => {
                    output.write_all(&head)?;
                    output.write_all(&payload)?;
                }
                Out::Flushed(done) => waiting.push(done),
            }
            next = queue.try_recv().ok();
        }
        output.flush()?;
        for done in waiting.drain(..) {
            let _ = done.send(());
        }
    }
    output.flush()
}
