//! One command on several hosts through a real sshd (docs/ssh.md,
//! "Several hosts"): three ssh host aliases in a private ssh config,
//! `alpha` and `beta` each with a registry of its own (sshd's `AcceptEnv`
//! and the alias's `SetEnv`), and `dead`, a port nothing listens on.

use std::fs;
use std::time::Duration;

use serde_json::{Value, json};

use crate::util::sshd::{Masters, Sshd, have_sshd};
use crate::util::{Env, baton_bin, wait_until};

const T: Duration = Duration::from_secs(30);

/// A port on 127.0.0.1 that nothing listens on (bound, then closed).
fn dead_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

fn rows(out: &str) -> Vec<Vec<&str>> {
    out.lines()
        .map(|l| l.split_whitespace().collect())
        .collect()
}

#[test]
fn one_command_reaches_every_host_and_names_the_one_that_failed() {
    if !have_sshd() {
        return;
    }
    let (alpha, beta, local) = (Env::new(), Env::new(), Env::new());
    // `w` on both hosts; `a1` on alpha only.
    let a1 = alpha.serve(&alpha.workspace("a1"), &["--name", "a1"]);
    let aw = alpha.serve(&alpha.workspace("w"), &["--name", "w"]);
    let bw = beta.serve(&beta.workspace("w"), &["--name", "w"]);
    let home = local.root.join("home");
    let sshd = Sshd::start(None, Some(&home)).unwrap_or_else(|e| panic!("{e}"));
    let _masters = Masters(local.registry.clone());
    let config = local.root.join("ssh_config");
    let worlds = [("alpha", &alpha), ("beta", &beta)];
    fs::write(&config, sshd.aliases(&worlds, Some(dead_port()))).unwrap();
    let via = |alias: &str| format!("ssh -F {} {alias}", config.display());
    // --hosts: a command line, a comment and a blank line.
    let hosts = local.root.join("hosts");
    fs::write(&hosts, format!("# the rest\n\n{}  # gone\n", via("dead"))).unwrap();
    let bin = baton_bin();
    let remote = [("BATON_REMOTE", bin.to_str().unwrap())];
    let hosts = hosts.to_str().unwrap();
    // A generous --host-timeout: a busy machine's ssh session may take
    // longer than the default 10 s.
    let run = |args: &[&str]| {
        let args = [args, &["--host-timeout", "120"][..]].concat();
        local.run_with(&remote, None, &args, None)
    };
    let (va, vb) = (via("alpha"), via("beta"));
    let every = ["--via", &va, "--via", &vb, "--hosts", hosts];

    // list --json: every live host's instances, each with its host; the
    // dead one is a line on stderr and exit 4.
    let out = run(&[&["list", "--json"][..], &every].concat());
    assert_eq!(out.status, 4, "{out:?}");
    let items: Vec<Value> = serde_json::from_str(out.stdout.trim()).unwrap();
    let mut got: Vec<(&str, &str)> = (items.iter())
        .map(|v| {
            (
                v["host"].as_str().unwrap(),
                v["instance_id"].as_str().unwrap(),
            )
        })
        .collect();
    got.sort();
    let mut want = [
        ("alpha", a1.id.as_str()),
        ("alpha", aw.id.as_str()),
        ("beta", bw.id.as_str()),
    ];
    want.sort();
    assert_eq!(got, want, "{out:?}");
    let said: Vec<&str> = out.stderr.lines().collect();
    assert_eq!(said.len(), 1, "{out:?}");
    assert!(said[0].starts_with("dead: unreachable: "), "{out:?}");
    assert!(said[0].contains("Connection refused"), "{out:?}");

    // As text: a HOST column first, one header.
    let out = run(&[&["list"][..], &every].concat());
    assert_eq!(out.status, 4, "{out:?}");
    let r = rows(&out.stdout);
    assert_eq!(r[0][..3], ["HOST", "NAME", "PID"], "{out:?}");
    let mut named: Vec<(&str, &str)> = r[1..].iter().map(|r| (r[0], r[1])).collect();
    named.sort();
    assert_eq!(
        named,
        [("alpha", "a1"), ("alpha", "w"), ("beta", "w")],
        "{out:?}"
    );

    // Only live hosts: exit 0. `status NAME` answers where NAME is; the
    // host without it says so on stderr, under its name, and the whole
    // does not fail for it.
    let out = run(&["status", "a1", "--via", &va, "--via", &vb, "--json"]);
    assert_eq!(out.status, 0, "{out:?}");
    let answers: Vec<Value> = (out.stdout.lines())
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(answers.len(), 1, "{out:?}");
    assert_eq!(answers[0]["host"], json!("alpha"), "{out:?}");
    assert_eq!(answers[0]["instance_id"], json!(a1.id), "{out:?}");
    assert!(out.stderr.starts_with("beta: "), "{out:?}");

    // pause through one host: its answer after the host's name.
    let out = run(&["pause", "a1", "--via", &va]);
    assert_eq!(out.status, 0, "{out:?}");
    assert!(out.stdout.starts_with("alpha  "), "{out:?}");
    wait_until("a1 paused", T, || a1.manifest_state() == "paused");

    // watch over two hosts: both hosts' events, each with its host. From
    // the first recorded event on (`--since 1`), so that a send made
    // before a host's watch has subscribed is seen all the same.
    let mut w = local.spawn_with(
        &remote,
        &[
            "watch", "w", "--since", "1", "--via", &va, "--via", &vb, "--json",
        ],
        local.root.path(),
        None,
    );
    for (v, id) in [(&va, "to-alpha"), (&vb, "to-beta")] {
        let args = ["send", "--via", v, "w", "hello", "--message-id", id];
        let out = local.run_with(&remote, None, &args, None);
        assert_eq!(out.status, 0, "{out:?}");
    }
    let seen = |host: &str, id: &str| {
        w.stdout().lines().any(|l| {
            let v: Value = serde_json::from_str(l).unwrap_or(Value::Null);
            v["host"] == json!(host) && v["message_id"] == json!(id)
        })
    };
    wait_until("both hosts' events in the merged watch", T, || {
        seen("alpha", "to-alpha") && seen("beta", "to-beta")
    });
    assert!(w.is_running(), "{}", w.stderr());
    w.term();
}
