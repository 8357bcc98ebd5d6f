//! What only the reliability suite (`tests/reliability.rs`) needs: a world
//! that runs a private copy of the fail-point binary, the switches for slow
//! and measuring tests, task bodies that can be checked against a spool, a
//! reader that checks every file of a spool, and readings of a process's
//! CPU time, memory and descriptors from `/proc`.

use std::collections::BTreeMap;
use std::fs;
use std::io::{self, ErrorKind, Write};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use baton::base::digest::sha256_hex;
use serde_json::Value;

use super::{Env, Rng, baton_bin};

/// The line a slow test prints once it has run to the end; `make
/// test-slow` counts them, so that a run in which every slow test skipped
/// itself fails.
pub const SLOW_RAN: &str = "slow test ran:";

/// A private world (`Env::new`) whose commands run the fail-point binary.
pub fn env() -> Env {
    Env::new().with_bin(bin())
}

/// A copy of the binary this target built (with `--features failpoints`),
/// taken once: a plain `cargo test` elsewhere rebuilds `target/debug/baton`
/// without the fail points, and must not swap it under a running test.
fn bin() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        let src = baton_bin();
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
        fs::create_dir_all(&dir).unwrap();
        let tmp = dir.join(format!("baton-reliability.{}", std::process::id()));
        fs::copy(&src, &tmp).unwrap_or_else(|e| panic!("copy {}: {e}", src.display()));
        let bytes = fs::read(&tmp).unwrap();
        let needle = b"BATON_FAILPOINT";
        if !bytes.windows(needle.len()).any(|w| w == needle) {
            let _ = fs::remove_file(&tmp);
            panic!(
                "{} has no fail points: build it with `cargo test --features failpoints --test reliability`",
                src.display()
            );
        }
        let dest = dir.join("baton-reliability");
        fs::rename(&tmp, &dest).unwrap();
        dest
    })
}

/// Tests that measure time or CPU run one at a time, so that two of them
/// do not disturb each other's numbers on a small machine.
pub fn serial() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

/// Straight to the descriptor: the test harness captures `eprintln!` of a
/// test that passes, and these lines should be seen (and counted), so
/// each goes out whole in one write.
fn say(line: &str) {
    let _ = io::stderr().write_all(format!("{line}\n").as_bytes());
}

/// A slow test that runs: when it ends without a panic, it says so with
/// `SLOW_RAN` and its name.
pub struct SlowRun(&'static str);

impl Drop for SlowRun {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            say(&format!("{SLOW_RAN} {}", self.0));
        }
    }
}

/// Whether the slow tests run: `BATON_SLOW=1` (`make test-slow`). When
/// they do not, the test says so and why; when they do, keep the guard to
/// the end of the test.
pub fn slow(test: &'static str) -> Option<SlowRun> {
    if std::env::var("BATON_SLOW").is_ok_and(|v| v == "1") {
        return Some(SlowRun(test));
    }
    say(&format!(
        "{test}: skipped: a slow test; set BATON_SLOW=1 (make test-slow) to run it"
    ));
    None
}

/// Whether `/proc` is there for CPU and memory readings; without it the
/// test is skipped, or fails under `BATON_REQUIRE_ALL=1`.
pub fn have_proc(test: &str) -> bool {
    if Path::new("/proc/self/stat").exists() {
        return true;
    }
    if std::env::var("BATON_REQUIRE_ALL").is_ok_and(|v| v == "1") {
        panic!("{test}: /proc is missing and BATON_REQUIRE_ALL=1");
    }
    say(&format!("{test}: skipped: no /proc on this system"));
    false
}

/// A generator seeded from `BATON_SEED` or the clock; the seed is printed
/// so that a failure can be replayed.
pub fn seeded_rng(test: &str) -> Rng {
    let seed = std::env::var("BATON_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map(|d| d.as_nanos() as u64)
                .unwrap_or(1)
        });
    eprintln!("{test}: seed {seed} (BATON_SEED={seed} replays it)");
    Rng::new(seed)
}

/// The body every test sends for a message id: fixed by the id, so a spool
/// file can be checked against what was sent. Not only ASCII.
pub fn body_for(id: &str) -> String {
    let pad = id.bytes().map(usize::from).sum::<usize>() % 40;
    format!("task {id}: grüße ✓ {}", "·".repeat(pad))
}

/// The spool of the instance named `name` serving `ws` in `env`, whether or
/// not it runs.
pub fn spool_dir(env: &Env, name: &str, ws: &Path) -> PathBuf {
    spool_dir_in(&env.state, name, ws)
}

/// The spool of the instance named `name` serving `ws` under the state
/// home `state`.
pub fn spool_dir_in(state: &Path, name: &str, ws: &Path) -> PathBuf {
    let hash = sha256_hex(ws.as_os_str().as_encoded_bytes());
    state
        .join("baton/spool")
        .join(format!("{name}-{}", &hash[..16]))
}

/// One task file of a spool, checked.
#[derive(Clone, Debug)]
pub struct Item {
    pub place: &'static str,
    pub seq: u64,
    pub id: String,
    pub body: String,
}

/// Everything in a spool, every file parsed and checked.
#[derive(Debug, Default)]
pub struct View {
    pub items: Vec<Item>,
    /// `done/`: id to receipt.
    pub done: BTreeMap<String, Value>,
    pub tmp: Vec<String>,
    pub rejected: Vec<String>,
}

impl View {
    /// The places where `id` is (a task file or a receipt).
    pub fn places(&self, id: &str) -> Vec<&'static str> {
        let mut v: Vec<&'static str> = self
            .items
            .iter()
            .filter(|i| i.id == id)
            .map(|i| i.place)
            .collect();
        if self.done.contains_key(id) {
            v.push("done");
        }
        v
    }

    pub fn in_place(&self, place: &str) -> Vec<&Item> {
        self.items.iter().filter(|i| i.place == place).collect()
    }
}

fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = match fs::read_dir(dir) {
        Ok(rd) => rd
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect(),
        Err(e) if e.kind() == ErrorKind::NotFound => Vec::new(),
        Err(e) => panic!("read {}: {e}", dir.display()),
    };
    v.sort();
    v
}

/// One task file, `<place>/<name>`, checked.
fn read_item(place: &'static str, name: &str, path: &Path) -> Result<Item, String> {
    let stem = name.strip_suffix(".json").ok_or("not .json")?;
    let (seq, id) = stem.split_once('-').ok_or("no <seq>-")?;
    if seq.len() != 16 {
        return Err("sequence is not 16 digits".into());
    }
    let seq: u64 = seq.parse().map_err(|_| "bad sequence")?;
    let bytes = fs::read(path).map_err(|e| e.to_string())?;
    let t: Value = serde_json::from_slice(&bytes)
        .map_err(|e| format!("not JSON ({e}): {}", String::from_utf8_lossy(&bytes)))?;
    let body = t["body"].as_str().ok_or("no body")?.to_string();
    if t["message_id"] != id {
        return Err(format!("message_id is {}", t["message_id"]));
    }
    if t["seq"] != seq {
        return Err(format!("seq is {}", t["seq"]));
    }
    if t["digest"] != sha256_hex(body.as_bytes()) {
        return Err(format!("digest {} does not match the body", t["digest"]));
    }
    Ok(Item {
        place,
        seq,
        id: id.to_string(),
        body,
    })
}

/// Reads a spool nobody is changing (its instance is stopped, dead or
/// idle): every task file must be named `<seq>-<id>.json`, parse, carry
/// its id and sequence number, and hold a body whose SHA-256 is its
/// `digest`; every receipt must parse and name its id. All problems are
/// returned together.
pub fn read_spool(dir: &Path) -> Result<View, Vec<String>> {
    let mut view = View::default();
    let mut bad = Vec::new();
    for place in ["inbox", "processing", "interrupted"] {
        for name in names(&dir.join(place)) {
            match read_item(place, &name, &dir.join(place).join(&name)) {
                Ok(i) => view.items.push(i),
                Err(e) => bad.push(format!("{place}/{name}: {e}")),
            }
        }
    }
    for name in names(&dir.join("done")) {
        let path = dir.join("done").join(&name);
        // A log's lines, each a receipt; a last line a kill cut short (no
        // newline) was never a receipt.
        let Some(_) = name
            .strip_prefix("receipts-")
            .and_then(|n| n.strip_suffix(".jsonl"))
        else {
            bad.push(format!("done/{name}: not a receipt log"));
            continue;
        };
        let text = fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {name}: {e}"));
        let whole = text.rfind('\n').map_or("", |end| &text[..end]);
        for line in whole.lines() {
            match serde_json::from_str::<Value>(line) {
                Ok(r) if r["digest"].as_str().is_some_and(|d| d.len() == 64) => {
                    let id = r["message_id"].as_str().unwrap_or_default().to_string();
                    if view.done.insert(id.clone(), r).is_some() {
                        bad.push(format!("done/{name}: a second receipt of {id}"));
                    }
                }
                Ok(r) => bad.push(format!("done/{name}: receipt {r} does not fit")),
                Err(e) => bad.push(format!("done/{name}: {e}: {line}")),
            }
        }
    }
    view.tmp = names(&dir.join("tmp"));
    view.rejected = names(&dir.join("rejected"));
    if bad.is_empty() { Ok(view) } else { Err(bad) }
}

/// `read_spool` that panics with every problem.
pub fn spool(dir: &Path) -> View {
    read_spool(dir).unwrap_or_else(|bad| panic!("bad spool files:\n{}", bad.join("\n")))
}

/// The handler command that records each run, one message id a line.
pub fn logging_handler(log: &Path) -> String {
    format!("echo \"$BATON_MESSAGE_ID\" >> '{}'", log.display())
}

/// The message ids a logging handler recorded, in order.
pub fn runs(log: &Path) -> Vec<String> {
    match fs::read_to_string(log) {
        Ok(s) => s.lines().map(str::to_string).collect(),
        Err(e) if e.kind() == ErrorKind::NotFound => Vec::new(),
        Err(e) => panic!("read {}: {e}", log.display()),
    }
}

/// CPU time (user + system) a process has used so far.
pub fn cpu_time(pid: u32) -> Duration {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // Fields after the command name, which is in parentheses.
    let rest = &stat[stat.rfind(')').unwrap() + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 = f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap();
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
    Duration::from_millis(ticks * 1000 / hz)
}

/// A `/proc/<pid>/status` field in KiB (`VmRSS`, `VmHWM`).
pub fn status_kib(pid: u32, field: &str) -> u64 {
    let s = fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    s.lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("no {field} in /proc/{pid}/status"))
}

/// Open file descriptors of a process.
pub fn fd_count(pid: u32) -> usize {
    fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|rd| rd.count())
        .unwrap_or(0)
}

/// The given percentile of some durations, in ms.
pub fn percentile(v: &[Duration], p: f64) -> f64 {
    let mut ms: Vec<f64> = v.iter().map(|d| d.as_secs_f64() * 1000.0).collect();
    ms.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let i = ((ms.len() as f64 - 1.0) * p).round() as usize;
    ms[i]
}
