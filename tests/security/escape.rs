//! A turn's processes cannot shed their turn. A relayed exec turn once
//! ran `( env -u BATON_TURN baton pause gamma & )` and `setsid -f env -u
//! BATON_TURN baton send --from gamma boss x` after its handler exited:
//! the orphans, parented to init and without the token, were taken for
//! the operator (gamma paused; boss got x from a verified gamma at hop 0;
//! `approval/respond` at delta and `turn/local` at gamma went through).
//! Another instance's handler read `BATON_TURN` from the environment of
//! a running handler and, with its instance's socket, sent a forged
//! reply; and a process that connected and exited left its connection
//! to a child that was then the operator.

use super::{RPC, python, script};
use crate::util::{Env, baton_bin, transcript, wait_event, wait_until};
use serde_json::Value;
use std::fs;
use std::path::Path;
use std::time::Duration;

const T: Duration = Duration::from_secs(30);

fn read(dir: &Path, name: &str) -> String {
    fs::read_to_string(dir.join(name)).unwrap_or_default()
}

fn read_json(dir: &Path, name: &str) -> Value {
    let text = read(dir, name);
    serde_json::from_str(text.trim()).unwrap_or_else(|e| panic!("{name}: {e}: {text:?}"))
}

/// What `instance` accepted from `from`.
fn accepted_from(spool: &Path, from: &str) -> Vec<Value> {
    (transcript(spool).into_iter())
        .filter(|e| e["kind"] == "message.accepted" && e["from"] == from)
        .collect()
}

#[test]
fn the_orphans_of_a_turn_stay_its_own_after_it_ends() {
    if !python() {
        return;
    }
    let env = Env::new();
    let dir = env.root.join("orphans");
    let rpc = script(&dir, "rpc.py", RPC);
    let boss = env.serve(&env.workspace("boss"), &["--name", "boss"]);
    let delta = env.serve(&env.workspace("delta"), &["--name", "delta"]);
    // Each orphan waits (bounded) for `go`, made once the turn ended.
    let wait_go = "n=0; while [ ! -e go ] && [ $n -lt 1200 ]; do sleep 0.05; n=$((n+1)); done";
    let orphan = script(
        &dir,
        "orphan.sh",
        &format!(
            "cd '{o}'\n{wait_go}\n\
             env -u BATON_TURN '{bin}' send --json --from gamma boss x >from.out 2>&1; echo $? >from.code\n\
             env -u BATON_TURN python3 '{rpc}' '{delta}' approval/respond \
               '{{\"approval_id\":\"ask-1\",\"digest\":\"x\",\"decision\":\"approve\"}}' >delta.json\n\
             env -u BATON_TURN python3 '{rpc}' \"$BATON_SOCKET\" turn/local '{{\"text\":\"again\"}}' >local.json\n\
             touch done\n",
            o = dir.display(),
            bin = baton_bin().display(),
            rpc = rpc.display(),
            delta = delta.socket.display(),
        ),
    );
    let handler = script(
        &dir,
        "gamma.sh",
        &format!(
            "cat >/dev/null\n\
             cd '{o}'\n\
             ( exec env -u BATON_TURN sh -c '{wait_go}; \"$0\" pause gamma >pause.out 2>&1; echo $? >pause.code' \
               '{bin}' </dev/null >/dev/null 2>&1 & )\n\
             setsid -f env -u BATON_TURN sh '{orphan}' </dev/null >/dev/null 2>&1\n",
            o = dir.display(),
            bin = baton_bin().display(),
            orphan = orphan.display(),
        ),
    );
    let exec = format!("sh '{}'", handler.display());
    let gamma = env.serve(
        &env.workspace("gamma"),
        &["--name", "gamma", "--exec", &exec],
    );
    let out = env.run(&["send", "--from", "boss", "gamma", "start", "--json"]);
    assert_eq!(out.status, 0, "{out:?}");
    wait_event(&gamma.spool(), "the turn's end", T, |e| {
        e["kind"] == "turn.finished"
    });
    fs::write(dir.join("go"), "").unwrap();
    wait_until("the orphans' calls", T, || {
        dir.join("done").exists() && dir.join("pause.code").exists()
    });

    assert_ne!(
        read(&dir, "pause.code").trim(),
        "0",
        "{}",
        read(&dir, "pause.out")
    );
    assert!(
        read(&dir, "pause.out").contains("belongs to a turn of gamma"),
        "{}",
        read(&dir, "pause.out")
    );
    let status = gamma
        .client()
        .call(1, "control/status", serde_json::json!({}));
    assert_eq!(status["result"]["paused"], false, "{status}");

    assert_ne!(
        read(&dir, "from.code").trim(),
        "0",
        "{}",
        read(&dir, "from.out")
    );
    assert!(accepted_from(&boss.spool(), "gamma").is_empty());

    let at_delta = read_json(&dir, "delta.json");
    assert_eq!(at_delta["error"]["code"], -32012, "{at_delta}");
    assert_eq!(
        at_delta["error"]["data"]["role"], "other-turn",
        "{at_delta}"
    );
    let local = read_json(&dir, "local.json");
    assert_eq!(local["error"]["code"], -32012, "{local}");
    assert_eq!(local["error"]["data"]["role"], "turn", "{local}");
    drop((boss, delta, gamma));
}

#[test]
fn a_stolen_turn_token_speaks_for_no_turn() {
    let env = Env::new();
    let dir = env.root.join("stolen");
    fs::create_dir_all(&dir).unwrap();
    let boss = env.serve(&env.workspace("boss"), &["--name", "boss"]);
    // alpha's handler says where it is and waits (bounded) for `go`.
    let alpha_sh = script(
        &dir,
        "alpha.sh",
        &format!(
            "cat >/dev/null\ncd '{o}'\necho $$ >alpha.pid\n\
             n=0; while [ ! -e go ] && [ $n -lt 1200 ]; do sleep 0.05; n=$((n+1)); done\n",
            o = dir.display()
        ),
    );
    let alpha = env.serve(
        &env.workspace("alpha"),
        &[
            "--name",
            "alpha",
            "--exec",
            &format!("sh '{}'", alpha_sh.display()),
        ],
    );
    // thief's handler reads alpha's handler's token and replies with it.
    let thief_sh = script(
        &dir,
        "thief.sh",
        &format!(
            "cat >/dev/null\ncd '{o}'\n\
             token=$(tr '\\0' '\\n' </proc/$(cat alpha.pid)/environ | sed -n 's/^BATON_TURN=//p')\n\
             echo \"$token\" >token\n\
             BATON_TURN=\"$token\" BATON_SOCKET='{alpha}' '{bin}' send --reply forged >thief.out 2>&1; echo $? >thief.code\n",
            o = dir.display(),
            alpha = alpha.socket.display(),
            bin = baton_bin().display(),
        ),
    );
    let thief = env.serve(
        &env.workspace("thief"),
        &[
            "--name",
            "thief",
            "--exec",
            &format!("sh '{}'", thief_sh.display()),
        ],
    );
    let out = env.run(&["send", "--from", "boss", "alpha", "hold on"]);
    assert_eq!(out.status, 0, "{out:?}");
    wait_until("alpha's handler", T, || dir.join("alpha.pid").exists());
    let out = env.run(&["send", "thief", "steal"]);
    assert_eq!(out.status, 0, "{out:?}");
    wait_until("the thief's send", T, || dir.join("thief.code").exists());
    assert!(!read(&dir, "token").trim().is_empty(), "no token was read");
    fs::write(dir.join("go"), "").unwrap();
    wait_event(&alpha.spool(), "alpha's turn end", T, |e| {
        e["kind"] == "turn.finished"
    });

    assert_ne!(
        read(&dir, "thief.code").trim(),
        "0",
        "{}",
        read(&dir, "thief.out")
    );
    assert!(
        read(&dir, "thief.out").contains("not permitted"),
        "{}",
        read(&dir, "thief.out")
    );
    assert!(accepted_from(&boss.spool(), "alpha").is_empty());
    drop((boss, alpha, thief));
}

#[test]
fn a_caller_whose_process_is_gone_is_refused_never_the_operator() {
    if !python() {
        return;
    }
    let env = Env::new();
    let dir = env.root.join("gone");
    let gamma = env.serve(&env.workspace("gamma"), &["--name", "gamma"]);
    // Connects, forks, and exits; the child, once its parent is gone,
    // says hello and asks to pause.
    let client = script(
        &dir,
        "gone.py",
        "import json, os, socket, sys, time\n\
         s = socket.socket(socket.AF_UNIX)\n\
         s.settimeout(20)\n\
         s.connect(sys.argv[1])\n\
         parent = os.getpid()\n\
         if os.fork() > 0:\n    os._exit(0)\n\
         deadline = time.monotonic() + 30\n\
         while os.getppid() == parent and time.monotonic() < deadline:\n    time.sleep(0.01)\n\
         r, w = s.makefile('rb'), s.makefile('wb')\n\
         def call(i, method, params):\n\
         \x20   w.write((json.dumps({'jsonrpc': '2.0', 'id': i, 'method': method, 'params': params}) + '\\n').encode())\n\
         \x20   w.flush()\n\
         \x20   while True:\n\
         \x20       v = json.loads(r.readline())\n\
         \x20       if v.get('id') == i:\n\
         \x20           return v\n\
         call(0, 'initialize', {'protocol_version': 1, 'client': {'name': 'gone', 'version': '0'}})\n\
         out = call(1, 'control/pause', {})\n\
         open(sys.argv[2] + '.tmp', 'w').write(json.dumps(out))\n\
         os.rename(sys.argv[2] + '.tmp', sys.argv[2])\n",
    );
    // Reaped at once, then (the connecting process a zombie while the
    // child asks: its entry still names this test as its parent) not
    // reaped until the child has its answer.
    for reaped in [true, false] {
        let answer = dir.join(format!("answer-{reaped}.json"));
        let mut parent = std::process::Command::new("python3")
            .arg(&client)
            .arg(&gamma.socket)
            .arg(&answer)
            .spawn()
            .unwrap();
        if reaped {
            let _ = parent.wait();
        }
        let got = crate::util::poll(T, crate::util::POLL, || answer.exists().then_some(()));
        // (Waited for on every path: a status kept after the first wait.)
        let status = parent.wait().unwrap();
        assert!(got.is_some(), "no answer from the child within {T:?}");
        assert!(status.success());
        let v = read_json(&dir, &format!("answer-{reaped}.json"));
        assert_eq!(v["error"]["code"], -32012, "reaped {reaped}: {v}");
        let message = v["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains("is gone"), "{message}");
        let status = gamma
            .client()
            .call(1, "control/status", serde_json::json!({}));
        assert_eq!(status["result"]["paused"], false, "{status}");
    }
    drop(gamma);
}
