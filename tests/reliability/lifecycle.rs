//! Stopping (docs/protocol.md §7, Manifest): SIGTERM in the middle of a burst of sends, and a
//! second instance next to a live one.

use crate::util::reliability::{body_for, env, spool, spool_dir};
use crate::util::{RawClient, wait_until};
use serde_json::json;
use std::collections::HashMap;
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

/// SIGTERM while four senders send as fast as they can: the manifest goes
/// before the socket, every task that was answered `accepted` is in the
/// spool, the socket is unlinked, and the exit is 0 within 2 s.
pub fn sigterm_during_burst(test: &str) {
    let env = env();
    let ws = env.workspace("ws");
    let mut inst = env.serve_with(
        &ws,
        &[("BATON_MAX_QUEUE", "100000"), ("BATON_IO_TIMEOUT", "30")],
        &["--name", "burst"],
    );
    let (socket, manifest, target) = (
        inst.socket.clone(),
        inst.manifest_path.clone(),
        inst.id.clone(),
    );
    // The kernel records the order of removals in the registry.
    let removals = Removals::watch(socket.parent().unwrap());
    let accepted: Arc<Mutex<HashMap<usize, Vec<String>>>> = Arc::default();
    let senders: Vec<_> = (0..4)
        .map(|s| {
            let (socket, target, accepted) =
                (socket.clone(), target.clone(), Arc::clone(&accepted));
            thread::spawn(move || {
                let mut k = 0u64;
                // Reconnects until the socket is gone.
                while let Ok(mut c) = RawClient::connect(&socket) {
                    if c.try_initialize().is_err() {
                        continue;
                    }
                    loop {
                        let id = format!("b{s}-{k:06}");
                        let p = json!({"message_id": id, "target_instance_id": target,
                                       "body": body_for(&id), "sender": {}});
                        let Ok(r) = c.try_result("message/send", p) else {
                            break;
                        };
                        assert_eq!(r["status"], "accepted", "{r}");
                        accepted.lock().unwrap().entry(s).or_default().push(id);
                        k += 1;
                    }
                }
            })
        })
        .collect();
    let count = || {
        accepted
            .lock()
            .unwrap()
            .values()
            .map(Vec::len)
            .sum::<usize>()
    };
    wait_until(
        "a burst of 200 accepted tasks",
        Duration::from_secs(30),
        || count() >= 200,
    );
    let before = count();
    let stopping = Instant::now();
    let code = inst.term();
    let took = stopping.elapsed();
    for s in senders {
        s.join().expect("a sender failed");
    }
    let removed = removals.names();
    let accepted = accepted.lock().unwrap();
    let total: usize = accepted.values().map(Vec::len).sum();
    let name = |p: &Path| p.file_name().unwrap().to_string_lossy().into_owned();
    let (m_name, s_name) = (name(&manifest), name(&socket));
    let at = |n: &str| removed.iter().position(|r| r == n);
    eprintln!(
        "{test}: {total} tasks accepted ({before} before SIGTERM); exit {code} after {} ms; \
         removals in the registry, in order: {removed:?}",
        took.as_millis()
    );
    assert_eq!(code, 0, "{}", inst.stderr());
    // With a 30 s I/O timeout, an exit that waited for a sender's
    // connection would take 30 s; not waiting takes well under half that.
    assert!(took < Duration::from_secs(15), "exit took {took:?}");
    assert!(before > 0, "no burst before SIGTERM");
    assert!(!manifest.exists(), "the manifest is still there");
    assert!(
        fs::symlink_metadata(&socket).is_err(),
        "the socket is still there"
    );
    match (at(&m_name), at(&s_name)) {
        (Some(m), Some(s)) => assert!(m < s, "the socket went before the manifest: {removed:?}"),
        other => panic!("removals not seen ({other:?}): {removed:?}"),
    }
    let v = spool(&spool_dir(&env, "burst", &ws));
    for (s, ids) in accepted.iter() {
        for id in ids {
            assert_eq!(v.places(id), ["inbox"], "sender {s}: {id}");
        }
    }
    // Nothing else: an unanswered task may be stored, but at most the one
    // each sender had in flight.
    assert!(
        v.items.len() <= total + accepted.len(),
        "{} files for {total} acceptances",
        v.items.len()
    );
}

/// An inotify watch on a directory: the names removed from it, in the
/// order the kernel saw the removals.
struct Removals {
    fd: libc::c_int,
}

impl Removals {
    fn watch(dir: &Path) -> Removals {
        let path = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: plain system calls; `path` is a valid C string for the
        // duration of the call and the descriptor is ours until `drop`.
        unsafe {
            let fd = libc::inotify_init1(libc::IN_NONBLOCK | libc::IN_CLOEXEC);
            assert!(
                fd >= 0,
                "inotify_init1: {}",
                std::io::Error::last_os_error()
            );
            let wd = libc::inotify_add_watch(fd, path.as_ptr(), libc::IN_DELETE);
            assert!(
                wd >= 0,
                "inotify_add_watch: {}",
                std::io::Error::last_os_error()
            );
            Removals { fd }
        }
    }

    /// Everything recorded so far.
    fn names(&self) -> Vec<String> {
        let mut out = Vec::new();
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            // SAFETY: reads into a buffer we own, within its length.
            let n = unsafe { libc::read(self.fd, buf.as_mut_ptr().cast(), buf.len()) };
            if n <= 0 {
                return out;
            }
            let mut off = 0;
            let head = std::mem::size_of::<libc::inotify_event>();
            while off + head <= n as usize {
                // SAFETY: the kernel wrote a whole event header here; it may
                // be unaligned in our byte buffer, hence read_unaligned.
                let ev: libc::inotify_event =
                    unsafe { std::ptr::read_unaligned(buf[off..].as_ptr().cast()) };
                let name = &buf[off + head..off + head + ev.len as usize];
                let end = name.iter().position(|&b| b == 0).unwrap_or(name.len());
                out.push(String::from_utf8_lossy(&name[..end]).into_owned());
                off += head + ev.len as usize;
            }
        }
    }
}

impl Drop for Removals {
    fn drop(&mut self) {
        // SAFETY: closes the descriptor this value owns.
        unsafe {
            libc::close(self.fd);
        }
    }
}

fn inode(p: &Path) -> (u64, u64) {
    let m = fs::symlink_metadata(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    (m.dev(), m.ino())
}

/// A second instance never deletes a live instance's socket (or
/// manifest): not when it is refused for the same spool, not when the
/// live one does not answer its ping (stopped with SIGSTOP), not through
/// `baton gc`, not when it stops. (That an instance stopping leaves alone
/// a socket at its path that it did not bind is
/// `registry::shutdown_does_not_unlink_a_socket_it_did_not_create`.)
pub fn second_instance(test: &str) {
    let env = env();
    let ws_a = env.workspace("a");
    let ws_b = env.workspace("b");
    let mut a = env.serve(&ws_a, &["--name", "alpha"]);
    let (a_sock, a_manifest) = (a.socket.clone(), a.manifest_path.clone());
    let a_ino = inode(&a_sock);
    let intact = |what: &str| {
        assert_eq!(
            inode(&a_sock),
            a_ino,
            "{what}: the live socket was replaced or removed"
        );
        assert!(a_manifest.exists(), "{what}: the live manifest was removed");
    };

    // Same name and workspace: refused (the spool is locked), nothing of
    // the live one touched.
    let out = env
        .cmd()
        .args(["serve", "--name", "alpha"])
        .current_dir(&ws_a)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_ne!(out.status.code(), Some(0), "{err}");
    assert!(err.contains(&format!("pid {}", a.pid())), "{err}");
    intact("a refused second instance");
    a.client().try_ping().unwrap();

    // The live one stops answering (SIGSTOP): a new instance's stale sweep
    // and `baton gc` must leave it alone, since its pid is alive.
    // (Dropping `a` sends SIGCONT before SIGTERM, should the test fail
    // while it is stopped.)
    a.signal(libc::SIGSTOP);
    let quick = [("BATON_IO_TIMEOUT", "0.3")];
    let t = Instant::now();
    let mut b = env.serve_with(&ws_b, &quick, &["--name", "beta"]);
    intact("a new instance started next to a stopped one");
    let gc = env
        .cmd()
        .arg("gc")
        .env("BATON_IO_TIMEOUT", "0.3")
        .output()
        .unwrap();
    assert_eq!(gc.status.code(), Some(0), "{gc:?}");
    intact("baton gc");
    a.signal(libc::SIGCONT);
    a.client().try_ping().unwrap();
    assert_eq!(b.term(), 0, "{}", b.stderr());
    intact("the second instance stopping");
    eprintln!(
        "{test}: second instance and gc next to a stopped one took {} ms",
        t.elapsed().as_millis()
    );

    // A killed instance's leftovers are removed by the next start (so the
    // sweep is really running), the live one's are not.
    let mut c = env.serve(&ws_b, &["--name", "gamma"]);
    let (c_sock, c_manifest) = (c.socket.clone(), c.manifest_path.clone());
    c.kill9();
    assert!(c_sock.exists() && c_manifest.exists());
    let mut d = env.serve(&ws_b, &["--name", "delta"]);
    // The sweep runs right after the new instance published its own
    // manifest (docs/protocol.md §7), so it is waited for, bounded.
    wait_until(
        "the dead instance's socket and manifest swept",
        Duration::from_secs(10),
        || !c_sock.exists() && !c_manifest.exists(),
    );
    intact("a new instance sweeping a dead one");
    assert_eq!(d.term(), 0);
    intact("another instance stopping");
    a.client().try_ping().unwrap();
    assert_eq!(a.term(), 0, "{}", a.stderr());
}
