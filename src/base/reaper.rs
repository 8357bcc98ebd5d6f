//! A turn's orphans stay the turn's (docs/security.md): an instance is
//! the subreaper of what its handlers start (`sys::become_subreaper`), so
//! a process whose parent exits becomes the instance's child instead of
//! init's, and its ancestry still leads to the instance. Such an orphan
//! is reaped here when it ends; a child that code of ours started and
//! waits for itself (a handler's leader, a `tmux` call) is registered
//! with `spawned` and never reaped here, so its owner gets its status.

use crate::base::lock;
use crate::sys;
use std::io;
use std::sync::Mutex;

/// The children started by code of ours that waits for them itself.
static OWN: Mutex<Vec<u32>> = Mutex::new(Vec::new());

/// Starts a child with `start` and registers its pid (`pid` reads it)
/// before `reap_orphans` can look: the registry's lock is held across the
/// start, so a child that ends at once is not taken for an orphan.
pub fn spawned<T>(start: impl FnOnce() -> io::Result<T>, pid: impl Fn(&T) -> u32) -> io::Result<T> {
    let mut own = lock(&OWN);
    let child = start()?;
    own.push(pid(&child));
    Ok(child)
}

/// The child `pid` that `spawned` registered was waited for by its owner.
pub fn waited(pid: u32) {
    lock(&OWN).retain(|p| *p != pid);
}

/// Reaps every child of ours that ended and is not one `spawned`
/// registered: the orphans of handlers. Runs at each SIGCHLD.
pub fn reap_orphans() {
    reap_among(children());
}

/// Reaps those of `pids` that ended and are not registered.
fn reap_among(pids: Vec<u32>) {
    let own = lock(&OWN);
    for pid in pids {
        if !own.contains(&pid) && sys::process(pid).is_some_and(|p| p.zombie) {
            let _ = sys::try_wait_leader(pid);
        }
    }
}

/// This process's children: `/proc/self/task/*/children` (an orphan may
/// be given to any of our threads), else every process whose parent we
/// are.
fn children() -> Vec<u32> {
    let (mut pids, mut read) = (Vec::new(), false);
    let tasks = std::fs::read_dir("/proc/self/task").into_iter().flatten();
    for t in tasks.filter_map(Result::ok) {
        if let Ok(listed) = std::fs::read_to_string(t.path().join("children")) {
            read = true;
            pids.extend(listed.split_whitespace().flat_map(str::parse::<u32>));
        }
    }
    if read {
        return pids;
    }
    let me = std::process::id();
    let all = sys::processes().into_iter();
    all.filter(|p| p.ppid == me).map(|p| p.pid).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_orphan_is_reaped_and_a_registered_child_is_left_to_its_owner() {
        if !sys::become_subreaper().unwrap_or(false) || !sys::lists_processes() {
            return;
        }
        // A shell that starts a child and exits: the child is ours now.
        let out = std::process::Command::new("sh")
            .args(["-c", "sleep 30 >/dev/null 2>&1 & echo $!"])
            .stdout(std::process::Stdio::piped())
            .output()
            .unwrap();
        let orphan: u32 = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap();
        assert_eq!(
            sys::process(orphan).map(|p| p.ppid),
            Some(std::process::id())
        );
        let mut mine = spawned(|| std::process::Command::new("true").spawn(), |c| c.id()).unwrap();
        let mine_pid = mine.id();
        sys::signal(orphan, sys::SIGKILL).unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while sys::process(orphan).is_some() || !sys::process(mine_pid).is_some_and(|p| p.zombie) {
            assert!(
                std::time::Instant::now() < deadline,
                "orphan {orphan} not reaped"
            );
            // Only these two: the other tests' children are ours too.
            reap_among(vec![orphan, mine_pid]);
            std::thread::yield_now();
        }
        assert!(
            mine.wait().unwrap().success(),
            "the owner gets its child's status"
        );
        waited(mine_pid);
    }
}
