//! The access table, enforced: every door of `access::Door::all()`,
//! knocked on by a real caller of each role an outside process can be
//! (the operator, the agent of `baton mcp`, a process of the instance's
//! own turn, a process of another instance's turn, a bridge), is open
//! exactly when the table's row lists that role.

use super::{PROBE, probe_doors, python, script};
use crate::util::{Env, baton_bin, manifests, wait_for, wait_until};
use baton::wire::access::{Door, Role};
use serde_json::Value;
use std::collections::BTreeMap;
use std::fs;
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

const T: Duration = Duration::from_secs(30);

/// What the probe wrote: door name to whether it was shut, and the answer.
fn knocked(out: &Path) -> BTreeMap<String, (bool, Value)> {
    fs::read_to_string(out)
        .unwrap_or_default()
        .lines()
        .map(|l| {
            let v: Value = serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}"));
            let door = v["door"].as_str().unwrap().to_string();
            (door, (v["shut"] == true, v["answer"].clone()))
        })
        .collect()
}

/// Each door but the reply (tested with the approvals) and, for a
/// bridge, the zcoder frame (a bridge speaks JSON-RPC only): shut exactly
/// when the table leaves `role` out, and then by the access table.
fn check(role: Role, got: &BTreeMap<String, (bool, Value)>) {
    for door in Door::all() {
        if door == Door::Reply || (role == Role::Bridge && door == Door::Zcoder) {
            continue;
        }
        let (shut, answer) = got.get(door.name()).unwrap_or_else(|| {
            panic!("{}: {} not knocked on: {got:?}", role.as_str(), door.name())
        });
        let open = door.roles().contains(&role);
        assert_eq!(
            !shut,
            open,
            "{} at {}: {answer}",
            role.as_str(),
            door.name()
        );
        if *shut && door != Door::Zcoder {
            assert_eq!(answer["error"]["data"]["role"], role.as_str(), "{answer}");
        }
    }
}

/// Runs the probe as a child of the test, in `env`'s world.
fn run_probe(env: &Env, probe: &Path, out: &Path, target: &str, how: &[&str]) {
    let status = env
        .cmd_for("python3")
        .arg(probe)
        .arg(out)
        .arg(probe_doors())
        .arg(target)
        .args(how)
        .status()
        .unwrap();
    assert!(status.success(), "probe {how:?}");
}

#[test]
fn every_door_is_shut_to_the_roles_its_row_leaves_out() {
    if !python() {
        return;
    }
    let env = Env::new();
    let dir = env.root.join("probe");
    let probe = script(&dir, "probe.py", PROBE);
    let other = env.serve(&env.workspace("other"), &["--name", "other"]);
    // A turn of `home` knocks on home's doors, then on other's.
    let (turn_out, other_out, home_id) = (
        dir.join("turn.jsonl"),
        dir.join("other-turn.jsonl"),
        dir.join("home-id"),
    );
    let turn = script(
        &dir,
        "turn.sh",
        &format!(
            "cat >/dev/null\n\
             python3 '{p}' '{o}' '{d}' \"$(cat '{h}')\" --socket \"$BATON_SOCKET\"\n\
             python3 '{p}' '{oo}.part' '{d}' '{oid}' --socket '{os}'\n\
             mv '{oo}.part' '{oo}'\n",
            p = probe.display(),
            o = turn_out.display(),
            oo = other_out.display(),
            h = home_id.display(),
            d = probe_doors(),
            oid = other.id,
            os = other.socket.display(),
        ),
    );
    let exec = format!("sh '{}'", turn.display());
    let home = env.serve(&env.workspace("home"), &["--name", "home", "--exec", &exec]);
    fs::write(&home_id, &home.id).unwrap();
    let out = env.run(&["send", "home", "knock"]);
    assert_eq!(out.status, 0, "{out:?}");
    wait_until("the turn's probes", T, || other_out.exists());
    check(Role::Turn, &knocked(&turn_out));
    check(Role::OtherTurn, &knocked(&other_out));

    // The operator: a child of the test, on a plain instance.
    let op_out = dir.join("operator.jsonl");
    let other_socket = other.socket.to_str().unwrap().to_string();
    run_probe(
        &env,
        &probe,
        &op_out,
        &other.id,
        &["--socket", &other_socket],
    );
    check(Role::Operator, &knocked(&op_out));

    // A bridge for `other`, run as a key's forced command runs it.
    let br_out = dir.join("bridge.jsonl");
    let bin = baton_bin();
    let how = ["--bridge", bin.to_str().unwrap(), "other"];
    run_probe(&env, &probe, &br_out, &other.id, &how);
    check(Role::Bridge, &knocked(&br_out));
    drop((home, other));
}

/// The agent: `baton mcp`'s host is the test, so the test's children are
/// the agent's processes.
#[test]
fn the_mcp_hosts_processes_get_the_agents_doors_only() {
    if !python() {
        return;
    }
    let env = Env::new();
    let dir = env.root.join("probe");
    let probe = script(&dir, "probe.py", PROBE);
    let ws = env.workspace("agentic");
    let mut mcp = env
        .cmd()
        .args(["mcp", "--name", "agentic"])
        .current_dir(&ws)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let prefix = format!("a-{}-", mcp.id());
    let manifest = wait_for("baton mcp's instance", T, || {
        manifests(&env.registry).into_iter().find(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with(&prefix))
        })
    });
    let m: Value = serde_json::from_slice(&fs::read(manifest).unwrap()).unwrap();
    let out = dir.join("agent.jsonl");
    let socket = m["socket"].as_str().unwrap();
    run_probe(
        &env,
        &probe,
        &out,
        m["instance_id"].as_str().unwrap(),
        &["--socket", socket],
    );
    drop(mcp.stdin.take());
    let _ = mcp.kill();
    let _ = mcp.wait();
    check(Role::Agent, &knocked(&out));
}

/// The program in a `--tmux-pane` pane is the agent: what it starts may
/// claim and list, never approve or start a local turn.
#[test]
fn the_pane_agents_processes_get_the_agents_doors_only() {
    if !crate::tmux::tools() {
        return;
    }
    let env = Env::new();
    let dir = env.root.join("pane");
    let rpc = script(&dir, "rpc.py", super::RPC);
    let out = |n: &str| dir.join(n);
    let mut tmux = crate::tmux::Tmux::new(&env);
    // The pane's program reads the task typed into it, then calls in. It
    // is no shell: a pane where a shell runs is not typed into.
    let program = format!(
        "exec python3 -c 'import subprocess as p, sys; sys.stdin.readline(); \
         s = open(\"{sock}\").read(); \
         [p.run([\"python3\", \"{rpc}\", s, m, \"{{}}\"], stdout=open(o, \"w\")) \
         for m, o in [(\"approval/respond\", \"{a}\"), (\"turn/local\", \"{l}\"), \
         (\"inbox/list\", \"{i}\")]]; open(\"{d}\", \"w\"); sys.stdin.read()'",
        sock = out("socket").display(),
        rpc = rpc.display(),
        a = out("approve.json").display(),
        l = out("local.json").display(),
        i = out("list.json").display(),
        d = out("done").display(),
    );
    tmux.start_program(&program);
    let s = crate::tmux::serve(&env, &tmux, &[], &[]);
    fs::write(out("socket"), s.socket.to_str().unwrap()).unwrap();
    crate::tmux::send(&env, "call in");
    wait_until("the pane's calls", T, || out("done").exists());
    for name in ["approve.json", "local.json"] {
        let v: Value = serde_json::from_str(fs::read_to_string(out(name)).unwrap().trim()).unwrap();
        assert_eq!(v["error"]["data"]["role"], "agent", "{name}: {v}");
    }
    let v: Value =
        serde_json::from_str(fs::read_to_string(out("list.json")).unwrap().trim()).unwrap();
    assert!(v["result"].is_object(), "{v}");
    drop(s);
}
