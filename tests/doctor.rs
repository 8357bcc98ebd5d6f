//! `baton doctor` and `baton gc --spools` (issue 46, "Where instances are,
//! and what they are called"): one line for each check, `ok`, `warn` or
//! `fail`, exit 2 when one failed; the spools of stopped names that hold
//! nothing but old receipts removed, listed, or only listed.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::{Duration, SystemTime};

use serde_json::Value;

use crate::tmux::{Tmux, tools};
use crate::util::{Env, Output, Served};

const DAY: f64 = 86_400.0;

/// `baton doctor` in `env`, with `vars`.
fn doctor(env: &Env, vars: &[(&str, &str)]) -> Output {
    env.run_with(vars, None, &["doctor"], None)
}

/// The lines of `out` whose result is `result` and check is `check`.
fn lines<'a>(out: &'a Output, result: &str, check: &str) -> Vec<&'a str> {
    out.stdout
        .lines()
        .filter(|l| {
            let mut words = l.split_whitespace();
            words.next() == Some(result) && words.next() == Some(check)
        })
        .collect()
}

/// An instance that runs each task with `cat`, named `name`.
fn serve(env: &Env, name: &str) -> Served {
    let ws = env.workspace(name);
    env.serve(&ws, &["--name", name, "--exec", "cat >/dev/null"])
}

/// Sends one task to `name` and waits for it to end `done`.
fn one_task(env: &Env, name: &str) {
    let out = env.run(&["send", name, "a task", "--wait", "--timeout", "20"]);
    assert_eq!(out.status, 0, "{out:?}");
}

#[test]
fn a_clean_world_is_all_ok() {
    let env = Env::new();
    let _a = serve(&env, "alpha");
    let out = doctor(&env, &[]);
    assert_eq!(out.status, 0, "{out:?}");
    assert_eq!(lines(&out, "ok", "registry").len(), 1, "{out:?}");
    assert!(out.stdout.contains("chosen by $BATON_DIR"), "{out:?}");
    assert_eq!(lines(&out, "ok", "state").len(), 1, "{out:?}");
    let ping = lines(&out, "ok", "ping");
    assert!(ping.len() == 1 && ping[0].contains("alpha ("), "{out:?}");
    // Nothing else to say: every line is ok, but ssh's where it is missing.
    for l in out.stdout.lines() {
        assert!(
            l.starts_with("ok ") || l.starts_with("warn  ssh"),
            "{out:?}"
        );
    }
    let json = env.run(&["doctor", "--json"]);
    assert_eq!(json.status, 0, "{json:?}");
    let v: Value = serde_json::from_str(&json.stdout).unwrap();
    let checks = v.as_array().unwrap();
    assert!(checks.len() >= 4, "{v}");
    for c in checks {
        assert!(c["check"].is_string() && c["detail"].is_string(), "{c}");
        assert!(
            ["ok", "warn", "fail"].contains(&c["result"].as_str().unwrap()),
            "{c}"
        );
    }
    assert!(
        checks
            .iter()
            .any(|c| c["check"] == "ping" && c["result"] == "ok"),
        "{v}"
    );
}

#[test]
fn a_registry_others_may_enter_fails() {
    let env = Env::new();
    fs::create_dir(&env.registry).unwrap();
    fs::set_permissions(&env.registry, fs::Permissions::from_mode(0o777)).unwrap();
    let out = doctor(&env, &[]);
    assert_eq!(out.status, 2, "{out:?}");
    let fail = lines(&out, "fail", "registry");
    assert!(fail.len() == 1 && fail[0].contains("mode 0777"), "{out:?}");
    assert!(out.stderr.contains("1 check failed"), "{out:?}");
}

#[test]
fn a_stale_manifest_is_a_warning_with_its_fix() {
    let env = Env::new();
    let mut a = serve(&env, "crashed");
    let manifest = a.manifest_path.clone();
    a.kill9();
    assert!(manifest.exists(), "a crash leaves its manifest");
    let out = doctor(&env, &[]);
    assert_eq!(out.status, 0, "{out:?}");
    let warn = lines(&out, "warn", "manifest");
    assert!(
        warn.len() == 1 && warn[0].contains("stale") && warn[0].contains("baton gc"),
        "{out:?}"
    );
}

#[test]
fn an_instance_that_does_not_answer_fails() {
    let env = Env::new();
    let mut a = serve(&env, "frozen");
    a.signal(libc::SIGSTOP);
    let out = doctor(&env, &[("BATON_IO_TIMEOUT", "0.5")]);
    a.signal(libc::SIGCONT);
    assert_eq!(out.status, 2, "{out:?}");
    let fail = lines(&out, "fail", "ping");
    assert!(
        fail.len() == 1 && fail[0].contains("frozen (") && fail[0].contains("unresponsive"),
        "{out:?}"
    );
}

#[test]
fn a_pane_that_is_gone_fails() {
    if !tools() {
        return;
    }
    let env = Env::new();
    let mut tmux = Tmux::new(&env);
    tmux.start(&env);
    let _s = crate::tmux::serve(&env, &tmux, &[], &[]);
    let (k, v) = tmux.var();
    let vars = [(k, v.as_str())];
    let out = doctor(&env, &vars);
    let ok = lines(&out, "ok", "tmux");
    assert!(ok.len() == 1 && ok[0].contains("t:0.0 is there"), "{out:?}");
    tmux.run(&["kill-pane", "-t", "t:0.0"]);
    let out = doctor(&env, &vars);
    assert_eq!(out.status, 2, "{out:?}");
    let fail = lines(&out, "fail", "tmux");
    assert!(
        fail.len() == 1 && fail[0].contains("t:0.0 is not there"),
        "{out:?}"
    );
}

/// Moves every time `spool::gc` reads of the spool at `dir` back by
/// `days`: the receipts' and the transcript's times, and the files'
/// modification times (`meta.json`'s is its last start).
fn age(dir: &Path, days: f64) {
    let back = days * DAY;
    let done: Vec<_> = fs::read_dir(dir.join("done"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    let logs = ["transcript.jsonl", "transcript.1.jsonl"].map(|n| dir.join(n));
    for path in done.iter().chain(&logs).filter(|p| p.exists()) {
        let text = fs::read_to_string(path).unwrap();
        let mut out = String::new();
        for line in text.lines() {
            let mut v: Value = serde_json::from_str(line).unwrap();
            for key in ["time", "finished_at", "accepted_at"] {
                if let Some(t) = v.get(key).and_then(Value::as_f64) {
                    v[key] = match v[key].is_u64() {
                        true => Value::from((t - back) as u64),
                        false => Value::from(t - back),
                    };
                }
            }
            out.push_str(&format!("{v}\n"));
        }
        // A new file renamed over: an instance's open transcript keeps
        // its own.
        let tmp = path.with_extension("aged");
        fs::write(&tmp, out).unwrap();
        fs::set_permissions(&tmp, fs::Permissions::from_mode(0o600)).unwrap();
        fs::rename(&tmp, path).unwrap();
    }
    let then = SystemTime::now() - Duration::from_secs_f64(back);
    for path in done.iter().chain(&logs).chain([&dir.join("meta.json")]) {
        if let Ok(f) = fs::File::options().append(true).open(path) {
            f.set_modified(then).unwrap();
        }
    }
}

/// A stopped name whose spool holds one receipt: served, one task done,
/// stopped.
fn stopped_with_receipt(env: &Env, name: &str) -> std::path::PathBuf {
    let mut s = serve(env, name);
    one_task(env, name);
    let spool = s.spool();
    assert_eq!(s.term(), 0);
    assert!(spool.join("meta.json").exists(), "a used spool stays");
    spool
}

#[test]
fn gc_spools_removes_a_stopped_name_of_old_receipts_only() {
    let env = Env::new();
    let spool = stopped_with_receipt(&env, "old");
    // Used today: not listed.
    let out = env.run(&["gc", "--spools", "--json"]);
    assert_eq!(out.status, 0, "{out:?}");
    let v: Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(v["spools"], serde_json::json!([]), "{v}");
    age(&spool, 40.0);
    let out = env.run(&["gc", "--spools", "--dry-run"]);
    assert_eq!(out.status, 0, "{out:?}");
    let shown = spool.display().to_string();
    assert!(
        out.stdout.starts_with("would remove old (workspace ") && out.stdout.contains(&shown),
        "{out:?}"
    );
    assert!(
        spool.join("meta.json").exists(),
        "--dry-run removes nothing"
    );
    // Not older than 50 days.
    let out = env.run(&["gc", "--spools", "--older-than", "50", "--json"]);
    let v: Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(v["spools"], serde_json::json!([]), "{v}");
    let out = env.run(&["gc", "--spools", "--json"]);
    assert_eq!(out.status, 0, "{out:?}");
    let v: Value = serde_json::from_str(&out.stdout).unwrap();
    let listed = v["spools"].as_array().unwrap();
    assert_eq!(listed.len(), 1, "{v}");
    assert_eq!(listed[0]["name"], "old");
    assert_eq!(listed[0]["spool"], shown.as_str());
    assert!(listed[0]["last_used"].as_f64().unwrap() > 0.0, "{v}");
    assert!(!spool.exists(), "{shown} is removed");
}

#[test]
fn gc_spools_keeps_a_queued_task_and_a_live_instance() {
    let env = Env::new();
    let old = stopped_with_receipt(&env, "old");
    let queued = stopped_with_receipt(&env, "waiting");
    let out = env.run(&["send", "waiting", "for later", "--json"]);
    assert_eq!(out.status, 0, "stored offline: {out:?}");
    let live = serve(&env, "live");
    one_task(&env, "live");
    let live_spool = live.spool();
    for dir in [&old, &queued, &live_spool] {
        age(dir, 40.0);
    }
    let out = env.run(&["gc", "--spools"]);
    assert_eq!(out.status, 0, "{out:?}");
    assert!(out.stdout.starts_with("removed old "), "{out:?}");
    assert_eq!(out.stdout.lines().count(), 1, "{out:?}");
    assert!(!old.exists());
    assert!(
        queued.join("meta.json").exists(),
        "a queued task keeps its spool"
    );
    assert!(
        live_spool.join("meta.json").exists(),
        "a live instance's spool is kept"
    );
}

#[test]
fn older_than_goes_with_spools() {
    let env = Env::new();
    let out = env.run(&["gc", "--older-than", "3"]);
    assert_eq!(out.status, 2, "{out:?}");
    assert!(out.stderr.contains("--spools"), "{out:?}");
}

/// `doctor --via` on two hosts through a real sshd (each alias with a
/// registry of its own): each host's lines after its name; the host
/// whose doctor failed is said on stderr and the whole exits 4.
#[test]
fn doctor_reaches_several_hosts() {
    use crate::util::sshd::{Masters, Sshd, have_sshd};
    if !have_sshd() {
        return;
    }
    let (alpha, beta, local) = (Env::new(), Env::new(), Env::new());
    let _a = serve(&alpha, "a1");
    fs::create_dir(&beta.registry).unwrap();
    fs::set_permissions(&beta.registry, fs::Permissions::from_mode(0o777)).unwrap();
    let sshd = Sshd::start(None, Some(&local.root.join("home"))).unwrap_or_else(|e| panic!("{e}"));
    let _masters = Masters(local.registry.clone());
    let c = sshd.aliases(&[("alpha", &alpha), ("beta", &beta)], None);
    let config = local.root.join("ssh_config");
    fs::write(&config, c).unwrap();
    let bin = crate::util::baton_bin();
    let remote = [("BATON_REMOTE", bin.to_str().unwrap())];
    let (va, vb) = (
        format!("ssh -F {} alpha", config.display()),
        format!("ssh -F {} beta", config.display()),
    );
    let out = local.run_with(&remote, None, &["doctor", "--via", &va], None);
    assert_eq!(out.status, 0, "{out:?}");
    assert!(
        out.stdout
            .lines()
            .any(|l| l.split_whitespace().take(3).eq(["alpha", "ok", "ping"])),
        "{out:?}"
    );
    let out = local.run_with(
        &remote,
        None,
        &["doctor", "--via", &va, "--via", &vb, "--json"],
        None,
    );
    assert_eq!(out.status, 4, "{out:?}");
    let v: Value = serde_json::from_str(out.stdout.trim()).unwrap();
    let failed: Vec<&Value> = (v.as_array().unwrap().iter())
        .filter(|c| c["result"] == "fail")
        .collect();
    assert_eq!(failed.len(), 1, "{v}");
    assert_eq!(
        (&failed[0]["host"], &failed[0]["check"]),
        (&"beta".into(), &"registry".into()),
        "{v}"
    );
    assert!(
        out.stderr.contains("beta: doctor: 1 check failed"),
        "{out:?}"
    );
}
