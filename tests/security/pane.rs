//! A task typed into a tmux pane (`serve --tmux-pane`) stays text: a body
//! cannot end the bracketed paste it is typed in, nor press a key, because
//! every control character it holds arrives made visible, as `baton inbox
//! claim` prints it. The pane runs the stand-in agent of `tests/tmux.rs`,
//! which asks for bracketed paste and records every byte it reads. Nor is
//! a task typed into a pane where a shell runs (issue 44, point 5).

use std::fs;
use std::path::Path;
use std::process::Command;

use crate::tmux::{Tmux, WAIT, chmod_x, done_command, places, send, serve, tools, typed_event};
use crate::util::{
    Env, event_is, have, me_as_instance, transcript, wait_event, wait_for, wait_until,
};

const START: &str = "\x1b[200~";
const END: &str = "\x1b[201~";

/// What the agent would read if the body's bytes were typed as they are:
/// the planted paste end, a carriage return that submits, and Ctrl-C.
const PLANTED: &str = "before\x1b[201~\rINJECTED\r\x03 touch pwned";

#[test]
fn a_task_body_cannot_end_the_pane_paste_early() {
    if !tools() {
        return;
    }
    let env = Env::new();
    let mut tmux = Tmux::new(&env);
    tmux.start(&env);
    let s = serve(&env, &tmux, &[], &[]);
    let spool = s.spool();
    let peer = me_as_instance(&env.registry, "peer", "/w/peer");
    let long = "y".repeat(6000);
    let body = format!(
        "{PLANTED}\n\
         a new paste \x1b[200~ESC \x1b[31mred CSI \u{9b}2J DEL \x7f bell \x07 NUL \0\n\
         bare\rCR, tab\there, kept: ü → ok\n\
         {long}\n\
         last"
    );
    let mut c = s.client();
    let r = c.call(1, "message/send", s.msg_from("m-planted", &body, &peer));
    assert_eq!(r["result"]["status"], "accepted", "{r}");
    typed_event(&spool, "m-planted");
    wait_until("the Enter after the paste", WAIT, || {
        tmux.typed().ends_with(&format!("{END}\r"))
    });

    // Each char of what the agent read is one byte (the stand-in records
    // reads as Latin-1).
    let typed = tmux.typed();
    // Failures show the long line shortened.
    let short = |t: &str| t.replace(&long, "yyy...");
    assert_eq!(
        typed.matches(START).count(),
        1,
        "not one paste: {:?}",
        short(&typed)
    );
    assert_eq!(
        typed.matches(END).count(),
        1,
        "the paste ended early: {:?}",
        short(&typed)
    );
    let block = typed
        .strip_prefix(START)
        .and_then(|t| t.strip_suffix(&format!("{END}\r")))
        .unwrap_or_else(|| {
            panic!(
                "not one paste, then Enter, then nothing: {:?}",
                short(&typed)
            )
        });
    let bytes: Vec<u8> = block.chars().map(|c| c as u8).collect();
    let block = String::from_utf8(bytes).expect("the paste is UTF-8");
    // Inside the paste: line ends (tmux sends them as CR) and tabs, no other
    // control; outside it: the one Enter.
    let raw: Vec<char> = block
        .chars()
        .filter(|&c| !matches!(c, '\r' | '\t') && (c < ' ' || ('\x7f'..='\u{9f}').contains(&c)))
        .collect();
    assert!(
        raw.is_empty(),
        "raw controls {raw:?} in {:?}",
        short(&block)
    );
    assert!(
        block.starts_with("<agent_relay from=\"peer\""),
        "{:?}",
        short(&block)
    );
    assert!(block.ends_with("</agent_relay>\r"), "{:?}", short(&block));

    // The body arrived whole, as `inbox claim` and the view show it.
    let visible = format!(
        "\rbefore\\e[201~\\rINJECTED\\r\\u{{3}} touch pwned\r\
         a new paste \\e[200~ESC \\e[31mred CSI \\u{{9b}}2J DEL \\u{{7f}} bell \\u{{7}} NUL \\u{{0}}\r\
         bare\\rCR, tab\there, kept: ü → ok\r\
         {long}\r\
         last\r\r"
    );
    assert!(block.contains(&visible), "{:?}", short(&block));
    let done = format!("\r[when done: baton inbox complete {} m-planted]\r", s.id);
    assert!(block.contains(&done), "{:?}", short(&block));
}

/// A `tmux` on `PATH` that answers `#{bracket_paste_flag}` with what the
/// file `flag` holds (tmux 3.3a has no such format), then runs the real one.
fn lying_tmux(env: &Env, flag: &Path) -> String {
    let out = Command::new("sh")
        .args(["-c", "command -v tmux"])
        .output()
        .unwrap();
    let real = String::from_utf8(out.stdout).unwrap();
    let bin = env.root.join("bin");
    fs::create_dir_all(&bin).unwrap();
    fs::write(
        bin.join("tmux"),
        format!(
            "#!/bin/sh\n\
             flag=$(cat '{}')\n\
             for a do\n\
             shift\n\
             case \"$a\" in *'#{{bracket_paste_flag}}'*)\n\
             a=\"${{a%%'#{{bracket_paste_flag}}'*}}$flag${{a#*'#{{bracket_paste_flag}}'}}\";;\n\
             esac\n\
             set -- \"$@\" \"$a\"\n\
             done\n\
             exec '{}' \"$@\"\n",
            flag.display(),
            real.trim()
        ),
    )
    .unwrap();
    chmod_x(&bin.join("tmux"));
    format!("{}:{}", bin.display(), std::env::var("PATH").unwrap())
}

#[test]
fn a_pane_whose_program_has_not_asked_for_bracketed_paste_is_not_typed_into() {
    if !tools() {
        return;
    }
    let env = Env::new();
    let flag = env.root.join("flag");
    fs::write(&flag, "0").unwrap();
    let path = lying_tmux(&env, &flag);
    let mut tmux = Tmux::new(&env);
    tmux.start(&env);
    let s = serve(&env, &tmux, &[("PATH", &path)], &[]);
    let spool = s.spool();
    let one = send(&env, "first line\nsecond line");
    let said = wait_event(&spool, "the refusal said", WAIT, |e| {
        e["kind"] == "notice" && e["tmux_pane"] == "t:0.0"
    });
    assert_eq!(
        said["reason"], "the program in the pane has not asked for bracketed paste",
        "{said}"
    );
    let text = said["text"].as_str().unwrap();
    assert!(
        text.starts_with("tmux pane t:0.0 is not typed into: the program"),
        "{said}"
    );
    assert_eq!(places(&env), (vec![one.clone()], vec![]));
    assert_eq!(tmux.typed(), "");

    // It asks: the queue is typed.
    fs::write(&flag, "1").unwrap();
    typed_event(&spool, &one);
    wait_until("the Enter", WAIT, || tmux.typed().ends_with("\x1b[201~\r"));
    assert!(tmux.typed().contains("\rfirst line\rsecond line\r"));

    // It stops asking while a task is open: the next one, claimed, goes
    // back to its place in the queue.
    fs::write(&flag, "0").unwrap();
    let two = send(&env, "while it does not ask");
    let args = done_command(&tmux.typed());
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    assert_eq!(env.run(&args).status, 0);
    let said = wait_event(&spool, "the put back", WAIT, |e| {
        e["kind"] == "notice" && e["tmux_pane"] == "t:0.0" && e["message_id"] == two.as_str()
    });
    assert!(
        said["text"]
            .as_str()
            .unwrap()
            .contains(&format!("task {two} went back to its place in the queue")),
        "{said}"
    );
    assert_eq!(places(&env), (vec![two.clone()], vec![]));
    assert!(!tmux.typed().contains("while it does not ask"));
    fs::write(&flag, "1").unwrap();
    typed_event(&spool, &two);
    tmux.wait_typed("while it does not ask");
}

/// What `baton status` says of a pane where bash runs.
const SHELL_WAIT: &str = "the pane runs a shell (bash): tasks wait until an agent runs there";

/// `baton status pa`'s text once it says `SHELL_WAIT`; the file `pwned`
/// must not be made meanwhile (a shell that got the task would make it).
fn wait_shell_said(env: &Env, pwned: &Path) -> String {
    wait_for("status to say the pane runs a shell", WAIT, || {
        assert!(!pwned.exists(), "the pane's shell ran the task's body");
        let out = env.run(&["status", "pa"]);
        assert_eq!(out.status, 0, "{out:?}");
        out.stdout.contains(SHELL_WAIT).then_some(out.stdout)
    })
}

/// Waits until tmux names the pane's command `name`: the shell tmux runs
/// a pane's program with (`sh -c`) has handed over to it.
fn wait_command(tmux: &Tmux, name: &str) {
    wait_until(&format!("the pane to run {name}"), WAIT, || {
        let args = [
            "display-message",
            "-p",
            "-t",
            "t:0.0",
            "#{pane_current_command}",
        ];
        tmux.run(&args).trim() == name
    });
}

/// Issue 44, point 5: `--tmux-pane` at a pane where `bash -i` runs typed
/// the task, and bash ran its lines. Now nothing is typed while a shell
/// is the pane's foreground program: the task stays queued, `status` and
/// a notice say why, and once an agent runs there (started from that
/// shell, as a user does) the task is typed, once.
#[test]
fn a_pane_that_runs_a_shell_is_not_typed_into_until_an_agent_runs_there() {
    if !tools() || !have("bash") {
        return;
    }
    let env = Env::new();
    let mut tmux = Tmux::new(&env);
    // `exec`: bash is the pane's program whatever the login shell tmux
    // runs it with. Under dash's `sh -c`, which forks, an interactive
    // bash that execs the agent gives the terminal back to dash's process
    // group first, and the agent is then rightly not in front.
    tmux.start_program("exec bash --norc --noprofile -i");
    wait_command(&tmux, "bash");
    let s = serve(&env, &tmux, &[], &[]);
    let spool = s.spool();
    let pwned = env.root.join("PWNED");
    let id = send(&env, &format!("please review\ntouch {}", pwned.display()));
    let status = wait_shell_said(&env, &pwned);
    assert!(
        status.contains(&format!("\ntmux pane:   t:0.0: {SHELL_WAIT}\n")),
        "{status}"
    );
    assert!(!pwned.exists(), "the pane's shell ran the task's body");
    assert_eq!(places(&env), (vec![id.clone()], vec![]));
    let said = wait_event(&spool, "the shell said", WAIT, |e| {
        e["kind"] == "notice" && e["tmux_pane"] == "t:0.0"
    });
    assert_eq!(said["reason"], "the pane runs a shell (bash)", "{said}");
    assert_eq!(
        said["text"],
        "tmux pane t:0.0 is not typed into: the pane runs a shell (bash), which would run a task's lines as commands; queued tasks stay queued and are typed once an agent runs there",
    );
    let out = env.run(&["status", "pa", "--json"]);
    let json: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(json["tmux_wait"], SHELL_WAIT, "{json}");

    // The user starts the agent in that shell: the task is typed into it.
    tmux.run(&["send-keys", "-t", "t:0.0", "-l", &tmux.agent_command(&env)]);
    tmux.run(&["send-keys", "-t", "t:0.0", "Enter"]);
    typed_event(&spool, &id);
    wait_event(&spool, "the agent said", WAIT, |e| {
        e["kind"] == "notice"
            && e["text"] == "tmux pane t:0.0 no longer runs a shell: queued tasks are typed into it"
    });
    let typed = tmux.wait_done_line();
    assert_eq!(typed.matches("please review").count(), 1, "{typed:?}");
    assert_eq!(places(&env), (vec![], vec![id.clone()]));
    let out = env.run(&["inbox", "complete", &s.id, &id]);
    assert_eq!(out.status, 0, "{out:?}");
    wait_event(&spool, "the task ended", WAIT, |e| {
        event_is(e, "task.ended", &id)
    });
    let seen = transcript(&spool);
    for kind in ["task.claimed", "task.typed"] {
        let n = seen.iter().filter(|e| event_is(e, kind, &id)).count();
        assert_eq!(n, 1, "{kind}: {seen:?}");
    }
    assert!(!pwned.exists(), "the pane's shell ran the task's body");
    let out = env.run(&["status", "pa", "--json"]);
    let json: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(json["tmux_wait"], serde_json::Value::Null, "{json}");
}

/// A shell that calls itself something else (`exec -a claude bash`: tmux
/// names the pane's command `claude`) is still bash to the kernel: the
/// `comm` of the leader of the terminal's foreground process group.
#[test]
fn a_shell_renamed_as_an_agent_is_still_a_shell() {
    if !tools() || !have("bash") {
        return;
    }
    let env = Env::new();
    let mut tmux = Tmux::new(&env);
    tmux.start_program("exec bash -c 'exec -a claude bash --norc --noprofile -i'");
    wait_command(&tmux, "claude");
    let _s = serve(&env, &tmux, &[], &[]);
    let pwned = env.root.join("PWNED");
    let id = send(&env, &format!("please review\ntouch {}", pwned.display()));
    wait_shell_said(&env, &pwned);
    assert_eq!(places(&env), (vec![id], vec![]));
}
