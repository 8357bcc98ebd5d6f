//! The operator's terminal (baton(1), INTERACTIVE VIEW): `baton` with no command runs an
//! instance for the current directory and opens the view on it; `baton
//! attach TARGET` opens the same view on a running instance. In both cases
//! the view is a client of the instance's socket (events, control,
//! approvals, relay/send), so there is one view code path.

mod approvals;
mod editor;
mod inbox;
pub mod term;
pub mod view;
pub mod work;

pub use inbox::inbox_listing;

use crate::base::config::{Config, Relay};
use crate::base::error::{Error, Result};
use crate::client::{CallError, ClientError, Events, Reconnecting, Session};
use crate::front::embedded;
use crate::instance::{self, ServeOptions};
use crate::registry;
use crate::text::sanitize::escape;
use crate::wire::answer::{ControlStatus, Handled, Paused};
use crate::wire::request::{NoParams, SubscribeParams};
use crate::wire::{Call, Decision, Handling};
use crossbeam_channel::{self as chan, select};
use serde_json::Value;
use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM, SIGWINCH};
use std::collections::HashSet;
use std::path::PathBuf;
use term::{Terminal, Tty};
use view::{Role, View};

const HELP: &str = "commands:
  /list-agents            the other live instances (their ids work with /send)
  /agents                 this instance's relay status
  /agents pause|resume    refuse new tasks / accept them again
  /send TARGET MESSAGE    hand a task to another instance (id or name)
  /approve [APPROVAL_ID]  approve what waits for approval (also y; default: the oldest)
  /deny [APPROVAL_ID]     deny it: it does not run (also n)
  /body [APPROVAL_ID]     the whole body of what waits for approval (also v)
  /cancel MESSAGE_ID      withdraw a queued task, or stop its running turn
  /claim                  take the next task (an instance without --exec)
  /reply TEXT             answer the task claimed last and complete it
  /complete [ID] [--failed]  complete a claimed task (default: the last)
  /inbox                  every task in the inbox, then the counts
  /requeue ID /discard ID   an interrupted or expired task
  /help /quit             (/quit warns once while tasks wait)
a line without a slash is a local turn; Esc cancels the running turn;
PgUp/PgDn scroll";

/// `baton` with no command: an instance for this directory and its view.
/// Without a terminal it serves in the foreground instead.
pub fn interactive(opts: ServeOptions, config: Config) -> Result<()> {
    if !termion::is_tty(&std::io::stdout()) || !termion::is_tty(&std::io::stdin()) {
        eprintln!(
            "baton: not a terminal, so no interactive view; serving this directory in the foreground (Ctrl-C stops)"
        );
        return instance::serve(opts, config);
    }
    if let Some(why) = term::check_term() {
        return Err(Error::Env(why));
    }
    let off = "BATON_RELAY=off: the relay is off; this is a local console";
    let (running, warning) = match config.relay {
        Relay::Off => (None, Some(off.to_string())),
        _ => match embedded::start(opts, &config) {
            Ok(r) => (Some(r), None),
            Err(e) => {
                let why = format!("the relay is unavailable ({e}); this is a local console");
                (None, Some(why))
            }
        },
    };
    let socket = running.as_ref().map(|r| r.socket.clone());
    let id = running.as_ref().map(|r| r.id.clone()).unwrap_or_default();
    let result = run_view(socket, id, warning, &config, true);
    if let Some(r) = running {
        r.stop();
    }
    result
}

/// `baton attach TARGET`: the view on a running instance.
pub fn attach(socket: PathBuf, id: String, config: &Config) -> Result<()> {
    if !termion::is_tty(&std::io::stdout()) || !termion::is_tty(&std::io::stdin()) {
        return Err(Error::Usage("attach: the view needs a terminal".into()));
    }
    if let Some(why) = term::check_term() {
        return Err(Error::Env(why));
    }
    run_view(Some(socket), id, None, config, false)
}

/// Entries for the transcript, from a worker.
type Lines = Vec<(Role, String)>;

fn key_channel() -> chan::Receiver<termion::event::Key> {
    let (tx, rx) = chan::unbounded();
    std::thread::spawn(move || {
        use termion::input::TermRead;
        let mut keys = std::io::stdin().keys().map_while(|k| k.ok());
        let _ = keys.try_for_each(|k| tx.send(k));
    });
    rx
}

/// The view's connection to its instance, reopened once if it was closed;
/// `None` for a local console.
struct Control {
    client: Option<Reconnecting>,
    id: String,
    config: Config,
    /// The instance runs in this process and stops with the view.
    embedded: bool,
}

impl Control {
    fn call<R: serde::de::DeserializeOwned>(
        &mut self,
        method: impl Into<crate::wire::Method>,
        params: impl serde::Serialize,
    ) -> Result<R> {
        let Some(client) = &mut self.client else {
            return Err(Error::Env("the relay is unavailable".into()));
        };
        client.call(method, params).map_err(|e| match e {
            CallError::Open(e) => Error::Transport(format!("the instance does not answer: {e}")),
            CallError::Rpc { message, .. } => Error::Refused(message),
            CallError::Transport(e) => Error::Transport(e.to_string()),
        })
    }

    /// One call on a worker, on a connection of its own: it may wait on
    /// another instance. `lines` says what it came to.
    fn on_worker(
        &self,
        work: &chan::Sender<Lines>,
        call: Call,
        params: impl serde::Serialize + Send + 'static,
        lines: impl FnOnce(std::result::Result<Value, ClientError>) -> Lines + Send + 'static,
    ) {
        let client = self.client.as_ref().expect("checked");
        let socket = client.socket().to_path_buf();
        let timeout = self.config.io_timeout;
        in_background(work, move || {
            lines(Session::open(&socket, timeout).and_then(|mut c| c.call(call, params)))
        });
    }
}

/// Runs `f` on a thread of its own; its lines go to the transcript.
fn in_background(work: &chan::Sender<Lines>, f: impl FnOnce() -> Lines + Send + 'static) {
    let tx = work.clone();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
}

fn run_view(
    socket: Option<PathBuf>,
    id: String,
    warning: Option<String>,
    config: &Config,
    embedded: bool,
) -> Result<()> {
    let mut view = View::default();
    view.warning = warning;
    let mut ctl = Control {
        // At least as long as the instance may take to answer (a pause
        // waits up to 4 s for acceptances to settle).
        client: socket
            .map(|s| Reconnecting::new(s, config.io_timeout.max(crate::server::ANSWER_WAIT_MIN))),
        id,
        config: config.clone(),
        embedded,
    };
    let subscribed = (ctl.client.as_ref()).map(|c| c.subscribe(SubscribeParams::since(1)));
    if let Some(Err(e)) = &subscribed {
        view.push(Role::Refusal, format!("no event stream: {e}"));
    }
    let mut events = (subscribed.and_then(|s| s.ok())).unwrap_or_else(Events::never);
    let keys = key_channel();
    let signals = instance::signal_channel(&[SIGWINCH, SIGTERM, SIGHUP, SIGINT])?;
    let (work_tx, work) = chan::unbounded::<Lines>();
    let default_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        // Leave the alternate screen first so the message can be read;
        // unwinding then restores cooked mode.
        print!("{}", term::RESTORE);
        default_hook(info);
    }));
    // The approvals whose whole body was read for its counts.
    let mut read: HashSet<String> = HashSet::new();
    let mut tries = 0;
    let mut tty =
        Tty::open().map_err(|e| Error::Env(format!("cannot set up the terminal: {e}")))?;
    refresh_header(&mut ctl, &mut view);
    loop {
        let (cols, rows) = tty.size();
        let _ = tty.draw(&view.render(cols, rows));
        let again = ask_again(&view, &read, tries);
        select! {
            recv(keys) -> k => match k {
                Ok(k) => {
                    if handle_key(k, &mut view, &mut ctl, &work_tx, rows) {
                        break;
                    }
                }
                Err(_) => break,
            },
            recv(signals) -> s => {
                if matches!(s, Ok(sig) if sig != SIGWINCH) {
                    break;
                }
            },
            recv(events) -> ev => match ev {
                Ok(msg) => {
                    // Take whatever else is waiting before drawing again.
                    for msg in std::iter::once(msg).chain(events.try_iter()) {
                        let msg = crate::wire::Message::of(&msg);
                        if msg.is_event() {
                            view.apply_event(&msg.params);
                        }
                    }
                    refresh_header(&mut ctl, &mut view);
                    approvals::count_escaped(&mut ctl, &mut view, &mut read);
                    tries = 0;
                }
                Err(_) => {
                    view.push(Role::Refusal, "the instance closed the event stream");
                    events = Events::never();
                }
            },
            recv(again) -> _ => {
                tries += 1;
                approvals::count_escaped(&mut ctl, &mut view, &mut read);
            },
            recv(work) -> w => {
                for (role, text) in w.unwrap_or_default() {
                    view.push(role, text);
                }
            },
        }
    }
    drop(tty);
    Ok(())
}

fn refresh_header(ctl: &mut Control, view: &mut View) {
    if ctl.client.is_none() {
        view.header.name = "local console".into();
        view.header.state = "no relay".into();
        return;
    }
    if let Ok(st) = ctl.call::<ControlStatus>(Call::ControlStatus, NoParams {}) {
        view.header.name = st.name;
        view.header.id = st.instance_id;
        view.header.profile = st.profile;
        view.header.state = st.state.to_string();
        view.header.model = st.model;
        view.header.queued = st.queue.queued as u64;
        view.header.interrupted = st.queue.interrupted as u64;
    }
}

/// Handles one key; true means quit.
fn handle_key(
    key: termion::event::Key,
    view: &mut View,
    ctl: &mut Control,
    work: &chan::Sender<Lines>,
    rows: u16,
) -> bool {
    use termion::event::Key;
    let page = (rows as usize).saturating_sub(3).max(2) / 2;
    // y, n and v answer what waits, when nothing is typed.
    let answering = view.editor.buf.is_empty() && !view.waiting.is_empty();
    match key {
        Key::Char('\n') => {
            let line = view.editor.take();
            return submit(line.trim(), view, ctl, work);
        }
        Key::Char('y') if answering => approvals::decide(view, ctl, "", Decision::Approve),
        Key::Char('n') if answering => approvals::decide(view, ctl, "", Decision::Deny),
        Key::Char('v') if answering => approvals::show_body(view, ctl, ""),
        Key::Char('\t') => view.editor.insert(' '),
        Key::Char(c) => view.editor.insert(c),
        Key::Backspace => view.editor.backspace(),
        Key::Delete => view.editor.delete(),
        Key::Left => view.editor.left(),
        Key::Right => view.editor.right(),
        Key::Home | Key::Ctrl('a') => view.editor.home(),
        Key::End | Key::Ctrl('e') => view.editor.end(),
        Key::Up => view.editor.up(),
        Key::Down => view.editor.down(),
        Key::Ctrl('u') => view.editor.kill_line(),
        Key::Ctrl('w') => view.editor.kill_word(),
        // Bounded by the entries: a screen line per entry at the least.
        Key::PageUp => view.scroll = (view.scroll + page).min(view.entries.len()),
        Key::PageDown => view.scroll = view.scroll.saturating_sub(page),
        Key::Ctrl('c') => return true,
        Key::Ctrl('d') if view.editor.buf.is_empty() => return true,
        Key::Ctrl('l') => {}
        Key::Esc => match ctl.call::<Handled>(
            Call::TurnCancel,
            crate::wire::request::TurnCancelParams::default(),
        ) {
            Ok(r) if r.status == Handling::Cancelling || r.status == Handling::Cancelled => view
                .push(
                    Role::System,
                    format!("cancelling turn {}", r.message_id.unwrap_or_default()),
                ),
            Ok(r) => view.push(
                Role::System,
                format!("nothing to cancel: {}", r.reason.unwrap_or_default()),
            ),
            Err(e) => view.push(Role::Refusal, e.to_string()),
        },
        _ => {}
    }
    false
}

/// While an approval's counts are not read (its listing failed, or came
/// before it), a tick to ask for them again a little later: at most 40
/// times after the last event, so an instance that never lists it leaves
/// the view idle.
fn ask_again(
    view: &View,
    read: &HashSet<String>,
    tries: u32,
) -> chan::Receiver<std::time::Instant> {
    let unread = view.waiting.iter().any(|w| !read.contains(&w.approval_id));
    match unread && tries < 40 {
        true => chan::after(std::time::Duration::from_millis(250)),
        false => chan::never(),
    }
}

/// Runs a typed line; true means quit.
fn submit(line: &str, view: &mut View, ctl: &mut Control, work: &chan::Sender<Lines>) -> bool {
    view.scroll = 0;
    if line.is_empty() {
        return false;
    }
    let (cmd, rest) = match line.split_once(' ') {
        Some((c, r)) => (c, r.trim()),
        None => (line, ""),
    };
    if !matches!(cmd, "/quit" | "/exit") {
        view.quit_armed = false;
    }
    if !cmd.starts_with('/') {
        local_line(line, view, ctl);
        return false;
    }
    let relay_needed = !matches!(cmd, "/help" | "/quit");
    if relay_needed && ctl.client.is_none() {
        let why = (view.warning.as_ref()).map_or(String::new(), |w| format!(" ({w})"));
        view.push(
            Role::Refusal,
            format!("{cmd}: the relay is unavailable{why}"),
        );
        return false;
    }
    match cmd {
        "/quit" | "/exit" => {
            let status = ctl.call::<Value>(Call::ControlStatus, NoParams {}).ok();
            return work::quit(view, status.as_ref(), ctl.embedded);
        }
        "/claim" => work::claim(view, &mut |m, p| ctl.call(m, p)),
        "/complete" => work::complete(rest, view, &mut |m, p| ctl.call(m, p)),
        "/reply" => reply_command(rest, view, ctl, work),
        "/help" => view.push(Role::System, HELP),
        "/list-agents" => {
            // Discovery pings peers: a worker does it, the view stays live.
            let (config, me) = (ctl.config.clone(), ctl.id.clone());
            in_background(work, move || list_agents(&config, &me));
        }
        "/agents" => agents_command(rest, view, ctl),
        "/send" => send_command(rest, view, ctl, work),
        "/approve" => approvals::decide(view, ctl, rest, Decision::Approve),
        "/body" => approvals::show_body(view, ctl, rest),
        "/cancel" => cancel_command(rest, view, ctl),
        "/deny" => approvals::decide(view, ctl, rest, Decision::Deny),
        "/inbox" => match inbox_listing(&mut |params| ctl.call(Call::InboxList, params)) {
            Ok(text) => view.push(Role::System, text),
            Err(e) => view.push(Role::Refusal, e.to_string()),
        },
        "/requeue" => requeue_or_discard(cmd, Call::InboxRequeue, rest, view, ctl),
        "/discard" => requeue_or_discard(cmd, Call::InboxDiscard, rest, view, ctl),
        other => view.push(
            Role::Refusal,
            format!("unknown command {}: /help lists them", escape(other)),
        ),
    }
    false
}

/// A line without a slash: a local turn.
fn local_line(line: &str, view: &mut View, ctl: &mut Control) {
    if ctl.client.is_none() {
        view.push(
            Role::Local,
            format!("{line}\n(noted: the relay is unavailable)"),
        );
        return;
    }
    // The instance records the line as local.input; the view shows it
    // from the event stream like everything else.
    match ctl.call::<Handled>(
        Call::TurnLocal,
        crate::wire::request::LocalParams {
            text: line.to_string(),
        },
    ) {
        Ok(r) if r.status == Handling::Accepted || r.status == Handling::Noted => {}
        Ok(r) => view.push(
            Role::Refusal,
            format!("not run: {}: {}", r.status, r.reason.unwrap_or_default()),
        ),
        Err(e) => view.push(Role::Refusal, e.to_string()),
    }
}

/// `/agents [pause|resume]`.
fn agents_command(rest: &str, view: &mut View, ctl: &mut Control) {
    let call = match rest {
        "" => {
            return match ctl.call::<ControlStatus>(Call::ControlStatus, NoParams {}) {
                Ok(st) => view.push(Role::System, status_text(&st)),
                Err(e) => view.push(Role::Refusal, e.to_string()),
            };
        }
        "pause" => Call::ControlPause,
        "resume" => Call::ControlResume,
        other => {
            let why = format!("/agents {}: use pause or resume", escape(other));
            return view.push(Role::Refusal, why);
        }
    };
    match ctl.call::<Paused>(call, NoParams {}) {
        Ok(r) => view.push(Role::System, format!("relay {}", r.state)),
        Err(e) => view.push(Role::Refusal, e.to_string()),
    }
}

/// `/send TARGET MESSAGE`, on a worker: a send may wait on the target.
fn send_command(rest: &str, view: &mut View, ctl: &mut Control, work: &chan::Sender<Lines>) {
    let Some((target, message)) = rest.split_once(' ') else {
        view.push(Role::Refusal, "usage: /send TARGET MESSAGE");
        return;
    };
    let message = message.trim();
    view.push(Role::Local, format!("/send {target} {message}"));
    let params = crate::wire::request::RelayParams {
        body: message.to_string(),
        target: Some(target.to_string()),
        ..Default::default()
    };
    ctl.on_worker(work, Call::RelaySend, params, |r| match r {
        // The outcome arrives as relay.sent, with the candidates of a
        // `no_target`.
        Ok(_) => vec![],
        Err(e) => vec![(Role::Refusal, format!("send failed: {e}"))],
    });
}

/// `/reply TEXT`, on a worker: completing with a reply may wait on the
/// sender's instance (up to four fifths of `BATON_IO_TIMEOUT`).
fn reply_command(rest: &str, view: &mut View, ctl: &mut Control, work: &chan::Sender<Lines>) {
    let params = match work::reply_params(rest, view) {
        Ok(p) => p,
        Err(e) => return view.push(Role::Refusal, e.to_string()),
    };
    let id = params.message_id.clone();
    view.push(Role::Local, format!("/reply {rest}"));
    ctl.on_worker(work, Call::InboxComplete, params, move |r| {
        work::reply_outcome(&id, r)
    });
}

/// `/cancel MESSAGE_ID`: withdraws a task queued here, or stops its
/// turn (`task/cancel`), as `baton cancel` does, said in its words.
fn cancel_command(rest: &str, view: &mut View, ctl: &mut Control) {
    let id = match rest.split_whitespace().collect::<Vec<_>>()[..] {
        [id] => id.to_string(),
        [] => return view.push(Role::Refusal, "usage: /cancel MESSAGE_ID"),
        [_, extra, ..] => {
            let why = format!("/cancel: unexpected argument {extra}: use /cancel MESSAGE_ID");
            return view.push(Role::Refusal, why);
        }
    };
    let params = crate::wire::request::TaskParams::new(&id);
    let h = match ctl.call::<Handled>(Call::TaskCancel, params) {
        Ok(h) => h,
        Err(e) => return view.push(Role::Refusal, e.to_string()),
    };
    let name = &view.header.name;
    if h.status != Handling::Cancelled {
        let why = h.reason.unwrap_or_default();
        let said = format!("cannot cancel {id} at {name}: {}: {why}", h.status);
        return view.push(Role::Refusal, said);
    }
    let how = match h.was.as_deref() {
        Some("running") => "its turn is stopped: SIGTERM to its handler's process group",
        Some("open") => "its open turn ended",
        _ => "withdrawn from the queue",
    };
    let said = format!("cancelled {id} at {name} ({how})");
    view.push(Role::System, said);
}

/// `/requeue ID` and `/discard ID`.
fn requeue_or_discard(cmd: &str, call: Call, rest: &str, view: &mut View, ctl: &mut Control) {
    if rest.is_empty() {
        return view.push(Role::Refusal, format!("usage: {cmd} ID"));
    }
    match ctl.call::<Handled>(call, crate::wire::request::TaskParams::new(rest)) {
        Ok(r) => {
            let done = r.status == Handling::Requeued || r.status == Handling::Discarded;
            let role = if done { Role::System } else { Role::Refusal };
            let reason = r.reason.map(|x| format!(": {x}")).unwrap_or_default();
            view.push(role, format!("{} {rest}{reason}", r.status));
        }
        Err(e) => view.push(Role::Refusal, e.to_string()),
    }
}

/// `/list-agents`: never waits on an agent or a turn, only on pings.
fn list_agents(config: &Config, me: &str) -> Lines {
    let dir = match registry::ensure_dir(config) {
        Ok(d) => d,
        Err(e) => return vec![(Role::Refusal, format!("the relay is unavailable: {e}"))],
    };
    let found = registry::discover(&registry::scan_dirs(&dir), Some(me), config.io_timeout);
    if found.peers.is_empty() {
        let none = format!("no other live instances {}", registry::searched());
        return vec![(Role::System, none)];
    }
    let rows: Vec<[String; 5]> = found
        .peers
        .iter()
        .map(|p| {
            let m = &p.manifest;
            [
                m.name.clone(),
                m.pid.to_string(),
                m.state.clone(),
                // The whole id: a prefix is no target `/send` accepts.
                m.instance_id.clone(),
                m.workspace.clone(),
            ]
        })
        .collect();
    vec![(
        Role::System,
        crate::text::table(["NAME", "PID", "STATE", "ID", "WORKSPACE"], &rows)
            .trim_end()
            .to_string(),
    )]
}

fn status_text(st: &ControlStatus) -> String {
    let q = &st.queue;
    format!(
        "{} ({}) {}, {} mode, approve {}; queued {} of {}, processing {}, interrupted {}; socket {}",
        st.name,
        st.instance_id,
        st.state,
        st.mode,
        st.approve,
        q.queued,
        q.max,
        q.processing,
        q.interrupted,
        st.socket
    )
}
