//! One client session (docs/protocol.md §1-§2): `initialize`, typed calls
//! and a subscription, over a Unix socket or over the pipes of a `--via`
//! command (`baton bridge` on another host). Every front end reaches an
//! instance through it.

use super::{ClientError, rpc_error};
use crate::wire::answer::{Hello, HelloParams, Reply, Subscribed};
use crate::wire::{self, LineReader, Method, ReadError, SUBSCRIBER_BACKLOG, SUBSCRIBER_LINE};
use crossbeam_channel::{self as chan, Receiver};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use std::io::{self, Write};
use std::net::Shutdown;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::{Duration, Instant};

/// The longest line a client reads: an answer (`inbox/claim`'s) or an
/// event carries a body, escaped; `inbox/claim`'s twice (as `body` and in
/// the envelope), so twice the longest request line and 1 MiB. The
/// reader grows with the line: a bound costs nothing until it is used.
const MAX_LINE: usize = 2 * crate::base::config::MAX_BYTES_CEILING as usize + (1 << 20);

/// Where a session's lines come from.
pub trait Lines: Send {
    /// The next line, without its `\n`; `Timeout` once `until` passes.
    fn next_line(&mut self, until: Option<Instant>) -> Result<&[u8], ClientError>;

    /// From now on, lines longer than `max` end the session.
    fn limit(&mut self, _max: usize) {}

    /// A handle that hangs the connection up from another thread, waking
    /// a reader blocked on it; None where there is none (a pipe).
    fn hangup(&self) -> Option<UnixStream> {
        None
    }
}

/// A socket's lines, bounded.
struct SocketLines {
    reader: LineReader,
    /// The most one line may take once it has begun.
    line_timeout: Duration,
    /// The same socket, to hang it up with.
    socket: UnixStream,
}

impl Lines for SocketLines {
    fn next_line(&mut self, until: Option<Instant>) -> Result<&[u8], ClientError> {
        let idle = until.map(|u| u.saturating_duration_since(Instant::now()));
        if idle.is_some_and(|d| d.is_zero()) {
            return Err(ClientError::Timeout);
        }
        self.reader
            .read_line(idle, self.line_timeout)
            .map_err(|e| match e {
                ReadError::Idle | ReadError::LineTimeout => ClientError::Timeout,
                ReadError::Eof | ReadError::Truncated | ReadError::Io(_) => ClientError::Closed,
                ReadError::TooLarge => ClientError::Protocol("answer too large".into()),
            })
    }

    fn limit(&mut self, max: usize) {
        self.reader.set_max(max);
    }

    fn hangup(&self) -> Option<UnixStream> {
        self.socket.try_clone().ok()
    }
}

/// Lines a thread reads from a pipe (a `--via` command's stdout).
pub struct PipeLines {
    rx: Receiver<Vec<u8>>,
    line: Vec<u8>,
}

impl PipeLines {
    pub fn new(rx: Receiver<Vec<u8>>) -> PipeLines {
        PipeLines {
            rx,
            line: Vec::new(),
        }
    }
}

impl Lines for PipeLines {
    fn next_line(&mut self, until: Option<Instant>) -> Result<&[u8], ClientError> {
        let timer = until.map_or_else(chan::never, chan::at);
        chan::select! {
            recv(self.rx) -> line => match line {
                Ok(line) => self.line = line,
                Err(_) => return Err(ClientError::Closed),
            },
            recv(timer) -> _ => return Err(ClientError::Timeout),
        }
        Ok(&self.line)
    }
}

/// A session that has said `initialize`.
pub struct Session {
    lines: Box<dyn Lines>,
    writer: Box<dyn Write + Send>,
    next_id: u64,
    timeout: Duration,
    /// The `initialize` answer: the instance's manifest.
    pub hello: Hello,
}

impl Session {
    /// Connects to an instance's socket and says `initialize` as `baton`.
    pub fn open(socket: &Path, timeout: Duration) -> Result<Session, ClientError> {
        Session::connect(socket, timeout, &HelloParams::new("baton"))
    }

    /// Connects and says `initialize` with `params`.
    pub fn connect(
        socket: &Path,
        timeout: Duration,
        params: &HelloParams,
    ) -> Result<Session, ClientError> {
        let stream = super::connect(socket).map_err(ClientError::Connect)?;
        stream
            .set_write_timeout(Some(timeout))
            .map_err(ClientError::Connect)?;
        let reader = stream.try_clone().map_err(ClientError::Connect)?;
        let lines = SocketLines {
            reader: LineReader::new(reader, MAX_LINE),
            line_timeout: timeout,
            socket: stream.try_clone().map_err(ClientError::Connect)?,
        };
        let until = Some(Instant::now() + timeout);
        Session::start(Box::new(lines), Box::new(stream), timeout, params, until)?
            .ok_or(ClientError::Timeout)
    }

    /// Says `initialize` over `lines` and `writer`: the session, or None
    /// when `until` passes first (a `bridge --await` still waiting).
    pub fn start(
        lines: Box<dyn Lines>,
        writer: Box<dyn Write + Send>,
        timeout: Duration,
        params: &HelloParams,
        until: Option<Instant>,
    ) -> Result<Option<Session>, ClientError> {
        let mut s = Session {
            lines,
            writer,
            next_id: 1,
            timeout,
            hello: Hello::default(),
        };
        let id = s.take_id();
        match s.write(&request(id, Method::Initialize, params)) {
            // A connection refused for the cap may be closed before the
            // request lands; the line saying so is still there to read.
            Ok(()) | Err(ClientError::Closed) => {}
            Err(e) => return Err(e),
        }
        match s.answer(id, Method::Initialize, until) {
            Ok(hello) => {
                s.hello = hello;
                Ok(Some(s))
            }
            Err(ClientError::Timeout) if until.is_none_or(|u| Instant::now() >= u) => Ok(None),
            Err(e) => Err(e),
        }
    }

    fn take_id(&mut self) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        id
    }

    /// One request and its answer, within the session's timeout.
    pub fn call<R: DeserializeOwned>(
        &mut self,
        method: impl Into<Method>,
        params: impl Serialize,
    ) -> Result<R, ClientError> {
        let method = method.into();
        let id = self.take_id();
        self.write(&request(id, method, &params))?;
        self.answer(id, method, Some(Instant::now() + self.timeout))
    }

    /// Writes one line as it is (a request whose answer comes through
    /// `next`, among events).
    pub fn write(&mut self, line: &[u8]) -> Result<(), ClientError> {
        self.writer
            .write_all(line)
            .and_then(|()| self.writer.flush())
            .map_err(|e| match e.kind() {
                io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => ClientError::Timeout,
                _ => ClientError::Closed,
            })
    }

    /// The next JSON line (an event, a request of the instance's, an
    /// answer to a line sent with `write`), until `until`.
    pub fn next(&mut self, until: Option<Instant>) -> Result<Value, ClientError> {
        loop {
            let line = self.lines.next_line(until)?;
            if let Ok(v) = serde_json::from_slice(line) {
                return Ok(v);
            }
        }
    }

    /// Reads until the answer with `id` arrives, skipping notifications.
    fn answer<R: DeserializeOwned>(
        &mut self,
        id: u64,
        method: Method,
        until: Option<Instant>,
    ) -> Result<R, ClientError> {
        loop {
            let line = self.lines.next_line(until)?;
            let v: Reply = serde_json::from_slice(line)
                .map_err(|e| ClientError::Protocol(format!("answer is not JSON: {e}")))?;
            if v.method.is_some() {
                continue;
            }
            let ours = v.answers(id);
            if let Some(err) = v.error {
                // An error with no id (a refused connection) is ours too.
                if v.id.as_ref().and_then(Value::as_u64).is_some() && !ours {
                    continue;
                }
                return Err(rpc_error(err));
            }
            if !ours {
                continue;
            }
            return match v.result {
                Some(r @ Value::Object(_)) => serde_json::from_value(r).map_err(|e| {
                    ClientError::Protocol(format!("{} answered {e}", method.as_str()))
                }),
                _ => Err(ClientError::Protocol("answer has no result object".into())),
            };
        }
    }

    /// `events/subscribe` (`params` as docs/protocol.md §4 says): the
    /// events then come through `next`, or through `into_events`.
    pub fn subscribe(&mut self, params: impl Serialize) -> Result<Subscribed, ClientError> {
        let sub: Subscribed = self.call(Method::EventsSubscribe, params)?;
        if !sub.subscribed {
            return Err(ClientError::Protocol(
                "events/subscribe answered without subscribing".into(),
            ));
        }
        Ok(sub)
    }

    /// Hands the session's lines to a thread that reads them into the
    /// returned events (closed when the connection is); the writer stays
    /// for answering the instance's requests.
    ///
    /// The thread keeps the hub's numbers (src/spool/events.rs): at most
    /// `SUBSCRIBER_BACKLOG` events wait in the channel and no line is
    /// longer than `SUBSCRIBER_LINE`. When the channel is full the thread
    /// waits rather than drop an event, and so stops reading: the
    /// instance's own bound then cuts the subscriber off as it cuts any
    /// slow one, and the events end once those queued are taken.
    ///
    /// Dropping the events hangs the socket up (`Events`' drop shuts it
    /// down both ways): the thread, blocked in a read or a send, wakes
    /// and ends, and the instance frees the subscriber's place at once
    /// rather than when its next event fails to reach it. Over a pipe
    /// (`--via`) there is no socket to hang up; the thread ends when its
    /// next line finds the events gone, or when the pipe closes.
    pub fn into_events(self) -> (Events, Box<dyn Write + Send>) {
        let (tx, rx) = chan::bounded(SUBSCRIBER_BACKLOG);
        let mut lines = self.lines;
        lines.limit(SUBSCRIBER_LINE);
        let hangup = lines.hangup();
        std::thread::spawn(move || {
            while let Ok(line) = lines.next_line(None) {
                let Ok(v) = serde_json::from_slice::<Value>(line) else {
                    continue;
                };
                if tx.send(v).is_err() {
                    break;
                }
            }
        });
        (Events { rx, hangup }, self.writer)
    }
}

/// A subscription's events, as `Session::into_events` reads them: a
/// channel's receiving end (it derefs to one) that hangs the connection up
/// when dropped.
pub struct Events {
    rx: Receiver<Value>,
    hangup: Option<UnixStream>,
}

impl Events {
    /// Events that never come (no subscription).
    pub fn never() -> Events {
        Events {
            rx: chan::never(),
            hangup: None,
        }
    }
}

impl std::ops::Deref for Events {
    type Target = Receiver<Value>;

    fn deref(&self) -> &Receiver<Value> {
        &self.rx
    }
}

impl Drop for Events {
    fn drop(&mut self) {
        if let Some(socket) = &self.hangup {
            let _ = socket.shutdown(Shutdown::Both);
        }
    }
}

/// A request line.
pub fn request(id: impl Into<Value>, method: Method, params: impl Serialize) -> Vec<u8> {
    let params = serde_json::to_value(params).expect("parameters serialize");
    wire::request_line(id, method.as_str(), params)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    /// A subscribed session over one end of a socket pair; the other end
    /// plays the instance.
    fn subscribed() -> (Session, UnixStream) {
        let (ours, theirs) = UnixStream::pair().unwrap();
        let lines = SocketLines {
            reader: LineReader::new(ours.try_clone().unwrap(), MAX_LINE),
            line_timeout: Duration::from_secs(5),
            socket: ours.try_clone().unwrap(),
        };
        let s = Session {
            lines: Box::new(lines),
            writer: Box::new(ours),
            next_id: 1,
            timeout: Duration::from_secs(5),
            hello: Hello::default(),
        };
        (s, theirs)
    }

    #[test]
    fn events_wait_in_a_channel_bounded_as_the_hub_bounds_a_subscriber() {
        let (s, mut instance) = subscribed();
        let (events, _writer) = s.into_events();
        assert_eq!(events.capacity(), Some(SUBSCRIBER_BACKLOG));
        instance
            .write_all(b"{\"jsonrpc\":\"2.0\",\"method\":\"event\",\"params\":{\"seq\":1}}\n")
            .unwrap();
        let ev = events.recv_timeout(Duration::from_secs(10)).unwrap();
        assert_eq!(ev["params"]["seq"], 1);
    }

    #[test]
    fn a_line_longer_than_the_hub_writes_ends_the_events() {
        let (s, mut instance) = subscribed();
        let (events, _writer) = s.into_events();
        let writer = std::thread::spawn(move || {
            let long = vec![b' '; SUBSCRIBER_LINE + 1];
            let _ = instance.write_all(&long);
            instance
        });
        assert!(events.recv_timeout(Duration::from_secs(30)).is_err());
        drop(events);
        drop(writer.join().unwrap());
    }

    #[test]
    fn dropping_the_events_hangs_the_connection_up() {
        let (s, mut instance) = subscribed();
        let (events, writer) = s.into_events();
        drop(events);
        // The writer is still held, and yet the instance reads the end.
        instance
            .set_read_timeout(Some(Duration::from_secs(30)))
            .unwrap();
        let mut buf = [0u8; 16];
        assert_eq!(instance.read(&mut buf).unwrap(), 0);
        drop(writer);
    }
}
