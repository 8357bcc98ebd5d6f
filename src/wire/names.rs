//! The enumerated names of the protocol other than the delivery status
//! (`status.rs`): a task's outcome, an instance's mode, state and approval
//! policy, a task's mode, an operator's decision, and the kinds of events.
//! Each is spelled once, by `spelled!`.

spelled! {
    /// How a task ended here (docs/protocol.md, `task.ended`): what its
    /// receipt keeps and a waiting sender is told.
    pub enum Outcome ("outcome") {
        /// The handler exited 0, or a pull agent completed it.
        Done = "done",
        /// The handler failed or could not start, or a pull agent said so.
        Failed = "failed",
        /// `--turn-timeout` ran out.
        Timeout = "timeout",
        /// `turn/cancel` or `task/cancel` ended it, or withdrew it
        /// from the queue.
        Cancelled = "cancelled",
        /// The instance stopped while it ran.
        Interrupted = "interrupted",
        /// `--approve deny` or an operator refused it.
        Denied = "denied",
        /// `inbox/discard`.
        Discarded = "discarded",
        /// `--ttl` set it aside.
        Expired = "expired",
        /// Its task file was bad data.
        Rejected = "rejected",
        /// A reply its sender already got through a wait (`send --wait`,
        /// MCP's `wait_seconds`; `inbox/received`): never handed out.
        Received = "received",
    }
}

impl Outcome {
    /// The two outcomes a pull agent's `inbox/complete` may give.
    pub fn completes(self) -> bool {
        matches!(self, Outcome::Done | Outcome::Failed)
    }
}

spelled! {
    /// How an instance runs its tasks.
    pub enum Mode ("mode") {
        /// `--exec CMD` runs each task.
        Exec = "exec",
        /// An agent claims them (`inbox/claim`, or typed into a pane).
        Pull = "pull",
    }
}

spelled! {
    /// Where a task goes in the queue (`message/send` `mode`).
    #[derive(Default)]
    pub enum TaskMode ("task mode") {
        /// After the tasks already queued.
        #[default]
        Queue = "queue",
        /// Ahead of them.
        Steer = "steer",
    }
}

spelled! {
    /// An instance's state, as a ping answers and the manifest publishes.
    pub enum State ("state") {
        Ready = "ready",
        Busy = "busy",
        Paused = "paused",
    }
}

spelled! {
    /// How a task is approved before it runs (`--approve`).
    #[derive(Default)]
    pub enum Approve ("approval policy") {
        #[default]
        Auto = "auto",
        Ask = "ask",
        Deny = "deny",
    }
}

spelled! {
    /// An operator's answer to an approval.
    pub enum Decision ("decision") {
        Approve = "approve",
        Deny = "deny",
    }
}

spelled! {
    /// What an event says happened (docs/protocol.md §7). Kinds may be
    /// added: a client reads a kind it does not know as no kind at all.
    pub enum EventKind ("event kind") {
        InstanceStarted = "instance.started",
        MessageAccepted = "message.accepted",
        LocalInput = "local.input",
        TaskExpired = "task.expired",
        MessageRejected = "message.rejected",
        TaskClaimed = "task.claimed",
        TaskTyped = "task.typed",
        TaskDenied = "task.denied",
        TaskRejected = "task.rejected",
        TaskRequeued = "task.requeued",
        TaskEnded = "task.ended",
        TaskDiscarded = "task.discarded",
        TurnStarted = "turn.started",
        TurnOutput = "turn.output",
        TurnFinished = "turn.finished",
        RelaySent = "relay.sent",
        StateChanged = "state.changed",
        ApprovalRequested = "approval.requested",
        ApprovalResolved = "approval.resolved",
        PermissionRequested = "permission.requested",
        PermissionResolved = "permission.resolved",
        Notice = "notice",
    }
}

spelled! {
    /// A handler's output stream (`turn.output`).
    #[derive(Default)]
    pub enum Stream ("stream") {
        #[default]
        Stdout = "stdout",
        Stderr = "stderr",
    }
}

spelled! {
    /// What `inbox/claim` answers (docs/protocol.md `inbox/claim`).
    pub enum ClaimStatus ("claim status") {
        Invalid = "invalid",
        Paused = "paused",
        Busy = "busy",
        /// A task was taken: the answer carries it.
        Claimed = "claimed",
        AwaitingApproval = "awaiting_approval",
        Empty = "empty",
        Error = "error",
    }
}

spelled! {
    /// What an approval waits on (`approval/list`'s `kind`): a queued
    /// task, or a tool call an MCP host relayed.
    pub enum ApprovalKind ("approval kind") {
        Task = "task",
        Tool = "tool",
    }
}

spelled! {
    /// What a call that handles one thing answers (`answer::Handled`):
    /// `inbox/complete`, `inbox/received`, `inbox/requeue` and
    /// `inbox/discard`, `approval/respond`, `turn/local`, `turn/cancel`,
    /// `task/cancel` and `permission/ask`, in the protocol's order.
    pub enum Handling ("status") {
        Completed = "completed",
        Received = "received",
        Expected = "expected",
        HandedOut = "handed_out",
        Ended = "ended",
        Requeued = "requeued",
        Discarded = "discarded",
        Approved = "approved",
        Denied = "denied",
        Accepted = "accepted",
        Noted = "noted",
        Full = "full",
        Cancelling = "cancelling",
        Cancelled = "cancelled",
        Unknown = "unknown",
        Waiting = "waiting",
        Invalid = "invalid",
        Error = "error",
    }
}

/// A name as an answer spells it: one this version knows, or another,
/// kept as it came. A client reads any string where the protocol lets a
/// newer peer add values (a status it does not know is shown as it is),
/// and writes either back unchanged.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(untagged)]
pub enum Said<T> {
    Known(T),
    Other(String),
}

impl<T: std::str::FromStr> Said<T> {
    /// `s` as a name this version knows, else as it is.
    pub fn spelled(s: &str) -> Said<T> {
        s.parse()
            .map_or_else(|_| Said::Other(s.to_string()), Said::Known)
    }
}

impl<T> Said<T> {
    /// The known name, if it is one.
    pub fn known(&self) -> Option<&T> {
        match self {
            Said::Known(t) => Some(t),
            Said::Other(_) => None,
        }
    }
}

/// Empty, as a missing string read before.
impl<T> Default for Said<T> {
    fn default() -> Said<T> {
        Said::Other(String::new())
    }
}

impl<T> From<T> for Said<T> {
    fn from(t: T) -> Said<T> {
        Said::Known(t)
    }
}

impl<T: PartialEq> PartialEq<T> for Said<T> {
    fn eq(&self, other: &T) -> bool {
        self.known() == Some(other)
    }
}

impl<T: std::fmt::Display> std::fmt::Display for Said<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Said::Known(t) => t.fmt(f),
            Said::Other(s) => f.write_str(s),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_outcomes_are_those_of_the_protocol_table() {
        let spelled: Vec<&str> = Outcome::ALL.iter().map(|o| o.as_str()).collect();
        assert_eq!(
            spelled,
            [
                "done",
                "failed",
                "timeout",
                "cancelled",
                "interrupted",
                "denied",
                "discarded",
                "expired",
                "rejected",
                "received"
            ]
        );
        let completes: Vec<Outcome> = Outcome::ALL
            .iter()
            .copied()
            .filter(|o| o.completes())
            .collect();
        assert_eq!(completes, [Outcome::Done, Outcome::Failed]);
    }

    #[test]
    fn every_name_reads_back_from_its_spelling() {
        fn check<T>(all: &[T])
        where
            T: Copy + PartialEq + std::fmt::Debug + std::str::FromStr + std::fmt::Display,
            T: serde::Serialize + serde::de::DeserializeOwned,
        {
            for &v in all {
                assert_eq!(v.to_string().parse::<T>().ok(), Some(v));
                let wire = serde_json::to_value(v).unwrap();
                assert_eq!(wire, serde_json::json!(v.to_string()));
                assert_eq!(serde_json::from_value::<T>(wire).unwrap(), v);
            }
        }
        check(Outcome::ALL);
        check(Mode::ALL);
        check(TaskMode::ALL);
        check(State::ALL);
        check(Approve::ALL);
        check(Decision::ALL);
        check(EventKind::ALL);
        check(ClaimStatus::ALL);
        check(Stream::ALL);
        check(Handling::ALL);
        check(ApprovalKind::ALL);
        check(crate::base::status::Status::ALL);
        assert!("Done".parse::<Outcome>().is_err());
        assert!("task.ended ".parse::<EventKind>().is_err());
    }

    #[test]
    fn a_said_name_keeps_one_it_does_not_know_as_it_came() {
        let known: Said<Handling> = serde_json::from_str(r#""completed""#).unwrap();
        assert_eq!(known, Handling::Completed);
        let other: Said<Handling> = serde_json::from_str(r#""later""#).unwrap();
        assert_eq!(other, Said::Other("later".to_string()));
        assert_eq!(other.to_string(), "later");
        assert_eq!(serde_json::to_string(&other).unwrap(), r#""later""#);
        assert_eq!(serde_json::to_string(&known).unwrap(), r#""completed""#);
        assert!(serde_json::from_str::<Said<Handling>>("1").is_err());
    }
}
