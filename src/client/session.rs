//! One client session (docs/protocol.md §1-§2): `initialize`, typed calls
//! and a subscription, over a Unix socket or over the pipes of a `--via`
//! command (`baton bridge` on another host). Every front end reaches an
//! instance through it.

use super::{ClientError, rpc_error};
use crate::wire::answer::{Hello, HelloParams, Reply, Subscribed};
use crate::wire::{self, LineReader, Method, ReadError};
use crossbeam_channel::{self as chan, Receiver};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use std::io::{self, Write};
use std::path::Path;
use std::time::{Duration, Instant};

/// The longest line a client reads: an answer (`inbox/claim`'s) or an
/// event carries a body, escaped.
const MAX_LINE: usize = 128 * 1024 * 1024;

/// Where a session's lines come from.
pub trait Lines: Send {
    /// The next line, without its `\n`; `Timeout` once `until` passes.
    fn next_line(&mut self, until: Option<Instant>) -> Result<&[u8], ClientError>;
}

/// A socket's lines, bounded.
struct SocketLines {
    reader: LineReader,
    /// The most one line may take once it has begun.
    line_timeout: Duration,
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
    /// returned channel (closed when the connection is); the writer stays
    /// for answering the instance's requests.
    pub fn into_events(self) -> (Receiver<Value>, Box<dyn Write + Send>) {
        let (tx, rx) = chan::unbounded();
        let mut lines = self.lines;
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
        (rx, self.writer)
    }
}

/// A request line.
pub fn request(id: impl Into<Value>, method: Method, params: impl Serialize) -> Vec<u8> {
    let params = serde_json::to_value(params).expect("parameters serialize");
    wire::request_line(id, method.as_str(), params)
}
