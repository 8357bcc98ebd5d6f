//! Who may call what (docs/security.md; docs/protocol.md, "Who may call
//! what"). A connection gets a role from what the kernel says of its peer
//! (its pid: a peer of another uid is refused before a byte is read,
//! `server::accept_loop`), from the peer's ancestry (`/proc/PID/stat` on
//! Linux, `kinfo_proc` elsewhere, and the environment each ancestor
//! started with) and from what it proved (a bridge's declared target,
//! `initialize`). One table, `Door::roles`, says which roles may use each
//! way in; no method decides that by itself. The methods then hold a role
//! to its scope: a process of a turn sends only inside that turn
//! (`instance/outbound.rs`), a bridge asks only about the tasks that came
//! through a bridge (`instance/outcome.rs`), and the agent and a bridge
//! cancel only their own tasks (`instance/cancel.rs`).

use crate::base::config::{BATON_SOCKET, BATON_TURN};
use crate::base::lock;
use crate::sys;
use crate::wire::{Call, Method};
use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

spelled! {
    /// Who a caller is, as far as the kernel lets the instance tell.
    #[derive(Default)]
    pub enum Role ("role") {
        /// The instance's own process: the front end it runs in (the view,
        /// `baton mcp`).
        Own = "own",
        /// A process of the instance's user that is none of the others: the
        /// operator's commands and scripts, a pull agent, another instance
        /// delivering a task. Also any caller when nothing tells callers
        /// apart.
        #[default]
        Operator = "operator",
        /// A process of the agent the instance serves, where the instance
        /// knows that agent: the MCP host that started `baton mcp`, and what
        /// it started.
        Agent = "agent",
        /// A process of one of this instance's turns: its handler, or
        /// anything the handler started.
        Turn = "turn",
        /// A process of a turn of another instance.
        OtherTurn = "other-turn",
        /// `baton bridge TARGET` for this instance: a remote key's forced
        /// command.
        Bridge = "bridge",
    }
}

/// A way into an instance: a method, or a line that is not a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Door {
    Method(Method),
    /// `events/subscribe` with `controller: true`: the connection is then
    /// asked to decide approvals.
    Controller,
    /// A reply to an `approval/request`: a decision.
    Reply,
    /// A task in a zcoder frame (docs/protocol.md §9).
    Zcoder,
}

use Role::{Agent, Bridge, Operator, OtherTurn, Own, Turn};

/// Every caller may say hello and ask for a task's status.
const ANYONE: &[Role] = &[Own, Operator, Agent, Turn, OtherTurn, Bridge];
/// Reading what the instance is and does: any local process.
const LOCAL: &[Role] = &[Own, Operator, Agent, Turn, OtherTurn];
/// Acting on the instance's own queue: the operator and its agent.
const AGENT: &[Role] = &[Own, Operator, Agent];
/// What only the operator decides: approvals and local turns.
const OPERATOR: &[Role] = &[Own, Operator];
/// A task from outside: a process of a turn sends through its own
/// instance (`relay/send`), never straight to a peer.
const SENDERS: &[Role] = &[Own, Operator, Agent, Bridge];
/// Sending as this instance: a turn's process too, held to its turn.
const RELAY: &[Role] = &[Own, Operator, Agent, Turn];

impl Door {
    /// Every way in, methods first, in the order `initialize` lists them.
    pub fn all() -> Vec<Door> {
        let mut v: Vec<Door> = Method::ALL.into_iter().map(Door::Method).collect();
        v.extend([Door::Controller, Door::Reply, Door::Zcoder]);
        v
    }

    /// Its name, as the table in docs/protocol.md spells it.
    pub fn name(self) -> &'static str {
        match self {
            Door::Method(m) => m.as_str(),
            Door::Controller => "events/subscribe (controller)",
            Door::Reply => "reply to approval/request",
            Door::Zcoder => "zcoder frame",
        }
    }

    /// The one access table: the roles that may use this door.
    pub fn roles(self) -> &'static [Role] {
        match self {
            Door::Method(Method::Initialize | Method::Ping) => ANYONE,
            Door::Method(Method::AgentInfo | Method::EventsSubscribe) => LOCAL,
            Door::Method(Method::MessageSend) => SENDERS,
            // zcoder's framing has no bridge.
            Door::Zcoder => AGENT,
            Door::Method(Method::Foreground(call)) => match call {
                // What waits for an approval is what the events show.
                Call::ControlStatus | Call::InboxList | Call::ApprovalList => LOCAL,
                Call::ControlPause
                | Call::ControlResume
                | Call::InboxClaim
                | Call::InboxComplete
                | Call::InboxRequeue
                | Call::InboxDiscard
                | Call::TurnCancel => AGENT,
                // Who may send as this instance may say it got the reply.
                Call::RelaySend | Call::InboxReceived => RELAY,
                Call::ApprovalRespond | Call::TurnLocal => OPERATOR,
                Call::TaskStatus => ANYONE,
                // Held to the caller's own tasks: the agent to what this
                // instance sent, a bridge to what came through a bridge
                // (`instance/cancel.rs`).
                Call::TaskCancel => SENDERS,
                Call::PermissionAsk => &[Own],
            },
            Door::Controller | Door::Reply => OPERATOR,
        }
    }

    /// The doors that, with `serve --operator`, only the operators'
    /// accounts pass: the instance's own account is at most its agent,
    /// and its agent neither decides nor stops what runs.
    pub fn operators_only(self) -> bool {
        matches!(
            self,
            Door::Controller
                | Door::Reply
                | Door::Method(Method::Foreground(
                    Call::ApprovalRespond
                        | Call::TurnLocal
                        | Call::ControlPause
                        | Call::ControlResume
                        | Call::TurnCancel
                ))
        )
    }
}

/// What a bridge proved: the instance it was started for, the remote
/// end as OpenSSH gave it (`SSH_CONNECTION`'s client address and port),
/// and the label its forced command names the key by (`baton bridge
/// --key LABEL`): a bridge reaches only the tasks sent through a bridge
/// of the same label, none only those of none (`instance/cancel.rs`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BridgeKey {
    pub target: String,
    pub remote: Option<String>,
    pub label: Option<String>,
}

impl BridgeKey {
    /// The longest label, in bytes.
    pub const MAX_LABEL: usize = 64;

    /// Whether `label` may name a key: 1 to 64 ASCII letters, digits and
    /// `-_.@`, so that it is shown as it is, anywhere.
    pub fn valid_label(label: &str) -> bool {
        (1..=Self::MAX_LABEL).contains(&label.len())
            && (label.bytes()).all(|b| b.is_ascii_alphanumeric() || b"-_.@".contains(&b))
    }
}

/// One connection's caller.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Caller {
    /// The kernel's peer pid, where the platform reports it.
    pub pid: Option<u32>,
    pub role: Role,
    /// `Turn`: the handler the process is, or descends from.
    pub leader: Option<u32>,
    /// `OtherTurn`: the socket of the instance whose turn it belongs to.
    pub instance_socket: Option<String>,
    /// `Agent`: the agent's process.
    pub agent: Option<u32>,
    pub bridge: Option<BridgeKey>,
    /// The kernel's peer uid.
    pub uid: u32,
    /// A process of the instance's own account while `--operator` names
    /// the operators' accounts: at most the agent, whatever its ancestry,
    /// and never through the doors `Door::operators_only` names.
    pub capped: bool,
    /// The peer process is gone (it connected and exited, leaving the
    /// connection to a child), or is of an account not let in: nothing
    /// tells who it is, so every door that asks is shut to it.
    pub gone: bool,
    /// An ancestor's record could not be read for want of a resource
    /// (descriptors, memory) while the process lives: the role is not
    /// known, and the caller is told to try again, never judged.
    pub unsure: bool,
}

/// What an instance knows of itself to tell its callers apart.
pub struct Ours<'a> {
    pub pid: u32,
    pub socket: &'a str,
    /// The running handler's leader, which is also its process group.
    pub handler: Option<u32>,
    /// The agent's process, where the instance knows it.
    pub agent: Option<u32>,
    /// The tokens of the exec turns the instance started (the running
    /// one last, when one runs).
    pub tokens: Option<&'a Mutex<VecDeque<String>>>,
    /// The instance's account.
    pub uid: u32,
    /// `serve --operator`: the accounts whose processes are its
    /// operators. Empty: roles among processes of one user.
    pub operators: &'a [u32],
    /// Whether the instance is the subreaper of its handlers' orphans
    /// (`sys::become_subreaper`): then only its descendants are its
    /// turns', and a turn token only says which turn.
    pub reaper: bool,
    /// Our registry: a peer that descends from another instance listed
    /// there (its manifest's pid an ancestor of the peer's) is a process
    /// of that instance's turn, whatever its environment says.
    pub registry: Option<&'a Instances>,
}

/// Exec turns whose token is remembered: a process left over from an
/// older one, orphaned and out of its group, is no longer recognized.
pub const KEPT_TOKENS: usize = 4096;

impl Ours<'_> {
    /// Whether `token` is one of our exec turns'.
    fn issued(&self, token: &str) -> bool {
        self.tokens
            .is_some_and(|t| lock(t).iter().any(|k| k == token))
    }

    /// The running exec turn's token: the newest, while a handler runs.
    fn running_token(&self) -> Option<String> {
        self.handler?;
        lock(self.tokens?).back().cloned()
    }
}

/// Ancestors looked at, at most: far deeper than any real tree.
const MAX_DEPTH: usize = 128;

/// The role of the process `pid` of account `uid`. With `--operator`, a
/// process of a listed account is an operator and nothing else is: the
/// instance's own account is at most its agent (`capped`). Among the
/// processes of the instance's account, a process of one of our turns is
/// found by its process group (the running handler's) or by its ancestry
/// (it descends from us: the orphans of a turn are ours too, as we are
/// their subreaper); the `BATON_TURN` of one of our exec turns that it or
/// an ancestor started with only says which turn. Where there is no
/// subreaper, such a token beside our `BATON_SOCKET` still marks a
/// process left over from one of our turns. A process of another
/// instance's turn is found by a `BATON_TURN` beside a `BATON_SOCKET`
/// that is not ours, as every handler starts with. A peer that is gone
/// is `gone`; without a peer pid nothing tells callers apart: the
/// operator (at most the agent with `--operator`).
pub fn classify(pid: Option<u32>, uid: u32, ours: &Ours) -> Caller {
    let separated = !ours.operators.is_empty();
    let mut c = Caller {
        pid,
        uid,
        ..Caller::default()
    };
    if uid != ours.uid {
        // Only a listed account is let in (`server::accept_loop`).
        c.gone = !ours.operators.contains(&uid);
        return c;
    }
    c.capped = separated;
    let Some(pid) = pid else {
        c.role = if separated {
            Role::Agent
        } else {
            Role::Operator
        };
        return c;
    };
    if pid == ours.pid {
        c.role = Role::Own;
        return c;
    }
    let group = ours.handler.zip(sys::process(pid));
    if let Some((h, _)) = group.filter(|(h, p)| p.pgid == *h) {
        c.role = Role::Turn;
        c.leader = Some(h);
        return c;
    }
    // An ancestor that exits during the walk leaves its child to a
    // reaper: the walk is made again.
    for _ in 0..3 {
        match walk(pid, ours, &mut c) {
            Walked::Done => return c,
            Walked::Top => break,
            Walked::Lost => {
                c = Caller {
                    pid: Some(pid),
                    uid,
                    capped: separated,
                    ..Caller::default()
                }
            }
        }
    }
    c.role = match (&c.instance_socket, c.agent) {
        (Some(_), _) => Role::OtherTurn,
        (None, Some(_)) => Role::Agent,
        (None, None) if separated => Role::Agent,
        (None, None) => Role::Operator,
    };
    c
}

/// How a walk up a peer's ancestry ended.
enum Walked {
    /// The role is decided (or the peer is gone or unreadable).
    Done,
    /// It reached the top: the role follows from what it saw.
    Top,
    /// An ancestor vanished on the way.
    Lost,
}

/// Walks from `pid` up its ancestry, noting in `c` what it finds.
fn walk(pid: u32, ours: &Ours, c: &mut Caller) -> Walked {
    let (mut cur, mut child, mut token_here) = (pid, None, None);
    let mut instances: Option<Arc<Vec<(u32, String)>>> = None;
    for _ in 0..MAX_DEPTH {
        if cur == ours.pid {
            c.role = Role::Turn;
            let running = token_here.is_some() && ours.running_token() == token_here;
            c.leader = if running { ours.handler } else { child };
            return Walked::Done;
        }
        if cur != pid && c.instance_socket.is_none() {
            let listed = instances
                .get_or_insert_with(|| ours.registry.map_or_else(Default::default, Instances::get));
            // Every turn runs in a process group of its own (its
            // handler's), never in its instance's: a child in the
            // instance's own group is none of its turns'.
            let turn_below = || child.and_then(sys::group_of) != sys::group_of(cur);
            if let Some((_, socket)) = listed
                .iter()
                .find(|(p, _)| *p == cur)
                .filter(|_| turn_below())
            {
                c.instance_socket = Some(socket.clone());
            }
        }
        let marked = match c.instance_socket {
            None => sys::environ_values(cur, [BATON_TURN, BATON_SOCKET]),
            Some(_) => [None, None],
        };
        if let [Some(token), Some(socket)] = marked {
            if socket != ours.socket {
                c.instance_socket = Some(socket);
            } else if ours.issued(&token) && token_here.is_none() {
                if !ours.reaper {
                    // Left over from one of our turns (its parent gone, out
                    // of its group): still that turn's, which may have ended.
                    c.role = Role::Turn;
                    let running = ours.running_token().as_deref() == Some(token.as_str());
                    c.leader = ours.handler.filter(|_| running);
                    return Walked::Done;
                }
                token_here = Some(token);
            }
        }
        if ours.agent == Some(cur) {
            c.agent = Some(cur);
        }
        match sys::process(cur) {
            // Ended and not yet reaped: its entry still names a parent,
            // but the process is gone, and so is any claim through it.
            Some(p) if p.zombie && cur == pid => {
                c.gone = true;
                return Walked::Done;
            }
            Some(p) if p.zombie => return Walked::Lost,
            Some(p) if p.ppid > 1 => (child, cur) = (Some(cur), p.ppid),
            Some(_) => return Walked::Top,
            None if cur != pid => return Walked::Lost,
            None => {
                // Gone, or not readable now: /proc's entry says which,
                // without a descriptor.
                let exists = std::path::Path::new(&format!("/proc/{cur}")).exists();
                c.unsure = cfg!(any(target_os = "linux", target_os = "android")) && exists;
                c.gone = !c.unsure;
                return Walked::Done;
            }
        }
    }
    Walked::Top
}

/// The instances of a registry by their manifests' names, read once per
/// walk and only when a walk needs it, and listed again only when the
/// directory changed (docs/performance.md, *A registry listed once per
/// change*): a registry of a thousand stale manifests is not listed
/// for every connection.
pub struct Instances {
    path: PathBuf,
    listed: Mutex<Option<Listed>>,
}

/// A listing, and the directory as it was just before it was made.
struct Listed {
    /// The directory's device, inode and modification time.
    stamp: (u64, u64, i64, i64),
    /// Whether that time was older than the file system's clock step
    /// when the listing began: a change after it then gives the directory
    /// another time. (A change in the same step as the last one may leave
    /// it as it was.)
    settled: bool,
    found: Arc<Vec<(u32, String)>>,
}

impl Instances {
    pub fn new(path: PathBuf) -> Instances {
        Instances {
            path,
            listed: Mutex::new(None),
        }
    }

    fn get(&self) -> Arc<Vec<(u32, String)>> {
        use std::os::unix::fs::MetadataExt;
        let now = std::time::SystemTime::now();
        let Ok(m) = std::fs::metadata(&self.path) else {
            return Arc::new(instances_in(&self.path));
        };
        let stamp = (m.dev(), m.ino(), m.mtime(), m.mtime_nsec());
        let mut listed = lock(&self.listed);
        match &*listed {
            Some(l) if l.settled && l.stamp == stamp => Arc::clone(&l.found),
            _ => {
                let modified = m.modified().unwrap_or(now);
                let settled = modified + clock_step(m.mtime_nsec()) < now;
                let found = Arc::new(instances_in(&self.path));
                *listed = Some(Listed {
                    stamp,
                    settled,
                    found: Arc::clone(&found),
                });
                found
            }
        }
    }
}

/// How far apart two changes of a directory may be and still be given the
/// same time, judged from a time it gave: a whole millisecond (a whole
/// second, most likely) is a file system that keeps seconds or a few
/// (ext3, FAT's two), 3 s; a finer one keeps nanoseconds from the
/// kernel's clock, which steps a tick (at most 10 ms) at a time, 50 ms.
fn clock_step(nanos: i64) -> std::time::Duration {
    match nanos % 1_000_000 {
        0 => std::time::Duration::from_secs(3),
        _ => std::time::Duration::from_millis(50),
    }
}

/// The instances of `registry` by their manifests' names
/// (`a-PID-N.json`): each one's pid and socket.
fn instances_in(registry: &Path) -> Vec<(u32, String)> {
    let entries = std::fs::read_dir(registry)
        .into_iter()
        .flatten()
        .filter_map(|e| e.ok());
    entries
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            let id = name.strip_prefix("a-")?.strip_suffix(".json")?;
            let pid = id.split('-').next()?.parse().ok()?;
            Some((
                pid,
                registry.join(format!("a-{id}.sock")).display().to_string(),
            ))
        })
        .collect()
}

/// The socket of the instance whose turn this very process belongs to,
/// by the `BATON_TURN` and `BATON_SOCKET` it or an ancestor started with:
/// the commands that would write a peer's spool themselves (an offline
/// send, `bridge --offline`) refuse to, as the instance behind a socket
/// would (docs/security.md).
pub fn turn_of_this_process() -> Option<String> {
    let mut cur = std::process::id();
    for _ in 0..MAX_DEPTH {
        if let [Some(_), Some(socket)] = sys::environ_values(cur, [BATON_TURN, BATON_SOCKET]) {
            return Some(socket);
        }
        match sys::process(cur) {
            Some(p) if p.ppid > 1 => cur = p.ppid,
            _ => return None,
        }
    }
    None
}

impl Caller {
    /// The caller as a bridge declared it: a remote key. A declaration
    /// only narrows: a process of a turn that runs `baton bridge` stays
    /// that turn's, held to both rows (`may`).
    pub fn as_bridge(mut self, key: BridgeKey) -> Caller {
        if !matches!(self.role, Role::Turn | Role::OtherTurn) {
            self.role = Role::Bridge;
        }
        self.bridge = Some(key);
        self
    }

    /// Whether the table lets this caller through `door`: its role's row,
    /// and a bridge's too when it declared one.
    pub fn may(&self, door: Door) -> bool {
        if self.gone || (self.capped && door.operators_only()) {
            return false;
        }
        let roles = door.roles();
        roles.contains(&self.role) && (self.bridge.is_none() || roles.contains(&Role::Bridge))
    }

    /// Why `door` is shut to this caller, in words that say who it is
    /// taken for and where it may go instead. `name` and `id` are this
    /// instance's.
    pub fn refusal(&self, door: Door, name: &str, id: &str) -> String {
        let what = door.name();
        let shown = |p: Option<u32>| p.map_or_else(|| "?".to_string(), |p| p.to_string());
        let pid = shown(self.pid);
        if self.gone {
            return format!(
                "not permitted: the caller (pid {pid}, uid {}) is gone or not of an account this instance serves: baton cannot tell who it is, so {what} is shut to it",
                self.uid
            );
        }
        if self.capped && door.operators_only() {
            return format!(
                "not permitted: {what} is for the operators of {name} (serve --operator); pid {pid} runs as {name}'s own account (uid {}), which is at most its agent",
                self.uid
            );
        }
        match self.role {
            Role::Bridge => {
                let target = match &self.bridge {
                    Some(b) if b.target != id => b.target.as_str(),
                    _ => name,
                };
                format!(
                    "not permitted: this key is limited to sending to {target} (initialize, ping, message/send, and task/status and task/cancel of the tasks it sent), not {what}"
                )
            }
            Role::Turn => format!(
                "not permitted: pid {pid} belongs to a turn of {name} (handler pid {}), which may not call {what}; a turn sends with relay/send, inside its turn",
                shown(self.leader)
            ),
            Role::OtherTurn => format!(
                "not permitted: pid {pid} belongs to a turn of the instance at {}, and speaks only as that turn, through that instance (relay/send on its BATON_SOCKET), not {what} here",
                self.instance_socket.as_deref().unwrap_or("?")
            ),
            Role::Agent => format!(
                "not permitted: {what} is the operator's; pid {pid} is a process of the agent {name} serves (pid {})",
                shown(self.agent)
            ),
            Role::Operator | Role::Own => {
                let roles: Vec<&str> = door.roles().iter().map(|r| r.as_str()).collect();
                format!("not permitted: {what} is only for {}", roles.join(", "))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_registry_is_listed_again_when_it_changed_or_had_just_changed() {
        let dir = crate::sys::scratch("instances");
        std::fs::create_dir(&dir).unwrap();
        let add = |pid: u32| std::fs::write(dir.join(format!("a-{pid}-1.json")), b"{}").unwrap();
        let set_time =
            |t: std::time::SystemTime| std::fs::File::open(&dir).unwrap().set_modified(t).unwrap();
        let pids = |i: &Instances| -> Vec<u32> { i.get().iter().map(|(p, _)| *p).collect() };
        let listed = Instances::new(dir.clone());
        add(7);
        let hour_ago = std::time::SystemTime::now() - std::time::Duration::from_secs(3600);
        set_time(hour_ago);
        assert_eq!(pids(&listed), [7]);
        // A change gives the directory another time: listed again.
        add(8);
        let mut now = pids(&listed);
        now.sort();
        assert_eq!(now, [7, 8]);
        // A change that left the time as it was (the same clock step) is
        // seen while that time is recent: such a listing is not kept.
        let recent = std::fs::metadata(&dir).unwrap().modified().unwrap();
        add(9);
        set_time(recent);
        assert_eq!(pids(&listed).len(), 3);
        // Once settled, the listing is kept while the time stays.
        set_time(hour_ago);
        assert_eq!(pids(&listed).len(), 3);
        std::fs::remove_file(dir.join("a-9-1.json")).unwrap();
        set_time(hour_ago);
        assert_eq!(
            pids(&listed).len(),
            3,
            "kept: the directory's time is the listing's"
        );
        set_time(hour_ago + std::time::Duration::from_secs(1));
        assert_eq!(pids(&listed).len(), 2);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn every_door_has_a_row_and_hello_is_open_to_all() {
        let doors = Door::all();
        assert_eq!(doors.len(), Method::ALL.len() + 3);
        for d in &doors {
            assert!(!d.roles().is_empty(), "{}", d.name());
            assert!(d.roles().contains(&Role::Own), "{}", d.name());
        }
        for r in Role::ALL {
            assert!(Door::Method(Method::Initialize).roles().contains(r));
        }
        assert_eq!(Door::Zcoder.roles(), &[Own, Operator, Agent]);
        assert!(!Door::Reply.roles().contains(&Role::Agent));
    }

    #[test]
    fn our_own_process_and_a_child_of_ours_are_told_apart() {
        let me = std::process::id();
        let ours = Ours {
            pid: me,
            socket: "/nonexistent/ours.sock",
            handler: None,
            agent: None,
            tokens: None,
            uid: sys::euid(),
            operators: &[],
            reaper: false,
            registry: None,
        };
        let uid = sys::euid();
        assert_eq!(classify(Some(me), uid, &ours).role, Role::Own);
        assert_eq!(classify(None, uid, &ours).role, Role::Operator);
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .env_remove(crate::base::config::BATON_TURN)
            .spawn()
            .unwrap();
        let c = classify(Some(child.id()), uid, &ours);
        let parent = Ours {
            pid: std::os::unix::process::parent_id(),
            ..ours
        };
        let of_parent = classify(Some(child.id()), uid, &parent);
        let _ = child.kill();
        let _ = child.wait();
        if sys::KNOWS_PEER_PID {
            assert_eq!((c.role, c.leader), (Role::Turn, Some(child.id())));
            assert_eq!((of_parent.role, of_parent.leader), (Role::Turn, Some(me)));
        }
    }

    fn ours_with(operators: &[u32]) -> Ours<'_> {
        Ours {
            pid: std::process::id(),
            socket: "/nonexistent/ours.sock",
            handler: None,
            agent: None,
            tokens: None,
            uid: sys::euid(),
            operators,
            reaper: true,
            registry: None,
        }
    }

    #[test]
    fn a_caller_that_is_gone_is_refused_never_the_operator() {
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        child.wait().unwrap();
        if !sys::lists_processes() || sys::process(pid).is_some() {
            return;
        }
        let c = classify(Some(pid), sys::euid(), &ours_with(&[]));
        assert!(c.gone && !c.unsure, "{c:?}");
        let door = Door::Method(Method::Foreground(Call::ApprovalRespond));
        assert!(!c.may(door));
        assert!(!c.may(Door::Method(Method::Foreground(Call::InboxList))));
        let why = c.refusal(door, "alpha", "id");
        assert!(why.contains("is gone"), "{why}");
    }

    #[test]
    fn with_operators_the_own_account_is_at_most_the_agent_and_a_listed_one_operates() {
        let (me, uid) = (std::process::id(), sys::euid());
        let other = uid.wrapping_add(4242);
        let ours = ours_with(std::slice::from_ref(&other));
        let op = classify(Some(me.wrapping_add(1)), other, &ours);
        assert_eq!(
            (op.role, op.capped, op.gone),
            (Role::Operator, false, false)
        );
        let approve = Door::Method(Method::Foreground(Call::ApprovalRespond));
        assert!(op.may(approve) && op.may(Door::Controller));
        // Not a descendant of ours, of our account: the agent at most.
        let mine = classify(
            Some(std::os::unix::process::parent_id()),
            uid,
            &ours_with(&[other]),
        );
        if sys::KNOWS_PEER_PID {
            assert_eq!((mine.role, mine.capped), (Role::Agent, true));
        }
        for door in Door::all().into_iter().filter(|d| d.operators_only()) {
            assert!(!mine.may(door), "{}", door.name());
        }
        assert!(mine.may(Door::Method(Method::Foreground(Call::InboxClaim))));
        let own = classify(Some(me), uid, &ours_with(&[other]));
        assert_eq!(own.role, Role::Own);
        assert!(
            !own.may(approve) && own.may(Door::Method(Method::Foreground(Call::PermissionAsk)))
        );
        // An account neither ours nor listed.
        let stranger = classify(Some(me), other.wrapping_add(1), &ours_with(&[other]));
        assert!(stranger.gone && !stranger.may(Door::Method(Method::AgentInfo)));
    }
}
