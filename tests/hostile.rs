//! Hostile input and hostile surroundings (docs/protocol.md §1, §5,
//! §7, §8; docs/reliability.md lists what each test proves).
//!
//! - A seeded, std-only randomized test drives the line reader, the
//!   JSON-RPC envelope, `message/send` params and the zcoder frame parser
//!   in process with checks against the contract (no panic, exact
//!   outcomes, no buffer past the frame bound), then sends thousands of the
//!   generated lines and frames to a real instance, which must keep
//!   answering pings. `BATON_FUZZ_SEED=N` replays a run; a failing run
//!   prints its seed. `tests/fuzz/` holds a cargo-fuzz target for longer
//!   runs (docs/testing.md).
//! - Registry directories baton must refuse, one table.
//! - Symlinks planted on every predictable name baton writes through,
//!   racing 10,000 acceptances: nothing is ever written through them.
//! - No permission window: a poller stats everything baton creates while
//!   instances start.
//! - A client running as another uid is closed before a byte is read.

use std::fs;
use std::io::{ErrorKind, Read, Write};
use std::net::Shutdown;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirBuilderExt, FileTypeExt, MetadataExt, PermissionsExt, symlink};
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use baton::server::SendRequest;
use baton::wire::Method;
use baton::wire::{self, FrameError, Incoming, LineReader, ReadError};
use serde_json::{Map, Value, json};

use crate::util::{Env, Rng, Served, exited_or_killed, wait_until};

// ---------------------------------------------------------------------
// The generator: a seeded PRNG and structure-aware inputs.
// ---------------------------------------------------------------------

/// The seed of this run: `BATON_FUZZ_SEED` (decimal or 0x-hex), else the
/// clock.
fn fuzz_seed() -> u64 {
    match std::env::var("BATON_FUZZ_SEED") {
        Ok(v) => {
            let t = v.trim();
            let parsed = match t.strip_prefix("0x") {
                Some(hex) => u64::from_str_radix(hex, 16),
                None => t.parse(),
            };
            parsed.unwrap_or_else(|_| panic!("BATON_FUZZ_SEED={v:?} is not a number"))
        }
        Err(_) => {
            let now = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .unwrap_or_default();
            now.as_nanos() as u64 ^ (u64::from(std::process::id()) << 40)
        }
    }
}

/// Prints the seed when the test holding it fails, so the run replays.
struct SeedReport {
    seed: u64,
    test: &'static str,
}

impl Drop for SeedReport {
    fn drop(&mut self) {
        if thread::panicking() {
            eprintln!(
                "\n{} failed with seed {}: replay with\n    BATON_FUZZ_SEED={} cargo test --test tests hostile::{}\n",
                self.test, self.seed, self.seed, self.test
            );
        }
    }
}

/// Runs one case; on a panic (in baton or in a check) prints the input
/// first, then lets the panic fail the test.
fn case<T>(what: &str, input: &[u8], f: impl FnOnce() -> T) -> T {
    case_with(what, || input.to_vec(), f)
}

/// `case` for inputs that are costly to render: `render` runs only on a
/// failure.
fn case_with<T>(what: &str, render: impl FnOnce() -> Vec<u8>, f: impl FnOnce() -> T) -> T {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(v) => v,
        Err(panic) => {
            let input = render();
            eprintln!(
                "{what}: failing input ({} bytes): {}",
                input.len(),
                show(&input)
            );
            resume_unwind(panic)
        }
    }
}

fn show(bytes: &[u8]) -> String {
    let head: String = bytes
        .iter()
        .take(400)
        .map(|b| b.escape_ascii().to_string())
        .collect();
    if bytes.len() > 400 {
        format!("\"{head}\"... ({} more bytes)", bytes.len() - 400)
    } else {
        format!("\"{head}\"")
    }
}

/// Keys the protocol uses, so random objects hit real code paths.
const KEYS: &[&str] = &[
    "jsonrpc",
    "id",
    "method",
    "params",
    "result",
    "error",
    "message_id",
    "target_instance_id",
    "body",
    "sender",
    "instance_id",
    "name",
    "workspace",
    "hop",
    "in_reply_to",
    "mode",
    "protocol_version",
    "client",
    "version",
    "protocol",
    "type",
    "sender_instance_id",
    "sender_pid",
    "sender_project",
    "sender_workspace",
    "created_at",
    "since",
    "controller",
    "decision",
    "text",
    "target",
    "turn",
    "outcome",
    "reply",
    "code",
    "message",
    "",
];

const STRINGS: &[&str] = &[
    "",
    " ",
    "\t\n ",
    "2.0",
    "1.0",
    "ping",
    "initialize",
    "message/send",
    "queue",
    "steer",
    "enqueue",
    "ack",
    "approve",
    "deny",
    "m-1",
    "42302-18473291",
    "/",
    "/work/x",
    "relative",
    "a/b",
    "..",
    "\u{0}",
    "\u{7f}",
    "\u{1b}[2J",
    "\u{202e}evil",
    "\u{feff}",
    "été",
    "\u{1f4a5}",
    "\n",
    "\r\n",
    "\\",
    "\"",
    "ZCODER-AGENT/1 5",
];

/// JSON text no `Value` serializes to: numbers past every integer type,
/// lone surrogates, bad escapes, trailing commas, duplicate keys, nesting.
const RAW: &[&str] = &[
    "1e999",
    "-1e999",
    "-0",
    "0.0",
    "1.5",
    "-1",
    "18446744073709551615",
    "18446744073709551616",
    "-9223372036854775808",
    "-9223372036854775809",
    "123456789012345678901234567890",
    "1E+2",
    "01",
    "NaN",
    "Infinity",
    "\"\\ud800\"",
    "\"\\udc00\\ud800\"",
    "\"\\u0000\"",
    "\"\\uZZZZ\"",
    "\"\\x41\"",
    "[1,]",
    "{\"a\":1,}",
    "{,}",
    "tru",
    "nul",
    "\"unterminated",
    "{\"id\":1,\"id\":[2]}",
    "{\"method\":\"ping\",\"method\":7}",
    "[[[[[[[[[[",
    "]]]]",
    "}}}}",
    "\u{feff}{}",
    "{}",
    "[]",
    "null",
];

/// Bytes that are not UTF-8, or are overlong and surrogate encodings.
const RAW_BYTES: &[&[u8]] = &[
    b"\xff",
    b"\xc0\x80",
    b"\xed\xa0\x80",
    b"\"\xff\"",
    b"\x00",
    b"\xf4\x90\x80\x80",
    b"\n",
    b"\r",
];

/// The methods a line names: every real one and some that are not.
fn method_pool() -> Vec<&'static str> {
    let mut m: Vec<&str> = Method::ALL.iter().map(|m| m.as_str()).collect();
    m.extend([
        "",
        "unknown",
        "PING",
        "message/send ",
        "rpc.discover",
        "event",
    ]);
    m
}

fn gen_string(r: &mut Rng) -> String {
    match r.below(6) {
        0 | 1 => r.pick(STRINGS).to_string(),
        2 => {
            // Near the id grammar, and across its 100-byte limit.
            const ID: &[u8] = b"abcXYZ0189_.-";
            let len = *r.pick(&[0, 1, 16, 64, 65, 99, 100, 101, 130]);
            (0..len).map(|_| *r.pick(ID) as char).collect()
        }
        3 => (0..r.below(24))
            .map(|_| {
                let c = if r.one_in(3) {
                    r.below(0x11_0000) as u32
                } else {
                    r.below(0x80) as u32
                };
                char::from_u32(c).unwrap_or('\u{fffd}')
            })
            .collect(),
        4 => "x".repeat(r.below(400)),
        _ => format!("{}-{}", r.below(1_000_000), r.next()),
    }
}

fn gen_number(r: &mut Rng) -> Value {
    match r.below(12) {
        0 => json!(0),
        1 => json!(1),
        2 => json!(-1),
        3 => json!(u64::MAX),
        4 => json!(i64::MIN),
        5 => json!(r.next()),
        6 => json!(r.next() as i64),
        7 => json!(1.5),
        8 => json!(-0.5),
        9 => json!(1e300),
        10 => json!(2),
        _ => json!(r.below(20)),
    }
}

fn gen_value(r: &mut Rng, depth: u32) -> Value {
    let kinds = if depth >= 3 { 6 } else { 9 };
    match r.below(kinds) {
        0 => Value::Null,
        1 => Value::Bool(r.one_in(2)),
        2 => gen_number(r),
        3..=5 => Value::String(gen_string(r)),
        6 | 7 => Value::Object(gen_object(r, depth + 1)),
        _ => Value::Array((0..r.below(5)).map(|_| gen_value(r, depth + 1)).collect()),
    }
}

fn gen_key(r: &mut Rng) -> String {
    if r.one_in(6) {
        gen_string(r)
    } else {
        r.pick(KEYS).to_string()
    }
}

fn gen_object(r: &mut Rng, depth: u32) -> Map<String, Value> {
    (0..r.below(6))
        .map(|_| (gen_key(r), gen_value(r, depth)))
        .collect()
}

/// A string field: usually a string, sometimes null, absent (`None`) or
/// of another type.
fn maybe_string(r: &mut Rng, good: impl FnOnce(&mut Rng) -> String) -> Option<Value> {
    match r.below(10) {
        0 => None,
        1 => Some(Value::Null),
        2 => Some(gen_value(r, 2)),
        _ => Some(Value::String(good(r))),
    }
}

/// `message/send` params, mostly well-typed so that deep checks are
/// reached, with every field sometimes missing, null or mistyped.
fn gen_send_params(r: &mut Rng, instance: &str) -> Map<String, Value> {
    if r.one_in(4) {
        let mut p = good_send_params(r, instance);
        if r.one_in(3) {
            p.insert(gen_key(r), gen_value(r, 1));
        }
        return p;
    }
    let mut p = Map::new();
    let put = |p: &mut Map<String, Value>, k: &str, v: Option<Value>| {
        if let Some(v) = v {
            p.insert(k.to_string(), v);
        }
    };
    let id = maybe_string(r, |r| {
        if r.one_in(2) {
            format!("m-{}", r.next())
        } else {
            gen_string(r)
        }
    });
    put(&mut p, "message_id", id);
    let target = maybe_string(r, |r| {
        if r.one_in(3) {
            gen_string(r)
        } else {
            instance.to_string()
        }
    });
    put(&mut p, "target_instance_id", target);
    let body = maybe_string(r, gen_string);
    put(&mut p, "body", body);
    let sender = match r.below(10) {
        0 => None,
        1 => Some(gen_value(r, 2)),
        _ => {
            let mut s = Map::new();
            for k in ["instance_id", "name", "workspace"] {
                let v = maybe_string(r, gen_string);
                put(&mut s, k, v);
            }
            if r.one_in(5) {
                s.insert(gen_key(r), gen_value(r, 2));
            }
            Some(Value::Object(s))
        }
    };
    put(&mut p, "sender", sender);
    let hop = match r.below(8) {
        0..=2 => None,
        3 => Some(Value::Null),
        4 => Some(gen_number(r)),
        5 => Some(gen_value(r, 2)),
        _ => Some(json!(r.below(12))),
    };
    put(&mut p, "hop", hop);
    if r.one_in(3) {
        let v = maybe_string(r, gen_string);
        put(&mut p, "in_reply_to", v);
    }
    if r.one_in(3) {
        let v = maybe_string(r, |r| r.pick(&["queue", "steer", "later"]).to_string());
        put(&mut p, "mode", v);
    }
    if r.one_in(6) {
        p.insert(gen_key(r), gen_value(r, 1));
    }
    p
}

/// `message/send` params every receiver accepts while it has room.
fn good_send_params(r: &mut Rng, instance: &str) -> Map<String, Value> {
    let body = format!("task {}", gen_string(r));
    let p = json!({
        "message_id": format!("g-{}", r.next()),
        "target_instance_id": instance,
        "body": body,
        "sender": {"name": "fuzz", "workspace": "/fuzz"},
    });
    match p {
        Value::Object(m) => m,
        _ => unreachable!(),
    }
}

fn gen_params(r: &mut Rng, method: &str, instance: &str) -> Value {
    if r.one_in(8) {
        return gen_value(r, 1);
    }
    match method {
        "message/send" => Value::Object(gen_send_params(r, instance)),
        "initialize" => {
            let mut p = Map::new();
            if !r.one_in(8) {
                let v = if r.one_in(4) { gen_number(r) } else { json!(1) };
                p.insert("protocol_version".into(), v);
            }
            if !r.one_in(8) {
                let mut c = Map::new();
                for k in ["name", "version"] {
                    if let Some(v) = maybe_string(r, gen_string) {
                        c.insert(k.into(), v);
                    }
                }
                p.insert("client".into(), Value::Object(c));
            }
            Value::Object(p)
        }
        _ => Value::Object(gen_object(r, 1)),
    }
}

/// One JSON-RPC object as a `Value`: envelope fields present, absent or
/// mistyped.
fn gen_envelope(r: &mut Rng, methods: &[&str], instance: &str) -> Value {
    let mut m = Map::new();
    if !r.one_in(10) {
        let v = if r.one_in(10) {
            gen_value(r, 2)
        } else {
            json!("2.0")
        };
        m.insert("jsonrpc".into(), v);
    }
    if !r.one_in(6) {
        let id = match r.below(7) {
            0..=2 => json!(r.below(1000)),
            3 => json!(gen_string(r)),
            4 => Value::Null,
            _ => gen_value(r, 2),
        };
        m.insert("id".into(), id);
    }
    let method = r.pick(methods).to_string();
    if !r.one_in(12) {
        let v = if r.one_in(12) {
            gen_value(r, 2)
        } else {
            json!(method)
        };
        m.insert("method".into(), v);
    }
    if r.one_in(12) {
        let k = if r.one_in(2) { "result" } else { "error" };
        m.insert(k.into(), gen_value(r, 2));
    }
    if !r.one_in(6) {
        m.insert("params".into(), gen_params(r, &method, instance));
    }
    Value::Object(m)
}

/// Applies 1 to 4 byte-level mutations.
fn mutate(r: &mut Rng, b: &mut Vec<u8>) {
    for _ in 0..1 + r.below(4) {
        let at = if b.is_empty() {
            0
        } else {
            r.below(b.len() + 1)
        };
        match r.below(8) {
            0 if !b.is_empty() => {
                let i = r.below(b.len());
                b[i] ^= 1 << r.below(8);
            }
            1 if !b.is_empty() => {
                let i = r.below(b.len());
                b[i] = r.byte();
            }
            2 => {
                let frag = r.pick(RAW).as_bytes();
                b.splice(at..at, frag.iter().copied());
            }
            3 => {
                let frag = *r.pick(RAW_BYTES);
                b.splice(at..at, frag.iter().copied());
            }
            4 if at < b.len() => {
                let end = (at + 1 + r.below(16)).min(b.len());
                b.drain(at..end);
            }
            5 => b.truncate(at),
            6 if at < b.len() => {
                let end = (at + 1 + r.below(32)).min(b.len());
                let dup: Vec<u8> = b[at..end].to_vec();
                b.splice(at..at, dup);
            }
            _ => b.insert(at, r.byte()),
        }
    }
}

/// One line's bytes (without its `\n`, though a mutation may add one).
fn gen_line(r: &mut Rng, methods: &[&str], instance: &str) -> Vec<u8> {
    let mut bytes = match r.below(12) {
        0 => {
            // Raw tokens in the places of the envelope's values.
            let tok = |r: &mut Rng| {
                if r.one_in(2) {
                    r.pick(RAW).to_string()
                } else {
                    gen_value(r, 1).to_string()
                }
            };
            let id = tok(r);
            let method = if r.one_in(2) {
                json!(r.pick(methods)).to_string()
            } else {
                tok(r)
            };
            let params = tok(r);
            format!(r#"{{"jsonrpc":"2.0","id":{id},"method":{method},"params":{params}}}"#)
                .into_bytes()
        }
        1 => (0..r.below(200)).map(|_| r.byte()).collect(),
        2 => {
            // Nesting around serde_json's recursion limit (128), closed
            // or not.
            let n = 1 + r.below(300);
            let (open, close) = if r.one_in(2) {
                ("[", "]")
            } else {
                ("{\"a\":", "}")
            };
            let mut s = open.repeat(n);
            if r.one_in(2) {
                s.push('1');
                s.push_str(&close.repeat(n));
            }
            s.into_bytes()
        }
        _ => gen_envelope(r, methods, instance).to_string().into_bytes(),
    };
    if r.one_in(3) {
        mutate(r, &mut bytes);
    }
    bytes
}

/// A flat payload as zcoder writes them (`ping` or `enqueue`), with some
/// fields missing, mistyped or nested.
fn gen_zcoder_payload(r: &mut Rng, instance: &str) -> Vec<u8> {
    let mut m = Map::new();
    if !r.one_in(10) {
        let v = if r.one_in(8) { gen_number(r) } else { json!(1) };
        m.insert("protocol".into(), v);
    }
    let kind = *r.pick(&["ping", "enqueue", "enqueue", "ack", "other"]);
    if !r.one_in(10) {
        m.insert("type".into(), json!(kind));
    }
    if kind == "enqueue" || r.one_in(4) {
        let fields = [
            "message_id",
            "target_instance_id",
            "sender_instance_id",
            "sender_project",
            "sender_workspace",
            "body",
        ];
        for k in fields {
            let good = |r: &mut Rng| match k {
                "target_instance_id" if !r.one_in(4) => instance.to_string(),
                "message_id" if r.one_in(2) => format!("z-{}", r.next()),
                _ => gen_string(r),
            };
            if let Some(v) = maybe_string(r, good) {
                m.insert(k.into(), v);
            }
        }
        for k in ["sender_pid", "created_at"] {
            if !r.one_in(3) {
                m.insert(k.into(), gen_number(r));
            }
        }
    }
    if r.one_in(5) {
        m.insert(gen_key(r), gen_value(r, 1));
    }
    let mut bytes = Value::Object(m).to_string().into_bytes();
    if r.one_in(4) {
        mutate(r, &mut bytes);
    }
    bytes
}

/// A whole zcoder frame: header (sometimes wrong), payload (sometimes cut
/// short or followed by more).
fn gen_frame(r: &mut Rng, instance: &str, max: usize) -> Vec<u8> {
    let payload = match r.below(8) {
        0 => gen_line(r, &["ping"], instance),
        1 | 2 => {
            // An enqueue a receiver accepts while it has room.
            let body = format!("task {}", gen_string(r));
            json!({
                "protocol": 1, "type": "enqueue",
                "message_id": format!("z-{}", r.next()),
                "target_instance_id": instance,
                "sender_pid": 4242, "sender_project": "fuzz", "sender_workspace": "/fuzz",
                "body": body, "created_at": 1_788_012_120,
            })
            .to_string()
            .into_bytes()
        }
        _ => gen_zcoder_payload(r, instance),
    };
    let magic: &[u8] = match r.below(16) {
        0 => b"ZCODER-AGENT/1",
        1 => b"ZCODER-AGENT/2 ",
        2 => b"zcoder-agent/1 ",
        3 => b"ZCODER-AGENT/1  ",
        4 => b"ZCODER",
        _ => wire::ZCODER_MAGIC,
    };
    let n = payload.len();
    let length = match r.below(14) {
        0 => String::new(),
        1 => "0".into(),
        2 => format!("{}", n + 1),
        3 => format!("{}", n.saturating_sub(1)),
        4 => format!("{max}"),
        5 => format!("{}", max + 1),
        6 => "99999999".into(),
        7 => "100000000".into(),
        8 => format!("0{n}"),
        9 => format!("+{n}"),
        10 => format!("{n} "),
        11 => "-1".into(),
        12 => "\u{663}".into(),
        _ => format!("{n}"),
    };
    let mut out = magic.to_vec();
    out.extend_from_slice(length.as_bytes());
    if !r.one_in(20) {
        out.push(b'\n');
    }
    out.extend_from_slice(&payload);
    if r.one_in(8) {
        let cut = r.below(out.len() + 1);
        out.truncate(cut);
    }
    if r.one_in(8) {
        out.extend_from_slice(b"{\"more\":1}\n");
    }
    out
}

// ---------------------------------------------------------------------
// The checks: what the contract says each parser must answer.
// ---------------------------------------------------------------------

fn valid_id(v: &Value) -> bool {
    matches!(v, Value::String(_) | Value::Number(_) | Value::Null)
}

/// Every answer the server may write for a line is exactly one line of
/// JSON.
fn assert_one_line(bytes: &[u8]) {
    assert_eq!(bytes.last(), Some(&b'\n'), "an answer ends with \\n");
    assert_eq!(
        bytes.iter().filter(|&&b| b == b'\n').count(),
        1,
        "an answer is one line"
    );
    serde_json::from_slice::<Value>(bytes).expect("an answer is JSON");
}

/// docs/protocol.md §1: how one line is classified.
fn check_classify(line: &[u8]) {
    let got = wire::classify(line);
    let parsed: Result<Value, _> = serde_json::from_slice(line);
    let obj = match parsed {
        Err(_) => {
            assert!(
                matches!(&got, Incoming::Invalid { id, code, .. } if id.is_null() && *code == wire::PARSE_ERROR),
                "unparsable JSON must be -32700 with id null, got {got:?}"
            );
            return check_answer(&got);
        }
        Ok(Value::Object(o)) => o,
        Ok(_) => {
            assert!(
                matches!(&got, Incoming::Invalid { id, code, .. } if id.is_null() && *code == wire::INVALID_REQUEST),
                "a non-object must be -32600 with id null, got {got:?}"
            );
            return check_answer(&got);
        }
    };
    let echo = obj
        .get("id")
        .filter(|v| valid_id(v))
        .cloned()
        .unwrap_or(Value::Null);
    let has_method = obj.contains_key("method");
    if !has_method && (obj.contains_key("result") || obj.contains_key("error")) {
        match &got {
            Incoming::Reply { reply } => assert_eq!(reply, &obj, "a reply is passed on whole"),
            other => panic!("an object with result/error and no method is a reply, got {other:?}"),
        }
        return;
    }
    let method = match obj.get("method") {
        Some(Value::String(m)) => m.clone(),
        _ => {
            assert!(
                matches!(&got, Incoming::Invalid { id, code, .. } if *code == wire::INVALID_REQUEST && *id == echo),
                "no string method: -32600 echoing a valid id ({echo}), got {got:?}"
            );
            return check_answer(&got);
        }
    };
    if obj.get("jsonrpc") != Some(&json!("2.0")) {
        assert!(
            matches!(&got, Incoming::Invalid { id, code, .. } if *code == wire::INVALID_REQUEST && *id == echo),
            "jsonrpc not \"2.0\": -32600, got {got:?}"
        );
        return check_answer(&got);
    }
    match obj.get("id") {
        None => assert!(
            matches!(&got, Incoming::Notification { method: m } if *m == method),
            "no id: a notification, got {got:?}"
        ),
        Some(id) if !valid_id(id) => assert!(
            matches!(&got, Incoming::Invalid { id, code, .. } if id.is_null() && *code == wire::INVALID_REQUEST),
            "an invalid id: -32600 with id null, got {got:?}"
        ),
        Some(id) => {
            let params = obj.get("params").cloned().unwrap_or_else(|| json!({}));
            match &got {
                Incoming::Request {
                    id: i,
                    method: m,
                    params: p,
                } => {
                    assert!(
                        *i == *id && *m == method && *p == params,
                        "a request as sent: {got:?}"
                    );
                    assert_one_line(&wire::result_line(i, &json!({})));
                }
                other => panic!("a well-formed request, got {other:?}"),
            }
        }
    }
    check_answer(&got);
}

/// The error line for an invalid object is one line with its code.
fn check_answer(got: &Incoming) {
    if let Incoming::Invalid { id, code, message } = got {
        assert!(!message.is_empty(), "an error has a message");
        let line = wire::error_line(id, *code, message, None);
        assert_one_line(&line);
        let v: Value = serde_json::from_slice(&line).unwrap();
        assert_eq!(v["error"]["code"], json!(code));
        // The id is echoed as the line spelled it.
        assert_eq!(v["id"], id.to_value());
        let echoed = format!("\"id\":{},", id.get());
        assert!(
            String::from_utf8_lossy(&line).contains(&echoed),
            "{echoed} not in {}",
            String::from_utf8_lossy(&line)
        );
    }
}

/// docs/protocol.md §4: -32602 is for missing fields and wrong JSON types only; a
/// well-typed request parses whatever its values.
fn check_send_params(p: &Map<String, Value>) {
    let string = |v: Option<&Value>| matches!(v, Some(Value::String(_)));
    let optional = |v: Option<&Value>| matches!(v, None | Some(Value::Null | Value::String(_)));
    let sender = match p.get("sender") {
        Some(Value::Object(s)) => Some(s),
        _ => None,
    };
    let hop_ok = match p.get("hop") {
        None | Some(Value::Null) => true,
        Some(Value::Number(n)) => n.is_u64() || n.is_i64(),
        _ => false,
    };
    // Which fields are bad, by the name an error would give them.
    let mut bad: Vec<String> = Vec::new();
    for k in ["message_id", "target_instance_id", "body"] {
        if !string(p.get(k)) {
            bad.push(k.into());
        }
    }
    match sender {
        None => bad.push("sender".into()),
        Some(s) => {
            for k in ["instance_id", "name", "workspace"] {
                if !optional(s.get(k)) {
                    bad.push(format!("sender.{k}"));
                }
            }
        }
    }
    if !hop_ok {
        bad.push("hop".into());
    }
    for k in ["in_reply_to", "mode"] {
        if !optional(p.get(k)) {
            bad.push(k.into());
        }
    }
    let got = SendRequest::read(p).map_err(baton::server::RpcError::from);
    match got {
        Ok(req) => {
            assert!(
                bad.is_empty(),
                "accepted params with bad fields {bad:?}: {req:?}"
            );
            let s = |k: &str| p[k].as_str().unwrap().to_string();
            assert_eq!(req.message_id, s("message_id"));
            assert_eq!(req.target_instance_id, s("target_instance_id"));
            assert_eq!(req.body, s("body"));
            let sender = sender.unwrap();
            let opt = |m: &Map<String, Value>, k: &str| {
                m.get(k).and_then(Value::as_str).map(String::from)
            };
            assert_eq!(req.sender_instance_id, opt(sender, "instance_id"));
            assert_eq!(req.sender_name, opt(sender, "name"));
            assert_eq!(req.sender_workspace, opt(sender, "workspace"));
            assert_eq!(req.in_reply_to, opt(p, "in_reply_to"));
            assert_eq!(req.mode, opt(p, "mode").unwrap_or_else(|| "queue".into()));
            let hop = match p.get("hop") {
                None | Some(Value::Null) => Some(0),
                Some(v) => v.as_u64(),
            };
            assert_eq!(
                req.hop, hop,
                "a negative hop is a value for the checks, not a type error"
            );
        }
        Err(e) => {
            assert_eq!(e.code, wire::INVALID_PARAMS, "{e:?}");
            let field = e
                .message
                .strip_prefix("invalid params: ")
                .and_then(|m| {
                    m.strip_suffix(" is missing")
                        .or_else(|| m.split(" must be ").next().filter(|f| *f != m))
                })
                .unwrap_or_else(|| panic!("unexpected -32602 message {:?}", e.message));
            assert!(
                bad.iter().any(|b| b == field),
                "-32602 names {field:?}, but the bad fields are {bad:?}"
            );
        }
    }
}

/// docs/protocol.md §9: the zcoder length is decimal, 1 to the frame bound.
fn check_zcoder_length(header: &[u8], max: usize) {
    let got = wire::zcoder_length(header, max);
    let expected = match header.strip_prefix(wire::ZCODER_MAGIC) {
        None => Err("magic"),
        Some(d) if d.is_empty() || d.len() > 8 || !d.iter().all(u8::is_ascii_digit) => {
            Err("digits")
        }
        Some(d) => {
            let n: usize = std::str::from_utf8(d).unwrap().parse().unwrap();
            if n == 0 {
                Err("zero")
            } else if n > max {
                Ok(Err(n))
            } else {
                Ok(Ok(n))
            }
        }
    };
    match (&got, expected) {
        (Ok(n), Ok(Ok(want))) => {
            assert_eq!(*n, want);
            assert!(
                (1..=max).contains(n),
                "a length past the bound was accepted"
            );
        }
        (Err(FrameError::TooLarge(n)), Ok(Err(want))) => assert_eq!(*n, want),
        (Err(FrameError::BadHeader(_)), Err(_)) => {}
        (got, want) => panic!("zcoder_length(max {max}) gave {got:?}, expected {want:?}"),
    }
}

/// parse_flat accepts exactly one JSON object of scalars.
fn check_parse_flat(payload: &[u8]) {
    let got = wire::parse_flat(payload);
    let expected = match serde_json::from_slice::<Value>(payload) {
        Ok(Value::Object(o)) if o.values().all(|v| !v.is_object() && !v.is_array()) => Some(o),
        _ => None,
    };
    match (got, expected) {
        (Ok(o), Some(want)) => assert_eq!(o, want),
        (Err(FrameError::NotFlat(m)), None) => assert!(!m.is_empty()),
        (got, want) => panic!("parse_flat gave {got:?}, expected {want:?}"),
    }
}

const T: Duration = Duration::from_secs(2);

/// A socket pair already holding `input`, its writing end closed.
fn loaded_pair(input: &[u8]) -> UnixStream {
    let (a, mut b) = UnixStream::pair().expect("socketpair");
    // Inputs stay under 64 KiB: the kernel buffers them whole.
    b.write_all(input).expect("write to a socketpair");
    drop(b);
    a
}

/// Line bounds the in-process reader is tried with: the edges of its
/// growth steps (4096, doubling) and of `BATON_MAX_BYTES`' range.
const MAXES: &[usize] = &[
    1, 2, 3, 16, 100, 1023, 1024, 1025, 4095, 4096, 4097, 5000, 8193, 20000,
];

/// docs/protocol.md §1: lines come back exactly as sent; a line of more than `max`
/// bytes is TooLarge; the buffer never holds more than `max + 1` bytes.
/// Returns how many lines the stream held.
fn check_line_reader(r: &mut Rng, methods: &[&str], instance: &str) -> usize {
    let max = *r.pick(MAXES);
    let mut input = Vec::new();
    let lines = 1 + r.below(12);
    for i in 0..lines {
        if r.one_in(8) {
            let len = match r.below(6) {
                0 => max.saturating_sub(1),
                1 => max,
                2 => max + 1,
                3 => max + 2,
                4 => 2 * max,
                _ => r.below(3 * max + 1),
            };
            let fill = if r.one_in(2) { b'x' } else { b'{' };
            input.extend(std::iter::repeat_n(fill, len));
        } else {
            input.extend(gen_line(r, methods, instance));
        }
        if i + 1 < lines || !r.one_in(4) {
            input.push(b'\n');
        }
    }
    input.truncate(60 * 1024);
    case("LineReader", &input, || {
        let mut reader = LineReader::new(loaded_pair(&input), max);
        let mut rest: &[u8] = &input;
        let mut count = 0;
        loop {
            let got = reader.read_line(Some(T), T).map(<[u8]>::to_vec);
            assert!(
                reader.capacity() <= max + 1,
                "the line buffer holds {} bytes, past the bound {max} + 1",
                reader.capacity()
            );
            match rest.iter().position(|&b| b == b'\n') {
                Some(i) if i <= max => {
                    match got {
                        Ok(line) => {
                            assert_eq!(line, &rest[..i], "line {count} (max {max})");
                            // What the server does next with a line.
                            check_classify(&line);
                        }
                        Err(e) => panic!("line {count} of {i} bytes (max {max}): {e:?}"),
                    }
                    rest = &rest[i + 1..];
                    count += 1;
                }
                Some(i) => {
                    assert!(
                        matches!(got, Err(ReadError::TooLarge)),
                        "a line of {i} bytes with max {max}: {got:?}"
                    );
                    return count + 1;
                }
                None if rest.is_empty() => {
                    assert!(matches!(got, Err(ReadError::Eof)), "at the end: {got:?}");
                    return count;
                }
                None if rest.len() <= max => {
                    assert!(
                        matches!(got, Err(ReadError::Truncated)),
                        "{} bytes without a newline: {got:?}",
                        rest.len()
                    );
                    return count + 1;
                }
                None => {
                    assert!(
                        matches!(got, Err(ReadError::TooLarge)),
                        "{} bytes without a newline, max {max}: {got:?}",
                        rest.len()
                    );
                    return count + 1;
                }
            }
        }
    })
}

/// The server's zcoder path: the header is a line, then exactly the
/// declared payload, never more than the bound.
fn check_frame_via_reader(frame: &[u8], max: usize) {
    case("zcoder via LineReader", frame, || {
        let mut reader = LineReader::new(loaded_pair(frame), max);
        let nl = frame.iter().position(|&b| b == b'\n');
        let got = reader.read_line(Some(T), T).map(<[u8]>::to_vec);
        assert!(reader.capacity() <= max + 1);
        let header = match (nl, got) {
            (Some(i), Ok(line)) if i <= max => {
                assert_eq!(line, &frame[..i]);
                line
            }
            (_, Ok(line)) => panic!("a header line of {} bytes past max {max}", line.len()),
            (_, Err(_)) => return,
        };
        let Ok(n) = wire::zcoder_length(&header, max) else {
            return;
        };
        let after = &frame[header.len() + 1..];
        match reader.read_exact_within(n, T) {
            Ok(payload) => {
                assert!(after.len() >= n, "read {n} bytes of {}", after.len());
                assert_eq!(payload, &after[..n]);
                assert!(
                    payload.capacity() <= max,
                    "a payload buffer of {} bytes past the bound {max}",
                    payload.capacity()
                );
                check_parse_flat(&payload);
            }
            Err(ReadError::Truncated) => assert!(after.len() < n),
            Err(e) => panic!("payload of {n} bytes: {e:?}"),
        }
        assert!(reader.capacity() <= max + 1);
    });
}

/// The client's zcoder reader (`read_zcoder_frame`), with part of the
/// frame already read into `prefix`.
fn check_read_zcoder_frame(frame: &[u8], split: usize, max: usize) {
    case("read_zcoder_frame", frame, || {
        let (prefix, rest) = frame.split_at(split.min(frame.len()));
        let mut stream = loaded_pair(rest);
        let got = wire::read_zcoder_frame(&mut stream, prefix, max, T);
        let header_max = wire::ZCODER_MAGIC.len() + 9;
        let nl = frame.iter().position(|&b| b == b'\n');
        let expected = match nl {
            Some(i) if i < header_max || i < prefix.len() => {
                match wire::zcoder_length(&frame[..i], max) {
                    Err(e) => Err(e),
                    Ok(n) if frame.len() - (i + 1) < n => Err(FrameError::Short),
                    Ok(n) => wire::parse_flat(&frame[i + 1..i + 1 + n]),
                }
            }
            _ => Err(FrameError::BadHeader(String::new())),
        };
        match (&got, &expected) {
            (Err(FrameError::BadHeader(_)), Err(FrameError::BadHeader(_))) => {}
            (got, want) => assert_eq!(got, want, "max {max}, {} bytes already read", prefix.len()),
        }
    });
}

#[test]
fn fuzz_wire_parsers_in_process() {
    let seed = fuzz_seed();
    let _report = SeedReport {
        seed,
        test: "fuzz_wire_parsers_in_process",
    };
    let mut r = Rng::new(seed);
    let methods = method_pool();
    let instance = "4242-1234567890123456";
    let started = Instant::now();
    let mut inputs = 0usize;

    for _ in 0..30_000 {
        let line = gen_line(&mut r, &methods, instance);
        case("classify", &line, || check_classify(&line));
        inputs += 1;
    }
    for _ in 0..30_000 {
        let p = if r.one_in(10) {
            gen_object(&mut r, 0)
        } else {
            gen_send_params(&mut r, instance)
        };
        case_with(
            "SendRequest::read",
            || Value::Object(p.clone()).to_string().into_bytes(),
            || check_send_params(&p),
        );
        inputs += 1;
    }
    for _ in 0..20_000 {
        let max = *r.pick(&[1, 8, 1024, 4096, 65536, 16 * 1024 * 1024]);
        let frame = gen_frame(&mut r, instance, max);
        let header_end = frame
            .iter()
            .position(|&b| b == b'\n')
            .unwrap_or(frame.len());
        case("zcoder_length", &frame, || {
            check_zcoder_length(&frame[..header_end], max)
        });
        let payload = frame.get(header_end + 1..).unwrap_or_default();
        case("parse_flat", payload, || check_parse_flat(payload));
        inputs += 2;
    }
    for _ in 0..2_500 {
        inputs += check_line_reader(&mut r, &methods, instance);
    }
    for _ in 0..1_500 {
        let max = *r.pick(&[16, 100, 1024, 4096, 65536]);
        let frame = gen_frame(&mut r, instance, max);
        check_frame_via_reader(&frame, max);
        let split = r.below(frame.len() + 1);
        check_read_zcoder_frame(&frame, split, max);
        inputs += 2;
    }
    eprintln!(
        "hostile fuzz: {inputs} inputs in {:.1} s, seed {seed}",
        started.elapsed().as_secs_f64()
    );
    assert!(inputs >= 100_000, "only {inputs} inputs");
}

// ---------------------------------------------------------------------
// The same inputs against a real instance.
// ---------------------------------------------------------------------

/// Sends `bytes` on a fresh connection, half-closes it, and returns all
/// the instance wrote before closing (5 s bound).
fn exchange(socket: &Path, bytes: &[u8]) -> Vec<u8> {
    let mut s =
        UnixStream::connect(socket).unwrap_or_else(|e| panic!("connect {}: {e}", socket.display()));
    s.set_write_timeout(Some(Duration::from_secs(5))).unwrap();
    // The instance closes early after a line past the bound; what could
    // not be written then does not matter.
    let _ = s.write_all(bytes);
    let _ = s.shutdown(Shutdown::Write);
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut out = Vec::new();
    let mut chunk = [0u8; 8192];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        assert!(
            !left.is_zero(),
            "the instance neither finished answering nor closed within 5 s; so far: {}",
            show(&out)
        );
        s.set_read_timeout(Some(left)).unwrap();
        match s.read(&mut chunk) {
            Ok(0) => return out,
            Ok(n) => out.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            // Closed with some of our bytes unread (after a refusal).
            Err(e) if e.kind() == ErrorKind::ConnectionReset => return out,
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(e) => panic!("reading from the instance: {e}"),
        }
    }
}

/// Every answer on a native connection is a complete JSON-RPC line.
/// `results` gets each result's `status` (empty when it has none).
fn check_line_answers(out: &[u8], results: &mut Vec<String>, codes: &mut Vec<i64>) {
    if out.is_empty() {
        return;
    }
    assert_eq!(out.last(), Some(&b'\n'), "a partial answer: {}", show(out));
    for line in out[..out.len() - 1].split(|&b| b == b'\n') {
        let v: Value = serde_json::from_slice(line)
            .unwrap_or_else(|e| panic!("an answer is not JSON ({e}): {}", show(line)));
        assert_eq!(v["jsonrpc"], "2.0", "{v}");
        if v.get("method").is_some() {
            // An event or a request of the server's own.
            continue;
        }
        match (v.get("result"), v.get("error")) {
            (Some(r), None) => results.push(r["status"].as_str().unwrap_or("").to_string()),
            (None, Some(e)) => {
                let code = e["code"]
                    .as_i64()
                    .unwrap_or_else(|| panic!("an error without a code: {v}"));
                assert!(e["message"].as_str().is_some_and(|m| !m.is_empty()), "{v}");
                codes.push(code);
            }
            _ => panic!("neither result nor error: {v}"),
        }
    }
}

/// Statuses a zcoder ack may carry (docs/protocol.md §9: zcoder's words only).
const ZCODER_STATUSES: &[&str] = &[
    "pong",
    "accepted",
    "duplicate",
    "paused",
    "full",
    "invalid",
    "wrong_target",
    "unsupported",
];

/// A zcoder connection gets nothing (the sender went away mid-frame) or
/// exactly one well-formed ack frame.
fn check_zcoder_answer(out: &[u8]) -> Option<String> {
    if out.is_empty() {
        return None;
    }
    let nl = out
        .iter()
        .position(|&b| b == b'\n')
        .unwrap_or_else(|| panic!("an ack without a header: {}", show(out)));
    let n = wire::zcoder_length(&out[..nl], 1 << 20)
        .unwrap_or_else(|e| panic!("a bad ack header ({e}): {}", show(out)));
    let payload = &out[nl + 1..];
    assert_eq!(
        payload.len(),
        n,
        "an ack of the declared length: {}",
        show(out)
    );
    let ack = wire::parse_flat(payload).unwrap_or_else(|e| panic!("{e}: {}", show(out)));
    assert_eq!(ack.get("type"), Some(&json!("ack")), "{ack:?}");
    assert_eq!(ack.get("protocol"), Some(&json!(1)), "{ack:?}");
    let status = ack["status"].as_str().unwrap_or_default().to_string();
    assert!(
        ZCODER_STATUSES.contains(&status.as_str()),
        "not a zcoder status: {ack:?}"
    );
    Some(status)
}

/// `initialize` then `ping` on a fresh connection.
fn assert_pong(served: &Served) {
    let mut c = served.client();
    let r = c.call(7, "ping", json!({}));
    assert_eq!(r["result"]["status"], "pong", "{r}");
    assert_eq!(r["result"]["instance_id"], json!(served.id), "{r}");
}

#[test]
fn fuzzed_lines_and_frames_leave_a_live_instance_answering_pings() {
    let seed = fuzz_seed();
    let _report = SeedReport {
        seed,
        test: "fuzzed_lines_and_frames_leave_a_live_instance_answering_pings",
    };
    let mut r = Rng::new(seed ^ 0x6c69_7665);
    let env = Env::new();
    let ws = env.workspace("ws");
    let max = 4096;
    let fast = FastDir::new(&env);
    let served = env.serve_with(
        &ws,
        &[
            ("BATON_MAX_BYTES", "4096"),
            ("BATON_IO_TIMEOUT", "0.5"),
            ("BATON_FSYNC", "off"),
            ("BATON_MAX_QUEUE", "100000"),
            ("XDG_STATE_HOME", fast.0.to_str().unwrap()),
        ],
        &[],
    );
    let methods = method_pool();
    let initialize = wire::request_line(
        0,
        "initialize",
        json!({"protocol_version": 1, "client": {"name": "fuzz", "version": "0"}}),
    );
    let (mut lines, mut frames) = (0usize, 0usize);
    let mut results: Vec<String> = Vec::new();
    let mut codes = Vec::new();
    let mut statuses: Vec<String> = Vec::new();
    let started = Instant::now();
    for conn in 0..1_500 {
        if conn % 3 == 0 {
            let mut batch = Vec::new();
            if !r.one_in(10) {
                batch.extend_from_slice(&initialize);
            }
            for _ in 0..1 + r.below(12) {
                if r.one_in(40) {
                    batch.extend(std::iter::repeat_n(b'x', max + r.below(3)));
                } else if r.one_in(6) {
                    // A task, so that delivery is reached, not only parsing.
                    let params = Value::Object(good_send_params(&mut r, &served.id));
                    let mut line = wire::request_line(9, "message/send", params);
                    line.pop();
                    if r.one_in(4) {
                        mutate(&mut r, &mut line);
                    }
                    batch.extend(line);
                } else {
                    batch.extend(gen_line(&mut r, &methods, &served.id));
                }
                batch.push(b'\n');
                lines += 1;
            }
            if r.one_in(10) {
                batch.pop();
            }
            batch.truncate(60 * 1024);
            let out = exchange(&served.socket, &batch);
            case("a live line batch", &batch, || {
                check_line_answers(&out, &mut results, &mut codes)
            });
            // A random control/pause would refuse every later task as
            // `paused`, and the run would stop reaching the deeper checks.
            if batch.windows(13).any(|w| w == b"control/pause") {
                let mut c = served.client();
                let r = c.call(8, "control/resume", json!({}));
                assert!(r.get("result").is_some(), "{r}");
            }
        } else {
            let frame = gen_frame(&mut r, &served.id, max);
            let out = exchange(&served.socket, &frame);
            // The magic makes a zcoder connection; anything else is read
            // as JSON-RPC lines, except that a first line past the bound
            // that starts like zcoder's is answered in zcoder's framing.
            let zcoder = frame.starts_with(wire::ZCODER_MAGIC)
                || (frame.starts_with(b"ZCODER") && out.starts_with(wire::ZCODER_MAGIC));
            case("a live zcoder frame", &frame, || {
                if zcoder {
                    statuses.extend(check_zcoder_answer(&out));
                } else {
                    check_line_answers(&out, &mut results, &mut codes);
                }
            });
            frames += 1;
        }
        if conn % 100 == 99 {
            assert_pong(&served);
        }
    }
    assert_pong(&served);
    let mut served = served;
    assert!(served.is_running(), "the instance died");
    let stderr = served.stderr();
    assert!(
        !stderr.contains("panicked"),
        "a connection thread panicked:\n{stderr}"
    );
    let answered = results.len();
    let native_accepted = results.iter().filter(|s| *s == "accepted").count();
    let zcoder_accepted = statuses.iter().filter(|s| *s == "accepted").count();
    codes.sort_unstable();
    codes.dedup();
    results.sort();
    results.dedup();
    statuses.sort();
    statuses.dedup();
    eprintln!(
        "live fuzz: {lines} lines and {frames} frames in {:.1} s; {answered} results \
         (statuses {results:?}), error codes {codes:?}, zcoder statuses {statuses:?}; \
         {native_accepted} + {zcoder_accepted} tasks accepted; seed {seed}",
        started.elapsed().as_secs_f64()
    );
    // The run went past the parsers into delivery, on both wires.
    assert!(
        native_accepted > 0 && zcoder_accepted > 0,
        "no task was accepted on one of the wires"
    );
}

// ---------------------------------------------------------------------
// Directory and file attacks.
// ---------------------------------------------------------------------

fn euid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

fn mode_of(p: &Path) -> u32 {
    fs::symlink_metadata(p).unwrap().mode() & 0o7777
}

#[test]
fn registry_directory_table() {
    let env = Env::new();
    let ws = env.workspace("ws");
    let me = euid();
    let private_dir = |name: &str, mode: u32| {
        let p = env.root.join(name);
        fs::create_dir(&p).unwrap();
        fs::set_permissions(&p, fs::Permissions::from_mode(mode)).unwrap();
        p
    };

    // Missing: created with mode 0700, and used.
    assert!(fs::symlink_metadata(&env.registry).is_err());
    let mut served = env.serve(&ws, &[]);
    let meta = fs::symlink_metadata(&env.registry).unwrap();
    assert!(meta.is_dir());
    assert_eq!(
        (meta.mode() & 0o7777, meta.uid()),
        (0o700, me),
        "a created registry"
    );
    assert_eq!(served.term(), 0);

    let mut rows: Vec<(String, PathBuf, String)> = Vec::new();
    for mode in [0o750, 0o755, 0o777] {
        rows.push((
            format!("mode {mode:04o}"),
            private_dir(&format!("m{mode:o}"), mode),
            format!("has mode {mode:04o}, which gives group or other access (it must be 0700)"),
        ));
    }
    let (theirs, owner) = if me == 0 {
        let p = private_dir("theirs", 0o700);
        std::os::unix::fs::chown(&p, Some(65534), Some(65534)).unwrap();
        (p, 65534)
    } else {
        (PathBuf::from("/usr"), fs::metadata("/usr").unwrap().uid())
    };
    rows.push((
        "a foreign owner".into(),
        theirs,
        format!("is owned by uid {owner}, not by you (uid {me})"),
    ));
    let real = private_dir("real", 0o700);
    let link = env.root.join("link");
    symlink(&real, &link).unwrap();
    rows.push((
        "a symlink to a valid directory".into(),
        link,
        "is a symlink".into(),
    ));
    let file = env.root.join("file");
    fs::write(&file, b"not a directory\n").unwrap();
    fs::set_permissions(&file, fs::Permissions::from_mode(0o600)).unwrap();
    rows.push(("a regular file".into(), file, "is not a directory".into()));
    rows.push((
        "/".into(),
        PathBuf::from("/"),
        "is the root directory".into(),
    ));
    rows.push((
        "$HOME".into(),
        env.root.join("home"),
        "is your home directory".into(),
    ));

    for (what, dir, reason) in &rows {
        let before: Vec<_> = if dir.is_dir() && dir != Path::new("/") {
            fs::read_dir(dir)
                .unwrap()
                .map(|e| e.unwrap().path())
                .collect()
        } else {
            Vec::new()
        };
        let mode = mode_of(dir);
        let expected = format!(
            "baton: unsafe registry directory {}: {reason}\n",
            dir.display()
        );
        for args in [&["serve"][..], &["list", "--json"]] {
            let d = dir.to_str().unwrap();
            let out = env.run_with(&[("BATON_DIR", d)], Some(&ws), args, None);
            assert_eq!(
                (out.status, out.stdout.as_str(), out.stderr.as_str()),
                (2, "", expected.as_str()),
                "{what}: baton {args:?}"
            );
        }
        assert_eq!(mode_of(dir), mode, "{what}: the mode changed");
        if dir.is_dir() && dir != Path::new("/") {
            let after: Vec<_> = fs::read_dir(dir)
                .unwrap()
                .map(|e| e.unwrap().path())
                .collect();
            assert_eq!(after, before, "{what}: baton wrote into it");
        }
    }
    assert_eq!(fs::read_dir(&real).unwrap().count(), 0);
}

/// Content no write of baton's produces.
const CANARY: &[u8] = b"canary: baton must never write here\n";

/// A private directory on tmpfs (`/dev/shm`) where there is one, removed
/// when dropped: ten thousand file creations on a busy disk take minutes,
/// and the race is about names, not the disk.
struct FastDir(PathBuf);

impl FastDir {
    fn new(env: &Env) -> FastDir {
        let shm = Path::new("/dev/shm");
        if shm.is_dir() {
            static N: AtomicU64 = AtomicU64::new(0);
            let n = N.fetch_add(1, Ordering::Relaxed);
            let p = shm.join(format!("baton-hostile-{}-{n}", std::process::id()));
            if fs::DirBuilder::new().mode(0o700).create(&p).is_ok() {
                return FastDir(p);
            }
        }
        let p = env.root.join("fast");
        fs::DirBuilder::new().mode(0o700).create(&p).unwrap();
        FastDir(p)
    }
}

impl Drop for FastDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

#[test]
fn symlinks_raced_onto_temporary_names_are_never_written_through() {
    const ACCEPTS: usize = 10_000;
    let env = Env::new();
    let ws = env.workspace("ws");
    let fast = FastDir::new(&env);
    let mut served = env.serve_with(
        &ws,
        &[
            ("BATON_FSYNC", "off"),
            ("BATON_MAX_QUEUE", "100000"),
            ("XDG_STATE_HOME", fast.0.to_str().unwrap()),
        ],
        &[],
    );
    let spools: Vec<PathBuf> = fs::read_dir(fast.0.join("baton/spool"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(spools.len(), 1, "{spools:?}");
    let spool = spools[0].clone();
    let tmp = spool.join("tmp");
    let inbox = spool.join("inbox");
    let manifest_tmp = served.registry.join(format!("t-{}.tmp", served.id));

    let canary = env.root.join("canary");
    fs::write(&canary, CANARY).unwrap();
    fs::set_permissions(&canary, fs::Permissions::from_mode(0o600)).unwrap();
    // An old mtime, so that any write shows.
    let old = SystemTime::now() - Duration::from_secs(3600);
    fs::File::options()
        .write(true)
        .open(&canary)
        .unwrap()
        .set_modified(old)
        .unwrap();
    let before = fs::metadata(&canary).unwrap();

    // The attempt in flight: its number, the sequence number it will get,
    // and whether the main thread planted on it itself.
    let target = Arc::new(Mutex::new((0u64, 1u64, false)));
    let stop = Arc::new(AtomicBool::new(false));
    let planted = Arc::new(AtomicU64::new(0));
    let attacker = {
        let (target, stop, planted) = (target.clone(), stop.clone(), planted.clone());
        let (canary, tmp, manifest_tmp) = (canary.clone(), tmp.clone(), manifest_tmp.clone());
        thread::spawn(move || {
            let mut cycle = 0u64;
            while !stop.load(Ordering::Relaxed) {
                cycle += 1;
                let (attempt, seq, forced) = *target.lock().unwrap();
                // Names baton removes before creating: planted again and
                // again, never taken away, so each removal is raced.
                let _ = symlink(&canary, tmp.join("sequence"));
                let _ = symlink(&canary, &manifest_tmp);
                let name = tmp.join(format!("{seq:016}-race-{attempt}.json"));
                if !forced && symlink(&canary, &name).is_ok() {
                    planted.fetch_add(1, Ordering::Relaxed);
                    // Held for a varying while, then only what this thread
                    // planted is taken away: the name flickers.
                    thread::sleep(Duration::from_micros(25 * (cycle % 4)));
                    if fs::symlink_metadata(&name).is_ok_and(|m| m.file_type().is_symlink()) {
                        let _ = fs::remove_file(&name);
                    }
                }
                thread::sleep(Duration::from_micros(50));
            }
        })
    };

    let mut c = served.client();
    let mut control = served.client();
    let body = "a task that must land in inbox/ and nowhere else";
    let (mut accepted, mut refused, mut forced_refused, mut forced) = (0usize, 0usize, 0, 0);
    let mut attempt = 0u64;
    let started = Instant::now();
    while accepted < ACCEPTS {
        assert!(
            attempt < 5 * ACCEPTS as u64,
            "{accepted} accepted in {attempt} attempts"
        );
        let seq = accepted as u64 + 1;
        let id = format!("race-{attempt}");
        let name = format!("{seq:016}-{id}.json");
        let force = attempt % 50 == 49;
        *target.lock().unwrap() = (attempt, seq, force);
        if force {
            symlink(&canary, tmp.join(&name)).unwrap();
            forced += 1;
        }
        let r = c.call(attempt + 100, "message/send", served.msg(&id, body));
        match (r.get("result"), r.get("error")) {
            (Some(res), None) => {
                assert!(!force, "accepted through a planted symlink: {r}");
                assert_eq!(res["status"], "accepted", "{r}");
                assert_eq!(res["queue_position"], json!(accepted + 1), "{r}");
                let file = inbox.join(&name);
                let meta = fs::symlink_metadata(&file)
                    .unwrap_or_else(|e| panic!("{id} acknowledged, but {}: {e}", file.display()));
                assert!(
                    meta.file_type().is_file(),
                    "{} is not a regular file",
                    file.display()
                );
                let task: Value = serde_json::from_slice(&fs::read(&file).unwrap()).unwrap();
                assert_eq!(
                    (task["message_id"].as_str(), task["body"].as_str()),
                    (Some(id.as_str()), Some(body))
                );
                accepted += 1;
            }
            (None, Some(e)) => {
                assert_eq!(e["code"], json!(wire::INTERNAL_ERROR), "{r}");
                assert!(
                    e["message"]
                        .as_str()
                        .unwrap()
                        .contains("the task was not accepted"),
                    "{r}"
                );
                assert!(
                    fs::symlink_metadata(inbox.join(&name)).is_err(),
                    "refused, yet {name} is in inbox/"
                );
                refused += 1;
                forced_refused += usize::from(force);
            }
            _ => panic!("{r}"),
        }
        if attempt % 100 == 99 {
            // Each state change republishes the manifest through its
            // temporary name.
            assert!(
                control
                    .call(1, "control/pause", json!({}))
                    .get("result")
                    .is_some()
            );
            assert!(
                control
                    .call(2, "control/resume", json!({}))
                    .get("result")
                    .is_some()
            );
        }
        attempt += 1;
    }
    stop.store(true, Ordering::Relaxed);
    attacker.join().expect("the attacker thread");
    let elapsed = started.elapsed();

    assert_eq!(forced_refused, forced, "every planted name was refused");
    let after = fs::metadata(&canary).unwrap();
    assert_eq!(fs::read(&canary).unwrap(), CANARY, "the canary was written");
    assert_eq!(
        (after.ino(), after.len(), after.modified().unwrap()),
        (before.ino(), before.len(), before.modified().unwrap()),
        "the canary changed"
    );
    let mut in_inbox = 0;
    for e in fs::read_dir(&inbox).unwrap() {
        let e = e.unwrap();
        assert!(e.file_type().unwrap().is_file(), "{:?} in inbox/", e.path());
        in_inbox += 1;
    }
    assert_eq!(in_inbox, ACCEPTS, "one inbox file per acceptance");
    for e in fs::read_dir(&tmp).unwrap() {
        let e = e.unwrap();
        assert!(
            e.file_type().unwrap().is_symlink(),
            "baton left a temporary file behind: {:?}",
            e.path()
        );
    }

    // Unattacked, the instance works as before: it republishes a regular
    // manifest and accepts.
    control.call(3, "control/pause", json!({}));
    control.call(4, "control/resume", json!({}));
    assert!(
        fs::symlink_metadata(&served.manifest_path)
            .unwrap()
            .file_type()
            .is_file()
    );
    assert_eq!(served.manifest_state(), "ready");
    let res = served.send(&mut c, "after-the-race", body);
    assert_eq!(res["status"], "accepted", "{res}");
    assert_pong(&served);
    assert!(served.is_running());
    let stderr = served.stderr();
    let publish_failures = stderr.matches("publish manifest").count();
    eprintln!(
        "symlink race: {accepted} accepted, {refused} refused ({forced} planted by the test, \
         {} by the attacker thread) in {attempt} attempts, {publish_failures} manifest \
         publications refused, {:.1} s",
        planted.load(Ordering::Relaxed),
        elapsed.as_secs_f64()
    );
    assert!(!stderr.contains("panicked"), "{stderr}");
}

/// One pass over everything under `roots`: modes looser than private.
fn private_violations(roots: &[PathBuf], seen: &mut [usize; 3]) -> Vec<String> {
    let mut bad = Vec::new();
    let mut stack: Vec<PathBuf> = roots.to_vec();
    while let Some(p) = stack.pop() {
        // Things come and go while baton runs.
        let Ok(meta) = fs::symlink_metadata(&p) else {
            continue;
        };
        let mode = meta.mode() & 0o7777;
        let ft = meta.file_type();
        if ft.is_dir() {
            seen[0] += 1;
            if mode & 0o077 != 0 {
                bad.push(format!("directory {} has mode {mode:04o}", p.display()));
            }
            if let Ok(rd) = fs::read_dir(&p) {
                stack.extend(rd.filter_map(Result::ok).map(|e| e.path()));
            }
        } else if ft.is_file() {
            seen[1] += 1;
            if mode & 0o177 != 0 {
                bad.push(format!("file {} has mode {mode:04o}", p.display()));
            }
        } else if ft.is_socket() {
            seen[2] += 1;
            if mode & 0o077 != 0 {
                bad.push(format!("socket {} has mode {mode:04o}", p.display()));
            }
        } else {
            bad.push(format!(
                "{} is neither a file, a directory nor a socket",
                p.display()
            ));
        }
    }
    bad
}

#[test]
fn no_permission_window_while_instances_start() {
    let env = Env::new();
    // Everything baton creates lives under these; the test creates them
    // 0700 (the registry not at all).
    let roots = vec![
        env.registry.clone(),
        env.state.clone(),
        env.root.join("tmp"),
        env.root.join("home"),
    ];
    let stop = Arc::new(AtomicBool::new(false));
    let poller = {
        let (roots, stop) = (roots.clone(), stop.clone());
        thread::spawn(move || {
            let mut bad = Vec::new();
            let mut seen = [0usize; 3];
            let mut passes = 0usize;
            loop {
                let last = stop.load(Ordering::SeqCst);
                bad.extend(private_violations(&roots, &mut seen));
                passes += 1;
                if last {
                    return (bad, seen, passes);
                }
                // Baton never loosens a mode after creating something, so
                // a loose file would stay loose: a short pause misses
                // nothing and leaves the CPU to the instances.
                thread::sleep(Duration::from_micros(500));
            }
        })
    };
    let workspaces: Vec<PathBuf> = (0..4).map(|i| env.workspace(&format!("w{i}"))).collect();
    let start_all = || -> Vec<Served> {
        thread::scope(|s| {
            let handles: Vec<_> = workspaces
                .iter()
                .enumerate()
                .map(|(i, ws)| {
                    let env = &env;
                    s.spawn(move || {
                        let args: &[&str] = if i == 3 { &["--ephemeral-spool"] } else { &[] };
                        env.serve(ws, args)
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        })
    };
    for round in 0..2 {
        let mut all = start_all();
        for (i, served) in all.iter().enumerate() {
            // Where the kernel reports it (Linux 4.7 and later), the umask
            // says exactly what sampling can only suggest: 077 before
            // anything was created (docs/protocol.md §7).
            let status = fs::read_to_string(format!("/proc/{}/status", served.pid()));
            if let Some(umask) = status.ok().as_deref().and_then(|s| {
                s.lines()
                    .find_map(|l| l.strip_prefix("Umask:"))
                    .map(|v| v.trim().to_string())
            }) {
                assert_eq!(umask, "0077", "the umask of instance {i}");
            }
            let mut c = served.client();
            let res = served.send(&mut c, &format!("r{round}-{i}"), "a task on disk");
            assert_eq!(res["status"], "accepted", "{res}");
            c.call(2, "control/pause", json!({}));
            c.call(3, "control/resume", json!({}));
        }
        for served in &mut all {
            assert_eq!(served.term(), 0);
        }
    }
    stop.store(true, Ordering::SeqCst);
    let (bad, seen, passes) = poller.join().expect("the poller");
    eprintln!(
        "permission poller: {passes} passes, {} directories, {} files, {} sockets seen",
        seen[0], seen[1], seen[2]
    );
    assert!(bad.is_empty(), "looser than private: {bad:#?}");
    assert!(
        seen[1] > 0 && seen[2] > 0,
        "the poller saw no files or no sockets: {seen:?}"
    );
}

// ---------------------------------------------------------------------
// Peer credentials.
// ---------------------------------------------------------------------

const NOBODY: u32 = 65534;
/// Exit codes of the client that runs as `nobody`.
const CLOSED_UNREAD: i32 = 42;
const CLOSED_BEFORE_WRITE: i32 = 43;
const CLOSED_AFTER_READING: i32 = 44;
const ANSWERED: i32 = 45;
const NO_HANGUP: i32 = 46;
const CANNOT_CONNECT: i32 = 47;
const CANNOT_DROP: i32 = 48;

fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

/// The client, run in a forked child before exec: only async-signal-safe
/// calls (no allocation, no locks). It becomes `nobody`, connects, writes
/// `request`, and reports how the connection ended.
fn nobody_client(addr: &libc::sockaddr_un, len: libc::socklen_t, request: &[u8]) -> i32 {
    // SAFETY: plain system calls on memory this function owns or
    // borrows; the child is single-threaded and exits right after.
    unsafe {
        if libc::setgroups(0, std::ptr::null()) != 0
            || libc::setgid(NOBODY) != 0
            || libc::setuid(NOBODY) != 0
            || libc::geteuid() != NOBODY
        {
            return CANNOT_DROP;
        }
        libc::signal(libc::SIGPIPE, libc::SIG_IGN);
        let fd = libc::socket(libc::AF_UNIX, libc::SOCK_STREAM, 0);
        if fd < 0 || libc::connect(fd, (addr as *const libc::sockaddr_un).cast(), len) != 0 {
            return CANNOT_CONNECT;
        }
        if libc::write(fd, request.as_ptr().cast(), request.len()) < 0 {
            return if errno() == libc::EPIPE {
                CLOSED_BEFORE_WRITE
            } else {
                CANNOT_CONNECT
            };
        }
        let mut pfd = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        if libc::poll(&mut pfd, 1, 5000) <= 0 {
            return NO_HANGUP;
        }
        let mut buf = [0u8; 256];
        match libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) {
            n if n > 0 => ANSWERED,
            0 => CLOSED_AFTER_READING,
            _ if errno() == libc::ECONNRESET => CLOSED_UNREAD,
            _ => NO_HANGUP,
        }
    }
}

/// Runs `nobody_client` in a child process and returns its exit code.
fn connect_as_nobody(socket: &Path, request: &[u8]) -> i32 {
    // SAFETY: sockaddr_un is plain old data; all-zero is a valid value.
    let mut addr: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
    let path = socket.as_os_str().as_bytes();
    assert!(path.len() < addr.sun_path.len(), "socket path too long");
    for (d, s) in addr.sun_path.iter_mut().zip(path) {
        *d = *s as libc::c_char;
    }
    let len = std::mem::size_of::<libc::sockaddr_un>() as libc::socklen_t;
    let request = request.to_vec();
    // The program is never run: the child exits from `pre_exec`.
    let mut cmd = Command::new("/nonexistent/never-executed");
    cmd.stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    // SAFETY: the closure makes only async-signal-safe calls (see
    // `nobody_client`) and ends the child with `_exit`.
    unsafe {
        cmd.pre_exec(move || libc::_exit(nobody_client(&addr, len, &request)));
    }
    let mut child = cmd.spawn().expect("fork a client");
    match exited_or_killed(&mut child, Duration::from_secs(10)) {
        Some(status) => status.code().unwrap_or(-1),
        None => panic!("the nobody client did not finish in 10 s"),
    }
}

#[test]
fn a_client_of_another_uid_is_closed_before_a_byte_is_read() {
    if euid() != 0 {
        eprintln!(
            "skipped: a client of another uid needs root to start it (this is uid {})",
            euid()
        );
        return;
    }
    let env = Env::new();
    let ws = env.workspace("ws");
    let mut served = env.serve(&ws, &[]);
    // Loosen every permission on the way, so that only the peer check
    // stands between `nobody` and the instance.
    for a in env.root.path().ancestors().skip(1) {
        if mode_of(a) & 0o001 == 0 {
            eprintln!(
                "skipped: {} does not let other users through (mode {:04o})",
                a.display(),
                mode_of(a)
            );
            return;
        }
    }
    fs::set_permissions(env.root.path(), fs::Permissions::from_mode(0o711)).unwrap();
    fs::set_permissions(&served.registry, fs::Permissions::from_mode(0o777)).unwrap();
    fs::set_permissions(&served.socket, fs::Permissions::from_mode(0o777)).unwrap();
    assert_pong(&served);

    let mut request = wire::request_line(
        0,
        "initialize",
        json!({"protocol_version": 1, "client": {"name": "nobody", "version": "0"}}),
    );
    request.extend(wire::request_line(
        1,
        "message/send",
        served.msg("from-nobody", "run this as root"),
    ));
    let attempts = 3;
    for _ in 0..attempts {
        let code = connect_as_nobody(&served.socket, &request);
        let allowed: &[i32] = if cfg!(target_os = "linux") {
            // Linux tells a client whose bytes were never read
            // (ECONNRESET) from one whose bytes were read (EOF).
            &[CLOSED_UNREAD, CLOSED_BEFORE_WRITE]
        } else {
            &[CLOSED_UNREAD, CLOSED_BEFORE_WRITE, CLOSED_AFTER_READING]
        };
        let what = match code {
            CLOSED_UNREAD => "closed with the request unread",
            CLOSED_BEFORE_WRITE => "closed before the request was written",
            CLOSED_AFTER_READING => "closed after reading the request",
            ANSWERED => "answered",
            NO_HANGUP => "neither answered nor closed in 5 s",
            CANNOT_CONNECT => "could not connect (permissions on the way?)",
            CANNOT_DROP => "could not become nobody",
            _ => "ended unexpectedly",
        };
        assert!(
            allowed.contains(&code),
            "the nobody client: {what} (exit {code})"
        );
        eprintln!("the nobody client: {what}");
    }
    // Nothing of it was read, and the instance serves its own user.
    let mut c = served.client();
    assert_eq!(served.queued(&mut c), 0, "a task from nobody was queued");
    assert_pong(&served);
    let line = format!("refused a connection from uid {NOBODY}");
    wait_until("the refusal in the log", Duration::from_secs(5), || {
        served.stderr().contains(&line)
    });
    let logged = served.stderr().matches(&line).count();
    assert!(
        (1..=attempts).contains(&logged),
        "{logged} refusals logged for {attempts} connections"
    );
    assert!(served.is_running());
    assert_eq!(served.term(), 0);
}
