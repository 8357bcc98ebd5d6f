//! The trust boundaries of docs/security.md: each way in refuses a caller
//! outside its row of the access table, and each attack that once got
//! through is pinned by a test named after it.

mod accounts;
mod approval;
mod bridge;
mod escape;
mod pane;
mod table;
mod text;
mod turns;
mod verify;

use crate::util::have;
use baton::wire::access::Door;
use std::path::Path;

/// A client that knocks on doors from wherever it is started.
const PROBE: &str = include_str!("probe.py");
/// One JSON-RPC call on a socket; prints the answer.
const RPC: &str = include_str!("rpc.py");

/// The doors the probe knocks on, as JSON.
fn probe_doors() -> String {
    let names: Vec<&str> = Door::all().into_iter().map(Door::name).collect();
    serde_json::to_string(&names).unwrap()
}

/// Whether python3 runs the clients here (skipped without it, except
/// under BATON_REQUIRE_ALL=1).
fn python() -> bool {
    have("python3")
}

/// Writes `text` to `dir/name`; its path.
fn script(dir: &Path, name: &str, text: &str) -> std::path::PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}
