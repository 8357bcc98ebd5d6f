//! `baton list` and `baton gc`: discovery, shown or cleaned.

use super::args::Args;
use super::{emit, emit_json, target};
use crate::client::request;
use crate::config::Config;
use crate::error::{ExitCode, Result};
use crate::registry;
use crate::sanitize::escape;
use crate::text::table;
use crate::wire::Method;
use crate::wire::answer::{Hello, HelloParams, Pong, Reply};
use serde_json::{Value, json};

pub fn run(args: &Args, config: &Config) -> Result<ExitCode> {
    super::at_most(args, "list", 0)?;
    if let Some(via) = args.value("via") {
        return remote(args, config, via);
    }
    let found = target::discover(config)?;
    if args.flag("offline") {
        return offline(args, &found);
    }
    if args.flag("json") {
        let mut out: Vec<Value> = found
            .peers
            .iter()
            .map(|p| serde_json::to_value(&p.manifest).expect("serializes"))
            .collect();
        if args.flag("all") {
            for s in &found.skipped {
                let mut v = match &s.manifest {
                    Some(m) => serde_json::to_value(m).expect("serializes"),
                    None => json!({}),
                };
                v["path"] = json!(s.path.display().to_string());
                if let (None, Some(id)) = (v.get("instance_id"), &s.instance_id) {
                    v["instance_id"] = json!(id);
                }
                v["wire"] = json!(s.wire.as_str());
                v["problem"] = json!(s.problem);
                out.push(v);
            }
        }
        // A truncated scan says so with or without `--all`: what it did
        // not look at may be what the reader is looking for.
        for t in &found.truncated {
            out.push(json!({
                "path": t.path.display().to_string(),
                "wire": t.wire.as_str(),
                "problem": t.problem(),
                "not_looked_at": t.not_looked_at,
                "unlisted": t.unlisted,
            }));
        }
        emit_json(&Value::Array(out));
        return Ok(ExitCode::Ok);
    }
    for t in &found.truncated {
        eprintln!(
            "baton: {}: {}",
            escape(&t.path.display().to_string()),
            t.problem()
        );
    }
    if found.peers.is_empty() {
        eprintln!("baton: no other live instances");
    } else {
        let rows: Vec<[String; 6]> = found
            .peers
            .iter()
            .map(|p| {
                let m = &p.manifest;
                [
                    escape(&m.name).into_owned(),
                    m.pid.to_string(),
                    m.state.clone(),
                    m.instance_id.clone(),
                    p.wire.as_str().to_string(),
                    escape(&m.workspace).into_owned(),
                ]
            })
            .collect();
        emit(&table(
            ["NAME", "PID", "STATE", "ID", "WIRE", "WORKSPACE"],
            &rows,
        ));
    }
    if args.flag("all") {
        for s in &found.skipped {
            emit(&format!(
                "skipped {}: {}\n",
                escape(&s.path.display().to_string()),
                escape(&s.problem)
            ));
        }
    }
    Ok(ExitCode::Ok)
}

pub fn gc(args: &Args, config: &Config) -> Result<ExitCode> {
    super::at_most(args, "gc", 0)?;
    let dir = registry::ensure_dir(config)?;
    let collected = registry::collect_stale(&dir);
    let malformed: Vec<String> = collected
        .malformed
        .iter()
        .map(|p| p.display().to_string())
        .collect();
    if args.flag("json") {
        let mut out = json!({"removed": collected.removed});
        // Only when there were any: the answer keeps its shape otherwise.
        if !malformed.is_empty() {
            out["malformed"] = json!(malformed);
        }
        emit_json(&out);
    } else if collected.removed.is_empty() && malformed.is_empty() {
        eprintln!("baton: no stale entries in {}", dir.display());
    } else {
        for id in &collected.removed {
            emit(&format!("removed stale instance {id}\n"));
        }
        for path in &malformed {
            emit(&format!("removed malformed manifest {}\n", escape(path)));
        }
    }
    Ok(ExitCode::Ok)
}

/// `list --offline`: names with a spool and no live instance, which a
/// sender can still deliver to (unless they opted out).
fn offline(args: &Args, found: &registry::Discovery) -> Result<ExitCode> {
    let live = |s: &crate::relay::KnownSpool| {
        found
            .peers
            .iter()
            .any(|p| p.manifest.name == s.name && p.manifest.workspace == s.workspace)
    };
    let known: Vec<crate::relay::KnownSpool> = crate::relay::known_spools()
        .into_iter()
        .filter(|s| !live(s))
        .collect();
    if args.flag("json") {
        emit_json(&serde_json::to_value(&known).expect("serializes"));
        return Ok(ExitCode::Ok);
    }
    if known.is_empty() {
        eprintln!("baton: no known names are offline");
        return Ok(ExitCode::Ok);
    }
    let rows: Vec<[String; 4]> = known
        .iter()
        .map(|s| {
            [
                escape(&s.name).into_owned(),
                s.queued.to_string(),
                if s.offline { "yes" } else { "no" }.to_string(),
                escape(&s.workspace).into_owned(),
            ]
        })
        .collect();
    emit(&table(
        ["NAME", "QUEUED", "OFFLINE_DELIVERY", "WORKSPACE"],
        &rows,
    ));
    Ok(ExitCode::Ok)
}

/// `list --via 'ssh host'`: the remote `baton list --json`, shown here.
fn remote(args: &Args, config: &Config, via: &str) -> Result<ExitCode> {
    let mut remote_args = vec!["list", "--json"];
    if args.flag("all") {
        remote_args.push("--all");
    }
    if args.flag("offline") {
        remote_args.push("--offline");
    }
    // `initialize` and `ping` on stdin, which `baton list` ignores: a key
    // whose forced command is `baton bridge NAME` answers them instead,
    // and that one instance is what can be listed through it.
    let probe = [
        request(1, Method::Initialize, HelloParams::new("baton")),
        request(2, Method::Ping, serde_json::json!({})),
    ]
    .concat();
    let (code, out) = super::bridge::run_to_end(
        via,
        config,
        &remote_args,
        &probe,
        !args.flag("no-multiplex"),
    )?;
    let items = match serde_json::from_slice::<Vec<Value>>(&out) {
        Ok(items) if code == Some(0) => items,
        _ => match forced_bridge(&out) {
            Some(item) => {
                eprintln!(
                    "baton: {} reaches only {}, through a forced command (baton bridge): the other instances there, if any, cannot be listed through it",
                    escape(via),
                    escape(item["name"].as_str().unwrap_or(""))
                );
                vec![item]
            }
            None => {
                let what = format!("{} baton list failed", escape(via));
                return Err(match code {
                    Some(0) => {
                        crate::error::Error::Transport(format!("{what}: its answer is not a list"))
                    }
                    code => super::bridge::failed(&what, code),
                });
            }
        },
    };
    if args.flag("json") {
        emit_json(&Value::Array(items));
        return Ok(ExitCode::Ok);
    }
    for t in items.iter().filter(|v| v.get("not_looked_at").is_some()) {
        let s = |k: &str| escape(t[k].as_str().unwrap_or("")).into_owned();
        eprintln!("baton: {}: {}", s("path"), s("problem"));
    }
    if args.flag("offline") {
        let rows: Vec<[String; 4]> = items
            .iter()
            .map(|v| {
                [
                    escape(v["name"].as_str().unwrap_or("")).into_owned(),
                    v["queued"].to_string(),
                    if v["offline"] == true { "yes" } else { "no" }.to_string(),
                    escape(v["workspace"].as_str().unwrap_or("")).into_owned(),
                ]
            })
            .collect();
        emit(&table(
            ["NAME", "QUEUED", "OFFLINE_DELIVERY", "WORKSPACE"],
            &rows,
        ));
        return Ok(ExitCode::Ok);
    }
    let rows: Vec<[String; 6]> = items
        .iter()
        .filter(|v| v.get("problem").is_none())
        .map(|v| {
            let s = |k: &str| escape(v[k].as_str().unwrap_or("")).into_owned();
            [
                s("name"),
                v["pid"].to_string(),
                s("state"),
                s("instance_id"),
                s("wire"),
                s("workspace"),
            ]
        })
        .collect();
    if rows.is_empty() {
        eprintln!("baton: no live instances there");
    } else {
        emit(&table(
            ["NAME", "PID", "STATE", "ID", "WIRE", "WORKSPACE"],
            &rows,
        ));
    }
    Ok(ExitCode::Ok)
}

/// The instance a forced `baton bridge NAME` answered the probe for, as a
/// `list --json` item.
fn forced_bridge(out: &[u8]) -> Option<Value> {
    let answers: Vec<Reply> = String::from_utf8_lossy(out)
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let result = |id: u64| {
        answers
            .iter()
            .find(|a| a.answers(id))
            .and_then(|a| a.result.clone())
    };
    let hello: Hello = serde_json::from_value(result(1)?).ok()?;
    let m = hello.instance?;
    let state = result(2).and_then(|p| serde_json::from_value::<Pong>(p).ok());
    Some(serde_json::json!({
        "name": m.name,
        "pid": m.pid,
        "state": state.map(|p| p.state),
        "instance_id": m.instance_id,
        "wire": "jsonrpc",
        "workspace": m.workspace,
    }))
}
