//! Registry tests (docs/protocol.md §7): manifests and discovery between
//! instances, stale and malformed entries, refusal of unsafe registry
//! directories and of bad configuration, and cleanup at shutdown.

use std::collections::BTreeMap;
use std::fs::{self, OpenOptions};
use std::io::{ErrorKind, Read, Write};
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt, PermissionsExt, symlink};
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::thread;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::{Value, json};

use crate::util::{Env, Output, Proc, Served, Sleeper, manifests, wait_manifest};

/// How long a `baton serve` that must refuse to start may take to exit.
const EXIT_TIMEOUT: Duration = Duration::from_secs(10);
/// `sun_path` less its NUL: 108 - 1 on Linux, 104 - 1 on the BSDs and macOS.
const SUN_PATH_MAX: usize = if cfg!(any(target_os = "linux", target_os = "android")) {
    107
} else {
    103
};
const MAX_MANIFEST: usize = 16 * 1024;

/// Every field of a manifest (docs/protocol.md §7), and nothing else.
const FIELDS: [&str; 17] = [
    "baton_version",
    "instance_id",
    "max_message_bytes",
    "model",
    "name",
    "pid",
    "pid_ns",
    "process_start",
    "profile",
    "project",
    "protocol",
    "session_id",
    "socket",
    "started_at",
    "state",
    "wire",
    "workspace",
];

fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

fn s(p: &Path) -> &str {
    p.to_str().expect("test paths are UTF-8")
}

fn exists(p: &Path) -> bool {
    fs::symlink_metadata(p).is_ok()
}

/// Parses the stdout of a command that must have succeeded.
fn json_of(out: &Output, what: &str) -> Value {
    assert_eq!(out.status, 0, "{what} failed: {out:?}");
    assert_eq!(out.stderr, "", "{what} wrote to stderr: {out:?}");
    serde_json::from_str(&out.stdout)
        .unwrap_or_else(|e| panic!("{what} printed invalid JSON ({e}): {out:?}"))
}

/// `baton list <extra> --json` as seen from inside `inside` (via
/// `$BATON_SOCKET`) or from outside any instance.
fn list_json(env: &Env, inside: Option<&Served>, extra: &[&str]) -> Vec<Value> {
    let mut args = vec!["list", "--json"];
    args.extend_from_slice(extra);
    let out = match inside {
        Some(me) => env.run_with(&[("BATON_SOCKET", s(&me.socket))], None, &args, None),
        None => env.run(&args),
    };
    match json_of(&out, &format!("{args:?}")) {
        Value::Array(items) => items,
        other => panic!("{args:?} printed {other}, not an array"),
    }
}

/// A live instance's `list --json` item as its manifest: without what
/// its ping counted (issue 46), which is nothing waiting here.
fn manifest_of(item: &Value) -> Value {
    let mut v = item.clone();
    let map = v.as_object_mut().expect("an item is an object");
    assert_eq!(map.remove("queued"), Some(json!(0)), "{item}");
    assert_eq!(map.remove("approvals"), Some(json!(0)), "{item}");
    v
}

fn ids(items: &[Value]) -> Vec<&str> {
    items
        .iter()
        .map(|v| v["instance_id"].as_str().expect("instance_id is a string"))
        .collect()
}

/// Waits (bounded) for a process that must stop on its own, and returns
/// its exit code.
fn wait_exit(proc: &mut Proc) -> i32 {
    proc.wait_exit(EXIT_TIMEOUT).unwrap_or_else(|| {
        panic!(
            "baton still running {EXIT_TIMEOUT:?} after it should have exited on its own:\n{}",
            proc.stderr()
        )
    })
}

/// Lets baton create the registry (as `list` does) and returns its
/// canonical path.
fn make_registry(env: &Env) -> PathBuf {
    assert!(list_json(env, None, &[]).is_empty());
    fs::canonicalize(&env.registry).unwrap()
}

/// A pid that belonged to a process which has exited and been reaped.
fn dead_pid() -> u32 {
    let mut child = Command::new("true").spawn().expect("spawn true");
    let pid = child.id();
    child.wait().unwrap();
    pid
}

/// A well-formed manifest for `pid-nonce` in registry `reg`.
fn fake_manifest(reg: &Path, id: &str, name: &str) -> Value {
    let pid: u32 = id.split('-').next().unwrap().parse().unwrap();
    json!({
        "protocol": 1,
        "instance_id": id,
        "pid": pid,
        "project": name,
        "name": name,
        "workspace": "/srv/elsewhere",
        "session_id": "",
        "profile": "coding",
        "model": "",
        "socket": s(&reg.join(format!("a-{id}.sock"))),
        "state": "ready",
        "started_at": now_secs(),
        "wire": "jsonrpc",
        "baton_version": "0.1.0",
        "pid_ns": crate::util::pid_namespace(),
    })
}

/// Writes `bytes` as `reg/a-<id>.json`, mode 0600, and returns the path.
fn write_manifest(reg: &Path, id: &str, bytes: &[u8]) -> PathBuf {
    let path = reg.join(format!("a-{id}.json"));
    let mut f = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&path)
        .unwrap_or_else(|e| panic!("create {}: {e}", path.display()));
    f.write_all(bytes).unwrap();
    path
}

/// Leaves a socket file with no listener behind at `path`, as a crashed
/// instance does: connecting to it gives ECONNREFUSED.
fn leftover_socket(path: &Path) {
    drop(UnixListener::bind(path).unwrap());
    assert!(fs::symlink_metadata(path).unwrap().file_type().is_socket());
}

/// Checks one manifest object (from disk or from `list --json`) against
/// what `served` must have published.
fn check_fields(v: &Value, served: &Served, reg: &Path, model: &str, window: (u64, u64)) {
    let obj = v
        .as_object()
        .unwrap_or_else(|| panic!("not an object: {v}"));
    let keys: Vec<&str> = obj.keys().map(String::as_str).collect();
    assert_eq!(keys, FIELDS, "manifest fields of {v}");

    let pid = served.proc.pid();
    assert_eq!(v["protocol"], json!(1), "{v}");
    let id = v["instance_id"].as_str().unwrap();
    assert_eq!(id, served.id);
    let (id_pid, nonce) = id.split_once('-').expect("instance id is <pid>-<nonce>");
    assert_eq!(id_pid, pid.to_string(), "{v}");
    assert!(
        nonce.len() >= 12 && nonce.bytes().all(|b| b.is_ascii_digit()),
        "nonce {nonce:?} is not at least 12 decimal digits"
    );
    assert!(v["pid"].is_u64(), "{v}");
    assert_eq!(v["pid"], json!(pid), "{v}");
    // stat(5) field 22: the process's start, in clock ticks after boot.
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let start: u64 = stat[stat.rfind(')').unwrap() + 1..]
        .split_whitespace()
        .nth(19)
        .and_then(|f| f.parse().ok())
        .unwrap();
    assert_eq!(v["process_start"], json!(start), "{v}");
    // The pid namespace the pid is in: this test's, the inode of its
    // /proc/self/ns/pid.
    let ns = fs::metadata("/proc/self/ns/pid").unwrap();
    assert_eq!(
        v["pid_ns"],
        json!(std::os::unix::fs::MetadataExt::ino(&ns)),
        "{v}"
    );
    let name = served.workspace.file_name().unwrap().to_str().unwrap();
    assert_eq!(v["project"], json!(name), "{v}");
    assert_eq!(v["name"], json!(name), "{v}");
    let canonical = fs::canonicalize(&served.workspace).unwrap();
    assert_eq!(v["workspace"], json!(s(&canonical)), "{v}");
    assert!(v["session_id"].is_string(), "{v}");
    assert_eq!(v["profile"], json!("coding"), "{v}");
    assert_eq!(v["model"], json!(model), "{v}");
    let socket = reg.join(format!("a-{id}.sock"));
    assert_eq!(v["socket"], json!(s(&socket)), "{v}");
    assert!(
        fs::symlink_metadata(&socket)
            .unwrap()
            .file_type()
            .is_socket(),
        "{} is not a socket",
        socket.display()
    );
    assert_eq!(v["state"], json!("ready"), "{v}");
    let started = v["started_at"]
        .as_u64()
        .unwrap_or_else(|| panic!("started_at is not an integer: {v}"));
    assert!(
        (window.0..=window.1).contains(&started),
        "started_at {started} outside {window:?}"
    );
    assert_eq!(v["wire"], json!("jsonrpc"), "{v}");
    assert_eq!(v["baton_version"], json!(env!("CARGO_PKG_VERSION")), "{v}");
}

/// Checks the manifest file `served` published and returns its contents.
fn check_manifest_file(served: &Served, reg: &Path, model: &str, window: (u64, u64)) -> Value {
    let path = reg.join(format!("a-{}.json", served.id));
    let meta = fs::symlink_metadata(&path).unwrap();
    assert!(meta.is_file(), "{} is not a regular file", path.display());
    assert_eq!(meta.mode() & 0o7777, 0o600, "mode of {}", path.display());
    assert!(meta.len() < MAX_MANIFEST as u64, "{} bytes", meta.len());
    let v: Value = serde_json::from_slice(&fs::read(&path).unwrap()).unwrap();
    let flat = v
        .as_object()
        .unwrap()
        .values()
        .all(|x| x.is_string() || x.is_u64());
    assert!(
        flat,
        "manifest is not a flat object of strings and integers: {v}"
    );
    check_fields(&v, served, reg, model, window);
    assert_eq!(v, served.manifest);
    v
}

#[test]
fn instances_with_the_same_basename_list_each_other() {
    let env = Env::new();
    let ws_a = env.workspace("x/app");
    let ws_b = env.workspace("y/app");
    let before = now_secs();
    let a = env.serve(&ws_a, &[]);
    // Issue 46: the basename's name is taken, so the second says another.
    let ws = ws_b.to_str().unwrap();
    let taken = env.run(&["serve", "--workspace", ws, "--model", "model-b"]);
    assert_eq!(taken.status, 2, "{taken:?}");
    let ws_b = env.workspace("y/app2");
    let b = env.serve(&ws_b, &["--model", "model-b"]);
    let window = (before, now_secs());

    let dir = fs::symlink_metadata(&env.registry).unwrap();
    assert!(dir.is_dir());
    assert_eq!(dir.mode() & 0o7777, 0o700, "registry directory mode");
    let reg = fs::canonicalize(&env.registry).unwrap();

    let disk_a = check_manifest_file(&a, &reg, "", window);
    let disk_b = check_manifest_file(&b, &reg, "model-b", window);
    assert_ne!(a.id, b.id);
    assert_eq!(
        (&disk_a["name"], &disk_b["name"]),
        (&json!("app"), &json!("app2"))
    );
    assert_ne!(disk_a["workspace"], disk_b["workspace"]);

    // From inside each instance, the other one is the only peer.
    let seen_by_a = list_json(&env, Some(&a), &[]);
    assert_eq!(seen_by_a.len(), 1, "{seen_by_a:?}");
    let seen = manifest_of(&seen_by_a[0]);
    check_fields(&seen, &b, &reg, "model-b", window);
    assert_eq!(seen, disk_b);
    let seen_by_b = list_json(&env, Some(&b), &[]);
    assert_eq!(seen_by_b.len(), 1, "{seen_by_b:?}");
    let seen = manifest_of(&seen_by_b[0]);
    check_fields(&seen, &a, &reg, "", window);
    assert_eq!(seen, disk_a);

    // From outside, both, in name order.
    let by_name = [(&a, "app"), (&b, "app2")];
    let all = list_json(&env, None, &[]);
    assert_eq!(ids(&all), [a.id.as_str(), b.id.as_str()]);

    // The text view shows both rows, with their workspaces.
    let out = env.run(&["list"]);
    assert_eq!(out.status, 0, "{out:?}");
    assert_eq!(out.stderr, "", "{out:?}");
    let lines: Vec<Vec<&str>> = out
        .stdout
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    let expected: Vec<Vec<String>> = std::iter::once(
        ["NAME", "PID", "STATE", "ID", "WIRE", "WORKSPACE"]
            .map(String::from)
            .to_vec(),
    )
    .chain(by_name.iter().map(|(x, name)| {
        vec![
            name.to_string(),
            x.proc.pid().to_string(),
            "ready".to_string(),
            x.id.clone(),
            "jsonrpc".to_string(),
            s(&x.workspace).to_string(),
        ]
    }))
    .collect();
    assert_eq!(lines, expected, "text list:\n{}", out.stdout);
}

#[test]
fn list_sorts_by_name_case_insensitively_then_pid() {
    let env = Env::new();
    // Byte order would give Alpha, Beta, alpha; case-insensitive order puts
    // the two alphas (by pid) before Beta.
    let one = env.serve(&env.workspace("one"), &["--name", "alpha"]);
    let two = env.serve(&env.workspace("two"), &["--name", "Beta"]);
    let three = env.serve(&env.workspace("three"), &["--name", "Alpha"]);

    let mut alphas = [&one, &three];
    alphas.sort_by_key(|x| x.proc.pid());
    let expected = [
        alphas[0].id.as_str(),
        alphas[1].id.as_str(),
        two.id.as_str(),
    ];
    assert_eq!(ids(&list_json(&env, None, &[])), expected);

    // Excluding the caller keeps the order of the rest.
    let expected_by_two = [alphas[0].id.as_str(), alphas[1].id.as_str()];
    assert_eq!(ids(&list_json(&env, Some(&two), &[])), expected_by_two);
    let seen_by_one: Vec<Value> = list_json(&env, Some(&one), &[]);
    assert_eq!(ids(&seen_by_one), [three.id.as_str(), two.id.as_str()]);
}

#[test]
fn stale_entry_of_a_dead_pid_is_hidden_reported_and_collected() {
    let env = Env::new();
    let reg = make_registry(&env);
    let pid = dead_pid();
    let id = format!("{pid}-4242424242424242");
    let manifest = fake_manifest(&reg, &id, "ghost");
    let mpath = write_manifest(&reg, &id, manifest.to_string().as_bytes());
    let spath = reg.join(format!("a-{id}.sock"));
    leftover_socket(&spath);

    assert_eq!(list_json(&env, None, &[]), Vec::<Value>::new());

    let all = list_json(&env, None, &["--all"]);
    assert_eq!(all.len(), 1, "{all:?}");
    let entry = &all[0];
    assert_eq!(entry["instance_id"], json!(id), "{entry}");
    assert_eq!(entry["name"], json!("ghost"), "{entry}");
    assert_eq!(entry["path"], json!(s(&mpath)), "{entry}");
    let problem = entry["problem"].as_str().expect("problem is a string");
    // The kernel's word: its socket is not connected to.
    assert_eq!(problem, format!("stale: pid {pid} is gone"));

    // Listing only looks; it does not clean up.
    assert!(exists(&mpath) && exists(&spath));

    let gc = json_of(&env.run(&["gc", "--json"]), "gc --json");
    assert_eq!(gc, json!({"removed": [id]}));
    assert!(!exists(&mpath), "gc left the stale manifest");
    assert!(!exists(&spath), "gc left the stale socket");
    assert!(reg.is_dir(), "gc removed the registry itself");

    let again = env.run(&["gc"]);
    assert_eq!(again.status, 0, "{again:?}");
    assert_eq!(again.stdout, "");
    assert_eq!(
        again.stderr,
        format!("baton: no stale entries in {}\n", reg.display())
    );
}

#[test]
fn entry_of_a_live_pid_with_a_dead_socket_is_skipped_but_never_collected() {
    let env = Env::new();
    let reg = make_registry(&env);
    let sleeper = Sleeper::start();
    let live_id = format!("{}-1111111111111111", sleeper.pid());
    let live = write_manifest(
        &reg,
        &live_id,
        fake_manifest(&reg, &live_id, "sleepy")
            .to_string()
            .as_bytes(),
    );
    let live_sock = reg.join(format!("a-{live_id}.sock"));
    leftover_socket(&live_sock);
    let dead_id = format!("{}-2222222222222222", dead_pid());
    let dead = write_manifest(
        &reg,
        &dead_id,
        fake_manifest(&reg, &dead_id, "ghost")
            .to_string()
            .as_bytes(),
    );

    assert_eq!(list_json(&env, None, &[]), Vec::<Value>::new());

    let all = list_json(&env, None, &["--all"]);
    let problems: BTreeMap<&str, &str> = all
        .iter()
        .map(|v| {
            (
                v["instance_id"].as_str().unwrap(),
                v["problem"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(problems.len(), 2, "{all:?}");
    let live_problem = problems[live_id.as_str()];
    assert!(
        live_problem.starts_with("cannot connect: ") && !live_problem.contains("stale"),
        "live pid reported as {live_problem:?}"
    );
    assert!(
        problems[dead_id.as_str()].starts_with("stale: "),
        "{problems:?}"
    );

    let gc = env.run(&["gc"]);
    assert_eq!(gc.status, 0, "{gc:?}");
    assert_eq!(gc.stdout, format!("removed stale instance {dead_id}\n"));
    assert_eq!(gc.stderr, "");
    assert!(!exists(&dead));
    assert!(exists(&live), "gc removed the entry of a live pid");
    assert!(exists(&live_sock), "gc removed the socket of a live pid");

    let gc = json_of(&env.run(&["gc", "--json"]), "gc --json");
    assert_eq!(gc, json!({"removed": []}));
    assert!(exists(&live) && exists(&live_sock));
}

#[test]
fn serve_removes_stale_entries_at_startup_and_keeps_live_ones() {
    let env = Env::new();
    let reg = make_registry(&env);
    let dead_id = format!("{}-3333333333333333", dead_pid());
    let dead = write_manifest(
        &reg,
        &dead_id,
        fake_manifest(&reg, &dead_id, "ghost")
            .to_string()
            .as_bytes(),
    );
    let dead_sock = reg.join(format!("a-{dead_id}.sock"));
    leftover_socket(&dead_sock);
    let sleeper = Sleeper::start();
    let live_id = format!("{}-5555555555555555", sleeper.pid());
    let live = write_manifest(
        &reg,
        &live_id,
        fake_manifest(&reg, &live_id, "sleepy")
            .to_string()
            .as_bytes(),
    );

    let served = env.serve(&env.workspace("fresh"), &[]);
    // Cleanup runs right after the manifest is published (so that a
    // thousand stale entries do not delay it).
    assert!(gone_soon(&dead), "startup left the stale manifest");
    assert!(gone_soon(&dead_sock), "startup left the stale socket");
    let own = reg.join(format!("a-{}.json", served.id));
    let mut expected = vec![live, own];
    expected.sort();
    assert_eq!(manifests(&reg), expected);

    let listed = list_json(&env, None, &[]);
    assert_eq!(ids(&listed), [served.id.as_str()]);
}

#[test]
fn malformed_manifests_are_skipped_reported_and_kept() {
    let env = Env::new();
    let served = env.serve(&env.workspace("real"), &[]);
    let reg = fs::canonicalize(&env.registry).unwrap();
    let pid = dead_pid();
    let id = |n: u32| format!("{pid}-{n:016}");
    let mut expect: BTreeMap<PathBuf, String> = BTreeMap::new();

    // A symlink to a well-formed manifest.
    let target = env.root.join("elsewhere.json");
    fs::write(&target, fake_manifest(&reg, &id(1), "sym").to_string()).unwrap();
    let link = reg.join(format!("a-{}.json", id(1)));
    symlink(&target, &link).unwrap();
    expect.insert(link.clone(), "manifest is a symlink".into());

    // One byte over 16 KiB.
    let pad = |v: &Value, len: usize| {
        let mut text = v.to_string().into_bytes();
        assert!(text.len() < len);
        let close = text.pop().unwrap();
        text.resize(len - 1, b' ');
        text.push(close);
        text
    };
    let big = write_manifest(
        &reg,
        &id(2),
        &pad(&fake_manifest(&reg, &id(2), "big"), MAX_MANIFEST + 1),
    );
    expect.insert(
        big.clone(),
        format!("manifest is {} bytes, over 16 KiB", MAX_MANIFEST + 1),
    );

    // Malformed JSON, a JSON array, and a nested object.
    let broken = write_manifest(&reg, &id(3), b"{\"protocol\": 1, \"pid\":");
    let array = write_manifest(&reg, &id(4), b"[1, 2]");
    let mut nested = fake_manifest(&reg, &id(5), "nested");
    nested["extra"] = json!({"a": 1});
    let nested = write_manifest(&reg, &id(5), nested.to_string().as_bytes());
    expect.insert(
        array.clone(),
        "manifest: payload is not one flat JSON object: not an object".into(),
    );
    expect.insert(
        nested.clone(),
        "manifest: payload is not one flat JSON object: field \"extra\" is nested".into(),
    );

    // A socket outside the registry: a manifest must not steer clients
    // to an arbitrary path.
    let mut astray = fake_manifest(&reg, &id(6), "astray");
    astray["socket"] = json!(s(&served.socket));
    let astray = write_manifest(&reg, &id(6), astray.to_string().as_bytes());
    expect.insert(
        astray.clone(),
        "socket is not <registry>/a-<id>.sock".into(),
    );

    // Exactly 16 KiB is still read and validated: it is merely stale.
    let edge = write_manifest(
        &reg,
        &id(7),
        &pad(&fake_manifest(&reg, &id(7), "edge"), MAX_MANIFEST),
    );

    // Only the real instance is listed.
    assert_eq!(ids(&list_json(&env, None, &[])), [served.id.as_str()]);

    let all = list_json(&env, None, &["--all"]);
    assert_eq!(all.len(), 8, "{all:#?}");
    assert_eq!(all[0]["instance_id"], json!(served.id));
    assert!(all[0].get("problem").is_none(), "{}", all[0]);
    let problems: BTreeMap<PathBuf, String> = all[1..]
        .iter()
        .map(|v| {
            let path = PathBuf::from(v["path"].as_str().expect("path is a string"));
            let problem = v["problem"].as_str().expect("problem is a string");
            (path, problem.to_string())
        })
        .collect();
    assert_eq!(problems.len(), 7, "{all:#?}");
    for (path, want) in &expect {
        assert_eq!(problems.get(path), Some(want), "{}", path.display());
    }
    let broken_problem = &problems[&broken];
    assert!(
        broken_problem.starts_with("manifest: payload is not one flat JSON object: "),
        "{broken_problem:?}"
    );
    assert!(
        problems[&edge].starts_with("stale: "),
        "a 16 KiB manifest was refused: {:?}",
        problems[&edge]
    );

    // The text view reports the same entries.
    let out = env.run(&["list", "--all"]);
    assert_eq!(out.status, 0, "{out:?}");
    for (path, want) in &expect {
        let line = format!("skipped {}: {want}\n", path.display());
        assert!(
            out.stdout.contains(&line),
            "no {line:?} in:\n{}",
            out.stdout
        );
    }

    // gc collects only the stale entry; the bad ones are not provably dead.
    let gc = json_of(&env.run(&["gc", "--json"]), "gc --json");
    assert_eq!(gc, json!({"removed": [id(7)]}));
    assert!(!exists(&edge));
    for path in [&link, &big, &broken, &array, &nested, &astray] {
        assert!(exists(path), "gc removed {}", path.display());
    }
    assert!(target.is_file(), "gc touched the symlink's target");
    assert!(served.socket.exists(), "gc touched a live socket");
}

/// Asserts that serve, list, gc and send all refuse with exit 2 and
/// exactly `message` on stderr when BATON_DIR is `dir`.
fn assert_refused(env: &Env, dir: &str, message: &str) {
    let ws = env.workspace("ws");
    for args in [
        &["serve"][..],
        &["list"],
        &["list", "--json"],
        &["gc"],
        &["send", "x", "y"],
    ] {
        let out = env.run_with(&[("BATON_DIR", dir)], Some(&ws), args, None);
        assert_eq!(
            (out.status, out.stdout.as_str(), out.stderr.as_str()),
            (2, "", message),
            "baton {args:?} with BATON_DIR={dir}"
        );
    }
}

fn unsafe_dir(dir: &Path, reason: &str) -> String {
    format!(
        "baton: unsafe registry directory {}: {reason}\n",
        dir.display()
    )
}

#[test]
fn symlinked_registry_directory_is_refused() {
    let env = Env::new();
    let real = env.root.join("real");
    fs::DirBuilder::new().create(&real).unwrap();
    fs::set_permissions(&real, fs::Permissions::from_mode(0o700)).unwrap();
    let link = env.root.join("link");
    symlink(&real, &link).unwrap();
    assert_refused(&env, s(&link), &unsafe_dir(&link, "is a symlink"));
    assert_eq!(
        fs::read_dir(&real).unwrap().count(),
        0,
        "baton wrote into it"
    );
}

#[test]
fn registry_directory_with_group_or_other_access_is_refused() {
    let env = Env::new();
    for mode in [0o755, 0o770, 0o701] {
        let dir = env.root.join(format!("reg{mode:o}"));
        fs::DirBuilder::new().create(&dir).unwrap();
        fs::set_permissions(&dir, fs::Permissions::from_mode(mode)).unwrap();
        let reason =
            format!("has mode {mode:04o}, which gives group or other access (it must be 0700)");
        assert_refused(&env, s(&dir), &unsafe_dir(&dir, &reason));
        assert_eq!(
            fs::read_dir(&dir).unwrap().count(),
            0,
            "baton wrote into it"
        );
        let now = fs::metadata(&dir).unwrap().mode() & 0o7777;
        assert_eq!(now, mode, "baton changed the mode of {}", dir.display());
    }
}

#[test]
fn root_and_home_are_refused_as_registry_directories() {
    let env = Env::new();
    assert_refused(
        &env,
        "/",
        &unsafe_dir(Path::new("/"), "is the root directory"),
    );

    let home = env.root.join("home");
    assert_eq!(fs::metadata(&home).unwrap().mode() & 0o7777, 0o700);
    assert_refused(&env, s(&home), &unsafe_dir(&home, "is your home directory"));
    // Compared by device and inode, not by spelling.
    let other_spelling = env.root.join("tmp/../home");
    assert_refused(
        &env,
        s(&other_spelling),
        &unsafe_dir(&other_spelling, "is your home directory"),
    );
    assert_eq!(
        fs::read_dir(&home).unwrap().count(),
        0,
        "baton wrote into $HOME"
    );
}

#[test]
fn registry_directory_owned_by_another_user_is_refused() {
    let env = Env::new();
    let me = fs::metadata(env.root.path()).unwrap().uid();
    let dir = if me == 0 {
        let dir = env.root.join("theirs");
        fs::DirBuilder::new().create(&dir).unwrap();
        fs::set_permissions(&dir, fs::Permissions::from_mode(0o700)).unwrap();
        std::os::unix::fs::chown(&dir, Some(65534), Some(65534)).unwrap();
        dir
    } else {
        PathBuf::from("/usr")
    };
    let owner = fs::metadata(&dir).unwrap().uid();
    assert_ne!(owner, me);
    let reason = format!("is owned by uid {owner}, not by you (uid {me})");
    assert_refused(&env, s(&dir), &unsafe_dir(&dir, &reason));
}

#[test]
fn relative_baton_dir_is_refused() {
    let env = Env::new();
    assert_refused(
        &env,
        "rel",
        "baton: BATON_DIR=rel is not an absolute path\n",
    );
    assert!(
        !exists(&env.root.join("ws/rel")),
        "baton created a relative dir"
    );
}

#[test]
fn socket_path_over_sun_path_is_refused_before_binding() {
    let env = Env::new();
    // Long enough that `<dir>/a-<pid>-<16 digits>.sock` is over the limit
    // even for a one-digit pid.
    let base = s(env.root.path()).len() + 1;
    let want = SUN_PATH_MAX + 1 - "/a-1-0000000000000000.sock".len();
    assert!(want > base, "temp dir path is already too long");
    let dir = env.root.join("d".repeat(want - base));
    let ws = env.workspace("ws");

    let out = env.run_with(&[("BATON_DIR", s(&dir))], Some(&ws), &["serve"], None);
    let pid = out.pid;
    assert_eq!(out.status, 2, "{out:?}");
    assert_eq!(out.stdout, "");
    let prefix = format!("baton: socket path {}/a-{pid}-", dir.display());
    let nonce = out
        .stderr
        .strip_prefix(&prefix)
        .and_then(|rest| rest.get(..16))
        .unwrap_or_else(|| panic!("unexpected message: {:?}", out.stderr));
    assert!(
        nonce.bytes().all(|b| b.is_ascii_digit()),
        "{:?}",
        out.stderr
    );
    let socket = format!("{}/a-{pid}-{nonce}.sock", dir.display());
    let expected = format!(
        "baton: socket path {socket} is {} bytes, over the {SUN_PATH_MAX}-byte limit of sun_path: \
         choose a shorter BATON_DIR\n",
        socket.len()
    );
    assert_eq!(out.stderr, expected);
    assert!(manifests(&dir).is_empty());
    let left: Vec<_> = fs::read_dir(&dir).unwrap().collect();
    assert!(left.is_empty(), "left behind in the registry: {left:?}");
}

/// The one spool directory `name` has under the test's state home.
fn spool_of(env: &Env, name: &str) -> PathBuf {
    let root = env.state.join("baton/spool");
    let found: Vec<PathBuf> = fs::read_dir(&root)
        .unwrap_or_else(|e| panic!("read {}: {e}", root.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| {
            let n = p.file_name().unwrap().to_str().unwrap();
            n.strip_prefix(&format!("{name}-"))
                .is_some_and(|h| h.len() == 16 && h.bytes().all(|b| b.is_ascii_hexdigit()))
        })
        .collect();
    assert_eq!(found.len(), 1, "spools for {name}: {found:?}");
    found.into_iter().next().unwrap()
}

#[test]
fn second_instance_on_a_locked_spool_is_refused() {
    let env = Env::new();
    let ws = env.workspace("shared");
    let first = env.serve(&ws, &["--name", "same"]);
    let spool = spool_of(&env, "same");

    let mut second = env.spawn(&["serve", "--name", "same"], &ws);
    let second_pid = second.pid();
    assert_eq!(wait_exit(&mut second), 2, "stderr: {}", second.stderr());
    assert_eq!(
        second.stderr(),
        format!(
            "baton: spool {} is in use by pid {}: another instance with the same name and \
             workspace is running\n",
            spool.display(),
            first.proc.pid()
        )
    );
    assert_eq!(second.stdout(), "");

    // The second published nothing, and the first is unaffected.
    let reg = fs::canonicalize(&env.registry).unwrap();
    let only = wait_manifest(&reg, 1);
    assert_eq!(only, [reg.join(format!("a-{}.json", first.id))]);
    assert!(
        !manifests(&reg)
            .iter()
            .any(|p| p.to_str().unwrap().contains(&format!("a-{second_pid}-"))),
    );
    assert_eq!(ids(&list_json(&env, None, &[])), [first.id.as_str()]);
    assert_eq!(
        fs::read_to_string(spool.join("lock")).unwrap().trim(),
        first.proc.pid().to_string()
    );
}

#[test]
fn bad_baton_values_are_refused_naming_variable_and_range() {
    let env = Env::new();
    let ws = env.workspace("ws");
    let cases = [
        (
            "BATON_MAX_QUEUE",
            "0",
            "BATON_MAX_QUEUE=0 is not allowed: use an integer from 1 to 100000",
        ),
        (
            "BATON_IO_TIMEOUT",
            "abc",
            "BATON_IO_TIMEOUT=abc is not allowed: use seconds from 0.1 to 60",
        ),
    ];
    for (var, value, message) in cases {
        for args in [&["serve"][..], &["list"], &["gc"], &["send", "x", "y"]] {
            let out = env.run_with(&[(var, value)], Some(&ws), args, None);
            assert_eq!(
                (out.status, out.stdout.as_str(), out.stderr.as_str()),
                (2, "", format!("baton: {message}\n").as_str()),
                "baton {args:?} with {var}={value}"
            );
        }
    }
    // Configuration is checked before anything is created.
    assert!(
        !exists(&env.registry),
        "a refused start created the registry"
    );
    assert!(
        !exists(&env.state.join("baton")),
        "a refused start created a spool"
    );
}

/// An empty `BATON_SOCKET` counts as unset, as every empty `BATON_*`
/// variable does (docs/decisions.md): a command without TARGET addresses
/// the instance serving the current directory, not a socket named "", and
/// a send is a plain one. A process that started with both turn markers
/// set, even empty, is still taken for a turn (an instance never sets
/// them empty), and its send is refused.
#[test]
fn an_empty_baton_socket_counts_as_unset() {
    let env = Env::new();
    let ws = env.workspace("proj");
    let served = env.serve(&ws, &["--name", "here"]);
    let empty = [("BATON_SOCKET", "")];
    let out = env.run_with(&empty, Some(&ws), &["ping"], None);
    assert_eq!(out.status, 0, "{out:?}");
    let pong = format!("pong from here ({}): ready", served.id);
    assert!(out.stdout.starts_with(&pong), "{out:?}");
    let out = env.run_with(&empty, Some(&ws), &["send", "--json", "here", "hi"], None);
    let v = json_of(&out, "send with an empty BATON_SOCKET");
    assert_eq!(v["status"], "accepted", "{v}");

    let marked = [("BATON_SOCKET", ""), ("BATON_TURN", "")];
    let out = env.run_with(&marked, Some(&ws), &["send", "here", "hi"], None);
    assert_eq!(out.status, 1, "{out:?}");
    assert!(
        out.stderr
            .contains("not permitted: this process belongs to a turn"),
        "{out:?}"
    );
}

#[test]
fn sigterm_removes_manifest_and_socket_and_keeps_the_spool() {
    let env = Env::new();
    let ws = env.workspace("proj");
    let mut served = env.serve(&ws, &[]);
    let reg = fs::canonicalize(&env.registry).unwrap();
    let manifest = reg.join(format!("a-{}.json", served.id));
    assert!(manifest.is_file());
    assert!(served.socket.exists());
    let spool = spool_of(&env, "proj");

    assert_eq!(served.proc.term(), 0, "stderr: {}", served.proc.stderr());
    assert!(!exists(&manifest), "manifest left behind");
    assert!(!exists(&served.socket), "socket left behind");
    assert!(spool.is_dir(), "spool removed at shutdown");
    assert!(spool.join("lock").is_file());
    assert!(reg.is_dir(), "shutdown removed the registry directory");
    assert!(list_json(&env, None, &["--all"]).is_empty());

    // The kept spool is usable again by the next instance.
    let again = env.serve(&ws, &[]);
    assert_eq!(spool_of(&env, "proj"), spool);
    drop(again);
}

#[test]
fn shutdown_does_not_unlink_a_socket_it_did_not_create() {
    let env = Env::new();
    let mut served = env.serve(&env.workspace("proj"), &[]);
    let reg = fs::canonicalize(&env.registry).unwrap();
    let moved = env.root.join("moved.sock");
    fs::rename(&served.socket, &moved).unwrap();
    let theirs = UnixListener::bind(&served.socket).unwrap();
    let ino = fs::symlink_metadata(&served.socket).unwrap().ino();

    assert_eq!(served.proc.term(), 0, "stderr: {}", served.proc.stderr());
    let now = fs::symlink_metadata(&served.socket).expect("the replacement socket was unlinked");
    assert_eq!(now.ino(), ino, "the replacement socket was replaced");
    assert!(now.file_type().is_socket());
    assert!(!exists(&reg.join(format!("a-{}.json", served.id))));
    // Nor did shutdown connect to the replacement.
    theirs.set_nonblocking(true).unwrap();
    match theirs.accept() {
        Err(e) if e.kind() == ErrorKind::WouldBlock => {}
        other => panic!("the instance connected to a socket it did not create: {other:?}"),
    }
}

#[test]
fn shutdown_copes_with_its_socket_already_gone() {
    let env = Env::new();
    let mut served = env.serve(&env.workspace("proj"), &[]);
    let reg = fs::canonicalize(&env.registry).unwrap();
    fs::remove_file(&served.socket).unwrap();

    assert_eq!(served.proc.term(), 0, "stderr: {}", served.proc.stderr());
    assert!(!exists(&served.socket));
    assert!(!exists(&reg.join(format!("a-{}.json", served.id))));
}

/// Writes `n` files named as manifests of the ids `0-<k>`, which sort
/// before every real id, holding `bytes`.
fn junk_manifests(reg: &Path, n: usize, bytes: &[u8]) -> Vec<PathBuf> {
    (0..n)
        .map(|k| write_manifest(reg, &format!("0-{k:016}"), bytes))
        .collect()
}

/// Sends a task to `target` with `baton send`, and returns its output.
fn send_to(env: &Env, target: &str, body: &[u8]) -> Output {
    env.run_stdin(&["send", target, "-"], body)
}

/// Issue 17: 1,024 malformed manifests used up the scan's bound, so that
/// `baton list` saw no live instance and even a send by exact id failed.
#[test]
fn junk_manifests_do_not_hide_live_instances() {
    let env = Env::new();
    let reg = make_registry(&env);
    junk_manifests(&reg, 1100, b"{}");
    let served = env.serve(&env.workspace("live"), &[]);

    assert_eq!(ids(&list_json(&env, None, &[])), [served.id.as_str()]);
    let out = env.run(&["list"]);
    assert_eq!(out.status, 0, "{out:?}");
    assert!(out.stdout.contains(&served.id), "{out:?}");
    // No scan was cut short: junk costs a look, not a place.
    assert!(!out.stderr.contains("not looked at"), "{out:?}");
    let all = list_json(&env, None, &["--all"]);
    assert_eq!(all.len(), 1 + 1100, "the live one and every junk file");

    for target in [served.id.as_str(), "live"] {
        let out = send_to(&env, target, b"through the junk");
        assert_eq!(out.status, 0, "send {target}: {out:?}");
        assert!(out.stdout.starts_with("accepted: "), "{out:?}");
    }
}

/// Discovery reads at most 10,000 valid manifests per directory, however
/// many junk files come first, and says how many it did not look at; an
/// exact id is found past the bound, since its manifest is read directly.
/// A name past the bound is not resolved, and the error names the bound.
#[test]
fn discovery_reads_at_most_10000_valid_manifests_and_says_how_many_it_did_not() {
    let env = Env::new();
    let reg = make_registry(&env);
    let junk = junk_manifests(&reg, 300, b"not json");
    // Valid manifests of pid 1, which is alive, whose ids sort before any
    // real one and whose sockets are missing: each is pinged and skipped.
    for k in 0..10_006 {
        let id = format!("1-{k:016}");
        write_manifest(
            &reg,
            &id,
            fake_manifest(&reg, &id, "filler").to_string().as_bytes(),
        );
    }
    let served = env.serve(&env.workspace("last"), &[]);
    // Not looked at: six fillers and the live instance's own manifest.
    let problem =
        "7 manifests not looked at: discovery reads at most 10000 valid manifests per directory";

    let listed = list_json(&env, None, &[]);
    assert_eq!(
        listed,
        [json!({
            "path": s(&reg),
            "wire": "jsonrpc",
            "problem": problem,
            "not_looked_at": 7,
            "unlisted": false,
        })]
    );
    let all = list_json(&env, None, &["--all"]);
    assert_eq!(
        all.len(),
        300 + 10_000 + 1,
        "every manifest looked at, and the note"
    );
    assert_eq!(all.last(), listed.last());
    assert_eq!(all[0]["path"], json!(s(&junk[0])), "{}", all[0]);

    let out = env.run(&["list"]);
    assert_eq!(out.status, 0, "{out:?}");
    assert_eq!(
        out.stderr,
        format!(
            "baton: {}: {problem}\nbaton: no other live instances in {}\n",
            reg.display(),
            reg.display()
        )
    );

    // The instance past the bound is still reached by its id.
    let out = send_to(&env, &served.id, b"past the bound");
    assert_eq!(out.status, 0, "{out:?}");
    assert!(out.stdout.starts_with("accepted: "), "{out:?}");

    // By its name it is not found, and the error says why: the bound.
    for args in [&["status", "last"][..], &["send", "last", "by name"]] {
        let out = env.run(args);
        assert_eq!(out.status, 4, "{args:?}: {out:?}");
        assert!(
            out.stderr.contains(problem) && !out.stderr.contains("no live instance answered"),
            "{args:?}: {out:?}"
        );
    }
}

/// Issue 34: an instance publishes a name entry, `n-<id>@<name>`, an
/// empty private file, with its manifest, and removes both
/// when it stops; a crash leaves it, and the next start removes it with
/// the stale manifest.
#[test]
fn the_name_entry_comes_and_goes_with_the_manifest() {
    let env = Env::new();
    let reg = make_registry(&env);
    let mut a = env.serve(&env.workspace("named"), &[]);
    let entry = reg.join(format!("n-{}@named", a.id));
    let meta = fs::symlink_metadata(&entry).expect("the name entry");
    assert!(meta.is_file() && meta.len() == 0, "{meta:?}");
    assert_eq!(meta.mode() & 0o777, 0o600, "{meta:?}");
    assert_eq!(a.term(), 0);
    assert!(!exists(&entry), "stopping left the name entry");

    let mut b = env.serve(&env.workspace("crashed"), &[]);
    let crashed = reg.join(format!("n-{}@crashed", b.id));
    b.kill9();
    assert!(exists(&crashed));
    let _c = env.serve(&env.workspace("next"), &[]);
    assert!(
        gone_soon(&crashed),
        "the next start left the crashed one's name entry"
    );
}

/// Issue 34: 1,100 instances in one registry, 1,099 of them stale entries
/// that sort first: the live one stays reachable by its name (the scan's
/// bound was 1,024 manifests, and `send` then said that no live instance
/// answered while the spool stayed locked).
#[test]
fn an_instance_behind_1100_manifests_is_reached_by_name() {
    let env = Env::new();
    let reg = make_registry(&env);
    let served = env.serve(&env.workspace("behind"), &[]);
    // Past any pid_max, so the kernel says they are gone; planted after
    // the start, which would have removed them. Ids of pid 1000000000
    // sort before any real one but those of pids 1, 10, ..., 1000000.
    for k in 0..1_099 {
        let id = format!("1000000000-{k:016}");
        write_manifest(
            &reg,
            &id,
            fake_manifest(&reg, &id, "gone").to_string().as_bytes(),
        );
    }
    let out = env.run(&["status", "behind"]);
    assert_eq!(out.status, 0, "{out:?}");
    assert!(out.stdout.contains(&served.id), "{out:?}");
    let out = send_to(&env, "behind", b"through the stale ones");
    assert_eq!(out.status, 0, "{out:?}");
    assert!(out.stdout.starts_with("accepted: "), "{out:?}");
}

/// A registry directory of more than 40000 entries is listed only that
/// far, and the scan says so; an exact id is still found.
#[test]
fn a_registry_past_40000_entries_is_listed_that_far_and_says_so() {
    let env = Env::new();
    let reg = make_registry(&env);
    for k in 0..40_016 {
        fs::write(reg.join(format!("x-{k}")), b"").unwrap();
    }
    let served = env.serve(&env.workspace("among"), &[]);
    let listed = list_json(&env, None, &[]);
    let note = listed
        .iter()
        .find(|v| v.get("unlisted").is_some())
        .unwrap_or_else(|| panic!("no note of the entries left unlisted: {listed:?}"));
    assert_eq!(note["unlisted"], true, "{note}");
    assert_eq!(note["path"], json!(s(&reg)), "{note}");
    let problem = note["problem"].as_str().unwrap();
    assert!(
        problem.ends_with(" not looked at, nor any entry past the first 40000 of the directory"),
        "{problem}"
    );
    let out = send_to(&env, &served.id, b"found by id");
    assert_eq!(out.status, 0, "{out:?}");
}

/// Whether `path` is gone within a few seconds: `baton serve` removes
/// stale entries just after it has published its manifest.
fn gone_soon(path: &Path) -> bool {
    crate::util::poll(Duration::from_secs(10), crate::util::POLL, || {
        (!exists(path)).then_some(())
    })
    .is_some()
}

/// Sets a file's modification time `age` into the past.
fn age(path: &Path, age: Duration) {
    let f = OpenOptions::new().write(true).open(path).unwrap();
    f.set_modified(SystemTime::now() - age).unwrap();
}

/// Issue 17: `baton gc`, and `baton serve` at start, remove manifests that
/// do not parse once they are a minute old; nothing else of the kind.
#[test]
fn gc_and_serve_remove_manifests_that_do_not_parse_once_a_minute_old() {
    let env = Env::new();
    let reg = make_registry(&env);
    let two_minutes = Duration::from_secs(120);
    let old = |id: &str, bytes: &[u8]| {
        let p = write_manifest(&reg, id, bytes);
        age(&p, two_minutes);
        p
    };
    let garbage = old("0-1", b"not json");
    let empty = old("0-2", b"");
    let array = old("0-3", b"[1, 2]");
    let cut = old("0-4", b"{\"protocol\": 1, \"pid\":");
    // Kept: too young, a JSON object (of another version, say), over
    // 16 KiB (never read), a symlink, a directory, a name outside the
    // grammar.
    let young = write_manifest(&reg, "0-5", b"not json");
    let object = old("0-6", br#"{"protocol": 2}"#);
    let big = old("0-7", &vec![b'x'; MAX_MANIFEST + 1]);
    let target = env.root.join("target.json");
    fs::write(&target, b"not json").unwrap();
    age(&target, two_minutes);
    let link = reg.join("a-0-8.json");
    symlink(&target, &link).unwrap();
    let dir = reg.join("a-0-9.json");
    fs::create_dir(&dir).unwrap();
    let odd = reg.join("a-0 10.json");
    fs::write(&odd, b"not json").unwrap();
    age(&odd, two_minutes);

    let gc = json_of(&env.run(&["gc", "--json"]), "gc --json");
    let removed = [&garbage, &empty, &array, &cut];
    assert_eq!(
        gc,
        json!({"removed": [], "malformed": removed.map(|p| s(p))}),
    );
    for p in removed {
        assert!(!exists(p), "gc left {}", p.display());
    }
    for p in [&young, &object, &big, &link, &dir, &odd, &target] {
        assert!(exists(p), "gc removed {}", p.display());
    }
    assert_eq!(fs::read(&target).unwrap(), b"not json");

    // The text form, and `serve` at start.
    let again = old("0-11", b"}");
    let out = env.run(&["gc"]);
    assert_eq!(
        out.stdout,
        format!("removed malformed manifest {}\n", again.display()),
        "{out:?}"
    );
    let at_start = old("0-12", b"\x00\xff");
    let served = env.serve(&env.workspace("fresh"), &[]);
    assert!(gone_soon(&at_start), "serve left a malformed manifest");
    assert!(exists(&young) && exists(&object));
    assert_eq!(ids(&list_json(&env, None, &[])), [served.id.as_str()]);
}

/// Issue 17: discovery lstats a manifest's socket: a symlink
/// `a-<id>.sock` pointing out of the registry is never connected to, by
/// `list`, by a send to its id, or by `gc`; a socket path that is not a
/// socket is skipped too.
#[test]
fn discovery_never_follows_a_symlinked_socket_out_of_the_registry() {
    let env = Env::new();
    let reg = make_registry(&env);
    let outside = env.root.join("outside.sock");
    let listener = UnixListener::bind(&outside).unwrap();
    listener.set_nonblocking(true).unwrap();
    let sleeper = Sleeper::start();
    let live_id = format!("{}-1717171717171717", sleeper.pid());
    let dead_id = format!("{}-1818181818181818", dead_pid());
    let file_id = format!("{}-1919191919191919", sleeper.pid());
    for (id, name) in [
        (&live_id, "astray"),
        (&dead_id, "ghost"),
        (&file_id, "plain"),
    ] {
        write_manifest(
            &reg,
            id,
            fake_manifest(&reg, id, name).to_string().as_bytes(),
        );
    }
    for id in [&live_id, &dead_id] {
        symlink(&outside, reg.join(format!("a-{id}.sock"))).unwrap();
    }
    fs::write(reg.join(format!("a-{file_id}.sock")), b"").unwrap();

    let all = list_json(&env, None, &["--all"]);
    let problems: BTreeMap<&str, &str> = all
        .iter()
        .map(|v| {
            (
                v["instance_id"].as_str().unwrap(),
                v["problem"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        problems,
        BTreeMap::from([
            (live_id.as_str(), "socket is a symlink"),
            (dead_id.as_str(), "socket is a symlink"),
            (file_id.as_str(), "socket is not a socket"),
        ])
    );
    let out = send_to(&env, &live_id, b"astray");
    assert_eq!(out.status, 3, "{out:?}");
    let gc = json_of(&env.run(&["gc", "--json"]), "gc --json");
    assert_eq!(
        gc,
        json!({"removed": []}),
        "a symlinked socket is not provably dead"
    );
    assert!(exists(&reg.join(format!("a-{dead_id}.json"))));

    match listener.accept() {
        Err(e) if e.kind() == ErrorKind::WouldBlock => {}
        other => panic!("something connected through the symlink: {other:?}"),
    }
}

/// A stand-in for a zcoder instance: answers each `ZCODER-AGENT/1` ping
/// frame with a `pong` ack frame, as zcoder's listener does.
fn zcoder_peer(listener: UnixListener, id: String) -> thread::JoinHandle<usize> {
    thread::spawn(move || {
        let mut answered = 0;
        listener.set_nonblocking(false).unwrap();
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { break };
            conn.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            let mut header = Vec::new();
            let mut byte = [0u8; 1];
            while conn.read(&mut byte).unwrap_or(0) == 1 && byte[0] != b'\n' {
                header.push(byte[0]);
            }
            let header = String::from_utf8(header).unwrap();
            if header == "stop" {
                break;
            }
            let n: usize = header
                .strip_prefix("ZCODER-AGENT/1 ")
                .unwrap()
                .parse()
                .unwrap();
            let mut payload = vec![0u8; n];
            conn.read_exact(&mut payload).unwrap();
            let req: Value = serde_json::from_slice(&payload).unwrap();
            assert_eq!(req["type"], "ping");
            let status = if req["target_instance_id"] == id.as_str() {
                "pong"
            } else {
                "wrong_target"
            };
            let ack = json!({"protocol": 1, "type": "ack", "message_id": req["message_id"],
                             "status": status, "state": "busy"})
            .to_string();
            conn.write_all(format!("ZCODER-AGENT/1 {}\n{ack}", ack.len()).as_bytes())
                .unwrap();
            answered += 1;
        }
        answered
    })
}

#[test]
fn zcoder_instances_are_listed_with_wire_zcoder() {
    let env = Env::new();
    let zdir = env.root.join("zc");
    fs::create_dir(&zdir).unwrap();
    fs::set_permissions(&zdir, fs::Permissions::from_mode(0o700)).unwrap();
    let zdir = fs::canonicalize(&zdir).unwrap();
    let pid = std::process::id();
    let id = format!("{pid}-18473291");
    let sock = zdir.join(format!("a-{id}.sock"));
    let peer = zcoder_peer(UnixListener::bind(&sock).unwrap(), id.clone());
    // zcoder's manifest: no name, wire or baton_version; a project label.
    let m = json!({
        "protocol": 1, "instance_id": id, "pid": pid, "project": "weekly digest",
        "workspace": "/work/app/services/weekly-digest", "session_id": "1788012120_10392",
        "profile": "coding", "model": "qwen3-coder", "socket": s(&sock), "state": "ready",
        "started_at": 1788012102u64,
    });
    write_manifest(&zdir, &id, m.to_string().as_bytes());
    let ws = env.workspace("b");
    let b = env.serve(&ws, &["--name", "b"]);
    let out = env.run_with(
        &[("ZCODER_RELAY_DIR", s(&zdir))],
        None,
        &["list", "--json"],
        None,
    );
    let items = match json_of(&out, "list --json") {
        Value::Array(items) => items,
        other => panic!("{other}"),
    };
    assert_eq!(ids(&items), [b.id.as_str(), id.as_str()]);
    let z = &items[1];
    assert_eq!(z["wire"], "zcoder");
    assert_eq!(z["name"], "weekly_digest");
    assert_eq!(z["project"], "weekly digest");
    assert_eq!(
        z["state"], "busy",
        "the state comes from the ping, not the file"
    );
    assert_eq!(z["model"], "qwen3-coder");
    let text = env.run_with(&[("ZCODER_RELAY_DIR", s(&zdir))], None, &["list"], None);
    let row: Vec<&str> = text
        .stdout
        .lines()
        .find(|l| l.starts_with("weekly_digest"))
        .unwrap_or_else(|| panic!("{}", text.stdout))
        .split_whitespace()
        .collect();
    let pid_s = pid.to_string();
    assert_eq!(
        row,
        [
            "weekly_digest",
            pid_s.as_str(),
            "busy",
            id.as_str(),
            "zcoder",
            "/work/app/services/weekly-digest"
        ]
    );
    // An unsafe zcoder directory is not scanned at all.
    fs::set_permissions(&zdir, fs::Permissions::from_mode(0o755)).unwrap();
    let out = env.run_with(
        &[("ZCODER_RELAY_DIR", s(&zdir))],
        None,
        &["list", "--json", "--all"],
        None,
    );
    assert_eq!(
        ids(&match json_of(&out, "list") {
            Value::Array(a) => a,
            o => panic!("{o}"),
        }),
        [b.id.as_str()]
    );
    let mut stop = std::os::unix::net::UnixStream::connect(&sock).unwrap();
    stop.write_all(b"stop\n").unwrap();
    assert_eq!(
        peer.join().unwrap(),
        2,
        "each list pinged the zcoder peer once"
    );
}

#[test]
fn sigint_shuts_down_like_sigterm() {
    let env = Env::new();
    let ws = env.workspace("int");
    let mut a = env.serve(&ws, &["--name", "int"]);
    let manifest = env.registry.join(format!("a-{}.json", a.id));
    assert!(exists(&manifest) && exists(&a.socket));
    a.signal(libc::SIGINT);
    assert_eq!(wait_exit(&mut a.proc), 0);
    assert!(!exists(&manifest) && !exists(&a.socket));
}

/// Issue 18: an instance stopped with SIGSTOP (its pid alive, its socket
/// silent) is unresponsive, not missing: `ping` and `send` fail in
/// transport (exit 4) saying so, `list` shows it, and a send never falls
/// back to storing the task in its spool.
#[test]
fn issue_18_a_stopped_instance_is_unresponsive_not_missing() {
    let env = Env::new();
    let ws = env.workspace("slow");
    let mut slow = env.serve(&ws, &["--name", "slow"]);
    let spool = spool_of(&env, "slow");
    let quick = [("BATON_IO_TIMEOUT", "0.5")];
    let run = |args: &[&str]| env.run_with(&quick, None, args, None);
    slow.proc.signal(libc::SIGSTOP);
    let silent = format!("baton: slow ({}) did not answer within 0.5 s\n", slow.id);

    for target in ["slow", slow.id.as_str()] {
        let out = run(&["ping", target]);
        assert_eq!(
            (out.status, out.stderr.as_str()),
            (4, silent.as_str()),
            "{out:?}"
        );
    }
    let out = run(&["status", "slow"]);
    assert_eq!(
        (out.status, out.stderr.as_str()),
        (4, silent.as_str()),
        "{out:?}"
    );

    let out = run(&["list", "--json"]);
    assert_eq!(out.status, 0, "{out:?}");
    let listed: Vec<Value> = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!(listed[0]["instance_id"], slow.id.as_str());
    assert_eq!(listed[0]["state"], "unresponsive");
    let out = run(&["list"]);
    assert_eq!(out.status, 0, "{out:?}");
    assert!(
        out.stdout
            .lines()
            .nth(1)
            .is_some_and(|l| l.starts_with("slow ") && l.contains(" unresponsive ")),
        "{out:?}"
    );

    let out = run(&["send", "slow", "while stopped", "--message-id", "m-1"]);
    assert_eq!(
        (out.status, out.stderr.as_str()),
        (4, silent.as_str()),
        "{out:?}"
    );
    let out = run(&[
        "send",
        "slow",
        "while stopped",
        "--message-id",
        "m-2",
        "--json",
    ]);
    assert_eq!(out.status, 4, "{out:?}");
    let r: Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(r["status"], "transport");
    assert_eq!(r["target"]["instance_id"], slow.id.as_str());
    let inbox = fs::read_dir(spool.join("inbox"))
        .map(|d| d.count())
        .unwrap_or(0);
    assert_eq!(
        inbox, 0,
        "a send to a stopped instance stored a task in its spool"
    );

    // Resumed, it answers again.
    slow.proc.signal(libc::SIGCONT);
    let out = run(&["ping", "slow"]);
    assert_eq!(out.status, 0, "{out:?}");
    assert_eq!(slow.term(), 0);
}

/// Makes a FIFO at `path`, as another process of the user might.
fn mkfifo(path: &Path) {
    let made = Command::new("mkfifo").arg(path).status().unwrap();
    assert!(made.success(), "mkfifo {}", path.display());
}

/// Issue 17: a FIFO (or a socket) named `a-<id>.json` in the registry is
/// never opened as a manifest in a way that waits: `list`, a send to its
/// id and `gc` answer at once (each bounded by the harness), report it by
/// its kind, and leave it where it is, however old.
#[test]
fn a_fifo_or_socket_named_as_a_manifest_never_stalls_discovery() {
    let env = Env::new();
    let reg = make_registry(&env);
    let served = env.serve(&env.workspace("live"), &[]);
    let pid = dead_pid();
    let (fifo_id, sock_id) = (format!("{pid}-{:016}", 1), format!("{pid}-{:016}", 2));
    let fifo = reg.join(format!("a-{fifo_id}.json"));
    mkfifo(&fifo);
    let sock = reg.join(format!("a-{sock_id}.json"));
    drop(UnixListener::bind(&sock).unwrap());
    for p in [&fifo, &sock] {
        // Old enough for gc to remove it if it were a malformed file.
        let touched = Command::new("touch")
            .args(["-d", "2 minutes ago"])
            .arg(p)
            .status()
            .unwrap();
        assert!(touched.success(), "touch {}", p.display());
    }

    assert_eq!(ids(&list_json(&env, None, &[])), [served.id.as_str()]);
    let all = list_json(&env, None, &["--all"]);
    let problems: BTreeMap<&str, &str> = all
        .iter()
        .filter_map(|v| Some((v["path"].as_str()?, v["problem"].as_str()?)))
        .collect();
    assert_eq!(
        problems,
        BTreeMap::from([
            (s(&fifo), "manifest is a FIFO, not a regular file"),
            (s(&sock), "manifest is a socket, not a regular file"),
        ]),
        "{all:#?}"
    );
    let out = send_to(&env, &fifo_id, b"to a FIFO");
    assert_eq!(out.status, 3, "{out:?}");
    let gc = json_of(&env.run(&["gc", "--json"]), "gc --json");
    assert_eq!(gc, json!({"removed": []}));
    assert!(fs::symlink_metadata(&fifo).unwrap().file_type().is_fifo());
    assert!(fs::symlink_metadata(&sock).unwrap().file_type().is_socket());
    let out = send_to(&env, &served.id, b"still reached");
    assert_eq!(out.status, 0, "{out:?}");
}

/// The kernel's word on a pid holds only in the pid namespace the
/// manifest was written in: an entry from another namespace (a container
/// sharing the registry), whose pid this namespace does not have, is not
/// called stale on that word, nor removed for it; it is asked over its
/// socket. Here its socket is bound and silent: not stale, only slow to
/// answer.
#[test]
fn an_entry_from_another_pid_namespace_is_not_judged_by_our_kernel() {
    let env = Env::new();
    let reg = make_registry(&env);
    let pid = dead_pid();
    let id = format!("{pid}-4343434343434343");
    let mut manifest = fake_manifest(&reg, &id, "guest");
    manifest["pid_ns"] = json!(1u64);
    let mpath = write_manifest(&reg, &id, manifest.to_string().as_bytes());
    let listener = UnixListener::bind(reg.join(format!("a-{id}.sock"))).unwrap();
    let vars = [("BATON_IO_TIMEOUT", "1")];
    let out = env.run_with(&vars, None, &["list", "--json", "--all"], None);
    assert_eq!(out.status, 0, "{out:?}");
    let all: Vec<Value> = serde_json::from_str(&out.stdout).unwrap();
    let guest: Vec<&Value> = all
        .iter()
        .filter(|e| e["instance_id"] == json!(id))
        .collect();
    assert_eq!(guest.len(), 1, "{all:?}");
    let problem = guest[0]["problem"].as_str().unwrap_or("");
    assert!(!problem.starts_with("stale"), "{problem}");
    // Neither gc nor a starting instance removes it on the kernel's word.
    let out = env.run_with(&vars, None, &["gc"], None);
    assert_eq!(out.status, 0, "{out:?}");
    let mut s = env.serve_with(&env.workspace("host"), &vars, &["--name", "host"]);
    assert!(exists(&mpath), "{}", s.stderr());
    s.term();
    assert!(exists(&mpath));
    drop(listener);
}

/// Issue 46, point 4: an answer that found no instance names the
/// directory it searched, and a relative `XDG_RUNTIME_DIR` is ignored with
/// a warning that says so, where `list` once said `no other live
/// instances` and nothing of where it had looked.
#[test]
fn finding_no_instance_names_the_registry_searched() {
    let env = Env::new();
    let out = env.run(&["list"]);
    assert_eq!(out.status, 0, "{out:?}");
    let reg = std::fs::canonicalize(&env.registry).unwrap();
    let none = format!("baton: no other live instances in {}\n", reg.display());
    assert_eq!(out.stderr, none);
    let out = env.run(&["send", "nobody", "hello"]);
    assert_eq!(out.status, 3, "{out:?}");
    assert!(
        out.stderr
            .contains(&format!("no live instances in {}", reg.display())),
        "{out:?}"
    );
    // Without BATON_DIR: the relative XDG_RUNTIME_DIR is passed over, and
    // said to be; the registry used is the temporary one.
    let tmp = env.root.join("tmp");
    let out = env
        .cmd()
        .arg("list")
        .env_remove("BATON_DIR")
        .env("XDG_RUNTIME_DIR", "relative/run")
        .env("TMPDIR", &tmp)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.starts_with(
            "baton: warning: XDG_RUNTIME_DIR=relative/run is not an absolute path; ignored\n"
        ),
        "{err}"
    );
    assert!(err.contains("no other live instances in "), "{err}");
}

/// Issue 46, point 6: `serve` refuses a name a live instance has (exit 2,
/// naming it, its pid and workspace, and `--name`), where a second one was
/// accepted and every `send NAME` then failed `ambiguous`; a name must
/// start with a letter or a digit (`--name -x` was accepted, and could
/// not then be used); and a directory name outside the grammar is made a
/// name by the documented rule, keeping its letters (`café` → `cafe`, once
/// `caf_`), which `serve` says.
#[test]
fn serve_takes_no_live_name_and_says_the_name_it_made() {
    let env = Env::new();
    let ws = env.workspace("café");
    let mut first = env.serve(&ws, &[]);
    assert!(
        first.stderr().contains(
            "baton: the name is cafe, made of the directory's name café (docs/protocol.md §2); --name chooses another\n"
        ),
        "{}",
        first.stderr()
    );
    let other = env.workspace("elsewhere");
    let ws_arg = other.to_str().unwrap();
    let out = env.run(&["serve", "--name", "cafe", "--workspace", ws_arg]);
    assert_eq!(out.status, 2, "{out:?}");
    let want = format!(
        "baton: the name cafe is taken by the live instance {} (pid {}, workspace {}): choose another with --name\n",
        first.id,
        first.pid(),
        ws.display()
    );
    assert_eq!(out.stderr, want);
    for bad in ["-x", "_x", ".x"] {
        let out = env.run(&["serve", "--name", bad, "--workspace", ws_arg]);
        assert_eq!(out.status, 2, "{bad}: {out:?}");
        assert!(
            out.stderr.contains("start with a letter or a digit"),
            "{out:?}"
        );
    }
    // The name is sendable: one instance has it.
    let out = env.run(&["send", "cafe", "hello", "--json"]);
    assert_eq!(out.status, 0, "{out:?}");
    assert_eq!(first.term(), 0);
}
