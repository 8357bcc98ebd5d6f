//! `AppServer` against an app-server written here, over a real Unix
//! socket: answers without `"jsonrpc"`, notifications between a request
//! and its answer, another turn's end passed over, an error answer. Every
//! wait is bounded by the sockets' timeouts; nothing sleeps.

use super::{AppServer, Error, ThreadStatus, TurnStatus};
use crate::workers::ws::frame::{self, Header, Opcode, Side};
use crate::workers::ws::handshake;
use serde_json::{Value, json};
use std::io::{Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::thread;
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(10);

struct Peer {
    stream: UnixStream,
    buf: Vec<u8>,
}

impl Peer {
    fn read_more(&mut self) {
        let mut chunk = [0u8; 4096];
        let n = self.stream.read(&mut chunk).expect("the client's bytes");
        assert!(n > 0, "the client hung up");
        self.buf.extend_from_slice(&chunk[..n]);
    }

    fn upgrade(&mut self) {
        let end = loop {
            if let Some(end) = handshake::head_end(&self.buf) {
                break end;
            }
            self.read_more();
        };
        let head = String::from_utf8(self.buf.drain(..end).collect()).unwrap();
        let key = head
            .split("\r\n")
            .find_map(|l| l.strip_prefix("Sec-WebSocket-Key: "))
            .expect("a key");
        let answer = format!(
            "HTTP/1.1 101 Switching Protocols\r\nupgrade: websocket\r\nconnection: Upgrade\r\n\
             sec-websocket-accept: {}\r\n\r\n",
            handshake::accept_for(key)
        );
        self.stream.write_all(answer.as_bytes()).unwrap();
    }

    /// The next JSON message from the client.
    fn recv(&mut self) -> Value {
        loop {
            if let Some(head) = Header::parse(&self.buf, Side::Client).unwrap() {
                if self.buf.len() >= head.frame_len() {
                    let payload = head.payload(&self.buf);
                    self.buf.drain(..head.frame_len());
                    assert_eq!(head.opcode, Opcode::Text);
                    return serde_json::from_slice(&payload).unwrap();
                }
            }
            self.read_more();
        }
    }

    /// Sends each message as Codex does: no `"jsonrpc"`.
    fn send(&mut self, msgs: &[Value]) {
        let bytes: Vec<u8> = msgs
            .iter()
            .flat_map(|m| frame::encode(Opcode::Text, true, m.to_string().as_bytes(), None))
            .collect();
        self.stream.write_all(&bytes).unwrap();
    }

    /// The next request, checked to be `method`; its id and params.
    fn expect(&mut self, method: &str) -> (Value, Value) {
        let m = self.recv();
        assert_eq!(m["method"], method, "{m}");
        (m["id"].clone(), m["params"].clone())
    }
}

fn thread_json(id: &str, cwd: &str, recency: i64) -> Value {
    json!({"id": id, "cwd": cwd, "status": {"type": "idle"}, "updatedAt": recency,
           "recencyAt": recency, "turns": [], "extra": null})
}

fn turn_json(id: &str, status: &str, items: Value) -> Value {
    json!({"id": id, "rootTurnId": id, "items": items, "status": status, "error": null})
}

fn note(method: &str, params: Value) -> Value {
    json!({"method": method, "params": params, "emittedAtMs": 1})
}

/// Plays Codex through one connection: initialize, the loaded threads,
/// a thread read and one refused, a thread started, a turn run.
fn fake_codex(listener: UnixListener) -> Vec<Value> {
    let (stream, _) = listener.accept().unwrap();
    stream.set_read_timeout(Some(WAIT)).unwrap();
    let mut p = Peer {
        stream,
        buf: Vec::new(),
    };
    p.upgrade();
    let mut seen = Vec::new();
    let (id, params) = p.expect("initialize");
    seen.push(params);
    p.send(&[
        note("configWarning", json!({})),
        json!({"id": id, "result": {"userAgent": "baton/0", "codexHome": "/ch"}}),
    ]);
    let init = p.recv();
    assert_eq!(init["method"], "initialized", "{init}");
    assert!(init.get("id").is_none(), "{init}");

    let (id, _) = p.expect("thread/loaded/list");
    p.send(&[json!({"id": id, "result": {"data": ["t1", "t2", "gone"], "nextCursor": "c"}})]);
    let (id, params) = p.expect("thread/loaded/list");
    assert_eq!(params["cursor"], "c");
    p.send(&[json!({"id": id, "result": {"data": ["t3"], "nextCursor": null}})]);
    for (tid, cwd, recency) in [
        ("t1", "/ws", 5),
        ("t2", "/ws", 9),
        ("gone", "", 0),
        ("t3", "/other", 20),
    ] {
        let (id, params) = p.expect("thread/read");
        assert_eq!(params["threadId"], tid);
        match tid {
            "gone" => {
                p.send(&[json!({"id": id, "error": {"code": -32600, "message": "no thread"}})])
            }
            _ => p.send(&[json!({"id": id, "result": {"thread": thread_json(tid, cwd, recency)}})]),
        }
    }

    let (id, params) = p.expect("thread/start");
    seen.push(params);
    let t = thread_json("t9", "/ws", 30);
    p.send(&[
        json!({"id": id, "result": {"thread": t, "cwd": "/ws"}}),
        note("thread/started", json!({"thread": t})),
    ]);
    let (id, params) = p.expect("turn/start");
    seen.push(params);
    let said = json!([{"type": "agentMessage", "id": "m1", "text": "the answer"}]);
    p.send(&[
        note(
            "thread/status/changed",
            json!({"threadId": "t9", "status": {"type": "active"}}),
        ),
        json!({"id": id, "result": {"turn": turn_json("u1", "inProgress", json!([]))}}),
        note(
            "turn/started",
            json!({"threadId": "t9", "turn": turn_json("u1", "inProgress", json!([]))}),
        ),
        note(
            "item/completed",
            json!({"threadId": "t9", "turnId": "u1",
            "item": {"type": "agentMessage", "id": "m0", "text": "on the way"}}),
        ),
        note(
            "turn/completed",
            json!({"threadId": "t8", "turn": turn_json("u1", "failed", json!([]))}),
        ),
        note(
            "turn/completed",
            json!({"threadId": "t9", "turn": turn_json("u0", "completed", json!([]))}),
        ),
        note(
            "turn/completed",
            json!({"threadId": "t9", "turn": turn_json("u1", "completed", said)}),
        ),
    ]);
    let (id, _) = p.expect("thread/read");
    p.send(&[json!({"id": id, "error": {"code": -32600, "message": "no \u{1b}[31mrollout"}})]);
    seen
}

#[test]
fn a_turn_runs_through_a_fake_app_server() {
    let dir = crate::base::files::scratch("codex-client");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("app-server.sock");
    let listener = UnixListener::bind(&path).unwrap();
    let server = thread::spawn(move || fake_codex(listener));

    let mut app = AppServer::connect(&path, WAIT).unwrap();
    assert_eq!(app.info().codex_home.as_deref(), Some("/ch".as_ref()));
    let ws = app.workspace_thread("/ws".as_ref()).unwrap().unwrap();
    assert_eq!((ws.id.as_str(), ws.recency()), ("t2", 9));
    assert_eq!(ws.status, ThreadStatus::Idle);
    let thread = app.start_thread("/ws".as_ref()).unwrap();
    assert_eq!(thread.id, "t9");
    let turn = app.start_turn(&thread.id, "do it").unwrap();
    assert_eq!(
        (turn.id.as_str(), turn.status),
        ("u1", TurnStatus::InProgress)
    );
    let end = app.wait_turn(&thread.id, &turn.id, WAIT).unwrap();
    assert_eq!(end.status, TurnStatus::Completed);
    assert_eq!(end.text.as_deref(), Some("the answer"));
    assert_eq!(end.error, None);
    // Codex's words in an error are escaped.
    let e = app.read_thread("t9").unwrap_err();
    assert!(matches!(e, Error::Rpc { code: -32600, .. }), "{e:?}");
    assert!(!e.to_string().contains('\u{1b}'), "{e}");

    let seen = server.join().unwrap();
    assert_eq!(seen[0]["capabilities"]["experimentalApi"], true);
    assert_eq!(seen[0]["clientInfo"]["name"], "baton");
    assert_eq!(seen[1], json!({"cwd": "/ws"}));
    assert_eq!(seen[2]["input"], json!([{"type": "text", "text": "do it"}]));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn no_turn_end_in_time_is_a_timeout_that_names_the_turn() {
    let dir = crate::base::files::scratch("codex-client-quiet");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("app-server.sock");
    let listener = UnixListener::bind(&path).unwrap();
    let server = thread::spawn(move || {
        let (stream, _) = listener.accept().unwrap();
        stream.set_read_timeout(Some(WAIT)).unwrap();
        let mut p = Peer {
            stream,
            buf: Vec::new(),
        };
        p.upgrade();
        let (id, _) = p.expect("initialize");
        p.send(&[json!({"id": id, "result": {"userAgent": "x"}})]);
        p.expect("initialized");
        // Holds the connection open, quiet, until the client closes.
        let mut rest = Vec::new();
        let _ = p.stream.read_to_end(&mut rest);
    });
    let mut app = AppServer::connect(&path, WAIT).unwrap();
    let e = app
        .wait_turn("t", "u7", Duration::from_millis(50))
        .unwrap_err();
    assert!(matches!(e, Error::TimedOut { .. }), "{e:?}");
    assert!(e.to_string().contains("u7"), "{e}");
    drop(app);
    server.join().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}
