//! A handler dies with its instance: while a turn runs, `handler.json` in
//! the spool names its process group, and whoever opens the spool next
//! (the restarted instance, or an offline sender) kills what is left of
//! that group before the task is called interrupted. The group's leader
//! has already died with the instance (`sys::spawn_leader`); this takes
//! what it started in its group. So an interrupted task did not finish.
//!
//! The record is written twice per turn: with the turn's token before the
//! handler starts, then, once `turn.started` is out, with its process
//! group. Should the second write fail, the first stands, and recovery
//! finds the group by the session and the token. A group is only killed
//! when one of its processes still carries `BATON_TURN=<token>` in the
//! environment it started with: a recycled group id is never ours. Not
//! synced: the record only has to outlive the instance, not the machine,
//! which would take the handler along. That check needs `/proc` (Linux).
//! Elsewhere the handler's leader did not die with the instance (there is
//! no death signal), and the recorded group is killed if its leader is
//! still that handler: a process whose group is the recorded one (it leads
//! it) in the recorded session. A group whose leader is gone is left alone
//! there: nothing tells it from a recycled id.

use super::Spool;
use crate::base::error::{Error, Result};
use crate::base::files;
use crate::sys;
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;
use std::sync::OnceLock;

const RECORD: &str = "handler.json";

#[derive(Serialize, Deserialize)]
struct Record {
    token: String,
    /// The instance's session: the handler's group is in it, and a
    /// daemon the handler started (`setsid`) is not.
    sid: Option<u32>,
    /// Known once the handler started.
    pgid: Option<u32>,
}

impl Spool {
    /// Records the running handler: its turn's `token` before it starts,
    /// then its process group `pgid`.
    pub fn record_handler(&self, token: &str, pgid: Option<u32>) -> Result<()> {
        // Read once: baton never leaves the session it started in.
        static SID: OnceLock<Option<u32>> = OnceLock::new();
        let rec = Record {
            token: token.to_string(),
            sid: *SID.get_or_init(|| sys::session_of(0)),
            pgid,
        };
        let bytes = serde_json::to_vec(&rec).expect("a record serializes");
        let (tmp, dest) = (self.path("tmp", RECORD), self.dir.join(RECORD));
        // Before the handler starts, in place: a torn record then names
        // nothing that runs. The group's record replaces it whole.
        if pgid.is_none() && files::write_in_place(&dest, &bytes).is_ok() {
            return Ok(());
        }
        files::write_private(&tmp, &dest, &bytes, false).map_err(|e| Error::io("write", &dest, e))
    }

    /// The turn is over: nothing to kill at the next open.
    pub fn clear_handler(&self) {
        let _ = files::remove_file(&self.dir.join(RECORD));
    }

    /// Recovery, before `processing/` becomes `interrupted/`: SIGKILL to
    /// the recorded handler's group if it is still there and ours.
    pub(super) fn kill_recorded_handler(&self, notes: &mut Vec<String>) {
        let path = self.dir.join(RECORD);
        let Ok(bytes) = super::taskfile::read_bounded(&path) else {
            return;
        };
        if let Ok(rec) = serde_json::from_slice::<Record>(&bytes) {
            let groups = if sys::lists_processes() {
                groups_of(&rec)
            } else {
                group_by_leader(&rec).into_iter().collect()
            };
            for pgid in groups {
                if sys::kill_group(pgid, sys::SIGKILL).is_ok() {
                    notes.push(format!(
                        "the handler of an interrupted turn was still running: process group {pgid} killed"
                    ));
                }
            }
        }
        let _ = files::remove_file(&path);
    }
}

/// The groups to kill: those with a live process that carries the turn's
/// token, and that are the recorded group or (if the instance died before
/// it recorded one) a group of the instance's session whose leader, the
/// handler, is gone. Never our own group (a `baton send` the handler ran
/// into this spool is in it).
fn groups_of(rec: &Record) -> BTreeSet<u32> {
    let procs = sys::processes();
    let leader_gone = |pgid: u32| !procs.iter().any(|p| p.pid == pgid && !p.zombie);
    let own = sys::process(std::process::id()).map(|p| p.pgid);
    let entry = format!("{}={}", crate::base::config::BATON_TURN, rec.token);
    let mut groups = BTreeSet::new();
    for p in procs
        .iter()
        .filter(|p| !p.zombie && p.pgid > 1 && Some(p.pgid) != own)
    {
        let candidate = match rec.pgid {
            Some(pgid) => p.pgid == pgid,
            None => rec.sid == Some(p.sid) && leader_gone(p.pgid),
        };
        if candidate && !groups.contains(&p.pgid) && sys::environ_has(p.pid, &entry) {
            groups.insert(p.pgid);
        }
    }
    groups
}

/// Without `/proc`: the recorded group, if its leader still leads it in
/// the recorded session (`getpgid`, `getsid`). Never our own group.
fn group_by_leader(rec: &Record) -> Option<u32> {
    let pgid = rec.pgid.filter(|p| *p > 1)?;
    let own = sys::group_of(std::process::id());
    let leads = sys::group_of(pgid) == Some(pgid);
    let same_session = rec.sid.is_some() && sys::session_of(pgid) == rec.sid;
    (leads && same_session && own != Some(pgid)).then_some(pgid)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::CommandExt;
    use std::process::{Child, Command};
    use std::time::{Duration, Instant};

    /// A process group whose leader, our child, exits at once and leaves
    /// a `sleep` behind in it, with `BATON_TURN=token`; killed when dropped.
    struct Orphaned(Child);

    impl Orphaned {
        fn start(token: &str) -> Orphaned {
            let mut child = Command::new("/bin/sh")
                .args(["-c", "sleep 30 & exit 0"])
                .env(crate::base::config::BATON_TURN, token)
                .process_group(0)
                .spawn()
                .unwrap();
            child.wait().unwrap();
            let pgid = child.id();
            let deadline = Instant::now() + Duration::from_secs(10);
            while !sys::processes().iter().any(|p| p.pgid == pgid) {
                assert!(Instant::now() < deadline, "no sleep in group {pgid}");
                std::thread::sleep(Duration::from_millis(10));
            }
            Orphaned(child)
        }

        fn pgid(&self) -> u32 {
            self.0.id()
        }
    }

    impl Drop for Orphaned {
        fn drop(&mut self) {
            let _ = sys::kill_group(self.pgid(), sys::SIGKILL);
        }
    }

    fn record(token: &str, pgid: Option<u32>) -> Record {
        Record {
            token: token.into(),
            sid: sys::process(std::process::id()).map(|p| p.sid),
            pgid,
        }
    }

    #[test]
    fn only_a_group_that_carries_the_turns_token_is_killed() {
        if !sys::lists_processes() {
            return; // no /proc: nothing is ever killed
        }
        let ours = Orphaned::start("111");
        let other = Orphaned::start("222");
        let pgid = ours.pgid();
        let want = BTreeSet::from([pgid]);
        // Recorded by group, or only by token (the instance died before
        // it recorded the group): found either way.
        assert_eq!(groups_of(&record("111", Some(pgid))), want);
        assert_eq!(groups_of(&record("111", None)), want);
        // A group without the token is not ours, even under the recorded
        // id (a recycled one); nor is one of another session.
        assert!(groups_of(&record("333", Some(pgid))).is_empty());
        assert!(groups_of(&record("111", Some(other.pgid()))).is_empty());
        let mut elsewhere = record("111", None);
        elsewhere.sid = elsewhere.sid.map(|s| s + 1);
        assert!(groups_of(&elsewhere).is_empty());
    }

    /// A process group whose leader, our child, lives on (as a handler's
    /// leader does where there is no death signal); killed when dropped.
    struct Led(Child);

    impl Drop for Led {
        fn drop(&mut self) {
            let _ = sys::kill_group(self.0.id(), sys::SIGKILL);
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }

    #[test]
    fn without_proc_only_a_group_still_led_in_the_recorded_session_is_killed() {
        let spawn = |group: i32| {
            let child = Command::new("sleep").arg("30").process_group(group).spawn();
            Led(child.unwrap())
        };
        let led = spawn(0);
        let pgid = led.0.id();
        // As the instance records it: its session, the leader's group.
        let recorded = |pgid: Option<u32>| Record {
            token: "444".into(),
            sid: sys::session_of(0),
            pgid,
        };
        let rec = recorded(Some(pgid));
        assert_eq!(group_by_leader(&rec), Some(pgid));
        // Another session, no group recorded, a process that leads no
        // group (a recycled pid), our own group: left alone.
        let mut elsewhere = recorded(Some(pgid));
        elsewhere.sid = elsewhere.sid.map(|s| s + 1);
        assert_eq!(group_by_leader(&elsewhere), None);
        assert_eq!(group_by_leader(&recorded(None)), None);
        let member = spawn(pgid as i32);
        assert_eq!(group_by_leader(&recorded(Some(member.0.id()))), None);
        let own = sys::group_of(std::process::id());
        assert_eq!(group_by_leader(&recorded(own)), None);
        // Once the leader is gone, the group is not provably that handler's.
        drop(led);
        assert_eq!(group_by_leader(&rec), None);
    }
}
