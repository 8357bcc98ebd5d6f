//! Row 5f (issue 47): `baton list` among the stale manifests other
//! writers leave, which say no pid namespace: zcoder's (zcoder never
//! removes one) and an earlier baton's (no `pid_ns`, no `process_start`,
//! no name entry). Each must cost a read and a kernel question, never a
//! thread and a connection.

use crate::world::{World, mkdir};
use crate::{Fig, Row, START_BATCH, Scale, Target, row, time_list};
use serde_json::{Value, json};
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::Duration;

/// The stale manifests' pids: past any pid_max (at most 2^22), so
/// `kill(pid, 0)` says `ESRCH`; apart from row 5's.
const FIRST_PID: u64 = 999_980_000;

/// Row 5f: `baton list` with `sc.list_sizes[0]` live instances and
/// `sc.stale` stale manifests, half in zcoder's registry and half in
/// baton's (of those, half an earlier baton's, half this version's),
/// half of each with no socket and half with one nobody listens on;
/// against the live instances alone.
pub fn row_stale_formats(sc: &Scale) -> Result<Vec<Row>, String> {
    let mut w = World::new(
        false,
        &[("BATON_FSYNC", "off"), ("BATON_MAX_QUEUE", "100000")],
    )?;
    let live = sc.list_sizes[0];
    let names: Vec<String> = (0..live).map(|i| format!("n-{i:04}")).collect();
    w.start_batched(&names, &["--ephemeral-spool"], START_BATCH)?;
    // zcoder's registry as baton finds it in this world: `TMPDIR` is the
    // world's, and neither ZCODER_RELAY_DIR nor XDG_RUNTIME_DIR is set.
    let uid = fs::metadata(w.root()).map_err(|e| e.to_string())?.uid();
    let zdir = w.root().join("tmp").join(format!("zcoder-{uid}-agents"));
    mkdir(&zdir).map_err(|e| format!("{}: {e}", zdir.display()))?;
    // Each a median of three times row 5's runs: a list of 10 takes a
    // few milliseconds, where a busy neighbour's slice shows.
    let runs = 3 * sc.list_runs;
    let (alone, n) = time_list(&w, runs)?;
    check(n, live)?;
    plant(&w.reg, &zdir, sc.stale)?;
    let (among, n) = time_list(&w, runs)?;
    check(n, live)?;
    // Each is still reported, as stale.
    let reported = stale_reported(&w)?;
    if reported != sc.stale {
        return Err(format!(
            "baton list --all reports {reported} stale entries, not {}",
            sc.stale
        ));
    }
    w.stop_all();
    let each = among.saturating_sub(alone).as_secs_f64() * 1e6 / sc.stale.max(1) as f64;
    eprintln!("bench:   5f: {each:.1} µs a stale manifest");
    Ok(vec![row(
        "5f",
        &format!(
            "`baton list`, {live} live + {} stale without pid_ns (half zcoder's); {live} live alone",
            sc.stale
        ),
        Fig::Time(among),
        Fig::Time(alone),
        Target::Ratio(3.0),
    )])
}

fn check(n: usize, want: usize) -> Result<(), String> {
    if n == want {
        Ok(())
    } else {
        Err(format!("baton list shows {n} live instances, not {want}"))
    }
}

/// How many entries `baton list --json --all` says are stale.
fn stale_reported(w: &World) -> Result<usize, String> {
    let mut cmd = w.cmd();
    cmd.args(["list", "--json", "--all"]);
    let (_, out) = crate::world::run_timed(&mut cmd, b"", Duration::from_secs(60))?;
    let v: Value = serde_json::from_slice(&out).map_err(|e| format!("list --json: {e}"))?;
    let stale = |x: &&Value| {
        x["problem"]
            .as_str()
            .is_some_and(|p| p.starts_with("stale: "))
    };
    Ok(v.as_array().map_or(0, |a| a.iter().filter(stale).count()))
}

/// Writes `count` stale manifests: the even ones zcoder's in `zdir`, the
/// odd ones baton's in `reg`, alternately an earlier baton's and this
/// version's (with its name entry); every other one of each directory
/// with a socket that refuses connections (a `kill -9` leftover), the
/// rest with none.
fn plant(reg: &Path, zdir: &Path, count: usize) -> Result<(), String> {
    let pid_ns = fs::metadata("/proc/self/ns/pid")
        .map_err(|e| format!("/proc/self/ns/pid: {e}"))?
        .ino();
    for i in 0..count {
        let pid = FIRST_PID + i as u64;
        let id = format!("{pid}-{i:016}");
        let name = format!("stale-{i}");
        let dir = if i % 2 == 0 { zdir } else { reg };
        let socket = dir.join(format!("a-{id}.sock"));
        let mut m = json!({
            "protocol": 1, "instance_id": id, "pid": pid, "project": name,
            "workspace": "/nonexistent/stale", "session_id": "", "profile": "coding",
            "model": "", "socket": socket.display().to_string(), "state": "ready",
            "started_at": 1_700_000_000u64,
        });
        if i % 2 == 1 {
            m["name"] = json!(name);
            m["wire"] = json!("jsonrpc");
            m["baton_version"] = json!("0.1.0");
        }
        if i % 4 == 3 {
            m["pid_ns"] = json!(pid_ns);
            m["process_start"] = json!(1_000 + i);
            let entry = reg.join(format!("n-{id}@{name}"));
            write(&entry, b"")?;
        }
        write(
            &dir.join(format!("a-{id}.json")),
            &serde_json::to_vec(&m).unwrap(),
        )?;
        if (i / 4) % 2 == 0 {
            // Bound, then closed: connecting is refused.
            drop(
                std::os::unix::net::UnixListener::bind(&socket)
                    .map_err(|e| format!("{}: {e}", socket.display()))?,
            );
        }
    }
    Ok(())
}

fn write(path: &Path, bytes: &[u8]) -> Result<(), String> {
    fs::write(path, bytes).map_err(|e| format!("{}: {e}", path.display()))
}
