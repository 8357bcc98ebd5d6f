//! Framing on the socket: bounded, deadline-checked JSON-RPC 2.0 lines, the
//! classification of one incoming object, and the zcoder frame
//! (`ZCODER-AGENT/1 <n>\n` plus n bytes of flat JSON).

use serde_json::{Map, Value, json};
use std::io::{self, Read, Write};
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

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

/// Reads `\n`-terminated lines from a stream without ever holding more than
/// `max + 1` bytes, so an endless line costs a fixed amount of memory.
pub struct LineReader {
    stream: UnixStream,
    buf: Vec<u8>,
    start: usize,
    end: usize,
    max: usize,
    line_started: Option<Instant>,
    /// The read timeout last set on the socket, so that a steady idle
    /// limit costs one `setsockopt` per connection, not one per line.
    timeout_set: Option<Option<Duration>>,
}

impl LineReader {
    pub fn new(stream: UnixStream, max: usize) -> LineReader {
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
            self.stream
                .set_read_timeout(timeout)
                .map_err(ReadError::Io)?;
            self.timeout_set = Some(timeout);
        }
        Ok(())
    }

    /// Bytes already read but not yet returned as part of a line.
    pub fn buffered(&self) -> &[u8] {
        &self.buf[self.start..self.end]
    }

    /// The bytes allocated for the buffer: never more than `max + 1`.
    pub fn capacity(&self) -> usize {
        self.buf.capacity()
    }

    /// Takes exactly `n` more bytes (buffered ones first) within
    /// `timeout`; the caller bounds `n`.
    pub fn read_exact_within(&mut self, n: usize, timeout: Duration) -> Result<Vec<u8>, ReadError> {
        let deadline = Instant::now() + timeout;
        let take = n.min(self.end - self.start);
        let mut out = Vec::with_capacity(n);
        out.extend_from_slice(&self.buf[self.start..self.start + take]);
        self.start += take;
        let mut chunk = [0u8; 8192];
        while out.len() < n {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(ReadError::LineTimeout);
            }
            self.set_timeout(Some(left))?;
            let want = (n - out.len()).min(chunk.len());
            match self.stream.read(&mut chunk[..want]) {
                Ok(0) => return Err(ReadError::Truncated),
                Ok(k) => out.extend_from_slice(&chunk[..k]),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                    ) =>
                {
                    return Err(ReadError::LineTimeout);
                }
                Err(e) => return Err(ReadError::Io(e)),
            }
        }
        Ok(out)
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
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                    ) =>
                {
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

/// The methods the foreground answers: it alone holds the agent's state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Call {
    ControlPause,
    ControlResume,
    ControlStatus,
    InboxList,
    InboxClaim,
    InboxComplete,
    InboxRequeue,
    InboxDiscard,
    RelaySend,
    ApprovalRespond,
    TurnCancel,
    TurnLocal,
}

impl Method {
    /// Every method, in the order `initialize` lists them as capabilities.
    pub const ALL: [Method; 17] = [
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
        Method::Foreground(Call::RelaySend),
        Method::EventsSubscribe,
        Method::Foreground(Call::ApprovalRespond),
        Method::Foreground(Call::TurnCancel),
        Method::Foreground(Call::TurnLocal),
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

impl Call {
    pub fn as_str(self) -> &'static str {
        match self {
            Call::ControlPause => "control/pause",
            Call::ControlResume => "control/resume",
            Call::ControlStatus => "control/status",
            Call::InboxList => "inbox/list",
            Call::InboxClaim => "inbox/claim",
            Call::InboxComplete => "inbox/complete",
            Call::InboxRequeue => "inbox/requeue",
            Call::InboxDiscard => "inbox/discard",
            Call::RelaySend => "relay/send",
            Call::ApprovalRespond => "approval/respond",
            Call::TurnCancel => "turn/cancel",
            Call::TurnLocal => "turn/local",
        }
    }
}

/// One object read from a native connection, classified as DESIGN §4 says.
#[derive(Debug)]
pub enum Incoming {
    Request {
        id: Value,
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
        id: Value,
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

fn valid_id(id: &Value) -> bool {
    matches!(id, Value::String(_) | Value::Number(_) | Value::Null)
}

/// Classifies one line.
pub fn classify(line: &[u8]) -> Incoming {
    let value: Value = match serde_json::from_slice(line) {
        Ok(v) => v,
        Err(e) => {
            return Incoming::Invalid {
                id: Value::Null,
                code: PARSE_ERROR,
                message: format!("parse error: {e}"),
            };
        }
    };
    let Value::Object(mut obj) = value else {
        return Incoming::Invalid {
            id: Value::Null,
            code: INVALID_REQUEST,
            message: "invalid request: not a JSON object".into(),
        };
    };
    let id = obj.get("id").cloned();
    let echo = id.clone().filter(valid_id).unwrap_or(Value::Null);
    let invalid = |message: &str| Incoming::Invalid {
        id: echo.clone(),
        code: INVALID_REQUEST,
        message: format!("invalid request: {message}"),
    };
    let has_method = obj.contains_key("method");
    if !has_method && (obj.contains_key("result") || obj.contains_key("error")) {
        return Incoming::Reply { reply: obj };
    }
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
        Some(id) => Incoming::Request {
            id,
            method,
            params: obj.remove("params").unwrap_or(Value::Object(Map::new())),
        },
    }
}

/// A result line, `\n` included.
pub fn result_line<T: serde::Serialize>(id: &Value, result: &T) -> Vec<u8> {
    // The keys in the order a JSON map would give them, without building
    // one: this is every answer's line.
    #[derive(serde::Serialize)]
    struct Answer<'a, T> {
        id: &'a Value,
        jsonrpc: &'static str,
        result: &'a T,
    }
    let mut out = Vec::with_capacity(256);
    serde_json::to_writer(
        &mut out,
        &Answer {
            id,
            jsonrpc: "2.0",
            result,
        },
    )
    .expect("an answer always serializes");
    out.push(b'\n');
    out
}

/// An error line, `\n` included.
pub fn error_line(id: &Value, code: i64, message: &str, data: Option<Value>) -> Vec<u8> {
    let mut error = json!({"code": code, "message": message});
    if let Some(data) = data {
        error["data"] = data;
    }
    line(&json!({"jsonrpc": "2.0", "id": id, "error": error}))
}

/// A notification line from the server, `\n` included.
pub fn notification_line(method: &str, params: Value) -> Vec<u8> {
    line(&json!({"jsonrpc": "2.0", "method": method, "params": params}))
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
    line(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))
}

fn line(v: &Value) -> Vec<u8> {
    let mut out = serde_json::to_vec(v).expect("a Value always serializes");
    out.push(b'\n');
    out
}

/// The magic that starts a zcoder connection.
pub const ZCODER_MAGIC: &[u8] = b"ZCODER-AGENT/1 ";

/// Encodes one zcoder frame.
pub fn zcoder_frame(payload: &[u8]) -> Vec<u8> {
    let mut out = format!("ZCODER-AGENT/1 {}\n", payload.len()).into_bytes();
    out.extend_from_slice(payload);
    out
}

/// Why a zcoder frame could not be read.
#[derive(Debug, PartialEq, Eq)]
pub enum FrameError {
    BadHeader(String),
    TooLarge(usize),
    Short,
    Timeout,
    Io(String),
    NotFlat(String),
}

impl std::fmt::Display for FrameError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FrameError::BadHeader(m) => write!(f, "bad frame header: {m}"),
            FrameError::TooLarge(n) => write!(f, "frame of {n} bytes is over the limit"),
            FrameError::Short => f.write_str("frame payload ended early"),
            FrameError::Timeout => f.write_str("frame not completed within the I/O timeout"),
            FrameError::Io(m) => write!(f, "read failed: {m}"),
            FrameError::NotFlat(m) => write!(f, "payload is not one flat JSON object: {m}"),
        }
    }
}

/// Reads one zcoder frame (magic, decimal length, `\n`, payload) within a
/// deadline. `prefix` holds bytes already read from the stream.
pub fn read_zcoder_frame(
    stream: &mut UnixStream,
    prefix: &[u8],
    max: usize,
    timeout: Duration,
) -> Result<Map<String, Value>, FrameError> {
    let deadline = Instant::now() + timeout;
    let mut got = prefix.to_vec();
    // The header is the magic, at most 8 digits (max is 16 MiB) and `\n`.
    let header_max = ZCODER_MAGIC.len() + 9;
    let header_end = loop {
        if let Some(i) = got.iter().position(|&b| b == b'\n') {
            break i;
        }
        if got.len() >= header_max {
            return Err(FrameError::BadHeader("no newline after the length".into()));
        }
        let mut byte = [0u8; 64];
        let want = (header_max - got.len()).min(byte.len());
        let n = read_some(stream, &mut byte[..want], deadline)?;
        if n == 0 {
            return Err(FrameError::BadHeader(
                "connection closed in the header".into(),
            ));
        }
        got.extend_from_slice(&byte[..n]);
    };
    let n = zcoder_length(&got[..header_end], max)?;
    let mut payload = got[header_end + 1..].to_vec();
    if payload.len() > n {
        payload.truncate(n);
    }
    let already = payload.len();
    payload.resize(n, 0);
    let mut filled = already;
    while filled < n {
        let k = read_some(stream, &mut payload[filled..], deadline)?;
        if k == 0 {
            return Err(FrameError::Short);
        }
        filled += k;
    }
    parse_flat(&payload)
}

/// The payload length a zcoder header line (without its `\n`) declares:
/// decimal, 1 to `max`.
pub fn zcoder_length(header: &[u8], max: usize) -> Result<usize, FrameError> {
    if !header.starts_with(ZCODER_MAGIC) {
        return Err(FrameError::BadHeader("missing ZCODER-AGENT/1".into()));
    }
    let digits = &header[ZCODER_MAGIC.len()..];
    if digits.is_empty() || digits.len() > 8 || !digits.iter().all(u8::is_ascii_digit) {
        return Err(FrameError::BadHeader(
            "length is not a decimal number".into(),
        ));
    }
    let n: usize = std::str::from_utf8(digits)
        .expect("ascii digits")
        .parse()
        .expect("at most 8 digits");
    if n == 0 {
        return Err(FrameError::BadHeader("length is zero".into()));
    }
    if n > max {
        return Err(FrameError::TooLarge(n));
    }
    Ok(n)
}

fn read_some(
    stream: &mut UnixStream,
    buf: &mut [u8],
    deadline: Instant,
) -> Result<usize, FrameError> {
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(FrameError::Timeout);
        }
        stream
            .set_read_timeout(Some(left))
            .map_err(|e| FrameError::Io(e.to_string()))?;
        match stream.read(buf) {
            Ok(n) => return Ok(n),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                return Err(FrameError::Timeout);
            }
            Err(e) => return Err(FrameError::Io(e.to_string())),
        }
    }
}

/// Parses a payload that must be one JSON object whose values are all
/// scalars (zcoder's parser reads nothing else).
pub fn parse_flat(payload: &[u8]) -> Result<Map<String, Value>, FrameError> {
    let v: Value =
        serde_json::from_slice(payload).map_err(|e| FrameError::NotFlat(e.to_string()))?;
    let Value::Object(obj) = v else {
        return Err(FrameError::NotFlat("not an object".into()));
    };
    if let Some((k, _)) = obj
        .iter()
        .find(|(_, v)| matches!(v, Value::Object(_) | Value::Array(_)))
    {
        return Err(FrameError::NotFlat(format!("field {k:?} is nested")));
    }
    Ok(obj)
}

/// Writes all of `bytes`, bounded by the stream's write timeout.
pub fn write_all(stream: &mut UnixStream, bytes: &[u8]) -> io::Result<()> {
    stream.write_all(bytes)?;
    stream.flush()
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn a_result_line_is_the_line_of_its_json_object() {
        let (id, result) = (json!("a"), json!({"status": "accepted", "n": [1, 2]}));
        let want = line(&json!({"jsonrpc": "2.0", "id": id, "result": result}));
        assert_eq!(result_line(&id, &result), want);
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

    #[test]
    fn zcoder_frame_round_trip_and_refusals() {
        let t = Duration::from_secs(1);
        let frame = zcoder_frame(br#"{"type":"ping","protocol":1}"#);
        let (mut a, mut b) = UnixStream::pair().unwrap();
        b.write_all(&frame).unwrap();
        let obj = read_zcoder_frame(&mut a, b"", 65536, t).unwrap();
        assert_eq!(obj["type"], "ping");

        let cases: &[(&[u8], FrameError)] = &[
            (
                b"ZCODER-AGENT/1 0\n",
                FrameError::BadHeader("length is zero".into()),
            ),
            (
                b"ZCODER-AGENT/1 1x\n",
                FrameError::BadHeader("length is not a decimal number".into()),
            ),
            (b"ZCODER-AGENT/1 70000\n", FrameError::TooLarge(70000)),
            (b"ZCODER-AGENT/1 10\n{}", FrameError::Short),
            (
                b"ZCODER-AGENT/1 8\n{\"a\":[]}",
                FrameError::NotFlat("field \"a\" is nested".into()),
            ),
        ];
        for (input, want) in cases {
            let (mut a, mut b) = UnixStream::pair().unwrap();
            b.write_all(input).unwrap();
            drop(b);
            assert_eq!(
                &read_zcoder_frame(&mut a, b"", 65536, t).unwrap_err(),
                want,
                "{}",
                String::from_utf8_lossy(input)
            );
        }
    }
}
