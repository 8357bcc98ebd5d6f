//! The thread of `baton serve --codex` that owns the connection to
//! Codex's app-server: the foreground hands it jobs (find the workspace's
//! thread, deliver a task, interrupt its turn) and hears back on a
//! channel; it never waits on Codex itself.
//!
//! One task at a time. A task is delivered with `thread/queue/add`, named
//! by its message id (`clientUserMessageId`): on an idle thread its turn
//! starts at once, behind a running turn it waits for that turn's end. Its
//! turn is the one whose `userMessage` item carries that id; the turn's
//! `turn/completed` is the task's end. A `steer` task joins the running
//! turn (`turn/steer`) when there is one.
//!
//! A connection that fails is given up and said (`Report::Down`), with
//! whether the task under way had reached Codex: if not, it can be
//! delivered again; if so, it may have run, and is never delivered twice.
//! While no task is under way the thread looks at the connection once a
//! second (`IDLE_LOOK`), so an app-server that went away is said before
//! the next task needs it.

use super::client::{AppServer, Notification, TurnEnd};
use super::error::Error;
use super::proto::{ThreadStatus, TurnStatus, WithItem, WithTurn};
use crossbeam_channel as chan;
use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::thread;
use std::time::Duration;

/// The bound on connecting and on each request's answer.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// How often an idle connection is looked at.
const IDLE_LOOK: Duration = Duration::from_secs(1);
/// How long one read waits while a turn runs, between looks at the jobs.
const TURN_LOOK: Duration = Duration::from_millis(200);
/// The most notifications drained in one idle look.
const DRAIN: usize = 256;

/// What the foreground asks.
#[derive(Debug)]
pub enum Job {
    /// Connect if need be, and find or start the workspace's thread.
    Probe,
    /// Hand the task `message_id` to Codex, `text` as the turn's input.
    Deliver {
        message_id: String,
        text: String,
        steer: bool,
    },
    /// End the turn of `message_id` (a cancel, `--turn-timeout`).
    Interrupt { message_id: String },
}

/// What the thread reports.
#[derive(Debug)]
pub enum Report {
    /// Connected; the workspace's thread is `thread_id`; the app-server's
    /// process is `pid`, where the kernel says.
    Up { thread_id: String, pid: Option<u32> },
    /// The app-server cannot be reached, or went away (`why`), with the
    /// task that was under way, if one was.
    Down { why: String, lost: Option<Lost> },
    /// Codex refused the task's input (`why`): a verdict on it.
    Refused { message_id: String, why: String },
    /// A steer task could not join the running turn (`why`): it goes back
    /// to baton's queue, no verdict on it.
    Back { message_id: String, why: String },
    /// The task's turn started.
    Started {
        message_id: String,
        thread_id: String,
        turn_id: String,
    },
    /// The task's turn ended, and with it the steer tasks that joined it.
    Ended {
        message_id: String,
        followers: Vec<String>,
        end: TurnEnd,
    },
}

/// A task under way when the connection failed.
#[derive(Debug, Default)]
pub struct Lost {
    pub message_id: String,
    /// Its input may have reached Codex: it may have run, in part or
    /// whole, and must not be delivered again on its own.
    pub sent: bool,
    /// The steer tasks that had joined its turn (all sent).
    pub followers: Vec<String>,
}

/// Starts the thread for the app-server at `socket` and the thread of
/// `workspace`: it takes jobs on the channel returned, reports on
/// `reports`, and ends when the jobs' sender is dropped.
pub fn start(
    socket: PathBuf,
    workspace: PathBuf,
    reports: chan::Sender<Report>,
) -> std::io::Result<chan::Sender<Job>> {
    let (jobs, rx) = chan::unbounded();
    let mut worker = Worker {
        socket,
        workspace,
        reports,
        conn: None,
        subscribed: HashSet::new(),
        active: HashMap::new(),
        task: None,
    };
    thread::Builder::new()
        .name("codex".into())
        .spawn(move || worker.run(&rx))?;
    Ok(jobs)
}

/// The workspace's thread as found.
struct Found {
    id: String,
    /// Its notifications reach this connection.
    subscribed: bool,
    /// No turn runs on it.
    idle: bool,
}

/// Hands the task's input to Codex: a turn of its own on an idle thread
/// (`turn/start`: after an interrupted turn, queued input would not
/// start), else queued behind the running turn (`thread/queue/add`).
/// Either way the input is named by the task's message id.
fn submit(conn: &mut AppServer, u: &mut Under, idle: bool, text: &str) -> Result<(), Error> {
    let (thread, id) = (u.thread_id.clone(), u.message_id.clone());
    if idle {
        match conn.start_turn_as(&thread, Some(&id), text) {
            Ok(_) => return Ok(()),
            // A turn began meanwhile: queued behind it.
            Err(Error::Rpc { .. }) => {}
            Err(e) => return Err(e),
        }
    }
    u.submission = Some(conn.queue_add(&thread, &id, text)?);
    Ok(())
}

/// The task under way.
#[derive(Default)]
struct Under {
    message_id: String,
    thread_id: String,
    /// Its queued submission, until its turn started.
    submission: Option<String>,
    turn_id: Option<String>,
    /// An interrupt was asked for, and sent once the turn is known.
    interrupt: bool,
    interrupt_sent: bool,
    /// The last agent message of its turn so far.
    said: Option<String>,
    /// Whether the thread's notifications reach this connection: not yet
    /// for a thread another client started and that has no turn yet
    /// (`thread/resume` is refused until its first turn), so the thread
    /// is resumed again until it is.
    subscribed: bool,
    /// Steer tasks that joined its turn.
    followers: Vec<String>,
}

struct Worker {
    socket: PathBuf,
    workspace: PathBuf,
    reports: chan::Sender<Report>,
    conn: Option<AppServer>,
    /// Threads whose notifications reach this connection.
    subscribed: HashSet<String>,
    /// The running turn of each thread, as the notifications said.
    active: HashMap<String, String>,
    task: Option<Under>,
}

impl Worker {
    fn run(&mut self, jobs: &chan::Receiver<Job>) {
        loop {
            if self.task.is_none() {
                match jobs.recv_timeout(IDLE_LOOK) {
                    Ok(job) => self.job(job),
                    Err(chan::RecvTimeoutError::Timeout) => self.look(),
                    Err(chan::RecvTimeoutError::Disconnected) => return,
                }
                continue;
            }
            loop {
                match jobs.try_recv() {
                    Ok(job) => self.job(job),
                    Err(chan::TryRecvError::Empty) => break,
                    Err(chan::TryRecvError::Disconnected) => return,
                }
            }
            self.subscribe();
            self.read(TURN_LOOK);
        }
    }

    fn report(&self, r: Report) {
        let _ = self.reports.send(r);
    }

    /// The turn `turn_id` of `thread_id` runs the task `message_id`.
    fn started(&self, message_id: String, thread_id: String, turn_id: String) {
        self.report(Report::Started {
            message_id,
            thread_id,
            turn_id,
        });
    }

    fn job(&mut self, job: Job) {
        match job {
            Job::Probe => match self.thread() {
                Ok(found) => {
                    let pid = self.conn.as_ref().and_then(AppServer::peer_pid);
                    self.report(Report::Up {
                        thread_id: found.id,
                        pid,
                    })
                }
                Err(e) => self.fail(&e, None),
            },
            Job::Deliver {
                message_id,
                text,
                steer,
            } => self.deliver(message_id, &text, steer),
            Job::Interrupt { message_id } => {
                if let Some(u) = self.task.as_mut().filter(|u| u.message_id == message_id) {
                    u.interrupt = true;
                }
                self.send_interrupt();
            }
        }
    }

    /// The connection, made if need be, and the workspace's thread: the
    /// loaded thread whose cwd is the workspace, the most recently active,
    /// else a new one.
    fn thread(&mut self) -> Result<Found, Error> {
        if self.conn.is_none() {
            self.subscribed.clear();
            self.active.clear();
            self.conn = Some(AppServer::connect(&self.socket, REQUEST_TIMEOUT)?);
        }
        let conn = self.conn.as_mut().expect("connected");
        let found = conn.workspace_thread(&self.workspace)?;
        let thread = match found {
            Some(t) => t,
            None => {
                let t = conn.start_thread(&self.workspace)?;
                self.subscribed.insert(t.id.clone());
                t
            }
        };
        let idle = thread.status == ThreadStatus::Idle;
        let mut found = Found {
            id: thread.id,
            subscribed: true,
            idle,
        };
        if !self.subscribed.contains(&found.id) {
            match conn.resume_thread(&found.id) {
                Ok(_) => {
                    self.subscribed.insert(found.id.clone());
                }
                // No turn yet: resumed once the task's turn began.
                Err(Error::Rpc { .. }) => found.subscribed = false,
                Err(e) => return Err(e),
            }
        }
        Ok(found)
    }

    /// Resumes the thread of the task under way, whose notifications do
    /// not reach this connection yet; once it does, what was missed is
    /// read from the thread's last turns.
    fn subscribe(&mut self) {
        let Some(u) = self.task.as_ref().filter(|u| !u.subscribed) else {
            return;
        };
        let thread = u.thread_id.clone();
        let Some(conn) = self.conn.as_mut() else {
            return;
        };
        let turns = match conn.resume_thread(&thread) {
            Ok(_) => conn.recent_turns(&thread, 8),
            Err(Error::Rpc { .. }) => return,
            Err(e) => Err(e),
        };
        let turns = match turns {
            Ok(t) => t,
            Err(e) => {
                self.lose(&e);
                return;
            }
        };
        self.subscribed.insert(thread.clone());
        let u = self.task.as_mut().expect("checked");
        u.subscribed = true;
        let id = u.message_id.clone();
        let ours = turns.into_iter().find(|t| {
            t.items
                .iter()
                .any(|i| i.kind == "userMessage" && i.client_id.as_deref() == Some(id.as_str()))
        });
        let Some(turn) = ours else {
            return;
        };
        if turn.status == TurnStatus::InProgress {
            self.active.insert(thread.clone(), turn.id.clone());
            let item = WithItem {
                item: turn
                    .items
                    .into_iter()
                    .find(|i| i.kind == "userMessage")
                    .expect("found"),
                thread_id: Some(thread),
                turn_id: Some(turn.id),
            };
            self.item(item);
            return;
        }
        if u.turn_id.is_none() {
            u.turn_id = Some(turn.id.clone());
            self.started(id, thread.clone(), turn.id.clone());
        }
        self.completed(WithTurn {
            thread_id: Some(thread),
            turn,
        });
    }

    fn deliver(&mut self, message_id: String, text: &str, steer: bool) {
        if self.task.is_some() {
            self.follow(message_id, text);
            return;
        }
        let Found {
            id: thread_id,
            subscribed,
            idle,
        } = match self.thread() {
            Ok(t) => t,
            Err(e) => {
                let lost = Lost {
                    message_id,
                    ..Lost::default()
                };
                self.fail(&e, Some(lost));
                return;
            }
        };
        let conn = self.conn.as_mut().expect("connected");
        let running = self.active.get(&thread_id).cloned();
        let mut under = Under {
            message_id: message_id.clone(),
            thread_id: thread_id.clone(),
            subscribed,
            ..Under::default()
        };
        let sent = match (steer, running) {
            (true, Some(turn_id)) => match conn.steer(&thread_id, &turn_id, &message_id, text) {
                Ok(()) => {
                    under.turn_id = Some(turn_id.clone());
                    self.started(message_id.clone(), thread_id.clone(), turn_id);
                    Ok(())
                }
                // The turn ended meanwhile: queued as any task is.
                Err(Error::Rpc { .. }) => submit(conn, &mut under, false, text),
                Err(e) => Err(e),
            },
            _ => submit(conn, &mut under, idle, text),
        };
        match sent {
            Ok(()) => self.task = Some(under),
            Err(Error::Rpc { message, .. }) => {
                let why = format!("Codex refused the task's input: {message}");
                self.report(Report::Refused { message_id, why });
            }
            Err(e) => {
                let sent = !matches!(e, Error::Unsent(_));
                let lost = Lost {
                    message_id,
                    sent,
                    ..Lost::default()
                };
                self.fail(&e, Some(lost));
            }
        }
    }

    /// A steer task from the sender of the task under way joins its
    /// running turn (`turn/steer`) and ends with it; if that turn is not
    /// running (yet, or any more), the task goes back to baton's queue.
    fn follow(&mut self, message_id: String, text: &str) {
        let (Some(u), Some(conn)) = (self.task.as_mut(), self.conn.as_mut()) else {
            let why = "no turn of the task it follows is running".into();
            self.report(Report::Back { message_id, why });
            return;
        };
        let Some(turn) = u.turn_id.clone().filter(|_| !u.interrupt) else {
            let why = "the turn of the task it follows is not running".into();
            self.report(Report::Back { message_id, why });
            return;
        };
        match conn.steer(&u.thread_id, &turn, &message_id, text) {
            Ok(()) => {
                u.followers.push(message_id.clone());
                let thread_id = u.thread_id.clone();
                self.started(message_id, thread_id, turn);
            }
            Err(Error::Rpc { message, .. }) => {
                let why = format!("Codex did not take it into the running turn: {message}");
                self.report(Report::Back { message_id, why });
            }
            Err(e) => {
                // It may have joined the turn: as sent as the turn's task.
                u.followers.push(message_id);
                self.lose(&e);
            }
        }
    }

    /// Reads what came, for at most `timeout`.
    fn read(&mut self, timeout: Duration) {
        let Some(conn) = self.conn.as_mut() else {
            return;
        };
        match conn.next_notification(timeout) {
            Ok(n) => self.note(n),
            Err(Error::TimedOut { .. }) => {}
            Err(e) => self.lose(&e),
        }
    }

    /// An idle look: what came meanwhile is read (and mostly ignored), and
    /// a connection that ended is said.
    fn look(&mut self) {
        for _ in 0..DRAIN {
            let Some(conn) = self.conn.as_mut() else {
                return;
            };
            match conn.next_notification(Duration::from_millis(1)) {
                Ok(n) => self.note(n),
                Err(Error::TimedOut { .. }) => return,
                Err(e) => {
                    self.fail(&e, None);
                    return;
                }
            }
        }
    }

    /// Applies one notification to what is known of the threads and the
    /// task under way.
    fn note(&mut self, n: Notification) {
        match n.method.as_str() {
            "turn/started" => {
                if let Ok(w) = serde_json::from_value::<WithTurn>(n.params) {
                    if let Some(t) = w.thread_id {
                        self.active.insert(t, w.turn.id);
                    }
                }
            }
            "item/started" | "item/completed" => {
                if let Ok(w) = serde_json::from_value::<WithItem>(n.params) {
                    self.item(w);
                }
            }
            "turn/completed" => {
                if let Ok(w) = serde_json::from_value::<WithTurn>(n.params) {
                    self.completed(w);
                }
            }
            _ => {}
        }
    }

    fn item(&mut self, w: WithItem) {
        let Some(u) = self.task.as_mut() else {
            return;
        };
        let (Some(turn), Some(thread)) = (w.turn_id, w.thread_id) else {
            return;
        };
        if thread != u.thread_id {
            return;
        }
        let ours = w.item.kind == "userMessage"
            && w.item.client_id.as_deref() == Some(u.message_id.as_str());
        if ours && u.turn_id.is_none() {
            u.turn_id = Some(turn.clone());
            u.submission = None;
            let id = u.message_id.clone();
            self.started(id, thread, turn.clone());
            self.send_interrupt();
            return;
        }
        if u.turn_id.as_deref() == Some(turn.as_str()) {
            if let Some(text) = w.item.agent_text() {
                u.said = Some(text.to_string());
            }
        }
    }

    fn completed(&mut self, w: WithTurn) {
        let Some(thread) = w.thread_id else {
            return;
        };
        if self.active.get(&thread) == Some(&w.turn.id) {
            self.active.remove(&thread);
        }
        let Some(u) = self.task.as_ref().filter(|u| u.thread_id == thread) else {
            return;
        };
        if u.turn_id.as_deref() == Some(w.turn.id.as_str()) {
            let u = self.task.take().expect("checked");
            self.report(Report::Ended {
                message_id: u.message_id,
                followers: u.followers,
                end: TurnEnd::of(thread, w.turn, u.said),
            });
            return;
        }
        // Another turn was interrupted while ours waited behind it: the
        // queue does not move on its own then.
        if let (TurnStatus::Interrupted, Some(sub)) = (w.turn.status, u.submission.clone()) {
            if let Some(conn) = self.conn.as_mut() {
                if let Err(e) = conn.queue_start(&thread, &sub) {
                    if !matches!(e, Error::Rpc { .. }) {
                        self.lose(&e);
                    }
                }
            }
        }
    }

    /// Sends the interrupt asked for, once the task's turn is known.
    fn send_interrupt(&mut self) {
        let Some(u) = self.task.as_mut() else {
            return;
        };
        let (true, false, Some(turn)) = (u.interrupt, u.interrupt_sent, u.turn_id.clone()) else {
            return;
        };
        u.interrupt_sent = true;
        let thread = u.thread_id.clone();
        let Some(conn) = self.conn.as_mut() else {
            return;
        };
        match conn.interrupt(&thread, &turn) {
            // Refused: the turn ended meanwhile; its end is on the way.
            Ok(()) | Err(Error::Rpc { .. }) => {}
            Err(e) => self.lose(&e),
        }
    }

    /// The connection broke under the task's turn: given up, and said
    /// with the task (and the steer tasks that joined it) as sent.
    fn lose(&mut self, e: &Error) {
        let lost = self.task.take().map(|u| Lost {
            message_id: u.message_id,
            sent: true,
            followers: u.followers,
        });
        self.fail(e, lost);
    }

    /// The connection is given up after `e`; said, with the task it took.
    fn fail(&mut self, e: &Error, lost: Option<Lost>) {
        self.conn = None;
        self.report(Report::Down {
            why: e.to_string(),
            lost,
        });
    }
}
