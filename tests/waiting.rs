//! A waiting approval made visible (issue 46, "What is wrong" 5): `list`
//! shows each instance's queue and the approvals waiting there (`STATE`
//! `ready, 2 queued, 1 approval`, `queued` and `approvals` in `--json`),
//! and `send --wait` says once, on stderr, which approval its task waits
//! for, and in `--json` that it timed out waiting for one.

use crate::util::{Env, Served, approval_of, wait_for, wait_until};
use serde_json::Value;
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(20);

/// An instance named `name` whose tasks from peers wait for an approval.
fn serve_asking(env: &Env, name: &str) -> Served {
    let ws = env.workspace(name);
    env.serve(&ws, &["--exec", "true", "--approve", "ask", "--name", name])
}

/// The `STATE` cell of `name`'s row in `baton list`.
fn state_in_list(env: &Env, name: &str) -> String {
    let out = env.run(&["list"]);
    assert_eq!(out.status, 0, "{out:?}");
    let row = (out.stdout.lines())
        .map(|l| -> Vec<&str> {
            l.split("  ")
                .map(str::trim)
                .filter(|c| !c.is_empty())
                .collect()
        })
        .find(|cells| cells.first() == Some(&name));
    let row = row.unwrap_or_else(|| panic!("no row for {name}: {out:?}"));
    row[2].to_string()
}

/// Waits until `name`'s `STATE` reads `want`.
#[track_caller]
fn state_becomes(env: &Env, name: &str, want: &str) {
    let mut last = String::new();
    let found = crate::util::poll(WAIT, Duration::from_millis(50), || {
        last = state_in_list(env, name);
        (last == want).then_some(())
    });
    assert!(found.is_some(), "{name}'s STATE is {last:?}, not {want:?}");
}

/// `name`'s item in `baton list --json`.
fn item_in_list(env: &Env, name: &str) -> Value {
    let out = env.run(&["list", "--json"]);
    assert_eq!(out.status, 0, "{out:?}");
    let items: Vec<Value> = serde_json::from_str(&out.stdout).unwrap();
    let item = items.into_iter().find(|v| v["name"] == name);
    item.unwrap_or_else(|| panic!("no item for {name}: {out:?}"))
}

/// The id of the approval task `id` waits for at `inst`.
fn approval_id(inst: &Served, id: &str) -> String {
    let a = approval_of(&inst.spool(), id);
    a["approval_id"].as_str().unwrap().to_string()
}

fn approve(env: &Env, name: &str, approval: &str) {
    let out = env.run(&["approve", name, approval]);
    assert_eq!(out.status, 0, "{out:?}");
}

#[test]
fn list_shows_the_queue_and_the_approvals_waiting_until_they_are_answered() {
    let env = Env::new();
    let inst = serve_asking(&env, "ops");
    let calm = env.serve(&env.workspace("calm"), &["--name", "calm"]);
    // Nothing waits: today's text, byte for byte.
    assert_eq!(state_in_list(&env, "ops"), "ready");

    for id in ["t-1", "t-2"] {
        let r = inst
            .client()
            .call(3, "message/send", inst.msg(id, "restart"));
        assert_eq!(r["result"]["status"], "accepted", "{r}");
    }
    // The head of the queue waits for its approval; the task behind it
    // waits in the queue until the head is decided.
    let first = approval_id(&inst, "t-1");
    state_becomes(&env, "ops", "ready, 2 queued, 1 approval");
    let v = item_in_list(&env, "ops");
    assert_eq!(
        (v["queued"].as_u64(), v["approvals"].as_u64()),
        (Some(2), Some(1)),
        "{v}"
    );
    assert_eq!(v["state"], "ready", "{v}");
    // A baton instance with nothing waiting says so with zeros.
    let v = item_in_list(&env, "calm");
    assert_eq!(
        (v["queued"].as_u64(), v["approvals"].as_u64()),
        (Some(0), Some(0)),
        "{v}"
    );
    assert_eq!(state_in_list(&env, "calm"), "ready");

    approve(&env, "ops", &first);
    let second = approval_id(&inst, "t-2");
    state_becomes(&env, "ops", "ready, 1 queued, 1 approval");
    approve(&env, "ops", &second);
    state_becomes(&env, "ops", "ready");
    let v = item_in_list(&env, "ops");
    assert_eq!(
        (v["queued"].as_u64(), v["approvals"].as_u64()),
        (Some(0), Some(0)),
        "{v}"
    );
    drop((inst, calm));
}

#[test]
fn send_wait_says_once_that_its_task_waits_for_an_approval_and_times_out_so() {
    let env = Env::new();
    let inst = serve_asking(&env, "ops");
    let out = env.run(&["send", "ops", "restart nginx", "--message-id", "w-1"]);
    assert_eq!(out.status, 0, "{out:?}");
    let ask = approval_id(&inst, "w-1");
    let line = format!("baton: waiting for an approval at ops (approval {ask})\n");

    // The resend only waits again: it finds the task waiting.
    let wait = [
        "send",
        "ops",
        "restart nginx",
        "--message-id",
        "w-1",
        "--wait",
        "--timeout",
        "1",
    ];
    let out = env.run(&wait);
    assert_eq!(out.status, 5, "{out:?}");
    assert_eq!(out.stderr.matches(&line).count(), 1, "{out:?}");
    assert_eq!(out.stderr.matches("waiting for an approval").count(), 1);

    let mut json = wait.to_vec();
    json.push("--json");
    let out = env.run(&json);
    assert_eq!(out.status, 5, "{out:?}");
    let v: Value = serde_json::from_str(out.stdout.trim()).unwrap();
    assert_eq!(v["awaiting_approval"], true, "{v}");
    assert_eq!(v["timed_out"], true, "{v}");
    assert_eq!(v["task_status"], "awaiting_approval", "{v}");
    assert_eq!(out.stderr.matches(&line).count(), 1, "{out:?}");

    // Approved, the task runs: nothing waits any more.
    approve(&env, "ops", &ask);
    let out = env.run(&json[..json.len() - 3]);
    assert_eq!(out.status, 0, "{out:?}");
    assert!(!out.stderr.contains("waiting for an approval"), "{out:?}");
    drop(inst);
}

#[test]
fn send_wait_says_so_when_its_queued_task_comes_to_wait_for_an_approval() {
    let env = Env::new();
    let inst = serve_asking(&env, "ops");
    let out = env.run(&["send", "ops", "first", "--message-id", "q-1"]);
    assert_eq!(out.status, 0, "{out:?}");
    let first = approval_id(&inst, "q-1");

    // Behind the task that waits, the waiter's task is only queued.
    let ws = env.workspace("sender");
    let args = [
        "send",
        "ops",
        "second",
        "--message-id",
        "q-2",
        "--wait",
        "--timeout",
        "60",
    ];
    let mut waiter = env.spawn(&args, &ws);
    wait_until("the waiter to wait", WAIT, || {
        waiter.stderr().contains("waiting for it to end\n")
    });
    approve(&env, "ops", &first);
    // Its task reaches the head of the queue and is asked about: the
    // waiter hears of it from the events, not from a status it asked.
    let second = approval_id(&inst, "q-2");
    let line = format!("baton: waiting for an approval at ops (approval {second})\n");
    let said = wait_for("the waiter to name the approval", WAIT, || {
        let err = waiter.stderr();
        err.contains(&line).then_some(err)
    });
    assert_eq!(said.matches("waiting for an approval").count(), 1, "{said}");

    approve(&env, "ops", &second);
    let code = waiter.wait_exit(WAIT);
    assert_eq!(code, Some(0), "{}", waiter.stderr());
    assert_eq!(
        waiter.stderr().matches("waiting for an approval").count(),
        1,
        "{}",
        waiter.stderr()
    );
    drop(inst);
}

#[test]
fn list_over_hosts_shows_what_waits_at_each_remote_instance() {
    let env = Env::new();
    // A host's `baton list --json`, as the via command prints it (its last
    // word, `:`, names the host): one instance with tasks and approvals
    // waiting, one that says nothing of them (a zcoder peer, an earlier
    // baton).
    let via = r#"printf '%s' '[{"name":"ops","pid":7,"instance_id":"7-1","wire":"jsonrpc","workspace":"/w","state":"busy","queued":3,"approvals":2},{"name":"zc","pid":8,"instance_id":"8-1","wire":"zcoder","workspace":"/z","state":"ready"}]'; :"#;
    let out = env.run(&["list", "--via", via]);
    assert_eq!(out.status, 0, "{out:?}");
    let rows: Vec<&str> = out.stdout.lines().collect();
    assert!(rows[0].starts_with("HOST  NAME"), "{out:?}");
    assert!(
        rows[1].starts_with(":     ops   7    busy, 3 queued, 2 approvals  7-1"),
        "{out:?}"
    );
    assert!(
        rows[2].starts_with(":     zc    8    ready                        8-1"),
        "{out:?}"
    );
}

#[test]
fn send_via_wait_says_which_approval_its_task_waits_for() {
    let env = Env::new();
    let inst = serve_asking(&env, "ops");
    // `env` stands in for `ssh host`: the bridge runs in this same world.
    let bin = crate::util::baton_bin();
    let remote = [("BATON_REMOTE", bin.to_str().unwrap())];
    let send = [
        "send",
        "--via",
        "env",
        "ops",
        "restart nginx",
        "--message-id",
        "v-1",
    ];
    let out = env.run_with(&remote, None, &send, None);
    assert_eq!(out.status, 0, "{out:?}");
    let ask = approval_id(&inst, "v-1");

    // A bridge may not subscribe: the wait asks `task/status` there.
    let mut wait = send.to_vec();
    wait.extend(["--wait", "--timeout", "3", "--json"]);
    let out = env.run_with(&remote, None, &wait, None);
    assert_eq!(out.status, 5, "{out:?}");
    let line = format!("baton: waiting for an approval at ops (approval {ask})\n");
    assert_eq!(out.stderr.matches(&line).count(), 1, "{out:?}");
    let v: Value = serde_json::from_str(out.stdout.trim()).unwrap();
    assert_eq!(v["awaiting_approval"], true, "{v}");
    drop(inst);
}
