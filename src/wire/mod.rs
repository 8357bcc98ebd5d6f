//! Framing on the socket: bounded, deadline-checked JSON-RPC 2.0 lines, the
//! classification of one incoming object with its id as spelled, answer
//! lines, and (in `zcoder`) the zcoder frame.

pub mod access;
pub mod answer;
pub mod body;
mod event;
pub mod event_text;
mod id;
mod names;
mod records;
pub mod request;
mod zcoder;

pub use body::Body;
pub use event::*;
pub use id::{Id, id_byte, valid_text_id};
pub use names::{
    ApprovalKind, Approve, ClaimStatus, Decision, EventKind, Handling, Mode, Outcome, Said, State,
    Stream, TaskMode,
};
pub use records::{
    CODEX_HOST, HandlerExit, Manifest, ReplyRecord, Sender, Summary, Task, uid_list,
};
pub use zcoder::{
    FrameError, ZCODER_MAGIC, ZcoderAck, ZcoderHead, parse_flat, read_zcoder_frame, zcoder_frame,
    zcoder_length,
};

use serde_json::{Map, Value, json};
use std::io::{self, Read};
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

// A subscription's bounds, which both ends keep: the hub (`events`) and a
// client's reader of one (`client::Session::subscribe`).
/// Lines a subscriber may have waiting before it is dropped.
pub const SUBSCRIBER_BACKLOG: usize = 4096;

/// The longest line the hub writes to a subscriber. An event carries at
/// most what one request line brought (a message's body as its sender
/// spelt it, an approval's question), and a request line holds at most
/// `BATON_MAX_BYTES`, whose ceiling is six times the body limit's (16 MiB)
/// and 64 KiB (`config::MAX_BYTES_CEILING`); 64 KiB more hold what the
/// instance adds (numbering, the sender as it knows it, the notification
/// around the event). Clients read a subscription's lines up to this.
pub const SUBSCRIBER_LINE: usize = crate::base::config::MAX_BYTES_CEILING as usize + 64 * 1024;

/// The protocol version: `initialize`'s and a manifest's `protocol`.
pub const PROTOCOL: u64 = 1;
pub const PARSE_ERROR: i64 = -32700;
pub const INVALID_REQUEST: i64 = -32600;
pub const METHOD_NOT_FOUND: i64 = -32601;
pub const INVALID_PARAMS: i64 = -32602;
pub const INTERNAL_ERROR: i64 = -32603;
pub const CONNECTION_ERROR: i64 = -32000;
/// Refused for the connection cap, or a subscribe for the subscriber cap.
pub const TOO_MANY_CONNECTIONS: i64 = -32001;
pub const NOT_INITIALIZED: i64 = -32010;
pub const UNSUPPORTED_PROTOCOL: i64 = -32011;
/// The access table shuts this method to this caller (`access`).
pub const NOT_PERMITTED: i64 = -32012;

/// Why no line could be read.
#[derive(Debug)]
pub enum ReadError {
    /// The peer closed the connection between lines.
    Eof,
    /// The peer closed the connection in the middle of a line.
    Truncated,
    /// A line grew past the byte limit before its `\n`.
    TooLarge,
    /// No line started within the idle timeout.
    Idle,
    /// A line started but did not complete within the I/O timeout.
    LineTimeout,
    Io(io::Error),
}

/// What a `LineReader` reads: a byte stream whose reads can be bounded in
/// time (a timed-out read fails as `timed_out` says).
pub trait Source: Read {
    /// Bounds each read from now on; `None`: no bound.
    fn set_timeout(&mut self, timeout: Option<Duration>) -> io::Result<()>;
}

impl Source for UnixStream {
    fn set_timeout(&mut self, timeout: Option<Duration>) -> io::Result<()> {
        self.set_read_timeout(timeout)
    }
}

/// A pipe (or any descriptor) read as a `Source`, each read waiting for
/// its bytes with `poll`: the standard input of `baton bridge --offline`.
pub struct Pipe {
    file: std::fs::File,
    timeout: Option<Duration>,
}

impl Pipe {
    /// Reads a descriptor of its own onto what `fd` reads (stdin's, say,
    /// without the standard library's buffer in between).
    pub fn new(fd: std::os::fd::BorrowedFd<'_>) -> io::Result<Pipe> {
        let file = std::fs::File::from(fd.try_clone_to_owned()?);
        Ok(Pipe {
            file,
            timeout: None,
        })
    }
}

impl Read for Pipe {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        use std::os::fd::AsFd;
        if !crate::sys::poll_ready(&[(self.file.as_fd(), false)], self.timeout)?[0] {
            return Err(io::ErrorKind::TimedOut.into());
        }
        self.file.read(buf)
    }
}

impl Source for Pipe {
    fn set_timeout(&mut self, timeout: Option<Duration>) -> io::Result<()> {
        self.timeout = timeout;
        Ok(())
    }
}

/// Reads `\n`-terminated lines from a stream without ever holding more than
/// `max + 1` bytes, so an endless line costs a fixed amount of memory.
pub struct LineReader<S: Source = UnixStream> {
    stream: S,
    buf: Vec<u8>,
    start: usize,
    end: usize,
    max: usize,
    line_started: Option<Instant>,
    /// The read timeout last set on the socket, so that a steady idle
    /// limit costs one `setsockopt` per connection, not one per line.
    timeout_set: Option<Option<Duration>>,
}

impl<S: Source> LineReader<S> {
    pub fn new(stream: S, max: usize) -> LineReader<S> {
        LineReader {
            stream,
            buf: Vec::new(),
            start: 0,
            end: 0,
            max,
            line_started: None,
            timeout_set: None,
        }
    }

    fn set_timeout(&mut self, timeout: Option<Duration>) -> Result<(), ReadError> {
        if self.timeout_set != Some(timeout) {
            self.stream.set_timeout(timeout).map_err(ReadError::Io)?;
            self.timeout_set = Some(timeout);
        }
        Ok(())
    }

    /// Lowers (or raises) the longest line read from now on; what is
    /// already buffered stays.
    pub fn set_max(&mut self, max: usize) {
        self.max = max;
    }

    /// Bytes already read but not yet returned as part of a line.
    pub fn buffered(&self) -> &[u8] {
        &self.buf[self.start..self.end]
    }

    /// The bytes allocated for the buffer: never more than `max + 1`.
    pub fn capacity(&self) -> usize {
        self.buf.capacity()
    }

    /// The stream and the bytes read past the last line returned.
    pub fn into_parts(self) -> (S, Vec<u8>) {
        let rest = self.buf[self.start..self.end].to_vec();
        (self.stream, rest)
    }

    /// Returns the next line without its `\n`. `idle` bounds the wait for
    /// the first byte (`None`: wait forever); `line_timeout` bounds the
    /// whole line from its first byte.
    pub fn read_line(
        &mut self,
        idle: Option<Duration>,
        line_timeout: Duration,
    ) -> Result<&[u8], ReadError> {
        let mut scanned = 0;
        loop {
            let pending = &self.buf[self.start + scanned..self.end];
            if let Some(i) = find_newline(pending) {
                let line_end = self.start + scanned + i;
                if line_end - self.start > self.max {
                    return Err(ReadError::TooLarge);
                }
                let start = self.start;
                self.start = line_end + 1;
                self.line_started = (self.start < self.end).then(Instant::now);
                return Ok(&self.buf[start..line_end]);
            }
            scanned = self.end - self.start;
            if scanned > self.max {
                return Err(ReadError::TooLarge);
            }
            let timeout = match self.line_started {
                Some(t) => match line_timeout.checked_sub(t.elapsed()) {
                    Some(left) if !left.is_zero() => Some(left),
                    _ => return Err(ReadError::LineTimeout),
                },
                None => idle,
            };
            self.set_timeout(timeout)?;
            self.make_room();
            match self.stream.read(&mut self.buf[self.end..]) {
                Ok(0) if self.start == self.end => return Err(ReadError::Eof),
                Ok(0) => return Err(ReadError::Truncated),
                Ok(n) => {
                    if self.line_started.is_none() {
                        self.line_started = Some(Instant::now());
                    }
                    self.end += n;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if timed_out(&e) => {
                    return Err(if self.line_started.is_some() {
                        ReadError::LineTimeout
                    } else {
                        ReadError::Idle
                    });
                }
                Err(e) => return Err(ReadError::Io(e)),
            }
        }
    }

    /// Compacts the buffer and grows it, never past `max + 1` bytes in all.
    fn make_room(&mut self) {
        if self.start > 0 {
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        let limit = self.max + 1;
        if self.end == self.buf.len() && self.buf.len() < limit {
            let want = (self.buf.len() * 2).max(4096).min(limit);
            // `resize` alone may double the allocation past the limit.
            self.buf.reserve_exact(want - self.buf.len());
            self.buf.resize(want, 0);
        }
    }
}

impl LineReader<UnixStream> {
    /// Takes exactly `n` more bytes (buffered ones first) within
    /// `timeout`; the caller bounds `n`.
    pub fn read_exact_within(&mut self, n: usize, timeout: Duration) -> Result<Vec<u8>, ReadError> {
        let deadline = Instant::now() + timeout;
        let take = n.min(self.end - self.start);
        // Grown as the bytes come: a header's length costs nothing yet.
        let mut out = Vec::with_capacity(n.min(64 * 1024));
        out.extend_from_slice(&self.buf[self.start..self.start + take]);
        self.start += take;
        let mut chunk = [0u8; 8192];
        // `read_some` sets the socket's timeout as it goes.
        self.timeout_set = None;
        while out.len() < n {
            let want = (n - out.len()).min(chunk.len());
            match zcoder::read_some(&mut self.stream, &mut chunk[..want], deadline) {
                Ok(0) => return Err(ReadError::Truncated),
                Ok(k) => out.extend_from_slice(&chunk[..k]),
                Err(FrameError::Timeout) => return Err(ReadError::LineTimeout),
                Err(e) => return Err(ReadError::Io(io::Error::other(e.to_string()))),
            }
        }
        Ok(out)
    }
}

/// Whether a socket operation failed for its timeout, which the kernel
/// reports as either kind.
pub(crate) fn timed_out(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
    )
}

/// A method an instance answers (docs/protocol.md §3), parsed once from
/// the request line. The methods that need the agent's state are a `Call`
/// of their own, which only the foreground answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Method {
    Initialize,
    Ping,
    AgentInfo,
    MessageSend,
    EventsSubscribe,
    Foreground(Call),
}

spelled! {
    /// The methods the foreground answers: it alone holds the agent's state.
    pub enum Call ("method") {
        ControlPause = "control/pause",
        ControlResume = "control/resume",
        ControlStatus = "control/status",
        InboxList = "inbox/list",
        InboxClaim = "inbox/claim",
        InboxComplete = "inbox/complete",
        InboxRequeue = "inbox/requeue",
        InboxDiscard = "inbox/discard",
        InboxReceived = "inbox/received",
        RelaySend = "relay/send",
        ApprovalRespond = "approval/respond",
        ApprovalList = "approval/list",
        TurnCancel = "turn/cancel",
        TurnLocal = "turn/local",
        TaskStatus = "task/status",
        TaskCancel = "task/cancel",
        PermissionAsk = "permission/ask",
    }
}

impl Method {
    /// Every method, in the order `initialize` lists them as capabilities.
    pub const ALL: [Method; 22] = [
        Method::Initialize,
        Method::Ping,
        Method::AgentInfo,
        Method::MessageSend,
        Method::Foreground(Call::ControlPause),
        Method::Foreground(Call::ControlResume),
        Method::Foreground(Call::ControlStatus),
        Method::Foreground(Call::InboxList),
        Method::Foreground(Call::InboxClaim),
        Method::Foreground(Call::InboxComplete),
        Method::Foreground(Call::InboxRequeue),
        Method::Foreground(Call::InboxDiscard),
        Method::Foreground(Call::InboxReceived),
        Method::Foreground(Call::RelaySend),
        Method::EventsSubscribe,
        Method::Foreground(Call::ApprovalRespond),
        Method::Foreground(Call::ApprovalList),
        Method::Foreground(Call::TurnCancel),
        Method::Foreground(Call::TurnLocal),
        Method::Foreground(Call::TaskStatus),
        Method::Foreground(Call::TaskCancel),
        Method::Foreground(Call::PermissionAsk),
    ];

    /// The method a request names; `None` for one this version lacks.
    pub fn parse(name: &str) -> Option<Method> {
        Method::ALL.into_iter().find(|m| m.as_str() == name)
    }

    /// Its name on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            Method::Initialize => "initialize",
            Method::Ping => "ping",
            Method::AgentInfo => "agent/info",
            Method::MessageSend => "message/send",
            Method::EventsSubscribe => "events/subscribe",
            Method::Foreground(c) => c.as_str(),
        }
    }
}

impl From<Call> for Method {
    fn from(c: Call) -> Method {
        Method::Foreground(c)
    }
}

/// A line a server writes to a client, as the client reads it: an
/// answer (its `id`), a notification (`method`, `params`: an `event`),
/// or a request of the instance's own (`approval/request`, with `id`).
/// A member that is not there, or not of its type, is `None`/null.
#[derive(Clone, Debug, Default)]
pub struct Message {
    pub id: Option<Value>,
    pub method: Option<String>,
    pub params: Value,
}

impl Message {
    /// The members of `v`, if it is an object.
    pub fn of(v: &Value) -> Message {
        Message {
            id: v.get("id").cloned(),
            method: v.get("method").and_then(Value::as_str).map(String::from),
            params: v.get("params").cloned().unwrap_or(Value::Null),
        }
    }

    /// Whether it is the notification of an event.
    pub fn is_event(&self) -> bool {
        self.method.as_deref() == Some("event")
    }
}

/// One object read from a native connection, classified as docs/protocol.md §1 says.
#[derive(Debug)]
pub enum Incoming {
    Request {
        id: Id,
        method: String,
        params: Value,
    },
    Notification {
        method: String,
    },
    /// A reply to a request the server sent: the whole object.
    Reply {
        reply: Map<String, Value>,
    },
    /// Not a valid request: answer with this error (`id` may be null).
    Invalid {
        id: Id,
        code: i64,
        message: String,
    },
}

/// The index of the first `\n` in `s`, looked for eight bytes at a time
/// (a byte loop costs more than the rest of reading a large line).
fn find_newline(s: &[u8]) -> Option<usize> {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    const NL: u64 = ONES * b'\n' as u64;
    let mut words = s.chunks_exact(8);
    let mut at = 0;
    for w in &mut words {
        // A zero byte of `x` is a newline of `w`; the expression is
        // nonzero exactly when `x` has a zero byte.
        let x = u64::from_le_bytes(w.try_into().expect("8 bytes")) ^ NL;
        if x.wrapping_sub(ONES) & !x & HIGH != 0 {
            break;
        }
        at += 8;
    }
    s[at..].iter().position(|&b| b == b'\n').map(|i| at + i)
}

pub(super) fn valid_id(id: &Value) -> bool {
    matches!(id, Value::String(_) | Value::Number(_) | Value::Null)
}

/// Classifies one line. The general parser decides what the line is; the
/// id is then taken as the line spelled it.
pub fn classify(line: &[u8]) -> Incoming {
    let refused = |id, code, message| Incoming::Invalid { id, code, message };
    let value: Value = match serde_json::from_slice(line) {
        Ok(v) => v,
        Err(e) => return refused(Id::null(), PARSE_ERROR, format!("parse error: {e}")),
    };
    let Value::Object(mut obj) = value else {
        let message = "invalid request: not a JSON object".into();
        return refused(Id::null(), INVALID_REQUEST, message);
    };
    let has_method = obj.contains_key("method");
    if !has_method && (obj.contains_key("result") || obj.contains_key("error")) {
        return Incoming::Reply { reply: obj };
    }
    let id = obj.get("id").cloned();
    let echo = id::echo_id(line, id.as_ref());
    let invalid = |message: &str| Incoming::Invalid {
        id: echo.clone(),
        code: INVALID_REQUEST,
        message: format!("invalid request: {message}"),
    };
    let method = match obj.remove("method") {
        Some(Value::String(m)) => m,
        Some(_) => return invalid("\"method\" is not a string"),
        None => return invalid("no \"method\""),
    };
    if obj.get("jsonrpc") != Some(&Value::String("2.0".into())) {
        return invalid("\"jsonrpc\" must be \"2.0\"");
    }
    match id {
        None => Incoming::Notification { method },
        Some(id) if !valid_id(&id) => invalid("\"id\" must be a string, a number or null"),
        Some(_) => Incoming::Request {
            id: echo,
            method,
            params: obj.remove("params").unwrap_or(Value::Object(Map::new())),
        },
    }
}

/// A result line, `\n` included. `id` is the request's `Id` (echoed as
/// spelled) or a `Value` (`Value::Null` when the id is unknown).
pub fn result_line<I, T>(id: &I, result: &T) -> Vec<u8>
where
    I: serde::Serialize + ?Sized,
    T: serde::Serialize + ?Sized,
{
    // The keys in the order a JSON map would give them, without building
    // one: this is every answer's line.
    #[derive(serde::Serialize)]
    struct Answer<'a, I: ?Sized, T: ?Sized> {
        id: &'a I,
        jsonrpc: &'static str,
        result: &'a T,
    }
    to_line(&Answer {
        id,
        jsonrpc: "2.0",
        result,
    })
}

/// An error line, `\n` included; `id` as for `result_line`.
pub fn error_line<I>(id: &I, code: i64, message: &str, data: Option<Value>) -> Vec<u8>
where
    I: serde::Serialize + ?Sized,
{
    // The keys in the order a JSON map would give them.
    #[derive(serde::Serialize)]
    struct Error<'a> {
        code: i64,
        #[serde(skip_serializing_if = "Option::is_none")]
        data: Option<Value>,
        message: &'a str,
    }
    #[derive(serde::Serialize)]
    struct Answer<'a, I: ?Sized> {
        error: Error<'a>,
        id: &'a I,
        jsonrpc: &'static str,
    }
    to_line(&Answer {
        error: Error {
            code,
            data,
            message,
        },
        id,
        jsonrpc: "2.0",
    })
}

fn to_line<T: serde::Serialize>(v: &T) -> Vec<u8> {
    let mut out = Vec::with_capacity(256);
    serde_json::to_writer(&mut out, v).expect("an answer always serializes");
    out.push(b'\n');
    out
}

/// A notification line from the server, `\n` included.
pub fn notification_line(method: &str, params: Value) -> Vec<u8> {
    to_line(&json!({"jsonrpc": "2.0", "method": method, "params": params}))
}

/// A notification line whose params are serialized already (an event as
/// the transcript holds it), `\n` included: `notification_line` with those
/// params, their keys in the order given.
pub fn notification_with_params(method: &str, params: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(params.len() + method.len() + 48);
    out.extend_from_slice(b"{\"jsonrpc\":\"2.0\",\"method\":");
    out.extend_from_slice(&serde_json::to_vec(method).expect("a string serializes"));
    out.extend_from_slice(b",\"params\":");
    out.extend_from_slice(params);
    out.extend_from_slice(b"}\n");
    out
}

/// A request line, `\n` included. The id is any JSON id: clients number
/// their requests, an instance names its approval requests.
pub fn request_line(id: impl Into<Value>, method: &str, params: Value) -> Vec<u8> {
    let id: Value = id.into();
    to_line(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn every_method_parses_from_its_own_name_only() {
        for m in Method::ALL {
            assert_eq!(Method::parse(m.as_str()), Some(m));
        }
        let names: std::collections::BTreeSet<&str> =
            Method::ALL.iter().map(|m| m.as_str()).collect();
        assert_eq!(names.len(), Method::ALL.len());
        for other in ["", "Ping", "control/", "inbox/wait", "ping "] {
            assert_eq!(Method::parse(other), None, "{other:?}");
        }
    }

    fn reader_with(data: &[u8], max: usize) -> LineReader {
        let (a, mut b) = UnixStream::pair().unwrap();
        b.write_all(data).unwrap();
        drop(b);
        LineReader::new(a, max)
    }

    #[test]
    fn newline_search_finds_the_first_at_every_offset() {
        for len in 0..40 {
            for nl in 0..len {
                let mut s = vec![b'x'; len];
                s[nl] = b'\n';
                // Bytes that differ from a newline in one bit, and a
                // second newline after the first.
                if nl + 1 < len {
                    s[nl + 1] = b'\n';
                }
                if nl > 0 {
                    s[nl - 1] = b'\n' ^ 0x80;
                }
                assert_eq!(find_newline(&s), Some(nl), "len {len}, newline at {nl}");
            }
            let none: Vec<u8> = (0..len)
                .map(|i| if i % 2 == 0 { 0x8a } else { 0x0b })
                .collect();
            assert_eq!(find_newline(&none), None, "len {len}");
        }
    }

    #[test]
    fn an_answer_line_is_the_line_of_its_json_object() {
        let (id, result) = (json!("a"), json!({"status": "accepted", "n": [1, 2]}));
        let want = to_line(&json!({"jsonrpc": "2.0", "id": id, "result": result}));
        assert_eq!(result_line(&id, &result), want);
        for data in [None, Some(json!({"supported": [1]}))] {
            let mut error = json!({"code": -32011, "message": "m \"q\""});
            if let Some(d) = &data {
                error["data"] = d.clone();
            }
            for id in [json!(7), json!("s"), Value::Null] {
                let want = to_line(&json!({"jsonrpc": "2.0", "id": id, "error": error}));
                assert_eq!(error_line(&id, -32011, "m \"q\"", data.clone()), want);
                let raw = Id::from_value(&id);
                assert_eq!(error_line(&raw, -32011, "m \"q\"", data.clone()), want);
            }
        }
    }

    #[test]
    fn a_notification_around_serialized_params_is_the_same_notification() {
        let params = br#"{"seq":3,"time":1.5,"kind":"notice","text":"a \"b\""}"#;
        let line = notification_with_params("event", params);
        assert_eq!(line.last(), Some(&b'\n'));
        let parsed: Value = serde_json::from_slice(&line).unwrap();
        let p: Value = serde_json::from_slice(params).unwrap();
        let want: Value = serde_json::from_slice(&notification_line("event", p)).unwrap();
        assert_eq!(parsed, want);
    }

    #[test]
    fn pipelined_lines_come_back_in_order() {
        let mut r = reader_with(b"one\ntwo\nthree\n", 100);
        let t = Duration::from_secs(1);
        assert_eq!(r.read_line(Some(t), t).unwrap(), b"one");
        assert_eq!(r.read_line(Some(t), t).unwrap(), b"two");
        assert_eq!(r.read_line(Some(t), t).unwrap(), b"three");
        assert!(matches!(r.read_line(Some(t), t), Err(ReadError::Eof)));
    }

    #[test]
    fn limit_is_exact_and_buffer_is_bounded() {
        let t = Duration::from_secs(1);
        let mut at = vec![b'x'; 1024];
        at.push(b'\n');
        let mut r = reader_with(&at, 1024);
        assert_eq!(r.read_line(Some(t), t).unwrap().len(), 1024);
        let mut over = vec![b'x'; 1025];
        over.push(b'\n');
        let mut r = reader_with(&over, 1024);
        assert!(matches!(r.read_line(Some(t), t), Err(ReadError::TooLarge)));
        assert!(r.buf.len() <= 1025);
        let mut r = reader_with(&vec![b'x'; 100_000], 1024);
        assert!(matches!(r.read_line(Some(t), t), Err(ReadError::TooLarge)));
        assert!(r.buf.len() <= 1025);
    }

    /// A high bound (the default line bound, for a 1 MiB body) costs a
    /// connection nothing up front: the buffer grows with the line.
    #[test]
    fn a_high_bound_is_not_allocated_up_front() {
        let t = Duration::from_secs(1);
        let max = crate::base::config::Config::default().max_bytes;
        assert!(max > 6 * 1024 * 1024);
        let mut r = reader_with(b"{\"jsonrpc\":\"2.0\"}\n", max);
        assert_eq!(r.capacity(), 0);
        r.read_line(Some(t), t).unwrap();
        assert_eq!(r.capacity(), 4096);
        let mut long = vec![b'x'; 100_000];
        long.push(b'\n');
        let mut r = reader_with(&long, max);
        assert_eq!(r.read_line(Some(t), t).unwrap().len(), 100_000);
        assert!(r.capacity() < 256 * 1024, "{}", r.capacity());
    }

    #[test]
    fn truncated_line_is_not_eof() {
        let t = Duration::from_secs(1);
        let mut r = reader_with(b"partial", 100);
        assert!(matches!(r.read_line(Some(t), t), Err(ReadError::Truncated)));
    }

    #[test]
    fn stalled_line_times_out() {
        let (a, mut b) = UnixStream::pair().unwrap();
        b.write_all(b"{\"x\"").unwrap();
        let mut r = LineReader::new(a, 100);
        let t = Duration::from_millis(100);
        assert!(matches!(
            r.read_line(Some(Duration::from_secs(5)), t),
            Err(ReadError::LineTimeout)
        ));
        let (a, _b) = UnixStream::pair().unwrap();
        let mut r = LineReader::new(a, 100);
        assert!(matches!(r.read_line(Some(t), t), Err(ReadError::Idle)));
    }

    #[test]
    fn classification() {
        assert!(matches!(
            classify(b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}"),
            Incoming::Request { .. }
        ));
        assert!(matches!(
            classify(b"{\"jsonrpc\":\"2.0\",\"method\":\"ping\"}"),
            Incoming::Notification { .. }
        ));
        assert!(matches!(
            classify(b"{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}"),
            Incoming::Reply { .. }
        ));
        match classify(b"{\"id\":7,\"params\":{}}") {
            Incoming::Invalid { id, code, .. } => {
                assert_eq!(id, json!(7));
                assert_eq!(code, INVALID_REQUEST);
            }
            other => panic!("{other:?}"),
        }
        match classify(b"{\"jsonrpc\":\"2.0\",\"id\":[1],\"method\":\"ping\"}") {
            Incoming::Invalid { id, code, .. } => {
                assert_eq!(id, Value::Null);
                assert_eq!(code, INVALID_REQUEST);
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            classify(b"{not json"),
            Incoming::Invalid {
                code: PARSE_ERROR,
                ..
            }
        ));
        assert!(matches!(
            classify(b"[1,2]"),
            Incoming::Invalid {
                code: INVALID_REQUEST,
                ..
            }
        ));
    }
}
