//! Connecting to instances: a native JSON-RPC connection with deadlines,
//! pings on both wires.

mod connect;
mod listing;
mod session;

pub use connect::{connect, is_abstract};
pub use listing::{ListError, PLACES, list_all};
pub use session::{Events, Lines, PipeLines, Session, request};

use crate::wire::answer::{ErrorObject, Load, Pong};
use crate::wire::{self, Method, State};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::fmt;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

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
        use crate::sys::{ECONNREFUSED, ENOENT};
        let absent = |e: &io::Error| matches!(e.raw_os_error(), Some(ECONNREFUSED | ENOENT));
        matches!(self, ClientError::Connect(e) if absent(e))
    }

    /// What ran short in this process when the connection could not be
    /// made (descriptors, memory): no word on the instance.
    pub fn shortage(&self) -> Option<&'static str> {
        match self {
            ClientError::Connect(e) => crate::sys::shortage(e),
            _ => None,
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

/// The error of an error answer.
pub(crate) fn rpc_error(err: ErrorObject) -> ClientError {
    if err.code == wire::TOO_MANY_CONNECTIONS {
        let data = err.data.unwrap_or_default();
        return ClientError::TooManyConnections {
            instance_id: data.instance_id,
            state: data.state,
        };
    }
    ClientError::Rpc {
        code: err.code,
        message: err.message,
    }
}

/// A connection to one instance for a front end that makes calls now and
/// then: opened when first needed, and reopened once per call when the
/// instance had closed it (its idle timeout).
pub struct Reconnecting {
    socket: PathBuf,
    timeout: Duration,
    conn: Option<Session>,
}

/// Why a call through `Reconnecting` failed.
#[derive(Debug)]
pub enum CallError {
    /// No connection could be opened (or initialized).
    Open(ClientError),
    /// The instance answered with a JSON-RPC error.
    Rpc { code: i64, message: String },
    /// The call failed on its way (it may have been made).
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

    /// One call. A kept connection that the instance had closed (its idle
    /// timeout) is replaced and the call made on a new one; any other
    /// failure is the call's, since the request may have been taken (a
    /// send made twice would be two tasks).
    pub fn call<R: DeserializeOwned>(
        &mut self,
        method: impl Into<Method>,
        params: impl Serialize,
    ) -> Result<R, CallError> {
        let method = method.into();
        let params = serde_json::to_value(params).expect("parameters serialize");
        let kept = self.conn.is_some();
        if self.conn.is_none() {
            self.conn = Some(Session::open(&self.socket, self.timeout).map_err(CallError::Open)?);
        }
        let conn = self.conn.as_mut().expect("just opened");
        let e = match conn.call(method, &params) {
            Ok(r) => return Ok(r),
            Err(ClientError::Rpc { code, message }) => {
                return Err(CallError::Rpc { code, message });
            }
            Err(e) => e,
        };
        self.conn = None;
        if !(kept && matches!(e, ClientError::Closed)) {
            return Err(CallError::Transport(e));
        }
        let mut conn = Session::open(&self.socket, self.timeout).map_err(CallError::Open)?;
        let r = conn.call(method, &params).map_err(|e| match e {
            ClientError::Rpc { code, message } => CallError::Rpc { code, message },
            e => CallError::Transport(e),
        })?;
        self.conn = Some(conn);
        Ok(r)
    }

    /// Subscribes to events on a connection of its own, read by a thread
    /// into the returned channel while it is wanted (`Session::into_events`:
    /// bounded as the hub bounds a subscriber; dropping it hangs up).
    pub fn subscribe(&self, params: impl Serialize) -> Result<Events, ClientError> {
        let mut s = Session::open(&self.socket, self.timeout)?;
        s.subscribe(params)?;
        Ok(s.into_events().0)
    }
}

/// Pings a native instance and checks that it is `expected_id`; returns
/// its state, and what waits there where it said.
///
/// An instance that refuses the connection for its cap is alive: it says
/// which instance it is and its state, and that is the answer.
pub fn ping(
    socket: &Path,
    expected_id: &str,
    timeout: Duration,
) -> Result<(State, Option<Load>), ClientError> {
    let mut c = match Session::open(socket, timeout) {
        Ok(c) => c,
        Err(ClientError::TooManyConnections {
            instance_id: Some(id),
            state: Some(state),
        }) if id == expected_id => {
            let state = state.parse();
            let state =
                state.map_err(|_| ClientError::Protocol("ping answer has no valid state".into()));
            return state.map(|s| (s, None));
        }
        Err(e) => return Err(e),
    };
    let r: Pong = c.call(Method::Ping, crate::wire::request::NoParams {})?;
    if r.instance_id != expected_id {
        return Err(ClientError::Protocol(format!(
            "answered as instance {:?}, not {expected_id:?}",
            r.instance_id
        )));
    }
    Ok((r.state, r.load()))
}

/// A zcoder request frame, `ping` or `enqueue` (an enqueue's body and
/// sender), its members in the order zcoder's own sender writes them.
#[derive(Clone, Debug, Default, Serialize)]
pub struct ZcoderRequest<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub body: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub created_at: Option<u64>,
    pub message_id: &'a str,
    pub protocol: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sender_instance_id: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sender_pid: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sender_project: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sender_workspace: Option<&'a str>,
    pub target_instance_id: &'a str,
    #[serde(rename = "type")]
    pub kind: &'static str,
}

/// A zcoder ack, as far as baton reads one: its status, and for an
/// enqueue the queue position and state it names.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default)]
pub struct ZcoderAck {
    pub status: Option<String>,
    pub queue_position: Option<usize>,
    pub state: Option<String>,
}

impl ZcoderAck {
    /// The state it names, if this version knows it.
    pub fn state(&self) -> Option<State> {
        self.state.as_deref().and_then(|s| s.parse().ok())
    }
}

/// Sends one zcoder frame and reads the whole answer frame.
pub fn zcoder_exchange(
    socket: &Path,
    payload: &ZcoderRequest,
    timeout: Duration,
) -> Result<ZcoderAck, ClientError> {
    let mut stream = connect(socket).map_err(ClientError::Connect)?;
    stream
        .set_write_timeout(Some(timeout))
        .map_err(ClientError::Connect)?;
    let bytes = serde_json::to_vec(payload).expect("serializes");
    (stream.write_all(&wire::zcoder_frame(&bytes))).map_err(|_| ClientError::Closed)?;
    let ack = wire::read_zcoder_frame(&mut stream, b"", 65536, timeout).map_err(|e| match e {
        wire::FrameError::Timeout => ClientError::Timeout,
        wire::FrameError::Short => ClientError::Closed,
        other => ClientError::Protocol(other.to_string()),
    })?;
    serde_json::from_value(Value::Object(ack))
        .map_err(|e| ClientError::Protocol(format!("ack: {e}")))
}

/// Pings a zcoder instance; zcoder answers `wrong_target` for another id,
/// so `pong` confirms the id.
pub fn zcoder_ping(
    socket: &Path,
    expected_id: &str,
    timeout: Duration,
) -> Result<State, ClientError> {
    let message_id = format!("ping-{}", std::process::id());
    let ping = ZcoderRequest {
        message_id: &message_id,
        protocol: 1,
        target_instance_id: expected_id,
        kind: "ping",
        ..ZcoderRequest::default()
    };
    let ack = zcoder_exchange(socket, &ping, timeout)?;
    match ack.status.as_deref() {
        Some("pong") => {}
        Some(other) => return Err(ClientError::Protocol(format!("ping answered {other}"))),
        None => return Err(ClientError::Protocol("ack has no status".into())),
    }
    // A zcoder that names no state it could be in is taken as ready.
    Ok(ack.state().unwrap_or(State::Ready))
}
