//! Connecting to instances: a native JSON-RPC connection with deadlines,
//! pings on both wires.

use crate::wire::{self, LineReader, ReadError};
use serde_json::{Value, json};
use std::fmt;
use std::io;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

#[derive(Debug)]
pub enum ClientError {
    /// `connect` failed.
    Connect(io::Error),
    /// No complete answer within the deadline.
    Timeout,
    /// The connection closed before the answer.
    Closed,
    /// The answer was not what the protocol says.
    Protocol(String),
    /// A JSON-RPC error from the instance.
    Rpc { code: i64, message: String },
    /// The instance refused the connection (or a subscription) for its
    /// connection cap. A refused connection is told which instance
    /// refused it, and in what state.
    TooManyConnections {
        instance_id: Option<String>,
        state: Option<String>,
    },
}

impl ClientError {
    /// True when the socket is missing or refuses connections: the
    /// listener is not there at all.
    pub fn is_unreachable(&self) -> bool {
        match self {
            ClientError::Connect(e) => matches!(
                e.raw_os_error(),
                Some(crate::sys::ECONNREFUSED) | Some(crate::sys::ENOENT)
            ),
            _ => false,
        }
    }

    /// True for failures where the request may or may not have arrived.
    pub fn is_transport(&self) -> bool {
        !matches!(self, ClientError::Rpc { .. })
    }
}

impl fmt::Display for ClientError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ClientError::Connect(e) => write!(f, "cannot connect: {e}"),
            ClientError::Timeout => f.write_str("no answer within the I/O timeout"),
            ClientError::Closed => f.write_str("connection closed before the answer"),
            ClientError::Protocol(m) => write!(f, "protocol error: {m}"),
            ClientError::Rpc { code, message } => write!(f, "error {code}: {message}"),
            ClientError::TooManyConnections { .. } => {
                f.write_str("refused the connection: too many connections")
            }
        }
    }
}

impl std::error::Error for ClientError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ClientError::Connect(e) => Some(e),
            _ => None,
        }
    }
}

/// A native connection that has sent `initialize`.
pub struct Connection {
    stream: UnixStream,
    reader: LineReader,
    next_id: u64,
    timeout: Duration,
    /// The `initialize` result.
    pub hello: Value,
}

/// The largest answer a client reads: answers are small, but `inbox/claim`
/// carries a body, so allow the biggest frame an instance may be set to.
const MAX_ANSWER: usize = 16 * 1024 * 1024 + 1024;

impl Connection {
    pub fn open(socket: &Path, timeout: Duration) -> Result<Connection, ClientError> {
        let stream = UnixStream::connect(socket).map_err(ClientError::Connect)?;
        stream
            .set_write_timeout(Some(timeout))
            .map_err(ClientError::Connect)?;
        let reader = LineReader::new(
            stream.try_clone().map_err(ClientError::Connect)?,
            MAX_ANSWER,
        );
        let mut c = Connection {
            stream,
            reader,
            next_id: 1,
            timeout,
            hello: Value::Null,
        };
        let id = c.next_id();
        let hello = wire::request_line(
            id,
            "initialize",
            json!({"protocol_version": 1, "client": {"name": "baton", "version": env!("CARGO_PKG_VERSION")}}),
        );
        match c.send_raw(&hello) {
            // A connection refused for the cap may be closed before the
            // request lands; the line saying so is still there to read.
            Ok(()) | Err(ClientError::Closed) => {}
            Err(e) => return Err(e),
        }
        c.hello = c.answer(id)?;
        Ok(c)
    }

    /// Sends one request and waits for its answer, skipping notifications.
    pub fn call(&mut self, method: &str, params: Value) -> Result<Value, ClientError> {
        let id = self.next_id;
        self.next_id += 1;
        let line = wire::request_line(id, method, params);
        self.send_raw(&line)?;
        self.answer(id)
    }

    /// Writes bytes as they are (a prepared request line).
    pub fn send_raw(&mut self, line: &[u8]) -> Result<(), ClientError> {
        wire::write_all(&mut self.stream, line).map_err(|e| {
            if matches!(
                e.kind(),
                io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
            ) {
                ClientError::Timeout
            } else {
                ClientError::Closed
            }
        })
    }

    pub fn next_id(&mut self) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        id
    }

    /// Reads until the answer with `id` arrives.
    pub fn answer(&mut self, id: u64) -> Result<Value, ClientError> {
        let deadline = Instant::now() + self.timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(ClientError::Timeout);
            }
            let line = self
                .reader
                .read_line(Some(left), left)
                .map_err(|e| match e {
                    ReadError::Idle | ReadError::LineTimeout => ClientError::Timeout,
                    ReadError::Eof | ReadError::Truncated | ReadError::Io(_) => ClientError::Closed,
                    ReadError::TooLarge => ClientError::Protocol("answer too large".into()),
                })?;
            let v: Value = serde_json::from_slice(line)
                .map_err(|e| ClientError::Protocol(format!("answer is not JSON: {e}")))?;
            if v.get("method").is_some() {
                continue;
            }
            if let Some(err) = v.get("error") {
                if v.get("id").and_then(Value::as_u64).is_some_and(|i| i != id) {
                    continue;
                }
                return Err(rpc_error(err));
            }
            if v.get("id").and_then(Value::as_u64) != Some(id) {
                continue;
            }
            return match v.get("result") {
                Some(r @ Value::Object(_)) => Ok(r.clone()),
                _ => Err(ClientError::Protocol("answer has no result object".into())),
            };
        }
    }
}

/// The error of an error answer.
fn rpc_error(err: &Value) -> ClientError {
    let code = err.get("code").and_then(Value::as_i64).unwrap_or(0);
    if code == wire::TOO_MANY_CONNECTIONS {
        let data = |k: &str| {
            err.get("data")
                .and_then(|d| d.get(k))
                .and_then(Value::as_str)
                .map(str::to_string)
        };
        return ClientError::TooManyConnections {
            instance_id: data("instance_id"),
            state: data("state"),
        };
    }
    ClientError::Rpc {
        code,
        message: err
            .get("message")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string(),
    }
}

impl Connection {
    /// Subscribes to events and hands the connection over: a thread reads
    /// every later line (event notifications, server requests) into the
    /// returned channel; the stream is kept for writing replies. The
    /// channel closes when the connection does.
    pub fn subscribe(
        mut self,
        params: Value,
    ) -> Result<(Value, crossbeam_channel::Receiver<Value>, UnixStream), ClientError> {
        let result = self.call("events/subscribe", params)?;
        let (tx, rx) = crossbeam_channel::unbounded();
        let mut reader = self.reader;
        std::thread::spawn(move || {
            while let Ok(line) = reader.read_line(None, Duration::from_secs(3600)) {
                let Ok(v) = serde_json::from_slice::<Value>(line) else {
                    continue;
                };
                if tx.send(v).is_err() {
                    break;
                }
            }
        });
        Ok((result, rx, self.stream))
    }
}

/// A connection to one instance for a front end that makes calls now and
/// then: opened when first needed, and reopened once per call when the
/// instance had closed it (its idle timeout).
pub struct Reconnecting {
    socket: PathBuf,
    timeout: Duration,
    conn: Option<Connection>,
}

/// Why a call through `Reconnecting` failed.
#[derive(Debug)]
pub enum CallError {
    /// No connection could be opened (or initialized).
    Open(ClientError),
    /// The instance answered with a JSON-RPC error.
    Rpc { code: i64, message: String },
    /// The reopened connection failed too.
    Transport(ClientError),
}

impl Reconnecting {
    pub fn new(socket: PathBuf, timeout: Duration) -> Reconnecting {
        Reconnecting {
            socket,
            timeout,
            conn: None,
        }
    }

    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// One call; a connection that broke is dropped and the call made
    /// once more on a new one.
    pub fn call(&mut self, method: &str, params: Value) -> Result<Value, CallError> {
        for attempt in 0..2 {
            if self.conn.is_none() {
                self.conn =
                    Some(Connection::open(&self.socket, self.timeout).map_err(CallError::Open)?);
            }
            let conn = self.conn.as_mut().expect("just opened");
            match conn.call(method, params.clone()) {
                Ok(r) => return Ok(r),
                Err(ClientError::Rpc { code, message }) => {
                    return Err(CallError::Rpc { code, message });
                }
                Err(e) if attempt == 1 => return Err(CallError::Transport(e)),
                Err(_) => self.conn = None,
            }
        }
        unreachable!("the loop returns")
    }

    /// Subscribes to events on a connection of its own. The subscription
    /// lives as long as its stream, so a thread keeps the stream until the
    /// connection ends or the receiver is gone (seen at the next line).
    pub fn subscribe(
        &self,
        params: Value,
    ) -> Result<crossbeam_channel::Receiver<Value>, ClientError> {
        let (_, events, stream) =
            Connection::open(&self.socket, self.timeout)?.subscribe(params)?;
        let (tx, rx) = crossbeam_channel::unbounded();
        std::thread::spawn(move || {
            let _stream = stream;
            for v in events {
                if tx.send(v).is_err() {
                    break;
                }
            }
        });
        Ok(rx)
    }
}

/// Pings a native instance and checks that it is `expected_id`; returns
/// its state.
///
/// An instance that refuses the connection for its cap is alive: it says
/// which instance it is and its state, and that is the answer.
pub fn ping(socket: &Path, expected_id: &str, timeout: Duration) -> Result<String, ClientError> {
    let mut c = match Connection::open(socket, timeout) {
        Ok(c) => c,
        Err(ClientError::TooManyConnections {
            instance_id: Some(id),
            state: Some(state),
        }) if id == expected_id => return state_of(&json!({"state": state})),
        Err(e) => return Err(e),
    };
    let r = c.call("ping", json!({}))?;
    let id = r.get("instance_id").and_then(Value::as_str).unwrap_or("");
    if id != expected_id {
        return Err(ClientError::Protocol(format!(
            "answered as instance {id:?}, not {expected_id:?}"
        )));
    }
    state_of(&r)
}

fn state_of(r: &Value) -> Result<String, ClientError> {
    match r.get("state").and_then(Value::as_str) {
        Some(s @ ("ready" | "busy" | "paused")) => Ok(s.to_string()),
        _ => Err(ClientError::Protocol(
            "ping answer has no valid state".into(),
        )),
    }
}

/// Sends one zcoder frame and reads the whole answer frame.
pub fn zcoder_exchange(
    socket: &Path,
    payload: &Value,
    timeout: Duration,
) -> Result<serde_json::Map<String, Value>, ClientError> {
    let mut stream = UnixStream::connect(socket).map_err(ClientError::Connect)?;
    stream
        .set_write_timeout(Some(timeout))
        .map_err(ClientError::Connect)?;
    let bytes = serde_json::to_vec(payload).expect("serializes");
    wire::write_all(&mut stream, &wire::zcoder_frame(&bytes)).map_err(|_| ClientError::Closed)?;
    wire::read_zcoder_frame(&mut stream, b"", 65536, timeout).map_err(|e| match e {
        wire::FrameError::Timeout => ClientError::Timeout,
        wire::FrameError::Short => ClientError::Closed,
        other => ClientError::Protocol(other.to_string()),
    })
}

/// Pings a zcoder instance; zcoder answers `wrong_target` for another id,
/// so `pong` confirms the id.
pub fn zcoder_ping(
    socket: &Path,
    expected_id: &str,
    timeout: Duration,
) -> Result<String, ClientError> {
    let ping = json!({
        "protocol": 1,
        "type": "ping",
        "message_id": format!("ping-{}", std::process::id()),
        "target_instance_id": expected_id,
    });
    let ack = zcoder_exchange(socket, &ping, timeout)?;
    match ack.get("status").and_then(Value::as_str) {
        Some("pong") => {}
        Some(other) => return Err(ClientError::Protocol(format!("ping answered {other}"))),
        None => return Err(ClientError::Protocol("ack has no status".into())),
    }
    match ack.get("state").and_then(Value::as_str) {
        Some(s @ ("ready" | "busy" | "paused")) => Ok(s.to_string()),
        _ => Ok("ready".to_string()),
    }
}
