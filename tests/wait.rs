//! `baton send --wait`: the sender waits for the task's final outcome at
//! the receiver and prints its reply. The receiver here is a stand-in
//! (`Receiver`, a thread speaking the wire over a Unix socket, as the
//! peers in zcoder.rs do) that answers `task/status` and records
//! `task.ended` as the contract says, so the sender is tested on its own:
//! that it subscribes before it asks, never polls a live receiver, finds a
//! restarted receiver by name, gives up at `--timeout` with exit 5, ends by
//! SIGINT without touching the task, and what it prints.

use std::collections::HashMap;
use std::fs;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::DirBuilderExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use serde_json::{Value, json};

use crate::util::{Env, Output, Proc, blocked, exited_or_killed, fake_manifest, wait_until};

/// The bound on every wait in this file.
const T: Duration = Duration::from_secs(10);

/// What the stand-in receiver knows and has been asked.
#[derive(Default)]
struct Book {
    /// `task/status` results by message id.
    tasks: HashMap<String, Value>,
    /// Every method called, in order.
    calls: Vec<String>,
    /// The write ends of the subscribed connections.
    subscribers: Vec<Arc<Mutex<UnixStream>>>,
    /// Every connection, to close them all when it stops.
    conns: Vec<UnixStream>,
    next_seq: u64,
}

/// A stand-in baton instance named `name`: published in the registry
/// under the test's own pid, one thread per connection.
struct Receiver {
    id: String,
    registry: PathBuf,
    book: Arc<Mutex<Book>>,
    stop: Arc<AtomicBool>,
    thread: Option<thread::JoinHandle<()>>,
}

impl Receiver {
    fn start(env: &Env, name: &str, book: Book) -> Receiver {
        let _ = fs::DirBuilder::new().mode(0o700).create(&env.registry);
        let registry = fs::canonicalize(&env.registry).unwrap();
        let id = fake_manifest(&registry, std::process::id(), name, "/nowhere");
        let listener = UnixListener::bind(registry.join(format!("a-{id}.sock"))).unwrap();
        listener.set_nonblocking(true).unwrap();
        let book = Arc::new(Mutex::new(book));
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let (book, stop, id) = (book.clone(), stop.clone(), id.clone());
            thread::spawn(move || {
                while !stop.load(Ordering::SeqCst) {
                    match listener.accept() {
                        Ok((conn, _)) => {
                            conn.set_nonblocking(false).unwrap();
                            book.lock().unwrap().conns.push(conn.try_clone().unwrap());
                            let (book, id) = (book.clone(), id.clone());
                            thread::spawn(move || serve_conn(conn, &book, &id));
                        }
                        Err(_) => thread::sleep(Duration::from_millis(5)),
                    }
                }
            })
        };
        Receiver {
            id,
            registry,
            book,
            stop,
            thread: Some(thread),
        }
    }

    fn calls(&self) -> Vec<String> {
        self.book.lock().unwrap().calls.clone()
    }

    fn count(&self, method: &str) -> usize {
        self.calls().iter().filter(|m| *m == method).count()
    }

    /// Records `task.ended` for `id`: its status becomes final, and every
    /// subscriber gets the event.
    fn end(&self, id: &str, outcome: &str, reply: Option<&str>) {
        let reply = reply.map(|b| json!({"message_id": "reply-1", "body": b}));
        let mut book = self.book.lock().unwrap();
        book.tasks.insert(
            id.into(),
            json!({"message_id": id, "status": outcome, "finished_at": 1.0, "reply": reply}),
        );
        book.next_seq += 1;
        let ev = json!({"jsonrpc": "2.0", "method": "event", "params": {
            "seq": book.next_seq, "time": 1.0, "kind": "task.ended",
            "message_id": id, "outcome": outcome, "reply": reply,
        }});
        for s in &book.subscribers {
            let _ = writeln!(s.lock().unwrap(), "{ev}");
        }
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        for c in &self.book.lock().unwrap().conns {
            let _ = c.shutdown(std::net::Shutdown::Both);
        }
        let _ = fs::remove_file(self.registry.join(format!("a-{}.json", self.id)));
        let _ = fs::remove_file(self.registry.join(format!("a-{}.sock", self.id)));
    }
}

/// A task the receiver holds with a status that is not final.
fn holding(id: &str, status: &str) -> Book {
    let mut book = Book::default();
    book.tasks.insert(
        id.into(),
        json!({"message_id": id, "status": status, "queue_position": 1}),
    );
    book
}

fn serve_conn(conn: UnixStream, book: &Mutex<Book>, id: &str) {
    conn.set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let out = Arc::new(Mutex::new(conn.try_clone().unwrap()));
    for line in BufReader::new(conn).lines() {
        let Ok(line) = line else { return };
        let Ok(req) = serde_json::from_str::<Value>(&line) else {
            return;
        };
        let method = req["method"].as_str().unwrap_or("").to_string();
        let params = &req["params"];
        let mut b = book.lock().unwrap();
        b.calls.push(method.clone());
        let result = match method.as_str() {
            "initialize" => {
                json!({"protocol_version": 1, "server": {"name": "baton", "version": "0.1.0"},
                "instance": {"instance_id": id}, "capabilities": []})
            }
            "ping" => json!({"status": "pong", "instance_id": id, "state": "ready"}),
            "message/send" => {
                let mid = params["message_id"].as_str().unwrap_or("").to_string();
                b.tasks.entry(mid.clone()).or_insert_with(
                    || json!({"message_id": mid, "status": "queued", "queue_position": 1}),
                );
                json!({"status": "accepted", "message_id": mid, "queue_position": 1, "state": "ready"})
            }
            "events/subscribe" => {
                b.subscribers.push(out.clone());
                json!({"subscribed": true, "next_seq": b.next_seq + 1, "controller": false})
            }
            "task/status" => {
                let mid = params["message_id"].as_str().unwrap_or("");
                b.tasks
                    .get(mid)
                    .cloned()
                    .unwrap_or_else(|| json!({"message_id": mid, "status": "unknown"}))
            }
            _ => {
                let e = json!({"jsonrpc": "2.0", "id": req["id"],
                    "error": {"code": -32601, "message": format!("method not found: {method}")}});
                let _ = writeln!(out.lock().unwrap(), "{e}");
                continue;
            }
        };
        let answer = json!({"jsonrpc": "2.0", "id": req["id"], "result": result});
        let _ = writeln!(out.lock().unwrap(), "{answer}");
    }
}

/// `baton send --wait` running in the background.
fn start_wait(env: &Env, args: &[&str]) -> Proc {
    let ws = env.workspace("sender");
    let mut full = vec!["send", "--wait"];
    full.extend_from_slice(args);
    env.spawn(&full, &ws)
}

/// Waits for a background `baton send --wait` to exit; its exit code.
fn exited(p: &mut Proc) -> i32 {
    p.wait_exit(T).unwrap_or_else(|| {
        panic!(
            "send --wait still running after {T:?}\nstderr:\n{}",
            p.stderr()
        )
    })
}

/// Methods that would change the task: a waiting sender calls none.
const WITHDRAWALS: &[&str] = &[
    "inbox/discard",
    "inbox/requeue",
    "inbox/complete",
    "turn/cancel",
    "approval/respond",
];

fn untouched(r: &Receiver) {
    let calls = r.calls();
    for w in WITHDRAWALS {
        assert!(
            !calls.iter().any(|c| c == w),
            "the sender called {w}: {calls:?}"
        );
    }
}

fn parse(out: &str) -> Value {
    serde_json::from_str(out)
        .unwrap_or_else(|e| panic!("stdout is not one JSON object ({e}): {out:?}"))
}

#[test]
fn wait_prints_the_reply_when_task_ended_arrives_and_asks_the_status_once() {
    let env = Env::new();
    let r = Receiver::start(&env, "rx", Book::default());
    let mut p = start_wait(&env, &["rx", "do it", "--message-id", "w-1"]);
    // Subscribed first, then asked: the order that misses nothing.
    wait_until("the sender to ask task/status", T, || {
        r.count("task/status") == 1
    });
    let calls = r.calls();
    let sub = calls.iter().rposition(|c| c == "events/subscribe").unwrap();
    let ask = calls.iter().position(|c| c == "task/status").unwrap();
    assert!(sub < ask, "{calls:?}");
    // Once it has read the answer (queued) and blocks again.
    blocked(p.pid());
    assert!(
        p.is_running(),
        "it stopped while the task was queued: {}",
        p.stderr()
    );
    r.end("w-1", "done", Some("all done\nsecond line"));
    assert_eq!(exited(&mut p), 0, "{}", p.stderr());
    assert_eq!(p.stdout(), "all done\nsecond line\n");
    // No polling: one status request, on one subscription.
    assert_eq!(r.count("task/status"), 1, "{:?}", r.calls());
    assert_eq!(r.count("events/subscribe"), 1, "{:?}", r.calls());
    untouched(&r);
}

#[test]
fn wait_exits_1_for_every_outcome_but_done_and_still_prints_a_reply() {
    for outcome in [
        "failed",
        "timeout",
        "cancelled",
        "interrupted",
        "expired",
        "rejected",
        "discarded",
        "denied",
    ] {
        let env = Env::new();
        let r = Receiver::start(&env, "rx", Book::default());
        let mut p = start_wait(&env, &["rx", "do it", "--message-id", "w-2"]);
        wait_until("the sender to ask task/status", T, || {
            r.count("task/status") == 1
        });
        r.end("w-2", outcome, Some("partial"));
        assert_eq!(exited(&mut p), 1, "{outcome}: {}", p.stderr());
        assert_eq!(p.stdout(), "partial\n", "{outcome}");
        assert!(
            p.stderr()
                .contains(&format!("message w-2 ended {outcome} at rx")),
            "{outcome}: {}",
            p.stderr()
        );
    }
}

#[test]
fn wait_takes_a_final_status_answer_without_an_event() {
    let env = Env::new();
    let mut book = Book::default();
    book.tasks.insert(
        "w-3".into(),
        json!({"message_id": "w-3", "status": "done", "finished_at": 1.0, "reply": null}),
    );
    let r = Receiver::start(&env, "rx", book);
    // A duplicate of a task that already ended: the status says so.
    let out = env.run(&[
        "send",
        "--wait",
        "--json",
        "rx",
        "again",
        "--message-id",
        "w-3",
    ]);
    assert_eq!(out.status, 0, "{out:?}");
    let v = parse(&out.stdout);
    assert_eq!(v["status"], "accepted");
    assert_eq!(v["message_id"], "w-3");
    assert_eq!(v["outcome"], "done");
    assert_eq!(v["reply"], Value::Null);
    assert_eq!(v["target"]["name"], "rx");
    drop(r);
}

#[test]
fn wait_json_carries_the_outcome_and_the_reply_text() {
    let env = Env::new();
    let r = Receiver::start(&env, "rx", Book::default());
    let mut p = start_wait(&env, &["--json", "rx", "do it", "--message-id", "w-4"]);
    wait_until("the sender to ask task/status", T, || {
        r.count("task/status") == 1
    });
    r.end("w-4", "failed", Some("it broke"));
    assert_eq!(exited(&mut p), 1, "{}", p.stderr());
    let v = parse(&p.stdout());
    assert_eq!(v["status"], "accepted");
    assert_eq!(v["outcome"], "failed");
    assert_eq!(v["reply"], "it broke");
    assert_eq!(p.stderr(), "", "--json says everything on stdout");
}

#[test]
fn wait_timeout_exits_5_and_leaves_the_task_queued() {
    let env = Env::new();
    let r = Receiver::start(&env, "rx", Book::default());
    let out = env.run(&[
        "send",
        "--wait",
        "--timeout",
        "0.5",
        "rx",
        "slow",
        "--message-id",
        "w-5",
    ]);
    assert_eq!(out.status, 5, "{out:?}");
    assert_eq!(out.stdout, "");
    assert!(
        out.stderr
            .contains("stopped waiting after --timeout; message w-5 is still queued at rx"),
        "{out:?}"
    );
    let json = env.run(&[
        "send",
        "--wait",
        "--json",
        "--timeout",
        "0.3",
        "rx",
        "slow",
        "--message-id",
        "w-5",
    ]);
    assert_eq!(json.status, 5, "{json:?}");
    let v = parse(&json.stdout);
    assert_eq!(v["outcome"], Value::Null);
    assert_eq!(v["reply"], Value::Null);
    assert_eq!(v["timed_out"], true);
    assert_eq!(v["task_status"], "queued");
    untouched(&r);
    assert_eq!(r.book.lock().unwrap().tasks["w-5"]["status"], "queued");
}

#[test]
fn wait_follows_a_restarted_receiver_by_name() {
    let env = Env::new();
    let first = Receiver::start(&env, "rx", Book::default());
    let mut p = start_wait(&env, &["rx", "survive", "--message-id", "w-6"]);
    wait_until("the sender to ask task/status", T, || {
        first.count("task/status") == 1
    });
    drop(first);
    // The same name, a new instance id; it knows the task (same spool),
    // which is running now.
    let second = Receiver::start(&env, "rx", holding("w-6", "running"));
    wait_until("the sender to find the new instance", T, || {
        second.count("task/status") == 1
    });
    assert!(p.is_running(), "{}", p.stderr());
    second.end("w-6", "done", Some("made it"));
    assert_eq!(exited(&mut p), 0, "{}", p.stderr());
    assert_eq!(p.stdout(), "made it\n");
    untouched(&second);
}

#[test]
fn wait_says_when_the_receiver_no_longer_knows_the_task() {
    let env = Env::new();
    let first = Receiver::start(&env, "rx", Book::default());
    let mut p = start_wait(&env, &["rx", "lost", "--message-id", "w-7"]);
    wait_until("the sender to ask task/status", T, || {
        first.count("task/status") == 1
    });
    drop(first);
    let _other = Receiver::start(&env, "rx", Book::default());
    assert_eq!(exited(&mut p), 1, "{}", p.stderr());
    assert!(
        p.stderr().contains("rx does not know message w-7"),
        "{}",
        p.stderr()
    );
}

#[test]
fn wait_ends_by_sigint_and_leaves_the_task_alone() {
    let env = Env::new();
    let r = Receiver::start(&env, "rx", Book::default());
    let ws = env.workspace("sender");
    let mut cmd = env.cmd();
    cmd.args([
        "send",
        "--wait",
        "rx",
        "interrupt me",
        "--message-id",
        "w-8",
    ])
    .current_dir(&ws)
    .stdout(std::process::Stdio::null())
    .stderr(std::process::Stdio::null());
    // A shell runs a foreground command with SIGINT at its default action,
    // whatever the test harness was started with.
    // SAFETY: signal(2) is async-signal-safe and touches no memory of the
    // parent; this runs in the child between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            libc::signal(libc::SIGINT, libc::SIG_DFL);
            Ok(())
        });
    }
    let mut child = cmd.spawn().unwrap();
    wait_until("the sender to ask task/status", T, || {
        r.count("task/status") == 1
    });
    let calls_before = r.calls().len();
    // SAFETY: kill(2) has no memory-safety preconditions; the pid is our
    // unreaped child.
    unsafe {
        libc::kill(child.id() as libc::pid_t, libc::SIGINT);
    }
    let code = exited_or_killed(&mut child, T).map(crate::util::exit_code);
    assert_eq!(
        code,
        Some(130),
        "the sender's exit on SIGINT (None: not within {T:?})"
    );
    assert_eq!(r.calls().len(), calls_before, "{:?}", r.calls());
    assert_eq!(r.book.lock().unwrap().tasks["w-8"]["status"], "queued");
    untouched(&r);
}

#[test]
fn wait_on_a_refused_send_reports_the_refusal_with_no_outcome() {
    let env = Env::new();
    let ws = env.workspace("rx");
    let _served = env.serve(&ws, &["--name", "rx", "--paused"]);
    let out = env.run(&["send", "--wait", "rx", "no", "--message-id", "w-9"]);
    assert_eq!(out.status, 1, "{out:?}");
    assert!(
        out.stderr.contains("refused message w-9: paused"),
        "{out:?}"
    );
    let json = env.run(&[
        "send",
        "--wait",
        "--json",
        "rx",
        "no",
        "--message-id",
        "w-9",
    ]);
    assert_eq!(json.status, 1, "{json:?}");
    let v = parse(&json.stdout);
    assert_eq!(v["status"], "paused");
    assert_eq!(v["outcome"], Value::Null);
    assert_eq!(v["reply"], Value::Null);
}

#[test]
fn wait_for_a_stored_task_starts_when_the_agent_does() {
    let env = Env::new();
    let ws = env.workspace("rx");
    // A spool with the name, and no instance running.
    let mut s = env.serve(&ws, &["--name", "rx"]);
    assert_eq!(s.proc.term(), 0);
    let mut p = start_wait(&env, &["rx", "later", "--message-id", "w-10"]);
    wait_until("the sender to say it waits for rx", T, || {
        p.stderr()
            .contains("rx is not running; waiting for it to start")
    });
    let r = Receiver::start(&env, "rx", holding("w-10", "queued"));
    wait_until("the sender to find rx", T, || r.count("task/status") == 1);
    r.end("w-10", "done", Some("ran at last"));
    assert_eq!(exited(&mut p), 0, "{}", p.stderr());
    assert_eq!(p.stdout(), "ran at last\n");
    assert!(
        p.stderr().contains("stored: message w-10 to rx"),
        "{}",
        p.stderr()
    );
}

#[test]
fn wait_and_timeout_are_checked_before_anything_is_sent() {
    let env = Env::new();
    let bad: &[(&[&str], &str)] = &[
        (
            &["send", "rx", "m", "--timeout", "3"],
            "--timeout bounds the wait, so it needs --wait",
        ),
        (
            &["send", "--wait", "rx", "m", "--timeout", "soon"],
            "--timeout soon: use a number of seconds above 0",
        ),
        (
            &["send", "--wait", "rx", "m", "--timeout", "0"],
            "use a number of seconds above 0",
        ),
        (&["send", "--wait", "--reply", "m"], "does not take --wait"),
    ];
    for (args, says) in bad {
        let out: Output = env.run(args);
        assert_eq!(out.status, 2, "{args:?}: {out:?}");
        assert!(out.stderr.contains(says), "{args:?}: {out:?}");
    }
}

/// End to end, against real instances: an exec agent with `--reply`
/// answers, and `send --wait` prints the reply and exits 0; a handler
/// that fails is exit 1 with the outcome in `--json`; a task for a stopped
/// agent is waited for until `--timeout` (exit 5) and stays queued, and a
/// later wait for it ends once the agent starts and runs it.
#[test]
fn wait_against_real_instances_done_failed_and_stored() {
    let env = Env::new();
    let ws = env.workspace("bob");
    let mut bob = env.serve(
        &ws,
        &[
            "--name",
            "bob",
            "--exec",
            "cat >/dev/null; echo answered",
            "--reply",
        ],
    );
    let out = env.run(&["send", "--wait", "bob", "hello"]);
    assert_eq!(out.status, 0, "{out:?}");
    assert_eq!(out.stdout, "answered\n", "{out:?}");
    assert_eq!(bob.term(), 0, "{}", bob.stderr());

    let ws_f = env.workspace("fails");
    let mut fails = env.serve(
        &ws_f,
        &["--name", "fails", "--exec", "cat >/dev/null; exit 3"],
    );
    let out = env.run(&["send", "--wait", "--json", "fails", "x"]);
    assert_eq!(out.status, 1, "{out:?}");
    let v = parse(&out.stdout);
    assert_eq!(v["status"], "accepted", "{v}");
    assert_eq!(v["outcome"], "failed", "{v}");
    assert_eq!(v["reply"], Value::Null, "{v}");
    assert_eq!(fails.term(), 0, "{}", fails.stderr());

    // bob is stopped now: the task is stored, and the wait times out.
    let out = env.run(&[
        "send",
        "--wait",
        "--timeout",
        "1",
        "--json",
        "--message-id",
        "later-1",
        "bob",
        "later",
    ]);
    assert_eq!(out.status, 5, "{out:?}");
    let v = parse(&out.stdout);
    assert_eq!(v["status"], "stored", "{v}");
    assert_eq!(v["outcome"], Value::Null, "{v}");
    // The same id again is a duplicate; this wait ends once bob runs it.
    let mut waiter = start_wait(
        &env,
        &["--timeout", "20", "--message-id", "later-1", "bob", "later"],
    );
    let mut bob = env.serve(
        &ws,
        &[
            "--name",
            "bob",
            "--exec",
            "cat >/dev/null; echo answered later",
            "--reply",
        ],
    );
    assert_eq!(exited(&mut waiter), 0, "{}", waiter.stderr());
    assert_eq!(waiter.stdout(), "answered later\n");
    assert_eq!(bob.term(), 0, "{}", bob.stderr());
}

/// The receiver restarting mid-wait, with real instances: accepted and
/// queued by a pull instance that is then stopped (SIGTERM) and killed
/// (SIGKILL, after the restart), the wait finds the next instance of the
/// name and ends when it runs the task.
#[test]
fn wait_survives_a_real_receiver_stopping_and_being_killed() {
    let env = Env::new();
    let ws = env.workspace("bob");
    let mut bob = env.serve(&ws, &["--name", "bob"]);
    let mut waiter = start_wait(&env, &["--message-id", "r-1", "bob", "hi"]);
    let mut c = bob.client();
    wait_until("the task queued", T, || bob.queued(&mut c) == 1);
    drop(c);
    assert_eq!(bob.term(), 0, "{}", bob.stderr());
    wait_until("the wait to see bob stopped", T, || {
        waiter
            .stderr()
            .contains("bob is not running; waiting for it to start")
    });
    let mut bob = env.serve(&ws, &["--name", "bob"]);
    // The waiter's connection is two more descriptors in the instance.
    let fds = |pid: u32| fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count());
    let idle = fds(bob.pid());
    wait_until("the wait to connect to the new instance", T, || {
        fds(bob.pid()) >= idle + 2
    });
    bob.kill9();
    let mut bob = env.serve(
        &ws,
        &[
            "--name",
            "bob",
            "--exec",
            "cat >/dev/null; echo ran",
            "--reply",
        ],
    );
    assert_eq!(exited(&mut waiter), 0, "{}", waiter.stderr());
    assert_eq!(waiter.stdout(), "ran\n");
    assert_eq!(bob.term(), 0, "{}", bob.stderr());
}

/// `send --from NAME --wait`: the live instance NAME sends, and the wait
/// follows the task as for a plain send; the reply is printed and also
/// lands in NAME's inbox.
#[test]
fn wait_works_for_a_send_from_an_instance() {
    let env = Env::new();
    let ws_a = env.workspace("alice");
    let ws_b = env.workspace("bob");
    let mut alice = env.serve(&ws_a, &["--name", "alice"]);
    let mut bob = env.serve(
        &ws_b,
        &[
            "--name",
            "bob",
            "--exec",
            "cat >/dev/null; echo from bob",
            "--reply",
        ],
    );
    let out = env.run(&["send", "--from", "alice", "--wait", "bob", "hi"]);
    assert_eq!(out.status, 0, "{out:?}");
    assert_eq!(out.stdout, "from bob\n", "{out:?}");
    // The reply printed was also sent to alice: received, not queued.
    wait_until("the reply received at alice", T, || {
        let l = env.run(&["inbox", "list", "--all", "alice", "--json"]);
        l.stdout.contains("\"outcome\":\"received\"")
    });
    let l = env.run(&["inbox", "list", "alice", "--json"]);
    assert!(l.stdout.contains("\"queued\":[]"), "{l:?}");
    assert_eq!(bob.term(), 0, "{}", bob.stderr());
    assert_eq!(alice.term(), 0, "{}", alice.stderr());
}
