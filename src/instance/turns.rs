//! At most one handler runs at a time, and its task is finished only once
//! the handler exited and its output drained (or, at shutdown, it is left
//! in `processing/` to show up as interrupted). Here exec turns start, the
//! reports of their threads (`TurnEvent`, on the foreground's own turn
//! channel) are applied, timeouts and cancels end them, and the
//! operator's own lines (`turn/local`) become tasks.

use super::{
    Answer, DRAIN_GRACE, Foreground, KILL_GRACE, LOCAL, Params, Running, answer, is_local,
};
use crate::base::config;
use crate::base::status::Status;
use crate::registry;
use crate::server::{self, RpcError, State};
use crate::spool::{self, Claim, Task};
use crate::sys;
use crate::text::sanitize::{escape, escape_tail};
use crate::wire::answer::{Handled, SendResult};
use crate::wire::body::{Accepted, Finished, Local};
use crate::wire::request::{LocalParams, TurnCancelParams};
use crate::wire::{Body, Stream};
use crate::wire::{HandlerExit, Handling, Outcome};
use crate::workers::turn::{self, TurnEvent};
use crossbeam_channel as chan;
use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::time::Instant;

impl Foreground {
    /// A turn's token: 24 random digits, from one `getrandom` where there
    /// is one (a turn starts sooner than with a read of `/dev/urandom`).
    pub(super) fn new_token() -> String {
        let (mut buf, mut digits) = ([0u8; 64], String::new());
        if sys::fill_random(&mut buf).is_ok() {
            registry::push_digits(&mut digits, &buf, 24);
            if digits.len() == 24 {
                return digits;
            }
        }
        registry::random_digits(24).unwrap_or_else(|_| format!("{:?}", Instant::now()))
    }

    /// Exec mode: starts the next turn when nothing runs. A turn that
    /// finished left its state to here (`maybe_finish`): when the next
    /// one starts at once the instance stays busy, and neither the
    /// manifest nor the state changes in between.
    pub(super) fn pump(&mut self) {
        self.settle_received();
        self.pump_turn();
        if self.running.is_none()
            && self.open.is_empty()
            && !self.paused()
            && self.shared.state() == State::Busy
        {
            self.refresh();
        }
    }

    fn pump_turn(&mut self) {
        self.expire();
        if self.running.is_some() || self.paused() {
            return;
        }
        if self.opts.exec.is_none() {
            // A pull agent's next task is put to the approval policy now,
            // so a controller hears of it before the agent asks for it.
            if self.opts.approve != super::Approve::Auto && self.open.is_empty() {
                self.approved_head();
            }
            return;
        }
        if self.backing_off(Instant::now()) {
            return;
        }
        let Some(id) = self.approved_head() else {
            return;
        };
        self.approved.remove(&id);
        match self.spool().claim_id(&id) {
            Ok(Claim::Task(task)) => self.start_turn(*task),
            Ok(Claim::Rejected { message_id, reason }) => {
                self.hub.emit(Body::TaskRejected {
                    message_id: &message_id,
                    reason: &reason,
                });
                self.ended(&message_id, Outcome::Rejected, None, None);
            }
            Ok(Claim::Empty) => {}
            Err(e) => {
                if e.shortage().is_none() {
                    self.notice(None, e.to_string());
                }
                self.claim_failed(&id, &e);
            }
        }
    }

    fn turn_env(&self, task: &Task, token: &str) -> Vec<(&'static str, String)> {
        vec![
            (config::BATON_SOCKET, self.shared.socket.clone()),
            (config::BATON_TURN, token.to_string()),
            ("BATON_MESSAGE_ID", task.message_id.clone()),
            (
                "BATON_SENDER_ID",
                task.sender.instance_id.clone().unwrap_or_default(),
            ),
            ("BATON_SENDER_NAME", turn::display_name(&task.sender)),
            ("BATON_MODE", task.mode.to_string()),
            // Only an instance id is a sender one can reply to.
        ]
    }

    fn start_turn(&mut self, task: Task) {
        let token = Self::new_token();
        let command = self.opts.exec.clone().expect("exec mode");
        let reply_possible = task.sender.instance_id.is_some();
        let spec = turn::ExecSpec {
            command: &command,
            workspace: &self.workspace,
            input: match self.opts.stdin {
                turn::Stdin::Body => task.body.clone(),
                turn::Stdin::Envelope if is_local(&task.sender) => format!("{}\n", task.body),
                turn::Stdin::Envelope => {
                    turn::envelope(&task, reply_possible.then_some(turn::REPLY_BY_COMMAND))
                }
            },
            env: self.turn_env(&task, &token),
            token: token.clone(),
            capture: self
                .opts
                .reply
                .then_some(self.shared.config.max_message_bytes),
        };
        let id = task.message_id.clone();
        match self.spawn_handler(spec) {
            Ok(handler) => {
                // Before anything else: the handler's processes may call
                // in at once, and are told apart by it (`access`).
                self.shared.handler.store(handler.pid, Ordering::SeqCst);
                {
                    let t = self.shared.turn_tokens.lock();
                    let mut t = t.unwrap_or_else(|e| e.into_inner());
                    if t.len() >= crate::wire::access::KEPT_TOKENS {
                        t.pop_front();
                    }
                    t.push_back(token.clone());
                }
                self.supplied();
                let now = Instant::now();
                self.hub.emit(Body::TurnStarted {
                    from: &turn::display_name(&task.sender),
                    hop: task.hop,
                    message_id: &id,
                    pid: handler.pid,
                    sender_id: task.sender.instance_id.as_deref(),
                });
                // The record names the handler's process group too. Should
                // that fail, the token's record stands, which recovery finds
                // the group by (the instance's session, a group whose leader
                // is gone, the token in its environment): the turn goes on.
                if let Err(e) = self.spool().record_handler(&token, Some(handler.pid)) {
                    self.notice(Some(&id), e.to_string());
                }
                self.running = Some(Running {
                    task,
                    token,
                    handler,
                    started: now,
                    deadline: self.opts.turn_timeout.map(|t| now + t),
                    kill_at: None,
                    drain_until: None,
                    ended_by: None,
                    exit: None,
                    streams_open: 2,
                    bytes: HashMap::new(),
                    captured: None,
                    stderr_last: String::new(),
                });
            }
            // Not the task's fault: it goes back to its place in the queue.
            Err(e) if e.shortage().is_some() => {
                let what = e.shortage().expect("checked");
                self.put_back(&id, what, &format!("cannot start the handler: {e}"));
            }
            Err(e) => {
                let finished = self.spool().finish(&id, Outcome::Failed).is_ok();
                self.hub.emit(Body::TurnFinished(Finished {
                    error: Some(&format!("cannot start the handler: {e}")),
                    ..Finished::new(&id, Outcome::Failed)
                }));
                if finished {
                    self.ended(&id, Outcome::Failed, None, None);
                }
            }
        }
        self.refresh();
    }

    /// Applies what a thread of the running handler reported; reports of
    /// an earlier turn are ignored.
    pub(super) fn turn_event(&mut self, ev: TurnEvent) {
        let token = match &ev {
            TurnEvent::Output { token, .. }
            | TurnEvent::StreamDone { token, .. }
            | TurnEvent::Exited { token, .. } => token.clone(),
        };
        let Some(r) = self.running.as_mut().filter(|r| r.token == token) else {
            return;
        };
        let id = r.task.message_id.clone();
        match ev {
            TurnEvent::Output { stream, text, .. } => {
                self.hub.emit(Body::TurnOutput {
                    dropped: None,
                    message_id: &id,
                    stream,
                    tail: false,
                    text: &text,
                });
            }
            TurnEvent::StreamDone {
                stream,
                total,
                dropped,
                tail,
                captured,
                last,
                ..
            } => {
                r.streams_open = r.streams_open.saturating_sub(1);
                r.bytes.insert(stream, (total, dropped));
                if captured.is_some() {
                    r.captured = captured;
                }
                if stream == Stream::Stderr {
                    r.stderr_last = last;
                }
                if dropped > 0 {
                    self.hub.emit(Body::TurnOutput {
                        dropped: Some(dropped),
                        message_id: &id,
                        stream,
                        tail: true,
                        text: &tail,
                    });
                }
            }
            TurnEvent::Exited { code, signal, .. } => {
                r.exit = Some((code, signal));
                r.kill_at = None;
                if r.streams_open > 0 {
                    r.drain_until = Some(Instant::now() + DRAIN_GRACE);
                }
            }
        }
        self.maybe_finish();
    }

    /// The running turn's due timers: its timeout, the SIGKILL after the
    /// grace period, the end of the drain.
    pub(super) fn turn_timers(&mut self, now: Instant) {
        let Some(r) = &mut self.running else {
            return;
        };
        if r.ended_by.is_none() && r.deadline.is_some_and(|d| d <= now) {
            self.end_running(Outcome::Timeout, "turn timed out");
        } else if r.kill_at.is_some_and(|k| k <= now) {
            r.kill_at = None;
            let _ = sys::kill_group(r.handler.pid, sys::SIGKILL);
        } else if r.drain_until.is_some_and(|d| d <= now) {
            // The handler exited but something it started still holds
            // its output open: the turn is over all the same.
            r.streams_open = 0;
            r.drain_until = None;
            let _ = sys::kill_group(r.handler.pid, sys::SIGKILL);
            self.maybe_finish();
        }
    }

    /// Ends the running handler as `outcome`: SIGTERM to its process group
    /// now (said as `what`), SIGKILL once `KILL_GRACE` passed.
    pub(super) fn end_running(&mut self, outcome: Outcome, what: &str) {
        let Some(r) = &mut self.running else {
            return;
        };
        r.ended_by = Some(outcome);
        let _ = sys::kill_group(r.handler.pid, sys::SIGTERM);
        r.kill_at = Some(Instant::now() + KILL_GRACE);
        let id = r.task.message_id.clone();
        self.notice(
            Some(&id),
            format!("{what}: SIGTERM sent to its process group"),
        );
    }

    /// Ends the turn once the handler exited and its output drained.
    fn maybe_finish(&mut self) {
        let done = |r: &mut Running| r.exit.is_some() && r.streams_open == 0;
        let Some(r) = self.running.take_if(done) else {
            return;
        };
        self.shared.handler.store(0, Ordering::SeqCst);
        let (code, signal) = r.exit.expect("checked");
        let ok = code == Some(0);
        let outcome = (r.ended_by).unwrap_or(if ok { Outcome::Done } else { Outcome::Failed });
        let id = r.task.message_id.clone();
        // The reply is planned first, so the receipt can name its id.
        let reply = (self.opts.reply && outcome == Outcome::Done)
            .then(|| self.plan_stdout_reply(&r.task, r.captured.unwrap_or_default()));
        let record = reply.as_ref().and_then(|p| p.record.clone());
        // Why it failed, for its sender: how the handler ended.
        let why = matches!(outcome, Outcome::Failed | Outcome::Timeout).then(|| HandlerExit {
            exit_status: code,
            signal,
            stderr_tail: Some(escape_tail(&r.stderr_last, turn::STDERR_TAIL_BYTES)),
            host: None,
        });
        let finished = (self
            .spool()
            .finish_turn(&id, outcome, record.clone(), why.clone()))
        .map_err(|e| self.notice(Some(&id), e.to_string()))
        .is_ok();
        self.spool().clear_handler();
        let (out_total, out_dropped) = r.bytes.get(&Stream::Stdout).copied().unwrap_or_default();
        let (err_total, err_dropped) = r.bytes.get(&Stream::Stderr).copied().unwrap_or_default();
        self.hub.emit(Body::TurnFinished(Finished {
            dropped_bytes: Some(out_dropped + err_dropped),
            duration_ms: Some(r.started.elapsed().as_millis() as u64),
            exit_code: Some(code),
            signal: Some(signal),
            stderr_bytes: Some(err_total),
            stdout_bytes: Some(out_total),
            ..Finished::new(&id, outcome)
        }));
        if finished {
            self.ended(&id, outcome, record.as_ref(), why.as_ref());
        }
        if let Some(plan) = reply {
            self.send_stdout_reply(id, plan);
        }
        // Unpaused, the state is `pump`'s to publish, after it looked for
        // the next turn.
        if self.paused() {
            self.refresh();
        }
    }

    pub(super) fn cancel(&mut self, params: &Params) -> Answer {
        let want = TurnCancelParams::read(params)?.message_id;
        let wanted = |id: &str| want.as_ref().is_none_or(|w| w == id);
        let handled = |status, id: &str, reason| answer(Handled::new(status, Some(id), reason));
        if let Some(r) = self.running.as_mut().filter(|r| wanted(&r.task.message_id)) {
            let id = r.task.message_id.clone();
            if r.ended_by.is_none() {
                self.end_running(Outcome::Cancelled, "turn cancelled");
            }
            return handled(Handling::Cancelling, &id, None);
        }
        if let Some(pos) = self.open.iter().position(|o| wanted(&o.task.message_id)) {
            let id = self.open[pos].task.message_id.clone();
            if let Err(e) = self.finish_turn(pos, Outcome::Cancelled, None, None) {
                return handled(Handling::Error, &id, Some(e.to_string()));
            }
            self.refresh();
            return handled(Handling::Cancelled, &id, None);
        }
        let reason = match (&want, &self.running) {
            (Some(w), Some(r)) => format!(
                "task {} is not the running turn ({} is)",
                escape(w),
                r.task.message_id
            ),
            (Some(w), None) if !self.open.is_empty() => {
                format!("task {} is not an open turn here", escape(w))
            }
            _ => "no turn is running".to_string(),
        };
        answer(Handled::new(
            Handling::Invalid,
            want.as_deref(),
            Some(reason),
        ))
    }

    /// `turn/local`: a line the operator typed. With `--exec` it becomes a
    /// task of its own, queued like any other; otherwise it is only noted.
    pub(super) fn local(&mut self, params: &Params) -> Answer {
        let text = LocalParams::read(params)?.text;
        // Its answer is a send's: it names a task only once one is queued.
        let said = |status: &str, reason: &str| SendResult {
            message_id: None,
            ..SendResult::new(status, "", Some(reason.to_string()))
        };
        if text.trim().is_empty() {
            let refused = said(Status::Invalid.as_str(), server::reason::EMPTY_BODY);
            return answer(refused);
        }
        if self.opts.exec.is_none() {
            self.hub.emit(Body::LocalInput(Local::Noted {
                body: &text,
                from: LOCAL,
                noted: true,
            }));
            let why = "this instance has no --exec handler: the line is noted in the transcript";
            return answer(said(Handling::Noted.as_str(), why));
        }
        let id = self.new_message_id();
        let sender = spool::Sender {
            name: Some(LOCAL.into()),
            pid: Some(std::process::id()),
            ..spool::Sender::default()
        };
        let task = spool::new_task(&id, &text, sender, 0, None, "queue", None, "local");
        let limits = spool::Limits {
            max_queue: self.shared.config.max_queue,
            max_inflight: 0,
        };
        let announce = |task: &Task, at| {
            let event = Accepted::new(task, None, LOCAL, task.sender.pid, at);
            self.hub.record(&Body::LocalInput(Local::Queued(event)));
        };
        let r = self
            .shared
            .spool
            .admit(task, None, limits, || false, announce);
        self.hub.flush();
        // The same reading as a peer's task gets (only `accepted` and
        // `full` can happen: the id is new, and pause does not hold back
        // the operator); a spool that fails is an error, not a verdict.
        let verdict = server::admission_verdict(r, server::Receiver::Live { sender_id: "" })
            .map_err(|e| RpcError::new(crate::wire::INTERNAL_ERROR, e.message()))?;
        answer(verdict.answer(id, None))
    }

    /// At shutdown: the running handler is ended; its task stays in
    /// `processing/` and shows up as interrupted at the next start.
    /// Ends the handler with SIGTERM, and its whole group with SIGKILL once
    /// the leader exited or the grace period passed (its exit is watched
    /// on `turns`): nothing of an interrupted turn runs on.
    pub(super) fn interrupt_turn(&mut self, turns: &chan::Receiver<TurnEvent>) {
        let Some(r) = self.running.take() else {
            return;
        };
        self.shared.handler.store(0, Ordering::SeqCst);
        let _ = sys::kill_group(r.handler.pid, sys::SIGTERM);
        let deadline = Instant::now() + KILL_GRACE;
        if r.exit.is_none() {
            let _ = std::iter::from_fn(|| turns.recv_deadline(deadline).ok())
                .find(|ev| matches!(ev, TurnEvent::Exited { token, .. } if *token == r.token));
        }
        let _ = sys::kill_group(r.handler.pid, sys::SIGKILL);
        self.spool().clear_handler();
        self.hub.emit(Body::turn_finished(
            &r.task.message_id,
            Outcome::Interrupted,
        ));
    }

    /// Starts the handler, recording it in the spool first by its turn's
    /// token (`Spool::record_handler`), so that whoever opens the spool
    /// after this instance died kills what is left of it. Without the
    /// record, no handler runs.
    fn spawn_handler(&self, spec: turn::ExecSpec<'_>) -> crate::base::error::Result<turn::Handler> {
        let cannot_run =
            |e| crate::base::error::Error::io("run", std::path::Path::new("/bin/sh"), e);
        crate::base::failpoint::hit("handler-spawn").map_err(cannot_run)?;
        let spool = self.spool();
        spool.record_handler(&spec.token, None)?;
        turn::spawn(spec, self.turns_tx.clone()).map_err(|e| {
            spool.clear_handler();
            cannot_run(e)
        })
    }
}
