//! A JSON-RPC-over-lines client that does no validation of its own, so
//! tests can send anything, including malformed input.
//!
//! Most methods panic on a failure, with what was read so far: a test that
//! expects an answer fails there. The `try_` methods report failures
//! instead, for tests that expect the server to go away mid-request (the
//! crash and fault tests) or to hang up mid-write.

use std::collections::VecDeque;
use std::io::{self, ErrorKind, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};

/// Read/write timeout on `RawClient` sockets unless told otherwise.
const CLIENT_TIMEOUT: Duration = Duration::from_secs(5);
/// The first id the `try_` calls number their requests from, far from the
/// small ids tests pick for `call`.
const FIRST_AUTO_ID: u64 = 1 << 32;

#[allow(dead_code)]
pub struct RawClient {
    stream: UnixStream,
    buf: Vec<u8>,
    /// Server-initiated messages (notifications and requests) that arrived
    /// while a call was waiting for its response; `read_json` returns them
    /// first so nothing is lost.
    backlog: VecDeque<Value>,
    /// The id of the next `try_` request.
    next_id: u64,
    timeout: Duration,
}

#[allow(dead_code)]
impl RawClient {
    /// Connects with the 5 s read and write timeout.
    pub fn connect(path: impl AsRef<Path>) -> io::Result<RawClient> {
        RawClient::connect_timeout(path, CLIENT_TIMEOUT)
    }

    /// Connects with `timeout` on every read and write.
    pub fn connect_timeout(path: impl AsRef<Path>, timeout: Duration) -> io::Result<RawClient> {
        let stream = UnixStream::connect(path)?;
        stream.set_read_timeout(Some(timeout))?;
        stream.set_write_timeout(Some(timeout))?;
        Ok(RawClient {
            stream,
            buf: Vec::new(),
            backlog: VecDeque::new(),
            next_id: FIRST_AUTO_ID,
            timeout,
        })
    }

    /// The underlying socket, for tests that need to shut down one half or
    /// change timeouts.
    pub fn stream(&self) -> &UnixStream {
        &self.stream
    }

    /// True while the instance has sent nothing unread and has not closed
    /// its end: asked without reading or waiting, so a test can tell what
    /// the instance has done by a given event.
    pub fn quiet(&self) -> bool {
        self.buf.is_empty() && self.backlog.is_empty() && self.ready(libc::POLLIN) == 0
    }

    /// True once the instance has closed its end, however much it sent
    /// before is still unread (nothing is read).
    pub fn hung_up(&self) -> bool {
        self.ready(0) & (libc::POLLRDHUP | libc::POLLHUP) != 0
    }

    /// What `poll` with no timeout says of the socket, asked for `events`
    /// and for the instance's closing of its end.
    fn ready(&self, events: libc::c_short) -> libc::c_short {
        use std::os::fd::AsRawFd;
        let mut fd = libc::pollfd {
            fd: self.stream.as_raw_fd(),
            events: events | libc::POLLRDHUP,
            revents: 0,
        };
        // SAFETY: one valid pollfd for a descriptor this client owns.
        let n = unsafe { libc::poll(&mut fd, 1, 0) };
        assert!(n >= 0, "poll: {}", io::Error::last_os_error());
        fd.revents
    }

    /// Sends `bytes` followed by `\n`. Panics on a write error.
    pub fn send_line(&mut self, bytes: &[u8]) {
        let mut line = Vec::with_capacity(bytes.len() + 1);
        line.extend_from_slice(bytes);
        line.push(b'\n');
        self.send_raw(&line);
    }

    /// Sends `bytes` exactly as given. Panics on a write error.
    pub fn send_raw(&mut self, bytes: &[u8]) {
        if let Err(e) = self.try_send_raw(bytes) {
            panic!("writing {} bytes to server: {e}", bytes.len());
        }
    }

    /// Sends `bytes` exactly as given, reporting failure instead of
    /// panicking, for tests that expect the server to hang up mid-write.
    pub fn try_send_raw(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.stream.write_all(bytes)?;
        self.stream.flush()
    }

    /// Reads the next line, without its `\n`. Returns `None` once the server
    /// has closed the connection (a final unterminated fragment is returned
    /// first). Panics if nothing arrives within the timeout.
    pub fn read_line(&mut self) -> Option<String> {
        match self.try_read_line() {
            Ok(line) => line,
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                panic!(
                    "no line from server within {:?}; buffered so far: {:?}",
                    self.timeout,
                    String::from_utf8_lossy(&self.buf)
                );
            }
            Err(e) => panic!("reading from server: {e}"),
        }
    }

    /// `read_line` that reports a timeout, a read error or a line that is
    /// not UTF-8 instead of panicking. A reset is a hang-up: `None`.
    pub fn try_read_line(&mut self) -> io::Result<Option<String>> {
        loop {
            if let Some(pos) = self.buf.iter().position(|&b| b == b'\n') {
                let mut line: Vec<u8> = self.buf.drain(..=pos).collect();
                line.pop();
                return utf8_line(line).map(Some);
            }
            let mut chunk = [0u8; 8192];
            match self.stream.read(&mut chunk) {
                Ok(0) => {
                    if self.buf.is_empty() {
                        return Ok(None);
                    }
                    return utf8_line(std::mem::take(&mut self.buf)).map(Some);
                }
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                // A server that closes with our data still unread makes the
                // kernel report a reset; for a test that is just a hang-up.
                Err(e) if e.kind() == ErrorKind::ConnectionReset => return Ok(None),
                Err(e) => return Err(e),
            }
        }
    }

    /// Reads the next message as JSON. Panics on EOF or invalid JSON.
    pub fn read_json(&mut self) -> Value {
        if let Some(msg) = self.backlog.pop_front() {
            return msg;
        }
        let Some(line) = self.read_line() else {
            panic!("server closed the connection while a message was expected");
        };
        serde_json::from_str(&line)
            .unwrap_or_else(|e| panic!("server sent invalid JSON ({e}): {line:?}"))
    }

    /// Sends a request and returns the whole response object. Messages the
    /// server initiates in the meantime are kept for `read_json`. Panics if
    /// the next response carries a different id, or on any failure.
    pub fn call(&mut self, id: u64, method: &str, params: Value) -> Value {
        let request = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        self.send_line(request.to_string().as_bytes());
        match self.response(id, method) {
            Ok(r) => r,
            Err(e) => panic!("{e}"),
        }
    }

    /// Reads up to the response to request `id`, keeping server-initiated
    /// messages for `read_json`.
    fn response(&mut self, id: u64, method: &str) -> io::Result<Value> {
        loop {
            let line = match self.try_read_line() {
                Ok(Some(line)) => line,
                Ok(None) => {
                    return Err(io::Error::new(
                        ErrorKind::UnexpectedEof,
                        format!("the server closed the connection during {method} (id {id})"),
                    ));
                }
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                    return Err(io::Error::new(
                        e.kind(),
                        format!(
                            "no answer to {method} (id {id}) within {:?}; buffered so far: {:?}",
                            self.timeout,
                            String::from_utf8_lossy(&self.buf)
                        ),
                    ));
                }
                Err(e) => return Err(e),
            };
            let msg: Value = serde_json::from_str(&line).map_err(|e| {
                io::Error::new(
                    ErrorKind::InvalidData,
                    format!("server sent invalid JSON ({e}): {line:?}"),
                )
            })?;
            let is_response = msg.get("id").is_some() && msg.get("method").is_none();
            if !is_response {
                self.backlog.push_back(msg);
                continue;
            }
            if msg["id"] != json!(id) {
                return Err(io::Error::new(
                    ErrorKind::InvalidData,
                    format!("response to {method} (id {id}) has the wrong id: {msg}"),
                ));
            }
            return Ok(msg);
        }
    }

    /// Performs the protocol handshake and returns its `result`.
    pub fn initialize(&mut self) -> Value {
        let params = json!({"protocol_version": 1, "client": {"name": "test", "version": "0"}});
        let response = self.call(0, "initialize", params);
        match response.get("result") {
            Some(result) => result.clone(),
            None => panic!("initialize failed: {response}"),
        }
    }

    /// `call` with an id of its own that reports every failure: a hang-up
    /// before the answer is `UnexpectedEof`, no answer in time `WouldBlock`
    /// or `TimedOut`.
    pub fn try_call(&mut self, method: &str, params: Value) -> io::Result<Value> {
        let id = self.next_id;
        self.next_id += 1;
        let mut line =
            json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}).to_string();
        line.push('\n');
        self.try_send_raw(line.as_bytes())?;
        self.response(id, method)
    }

    /// The `result` of `try_call`; a JSON-RPC error is an `Other` error.
    pub fn try_result(&mut self, method: &str, params: Value) -> io::Result<Value> {
        let r = self.try_call(method, params)?;
        match r.get("result") {
            Some(v) => Ok(v.clone()),
            None => Err(io::Error::other(format!("{method}: {r}"))),
        }
    }

    /// Sends several requests in one write (a client may pipeline; the
    /// answers come in order) and returns their results.
    pub fn try_pipeline(&mut self, reqs: &[(&str, Value)]) -> io::Result<Vec<Value>> {
        let first = self.next_id;
        let mut out = String::new();
        for (method, params) in reqs {
            let id = self.next_id;
            self.next_id += 1;
            out.push_str(
                &json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})
                    .to_string(),
            );
            out.push('\n');
        }
        self.try_send_raw(out.as_bytes())?;
        let mut results = Vec::new();
        for (n, (method, _)) in reqs.iter().enumerate() {
            let r = self.response(first + n as u64, method)?;
            match r.get("result") {
                Some(v) => results.push(v.clone()),
                None => return Err(io::Error::other(format!("{method}: {r}"))),
            }
        }
        Ok(results)
    }

    /// `initialize` that reports failures.
    pub fn try_initialize(&mut self) -> io::Result<Value> {
        self.try_result(
            "initialize",
            json!({"protocol_version": 1, "client": {"name": "test", "version": "0"}}),
        )
    }

    /// A `ping` answered `pong`.
    pub fn try_ping(&mut self) -> io::Result<()> {
        let r = self.try_result("ping", json!({}))?;
        if r["status"] != "pong" {
            return Err(io::Error::other(format!("ping: {r}")));
        }
        Ok(())
    }

    /// `agent/info`'s `(queued, processing)`.
    pub fn try_queue(&mut self) -> io::Result<(u64, u64)> {
        let r = self.try_result("agent/info", json!({}))?;
        match (
            r["queue"]["queued"].as_u64(),
            r["queue"]["processing"].as_u64(),
        ) {
            (Some(q), Some(p)) => Ok((q, p)),
            _ => Err(io::Error::other(format!("agent/info: {r}"))),
        }
    }
}

fn utf8_line(bytes: Vec<u8>) -> io::Result<String> {
    String::from_utf8(bytes).map_err(|e| {
        io::Error::new(
            ErrorKind::InvalidData,
            format!(
                "server sent a non-UTF-8 line: {:?}",
                String::from_utf8_lossy(e.as_bytes())
            ),
        )
    })
}
