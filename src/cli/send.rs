//! `baton send`: deliver one task and report exactly what happened to it.
//! Inside an instance (`$BATON_SOCKET`, and `$BATON_TURN` during a turn) the
//! send goes through that instance's `relay/send`, so its guards apply:
//! self-sends are refused and a relayed turn may only answer its sender.

use super::args::{Args, choice};
use super::wait::Wait;
use super::{Parsed, emit_json, target};
use crate::base::config::{Config, baton_socket, baton_turn};
use crate::base::error::{Error, ExitCode, Result};
use crate::base::status::Status;
use crate::client::{ClientError, Session};
use crate::registry;
use crate::relay;
use crate::text::sanitize::escape;
use crate::wire;
use crate::wire::answer::{SendResult, Target};
use crate::wire::request::{RelayParams, SendParams};
use crate::wire::{Call, Method, TaskMode};
use std::io::{IsTerminal, Read};
use std::path::Path;

/// How far past the limit stdin is read, only to count its size, when the
/// body is too large (an endless stream is not read to its end).
const COUNT_PAST_LIMIT: u64 = 64 << 20;

/// Reads the body from the argument or stdin: `(body, size)`, where the
/// body holds no more than one byte past the limit and `size` is its whole
/// size in bytes (a lower bound when stdin went on past the count).
fn read_body(arg: Option<&str>, limit: usize) -> Result<(String, Option<u64>)> {
    if let Some(m) = arg.filter(|m| *m != "-") {
        return Ok((m.to_string(), Some(m.len() as u64)));
    }
    let stdin = std::io::stdin();
    if stdin.is_terminal() {
        eprintln!("baton: reading the task from stdin (end with Ctrl-D)");
    }
    let mut stdin = stdin.lock();
    let mut buf = Vec::new();
    let err = |e| Error::io("read", Path::new("<stdin>"), e);
    (&mut stdin)
        .take(limit as u64 + 1)
        .read_to_end(&mut buf)
        .map_err(err)?;
    let mut size = Some(buf.len() as u64);
    if buf.len() > limit {
        let rest = std::io::copy(
            &mut (&mut stdin).take(COUNT_PAST_LIMIT),
            &mut std::io::sink(),
        )
        .map_err(err)?;
        size = (rest < COUNT_PAST_LIMIT).then_some(buf.len() as u64 + rest);
    }
    let body = String::from_utf8(buf)
        .map_err(|_| Error::Usage("send: the message on stdin is not valid UTF-8".into()))?;
    Ok((body, size))
}

/// The body, checked before anything is sent against the most any
/// instance accepts; the receiver's own limit, which its manifest
/// carries, is checked where the send is made (`relay::check_limit`).
fn body(arg: Option<&str>) -> Result<String> {
    let limit = crate::base::config::MAX_MESSAGE_BYTES_CEILING as usize;
    let (body, size) = read_body(arg, limit)?;
    if body.len() > limit {
        let size = match size {
            Some(n) => n.to_string(),
            None => format!("more than {}", limit as u64 + COUNT_PAST_LIMIT),
        };
        return Err(Error::Usage(format!(
            "send: {}",
            crate::base::config::body_too_large(&size)
        )));
    }
    if body.trim().is_empty() {
        return Err(Error::Usage("send: the message is empty".into()));
    }
    Ok(body)
}

/// A session with the instance this command runs inside, if it answers.
fn inside(config: &Config) -> Option<Session> {
    Session::open(&baton_socket()?, config.io_timeout).ok()
}

/// `baton send TARGET [MESSAGE|-]` and `baton send --reply [MESSAGE|-]`,
/// checked before anything is read or sent.
pub struct Send {
    /// TARGET; none with `--reply`, which answers the current turn's
    /// sender.
    target: Option<String>,
    /// MESSAGE; none, or `-`, reads it from stdin.
    message: Option<String>,
    json: bool,
    message_id: Option<String>,
    mode: TaskMode,
    wait: Option<Wait>,
    from: Option<String>,
    via: Option<String>,
    multiplex: bool,
}

impl Parsed for Send {
    fn parse(args: &Args) -> Result<Send> {
        let mode = choice(args, "send", "mode")?.unwrap_or_default();
        let timeout = args.seconds("send", "timeout")?;
        let (wait, reply) = (args.flag("wait"), args.flag("reply"));
        if args.values("via").len() > 1 {
            return Err(Error::Usage(
                "send: --via takes one host: a task goes to one instance".into(),
            ));
        }
        if timeout.is_some() && !wait {
            return Err(Error::Usage(
                "send: --timeout bounds the wait, so it needs --wait".into(),
            ));
        }
        if wait && reply {
            return Err(Error::Usage(
                "send: --reply answers a turn's sender, who gets no outcome back, so it does not take --wait"
                    .into(),
            ));
        }
        let message_id = args.value("message-id").map(str::to_string);
        if let Some(id) = message_id.as_deref().filter(|id| !registry::valid_id(id)) {
            return Err(Error::Usage(format!(
                "send: --message-id {}: an id must match [A-Za-z0-9_.-]{{1,100}}",
                escape(id)
            )));
        }
        let (from, via) = (args.value("from"), args.value("via"));
        if from.is_some() && (reply || via.is_some()) {
            return Err(Error::Usage(
                "send: --from sends as a live instance on this host, so it takes neither --reply nor --via"
                    .into(),
            ));
        }
        if reply && via.is_some() {
            return Err(Error::Usage(
                "send: --reply answers the current turn's sender here, so it does not take --via"
                    .into(),
            ));
        }
        super::at_most(args, "send", if reply { 1 } else { 2 })?;
        let target = match (reply, args.positional.first()) {
            (true, _) => None,
            (false, None) => {
                return Err(Error::Usage(
                    "send: TARGET is missing (see 'baton help send')".into(),
                ));
            }
            (false, Some(t)) if t.trim().is_empty() => {
                return Err(Error::Usage(format!(
                    "send: TARGET {t:?} is empty: name an instance by its id or name"
                )));
            }
            (false, Some(t)) => Some(t.clone()),
        };
        let message = args.positional.get(target.is_some() as usize).cloned();
        let json = args.flag("json");
        Ok(Send {
            target,
            message,
            json,
            message_id,
            mode,
            wait: wait.then_some(Wait { timeout, json }),
            from: from.map(str::to_string),
            via: via.map(str::to_string),
            multiplex: !args.flag("no-multiplex"),
        })
    }

    fn run(self, config: &Config) -> Result<ExitCode> {
        let Some(target) = &self.target else {
            return self.reply(config);
        };
        let body = body(self.message.as_deref())?;
        if let Some(from) = &self.from {
            return self.as_instance(config, target, from, &body);
        }
        if let Some(via) = &self.via {
            return self.remote(config, target, via, &body);
        }
        if let Some(mut conn) = inside(config) {
            let params = self.relay_params(Some(target), &body, baton_turn());
            let r = conn
                .call(Call::RelaySend, params)
                .map_err(|e| Error::Transport(format!("relay/send through $BATON_SOCKET: {e}")))?;
            return self.finish(config, &r, baton_socket().as_deref());
        }
        self.plain(config, target, &body)
    }
}

impl Send {
    /// `--reply`: the body goes back to the sender of the current turn's
    /// task, through this instance's `relay/send`.
    fn reply(&self, config: &Config) -> Result<ExitCode> {
        // Outside a turn there is nothing to answer: say so before
        // reading a body from stdin.
        let outside = "send: --reply answers the task of the current turn, so it works only inside one ($BATON_SOCKET and $BATON_TURN are set there); to answer a task claimed with 'baton inbox claim', use 'baton inbox complete ID --reply TEXT'";
        if baton_turn().is_none() || baton_socket().is_none() {
            return Err(Error::Usage(outside.into()));
        }
        let body = body(self.message.as_deref())?;
        let (Some(token), Some(mut conn)) = (baton_turn(), inside(config)) else {
            return Err(Error::Usage(outside.into()));
        };
        let r = conn
            .call(Call::RelaySend, self.relay_params(None, &body, Some(token)))
            .map_err(|e| Error::Transport(format!("relay/send through $BATON_SOCKET: {e}")))?;
        super::sent::report(self.json, &r)
    }

    /// `relay/send`'s params: `body` to `target` (none for a reply) in
    /// `--mode`, with the turn, when there is one, and `--message-id`.
    fn relay_params(&self, target: Option<&str>, body: &str, turn: Option<String>) -> RelayParams {
        RelayParams {
            body: body.to_string(),
            message_id: self.message_id.clone(),
            mode: Some(self.mode.as_str().to_string()),
            reply: target.is_none().then_some(true),
            target: target.map(str::to_string),
            turn,
        }
    }

    /// `--message-id`, or a new id.
    fn message_id(&self) -> Result<String> {
        match &self.message_id {
            Some(id) => Ok(id.clone()),
            None => Ok(format!(
                "{}-{}",
                std::process::id(),
                registry::random_digits(16)?
            )),
        }
    }

    /// `--from NAME`: the live local instance NAME sends the task as itself,
    /// through its `relay/send`, as a send with its `$BATON_SOCKET` does: the
    /// receiver sees NAME, a reply goes to NAME's inbox, and NAME's guards
    /// apply. Inside a turn of NAME itself, that turn's scope applies too.
    fn as_instance(
        &self,
        config: &Config,
        target_arg: &str,
        from: &str,
        body: &str,
    ) -> Result<ExitCode> {
        let peer = target::resolve_option(config, "send --from", from)?;
        let mut conn = target::connect(config, &peer)?;
        let own = target::own_instance_id();
        let turn = baton_turn().filter(|_| own.as_deref() == Some(&*peer.manifest.instance_id));
        let r = conn
            .call(
                Call::RelaySend,
                self.relay_params(Some(target_arg), body, turn),
            )
            .map_err(|e| target::transport(&peer, e))?;
        self.finish(config, &r, Some(Path::new(&peer.manifest.socket)))
    }

    /// `--via 'ssh host'`: the same delivery through `baton bridge` there.
    fn remote(&self, config: &Config, target_arg: &str, via: &str, body: &str) -> Result<ExitCode> {
        let message_id = self.message_id()?;
        let multiplex = self.multiplex;
        // A via command that fails is a `transport` result, as a local
        // send's would be: with --json, one that names the id to retry with.
        let transport = |e: Error| match e {
            Error::Transport(reason) => super::sent::report(
                self.json,
                &SendResult::new(Status::Transport, &message_id, Some(reason)),
            ),
            e => Err(e),
        };
        let mut r = match super::bridge::Remote::open(via, target_arg, config, multiplex) {
            Ok(r) => r,
            Err(e) => return transport(e),
        };
        // What answered: a live instance, or (`bridge --offline`) the remote
        // baton standing in for a stopped agent's spool.
        let hello = &r.session.hello;
        let peer = (hello.instance.clone()).map(|manifest| registry::Peer {
            manifest,
            wire: registry::Wire::Jsonrpc,
            load: None,
        });
        let id = (peer.as_ref()).map_or(String::new(), |p| p.manifest.instance_id.clone());
        let name = (hello.instance.as_ref().map(|m| &m.name))
            .or(hello.offline.as_ref().map(|o| &o.name))
            .cloned();
        // A key with a forced command runs its own `baton bridge NAME`,
        // whatever TARGET was asked for: the answer says who it reached.
        if id != target_arg && name.as_deref() != Some(target_arg) {
            return wrong_target(self.json, &message_id, target_arg, &id, name.as_deref());
        }
        // The receiver's own limit, which its manifest carries, before
        // the body goes over the bridge.
        if let Some(Err(refused)) = peer.as_ref().map(|p| relay::check_limit(p, body)) {
            let r = SendResult::new(refused.status, &message_id, Some(refused.reason));
            return super::sent::report(self.json, &r);
        }
        let to = peer.as_ref().map(|p| &p.manifest.instance_id);
        let params = self.frame(config, &message_id, body, to)?;
        let mut result: SendResult = match r.call(Method::MessageSend, params) {
            Ok(v) => v,
            Err(e) => return transport(e),
        };
        result.target = match &peer {
            Some(p) => Some(relay::peer_target(p)),
            None => (result.target.take()).or(Some(Target {
                name,
                ..Target::default()
            })),
        };
        if let Some(w) = self.wait {
            // The same bridge carries the wait when it joins a live instance;
            // a stopped agent's stand-in answers no events.
            let reopen = |until| {
                super::bridge::Remote::start(via, target_arg, config, multiplex, "--await", until)
            };
            // The stand-in's session ends here, not after the wait.
            return super::wait::run_via(w, &result, peer.map(|_| r), target_arg, reopen);
        }
        super::sent::report(self.json, &result)
    }
}

/// The via command reached another instance than the one named (a key's
/// forced command): nothing is sent.
fn wrong_target(
    json: bool,
    message_id: &str,
    asked: &str,
    id: &str,
    name: Option<&str>,
) -> Result<ExitCode> {
    let who = format!("{} ({id})", escape(name.unwrap_or("")));
    let reason = format!(
        "the via command reached {who}, not {}; does its key force a command?",
        escape(asked)
    );
    if json {
        #[derive(serde::Serialize)]
        struct To<'a> {
            instance_id: &'a str,
            name: Option<&'a str>,
        }
        #[derive(serde::Serialize)]
        struct Refused<'a> {
            message_id: &'a str,
            reason: &'a str,
            status: Status,
            target: To<'a>,
        }
        let refused = Refused {
            message_id,
            reason: &reason,
            status: Status::WrongTarget,
            target: To {
                instance_id: id,
                name,
            },
        };
        emit_json(&serde_json::to_value(refused).expect("strings serialize"));
    } else {
        eprintln!("baton: not sent: {}: {reason}", Status::WrongTarget);
    }
    Ok(ExitCode::Refused)
}

/// A send from a plain command line: resolve, deliver, retry once.
impl Send {
    fn plain(&self, config: &Config, target_arg: &str, body: &str) -> Result<ExitCode> {
        let mode = self.mode.as_str();
        let message_id = self.message_id()?;
        super::sent::not_in_a_turn()?;
        let dir = registry::ensure_dir(config)?;
        let make = || crate::relay::plain_task(&message_id, body, mode);
        let peer = match relay::route(config, &dir, target_arg, &message_id, &make) {
            relay::Route::Live(p) => *p,
            relay::Route::Done(r) => return self.finish(config, &r, None),
        };
        let failed_twice = |e: ClientError| {
            Error::Transport(format!(
                "send to {peer} failed twice: {e}; the task may or may not have arrived: retry with --message-id {message_id}"
            ))
        };
        if peer.wire == registry::Wire::Zcoder {
            if self.wait.is_some() {
                return Err(Error::Usage(format!(
                    "send: {} is a zcoder instance, which cannot say when a task ends: --wait needs a baton receiver",
                    escape(&peer.manifest.name)
                )));
            }
            // A plain command line has no instance for zcoder to verify; the
            // zcoder instance decides what to make of that.
            let mut result = relay::deliver_zcoder(config, &peer, &message_id, body, None)
                .map_err(failed_twice)?;
            result.target = Some(relay::peer_target(&peer));
            return super::sent::report(self.json, &result);
        }
        let params = self.frame(config, &message_id, body, Some(&peer.manifest.instance_id))?;
        let mut result = match relay::deliver(config, &peer, &params) {
            Ok(v) => v,
            // The receiver could not store the task (its spool failed): not a
            // verdict on the task, which was not accepted and may be sent
            // again, as when a stopped agent's spool fails (relay::route).
            Err(ClientError::Rpc {
                code: wire::INTERNAL_ERROR,
                message,
            }) => SendResult::new(Status::Transport, &message_id, Some(message)),
            Err(e @ (ClientError::Rpc { .. } | ClientError::TooManyConnections { .. })) => {
                return Err(target::transport(&peer, e));
            }
            Err(e) => return Err(failed_twice(e)),
        };
        result.target = Some(relay::peer_target(&peer));
        self.finish(config, &result, None)
    }

    /// `message/send`'s params for this command line's task, checked against
    /// the frame bound; `to` is the instance it goes to, when that is known.
    fn frame(
        &self,
        config: &Config,
        id: &str,
        body: &str,
        to: Option<&String>,
    ) -> Result<SendParams> {
        // A plain command line's: no hop, no sender it would say it is.
        let params = SendParams {
            body: body.to_string(),
            message_id: id.to_string(),
            mode: self.mode.as_str().to_string(),
            target_instance_id: to.cloned(),
            ..SendParams::default()
        };
        relay::check_frame(config, &params).map_err(|e| Error::Usage(format!("send: {e}")))?;
        Ok(params)
    }

    /// Reports a delivery; with `--wait`, first waits for the task to end.
    /// `sender`: the socket of the instance the task was sent as, which
    /// gets a reply back (and hears that the wait handed it over).
    fn finish(&self, config: &Config, r: &SendResult, sender: Option<&Path>) -> Result<ExitCode> {
        if let Some(w) = self.wait {
            let asked = self.target.as_deref().unwrap_or_default();
            return super::wait::run(w, asked, config, r, sender);
        }
        super::sent::report(self.json, r)
    }
}
