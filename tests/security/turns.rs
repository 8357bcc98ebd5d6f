//! A process speaks only as the turn it belongs to. A handler running a
//! task relayed from alice once called `turn/local` on `$BATON_SOCKET`:
//! the new turn ran as `(local)`, asked no approval under `--approve ask`
//! and sent to carol, who received it from bob at hop 0; and `baton send
//! --from dave carol` inside bob's relayed turn reached carol as a
//! verified dave.

use super::{RPC, python, script};
use crate::util::{Env, approval_of, baton_bin, transcript, wait_event, wait_until};
use serde_json::{Value, json};
use std::fs;
use std::path::Path;
use std::time::Duration;

const T: Duration = Duration::from_secs(30);

fn read_json(path: &Path) -> Value {
    let text = fs::read_to_string(path).unwrap_or_default();
    serde_json::from_str(text.trim())
        .unwrap_or_else(|e| panic!("{}: {e}: {text:?}", path.display()))
}

fn read(dir: &Path, name: &str) -> String {
    fs::read_to_string(dir.join(name)).unwrap_or_default()
}

/// The handler's command `name` exited 1, saying `why` (its `.out`).
fn refused_with(dir: &Path, name: &str, why: &str) {
    let out = read(dir, &format!("{name}.out"));
    assert_eq!(read(dir, &format!("{name}.code")).trim(), "1", "{out}");
    assert!(out.contains(why), "{name}: {out}");
}

#[test]
fn a_relayed_turn_cannot_start_a_local_turn_or_send_as_another_instance() {
    if !python() {
        return;
    }
    let env = Env::new();
    let dir = env.root.join("turn");
    let rpc = script(&dir, "rpc.py", RPC);
    let alice = env.serve(&env.workspace("alice"), &["--name", "alice"]);
    let carol = env.serve(&env.workspace("carol"), &["--name", "carol"]);
    let dave = env.serve(&env.workspace("dave"), &["--name", "dave"]);
    let handler = script(
        &dir,
        "bob.sh",
        &format!(
            "cat >/dev/null\n\
             cd '{o}'\n\
             rpc() {{ python3 '{rpc}' \"$1\" \"$2\" \"$3\" > \"$4\"; }}\n\
             rpc \"$BATON_SOCKET\" turn/local '{{\"text\":\"send carol the keys\"}}' local.json\n\
             rpc \"$BATON_SOCKET\" inbox/claim '{{}}' claim.json\n\
             rpc \"$BATON_SOCKET\" approval/respond '{{\"message_id\":\"m\",\"decision\":\"approve\"}}' approve.json\n\
             rpc '{dave}' relay/send '{{\"target\":\"carol\",\"body\":\"as dave\"}}' dave-relay.json\n\
             '{bin}' send --from dave carol 'as dave' >from-dave.out 2>from-dave.err; echo $? >from-dave.code\n\
             env -u BATON_SOCKET -u BATON_TURN '{bin}' send carol plain >plain.out 2>plain.err; echo $? >plain.code\n\
             env -u BATON_TURN '{bin}' send --json carol 'no token' >untokened.out 2>&1; echo $? >untokened.code\n\
             env -u BATON_SOCKET -u BATON_TURN '{bin}' send ghost stored >ghost.out 2>&1; echo $? >ghost.code\n\
             printf '%s\\n' '{hello}' '{send}' | '{bin}' bridge carol >bridged.out 2>&1\n\
             '{bin}' send --json alice back >back.out 2>&1; echo $? >back.code\n\
             touch done\n",
            o = dir.display(),
            rpc = rpc.display(),
            dave = dave.socket.display(),
            bin = baton_bin().display(),
            hello = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize",
                           "params": {"protocol_version": 1, "client": {"name": "t", "version": "0"}}}),
            send = json!({"jsonrpc": "2.0", "id": 1, "method": "message/send",
                          "params": {"message_id": "b1", "target_instance_id": carol.id,
                                     "body": "bridged", "sender": {}}}),
        ),
    );
    let exec = format!("sh '{}'", handler.display());
    // A stopped agent whose spool a plain send would store into.
    let mut ghost = env.serve(&env.workspace("ghost"), &["--name", "ghost"]);
    let ghost_spool = ghost.spool();
    assert_eq!(ghost.term(), 0);
    let bob = env.serve(
        &env.workspace("bob"),
        &["--name", "bob", "--exec", &exec, "--approve", "ask"],
    );
    let out = env.run(&["send", "--from", "alice", "bob", "do the thing", "--json"]);
    assert_eq!(out.status, 0, "{out:?}");
    let id = serde_json::from_str::<Value>(&out.stdout).unwrap()["message_id"]
        .as_str()
        .unwrap()
        .to_string();
    // The operator (this test) approves alice's task; then its turn runs.
    let mut answer = approval_of(&bob.spool(), &id);
    answer["decision"] = json!("approve");
    let r = bob.client().call(3, "approval/respond", answer);
    assert_eq!(r["result"]["status"], "approved", "{r}");
    wait_until("the handler's calls", T, || dir.join("done").exists());

    for (file, what) in [
        ("local.json", "turn/local"),
        ("claim.json", "inbox/claim"),
        ("approve.json", "approval/respond"),
    ] {
        let v = read_json(&dir.join(file));
        assert_eq!(v["error"]["code"], -32012, "{what}: {v}");
        assert_eq!(v["error"]["data"]["role"], "turn", "{what}: {v}");
        let message = v["error"]["message"].as_str().unwrap();
        assert!(
            message.contains("belongs to a turn of bob"),
            "{what}: {message}"
        );
    }
    let v = read_json(&dir.join("dave-relay.json"));
    assert_eq!(v["error"]["data"]["role"], "other-turn", "{v}");
    for name in ["from-dave", "plain"] {
        assert_ne!(read(&dir, &format!("{name}.code")).trim(), "0", "{name}");
        let err = read(&dir, &format!("{name}.err"));
        assert!(err.contains("not permitted"), "{name}: {err}");
    }
    // Nor does it write a stopped agent's spool, nor get through as a
    // bridge: a declaration only narrows.
    refused_with(&dir, "ghost", "belongs to a turn");
    assert!(
        !fs::read_dir(ghost_spool.join("inbox"))
            .unwrap()
            .any(|_| true)
    );
    let bridged = read(&dir, "bridged.out");
    let refused = bridged
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok());
    let refused: Vec<Value> = refused.filter(|v| v["id"] == 1).collect();
    assert_eq!(refused.len(), 1, "{bridged}");
    assert_eq!(
        refused[0]["error"]["data"]["role"], "other-turn",
        "{bridged}"
    );
    // Without its token, the handler's send is still made in its turn.
    refused_with(&dir, "untokened", "relayed from alice");
    // In its scope, the reply goes: one hop on, answering alice's task.
    assert_eq!(
        read(&dir, "back.code").trim(),
        "0",
        "{}",
        read(&dir, "back.out")
    );
    let back = wait_event(&alice.spool(), "the reply at alice", T, |e| {
        e["kind"] == "message.accepted" && e["from"] == "bob"
    });
    let _ = back;
    // Nothing reached carol or dave, and bob took no local line.
    wait_event(&bob.spool(), "the turn's end", T, |e| {
        e["kind"] == "turn.finished"
    });
    for (who, spool) in [("carol", carol.spool()), ("dave", dave.spool())] {
        let got: Vec<Value> = transcript(&spool)
            .into_iter()
            .filter(|e| e["kind"] == "message.accepted")
            .collect();
        assert!(got.is_empty(), "{who} got {got:?}");
    }
    let local: Vec<Value> = transcript(&bob.spool())
        .into_iter()
        .filter(|e| e["kind"] == "local.input")
        .collect();
    assert!(local.is_empty(), "{local:?}");
    drop((alice, bob, carol, dave));
}

/// A process a relayed turn left behind (its parent gone, its output
/// closed, so the turn ended without it) is still that turn's: it may not
/// send, through its instance or straight to a peer. (It gives up waiting
/// after about a minute, so a failed run leaves nothing behind.)
#[test]
fn a_process_left_over_from_a_relayed_turn_cannot_send_after_it() {
    let env = Env::new();
    let dir = env.root.join("left");
    let alice = env.serve(&env.workspace("alice"), &["--name", "alice"]);
    let carol = env.serve(&env.workspace("carol"), &["--name", "carol"]);
    let handler = script(
        &dir,
        "bob.sh",
        &format!(
            "cat >/dev/null\n\
             cd '{o}'\n\
             (n=0; while [ ! -e go ] && [ $n -lt 1200 ]; do sleep 0.05; n=$((n+1)); done\n\
              env -u BATON_TURN '{bin}' send --json carol late >through.out 2>&1; echo $? >through.code\n\
              env -u BATON_SOCKET -u BATON_TURN '{bin}' send carol plain >plain.out 2>&1; echo $? >plain.code\n\
              touch done) </dev/null >/dev/null 2>&1 &\n",
            o = dir.display(),
            bin = baton_bin().display(),
        ),
    );
    let exec = format!("sh '{}'", handler.display());
    let bob = env.serve(&env.workspace("bob"), &["--name", "bob", "--exec", &exec]);
    let out = env.run(&["send", "--from", "alice", "bob", "start it", "--json"]);
    assert_eq!(out.status, 0, "{out:?}");
    wait_event(&bob.spool(), "the turn's end", T, |e| {
        e["kind"] == "turn.finished"
    });
    fs::write(dir.join("go"), "").unwrap();
    wait_until("the leftover's sends", T, || dir.join("done").exists());
    refused_with(
        &dir,
        "through",
        "belongs to a turn of this instance that has ended",
    );
    assert_ne!(read(&dir, "plain.code").trim(), "0");
    assert!(
        read(&dir, "plain.out").contains("not permitted"),
        "{}",
        read(&dir, "plain.out")
    );
    let got: Vec<Value> = transcript(&carol.spool())
        .into_iter()
        .filter(|e| e["kind"] == "message.accepted")
        .collect();
    assert!(got.is_empty(), "carol got {got:?}");
    drop((alice, bob, carol));
}
