//! Issue 21, "commands that say what they mean": `wake` on a running agent,
//! `send` at a terminal, usage errors that name what was wrong, the body
//! limit's error, `send --reply` outside a turn and the reply hint of a
//! claimed task, `stop` and `forget`. (Completions: tests/docs.rs; the
//! demo: tests/lifecycle.rs.)

use crate::util::{
    Env, Output, PANE_POLL, baton_bin, fake_manifest, finish, have, poll, wait_for, wait_until,
};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

/// Bound for anything that should take well under a second.
const T: Duration = Duration::from_secs(10);

fn usage(out: &Output, what: &str) {
    assert_eq!(out.status, 2, "{what}: {out:?}");
}

#[test]
fn wake_succeeds_at_once_when_the_agent_runs_without_a_wake_socket() {
    let env = Env::new();
    let ws = env.workspace("ws");
    let s = env.serve(&ws, &["--name", "awake"]);
    let out = env.run(&["wake", "awake"]);
    assert_eq!(out.status, 0, "{out:?}");
    assert_eq!(
        out.stdout,
        format!("awake is running: pid {}, instance {}\n", s.pid(), s.id)
    );
    // Not running and no wake socket: no such target, as before.
    let out = env.run(&["wake", "asleep"]);
    assert_eq!(out.status, 3, "{out:?}");
    assert!(
        out.stderr
            .contains("asleep is not running and has no wake socket"),
        "{out:?}"
    );
}

#[test]
fn usage_errors_name_what_was_wrong_once() {
    let env = Env::new();
    let out = env.run(&["--name"]);
    usage(&out, "baton --name");
    assert_eq!(out.stderr, "baton: --name needs a value\n");
    // The help it points to exists.
    let out = env.run(&["-x"]);
    usage(&out, "baton -x");
    assert!(!out.stderr.contains("help baton"), "{out:?}");
    assert!(out.stderr.contains("'baton help serve'"), "{out:?}");
    assert_eq!(env.run(&["help", "serve"]).status, 0);
    assert_eq!(env.run(&["--help"]).status, 0);
    // An empty TARGET is a usage error, for send as for the others.
    for args in [
        &["send", "", "hi"][..],
        &["send", " ", "hi"],
        &["ping", ""],
        &["status", ""],
        &["send", "--from", "", "x", "hi"],
    ] {
        let out = env.run(args);
        usage(&out, &format!("{args:?}"));
        assert!(
            out.stderr
                .contains("is empty: name an instance by its id or name"),
            "{out:?}"
        );
    }
}

#[test]
fn names_dot_and_dot_dot_are_refused_everywhere() {
    let env = Env::new();
    let ws = env.workspace("ws");
    for name in [".", "..", "a/b", ""] {
        for args in [
            vec!["serve", "--name", name],
            vec!["--name", name],
            vec!["mcp", "--name", name],
            vec!["wake", name],
            vec!["forget", name, "--yes"],
        ] {
            let out = env.run_with(&[], Some(&ws), &args, None);
            usage(&out, &format!("{args:?}"));
            assert!(
                out.stderr
                    .contains("a name is 1 to 64 of A-Z a-z 0-9 _ . - and not . or .."),
                "{args:?}: {out:?}"
            );
        }
    }
    // Nothing was started or stored.
    assert!(!env.state.join("baton").join("spool").exists());
}

#[test]
fn the_body_limit_error_gives_the_size_and_the_receiver() {
    let env = Env::new();
    let ws = env.workspace("ws");
    // The receiver's limit decides, whatever the sender's is.
    let limit = [("BATON_MAX_MESSAGE_BYTES", "100")];
    let s = env.serve_with(&ws, &limit, &["--name", "big"]);
    let body = "x".repeat(150);
    for (arg, stdin) in [(body.as_str(), None), ("-", Some(body.as_bytes()))] {
        let out = env.run_with(&[], None, &["send", "big", arg], stdin);
        assert_eq!(out.status, 1, "{out:?}");
        assert!(
            out.stderr.ends_with(
                ": invalid: the message is 150 bytes; big accepts at most 100 (BATON_MAX_MESSAGE_BYTES at big)\n"
            ),
            "{out:?}"
        );
    }
    assert_eq!(s.queued(&mut s.client()), 0);
    // Over the most any instance accepts: a usage error, before a look
    // at any receiver.
    let huge = vec![b'x'; (16 << 20) + 1];
    let out = env.run_with(&[], None, &["send", "nobody", "-"], Some(&huge));
    usage(&out, "a body over the ceiling");
    assert_eq!(
        out.stderr,
        "baton: send: the message is 16777217 bytes, over the most any instance accepts \
         (16777216 bytes, the highest BATON_MAX_MESSAGE_BYTES); zcoder peers keep their limit \
         of 16,000 bytes\n"
    );
    // send takes one host.
    let out = env.run(&["send", "--via", "ssh a", "--via", "ssh b", "big", "hi"]);
    usage(&out, "two --via for send");
    assert!(out.stderr.contains("--via takes one host"), "{out:?}");
}

#[test]
fn send_reply_outside_a_turn_says_so_even_with_nothing_on_stdin() {
    let env = Env::new();
    let out = env.run_stdin(&["send", "--reply"], b"");
    usage(&out, "send --reply outside a turn");
    assert!(out.stderr.contains("works only inside one"), "{out:?}");
    assert!(
        out.stderr.contains("baton inbox complete ID --reply TEXT"),
        "{out:?}"
    );
    assert!(!out.stderr.contains("empty"), "{out:?}");
}

#[test]
fn a_claimed_task_says_how_to_reply_from_a_shell_and_that_works() {
    let env = Env::new();
    let (wa, wb) = (env.workspace("a"), env.workspace("b"));
    let _a = env.serve(&wa, &["--name", "alice"]);
    let b = env.serve(&wb, &["--name", "bob"]);
    let out = env.run(&[
        "send",
        "--from",
        "bob",
        "--message-id",
        "q-1",
        "alice",
        "what now?",
    ]);
    assert_eq!(out.status, 0, "{out:?}");
    let out = env.run(&["inbox", "claim", "alice"]);
    assert_eq!(out.status, 0, "{out:?}");
    let hint = "[to reply: baton inbox complete alice q-1 --reply \"TEXT\"]\n";
    assert!(out.stdout.contains(hint), "{out:?}");
    assert!(!out.stdout.contains("send --reply"), "{out:?}");
    // The stderr no longer repeats it with a long BATON_SOCKET=... line.
    assert!(!out.stderr.contains("BATON_TURN"), "{out:?}");
    // The hint, run as written (TEXT replaced), answers bob.
    let out = env.run(&["inbox", "complete", "alice", "q-1", "--reply", "this"]);
    assert_eq!(out.status, 0, "{out:?}");
    // A delivered reply is said so, not "not sent".
    assert!(!out.stderr.contains("not sent"), "{out:?}");
    assert!(out.stdout.contains(" accepted by bob\n"), "{out:?}");
    wait_until("the reply in bob's inbox", T, || {
        b.queued(&mut b.client()) == 1
    });
}

#[test]
fn stop_ends_an_instance_and_says_so() {
    let env = Env::new();
    let ws = env.workspace("ws");
    let mut s = env.serve(&ws, &["--name", "victim"]);
    let out = env.run(&["stop", "victim"]);
    assert_eq!(out.status, 0, "{out:?}");
    assert_eq!(
        out.stdout,
        format!("stopped victim ({}, pid {})\n", s.id, s.pid())
    );
    // It exited on its SIGTERM, in order, and unpublished itself.
    assert_eq!(s.wait_exit(T), Some(0));
    assert!(!s.manifest_path.exists());
    // No such instance now; no NAME at all.
    assert_eq!(env.run(&["stop", "victim"]).status, 3);
    usage(&env.run(&["stop"]), "stop without NAME");
}

#[test]
fn stop_never_signals_a_pid_its_socket_does_not_vouch_for() {
    let env = Env::new();
    let ws = env.workspace("ws");
    let real = env.serve(&ws, &["--name", "real"]);
    let mut bystander = Command::new("sleep").arg("30").spawn().unwrap();
    // A manifest naming the bystander's pid, whose socket (a hard link to
    // the real instance's) answers as another instance.
    let id = fake_manifest(
        &real.registry,
        bystander.id(),
        "impostor",
        &ws.display().to_string(),
    );
    fs::hard_link(&real.socket, real.registry.join(format!("a-{id}.sock"))).unwrap();
    let out = env.run(&["stop", "impostor"]);
    assert_eq!(out.status, 3, "{out:?}");
    assert!(
        bystander.try_wait().unwrap().is_none(),
        "the bystander was signalled"
    );
    // Nor a manifest whose socket is not there at all.
    let id2 = fake_manifest(&real.registry, bystander.id(), "ghost", "/");
    let out = env.run(&["stop", &id2]);
    assert!(matches!(out.status, 3 | 4), "{out:?}");
    assert!(
        bystander.try_wait().unwrap().is_none(),
        "the bystander was signalled"
    );
    let _ = bystander.kill();
    let _ = bystander.wait();
    assert_eq!(env.run(&["ping", "real"]).status, 0);
}

/// The one spool directory under the state home.
fn only_spool(env: &Env) -> PathBuf {
    let root = env.state.join("baton").join("spool");
    let all: Vec<PathBuf> = fs::read_dir(&root)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(all.len(), 1, "{all:?}");
    all[0].clone()
}

/// A stopped agent `gone` with one task stored in its spool.
fn stopped_with_a_task(env: &Env) -> PathBuf {
    let ws = env.workspace("gone");
    let mut s = env.serve(&ws, &["--name", "gone"]);
    assert_eq!(env.run(&["send", "gone", "one"]).status, 0);
    s.term();
    only_spool(env)
}

#[test]
fn forget_removes_a_stopped_names_spool_with_yes_and_not_without() {
    let env = Env::new();
    let spool = stopped_with_a_task(&env);
    // Not a terminal and no --yes: it shows what is there and refuses.
    let out = env.run(&["forget", "gone"]);
    usage(&out, "forget without --yes off a terminal");
    assert!(
        out.stdout.contains("holds 1 queued, 0 processing"),
        "{out:?}"
    );
    assert!(out.stderr.contains("add --yes"), "{out:?}");
    assert!(spool.join("meta.json").exists());
    assert!(env.run(&["list", "--offline"]).stdout.contains("gone"));
    // With --yes it goes, and list --offline no longer names it.
    let out = env.run(&["forget", "gone", "--yes"]);
    assert_eq!(out.status, 0, "{out:?}");
    assert!(out.stdout.contains("gone (workspace "), "{out:?}");
    assert!(
        out.stdout.ends_with("forgot gone: its spool is removed\n"),
        "{out:?}"
    );
    assert!(!spool.exists());
    let out = env.run(&["list", "--offline", "--json"]);
    assert_eq!(out.stdout.trim(), "[]", "{out:?}");
    // Nothing of that name now.
    assert_eq!(env.run(&["forget", "gone", "--yes"]).status, 3);
}

#[test]
fn forget_never_removes_a_live_spool() {
    let env = Env::new();
    let ws = env.workspace("live");
    let _s = env.serve(&ws, &["--name", "live"]);
    let out = env.run(&["forget", "live", "--yes"]);
    usage(&out, "forget on a running name");
    assert!(out.stderr.contains("live is running"), "{out:?}");
    assert!(only_spool(&env).join("meta.json").exists());
}

#[test]
fn forget_refuses_while_the_spool_lock_is_held() {
    let env = Env::new();
    let spool = stopped_with_a_task(&env);
    // Someone holds the lock, as an agent starting or a sender storing.
    let lock = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(spool.join("lock"))
        .unwrap();
    use std::os::fd::AsRawFd;
    // SAFETY: flock on a descriptor this test owns.
    assert_eq!(unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX) }, 0);
    let out = env.run(&["forget", "gone", "--yes"]);
    usage(&out, "forget while the lock is held");
    assert!(out.stderr.contains("is in use"), "{out:?}");
    assert!(spool.join("meta.json").exists());
    drop(lock);
    // Closing our descriptor frees the lock only once no process shares it:
    // another test's child, forked while we held it and not yet at its
    // exec, keeps it a moment longer. So `in use` may still be the answer
    // for that moment, and nothing else may.
    let out = wait_for(
        "forget once the lock is free",
        Duration::from_secs(10),
        || {
            let out = env.run(&["forget", "gone", "--yes"]);
            match out.status {
                0 => Some(out),
                2 if out.stderr.contains("is in use") => None,
                _ => panic!("forget after the lock was dropped: {out:?}"),
            }
        },
    );
    assert!(out.stdout.contains("gone (workspace "), "{out:?}");
    assert!(!spool.exists());
}

// ---------------------------------------------------------------------------
// At a terminal: a private tmux server.

/// A private tmux server with one pane running a script in the test
/// world's environment; dropping it kills the server.
struct Pane<'a> {
    env: &'a Env,
    socket: String,
}

impl<'a> Pane<'a> {
    fn start(env: &'a Env, body: &str) -> Pane<'a> {
        static N: AtomicUsize = AtomicUsize::new(0);
        let socket = format!(
            "baton-cmd-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        );
        let root = env.root.path();
        let q = |p: &Path| format!("'{}'", p.display());
        let script = root.join(format!("{socket}.sh"));
        fs::write(
            &script,
            format!(
                "export BATON_DIR={} XDG_STATE_HOME={} HOME={} TMPDIR={} PATH='{}' LANG=C.UTF-8\n\
                 BATON={}\n{body}\nsleep 30\n",
                q(&env.registry),
                q(&env.state),
                q(&root.join("home")),
                q(&root.join("tmp")),
                std::env::var("PATH").unwrap_or_default(),
                q(&baton_bin()),
            ),
        )
        .unwrap();
        let pane = Pane { env, socket };
        pane.tmux(&[
            "new-session",
            "-d",
            "-x",
            "120",
            "-y",
            "20",
            &format!("sh {}", script.display()),
        ]);
        pane
    }

    /// Runs one tmux command (10 s bound); returns its stdout.
    fn tmux(&self, args: &[&str]) -> String {
        let child = Command::new("tmux")
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", self.env.root.join("home"))
            .env("TMUX_TMPDIR", self.env.root.join("tmp"))
            .env("LANG", "C.UTF-8")
            .args(["-L", &self.socket, "-f", "/dev/null"])
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let out = finish(child, &format!("tmux {args:?}"), T);
        assert!(out.status.success(), "tmux {args:?}: {out:?}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn screen(&self) -> String {
        self.tmux(&["capture-pane", "-p"])
    }

    fn wait_for(&self, text: &str) -> String {
        let mut screen = String::new();
        let shown = poll(T, PANE_POLL, || {
            screen = self.screen();
            screen.contains(text).then_some(())
        });
        if shown.is_none() {
            panic!(
                "timed out after {T:?} waiting for {text:?} on the terminal; the pane:\n{screen}"
            );
        }
        screen
    }

    fn keys(&self, keys: &[&str]) {
        let mut args = vec!["send-keys"];
        args.extend_from_slice(keys);
        self.tmux(&args);
    }
}

impl Drop for Pane<'_> {
    fn drop(&mut self) {
        let _ = Command::new("tmux")
            .env("TMUX_TMPDIR", self.env.root.join("tmp"))
            .args(["-L", &self.socket, "kill-server"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

#[test]
fn send_at_a_terminal_says_it_reads_stdin() {
    let env = Env::new();
    let ws = env.workspace("ws");
    let s = env.serve(&ws, &["--name", "tty"]);
    // Piped: no word about it.
    let out = env.run_stdin(&["send", "tty"], b"piped task");
    assert_eq!(out.status, 0, "{out:?}");
    assert!(!out.stderr.contains("reading the task"), "{out:?}");
    if !have("tmux") {
        return;
    }
    let pane = Pane::start(&env, "\"$BATON\" send tty; echo \"send exited $?\"");
    pane.wait_for("baton: reading the task from stdin (end with Ctrl-D)");
    pane.keys(&["typed task", "Enter", "C-d"]);
    let screen = pane.wait_for("send exited");
    assert!(screen.contains("send exited 0"), "{screen}");
    assert!(screen.contains("accepted: tty ("), "{screen}");
    assert_eq!(s.queued(&mut s.client()), 2);
}

#[test]
fn forget_at_a_terminal_asks_first() {
    if !have("tmux") {
        return;
    }
    let env = Env::new();
    let spool = stopped_with_a_task(&env);
    let pane = Pane::start(
        &env,
        "\"$BATON\" forget gone; echo \"forget exited $?\"; \"$BATON\" forget gone; echo \"again exited $?\"",
    );
    let screen = pane.wait_for("[y/N]");
    assert!(screen.contains("holds 1 queued"), "{screen}");
    pane.keys(&["n", "Enter"]);
    let screen = pane.wait_for("forget exited");
    assert!(screen.contains("nothing was removed"), "{screen}");
    assert!(screen.contains("forget exited 1"), "{screen}");
    assert!(spool.join("meta.json").exists());
    wait_until("the second question", T, || {
        pane.screen().matches("[y/N]").count() == 2
    });
    pane.keys(&["y", "Enter"]);
    let screen = pane.wait_for("again exited");
    assert!(screen.contains("again exited 0"), "{screen}");
    assert!(!spool.exists());
}

/// Issue 46: `inbox complete` without MESSAGE_ID completes the one task
/// this agent holds (a pull agent holds one at a time), and says so when
/// it holds none (it once said only `MESSAGE_ID is missing`).
#[test]
fn inbox_complete_alone_completes_the_one_task_held() {
    let env = Env::new();
    let ws = env.workspace("solo");
    let _s = env.serve(&ws, &["--name", "solo"]);
    let run = |args: &[&str]| env.run_with(&[], Some(&ws), args, None);
    for id in ["h-1", "h-2"] {
        let out = env.run(&["send", "solo", "work", "--message-id", id]);
        assert_eq!(out.status, 0, "{out:?}");
    }
    let none = run(&["inbox", "complete"]);
    usage(&none, "nothing held");
    assert!(none.stderr.contains("solo holds no task"), "{none:?}");
    assert_eq!(run(&["inbox", "claim"]).status, 0);
    let one = run(&["inbox", "complete", "--json"]);
    assert_eq!(one.status, 0, "{one:?}");
    assert!(one.stdout.contains("\"message_id\":\"h-1\""), "{one:?}");
    assert!(one.stdout.contains("\"status\":\"completed\""), "{one:?}");
}
