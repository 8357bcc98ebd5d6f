//! The client against a server written here, over a real Unix socket: the
//! server's side of the handshake, an echo sent back in fragments with a
//! ping before it, and a close each way. Every wait is bounded by the
//! sockets' timeouts; nothing sleeps.

use super::frame::{self, Header, Opcode, Side};
use super::{Client, Error, Options, handshake};
use std::io::{Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;
use std::thread;
use std::time::{Duration, Instant};

const WAIT: Duration = Duration::from_secs(10);

/// The server's end of one connection, reading what the client sends.
struct Peer {
    stream: UnixStream,
    buf: Vec<u8>,
}

impl Peer {
    fn read_more(&mut self) {
        let mut chunk = [0u8; 4096];
        let n = self
            .stream
            .read(&mut chunk)
            .expect("the client's bytes in time");
        assert!(n > 0, "the client hung up");
        self.buf.extend_from_slice(&chunk[..n]);
    }

    /// The request head, up to the blank line.
    fn request(&mut self) -> String {
        let end = loop {
            if let Some(end) = handshake::head_end(&self.buf) {
                break end;
            }
            assert!(self.buf.len() < 8192, "an endless request");
            self.read_more();
        };
        String::from_utf8(self.buf.drain(..end).collect()).unwrap()
    }

    /// One whole frame from the client (masked, or `parse` refuses it).
    fn frame(&mut self) -> (Opcode, Vec<u8>) {
        loop {
            if let Some(head) = Header::parse(&self.buf, Side::Client).unwrap() {
                if self.buf.len() >= head.frame_len() {
                    let payload = head.payload(&self.buf);
                    self.buf.drain(..head.frame_len());
                    return (head.opcode, payload);
                }
            }
            self.read_more();
        }
    }

    fn send(&mut self, frames: &[(Opcode, bool, &[u8])]) {
        let bytes: Vec<u8> = frames
            .iter()
            .flat_map(|&(op, fin, payload)| frame::encode(op, fin, payload, None))
            .collect();
        self.stream.write_all(&bytes).unwrap();
    }
}

/// The server's side of the handshake (RFC 6455 §4.2): the request for
/// `path` and its headers checked, the key a base64 of 16 bytes, and the
/// 101 answer, with `first` in the same write so that the client must
/// keep what it read past the head.
fn upgrade(peer: &mut Peer, path: &str, first: &[u8]) {
    let head = peer.request();
    let mut lines = head.split("\r\n");
    assert_eq!(lines.next(), Some(&*format!("GET {path} HTTP/1.1")));
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(": "))
        .map(|(k, v)| (k.to_ascii_lowercase(), v.to_string()))
        .collect();
    let get = |name: &str| {
        let found = headers.iter().find(|(k, _)| k == name);
        found
            .map(|(_, v)| v.as_str())
            .unwrap_or_else(|| panic!("no {name} in {head:?}"))
    };
    assert_eq!(get("host"), "localhost");
    assert_eq!(get("upgrade"), "websocket");
    assert_eq!(get("connection"), "Upgrade");
    assert_eq!(get("sec-websocket-version"), "13");
    let key = get("sec-websocket-key");
    // 16 bytes, base64: 22 letters of its alphabet and two `=`.
    let letter = |c: char| c.is_ascii_alphanumeric() || c == '+' || c == '/';
    let (letters, pad) = key.split_at(key.len().saturating_sub(2));
    assert!(
        letters.len() == 22 && letters.chars().all(letter) && pad == "==",
        "{key}"
    );
    let mut answer = format!(
        "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Accept: {}\r\n\r\n",
        handshake::accept_for(key)
    )
    .into_bytes();
    answer.extend_from_slice(&frame::encode(Opcode::Text, true, first, None));
    peer.stream.write_all(&answer).unwrap();
}

/// The next connection, every read and write on it bounded.
fn accept(listener: &UnixListener) -> Peer {
    let (stream, _) = listener.accept().unwrap();
    stream.set_read_timeout(Some(WAIT)).unwrap();
    stream.set_write_timeout(Some(WAIT)).unwrap();
    Peer {
        stream,
        buf: Vec::new(),
    }
}

/// A socket in a fresh directory, and a server on it running `serve`.
fn listen<T: Send + 'static>(
    tag: &str,
    serve: fn(UnixListener) -> T,
) -> (PathBuf, PathBuf, thread::JoinHandle<T>) {
    let dir = crate::base::files::scratch(tag);
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("app-server.sock");
    let listener = UnixListener::bind(&path).unwrap();
    (dir, path, thread::spawn(move || serve(listener)))
}

/// Upgrades, greets, echoes one message back in three fragments after a
/// ping, then answers the client's close; returns what the client sent
/// after the handshake, in order.
fn echo_server(listener: UnixListener) -> Vec<(Opcode, Vec<u8>)> {
    let mut peer = accept(&listener);
    upgrade(&mut peer, "/codex", b"hello from the server");
    let mut seen = vec![peer.frame()];
    let echo = format!("echo: {}", String::from_utf8_lossy(&seen[0].1));
    let (a, b) = echo.as_bytes().split_at(3);
    let (b, c) = b.split_at(4);
    peer.send(&[
        (Opcode::Ping, true, b"are you there"),
        (Opcode::Text, false, a),
        (Opcode::Continuation, false, b),
        (Opcode::Continuation, true, c),
    ]);
    seen.push(peer.frame());
    seen.push(peer.frame());
    peer.send(&[(Opcode::Close, true, &1000u16.to_be_bytes())]);
    seen
}

#[test]
fn loopback_handshake_echo_ping_and_close() {
    let (dir, path, server) = listen("ws-loopback", echo_server);

    let mut options = Options::new(WAIT);
    options.request_path = "/codex".into();
    let mut client = Client::connect(&path, &options).unwrap();
    assert_eq!(
        client.recv_text().unwrap().as_deref(),
        Some("hello from the server")
    );
    client.send_text("{\"jsonrpc\":\"2.0\",\"id\":1}").unwrap();
    let echo = client.recv_text().unwrap();
    assert_eq!(
        echo.as_deref(),
        Some("echo: {\"jsonrpc\":\"2.0\",\"id\":1}")
    );
    client.close().unwrap();

    let seen = server.join().unwrap();
    let text = |s: &[u8]| String::from_utf8_lossy(s).into_owned();
    let seen: Vec<_> = seen.iter().map(|(op, p)| (*op, text(p))).collect();
    let close = text(&1000u16.to_be_bytes());
    assert_eq!(
        seen,
        [
            (Opcode::Text, "{\"jsonrpc\":\"2.0\",\"id\":1}".to_string()),
            (Opcode::Pong, "are you there".to_string()),
            (Opcode::Close, close),
        ]
    );
    assert!(matches!(client.send_text("after"), Err(Error::Closed)));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Upgrades and greets, then says nothing until the client speaks, and
/// answers that; returns what the client said.
fn quiet_server(listener: UnixListener) -> Vec<u8> {
    let mut peer = accept(&listener);
    upgrade(&mut peer, "/", b"hi");
    let (_, said) = peer.frame();
    peer.send(&[(Opcode::Text, true, b"late")]);
    said
}

#[test]
fn a_read_timeout_on_the_socket_ends_the_wait_and_the_connection_goes_on() {
    let (dir, path, server) = listen("ws-quiet", quiet_server);
    let mut client = Client::connect(&path, &Options::new(WAIT)).unwrap();
    assert_eq!(client.recv_text().unwrap().as_deref(), Some("hi"));
    let short = Duration::from_millis(200);
    client.set_read_timeout(Some(short));
    let start = Instant::now();
    let e = client.recv_text().unwrap_err();
    assert!(matches!(e, Error::TimedOut { op: "read", .. }), "{e:?}");
    assert!(
        start.elapsed() >= short && start.elapsed() < WAIT,
        "{:?}",
        start.elapsed()
    );
    client.send_text("still there?").unwrap();
    client.set_read_timeout(Some(WAIT));
    assert_eq!(client.recv_text().unwrap().as_deref(), Some("late"));
    assert_eq!(server.join().unwrap(), b"still there?");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn connecting_where_nothing_listens_names_the_socket() {
    let dir = crate::base::files::scratch("ws-nobody");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("gone.sock");
    let e = Client::connect(&path, &Options::new(WAIT))
        .err()
        .expect("nothing listens");
    assert!(matches!(e, Error::Connect { .. }), "{e:?}");
    let words = e.to_string();
    assert!(words.contains(&path.display().to_string()), "{words}");
    assert!(words.contains("is the server running"), "{words}");
    assert!(std::error::Error::source(&e).is_some());
    std::fs::remove_dir_all(&dir).unwrap();
}
