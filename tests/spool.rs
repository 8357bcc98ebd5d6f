//! The spool (docs/protocol.md §8) and the pull side of an instance (`inbox/*`,
//! `control/*`, `baton inbox`): crash safety under `kill -9`, FIFO order
//! with a busy receiver, the queue limit, pause and resume, steer, the
//! CLI's inbox commands, where spools live and when they go away, and
//! odd files (a FIFO, a socket or a directory where a file should be) set
//! aside, never waited on.

use std::fs;
use std::io::{ErrorKind, Write};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;

use serde_json::{Value, json};

use crate::util::{Env, RawClient, Served};

/// The reasons of docs/protocol.md §5 as the instance spells them.
const REASON_PAUSED: &str = "the instance is paused";
const REASON_DUPLICATE: &str = "this message_id was already accepted with the same body";
const REASON_REUSED: &str = "message_id reused with a different body";

const SPOOL_DIRS: [&str; 6] = [
    "tmp",
    "inbox",
    "processing",
    "done",
    "rejected",
    "interrupted",
];

/// A request whose answer must be a `result`; returns it.
fn rpc(c: &mut RawClient, method: &str, params: Value) -> Value {
    let r = c.call(7, method, params);
    r.get("result")
        .cloned()
        .unwrap_or_else(|| panic!("{method} failed: {r}"))
}

/// `message/send` from a plain sender; returns the `result`.
fn send(c: &mut RawClient, target: &str, id: &str, body: &str, mode: &str) -> Value {
    rpc(
        c,
        "message/send",
        json!({"message_id": id, "target_instance_id": target, "body": body,
               "sender": {}, "mode": mode}),
    )
}

fn claim(c: &mut RawClient) -> Value {
    rpc(c, "inbox/claim", json!({}))
}

fn complete(c: &mut RawClient, id: &str) -> Value {
    rpc(c, "inbox/complete", json!({"message_id": id}))
}

fn ping_state(c: &mut RawClient) -> String {
    let r = rpc(c, "ping", json!({}));
    assert_eq!(r["status"], "pong", "{r}");
    r["state"].as_str().expect("ping state").to_string()
}

/// Claims and expects exactly task `id`.
fn claim_expect(c: &mut RawClient, id: &str) -> Value {
    let r = claim(c);
    assert_eq!(r["status"], "claimed", "claim should give {id}: {r}");
    assert_eq!(r["task"]["message_id"], id, "claim order: {r}");
    r
}

fn complete_expect(c: &mut RawClient, id: &str) {
    let r = complete(c, id);
    assert_eq!(
        r,
        json!({"status": "completed", "message_id": id, "outcome": "done"})
    );
}

/// The message ids of one list of `inbox/list`.
fn listed(list: &Value, key: &str) -> Vec<String> {
    list[key]
        .as_array()
        .unwrap_or_else(|| panic!("inbox/list has no {key} array: {list}"))
        .iter()
        .map(|t| t["message_id"].as_str().expect("message_id").to_string())
        .collect()
}

/// Names in a directory, sorted.
fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("read_dir {}: {e}", dir.display()))
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    v.sort();
    v
}

/// Permission bits, without following a symlink.
fn mode(p: &Path) -> u32 {
    fs::symlink_metadata(p)
        .unwrap_or_else(|e| panic!("stat {}: {e}", p.display()))
        .mode()
        & 0o7777
}

/// Splits `<16 digits>-<id>.json`, asserting that shape.
fn split_task_name(name: &str) -> (u64, &str) {
    let stem = name
        .strip_suffix(".json")
        .unwrap_or_else(|| panic!("{name} does not end in .json"));
    let (seq, id) = stem
        .split_once('-')
        .unwrap_or_else(|| panic!("{name} has no <seq>-"));
    assert_eq!(seq.len(), 16, "sequence of {name} is not 16 digits");
    assert!(seq.bytes().all(|b| b.is_ascii_digit()), "{name}");
    (seq.parse().unwrap(), id)
}

/// The one spool directory named `<name>-<16 hex>` under the test's state
/// home, checked against the workspace hash when `sha256sum` exists.
fn persistent_spool(env: &Env, name: &str, ws: &Path) -> PathBuf {
    let base = env.state.join("baton").join("spool");
    let found: Vec<String> = names(&base)
        .into_iter()
        .filter(|n| n.starts_with(&format!("{name}-")))
        .collect();
    assert_eq!(
        found.len(),
        1,
        "spools for {name} in {}: {found:?}",
        base.display()
    );
    let hash = &found[0][name.len() + 1..];
    assert_eq!(hash.len(), 16, "{found:?}");
    assert!(
        hash.bytes()
            .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase()),
        "{found:?}"
    );
    if let Some(want) = sha256_prefix(ws) {
        assert_eq!(hash, want, "spool name hashes the canonical workspace");
    }
    base.join(&found[0])
}

/// The first 16 hex digits of sha256(workspace path), via `sha256sum`.
fn sha256_prefix(ws: &Path) -> Option<String> {
    let mut child = match std::process::Command::new("sha256sum")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
    {
        Ok(c) => c,
        Err(e) if e.kind() == ErrorKind::NotFound => return None,
        Err(e) => panic!("sha256sum: {e}"),
    };
    child
        .stdin
        .take()
        .unwrap()
        .write_all(ws.as_os_str().as_encoded_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    Some(String::from_utf8(out.stdout).unwrap()[..16].to_string())
}

/// Every directory in the spool tree is 0700 and every file 0600.
fn assert_private_tree(dir: &Path) {
    assert_eq!(mode(dir), 0o700, "{}", dir.display());
    for name in names(dir) {
        let p = dir.join(&name);
        let meta = fs::symlink_metadata(&p).unwrap();
        if meta.is_dir() {
            assert_private_tree(&p);
        } else {
            assert!(meta.is_file(), "{} is not a regular file", p.display());
            assert_eq!(mode(&p), 0o600, "{}", p.display());
        }
    }
}

fn task_id(i: usize) -> String {
    format!("m-{i:03}")
}

fn task_body(i: usize) -> String {
    format!("task {i}: rename helper_{i} and run its tests")
}

#[test]
fn kill9_loses_nothing_reruns_nothing_and_keeps_order() {
    let env = Env::new();
    let ws = env.workspace("crash");
    let args = ["--name", "crash"];
    let vars = [("BATON_MAX_QUEUE", "256")];
    let mut first = env.serve_with(&ws, &vars, &args);
    let me = std::process::id();

    // 200 tasks over one persistent connection, each acknowledged in turn.
    let mut c = first.client();
    for i in 0..200 {
        let r = send(&mut c, &first.id, &task_id(i), &task_body(i), "queue");
        assert_eq!(
            r,
            json!({"status": "accepted", "message_id": task_id(i),
                   "queue_position": i + 1, "state": "ready"}),
            "send {i}"
        );
    }
    let r = claim_expect(&mut c, "m-000");
    assert_eq!(r["task"]["body"], task_body(0));
    assert_eq!(first.manifest_state(), "busy");

    let spool = persistent_spool(&env, "crash", &ws);
    let before_inbox = names(&spool.join("inbox"));
    let before_processing = names(&spool.join("processing"));
    assert_eq!(before_inbox.len(), 199, "{before_inbox:?}");
    assert_eq!(before_processing.len(), 1, "{before_processing:?}");
    assert_eq!(split_task_name(&before_processing[0]).1, "m-000");

    first.kill9();
    drop(c);
    // Litter a crash can leave in tmp/: a half-written task and junk.
    let stray_task = spool.join("tmp").join("0000000000099999-m-999.json");
    fs::write(&stray_task, b"{\"message_id\": \"m-9").unwrap();
    fs::write(spool.join("tmp").join("stray"), b"junk").unwrap();

    let mut second = env.serve_with(&ws, &vars, &args);
    assert_ne!(second.id, first.id);
    let notes = second.stderr();
    assert!(
        notes.contains(&format!(
            "task file {} was mid-turn and is now in interrupted/",
            before_processing[0]
        )),
        "restart reports the interrupted task:\n{notes}"
    );

    // On disk: the inbox is exactly m-001..m-199 in acceptance order, the
    // same files as before the crash; m-000 is interrupted, not rerun.
    assert_eq!(
        names(&spool.join("tmp")),
        Vec::<String>::new(),
        "tmp/ swept"
    );
    assert_eq!(names(&spool.join("processing")), Vec::<String>::new());
    assert_eq!(names(&spool.join("done")), Vec::<String>::new());
    assert_eq!(names(&spool.join("rejected")), Vec::<String>::new());
    assert_eq!(names(&spool.join("interrupted")), before_processing);
    let inbox = names(&spool.join("inbox"));
    assert_eq!(inbox, before_inbox);
    let mut last_seq = split_task_name(&before_processing[0]).0;
    for (k, name) in inbox.iter().enumerate() {
        let i = k + 1;
        let (seq, id) = split_task_name(name);
        assert_eq!(id, task_id(i), "inbox position {k}: {inbox:?}");
        assert!(seq > last_seq, "sequence numbers increase: {inbox:?}");
        last_seq = seq;
        let task: Value =
            serde_json::from_slice(&fs::read(spool.join("inbox").join(name)).unwrap())
                .unwrap_or_else(|e| panic!("{name} is not JSON: {e}"));
        assert_eq!(task["message_id"], task_id(i), "{name}: {task}");
        assert_eq!(task["body"], task_body(i), "{name}: {task}");
        assert_eq!(task["seq"], seq, "{name}: {task}");
        assert_eq!(task["mode"], "queue", "{name}: {task}");
        assert_eq!(task["hop"], 0, "{name}: {task}");
        assert_eq!(task["wire"], "jsonrpc", "{name}: {task}");
        assert_eq!(task["peer_pid"], me, "{name}: {task}");
        assert!(task["accepted_at"].is_u64(), "{name}: {task}");
    }
    let interrupted: Value = serde_json::from_slice(
        &fs::read(spool.join("interrupted").join(&before_processing[0])).unwrap(),
    )
    .unwrap();
    assert_eq!(interrupted["message_id"], "m-000");
    assert_eq!(interrupted["body"], task_body(0));

    // Permissions: the spool and its parents are 0700, every file 0600.
    assert_private_tree(&spool);
    for d in SPOOL_DIRS {
        assert_eq!(mode(&spool.join(d)), 0o700, "{d}/");
    }
    assert_eq!(mode(&env.state.join("baton").join("spool")), 0o700);
    assert_eq!(mode(&env.state.join("baton")), 0o700);

    // Through the socket: the same picture.
    let mut c = second.client();
    let status = rpc(&mut c, "control/status", json!({}));
    assert_eq!(status["spool"], spool.display().to_string());
    assert_eq!(
        status["queue"],
        json!({"queued": 199, "processing": 0, "interrupted": 1, "max": 256})
    );
    let list = rpc(&mut c, "inbox/list", json!({}));
    let want: Vec<String> = (1..200).map(task_id).collect();
    assert_eq!(listed(&list, "queued"), want);
    assert_eq!(listed(&list, "processing"), Vec::<String>::new());
    assert_eq!(listed(&list, "interrupted"), vec!["m-000".to_string()]);
    assert_eq!(list["queued"][0]["bytes"], task_body(1).len());

    // Retried ids are recognised across the crash, interrupted one included.
    for i in [0, 5] {
        let r = send(&mut c, &second.id, &task_id(i), &task_body(i), "queue");
        assert_eq!(
            r,
            json!({"status": "duplicate", "message_id": task_id(i), "state": "ready",
                   "reason": REASON_DUPLICATE}),
        );
    }
    let r = send(&mut c, &second.id, "m-005", "a different body", "queue");
    assert_eq!(r["status"], "invalid", "{r}");
    assert_eq!(r["reason"], REASON_REUSED, "{r}");

    // The queue resumes at m-001; m-000 is not run again.
    claim_expect(&mut c, "m-001");
    complete_expect(&mut c, "m-001");
    let receipt = crate::util::receipt(&spool, "m-001").expect("m-001's receipt");
    assert_eq!(receipt["message_id"], "m-001");
    assert_eq!(receipt["outcome"], "done");
    for d in ["inbox", "processing"] {
        let left = names(&spool.join(d));
        assert!(
            !left.iter().any(|n| n.ends_with("-m-001.json")),
            "the payload of a finished task is removed: {d}/ {left:?}"
        );
    }
    claim_expect(&mut c, "m-002");

    // Sequence numbers never go backwards across the crash: a new task
    // sorts after everything accepted before it.
    let r = send(&mut c, &second.id, "m-200", &task_body(200), "queue");
    assert_eq!(r["status"], "accepted", "{r}");
    assert_eq!(r["queue_position"], 199, "197 queued + 1 processing + this");
    let inbox = names(&spool.join("inbox"));
    assert_eq!(
        split_task_name(inbox.last().unwrap()).1,
        "m-200",
        "{inbox:?}"
    );
    assert!(split_task_name(inbox.last().unwrap()).0 > last_seq);
    let list = rpc(&mut c, "inbox/list", json!({}));
    assert_eq!(listed(&list, "interrupted"), vec!["m-000".to_string()]);
    drop(c);

    assert_eq!(second.term(), 0, "{}", second.stderr());
    assert!(spool.join("inbox").is_dir(), "a persistent spool is kept");
}

#[test]
fn fifo_with_a_busy_receiver_queue_limit_pause_and_steer() {
    let env = Env::new();
    let ws = env.workspace("fifo");
    let srv = env.serve(&ws, &["--name", "fifo"]);
    let mut c = srv.client();
    let id = srv.id.clone();
    let qid = |i: usize| format!("q-{i:02}");
    let qbody = |i: usize| format!("queued job {i}");
    assert_eq!(srv.manifest_state(), "ready");
    assert_eq!(ping_state(&mut c), "ready");

    // One task claimed: the instance is busy.
    let r = send(&mut c, &id, &qid(0), &qbody(0), "queue");
    assert_eq!(r["queue_position"], 1, "{r}");
    assert_eq!(r["state"], "ready", "{r}");
    claim_expect(&mut c, &qid(0));
    assert_eq!(ping_state(&mut c), "busy");
    assert_eq!(srv.manifest_state(), "busy");
    let status = rpc(&mut c, "control/status", json!({}));
    assert_eq!(status["state"], "busy");
    assert_eq!(status["open_task"], qid(0));

    // The limit counts inbox plus processing: 15 more fill it to 16.
    for i in 1..16 {
        let r = send(&mut c, &id, &qid(i), &qbody(i), "queue");
        assert_eq!(
            r,
            json!({"status": "accepted", "message_id": qid(i),
                   "queue_position": i + 1, "state": "busy"}),
        );
    }
    let r = send(&mut c, &id, &qid(16), &qbody(16), "queue");
    assert_eq!(
        r,
        json!({"status": "full", "message_id": qid(16), "state": "busy",
               "reason": "the queue is full: 16 tasks waiting or running (BATON_MAX_QUEUE)"}),
    );
    let info = rpc(&mut c, "agent/info", json!({}));
    assert_eq!(
        info["queue"],
        json!({"queued": 15, "processing": 1, "max": 16})
    );

    // One open task at a time.
    let r = claim(&mut c);
    assert_eq!(
        r,
        json!({"status": "busy", "message_id": qid(0),
               "reason": "task q-00 is still open: complete it first"}),
    );
    let r = complete(&mut c, &qid(1));
    assert_eq!(r["status"], "invalid", "{r}");
    assert_eq!(r["reason"], "task q-01 is not open here", "{r}");
    complete_expect(&mut c, &qid(0));
    assert_eq!(srv.manifest_state(), "ready");
    assert_eq!(ping_state(&mut c), "ready");

    // The refused task was not recorded: the same id is accepted now.
    let r = send(&mut c, &id, &qid(16), &qbody(16), "queue");
    assert_eq!(r["status"], "accepted", "{r}");
    assert_eq!(r["queue_position"], 16, "{r}");
    let r = send(&mut c, &id, &qid(17), &qbody(17), "queue");
    assert_eq!(r["status"], "full", "{r}");

    // Complete + claim returns tasks in send order.
    for i in 1..5 {
        let r = claim_expect(&mut c, &qid(i));
        assert_eq!(r["task"]["body"], qbody(i));
        assert_eq!(srv.manifest_state(), "busy");
        complete_expect(&mut c, &qid(i));
        assert_eq!(srv.manifest_state(), "ready");
    }

    // Pause with a task open: paused wins over busy.
    claim_expect(&mut c, &qid(5));
    assert_eq!(srv.manifest_state(), "busy");
    let r = rpc(&mut c, "control/pause", json!({}));
    assert_eq!(r, json!({"state": "paused", "changed": true}));
    assert_eq!(srv.manifest_state(), "paused");
    assert_eq!(ping_state(&mut c), "paused");
    let r = send(&mut c, &id, &qid(17), &qbody(17), "queue");
    assert_eq!(
        r,
        json!({"status": "paused", "message_id": qid(17), "state": "paused",
               "reason": REASON_PAUSED}),
    );
    // A retry of an accepted id is still recognised while paused.
    let r = send(&mut c, &id, &qid(10), &qbody(10), "queue");
    assert_eq!(r["status"], "duplicate", "{r}");
    let queued_while_paused: Vec<String> = (6..17).map(qid).collect();
    let list = rpc(&mut c, "inbox/list", json!({}));
    assert_eq!(listed(&list, "queued"), queued_while_paused);
    assert_eq!(listed(&list, "processing"), vec![qid(5)]);
    // The open task can still be completed; claims are refused.
    complete_expect(&mut c, &qid(5));
    assert_eq!(srv.manifest_state(), "paused");
    for _ in 0..2 {
        let r = claim(&mut c);
        assert_eq!(r, json!({"status": "paused", "reason": REASON_PAUSED}));
    }
    let list = rpc(&mut c, "inbox/list", json!({}));
    assert_eq!(listed(&list, "queued"), queued_while_paused, "queue kept");
    assert_eq!(listed(&list, "processing"), Vec::<String>::new());
    let r = rpc(&mut c, "control/pause", json!({}));
    assert_eq!(r, json!({"state": "paused", "changed": false}));
    let r = rpc(&mut c, "control/resume", json!({}));
    assert_eq!(r, json!({"state": "ready", "changed": true}));
    assert_eq!(srv.manifest_state(), "ready");
    assert_eq!(ping_state(&mut c), "ready");
    let r = rpc(&mut c, "control/resume", json!({}));
    assert_eq!(r, json!({"state": "ready", "changed": false}));

    // Steer tasks go ahead of queued ones, in their own send order.
    let r = send(&mut c, &id, "s-1", "steer one", "steer");
    assert_eq!(r["status"], "accepted", "{r}");
    assert_eq!(r["queue_position"], 12, "{r}");
    let r = send(&mut c, &id, &qid(17), &qbody(17), "queue");
    assert_eq!(r["queue_position"], 13, "{r}");
    let r = send(&mut c, &id, "s-2", "steer two", "steer");
    assert_eq!(r["queue_position"], 14, "{r}");
    let list = rpc(&mut c, "inbox/list", json!({}));
    let mut order = vec!["s-1".to_string(), "s-2".to_string()];
    order.extend((6..18).map(qid));
    assert_eq!(listed(&list, "queued"), order, "inbox/list is claim order");
    for want in &order {
        let r = claim_expect(&mut c, want);
        let mode = if want.starts_with("s-") {
            "steer"
        } else {
            "queue"
        };
        assert_eq!(r["task"]["mode"], mode, "{r}");
        complete_expect(&mut c, want);
    }
    assert_eq!(claim(&mut c), json!({"status": "empty"}));
    assert_eq!(srv.manifest_state(), "ready");
    let status = rpc(&mut c, "control/status", json!({}));
    assert_eq!(
        status["queue"],
        json!({"queued": 0, "processing": 0, "interrupted": 0, "max": 16})
    );
    assert_eq!(status["open_task"], Value::Null);
}

#[test]
fn inbox_cli_claim_complete_list_and_status() {
    let env = Env::new();
    let ws = env.workspace("cliws");
    let srv = env.serve(&ws, &["--name", "clia"]);
    let mut c = srv.client();
    let sender = json!({"name": "alice"});
    for (mid, body) in [("c-1", "first line\nsecond line"), ("c-2", "the other job")] {
        let r = rpc(
            &mut c,
            "message/send",
            json!({"message_id": mid, "target_instance_id": srv.id, "body": body,
                   "sender": sender}),
        );
        assert_eq!(r["status"], "accepted", "{r}");
    }

    let out = env.run(&["inbox", "list", "clia", "--json"]);
    assert_eq!(out.status, 0, "{out:?}");
    let list: Value = serde_json::from_str(out.stdout.trim()).expect("list --json is JSON");
    assert_eq!(listed(&list, "queued"), ["c-1", "c-2"]);
    assert_eq!(listed(&list, "processing"), Vec::<String>::new());
    assert_eq!(listed(&list, "interrupted"), Vec::<String>::new());
    // A plain sender's claimed name is not recorded: it is shown as such.
    assert_eq!(list["queued"][0]["sender"].get("name"), None);
    assert_eq!(list["queued"][0]["sender"]["pid"], std::process::id());
    assert_eq!(list["queued"][0]["mode"], "queue");
    assert_eq!(list["queued"][0]["bytes"], "first line\nsecond line".len());

    let out = env.run(&["status", "clia", "--json"]);
    assert_eq!(out.status, 0, "{out:?}");
    let st: Value = serde_json::from_str(out.stdout.trim()).unwrap();
    assert_eq!(
        st["queue"],
        json!({"queued": 2, "processing": 0, "interrupted": 0, "max": 16})
    );
    assert_eq!(st["state"], "ready");
    assert_eq!(st["instance_id"], srv.id);
    assert_eq!(
        st["spool"],
        persistent_spool(&env, "clia", &ws).display().to_string()
    );

    // claim prints the envelope the agent reads.
    let out = env.run(&["inbox", "claim", "clia"]);
    assert_eq!(out.status, 0, "{out:?}");
    let cwd = fs::read_link("/proc/self/cwd")
        .map(|p| p.display().to_string())
        .unwrap_or_default();
    let mut lines = out.stdout.lines();
    assert_eq!(
        lines.next(),
        Some(
            format!(
                "<agent_relay from=\"(cli)\" instance=\"\" pid=\"{}\" workspace=\"{cwd}\" message_id=\"c-1\">",
                std::process::id()
            )
            .as_str()
        ),
        "{out:?}"
    );
    assert!(
        out.stdout
            .contains("\n\nfirst line\nsecond line\n\n</agent_relay>\n"),
        "body is literal and unannotated (no reply hint for a plain sender): {out:?}"
    );
    assert!(out.stdout.ends_with("</agent_relay>\n"), "{out:?}");

    let out = env.run(&["status", "clia", "--json"]);
    let st: Value = serde_json::from_str(out.stdout.trim()).unwrap();
    assert_eq!(
        st["queue"],
        json!({"queued": 1, "processing": 1, "interrupted": 0, "max": 16})
    );
    assert_eq!(st["state"], "busy");
    assert_eq!(st["open_task"], "c-1");

    let out = env.run(&["inbox", "claim", "clia"]);
    assert_eq!(out.status, 1, "a busy claim is a refusal: {out:?}");
    assert_eq!(out.stdout, "");
    assert_eq!(
        out.stderr,
        "baton: cannot claim: busy: task c-1 is still open: complete it first\n"
    );

    let out = env.run(&["inbox", "complete", "clia", "c-1"]);
    assert_eq!(out.status, 0, "{out:?}");
    assert_eq!(out.stdout, "completed c-1 (done)\n");

    let out = env.run(&["inbox", "claim", "clia", "--json"]);
    assert_eq!(out.status, 0, "{out:?}");
    let r: Value = serde_json::from_str(out.stdout.trim()).unwrap();
    assert_eq!(r["status"], "claimed");
    assert_eq!(r["task"]["message_id"], "c-2");
    assert_eq!(r["task"]["body"], "the other job");

    let out = env.run(&["inbox", "complete", "clia", "c-2", "--outcome", "failed"]);
    assert_eq!(out.status, 0, "{out:?}");
    assert_eq!(out.stdout, "completed c-2 (failed)\n");
    let spool = persistent_spool(&env, "clia", &ws);
    let receipt = crate::util::receipt(&spool, "c-2").expect("c-2's receipt");
    assert_eq!(receipt["outcome"], "failed");

    let out = env.run(&["inbox", "complete", "clia", "c-2"]);
    assert_eq!(out.status, 1, "{out:?}");
    assert_eq!(
        out.stderr,
        "baton: cannot complete: invalid: task c-2 is not open here\n"
    );

    let out = env.run(&["inbox", "claim", "clia"]);
    assert_eq!(out.status, 0, "{out:?}");
    assert_eq!(out.stdout, "");
    assert_eq!(
        out.stderr,
        "baton: nothing to claim: clia's inbox is empty\n"
    );

    let out = env.run(&["inbox", "list", "clia", "--json"]);
    let list: Value = serde_json::from_str(out.stdout.trim()).unwrap();
    assert_eq!(
        list,
        json!({"queued": [], "processing": [], "interrupted": [], "rejected": [], "awaiting_approval": []})
    );
    let out = env.run(&["status", "clia", "--json"]);
    let st: Value = serde_json::from_str(out.stdout.trim()).unwrap();
    assert_eq!(
        st["queue"],
        json!({"queued": 0, "processing": 0, "interrupted": 0, "max": 16})
    );
    assert_eq!(st["state"], "ready");
}

#[test]
fn ephemeral_spool_is_private_and_removed_at_exit() {
    let env = Env::new();
    let ws = env.workspace("ephws");
    let mut srv = env.serve(&ws, &["--name", "eph", "--ephemeral-spool"]);
    let mut c = srv.client();
    let st = rpc(&mut c, "control/status", json!({}));
    let dir = PathBuf::from(st["spool"].as_str().expect("status names the spool"));
    assert!(
        dir.starts_with(env.root.join("tmp")),
        "an ephemeral spool lives in the runtime dir ($TMPDIR here): {}",
        dir.display()
    );
    assert!(!dir.starts_with(&env.state), "{}", dir.display());
    let persistent = env.state.join("baton").join("spool");
    let under_state = if persistent.exists() {
        names(&persistent)
    } else {
        Vec::new()
    };
    assert!(
        !under_state.iter().any(|n| n.starts_with("eph-")),
        "no persistent spool for an ephemeral instance: {under_state:?}"
    );

    let r = send(&mut c, &srv.id, "e-1", "short-lived", "queue");
    assert_eq!(r["status"], "accepted", "{r}");
    let inbox = names(&dir.join("inbox"));
    assert_eq!(inbox.len(), 1, "{inbox:?}");
    assert_eq!(split_task_name(&inbox[0]).1, "e-1");
    assert_private_tree(&dir);
    drop(c);

    assert_eq!(srv.term(), 0, "{}", srv.stderr());
    assert!(
        fs::symlink_metadata(&dir).is_err(),
        "the ephemeral spool {} is removed at exit",
        dir.display()
    );
}

#[test]
fn persistent_spool_survives_sigterm_and_is_locked_while_live() {
    let env = Env::new();
    let ws = env.workspace("keepws");
    let ws_arg = ws.to_str().unwrap();
    let mut srv = env.serve(&ws, &["--name", "keep"]);
    let spool = persistent_spool(&env, "keep", &ws);

    // A second instance with the same name and workspace refuses to start.
    let out = env.run(&["serve", "--name", "keep", "--workspace", ws_arg]);
    assert_eq!(out.status, 2, "{out:?}");
    assert!(
        out.stderr
            .contains(&format!("is in use by pid {}", srv.pid())),
        "{out:?}"
    );
    assert_eq!(
        fs::read_to_string(spool.join("lock")).unwrap().trim(),
        srv.pid().to_string(),
        "the lock file holds the live pid"
    );

    let meta: Value = serde_json::from_slice(&fs::read(spool.join("meta.json")).unwrap()).unwrap();
    assert_eq!(meta["name"], "keep");
    assert_eq!(meta["workspace"], ws_arg);

    let mut c = srv.client();
    let r = send(&mut c, &srv.id, "k-1", "survive a restart", "queue");
    assert_eq!(r["status"], "accepted", "{r}");
    drop(c);
    assert_eq!(srv.term(), 0, "{}", srv.stderr());
    assert_eq!(
        crate::util::manifests(&env.registry),
        Vec::<PathBuf>::new(),
        "SIGTERM removes the manifest"
    );
    for d in SPOOL_DIRS {
        assert!(spool.join(d).is_dir(), "{d}/ kept after SIGTERM");
    }
    let inbox = names(&spool.join("inbox"));
    assert_eq!(inbox.len(), 1, "{inbox:?}");
    assert_eq!(split_task_name(&inbox[0]).1, "k-1");

    let srv = env.serve(&ws, &["--name", "keep"]);
    assert_eq!(
        srv.stderr().matches("interrupted/").count(),
        0,
        "an orderly stop with nothing open interrupts nothing: {}",
        srv.stderr()
    );
    let mut c = srv.client();
    let list = rpc(&mut c, "inbox/list", json!({}));
    assert_eq!(listed(&list, "queued"), ["k-1"]);
    let r = claim_expect(&mut c, "k-1");
    assert_eq!(r["task"]["body"], "survive a restart");
    complete_expect(&mut c, "k-1");
    drop(c);
    let mut srv = srv;
    assert_eq!(srv.term(), 0, "{}", srv.stderr());

    // The receipt outlives the instance: a retry after a restart is still a
    // duplicate, so the finished task does not run twice.
    let srv = env.serve(&ws, &["--name", "keep"]);
    let mut c = srv.client();
    let r = send(&mut c, &srv.id, "k-1", "survive a restart", "queue");
    assert_eq!(r["status"], "duplicate", "{r}");
    assert_eq!(claim(&mut c), json!({"status": "empty"}));
}

// Odd files (issue 17): a FIFO, a directory or a device where the spool
// expects a file is set aside (or refused) and never waited on.

/// The reason an instance gives for an id whose record cannot be read.
const REASON_UNREADABLE: &str =
    "message_id was accepted before, but its stored record cannot be read to compare bodies";

/// Makes a FIFO at `path`, as someone (or something) might plant one.
fn mkfifo(path: &Path) {
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: `c` is a NUL-terminated path that outlives the call.
    let r = unsafe { libc::mkfifo(c.as_ptr(), 0o600) };
    let e = std::io::Error::last_os_error();
    assert_eq!(r, 0, "mkfifo {}: {e}", path.display());
}

fn is_fifo(path: &Path) -> bool {
    use std::os::unix::fs::FileTypeExt;
    fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_fifo())
}

/// The name of task `id`'s file in `dir`.
fn task_file(dir: &Path, id: &str) -> String {
    let suffix = format!("-{id}.json");
    names(dir)
        .into_iter()
        .find(|n| n.ends_with(&suffix))
        .unwrap_or_else(|| panic!("no file of {id} in {}", dir.display()))
}

/// An instance `name` in `ws` that ran task r-1, whose receipt log is
/// then replaced by `odd`. A resend of r-1 reads the receipt to compare
/// bodies: it is answered (the record cannot be read) within the client's
/// 5 s. The instance, a client, the spool and the log's path.
fn a_receipt_replaced_by(
    env: &Env,
    ws: &Path,
    name: &str,
    odd: Odd,
) -> (Served, RawClient, PathBuf, PathBuf) {
    let inst = env.serve(ws, &["--name", name]);
    let mut c = inst.client();
    assert_eq!(
        send(&mut c, &inst.id, "r-1", "first", "queue")["status"],
        "accepted"
    );
    claim_expect(&mut c, "r-1");
    complete_expect(&mut c, "r-1");
    let spool = persistent_spool(env, name, ws);
    let receipt = spool.join("done").join("receipts-0000000001.jsonl");
    odd.plant(env, &receipt);
    let r = send(&mut c, &inst.id, "r-1", "first", "queue");
    assert_eq!(r["status"], "invalid", "{r}");
    assert_eq!(r["reason"], REASON_UNREADABLE, "{r}");
    (inst, c, spool, receipt)
}

#[test]
fn a_fifo_in_place_of_a_receipt_is_never_waited_on() {
    let env = Env::new();
    let ws = env.workspace("fifo-receipt");
    let (mut inst, c, _, receipt) = a_receipt_replaced_by(&env, &ws, "fr", Odd::Fifo);
    // So is everyone else.
    let mut other = inst.client();
    let r = send(&mut other, &inst.id, "r-2", "second", "queue");
    assert_eq!(r["status"], "accepted", "{r}");
    assert_eq!(ping_state(&mut other), "ready");
    drop((c, other));
    assert_eq!(inst.term(), 0, "{}", inst.stderr());

    // At start every receipt is read: the instance starts and says what it
    // found. The receipts that were in the log are gone with it (issue
    // 32: docs/protocol.md §8), so r-1 is a new task now.
    let mut again = env.serve(&ws, &["--name", "fr"]);
    let said = again.stderr();
    assert!(
        said.contains("done/receipts-0000000001.jsonl cannot be read (it is a FIFO, not a regular file): its receipts are not kept"),
        "{said}"
    );
    assert!(is_fifo(&receipt));
    let mut c = again.client();
    let r = send(&mut c, &again.id, "r-1", "first", "queue");
    assert_eq!(r["status"], "accepted", "{r}");
    claim_expect(&mut c, "r-2");
    complete_expect(&mut c, "r-2");
    drop(c);
    assert_eq!(again.term(), 0, "{}", again.stderr());
}

/// A FIFO planted in place of the transcript while the instance runs
/// (after its start set odd files aside) is never opened as one: reading
/// the log answers at once, and the instance goes on accepting.
#[test]
fn a_fifo_planted_as_the_transcript_while_running_is_never_waited_on() {
    let env = Env::new();
    let ws = env.workspace("fifo-live");
    let mut inst = env.serve(&ws, &["--name", "fl"]);
    let out = env.run_stdin(&["send", "fl", "-"], b"first");
    assert_eq!(out.status, 0, "{out:?}");
    let spool = persistent_spool(&env, "fl", &ws);
    let transcript = spool.join("transcript.jsonl");
    fs::remove_file(&transcript).unwrap();
    mkfifo(&transcript);
    let started = std::time::Instant::now();
    let out = env.run(&["log", "fl"]);
    assert_eq!(out.status, 0, "{out:?}");
    let out = env.run_stdin(&["send", "fl", "-"], b"second");
    assert_eq!(out.status, 0, "{out:?}");
    assert!(out.stdout.starts_with("accepted"), "{out:?}");
    assert!(
        started.elapsed() < std::time::Duration::from_secs(15),
        "took {:?}",
        started.elapsed()
    );
    assert!(is_fifo(&transcript));
    assert_eq!(inst.term(), 0, "{}", inst.stderr());
}

#[test]
fn fifos_in_place_of_meta_json_and_the_transcript_stall_nothing_and_are_set_aside() {
    let env = Env::new();
    let ws = env.workspace("fifo-meta");
    let mut inst = env.serve(&ws, &["--name", "fm"]);
    assert_eq!(inst.term(), 0, "{}", inst.stderr());
    let spool = persistent_spool(&env, "fm", &ws);
    let meta = spool.join("meta.json");
    fs::remove_file(&meta).unwrap();
    mkfifo(&meta);

    // Offline senders and `list --offline` read meta.json: without it
    // the name is unknown, which they say at once.
    let started = std::time::Instant::now();
    let out = env.run(&["list", "--offline"]);
    assert_eq!(out.status, 0, "{out:?}");
    assert!(!out.stdout.contains("fm"), "{out:?}");
    let out = env.run_stdin(&["send", "fm", "-"], b"hello");
    assert_eq!(out.status, 3, "{out:?}");
    assert!(
        started.elapsed() < std::time::Duration::from_secs(15),
        "took {:?}",
        started.elapsed()
    );

    // The instance sets it aside and writes a new one.
    let mut again = env.serve(&ws, &["--name", "fm"]);
    let said = again.stderr();
    assert!(
        said.contains("meta.json is a FIFO, not a regular file; moved to rejected/meta.json"),
        "{said}"
    );
    assert!(is_fifo(&spool.join("rejected").join("meta.json")));
    assert!(fs::symlink_metadata(&meta).unwrap().is_file());
    assert_eq!(again.term(), 0, "{}", again.stderr());
    let out = env.run_stdin(&["send", "fm", "-"], b"hello");
    assert_eq!(out.status, 0, "{out:?}");
    assert!(out.stdout.starts_with("stored"), "{out:?}");

    // The transcript is appended to by the offline sender and the
    // instance: a FIFO there is set aside by whichever opens the spool.
    let transcript = spool.join("transcript.jsonl");
    fs::remove_file(&transcript).unwrap();
    mkfifo(&transcript);
    let out = env.run_stdin(&["send", "fm", "-"], b"hello again");
    assert_eq!(out.status, 0, "{out:?}");
    assert!(is_fifo(&spool.join("rejected").join("transcript.jsonl")));
    assert!(fs::symlink_metadata(&transcript).unwrap().is_file());
    mkfifo(&spool.join("transcript.1.jsonl"));
    let mut third = env.serve(&ws, &["--name", "fm"]);
    assert!(is_fifo(&spool.join("rejected").join("transcript.1.jsonl")));
    let mut c = third.client();
    let r = claim(&mut c);
    assert_eq!(
        r["task"]["body"], "hello",
        "the stored tasks are queued: {r}"
    );
    drop(c);
    assert_eq!(third.term(), 0, "{}", third.stderr());
}

#[test]
fn a_directory_in_tmp_is_set_aside_and_the_instance_starts() {
    let env = Env::new();
    let ws = env.workspace("dir-in-tmp");
    let mut inst = env.serve(&ws, &["--name", "dt"]);
    let mut c = inst.client();
    for id in ["d-1", "d-2"] {
        let r = send(&mut c, &inst.id, id, &format!("body of {id}"), "queue");
        assert_eq!(r["status"], "accepted", "{r}");
    }
    drop(c);
    assert_eq!(inst.term(), 0, "{}", inst.stderr());
    let spool = persistent_spool(&env, "dt", &ws);
    let tmp = spool.join("tmp");
    fs::create_dir(tmp.join("junk")).unwrap();
    fs::write(tmp.join("junk").join("kept"), b"not ours").unwrap();
    mkfifo(&tmp.join("pipe"));
    fs::write(tmp.join("0000000000000099-x.json"), b"{\"half").unwrap();

    let mut again = env.serve(&ws, &["--name", "dt"]);
    let said = again.stderr();
    for (name, kind) in [("junk", "a directory"), ("pipe", "a FIFO")] {
        assert!(
            said.contains(&format!(
                "tmp/{name} is {kind}, not a file baton writes; moved to rejected/{name}"
            )),
            "{said}"
        );
    }
    assert_eq!(names(&tmp), Vec::<String>::new(), "tmp/ is swept");
    let rejected = spool.join("rejected");
    assert_eq!(
        fs::read(rejected.join("junk").join("kept")).unwrap(),
        b"not ours"
    );
    assert!(is_fifo(&rejected.join("pipe")));
    let mut c = again.client();
    for id in ["d-1", "d-2"] {
        claim_expect(&mut c, id);
        complete_expect(&mut c, id);
    }
    drop(c);
    assert_eq!(again.term(), 0, "{}", again.stderr());
}

/// Plants a Unix socket at `path`: bound under `short` (a socket path
/// must fit `sun_path`; a spool path may not), then renamed into place.
fn plant_socket(short: &Path, path: &Path) {
    let at = short.join("planted.sock");
    drop(std::os::unix::net::UnixListener::bind(&at).unwrap());
    fs::rename(&at, path).unwrap();
    assert!(is_socket(path));
}

fn is_socket(path: &Path) -> bool {
    use std::os::unix::fs::FileTypeExt;
    fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_socket())
}

/// What stands in place of a task file, and how it is named.
#[derive(Clone, Copy)]
enum Odd {
    Fifo,
    Socket,
}

impl Odd {
    fn plant(self, env: &Env, path: &Path) {
        fs::remove_file(path).unwrap();
        match self {
            Odd::Fifo => mkfifo(path),
            Odd::Socket => plant_socket(env.root.path(), path),
        }
    }

    fn is(self, path: &Path) -> bool {
        match self {
            Odd::Fifo => is_fifo(path),
            Odd::Socket => is_socket(path),
        }
    }

    fn named(self) -> &'static str {
        match self {
            Odd::Fifo => "a FIFO",
            Odd::Socket => "a socket",
        }
    }
}

/// `at_claim` stands where the first of four queued task files was: the
/// claim names it (it is never waited on: open(2) refuses a socket with
/// ENXIO, and a FIFO is opened without blocking), sets it aside and hands
/// out the second task in the same answer. Then `at_start` stand where the
/// third and fourth were: a start names and sets them aside too.
fn an_odd_task_file_is_named_and_set_aside(tag: &str, at_claim: Odd, at_start: [Odd; 2]) {
    let env = Env::new();
    let ws = env.workspace(tag);
    let mut inst = env.serve(&ws, &["--name", tag]);
    let mut c = inst.client();
    let ids = ["t-1", "t-2", "t-3", "t-4"];
    for id in ids {
        let r = send(&mut c, &inst.id, id, &format!("body of {id}"), "queue");
        assert_eq!(r["status"], "accepted", "{r}");
    }
    let spool = persistent_spool(&env, tag, &ws);
    let inbox = spool.join("inbox");
    let files: Vec<String> = ids.iter().map(|id| task_file(&inbox, id)).collect();
    at_claim.plant(&env, &inbox.join(&files[0]));

    let r = claim_expect(&mut c, "t-2");
    let reason = format!("it is {}, not a regular file", at_claim.named());
    assert_eq!(
        r["rejected"],
        json!([{"message_id": "t-1", "reason": reason}]),
        "{r}"
    );
    assert!(at_claim.is(&spool.join("rejected").join(&files[0])));
    complete_expect(&mut c, "t-2");
    drop(c);
    assert_eq!(inst.term(), 0, "{}", inst.stderr());

    for (odd, file) in at_start.iter().zip(&files[2..]) {
        odd.plant(&env, &inbox.join(file));
    }
    let mut again = env.serve(&ws, &["--name", tag]);
    let said = again.stderr();
    for (odd, file) in at_start.iter().zip(&files[2..]) {
        let kind = odd.named();
        assert!(
            said.contains(&format!(
                "inbox/{file}: it is {kind}, not a regular file; moved to rejected/{file}"
            )),
            "{said}"
        );
        assert!(odd.is(&spool.join("rejected").join(file)));
    }
    let mut c = again.client();
    let list = rpc(&mut c, "inbox/list", json!({}));
    assert_eq!(listed(&list, "queued"), Vec::<String>::new(), "{list}");
    assert_eq!(listed(&list, "rejected"), ["t-1", "t-3", "t-4"], "{list}");
    assert_eq!(claim(&mut c)["status"], "empty");
    drop(c);
    assert_eq!(again.term(), 0, "{}", again.stderr());
}

#[test]
fn a_fifo_in_place_of_a_task_file_is_set_aside_at_claim_and_at_start() {
    an_odd_task_file_is_named_and_set_aside("ft", Odd::Fifo, [Odd::Fifo, Odd::Fifo]);
}

#[test]
fn a_socket_in_place_of_a_task_file_is_named_and_set_aside_at_claim_and_at_start() {
    an_odd_task_file_is_named_and_set_aside("st", Odd::Socket, [Odd::Socket, Odd::Fifo]);
}

/// A socket in place of a receipt or of `meta.json`: a resend of the
/// receipt's id is answered at once, and a start names both for what they
/// are (not "No such device or address") and goes on.
#[test]
fn sockets_in_place_of_a_receipt_and_meta_json_are_named_and_never_waited_on() {
    let env = Env::new();
    let ws = env.workspace("sock-receipt");
    let (mut inst, mut c, spool, receipt) = a_receipt_replaced_by(&env, &ws, "sr", Odd::Socket);
    assert_eq!(ping_state(&mut c), "ready");
    drop(c);
    assert_eq!(inst.term(), 0, "{}", inst.stderr());

    let meta = spool.join("meta.json");
    fs::remove_file(&meta).unwrap();
    plant_socket(env.root.path(), &meta);
    let out = env.run(&["list", "--offline"]);
    assert_eq!(out.status, 0, "{out:?}");
    assert!(!out.stdout.contains("sr"), "{out:?}");

    let mut again = env.serve(&ws, &["--name", "sr"]);
    let said = again.stderr();
    assert!(
        said.contains("done/receipts-0000000001.jsonl cannot be read (it is a socket, not a regular file): its receipts are not kept"),
        "{said}"
    );
    assert!(
        said.contains("meta.json is a socket, not a regular file; moved to rejected/meta.json"),
        "{said}"
    );
    assert!(is_socket(&receipt));
    assert!(is_socket(&spool.join("rejected").join("meta.json")));
    assert!(fs::symlink_metadata(&meta).unwrap().is_file());
    let mut c = again.client();
    let r = send(&mut c, &again.id, "r-1", "first", "queue");
    assert_eq!(r["status"], "accepted", "{r}");
    drop(c);
    assert_eq!(again.term(), 0, "{}", again.stderr());
}

/// A FIFO in place of `handler.json` (the record of the running handler,
/// written as each turn starts) is never opened as one: the turn starts
/// and finishes, and the record replaces the FIFO.
#[test]
fn a_fifo_in_place_of_the_handler_record_does_not_hold_up_a_turn() {
    let env = Env::new();
    let ws = env.workspace("fifo-handler");
    let mut inst = env.serve(
        &ws,
        &["--name", "fh", "--exec", "cat > /dev/null; echo ran"],
    );
    let spool = persistent_spool(&env, "fh", &ws);
    let record = spool.join("handler.json");
    mkfifo(&record);
    let mut c = inst.client();
    let r = send(&mut c, &inst.id, "h-1", "run me", "queue");
    assert_eq!(r["status"], "accepted", "{r}");
    let fin = crate::util::wait_event(
        &spool,
        "turn.finished for h-1",
        std::time::Duration::from_secs(15),
        |e| crate::util::event_is(e, "turn.finished", "h-1"),
    );
    assert_eq!(fin["outcome"], "done", "{fin}");
    assert_eq!(ping_state(&mut c), "ready");
    assert!(!is_fifo(&record), "the record replaced the FIFO");
    drop(c);
    assert_eq!(inst.term(), 0, "{}", inst.stderr());
}
