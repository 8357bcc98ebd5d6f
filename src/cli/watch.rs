//! `baton log` and `baton watch`: an instance's transcript, recorded or
//! live, and answering approvals from a terminal.

use super::Parsed;
use super::approve::{self, Approvals, Asked, Decided, Line, Waiting};
use super::args::Args;
use super::log::print;
use super::since::{Clock, parse_since};
use super::target;
use super::target::Resolved;
use crate::base::config::Config;
use crate::base::error::{Error, ExitCode, Result};
use crate::front::follow::{Follow, Step, Who};
use crate::registry::Peer;
use crate::registry::lookup::KnownSpool;
use crate::text::sanitize::escape;
use crate::wire::answer::Subscribed;
use crate::wire::request::{NoParams, RespondParams, SubscribeParams};
use crate::wire::{Event, EventKind, Method};
use crossbeam_channel::{self as chan, Receiver, select};
use serde_json::Value;
use std::collections::VecDeque;
use std::io::{BufRead, Write};

/// `events/subscribe` with `params`: the answer, the events, and where the
/// answers to the instance's requests go.
fn subscribe(
    config: &Config,
    peer: &Peer,
    params: SubscribeParams,
) -> Result<(Subscribed, crate::client::Events, Writer)> {
    let mut conn = target::connect(config, peer)?;
    let sub = conn
        .subscribe(params)
        .map_err(|e| target::transport(peer, e))?;
    let (rx, writer) = conn.into_events();
    Ok((sub, rx, writer))
}

type Writer = Box<dyn Write + Send>;

/// The id of the ping that marks the end of the replay.
const REPLAYED: &str = "replayed";

/// A stopped agent's spool, as `log` and `inbox list` read it: said on
/// stderr (`NAME is stopped (since TIME); reading its spool`), so that
/// `--json` output stays pure.
pub(super) fn say_stopped(spool: &KnownSpool, utc: bool) {
    eprintln!(
        "baton: {}; reading its spool",
        target::stopped_since(spool, utc)
    );
}

/// Which recorded events `baton log` shows: the last `last` of them
/// (`-n`), from the time `since` on (`--since`).
#[derive(Clone, Copy)]
struct Filter {
    last: Option<u64>,
    since: Option<f64>,
}

impl Filter {
    /// `-n N` and `--since WHEN`, read on `clock`.
    fn parse(args: &Args, clock: &Clock) -> Result<Filter> {
        let last = args.value("lines").map(|n| {
            n.parse::<u64>().map_err(|_| {
                Error::Usage(format!(
                    "log: -n {}: use a number of events (0 or more)",
                    escape(n)
                ))
            })
        });
        let now = crate::spool::now_secs() as i64;
        let since = args.value("since").map(|w| parse_since(w, clock, now));
        Ok(Filter {
            last: last.transpose()?,
            since: since.transpose()?.map(|s| s as f64),
        })
    }

    fn by_time(&self, ev: &Event) -> bool {
        self.since.is_none_or(|s| ev.time >= s)
    }

    /// Whether a recorded event is shown, when `last` is the last one.
    fn keeps(&self, ev: &Event, last: u64) -> bool {
        let first = self.last.map_or(1, |n| last.saturating_sub(n) + 1);
        ev.seq >= first && self.by_time(ev)
    }
}

/// `baton log`: the recorded events, then exit (a stopped agent's from
/// its transcript on disk); with `--follow`, then the live ones, as
/// `baton watch`.
pub struct Log {
    target: Option<String>,
    json: bool,
    utc: bool,
    clock: Clock,
    filter: Filter,
    follow: bool,
}

impl Parsed for Log {
    fn parse(args: &Args) -> Result<Log> {
        super::at_most(args, "log", 1)?;
        let utc = args.flag("utc");
        let clock = Clock::new(utc);
        Ok(Log {
            target: args.positional.first().cloned(),
            json: args.flag("json"),
            utc,
            filter: Filter::parse(args, &clock)?,
            clock,
            follow: args.flag("follow"),
        })
    }

    fn run(self, config: &Config) -> Result<ExitCode> {
        let (json, clock, filter, then_live) = (self.json, &self.clock, self.filter, self.follow);
        let peer = match target::resolve_or_stopped(config, self.target.as_deref())? {
            Resolved::Live(peer) => *peer,
            Resolved::Stopped(spool) => {
                say_stopped(&spool, self.utc);
                let last = log_recorded(json, clock, filter, &spool);
                if !then_live {
                    return Ok(ExitCode::Ok);
                }
                return follow_next_start(json, config, clock, &spool, last);
            }
        };
        let params = SubscribeParams {
            controller: then_live.then_some(false),
            since: Some(1),
        };
        let (result, rx, mut stream) = subscribe(config, &peer, params)?;
        let last = result.next_seq.saturating_sub(1);
        if then_live {
            return follow(json, clock, rx, stream, None, Some((last, filter)));
        }
        if last == 0 {
            return Ok(ExitCode::Ok);
        }
        // The instance replays the transcript before it reads the next
        // request, so the answer to this ping follows every recorded event
        // there is: when the transcript lacks the last ones (rotated away,
        // set aside, its writes failed), the log ends there, not at the next
        // live event.
        let _ = stream.write_all(&crate::client::request(REPLAYED, Method::Ping, NoParams {}));
        for msg in rx.iter() {
            let m = crate::wire::Message::of(&msg);
            if m.id.as_ref().and_then(Value::as_str) == Some(REPLAYED) {
                break;
            }
            let Some(ev) = Event::of_notification(&msg) else {
                continue;
            };
            if ev.seq <= last && filter.keeps(&ev, last) {
                print(json, clock, &m.params, &ev);
            }
            if ev.seq >= last {
                break;
            }
        }
        // Rotation may have removed the oldest events; what exists was shown.
        Ok(ExitCode::Ok)
    }
}

/// Prints what a stopped agent's transcript recorded, as `filter` keeps
/// it; the sequence number of the last event there is (0: none).
fn log_recorded(json: bool, clock: &Clock, filter: Filter, spool: &KnownSpool) -> u64 {
    let keep = filter.last.map_or(usize::MAX, |n| n as usize);
    let mut shown: VecDeque<(Value, Event)> = VecDeque::new();
    let mut last = 0;
    crate::spool::events::replay(&spool.dir, 1, u64::MAX, |line| {
        if let Ok(v) = serde_json::from_slice::<Value>(line) {
            let ev = Event::read(&v);
            last = last.max(ev.seq);
            if filter.by_time(&ev) {
                shown.push_back((v, ev));
            }
            if shown.len() > keep {
                shown.pop_front();
            }
        }
        true
    });
    for (v, ev) in &shown {
        print(json, clock, v, ev);
    }
    last
}

/// `log --follow` of a stopped agent, after its recorded events (up to
/// `last`): waits for the next instance of its name and workspace to
/// start (`follow::follow`, which says it waits), then prints its events
/// from the one after `last` on, until it closes the connection.
fn follow_next_start(
    json: bool,
    config: &Config,
    clock: &Clock,
    spool: &KnownSpool,
    last: u64,
) -> Result<ExitCode> {
    let who = Who {
        workspace: Some(spool.workspace.clone()),
        only_workspace: true,
        ..Who::named(spool.name.clone(), None)
    };
    let f = Follow {
        name: &spool.name,
        deadline: None,
        quiet: false,
    };
    let params = SubscribeParams {
        controller: Some(false),
        since: Some(last + 1),
    };
    let end = crate::front::follow::follow(
        &f,
        || who.find(config),
        // One that went away before it could be subscribed to is not the
        // next start: wait for another.
        |peer| match subscribe(config, &peer, params.clone()) {
            Ok((_, rx, stream)) => follow(json, clock, rx, stream, None, None).map(Step::Done),
            Err(_) => Ok(Step::Unwatched(None)),
        },
    )?;
    Ok(end.unwrap_or(ExitCode::Ok))
}

/// `baton watch`: live events until the instance goes away; with
/// `--approve`, also answers approval requests from the terminal.
pub struct Watch {
    target: Option<String>,
    json: bool,
    clock: Clock,
    since: Option<u64>,
    approve: bool,
}

impl Parsed for Watch {
    fn parse(args: &Args) -> Result<Watch> {
        let since = args.value("since").map(|since| {
            since.parse().map_err(|_| {
                Error::Usage(format!(
                    "watch: --since {}: use a sequence number",
                    escape(since)
                ))
            })
        });
        let since = since.transpose()?;
        let clock = Clock::new(args.flag("utc"));
        super::at_most(args, "watch", 1)?;
        Ok(Watch {
            target: args.positional.first().cloned(),
            json: args.flag("json"),
            clock,
            since,
            approve: args.flag("approve"),
        })
    }

    fn run(self, config: &Config) -> Result<ExitCode> {
        let params = SubscribeParams {
            controller: Some(self.approve),
            since: self.since,
        };
        let peer = target::resolve(config, self.target.as_deref())?;
        let (_, rx, stream) = subscribe(config, &peer, params)?;
        let asking = self.approve.then_some((config, &peer));
        follow(self.json, &self.clock, rx, stream, asking, None)
    }
}

/// How long answers read before their requests wait for them once the
/// input has ended.
const EARLY_WAIT: std::time::Duration = std::time::Duration::from_secs(30);

/// Reads the operator's answers on a thread of its own.
fn read_stdin() -> Receiver<String> {
    let (tx, rx) = chan::unbounded::<String>();
    std::thread::spawn(move || {
        let mut lines = std::io::stdin().lock().lines().map_while(|l| l.ok());
        let _ = lines.try_for_each(|line| tx.send(line));
    });
    rx
}

/// Prints events as they come until the instance goes away; `replay`
/// (the last recorded seq and `log`'s filter) limits the recorded ones.
/// With `asking` (the instance, to read a waiting task's whole body
/// from), answers approval requests from stdin.
fn follow(
    json: bool,
    clock: &Clock,
    rx: crate::client::Events,
    mut stream: Writer,
    asking: Option<(&Config, &Peer)>,
    replay: Option<(u64, Filter)>,
) -> Result<ExitCode> {
    let approve = asking.is_some();
    let mut lines = if approve { read_stdin() } else { chan::never() };
    let mut approvals = Approvals::default();
    // Once the input ended with answers that found no request yet: until
    // when their requests may still come (an instance sends the waiting
    // ones as a controller subscribes).
    let mut ended = chan::never();
    let mut input_open = approve;
    loop {
        if approve && !input_open && !approvals.has_early() {
            return Ok(ExitCode::Ok);
        }
        select! {
            recv(rx) -> msg => {
                let Ok(msg) = msg else {
                    eprintln!("baton: the instance closed the connection");
                    return Ok(ExitCode::Ok);
                };
                let msg = crate::wire::Message::of(&msg);
                match msg.method.as_deref() {
                    Some("event") => {
                        let ev = Event::read(&msg.params);
                        // A recorded event passes `log`'s filter; a live one always does.
                        if replay.is_none_or(|(last, f)| ev.seq > last || f.keeps(&ev, last)) {
                            print(json, clock, &msg.params, &ev);
                        }
                        let resolved = [EventKind::ApprovalResolved, EventKind::PermissionResolved];
                        if approve && ev.kind.is_some_and(|k| resolved.contains(&k)) {
                            approvals.resolved(ev.approval_id.as_deref().unwrap_or(""));
                        }
                    }
                    Some("approval/request") if approve => {
                        let req = Asked::read(&msg.params);
                        let whole = asking.map_or(Err(String::new()), |(c, p)| {
                            super::approvals::fetch_whole(c, p, &req)
                        });
                        eprint!("{}", approve::describe(&req, Some(&whole)));
                        let w = Waiting::of(msg.id.unwrap_or(Value::Null), req, whole);
                        match approvals.request(w) {
                            Some(d) => decide(&mut stream, &d, " (an answer read before)")?,
                            None => prompt(&approvals),
                        }
                    }
                    _ => {}
                }
            },
            recv(ended) -> _ => {
                eprintln!("baton: the input ended; an answer read found no approval to answer");
                return Ok(ExitCode::Ok);
            },
            recv(lines) -> line => {
                let Ok(line) = line else {
                    // The input ended: what it said is answered, or, for
                    // answers read before their request, once it comes.
                    lines = chan::never();
                    input_open = false;
                    ended = chan::after(EARLY_WAIT);
                    continue;
                };
                let answer = match approve::parse_line(&line) {
                    Ok(Some(Line::Answer(a))) => a,
                    Ok(Some(Line::View(id))) => {
                        view(&approvals, id.as_deref());
                        continue;
                    }
                    Ok(None) => continue,
                    Err(e) => {
                        eprintln!("baton: {e}");
                        continue;
                    }
                };
                match approvals.answer(answer) {
                    Ok(Some(d)) => {
                        decide(&mut stream, &d, "")?;
                        prompt(&approvals);
                    }
                    Ok(None) => {}
                    Err(e) => eprintln!("baton: {e}"),
                }
            },
        }
    }
}

/// `v [ID]`: the whole of what waits (the oldest, or the one ID
/// starts), escaped, then the prompt again.
fn view(approvals: &Approvals, id: Option<&str>) {
    match approvals.find(id) {
        Ok(Some(Waiting {
            shown: Some((req, whole)),
            ..
        })) => eprint!("{}", approve::show_whole(req, whole)),
        Ok(_) => match id {
            Some(id) => eprintln!("baton: nothing waits for approval as {}", escape(id)),
            None => eprintln!("baton: nothing waits for approval"),
        },
        Err(e) => eprintln!("baton: {e}"),
    }
    prompt(approvals);
}

fn prompt(approvals: &Approvals) {
    match approvals.next_waiting() {
        Some((id, false)) => eprint!("approve task {}? [y/n] ", escape(id)),
        Some((id, true)) => eprint!("allow tool call {}? [y/n] ", escape(id)),
        None => {}
    }
}

/// Sends a decision as the reply to its request, with the digest of what
/// was shown, naming this client `watch` (the instance adds our pid);
/// `how` follows it on stderr.
fn decide(stream: &mut Writer, (w, decision): &Decided, how: &str) -> Result<()> {
    let reply = RespondParams {
        approval_id: String::new(),
        by: Some("watch".into()),
        decision: (*decision).into(),
        digest: w.digest.clone(),
    };
    let bytes = crate::wire::result_line(&w.rid, &reply);
    if stream
        .write_all(&bytes)
        .and_then(|()| stream.flush())
        .is_err()
    {
        return Err(Error::Transport(
            "the instance closed the connection".into(),
        ));
    }
    eprintln!(
        "baton: {} {}{how}",
        decision.as_str(),
        escape(&w.message_id)
    );
    Ok(())
}
