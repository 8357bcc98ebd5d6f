//! The writing half of a connection: each line written whole within the
//! I/O timeout, and an answer before the events its request recorded.

use super::{Event, Shared};
use crate::base::lock;
use crate::sys;
use std::io::{self, Write};
use std::os::unix::net::UnixStream;
use std::sync::{Arc, Mutex, TryLockError};
use std::time::{Duration, Instant};

/// The writing half of a connection, shared by the thread that answers
/// requests and the one that forwards events. Each line must be written
/// whole within `timeout` (`BATON_IO_TIMEOUT`), however many `send` calls
/// it takes: a client that reads, but too slowly, is cut off like one that
/// does not read at all.
pub(super) struct Out {
    stream: Mutex<UnixStream>,
    timeout: Duration,
}

pub(super) type Writer = Arc<Out>;

impl Out {
    pub(super) fn new(stream: UnixStream, timeout: Duration) -> Writer {
        Arc::new(Out {
            stream: Mutex::new(stream),
            timeout,
        })
    }

    /// Says why the connection ends and ends it, without waiting: false
    /// (and nothing done) while a thread is writing to it.
    pub(super) fn close_now(&self, line: &[u8]) -> bool {
        let stream = match self.stream.try_lock() {
            Ok(s) => s,
            Err(TryLockError::Poisoned(e)) => e.into_inner(),
            Err(TryLockError::WouldBlock) => return false,
        };
        let _ = sys::send_nowait(&stream, line);
        let _ = stream.shutdown(std::net::Shutdown::Both);
        true
    }

    pub(super) fn shutdown(&self) {
        let _ = lock(&self.stream).shutdown(std::net::Shutdown::Both);
    }
}

/// What one blocking `send` of a line that did not fit at once may carry.
/// Linux gives each buffer a `send` allocates (32 KiB of data at most) the
/// whole send timeout afresh, so a large `send` could outlast its timeout
/// many times over while a client reads slowly; one this small waits for
/// one buffer only.
const SLOW_SEND: usize = 16 * 1024;

/// Writes `bytes` whole by `deadline`: at once if the socket takes them,
/// else in as many small `send` calls as it takes, each allowed only what
/// is left of the time.
fn write_by(stream: &mut UnixStream, bytes: &[u8], deadline: Instant) -> io::Result<()> {
    let mut rest = &bytes[sys::send_nowait(stream, bytes)?..];
    while !rest.is_empty() {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(io::ErrorKind::TimedOut.into());
        }
        stream.set_write_timeout(Some(left))?;
        match stream.write(&rest[..rest.len().min(SLOW_SEND)]) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => rest = &rest[n..],
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Writes an answer, then the events its request recorded (an
/// acceptance): the client is not kept waiting for the transcript. If the
/// socket cannot take the whole answer at once, the events go first, so a
/// slow client never holds them back.
pub(super) fn answer_then_flush(shared: &Shared, w: &Writer, line: &[u8]) -> bool {
    let mut stream = lock(&w.stream);
    let sent = sys::send_nowait(&stream, line);
    shared.hub.flush_once(|| {
        let _ = shared.events.send(Event::Flush);
    });
    match sent {
        Ok(n) if n == line.len() => true,
        Ok(n) => write_by(&mut stream, &line[n..], Instant::now() + w.timeout).is_ok(),
        Err(_) => false,
    }
}

/// Writes one line whole within the write deadline.
pub(super) fn write_line(w: &Writer, line: &[u8]) -> bool {
    let mut stream = lock(&w.stream);
    write_by(&mut stream, line, Instant::now() + w.timeout).is_ok()
}
