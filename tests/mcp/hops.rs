//! Loop safety holds for a pull agent (issue 44, point 6): a `baton mcp`
//! host that held a claimed task from alpha ran `baton send --from beta
//! gamma …` and the task was accepted at hop 0, with no `in_reply_to`. A
//! send by the agent while it holds a task is that task's turn's, whichever
//! way it is made (the MCP tool, or `baton send --from` by one of the
//! host's processes): to its sender only, one hop further, answering it;
//! the operator's own send stays hop 0 (docs/mcp.md, "Where a pull agent's
//! sends may go").

use super::{Mcp, NEWEST, text};
use crate::util::{Env, RawClient, Served};
use serde_json::{Value, json};

/// alpha's next task, claimed (and, unless `keep`, completed) by its
/// operator's client `ac`.
fn next_task(ac: &mut RawClient, keep: bool) -> Value {
    let r = ac.call(10, "inbox/claim", json!({}));
    assert_eq!(r["result"]["status"], "claimed", "{r}");
    let task = r["result"]["task"].clone();
    if !keep {
        let done = json!({"message_id": task["message_id"], "outcome": "done"});
        let r = ac.call(11, "inbox/complete", done);
        assert_eq!(r["result"]["status"], "completed", "{r}");
    }
    task
}

/// `baton send --from beta TARGET BODY --json` run by the test, which is
/// the MCP host for `Mcp::start`: a process of the agent. Its result.
fn send_from_beta(env: &Env, target: &str, body: &str) -> (i32, Value) {
    let out = env.run(&["send", "--from", "beta", target, body, "--json"]);
    let v = serde_json::from_str(out.stdout.trim()).unwrap_or_else(|e| panic!("{e}: {out:?}"));
    (out.status, v)
}

fn relay(ac: &mut RawClient, params: Value) -> String {
    let r = ac.call(1, "relay/send", params);
    assert_eq!(r["result"]["status"], "accepted", "{r}");
    r["result"]["message_id"].as_str().unwrap().to_string()
}

fn beta_id(env: &Env, b: &Mcp) -> String {
    let (_, manifest) = b.manifest(env);
    manifest["instance_id"].as_str().unwrap().to_string()
}

/// Regression (issue 44, point 6).
#[test]
fn an_agent_holding_a_task_sends_one_hop_further_by_any_route() {
    let env = Env::new();
    let (wa, wb, wc) = (
        env.workspace("alpha"),
        env.workspace("beta"),
        env.workspace("gamma"),
    );
    let a = env.serve_with(&wa, &[("BATON_MAX_HOPS", "2")], &["--name", "alpha"]);
    let c: Served = env.serve(&wc, &["--name", "gamma"]);
    // The test starts `baton mcp`: it is the host, and what it runs is
    // the agent's.
    let mut b = Mcp::start(&env, &wb, &["--name", "beta"]);
    b.initialize(NEWEST);
    let b_id = beta_id(&env, &b);
    let mut ac = a.client();

    let first = relay(&mut ac, json!({"target": b_id, "body": "Task one."}));
    let r = b.tool("check_inbox", json!({}));
    assert_eq!(r["structuredContent"]["message_id"], first.as_str(), "{r}");

    // (a) The MCP tool, and (b) `baton send --from beta` by the host's
    // process: both reach alpha at hop 1, answering the task held.
    let r = b.tool(
        "send_agent_message",
        json!({"target_instance_id": a.id, "message": "From the tool."}),
    );
    assert_eq!(r["structuredContent"]["status"], "accepted", "{r}");
    let (code, sent) = send_from_beta(&env, "alpha", "From the shell.");
    assert_eq!((code, &sent["status"]), (0, &json!("accepted")), "{sent}");
    let mut held = Value::Null;
    for body in ["From the tool.", "From the shell."] {
        // The second stays open: alpha answers in its turn.
        let t = next_task(&mut ac, body.ends_with("shell."));
        assert_eq!(t["body"], body, "{t}");
        assert_eq!(t["sender"]["instance_id"], b_id.as_str(), "{t}");
        let hop = (&t["hop"], &t["in_reply_to"]);
        assert_eq!(hop, (&json!(1), &json!(first)), "{t}");
        held = t;
    }

    // Neither route leaves the task's scope: gamma is refused both ways,
    // with the same reason.
    let denied = format!(
        "this turn runs a task relayed from alpha: only its sender {} may be sent to, not gamma ({})",
        a.id, c.id
    );
    let r = b.tool(
        "send_agent_message",
        json!({"target_instance_id": c.id, "message": "Elsewhere."}),
    );
    assert_eq!(text(&r), format!("not delivered: denied: {denied}"), "{r}");
    let (code, sent) = send_from_beta(&env, "gamma", "Elsewhere.");
    assert_ne!(code, 0, "{sent}");
    assert_eq!(
        (&sent["status"], &sent["reason"]),
        (&json!("denied"), &json!(denied))
    );

    // alpha answers in its turn, at hop 2; beta finishes the first task
    // and holds that answer. One hop more is over alpha's limit, by either
    // route, as a turn's send is.
    let turn = held["turn"].clone();
    let second = relay(
        &mut ac,
        json!({"target": b_id, "body": "Task two.", "turn": turn}),
    );
    let r = b.tool("complete_task", json!({"message_id": first}));
    assert_eq!(text(&r), format!("completed {first}."), "{r}");
    let r = b.tool("check_inbox", json!({}));
    assert_eq!(r["structuredContent"]["message_id"], second.as_str(), "{r}");
    let over = "hop 3 is over the limit of 2 (BATON_MAX_HOPS)";
    let r = b.tool(
        "send_agent_message",
        json!({"target_instance_id": a.id, "message": "One more."}),
    );
    assert_eq!(text(&r), format!("not delivered: hop_limit: {over}"), "{r}");
    let (code, sent) = send_from_beta(&env, "alpha", "One more.");
    assert_ne!(code, 0, "{sent}");
    assert_eq!(
        (&sent["status"], &sent["reason"]),
        (&json!("hop_limit"), &json!(over))
    );
    b.finish();
    drop((ac, a, c));
}

/// The operator is no agent: its `baton send --from beta` while beta holds
/// a task goes anywhere, at hop 0, answering nothing.
#[test]
fn the_operators_send_as_a_pull_agent_stays_hop_zero() {
    let env = Env::new();
    let (wa, wb, wc) = (
        env.workspace("alpha"),
        env.workspace("beta"),
        env.workspace("gamma"),
    );
    let a = env.serve(&wa, &["--name", "alpha"]);
    let c = env.serve(&wc, &["--name", "gamma"]);
    // Under a host of its own: the test is outside the agent's processes.
    let mut b = Mcp::start_hosted(&env, &wb, &["--name", "beta"]);
    b.initialize(NEWEST);
    let b_id = beta_id(&env, &b);
    let mut ac = a.client();
    let first = relay(&mut ac, json!({"target": b_id, "body": "Task one."}));
    let r = b.tool("check_inbox", json!({}));
    assert_eq!(r["structuredContent"]["message_id"], first.as_str(), "{r}");

    let (code, sent) = send_from_beta(&env, "gamma", "From the operator.");
    assert_eq!((code, &sent["status"]), (0, &json!("accepted")), "{sent}");
    let t = next_task(&mut c.client(), false);
    assert_eq!(t["sender"]["instance_id"], b_id.as_str(), "{t}");
    assert_eq!(
        (&t["hop"], &t["in_reply_to"]),
        (&json!(0), &Value::Null),
        "{t}"
    );
    b.finish();
    drop((ac, a, c));
}
