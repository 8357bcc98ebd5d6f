//! Messages say what happened (issue 31, point 7): a wait that ends
//! `done` without a reply says so; a reply kept for a plain command line
//! is said to be kept where the waiting sender read it, not refused; a
//! line typed in the view gets no notice about a command line; the last
//! line of a stopped instance says it stopped (tests/tui.rs checks the
//! view's terminal).

use crate::util::{self, Env, RawClient, event_is as is};
use serde_json::{Value, json};
use std::path::Path;
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(15);

#[track_caller]
fn wait_ended(spool: &Path, id: &str) -> Value {
    util::wait_event(spool, &format!("task.ended for {id}"), WAIT, |e| {
        is(e, "task.ended", id)
    })
}

#[test]
fn a_wait_that_ends_done_without_a_reply_says_so() {
    let env = Env::new();
    let _beta = env.serve(&env.workspace("beta"), &["--name", "beta", "--exec", "cat"]);
    let out = env.run(&["send", "--wait", "--message-id", "m-1", "beta", "hi"]);
    assert_eq!(out.status, 0, "{}", out.stderr);
    assert_eq!(out.stdout, "");
    assert_eq!(
        out.stderr,
        "baton: accepted: message m-1 to beta; waiting for it to end\n\
         baton: message m-1 ended done at beta with no reply (an --exec handler's output goes back only under serve --reply; a pull agent replies with inbox complete --reply)\n"
    );
}

#[test]
fn a_reply_kept_for_a_waiting_command_line_is_said_kept_not_refused() {
    let env = Env::new();
    let beta = env.serve(
        &env.workspace("beta"),
        &["--name", "beta", "--reply", "--exec", "echo pong"],
    );
    let out = env.run(&["send", "--wait", "--message-id", "m-1", "beta", "ping"]);
    assert_eq!(out.status, 0, "{}", out.stderr);
    assert_eq!(out.stdout, "pong\n");
    wait_ended(&beta.spool(), "m-1");
    let log = env.run(&["log", "beta"]);
    assert_eq!(log.status, 0, "{log:?}");
    assert!(
        log.stdout
            .contains("task.ended         m-1 done, reply kept in the receipt (5 bytes)"),
        "{}",
        log.stdout
    );
    assert!(
        log.stdout.contains(
            "m-1: the reply stays in the task's receipt, where its sender reads it (send --wait, baton result)"
        ),
        "{}",
        log.stdout
    );
    assert!(
        !log.stdout.contains("cannot be replied to") && !log.stdout.contains("not sent"),
        "{}",
        log.stdout
    );
}

#[test]
fn a_line_typed_in_the_view_gets_no_notice_about_a_command_line() {
    let env = Env::new();
    let beta = env.serve(
        &env.workspace("beta"),
        &["--name", "beta", "--reply", "--exec", "echo pong"],
    );
    let mut c: RawClient = beta.client();
    let r = c.call(2, "turn/local", json!({"text": "typed here"}));
    let id = r["result"]["message_id"]
        .as_str()
        .unwrap_or_else(|| panic!("turn/local: {r}"))
        .to_string();
    let ended = wait_ended(&beta.spool(), &id);
    assert_eq!(ended["outcome"], "done", "{ended}");
    assert_eq!(ended["reply"]["body"], "pong\n", "{ended}");
    let notices: Vec<Value> = util::transcript(&beta.spool())
        .into_iter()
        .filter(|e| is(e, "notice", &id))
        .collect();
    assert!(notices.is_empty(), "{notices:?}");
}

/// Regression (issue 31, point 7): a command out of descriptors could not
/// read the manifests, took the live `beta` for a stopped one and said
/// `no live instance has the id or name beta` (or, with its spool
/// locked, `spool stayed locked but no live instance answered`). It
/// names the shortage and the limit to raise, exits 4 (try again), and
/// stores nothing.
#[test]
fn a_command_out_of_descriptors_names_the_shortage_not_the_target() {
    let env = Env::new();
    let beta = env.serve(&env.workspace("beta"), &["--name", "beta"]);
    // Standard input, output and error, and one more: the registry's
    // directory takes it, and the first manifest finds none left.
    let short = |args: &str| {
        let out = env
            .cmd_for("sh")
            .args(["-c", &format!("ulimit -n 4 && exec \"$0\" {args}")])
            .arg(util::baton_bin())
            .output()
            .expect("sh");
        (
            util::exit_code(out.status),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    for args in ["send beta hello", "status beta", "list"] {
        let (code, err) = short(args);
        assert_eq!(code, 4, "{args}: {err}");
        assert!(
            err.contains("this process is out of file descriptors (the process's limit, EMFILE), so live instances could not be asked: raise the limit of open files (ulimit -n, now 4) and try again"),
            "{args}: {err}"
        );
        assert!(!err.contains("no live instance"), "{args}: {err}");
    }
    let mut c = beta.client();
    let l = c.call(3, "inbox/list", json!({}));
    assert_eq!(l["result"]["queued"], json!([]), "{l}");
}

/// Errors about a flag's value name the flag (issue 31, point 7).
#[test]
fn a_bad_or_empty_flag_value_is_named_by_its_flag() {
    let env = Env::new();
    let ws = env.workspace("ws");
    let missing = ws.join("nonexistent");
    let out = env.run(&["serve", "--workspace", missing.to_str().unwrap()]);
    assert_eq!(out.status, 2, "{out:?}");
    assert!(
        out.stderr
            .starts_with(&format!("baton: --workspace {}: ", missing.display())),
        "{}",
        out.stderr
    );
    for (args, said) in [
        (
            &["list", "--via", ""][..],
            "baton: --via is empty: give the command that reaches the other host, such as 'ssh HOST'\n",
        ),
        (
            &["send", "--via", " ", "beta", "hi"][..],
            "baton: --via is empty: give the command that reaches the other host, such as 'ssh HOST'\n",
        ),
        (
            &["serve", "--accept-from", ""][..],
            "baton: serve: --accept-from is empty: give a glob of sender names, such as 'alice*'\n",
        ),
        (
            &["serve", "--deny-from", "x", "--deny-from", ""][..],
            "baton: serve: --deny-from is empty: give a glob of sender names, such as 'alice*'\n",
        ),
    ] {
        let out = env.run(args);
        assert_eq!(out.status, 2, "{args:?}: {out:?}");
        assert_eq!(out.stderr, said, "{args:?}");
    }
}

/// A pull agent that completes a plain command line's task with a reply
/// hears that the reply is kept in the receipt, not that it was refused;
/// the waiting sender prints it.
#[test]
fn completing_with_a_reply_for_a_command_line_says_kept() {
    let env = Env::new();
    let ws = env.workspace("pull");
    let mut s = env.serve(&ws, &["--name", "pull"]);
    let out = env.run(&["send", "pull", "ping", "--message-id", "k-1"]);
    assert_eq!(out.status, 0, "{out:?}");
    assert_eq!(env.run(&["inbox", "claim", "pull"]).status, 0);
    let args = [
        "inbox", "complete", "pull", "k-1", "--reply", "pong", "--json",
    ];
    let done = env.run(&args);
    assert_eq!(done.status, 0, "{done:?}");
    let v: Value = serde_json::from_str(&done.stdout).unwrap();
    assert_eq!(v["reply"]["status"], "kept", "{v}");
    let waited = env.run(&["send", "--wait", "pull", "ping", "--message-id", "k-1"]);
    assert_eq!(
        (waited.status, waited.stdout.as_str()),
        (0, "pong\n"),
        "{waited:?}"
    );

    let out = env.run(&["send", "pull", "ping", "--message-id", "k-2"]);
    assert_eq!(out.status, 0, "{out:?}");
    assert_eq!(env.run(&["inbox", "claim", "pull"]).status, 0);
    let done = env.run(&["inbox", "complete", "pull", "k-2", "--reply", "pong"]);
    assert_eq!(done.status, 0, "{done:?}");
    assert!(
        done.stdout.contains("reply kept in the task's receipt"),
        "{done:?}"
    );
    assert!(!done.stderr.contains("not sent"), "{done:?}");
    s.term();
}
