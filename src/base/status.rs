//! A delivery status has one spelling on every wire and one exit code:
//! this enum is the only place either is written down. It covers what a
//! receiver answers to `message/send` (docs/protocol.md §5), what a sender
//! adds on its side (`stored`, `no_target`, `transport`: §3 `relay/send`,
//! §8 offline delivery), zcoder's `unsupported` (§9), and `error`, which a
//! `message.rejected` event carries when the spool failed to store a task
//! (answered -32603: an internal error, never a verdict).

use crate::base::error::ExitCode;
use crate::text::spelled::Unknown;
use std::str::FromStr;

spelled! {
    /// What became of one task offered for delivery.
    pub enum Status ("delivery status") {
        /// In the receiver's spool; carries `queue_position`.
        Accepted = "accepted",
        /// The same id and body were accepted before; nothing new was stored.
        Duplicate = "duplicate",
        /// Senders only: the name is not running, and the task waits in its
        /// spool.
        Stored = "stored",
        /// A value is wrong, the sender is not verified, or the id was reused
        /// with another body.
        Invalid = "invalid",
        /// The receiver is not the instance the sender meant.
        WrongTarget = "wrong_target",
        /// A sender policy (or a sender-side guard) refuses the send.
        Denied = "denied",
        /// `hop` is over `BATON_MAX_HOPS`.
        HopLimit = "hop_limit",
        /// The receiver is paused.
        Paused = "paused",
        /// The sender already has `BATON_MAX_INFLIGHT` unfinished tasks there.
        InflightFull = "inflight_full",
        /// The receiver's queue holds `BATON_MAX_QUEUE` tasks.
        Full = "full",
        /// Senders only: no single instance or spool has the name.
        NoTarget = "no_target",
        /// Senders only: the task could not be handed over (the connection
        /// failed, or the receiver answered an error); it may be retried with
        /// the same id.
        Transport = "transport",
        /// A zcoder receiver did not understand the frame.
        Unsupported = "unsupported",
        /// The spool failed to store the task (recorded in `message.rejected`
        /// only; the sender gets an error, never this as a verdict).
        Error = "error",
    }
}

impl Status {
    /// Whether the task is, or was, in the receiver's care: `accepted`,
    /// `duplicate` or `stored`.
    pub fn delivered(self) -> bool {
        matches!(self, Status::Accepted | Status::Duplicate | Status::Stored)
    }

    /// The exit status of `baton send` for a result with this status
    /// (baton(1)): 0 when the task is, or was, in the receiver's care.
    pub fn exit_code(self) -> ExitCode {
        match self {
            s if s.delivered() => ExitCode::Ok,
            Status::NoTarget => ExitCode::NoTarget,
            Status::Transport => ExitCode::Transport,
            _ => ExitCode::Refused,
        }
    }
}

/// What `inbox/complete` says of the reply it sent (docs/protocol.md
/// `inbox/complete`): the reply's delivery status, or `sending` when the
/// send had not ended within four fifths of `BATON_IO_TIMEOUT`. `sending`
/// is no delivery status: no send is answered with it and it has no exit
/// code; only this reply member carries it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReplyStatus {
    /// The reply's send ended with this status.
    Ended(Status),
    /// The send goes on; its outcome goes to the transcript (`relay.sent`).
    Sending,
    /// Not sent, and not lost: the sender is a plain command line, with no
    /// inbox; the reply stays in the task's receipt, where a waiting
    /// sender reads it (`send --wait`, `baton result`).
    Kept,
}

impl ReplyStatus {
    /// The wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            ReplyStatus::Ended(st) => st.as_str(),
            ReplyStatus::Sending => "sending",
            ReplyStatus::Kept => "kept",
        }
    }
}

impl FromStr for ReplyStatus {
    type Err = Unknown;

    fn from_str(s: &str) -> Result<ReplyStatus, Unknown> {
        match s {
            "sending" => Ok(ReplyStatus::Sending),
            "kept" => Ok(ReplyStatus::Kept),
            _ => s.parse().map(ReplyStatus::Ended),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reply_status_is_a_delivery_status_or_sending() {
        assert_eq!("sending".parse(), Ok(ReplyStatus::Sending));
        assert_eq!(ReplyStatus::Sending.as_str(), "sending");
        assert!("sending".parse::<Status>().is_err());
        for &st in Status::ALL {
            assert_eq!(st.as_str().parse(), Ok(ReplyStatus::Ended(st)));
            assert_eq!(ReplyStatus::Ended(st).as_str(), st.as_str());
        }
        assert!("completed".parse::<ReplyStatus>().is_err());
        assert_eq!(
            "Accepted".parse::<Status>().unwrap_err().of,
            "delivery status"
        );
    }

    #[test]
    fn exit_codes_are_those_of_baton_send() {
        let code = |s: &str| s.parse::<Status>().unwrap().exit_code();
        for s in ["accepted", "duplicate", "stored"] {
            assert_eq!(code(s), ExitCode::Ok, "{s}");
        }
        assert_eq!(code("no_target"), ExitCode::NoTarget);
        assert_eq!(code("transport"), ExitCode::Transport);
        for s in [
            "invalid",
            "wrong_target",
            "denied",
            "hop_limit",
            "paused",
            "inflight_full",
            "full",
            "unsupported",
            "error",
        ] {
            assert_eq!(code(s), ExitCode::Refused, "{s}");
        }
    }
}
