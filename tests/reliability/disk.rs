//! A full disk and the transcript (issue 32): events that cannot be
//! written are lost, not the transcript; the first line written after a
//! gap says how many were lost and when, and `baton log` shows it. Once
//! with a real full file system (a small tmpfs, where the test may mount
//! one), once with the `transcript-write` fail point.

use std::fs;
use std::io::{ErrorKind, Write};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::util::reliability::{
    body_for, env, logging_handler, runs, spool as spool_of, spool_dir_in,
};
use crate::util::{receipt, transcript, transcript_until, wait_until};
use serde_json::Value;

/// A tmpfs of `size` mounted at `at`, unmounted when dropped, however the
/// test ends.
struct Tmpfs(PathBuf);

impl Tmpfs {
    /// `None` (with the reason printed) where this process may not mount
    /// one; under `BATON_REQUIRE_ALL=1` only a non-root run may skip.
    fn mount(at: &Path, size: &str) -> Option<Tmpfs> {
        fs::create_dir_all(at).unwrap();
        // SAFETY: geteuid has no preconditions.
        let root = unsafe { libc::geteuid() } == 0;
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size},mode=0700")])
            .arg("tmpfs")
            .arg(at)
            .output();
        match out {
            Ok(o) if o.status.success() => Some(Tmpfs(at.to_path_buf())),
            other => {
                let why = match other {
                    Ok(o) => String::from_utf8_lossy(&o.stderr).into_owned(),
                    Err(e) => e.to_string(),
                };
                if root && std::env::var("BATON_REQUIRE_ALL").as_deref() == Ok("1") {
                    panic!("mount -t tmpfs failed as root (BATON_REQUIRE_ALL=1): {why}");
                }
                eprintln!("skipped: cannot mount a tmpfs here: {why}");
                None
            }
        }
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let ok = Command::new("umount")
            .arg(&self.0)
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            // Still busy: detach it, so nothing is left mounted.
            let _ = Command::new("umount").arg("-l").arg(&self.0).status();
        }
    }
}

/// Fills the file system that holds `dir` with one file, to the last byte
/// it takes.
fn fill(dir: &Path) -> PathBuf {
    let path = dir.join("filler");
    let mut f = fs::File::create(&path).unwrap();
    let chunk = vec![0u8; 4096];
    loop {
        match f.write(&chunk) {
            Ok(0) => break,
            Ok(_) => {}
            Err(e) if e.raw_os_error() == Some(libc::ENOSPC) => break,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => panic!("filling {}: {e}", path.display()),
        }
    }
    // The last partial write may have taken a few bytes more.
    while f.write(&[0]).is_ok_and(|n| n == 1) {}
    path
}

/// The notices in `spool`'s transcript that say events were lost.
fn gap_notices(spool: &Path) -> Vec<Value> {
    transcript(spool)
        .into_iter()
        .filter(|e| e["kind"] == "notice" && e["lost"].is_u64())
        .collect()
}

/// A real full disk: an instance whose spool is on a 2 MiB tmpfs keeps
/// serving while the disk is full, and once there is room again its
/// transcript says how many events it lost.
pub fn a_full_disk_loses_events_not_the_transcript() {
    let env = env();
    let small = env.root.join("small");
    let Some(_mounted) = Tmpfs::mount(&small, "2m") else {
        return;
    };
    let state = small.to_str().unwrap();
    let ws = env.workspace("ws");
    let spool = spool_dir_in(&small, "fp", &ws);
    // Declared after the mount, so it stops before the unmount.
    let mut inst = env.serve_with(&ws, &[("XDG_STATE_HOME", state)], &["--name", "fp"]);
    let mut c = inst.client();
    assert_eq!(inst.send(&mut c, "before", "x")["status"], "accepted");
    let filler = fill(&small);
    // Every refusal is an event; one page of them at least is more than
    // the transcript's last page can take.
    let mut refused = 0;
    for i in 0..64 {
        let id = format!("full-{i}");
        let r = c
            .try_call("message/send", inst.msg(&id, &body_for(&id)))
            .unwrap();
        if r.get("error").is_some() {
            refused += 1;
        }
    }
    assert!(refused > 0, "a full disk refused no task");
    fs::remove_file(&filler).unwrap();
    assert_eq!(inst.send(&mut c, "after", "y")["status"], "accepted");
    wait_until("the gap's notice", Duration::from_secs(10), || {
        !gap_notices(&spool).is_empty()
    });
    let notices = gap_notices(&spool);
    assert_eq!(notices.len(), 1, "{notices:?}");
    let lost = notices[0]["lost"].as_u64().unwrap();
    assert!(lost > 0, "{notices:?}");
    let text = notices[0]["text"].as_str().unwrap();
    assert!(text.contains("No space left on device"), "{text}");
    // The numbers still only grow, and what came after the gap is there.
    let seqs: Vec<u64> = transcript(&spool)
        .iter()
        .map(|e| e["seq"].as_u64().unwrap())
        .collect();
    assert!(seqs.windows(2).all(|w| w[0] < w[1]), "{seqs:?}");
    let log = env.run(&["log", "fp"]);
    assert_eq!(log.status, 0, "{}", log.stderr);
    assert!(
        log.stdout
            .contains(&format!("the transcript lost {lost} events")),
        "{}",
        log.stdout
    );
    assert!(log.stdout.contains("after"), "{}", log.stdout);
    drop(c);
    assert_eq!(inst.term(), 0, "{}", inst.stderr());
    let said = inst.stderr();
    assert!(said.contains("writing the transcript failed"), "{said}");
    assert!(said.contains("the transcript is written again"), "{said}");
}

/// A full disk at acceptance is a shortage, not a verdict (issue 47): the
/// answer, `baton send`'s exit-4 message and the transcript say `try
/// again`, nothing is stored, and once there is room the same id is
/// accepted once and runs once. The transcript is on the full disk too,
/// so its part is checked through the `after-write:enospc` fail point.
pub fn a_full_disk_at_acceptance_says_try_again() {
    let env = env();
    let small = env.root.join("small");
    let Some(_mounted) = Tmpfs::mount(&small, "2m") else {
        return;
    };
    let state = small.to_str().unwrap();
    let ws = env.workspace("ws");
    let spool = spool_dir_in(&small, "fp", &ws);
    let log = env.root.join("runs.log");
    let handler = logging_handler(&log);
    // Declared after the mount, so it stops before the unmount.
    let mut inst = env.serve_with(
        &ws,
        &[("XDG_STATE_HOME", state)],
        &["--name", "fp", "--exec", &handler],
    );
    let mut c = inst.client();
    assert_eq!(inst.send(&mut c, "before", "x")["status"], "accepted");
    wait_until("before to run", Duration::from_secs(10), || {
        receipt(&spool, "before").is_some()
    });
    let filler = fill(&small);
    let id = "full-1";
    let r = c
        .try_call("message/send", inst.msg(id, &body_for(id)))
        .unwrap();
    assert_eq!(r["error"]["code"], -32603, "{r}");
    let msg = r["error"]["message"].as_str().unwrap_or("");
    assert!(
        msg.contains("No space left on device")
            && msg.ends_with("; the task was not accepted: try again"),
        "{msg}"
    );
    let out = env.run(&["send", "fp", "x", "--message-id", "full-2"]);
    assert_eq!(out.status, 4, "{out:?}");
    assert!(out.stderr.contains("try again"), "{out:?}");
    for id in [id, "full-2"] {
        assert!(receipt(&spool, id).is_none(), "{id} stored");
        assert!(spool_of(&spool).places(id).is_empty(), "{id} stored");
    }
    fs::remove_file(&filler).unwrap();
    let r = c
        .try_result("message/send", inst.msg(id, &body_for(id)))
        .unwrap();
    assert_eq!(r["status"], "accepted", "{r}");
    wait_until("full-1 to run", Duration::from_secs(10), || {
        receipt(&spool, id).is_some()
    });
    let r = c
        .try_result("message/send", inst.msg(id, &body_for(id)))
        .unwrap();
    assert_eq!(r["status"], "duplicate", "{r}");
    drop(c);
    assert_eq!(inst.term(), 0, "{}", inst.stderr());
    let ran: Vec<String> = runs(&log).into_iter().filter(|r| r == id).collect();
    assert_eq!(ran.len(), 1, "{ran:?}");

    let spool = spool_dir_in(&env.state, "fp", &ws);
    let mut inst = env.serve_with(
        &ws,
        &[("BATON_FAILPOINT", "after-write:enospc*1")],
        &["--name", "fp"],
    );
    let mut c = inst.client();
    let r = c
        .try_call("message/send", inst.msg(id, &body_for(id)))
        .unwrap();
    assert_eq!(r["error"]["code"], -32603, "{r}");
    let said = transcript_until(&spool, "the refusal", Duration::from_secs(10), |e| {
        e["kind"] == "message.rejected" && e["message_id"] == id
    });
    let reason = said.last().unwrap()["reason"].as_str().unwrap_or("");
    assert!(reason.ends_with(": try again"), "{reason}");
    drop(c);
    assert_eq!(inst.term(), 0, "{}", inst.stderr());
}

/// The same through the fail point: the first three writes fail, so the
/// instance's first three events are lost and the fourth line is the
/// notice about them.
pub fn a_failed_transcript_write_is_tried_again() {
    let env = env();
    let ws = env.workspace("ws");
    let spool = spool_dir_in(&env.state, "fp", &ws);
    let mut inst = env.serve_with(
        &ws,
        &[("BATON_FAILPOINT", "transcript-write:enospc*3")],
        &["--name", "fp"],
    );
    let mut c = inst.client();
    for id in ["t-1", "t-2", "t-3", "t-4"] {
        assert_eq!(inst.send(&mut c, id, "x")["status"], "accepted");
    }
    wait_until("t-4's acceptance recorded", Duration::from_secs(10), || {
        transcript(&spool).iter().any(|e| e["message_id"] == "t-4")
    });
    let notices = gap_notices(&spool);
    assert_eq!(notices.len(), 1, "{notices:?}");
    assert_eq!(notices[0]["lost"], 3, "{notices:?}");
    assert_eq!(notices[0]["seq"], 3, "{notices:?}");
    let log = env.run(&["log", "fp"]);
    assert!(
        log.stdout
            .contains("the transcript lost 3 events (seq 1 to 3"),
        "{}",
        log.stdout
    );
    assert!(log.stdout.contains("t-4"), "{}", log.stdout);
    drop(c);
    assert_eq!(inst.term(), 0, "{}", inst.stderr());
}

/// What a directory takes on disk, as `du` counts it: the blocks of every
/// file and directory under it.
fn disk_use(dir: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let Ok(m) = fs::symlink_metadata(dir) else {
        return 0;
    };
    let mut bytes = m.blocks() * 512;
    if m.is_dir() {
        for e in fs::read_dir(dir).unwrap().flatten() {
            bytes += disk_use(&e.path());
        }
    }
    bytes
}

/// Receipts are bounded in disk, not only in days (issue 32): `tasks`
/// through `--exec true` (fsync off: what is measured is the space, not
/// the syncs), four senders at once. At the end the spool takes at most
/// 10 MB, the newest receipts answer `task/status` and the oldest are
/// `unknown`, and the instance's memory is what it was a tenth of the way
/// in. Prints the figures docs/reliability.md records.
pub fn receipts_stay_bounded(tasks: u64) {
    let env = env();
    let ws = env.workspace("ws");
    let spool = spool_dir_in(&env.state, "soak", &ws);
    let mut inst = env.serve_with(
        &ws,
        &[("BATON_FSYNC", "off"), ("BATON_MAX_QUEUE", "1000")],
        &["--name", "soak", "--exec", "true"],
    );
    let pid = inst.pid();
    let senders = 4;
    let each = tasks / senders;
    let sent = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let workers: Vec<_> = (0..senders)
        .map(|s| {
            let (socket, target) = (inst.socket.clone(), inst.id.clone());
            let sent = std::sync::Arc::clone(&sent);
            std::thread::spawn(move || {
                let mut c =
                    crate::util::RawClient::connect_timeout(&socket, Duration::from_secs(10))
                        .unwrap();
                c.try_initialize().unwrap();
                for k in 0..each {
                    let id = format!("s{s}-{k:06}");
                    let p = serde_json::json!({"message_id": id, "target_instance_id": target,
                                               "body": "x", "sender": {}});
                    loop {
                        let r = c.try_result("message/send", p.clone()).unwrap();
                        match r["status"].as_str() {
                            Some("accepted") => break,
                            // The queue is full: wait for the handler.
                            Some("full") => std::thread::sleep(Duration::from_millis(5)),
                            _ => panic!("{id}: {r}"),
                        }
                    }
                    sent.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
            })
        })
        .collect();
    let total = each * senders;
    let rss = |what: &str| crate::util::reliability::status_kib(pid, what);
    let mut at_tenth = None;
    let finished = || -> u64 {
        let r = inst.client().call(9, "agent/info", serde_json::json!({}));
        let q = &r["result"]["queue"];
        q["queued"].as_u64().unwrap() + q["processing"].as_u64().unwrap_or(0)
    };
    crate::util::wait_until("every task to finish", Duration::from_secs(3600), || {
        let n = sent.load(std::sync::atomic::Ordering::Relaxed);
        if at_tenth.is_none() && n >= total / 10 {
            at_tenth = Some(rss("VmRSS"));
        }
        n == total && finished() == 0
    });
    for w in workers {
        w.join().expect("a sender failed");
    }
    let (end_rss, tenth) = (rss("VmRSS"), at_tenth.unwrap());
    let status = |c: &mut crate::util::RawClient, id: &str| {
        let r = c.call(3, "task/status", serde_json::json!({"message_id": id}));
        r["result"]["status"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    };
    let mut c = inst.client();
    let last = format!("s0-{:06}", each - 1);
    assert_eq!(status(&mut c, &last), "done");
    assert_eq!(status(&mut c, "s0-000000"), "unknown");
    drop(c);
    assert_eq!(inst.term(), 0, "{}", inst.stderr());
    let used = disk_use(&spool);
    let kept = crate::util::receipts(&spool).len();
    println!(
        "receipts soak: {total} tasks; spool {used} bytes on disk ({} of them receipt logs), {kept} receipts kept; VmRSS {tenth} KiB at a tenth, {end_rss} KiB at the end",
        disk_use(&spool.join("done"))
    );
    assert!(used <= 10_000_000, "the spool takes {used} bytes");
    assert!(kept >= baton::spool::RECEIPTS_KEEP, "{kept} receipts kept");
    // Flat: no more than a few MiB over what it was early on.
    assert!(
        end_rss <= tenth + 4096,
        "VmRSS {tenth} KiB at a tenth, {end_rss} KiB at the end"
    );
}
