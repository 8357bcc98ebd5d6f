//! Sender verification (docs/protocol.md §5, "Sender verification"): a
//! claimed `sender.instance_id` holds only for the process that serves
//! that instance's socket now, as the kernel says of its listener (the
//! process itself, or a child of it that is no instance: zcoder's
//! listener). A manifest is a file any process of the user can write:
//! naming its own pid in one proves nothing.

use crate::offline::{activated, manifest_of};
use crate::util::{Env, RawClient, event_is, fake_manifest, have, transcript, wait_event};
use crate::zcoder::{LISTEN_PY, ListenerChild};
use serde_json::{Value, json};
use std::os::fd::AsRawFd;
use std::os::unix::fs::symlink;
use std::os::unix::net::{UnixListener, UnixStream};
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(20);

/// The parent of the live process `pid`.
fn parent_of(pid: u32) -> Option<u32> {
    baton::sys::process(pid).map(|p| p.ppid)
}

fn send(c: &mut RawClient, params: Value) -> Value {
    let r = c.call(1, "message/send", params);
    r.get("result")
        .cloned()
        .unwrap_or_else(|| panic!("message/send got no result: {r}"))
}

/// A process that writes `a-<its pid>-<n>.json` with `"name":"boss"` and
/// sends as that instance is not boss: neither with no socket behind the
/// manifest nor with another instance's socket linked in its place (by a
/// symlink or a hard link), although that instance is its child. The
/// task is refused `invalid` before `--accept-from boss` is asked, and
/// never reaches the inbox; `task/status` refuses the same claim.
#[test]
fn a_written_manifest_does_not_make_a_sender_verified() {
    let env = Env::new();
    let inbox = env.serve(
        &env.workspace("inbox"),
        &["--name", "inbox", "--accept-from", "boss"],
    );
    let me = std::process::id();
    let socket_of = |id: &str| inbox.registry.join(format!("a-{id}.sock"));
    let unserved = fake_manifest(&inbox.registry, me, "boss", "/w/boss");
    let borrowed = fake_manifest(&inbox.registry, me, "boss", "/w/boss");
    symlink(&inbox.socket, socket_of(&borrowed)).unwrap();
    let linked = fake_manifest(&inbox.registry, me, "boss", "/w/boss");
    std::fs::hard_link(&inbox.socket, socket_of(&linked)).unwrap();
    assert_eq!(parent_of(inbox.pid()), Some(me));
    let mut c = inbox.client();

    let r = send(&mut c, inbox.msg_from("f-1", "do as boss says", &unserved));
    assert_eq!(r["status"], "invalid", "{r}");
    let want = format!(
        "sender not verified: instance {unserved}'s socket {} cannot be reached: ",
        socket_of(&unserved).display()
    );
    let reason = r["reason"].as_str().unwrap_or_default();
    assert!(
        reason.starts_with(&want) && reason.contains("os error 2"),
        "{r}"
    );
    for (n, fake) in [(2, &borrowed), (3, &linked)] {
        let r = send(
            &mut c,
            inbox.msg_from(&format!("f-{n}"), "do as boss says", fake),
        );
        assert_eq!(r["status"], "invalid", "{r}");
        assert_eq!(
            r["reason"],
            format!(
                "sender not verified: instance {fake}'s socket {} is served by pid {}, a child of pid {me} that is instance {}",
                socket_of(fake).display(),
                inbox.pid(),
                inbox.id
            ),
            "{r}"
        );
    }
    let r = c.call(
        2,
        "task/status",
        json!({"message_id": "f-1", "sender_instance_id": unserved}),
    );
    assert_eq!(r["error"]["code"], -32602, "{r}");
    let message = r["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.starts_with(&format!(
            "invalid params: sender_instance_id {unserved}: instance {unserved}'s socket "
        )) && message.contains("cannot be reached"),
        "{r}"
    );

    let r = c.call(3, "inbox/list", json!({}));
    assert_eq!(r["result"]["queued"], json!([]), "{r}");
    let spool = inbox.spool();
    wait_event(&spool, "the third refusal", WAIT, |e| {
        event_is(e, "message.rejected", "f-3")
    });
    for e in transcript(&spool) {
        assert_ne!(e["kind"], "message.accepted", "{e}");
        assert_ne!(e["from"], "boss", "{e}");
    }
}

/// A sender that does listen on its socket, but whose backlog is full:
/// the check connects without waiting, so the sender is refused at once
/// (a hang would show as no answer within the client's 5 s) and the
/// receiver goes on answering.
#[test]
fn a_sender_whose_socket_takes_no_connection_is_refused_at_once() {
    let env = Env::new();
    let inbox = env.serve(
        &env.workspace("inbox"),
        &["--name", "inbox", "--accept-from", "boss"],
    );
    let full = fake_manifest(&inbox.registry, std::process::id(), "boss", "/w/boss");
    let socket = inbox.registry.join(format!("a-{full}.sock"));
    let listener = UnixListener::bind(&socket).unwrap();
    // SAFETY: listen(2) on a socket `listener` owns; a backlog of 0 holds
    // one connection, and the one made below fills it.
    assert_eq!(unsafe { libc::listen(listener.as_raw_fd(), 0) }, 0);
    let _waiting = UnixStream::connect(&socket).unwrap();
    let mut c = inbox.client();
    let r = send(&mut c, inbox.msg_from("b-1", "do as boss says", &full));
    assert_eq!(r["status"], "invalid", "{r}");
    assert_eq!(
        r["reason"],
        format!(
            "sender not verified: instance {full}'s socket {} cannot be reached: its backlog is full (EAGAIN)",
            socket.display()
        ),
        "{r}"
    );
    assert_eq!(c.call(2, "ping", json!({}))["result"]["status"], "pong");
}

/// The socket is asked once per connection and claimed id: a sender's
/// sends on one connection cost one connect to its socket, a new
/// connection one more. The manifest is still read at every send, so a
/// manifest that names another pid since is refused on that connection.
#[test]
fn a_sender_s_socket_is_asked_once_per_connection() {
    let env = Env::new();
    let inbox = env.serve(&env.workspace("inbox"), &["--name", "inbox"]);
    let me = fake_manifest(&inbox.registry, std::process::id(), "boss", "/w/boss");
    let manifest = inbox.registry.join(format!("a-{me}.json"));
    let listener = UnixListener::bind(inbox.registry.join(format!("a-{me}.sock"))).unwrap();
    listener.set_nonblocking(true).unwrap();
    let asked = || std::iter::from_fn(|| listener.accept().ok()).count();
    let mut c = inbox.client();
    for n in 0..3 {
        let r = send(&mut c, inbox.msg_from(&format!("o-{n}"), "task", &me));
        assert_eq!(r["status"], "accepted", "{r}");
    }
    assert_eq!(asked(), 1);
    let mut again = inbox.client();
    let r = send(&mut again, inbox.msg_from("o-3", "task", &me));
    assert_eq!(r["status"], "accepted", "{r}");
    assert_eq!(asked(), 1);

    let text = std::fs::read_to_string(&manifest).unwrap();
    let moved = text.replace(&format!("\"pid\":{}", std::process::id()), "\"pid\":1");
    assert_ne!(moved, text);
    std::fs::write(&manifest, moved).unwrap();
    let r = send(&mut c, inbox.msg_from("o-4", "task", &me));
    assert_eq!(r["status"], "invalid", "{r}");
    let reason = r["reason"].as_str().unwrap_or_default();
    assert!(reason.starts_with("sender not verified: "), "{r}");
}

/// The sender the check is for: a running instance named boss, relaying
/// through its own `relay/send`, is verified and let in by
/// `--accept-from boss`, and the task is from boss.
#[test]
fn an_instance_named_boss_relaying_is_verified() {
    let env = Env::new();
    let inbox = env.serve(
        &env.workspace("inbox"),
        &["--name", "inbox", "--accept-from", "boss"],
    );
    let boss = env.serve(&env.workspace("boss"), &["--name", "boss"]);
    for n in 1..=2 {
        let r = boss.client().call(
            1,
            "relay/send",
            json!({"target": inbox.id, "body": format!("task {n}")}),
        );
        assert_eq!(r["result"]["status"], "accepted", "{r}");
    }
    let r = inbox.client().call(2, "inbox/claim", json!({}));
    let task = &r["result"]["task"];
    assert_eq!(task["body"], "task 1", "{r}");
    assert_eq!(task["sender"]["instance_id"], boss.id.as_str(), "{r}");
    assert_eq!(task["sender"]["name"], "boss", "{r}");
    assert_eq!(task["sender"]["pid"], boss.pid(), "{r}");
    let envelope = task["envelope"].as_str().unwrap_or_default();
    assert!(envelope.starts_with("<agent_relay from=\"boss\" "), "{r}");
}

/// A socket-activated boss: the service manager (here, this test) bound
/// and listened on its wake socket, so the kernel names the manager as
/// its listener until the instance listens on it again, which it does at
/// start. Its relayed tasks are then verified like any instance's.
#[test]
fn a_socket_activated_instance_named_boss_relaying_is_verified() {
    let env = Env::new();
    let inbox = env.serve(
        &env.workspace("inbox"),
        &["--name", "inbox", "--accept-from", "boss"],
    );
    let wake = env.registry.join("w-boss.sock");
    let listener = UnixListener::bind(&wake).unwrap();
    let boss = activated(&env, &listener, &env.workspace("boss"), &["--name", "boss"]);
    let m = manifest_of(&env, boss.pid());
    assert_eq!(m["socket"], wake.display().to_string(), "{m}");
    let mut c = RawClient::connect(&wake).unwrap();
    c.initialize();
    let r = c.call(
        1,
        "relay/send",
        json!({"target": inbox.id, "body": "from the activated boss"}),
    );
    assert_eq!(r["result"]["status"], "accepted", "{r}");
    let r = inbox.client().call(2, "inbox/claim", json!({}));
    let task = &r["result"]["task"];
    assert_eq!(task["sender"]["name"], "boss", "{r}");
    assert_eq!(task["sender"]["pid"], boss.pid(), "{r}");
}

/// zcoder's layout (docs/zcoder.md, section 5): the manifest names the
/// main process, which sends, and a child of it listens on the socket. It
/// is verified. A socket served by a grandchild is not, nor a manifest
/// naming a pid that has exited, whoever serves its socket.
#[test]
fn a_sender_whose_socket_a_child_of_it_serves_is_verified_and_no_other() {
    if !have("python3") {
        return;
    }
    let env = Env::new();
    let inbox = env.serve(
        &env.workspace("inbox"),
        &["--name", "inbox", "--accept-from", "boss"],
    );
    let me = std::process::id();
    let socket_of = |id: &str| inbox.registry.join(format!("a-{id}.sock"));
    let child = fake_manifest(&inbox.registry, me, "boss", "/w/boss");
    let listener = ListenerChild::serve(&socket_of(&child));
    assert_ne!(listener.pid(), me);
    let mut c = inbox.client();
    let r = send(&mut c, inbox.msg_from("c-1", "from boss", &child));
    assert_eq!(r["status"], "accepted", "{r}");
    let r = inbox.client().call(2, "inbox/claim", json!({}));
    let task = &r["result"]["task"];
    assert_eq!(task["sender"]["name"], "boss", "{r}");
    assert_eq!(task["sender"]["instance_id"], child.as_str(), "{r}");
    assert_eq!(task["sender"]["pid"], me, "{r}");

    // A grandchild: `sh` runs the listener and waits for it.
    let deeper = fake_manifest(&inbox.registry, me, "boss", "/w/boss");
    let bound = UnixListener::bind(socket_of(&deeper)).unwrap();
    let script = "python3 -c \"$1\"; exit $?";
    let grandchild = ListenerChild::start(&bound, &["sh", "-c", script, "sh", LISTEN_PY]);
    drop(bound);
    assert_ne!(parent_of(grandchild.pid()), Some(me));
    let mut c = inbox.client();
    let r = send(&mut c, inbox.msg_from("c-2", "from boss", &deeper));
    assert_eq!(r["status"], "invalid", "{r}");
    assert_eq!(
        r["reason"],
        format!(
            "sender not verified: instance {deeper}'s socket {} is served by pid {}, not by pid {me} or a child of it",
            socket_of(&deeper).display(),
            grandchild.pid()
        ),
        "{r}"
    );

    // A manifest naming a pid that has exited: its socket served by a
    // child of this process changes nothing.
    let mut gone = std::process::Command::new("true").spawn().unwrap();
    let dead = gone.id();
    gone.wait().unwrap();
    let stale = fake_manifest(&inbox.registry, dead, "boss", "/w/boss");
    let _served = ListenerChild::serve(&socket_of(&stale));
    let r = send(&mut c, inbox.msg_from("c-3", "from boss", &stale));
    assert_eq!(r["status"], "invalid", "{r}");
    assert_eq!(
        r["reason"],
        format!(
            "sender not verified: instance {stale} has pid {dead}, but the connection comes from pid {me}"
        ),
        "{r}"
    );
}
