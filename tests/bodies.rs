//! Bigger bodies (issue 46): a 1 MiB body by default, each instance's
//! limit in its manifest, a sender that refuses a body over its
//! receiver's limit before it sends anything, and a receiver that still
//! enforces its limit and its line bound against a client that does not
//! check.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;
use std::{fs, os::unix::fs::DirBuilderExt};

use serde_json::{Value, json};

use crate::util::{Env, fake_manifest, receipt, transcript_until, wait_for};

/// The bound on every wait in this file.
const T: Duration = Duration::from_secs(20);
/// The default body limit.
const MIB: usize = 1_048_576;
/// The default line bound: a 1 MiB body of control characters, each
/// escaped in six bytes, and 64 KiB for the rest of the request.
const LINE: usize = 6 * MIB + 64 * 1024;

/// A body of exactly `n` bytes that is nearly all control characters
/// (JSON's worst case: six bytes each), with a visible head and tail.
fn control_body(n: usize) -> String {
    let mut b = String::from("begin\n");
    b.push_str(&"\u{1}".repeat(n - b.len() - 4));
    b.push_str("\nend");
    assert_eq!(b.len(), n);
    b
}

/// Issue 46: a body of nearly 1 MiB, nearly all control characters,
/// goes from a plain `send` to a handler byte for byte, with no variable
/// set at either end; and the receiver's manifest says what it accepts.
#[test]
fn a_body_of_nearly_a_mebibyte_is_delivered_intact_by_default() {
    let env = Env::new();
    let ws = env.workspace("big");
    let keep = "cat > \"in-$BATON_MESSAGE_ID\"";
    let inst = env.serve(&ws, &["--name", "big", "--exec", keep, "--stdin", "body"]);
    assert_eq!(inst.manifest["max_message_bytes"], MIB, "{}", inst.manifest);
    let body = control_body(MIB - 100);
    let args = ["send", "big", "-", "--message-id", "big-1"];
    let out = env.run_with(&[], None, &args, Some(body.as_bytes()));
    assert_eq!(out.status, 0, "{out:?}");
    let spool = inst.spool();
    let r = wait_for("big-1's receipt", T, || receipt(&spool, "big-1"));
    assert_eq!(r["outcome"], "done", "{r}");
    let got = fs::read(ws.join("in-big-1")).unwrap();
    assert!(got == body.as_bytes(), "{} bytes came", got.len());
}

/// What the stand-in receiver was asked, connection by connection.
type Calls = Arc<Mutex<Vec<Vec<String>>>>;

/// A stand-in baton instance named `name` whose manifest says it accepts
/// at most `limit` bytes: it answers `initialize` and `ping`, accepts any
/// `message/send`, and records every method of every connection.
struct StandIn {
    calls: Calls,
    stop: Arc<AtomicBool>,
    thread: Option<thread::JoinHandle<()>>,
    files: [PathBuf; 2],
}

impl StandIn {
    fn start(env: &Env, name: &str, limit: usize) -> StandIn {
        let _ = fs::DirBuilder::new().mode(0o700).create(&env.registry);
        let registry = fs::canonicalize(&env.registry).unwrap();
        let id = fake_manifest(&registry, std::process::id(), name, "/nowhere");
        let manifest = registry.join(format!("a-{id}.json"));
        let mut m: Value = serde_json::from_slice(&fs::read(&manifest).unwrap()).unwrap();
        m["max_message_bytes"] = json!(limit);
        fs::write(&manifest, m.to_string()).unwrap();
        let socket = registry.join(format!("a-{id}.sock"));
        let listener = UnixListener::bind(&socket).unwrap();
        listener.set_nonblocking(true).unwrap();
        let calls = Calls::default();
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let (calls, stop) = (calls.clone(), stop.clone());
            thread::spawn(move || {
                while !stop.load(Ordering::SeqCst) {
                    match listener.accept() {
                        Ok((conn, _)) => {
                            conn.set_nonblocking(false).unwrap();
                            let n = {
                                let mut all = calls.lock().unwrap();
                                all.push(Vec::new());
                                all.len() - 1
                            };
                            let (calls, id) = (calls.clone(), id.clone());
                            thread::spawn(move || answer(conn, &calls, n, &id));
                        }
                        Err(_) => thread::sleep(Duration::from_millis(5)),
                    }
                }
            })
        };
        StandIn {
            calls,
            stop,
            thread: Some(thread),
            files: [manifest, socket],
        }
    }

    fn calls(&self) -> Vec<Vec<String>> {
        self.calls.lock().unwrap().clone()
    }
}

impl Drop for StandIn {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        for f in &self.files {
            let _ = fs::remove_file(f);
        }
    }
}

/// One connection of the stand-in, recorded as connection `n`.
fn answer(conn: UnixStream, calls: &Calls, n: usize, id: &str) {
    conn.set_read_timeout(Some(T)).unwrap();
    let mut out = conn.try_clone().unwrap();
    for line in BufReader::new(conn).lines() {
        let Ok(req) = line.map(|l| serde_json::from_str::<Value>(&l).unwrap_or_default()) else {
            return;
        };
        let method = req["method"].as_str().unwrap_or("").to_string();
        calls.lock().unwrap()[n].push(method.clone());
        let result = match method.as_str() {
            "initialize" => json!({"protocol_version": 1,
                "server": {"name": "baton", "version": "0.1.0"},
                "instance": {"instance_id": id}, "capabilities": []}),
            "ping" => json!({"status": "pong", "instance_id": id, "state": "ready"}),
            _ => json!({"status": "accepted", "message_id": req["params"]["message_id"],
                "queue_position": 1, "state": "ready"}),
        };
        let answer = json!({"jsonrpc": "2.0", "id": req["id"], "result": result});
        let _ = writeln!(out, "{answer}");
    }
}

/// Issue 46: the receiver's manifest carries its limit, and a sender
/// refuses a body over it before it sends anything: the receiver (a
/// stand-in that accepts everything and records every call) is only
/// ever asked `initialize` and `ping`, which find it, and never sees
/// `message/send`. The refusal names the size, the receiver and its
/// limit, with the status of a receiver's own refusal (`invalid`, 1).
#[test]
fn a_body_over_the_receivers_limit_is_refused_before_it_is_sent() {
    let env = Env::new();
    let tiny = StandIn::start(&env, "tiny", 100);
    let body = "y".repeat(101);
    let out = env.run_with(&[], None, &["send", "tiny", "-"], Some(body.as_bytes()));
    assert_eq!(out.status, 1, "{out:?}");
    assert!(
        out.stderr.contains(
            "the message is 101 bytes; tiny accepts at most 100 (BATON_MAX_MESSAGE_BYTES at tiny)"
        ),
        "{out:?}"
    );
    let args = ["send", "tiny", &body, "--json"];
    let out = env.run_with(&[], None, &args, None);
    assert_eq!(out.status, 1, "{out:?}");
    let v: Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(v["status"], "invalid", "{v}");
    let calls = tiny.calls();
    assert!(
        calls
            .iter()
            .flatten()
            .all(|m| m == "initialize" || m == "ping"),
        "{calls:?}"
    );
    // At the limit exactly, the stand-in gets the task.
    let out = env.run(&["send", "tiny", &"y".repeat(100)]);
    assert_eq!(out.status, 0, "{out:?}");
    let calls = tiny.calls();
    assert!(
        calls.iter().flatten().any(|m| m == "message/send"),
        "{calls:?}"
    );
}

/// Issue 46: an instance started with a small `BATON_MAX_MESSAGE_BYTES`
/// is respected by a sender that has the default: the body over it is
/// refused at the sender, and the instance records nothing of it (no
/// `message.rejected`); one at its limit is accepted.
#[test]
fn a_receivers_small_limit_is_respected_by_a_default_sender() {
    let env = Env::new();
    let ws = env.workspace("small");
    let vars = [("BATON_MAX_MESSAGE_BYTES", "1000")];
    let inst = env.serve_with(&ws, &vars, &["--name", "small"]);
    assert_eq!(
        inst.manifest["max_message_bytes"], 1000,
        "{}",
        inst.manifest
    );
    let over = "z".repeat(1001);
    let out = env.run(&["send", "small", &over, "--message-id", "over-1"]);
    assert_eq!(out.status, 1, "{out:?}");
    assert!(
        out.stderr.contains(
            "the message is 1001 bytes; small accepts at most 1000 (BATON_MAX_MESSAGE_BYTES at small)"
        ),
        "{out:?}"
    );
    let at = "z".repeat(1000);
    let out = env.run(&["send", "small", &at, "--message-id", "at-1"]);
    assert_eq!(out.status, 0, "{out:?}");
    // Everything the instance recorded up to its acceptance of the second
    // task: nothing of the first.
    let seen = transcript_until(&inst.spool(), "at-1 accepted", T, |e| {
        e["kind"] == "message.accepted" && e["message_id"] == "at-1"
    });
    let of_over: Vec<&Value> = seen
        .iter()
        .filter(|e| e["message_id"] == "over-1")
        .collect();
    assert!(of_over.is_empty(), "{of_over:?}");
}

/// A `message/send` line with `body`, padded with spaces to `len` bytes
/// when given.
fn send_line(target: &str, id: &str, body: &str, len: Option<usize>) -> Vec<u8> {
    let params = json!({"message_id": id, "target_instance_id": target, "body": body,
        "sender": {}});
    let head = json!({"jsonrpc": "2.0", "id": 7, "method": "message/send", "params": params});
    let mut line = head.to_string().into_bytes();
    if let Some(len) = len {
        assert!(line.len() <= len);
        line.pop();
        line.resize(len - 1, b' ');
        line.push(b'}');
    }
    line
}

/// Issue 46: the receiver enforces its limits against a client that
/// checks nothing. By default a line carries a 1 MiB body of control
/// characters (6 MiB escaped), padded to the line bound exactly; a body
/// one byte over 1 MiB is refused `invalid`; a line one byte over the
/// bound is refused as too large and the connection closed.
#[test]
fn the_receiver_enforces_its_limits_on_a_raw_client() {
    let env = Env::new();
    let ws = env.workspace("raw");
    let inst = env.serve_with(&ws, &[("BATON_IO_TIMEOUT", "10")], &["--name", "raw"]);
    let mut c = inst.client();
    c.send_line(&send_line(
        &inst.id,
        "worst-1",
        &control_body(MIB),
        Some(LINE),
    ));
    let v: Value = serde_json::from_str(&c.read_line().unwrap()).unwrap();
    assert_eq!(v["result"]["status"], "accepted", "{v}");

    c.send_line(&send_line(&inst.id, "over-1", &"x".repeat(MIB + 1), None));
    let v: Value = serde_json::from_str(&c.read_line().unwrap()).unwrap();
    assert_eq!(v["result"]["status"], "invalid", "{v}");
    assert_eq!(
        v["result"]["reason"],
        "body is 1048577 bytes, over the limit of 1048576 (BATON_MAX_MESSAGE_BYTES)",
        "{v}"
    );

    let _ = c.try_send_raw(&send_line(&inst.id, "long-1", "x", Some(LINE + 1)));
    let _ = c.try_send_raw(b"\n");
    let v: Value = serde_json::from_str(&c.read_line().unwrap()).unwrap();
    assert_eq!(v["error"]["code"], -32600, "{v}");
    assert_eq!(
        v["error"]["message"],
        format!("frame too large: a line may hold at most {LINE} bytes"),
        "{v}"
    );
    assert_eq!(c.read_line(), None, "the connection stays open");
}
