//! The protocol's records, as more than one room reads them: an
//! instance's manifest (docs/protocol.md §7), a task's sender, a reply a
//! receipt keeps and how a failed turn's handler ended, a task as the
//! spool stores it and as `inbox/list` shows it.

use super::TaskMode;
use serde::{Deserialize, Serialize};

/// One instance's manifest, exactly the fields of docs/protocol.md §7.
/// Read from a file it is checked field by field (`read_manifest`); read
/// from an answer, a member it lacks is left empty.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(default)]
pub struct Manifest {
    pub protocol: u64,
    pub instance_id: String,
    pub pid: u32,
    pub project: String,
    pub name: String,
    pub workspace: String,
    pub session_id: String,
    pub profile: String,
    pub model: String,
    pub socket: String,
    pub state: String,
    pub started_at: u64,
    pub wire: String,
    pub baton_version: String,
    /// When its process started, in clock ticks after boot (`/proc`'s
    /// `starttime`): a pid now another process's is known without a
    /// connection. Absent where there is no `/proc`, and in older
    /// manifests.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub process_start: Option<u64>,
    /// The pid namespace its pid is in (the inode of `/proc/self/ns/pid`):
    /// the kernel's word on its pid holds only in that namespace. Absent
    /// where there is no `/proc`, and in older manifests.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pid_ns: Option<u64>,
    /// The longest body it accepts (its `BATON_MAX_MESSAGE_BYTES`), which
    /// a sender checks before it connects. Absent in an earlier baton's
    /// manifest and in zcoder's: `registry::Peer::body_limit` says what is
    /// assumed then.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_message_bytes: Option<u64>,
    /// `serve --operator`: the uids of the accounts whose processes are
    /// its operators (the instance's own account is then at most its
    /// agent). Absent: roles among the processes of one user. A manifest
    /// is one flat object, so the list is written `"1001,0"`.
    #[serde(skip_serializing_if = "Vec::is_empty", with = "uid_list")]
    pub operators: Vec<u32>,
}

/// A list of uids as one string, `"1001,0"`.
pub mod uid_list {
    use serde::{Deserialize, Deserializer, Serializer, de::Error};

    pub fn serialize<S: Serializer>(uids: &[u32], s: S) -> Result<S::Ok, S::Error> {
        let words: Vec<String> = uids.iter().map(u32::to_string).collect();
        s.serialize_str(&words.join(","))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u32>, D::Error> {
        let text = String::deserialize(d)?;
        parse(&text).ok_or_else(|| D::Error::custom("operators is not a list of uids"))
    }

    /// `"1001,0"` as uids; the empty string as none.
    pub fn parse(text: &str) -> Option<Vec<u32>> {
        text.split(',')
            .filter(|w| !w.is_empty())
            .map(|w| w.parse().ok())
            .collect()
    }
}

/// Who sent a task, as the receiver recorded it.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct Sender {
    /// The sender instance id, present only when verified.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub instance_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub workspace: Option<String>,
    /// The kernel's peer pid for the connection that delivered the task.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub pid: Option<u32>,
    /// A task that came through `baton bridge` (a remote key): the remote
    /// end as OpenSSH gave it (`SSH_CONNECTION`'s client address and
    /// port), or `ssh` where it did not.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub remote: Option<String>,
    /// A task that came through `baton bridge --key LABEL`: the label of
    /// the key it came with. A bridge's `task/status` and `task/cancel`
    /// reach only the tasks of its own label (none reaches none).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub key: Option<String>,
}

/// What a receipt remembers of a task's reply: its text (bounded by
/// `BATON_MAX_MESSAGE_BYTES`) and the reply task's id, `None` when no
/// reply was sent (a plain command line cannot receive one).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct ReplyRecord {
    pub message_id: Option<String>,
    pub body: String,
}

/// How the handler of a failed or timed-out turn ended, as the task's
/// receipt, `task.ended` and `task/status` tell its sender: its exit
/// status or the signal that killed it, and the last of its stderr,
/// escaped as a terminal shows a peer's text (at most
/// `turn::STDERR_TAIL_BYTES`). All absent for any other ending, a pull
/// agent's among them: no handler ran. A turn an agent host ran instead
/// of a handler names it in `host` (`codex`): `stderr_tail` is then the
/// host's error message, not a stderr.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct HandlerExit {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_status: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signal: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stderr_tail: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
}

/// `HandlerExit::host` of a turn Codex ran (`baton serve --codex`).
pub const CODEX_HOST: &str = "codex";

impl HandlerExit {
    /// Who `stderr_tail` is from when an agent host ran the turn, for a
    /// sentence (`Codex's error`): `None` for a handler, whose stderr it
    /// is. A host this version does not know is `the agent host`.
    pub fn host_said(&self) -> Option<&'static str> {
        self.host.as_deref().map(|h| match h {
            CODEX_HOST => "Codex",
            _ => "the agent host",
        })
    }
}

/// What `inbox/list` shows of a task without reading its file.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Summary {
    pub message_id: String,
    pub sender: Sender,
    pub accepted_at: u64,
    pub mode: super::TaskMode,
    pub bytes: usize,
}

/// One task as stored in the spool: the accepted request plus what the
/// receiver learned.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct Task {
    pub message_id: String,
    pub body: String,
    pub sender: Sender,
    pub hop: u64,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub in_reply_to: Option<String>,
    pub mode: TaskMode,
    pub accepted_at: u64,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub peer_pid: Option<u32>,
    pub wire: String,
    /// SHA-256 of the body, hex.
    pub digest: String,
    pub seq: u64,
}
