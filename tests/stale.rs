//! Stale manifests cost a read and a kernel question (issue 47): a
//! manifest whose pid is gone, or whose socket file is missing, is never
//! connected to, whatever its format (zcoder's, an earlier baton's
//! without `pid_ns` and `process_start`), and is reported as before.

use std::collections::BTreeMap;
use std::fs;
use std::io::ErrorKind;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{Value, json};

use crate::util::{Env, Sleeper};

fn s(p: &Path) -> &str {
    p.to_str().expect("test paths are UTF-8")
}

/// A pid that belonged to a process which has exited and been reaped.
fn dead_pid() -> u32 {
    let mut child = Command::new("true").spawn().expect("spawn true");
    let pid = child.id();
    child.wait().unwrap();
    pid
}

/// A private directory `root/<rel>` (mode 0700), canonical.
fn private_dir(env: &Env, rel: &str) -> PathBuf {
    let dir = env.root.join(rel);
    fs::create_dir(&dir).unwrap();
    fs::set_permissions(&dir, fs::Permissions::from_mode(0o700)).unwrap();
    fs::canonicalize(&dir).unwrap()
}

/// An earlier baton's manifest: no `pid_ns`, no `process_start`, no name
/// entry.
fn earlier_baton(reg: &Path, id: &str, name: &str) -> Value {
    json!({
        "protocol": 1, "instance_id": id, "pid": pid_of(id), "project": name,
        "name": name, "workspace": "/srv/elsewhere", "session_id": "",
        "profile": "coding", "model": "", "state": "ready",
        "socket": s(&reg.join(format!("a-{id}.sock"))), "started_at": 1788012102u64,
        "wire": "jsonrpc", "baton_version": "0.1.0",
    })
}

/// zcoder's manifest, as zcoder leaves it (it never removes one): no
/// name, wire or baton_version.
fn zcoder(zdir: &Path, id: &str) -> Value {
    json!({
        "protocol": 1, "instance_id": id, "pid": pid_of(id), "project": "weekly digest",
        "workspace": "/work/weekly-digest", "session_id": "1788012120_10392",
        "profile": "coding", "model": "qwen3-coder", "state": "ready",
        "socket": s(&zdir.join(format!("a-{id}.sock"))), "started_at": 1788012102u64,
    })
}

fn pid_of(id: &str) -> u32 {
    id.split('-').next().unwrap().parse().unwrap()
}

/// Writes `m` as `dir/a-<id>.json`, mode 0600.
fn write_manifest(dir: &Path, id: &str, m: &Value) {
    use std::io::Write;
    let path = dir.join(format!("a-{id}.json"));
    let mut f = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&path)
        .unwrap_or_else(|e| panic!("create {}: {e}", path.display()));
    f.write_all(m.to_string().as_bytes()).unwrap();
}

/// The test's own listener on a stale manifest's socket path: a live,
/// listening socket that nothing should connect to.
fn listen(dir: &Path, id: &str) -> UnixListener {
    let l = UnixListener::bind(dir.join(format!("a-{id}.sock"))).unwrap();
    l.set_nonblocking(true).unwrap();
    l
}

/// A regression test of issue 47: `baton list` started a thread and a
/// connection for each stale manifest without `pid_ns` (zcoder's, an
/// earlier baton's), although the kernel said its pid was gone. Each one
/// here whose pid is gone has a socket the test listens on, which must
/// see no connection; those whose socket is missing are reported as
/// they always were, and the live instance is listed alone.
#[test]
fn issue_47_a_stale_manifest_of_any_format_is_never_connected_to() {
    let env = Env::new();
    let zdir = private_dir(&env, "zc");
    let ws = env.workspace("live");
    let live = env.serve(&ws, &["--name", "live"]);
    let reg = fs::canonicalize(&env.registry).unwrap();
    let dead = dead_pid();
    let sleeper = Sleeper::start();

    let ours_listened = format!("{dead}-4701000000000001");
    let ours_missing = format!("{dead}-4701000000000002");
    let ours_alive_missing = format!("{}-4701000000000003", sleeper.pid());
    let z_listened = format!("{dead}-4701000000000004");
    let z_missing = format!("{dead}-4701000000000005");
    for id in [&ours_listened, &ours_missing, &ours_alive_missing] {
        write_manifest(&reg, id, &earlier_baton(&reg, id, "ghost"));
    }
    for id in [&z_listened, &z_missing] {
        write_manifest(&zdir, id, &zcoder(&zdir, id));
    }
    let listeners = [listen(&reg, &ours_listened), listen(&zdir, &z_listened)];

    let vars = [("ZCODER_RELAY_DIR", s(&zdir)), ("BATON_IO_TIMEOUT", "2")];
    let out = env.run_with(&vars, None, &["list", "--json", "--all"], None);
    assert_eq!((out.status, out.stderr.as_str()), (0, ""), "{out:?}");
    let all: Vec<Value> = serde_json::from_str(&out.stdout).unwrap();
    let problems: BTreeMap<&str, &str> = (all.iter())
        .filter_map(|v| Some((v["instance_id"].as_str()?, v["problem"].as_str()?)))
        .collect();
    let gone = format!("stale: pid {dead} is gone");
    let missing = "cannot connect: No such file or directory (os error 2)";
    let missing_gone = format!("stale: {missing} and pid {dead} is gone");
    let expected = BTreeMap::from([
        (ours_listened.as_str(), gone.as_str()),
        (ours_missing.as_str(), missing_gone.as_str()),
        (ours_alive_missing.as_str(), missing),
        (z_listened.as_str(), gone.as_str()),
        (z_missing.as_str(), missing_gone.as_str()),
    ]);
    for l in &listeners {
        match l.accept() {
            Err(e) if e.kind() == ErrorKind::WouldBlock => {}
            other => panic!("a stale manifest's socket was connected to: {other:?}"),
        }
    }
    assert_eq!(problems, expected, "{all:?}");

    // Without --all, the live instance alone, as ever.
    let out = env.run_with(&vars, None, &["list"], None);
    assert_eq!(out.status, 0, "{out:?}");
    let rows: Vec<&str> = out.stdout.lines().filter(|l| l.contains('-')).collect();
    assert_eq!(rows.len(), 1, "{}", out.stdout);
    assert!(
        rows[0].starts_with("live ") && rows[0].contains(&live.id),
        "{}",
        out.stdout
    );
    for l in &listeners {
        assert!(l.accept().is_err_and(|e| e.kind() == ErrorKind::WouldBlock));
    }
}
