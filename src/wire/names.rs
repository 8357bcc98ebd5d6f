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
        check(crate::status::Status::ALL);
        assert!("Done".parse::<Outcome>().is_err());
        assert!("task.ended ".parse::<EventKind>().is_err());
    }
}
