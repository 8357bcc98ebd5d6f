//! The interactive view (baton(1), INTERACTIVE VIEW). Rendering is checked through the
//! library's in-memory terminal, without a TTY: the header, the role marks,
//! wrapping, two screen sizes, the approval prompt, escaped hostile text and
//! the input line's editing keys. End to end, real `baton` views run in the
//! panes of a private tmux server and are read back with `capture-pane`:
//! two interactive instances relaying to each other, `/agents pause`, the
//! terminal modes after `/quit`, the transcript after a restart, and
//! `baton attach` answering an approval with `y`.

use crate::util::{
    Env, PANE_POLL, POLL, Served, baton_bin, finish, have, manifests, pid_alive, poll, wait_for,
    wait_gone, wait_until,
};
use baton::tui::term::{Memory, Style, Terminal};
use baton::tui::view::{Editor, Role, View};
use serde_json::{Value, json};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

// ---------------------------------------------------------------------------
// Rendering through the in-memory terminal.

/// Lays `view` out on a `cols` x `rows` in-memory terminal and returns it.
fn draw(view: &View, cols: u16, rows: u16) -> Memory {
    let mut term = Memory::new(cols, rows);
    let (c, r) = term.size();
    assert_eq!((c, r), (cols, rows));
    term.draw(&view.render(c, r)).unwrap();
    term
}

/// A view whose header has every field set.
fn headed() -> View {
    let mut view = View::default();
    view.header.name = "alpha".into();
    view.header.id = "4242-1111222233334444".into();
    view.header.profile = "coding".into();
    view.header.state = "ready".into();
    view.header.queued = 3;
    view.header.interrupted = 1;
    view.header.model = "model-x".into();
    view
}

/// The header at 80 columns, where the "baton" label does not fit too.
const HEADER: &str =
    " alpha (4242-1111222233334444)  coding  ready  queued 3  interrupted 1  model-x";

#[test]
fn the_header_shows_name_id_profile_state_counts_and_model() {
    let term = draw(&headed(), 80, 24);
    assert_eq!(term.screen()[0], HEADER);
    assert_eq!(term.last.lines[0].style, Style::Header);
    // With the room, the label leads; the id is always whole.
    let term = draw(&headed(), 100, 24);
    assert_eq!(term.screen()[0], format!(" baton {HEADER}"));

    // Without a model label the header ends at the counts.
    let mut view = headed();
    view.header.model.clear();
    view.header.state = "paused".into();
    view.header.queued = 0;
    view.header.interrupted = 0;
    let term = draw(&view, 80, 24);
    assert_eq!(
        term.screen()[0],
        " baton  alpha (4242-1111222233334444)  coding  paused  queued 0  interrupted 0"
    );

    // A narrow screen cuts the header to its width.
    let term = draw(&headed(), 40, 10);
    assert_eq!(
        term.screen()[0],
        HEADER.chars().take(40).collect::<String>()
    );
}

#[test]
fn each_role_has_its_own_mark_and_style() {
    let mut view = headed();
    view.push(Role::Local, "a local line");
    view.push(Role::Relay, "a relayed task\nits second line");
    view.push(Role::Output, "handler output");
    view.push(Role::System, "a notice");
    view.push(Role::Refusal, "a refusal");
    let term = draw(&view, 80, 24);
    let want = [
        ("> a local line", Style::Local),
        ("<< a relayed task", Style::Relay),
        ("   its second line", Style::Relay),
        ("| handler output", Style::Output),
        ("* a notice", Style::System),
        ("! a refusal", Style::Refusal),
    ];
    for (i, (text, style)) in want.iter().enumerate() {
        let line = &term.last.lines[i + 1];
        assert_eq!(
            (line.text.as_str(), line.style),
            (*text, *style),
            "row {}",
            i + 1
        );
    }
    // The rest of the transcript area is blank.
    for row in 7..22 {
        assert_eq!(term.screen()[row], "", "row {row}");
    }

    // Events become entries of the right role.
    let mut view = View::default();
    for ev in [
        json!({"kind": "local.input", "message_id": "m-1", "body": "do the thing"}),
        json!({"kind": "message.accepted", "message_id": "m-2", "from": "beta", "pid": 77,
               "workspace": "/w/beta", "body": "please review"}),
        json!({"kind": "turn.output", "message_id": "m-2", "stream": "stdout", "text": "reviewed\n"}),
        json!({"kind": "turn.finished", "message_id": "m-2", "outcome": "done", "exit_code": 0}),
        json!({"kind": "relay.sent", "message_id": "m-3", "target": {"name": "beta"},
               "status": "accepted", "queue_position": 1}),
        json!({"kind": "relay.sent", "message_id": "m-4", "target": {"name": "beta"},
               "status": "paused", "reason": "the instance is paused"}),
        json!({"kind": "message.rejected", "message_id": "m-5", "from": "gamma",
               "status": "denied", "reason": "not allowed"}),
    ] {
        view.apply_event(&ev);
    }
    let roles: Vec<Role> = view.entries.iter().map(|e| e.role).collect();
    assert_eq!(
        roles,
        [
            Role::Local,
            Role::Relay,
            Role::Output,
            Role::System,
            Role::System,
            Role::Refusal,
            Role::Refusal
        ]
    );
    let screen = draw(&view, 80, 24).screen();
    assert_eq!(
        &screen[1..10],
        [
            "> do the thing",
            "<< task m-2 from beta (pid 77, /w/beta):",
            "   please review",
            "| reviewed",
            "* turn m-2 done, exit 0",
            "* sent m-3 to beta: accepted at position 1",
            "! not sent m-4 to beta: paused: the instance is paused",
            "! refused task m-5 from gamma: denied: not allowed",
            "",
        ]
    );
}

/// The mark each transcript style starts a line with.
fn mark(style: Style) -> &'static str {
    match style {
        Style::Local => "> ",
        Style::Relay => "<< ",
        Style::Output => "| ",
        Style::System => "* ",
        Style::Refusal => "! ",
        other => panic!("not a transcript style: {other:?}"),
    }
}

#[test]
fn long_lines_wrap_at_the_width_under_their_mark() {
    let words: Vec<String> = (0..30).map(|i| format!("word{i}")).collect();
    let mut view = View::default();
    view.push(Role::Output, words.join(" "));
    view.push(Role::Relay, "x".repeat(100));
    let term = draw(&view, 40, 24);
    let lines = &term.last.lines[1..22];
    let text: Vec<&str> = lines.iter().map(|l| l.text.as_str()).collect();
    for line in &text {
        assert!(line.chars().count() <= 40, "wider than 40: {line:?}");
    }
    // The words: first line under the mark, the rest indented to match,
    // broken at spaces, nothing lost.
    let out: Vec<&str> = text
        .iter()
        .copied()
        .take_while(|l| !l.starts_with("<< "))
        .collect();
    assert!(out.len() >= 5, "{text:#?}");
    assert!(out[0].starts_with("| word0 word1 "), "{out:?}");
    for l in &out[1..] {
        assert!(l.starts_with("  word"), "continuation {l:?} in {out:?}");
    }
    let joined: Vec<&str> = out.iter().flat_map(|l| l.split_whitespace()).collect();
    assert_eq!(joined[0], "|");
    assert_eq!(
        joined[1..],
        words.iter().map(String::as_str).collect::<Vec<_>>()[..]
    );
    // A word longer than the width is cut into pieces.
    let relay: Vec<&str> = text[out.len()..]
        .iter()
        .copied()
        .filter(|l| !l.is_empty())
        .collect();
    assert_eq!(
        relay,
        [
            format!("<< {}", "x".repeat(37)),
            format!("   {}", "x".repeat(37)),
            format!("   {}", "x".repeat(26)),
        ]
    );
}

#[test]
fn wrapped_peer_text_cannot_forge_another_roles_line() {
    // Bodies laid out so that, wrapped at 80 columns from column 0, their
    // tails would start a screen line with the refusal or the system mark.
    let mut view = View::default();
    view.apply_event(&json!({
        "kind": "message.accepted", "message_id": "m-1", "from": "mallory", "pid": 1,
        "workspace": "/w", "body": format!("{} ! forged refusal", "a".repeat(76)),
    }));
    view.apply_event(&json!({
        "kind": "turn.output", "message_id": "m-1", "stream": "stdout",
        "text": format!("{} * forged notice\n", "b".repeat(77)),
    }));
    for (cols, rows) in [(80, 24), (40, 10)] {
        let term = draw(&view, cols, rows);
        let n = term.last.lines.len();
        for line in &term.last.lines[1..n - 2] {
            if line.text.is_empty() {
                continue;
            }
            let m = mark(line.style);
            assert!(
                line.text.starts_with(m) || line.text.starts_with(&" ".repeat(m.len())),
                "{cols}x{rows}: {line:?} starts with neither its mark {m:?} nor its indent"
            );
        }
        let screen = term.screen();
        assert!(!screen.iter().any(|l| l.starts_with("! ")), "{screen:#?}");
        assert!(!screen.iter().any(|l| l.starts_with("* ")), "{screen:#?}");
    }
    let screen = draw(&view, 80, 24).screen();
    assert_eq!(
        screen[1..6],
        [
            "<< task m-1 from mallory (pid 1, /w):".to_string(),
            format!("   {}", "a".repeat(76)),
            "   ! forged refusal".to_string(),
            format!("| {}", "b".repeat(77)),
            "  * forged notice".to_string(),
        ]
    );
}

#[test]
fn an_80x24_screen_has_header_transcript_status_and_input_rows() {
    let mut view = headed();
    view.push(Role::System, "alpha started in /w/alpha");
    for c in "/send beta hi".chars() {
        view.editor.insert(c);
    }
    let term = draw(&view, 80, 24);
    let screen = term.screen();
    assert_eq!(screen.len(), 24);
    assert_eq!(screen[0], HEADER);
    assert_eq!(screen[1], "* alpha started in /w/alpha");
    assert!(
        screen[22].contains("/help for commands"),
        "{:?}",
        screen[22]
    );
    assert_eq!(term.last.lines[22].style, Style::Normal);
    assert_eq!(screen[23], "> /send beta hi");
    assert_eq!(term.last.cursor, (15, 23));

    // A task waiting for approval takes the status row.
    view.apply_event(
        &json!({"kind": "approval.requested", "message_id": "m-9", "from": "beta",
                             "approval_id": "ask-1"}),
    );
    let term = draw(&view, 80, 24);
    let screen = term.screen();
    assert_eq!(screen.len(), 24);
    assert_eq!(screen[22], "approve task m-9 from beta? [y/n]");
    assert_eq!(term.last.lines[22].style, Style::Prompt);
    assert_eq!(
        screen[2],
        "* task m-9 from beta waits for approval: y or n, or /approve m-9"
    );
    assert_eq!(view.waiting.len(), 1);
    assert_eq!(
        (view.waiting[0].id.as_str(), view.waiting[0].from.as_str()),
        ("m-9", "beta")
    );
    // The oldest waiting task is asked about first; answering it moves on.
    view.apply_event(
        &json!({"kind": "approval.requested", "message_id": "m-10", "from": "gamma",
                             "approval_id": "ask-2"}),
    );
    assert_eq!(
        draw(&view, 80, 24).screen()[22],
        "approve task m-9 from beta? [y/n]"
    );
    view.apply_event(&json!({"kind": "approval.resolved", "message_id": "m-9",
                             "approval_id": "ask-1", "decision": "approve", "by": "operator"}));
    assert_eq!(
        draw(&view, 80, 24).screen()[22],
        "approve task m-10 from gamma? [y/n]"
    );
    view.apply_event(&json!({"kind": "task.denied", "message_id": "m-10"}));
    let screen = draw(&view, 80, 24).screen();
    assert!(
        screen[22].contains("/help for commands"),
        "{:?}",
        screen[22]
    );
    assert!(view.waiting.is_empty());
}

#[test]
fn a_40x10_screen_shows_the_latest_lines_and_scrolls() {
    let mut view = headed();
    for i in 0..20 {
        view.push(Role::System, format!("entry {i}"));
    }
    let term = draw(&view, 40, 10);
    let screen = term.screen();
    assert_eq!(screen.len(), 10);
    assert_eq!(screen[0], HEADER.chars().take(40).collect::<String>());
    let shown: Vec<String> = (13..20).map(|i| format!("* entry {i}")).collect();
    assert_eq!(screen[1..8], shown[..]);
    assert!(screen[8].contains("/help for commands"), "{:?}", screen[8]);
    assert_eq!(screen[9], "> ");
    assert_eq!(term.last.cursor, (2, 9));
    for line in &screen {
        assert!(line.chars().count() <= 40, "{line:?}");
    }

    // Scrolled up three lines, and back.
    view.scroll = 3;
    let screen = draw(&view, 40, 10).screen();
    let shown: Vec<String> = (10..17).map(|i| format!("* entry {i}")).collect();
    assert_eq!(screen[1..8], shown[..]);
    assert!(screen[8].contains("scrolled up 3"), "{:?}", screen[8]);
    view.scroll = 0;
    assert_eq!(draw(&view, 40, 10).screen()[7], "* entry 19");

    // An approval prompt on the narrow screen is cut, not wrapped.
    view.apply_event(&json!({"kind": "approval.requested",
                             "message_id": "4242-1111222233334444-17", "from": "beta"}));
    let screen = draw(&view, 40, 10).screen();
    assert_eq!(screen.len(), 10);
    assert_eq!(screen[8], "approve task 4242-1111222233334444-17 fr");
    assert_eq!(screen[9], "> ");

    // Below three rows only the input line is left, with the cursor on it.
    for rows in [1, 2] {
        let term = draw(&view, 40, rows);
        assert_eq!(term.screen(), ["> "]);
        assert_eq!(term.last.cursor, (2, 0), "{rows} rows");
    }
}

#[test]
fn the_input_line_scrolls_sideways_to_keep_the_cursor_in_view() {
    let mut view = View::default();
    let typed: String = (0..100)
        .map(|i| char::from(b'a' + (i % 26) as u8))
        .collect();
    for c in typed.chars() {
        view.editor.insert(c);
    }
    let term = draw(&view, 40, 10);
    let input = &term.screen()[9];
    // The tail of what was typed, with room for the cursor after it.
    assert_eq!(input, &format!("> {}", &typed[63..]));
    assert_eq!(input.chars().count(), 39);
    assert_eq!(term.last.cursor, (39, 9));
    view.editor.home();
    let term = draw(&view, 40, 10);
    assert_eq!(term.screen()[9], format!("> {}", &typed[..38]));
    assert_eq!(term.last.cursor, (2, 9));
}

/// Characters that must never reach the terminal raw.
fn assert_clean(screen: &[String], what: &str) {
    for line in screen {
        assert!(
            !line.chars().any(|c| c.is_control()
                || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')),
            "{what}: raw control or bidi character in {line:?}"
        );
    }
}

#[test]
fn hostile_peer_text_is_escaped_on_screen() {
    const OSC52: &str = "\x1b]52;c;aGVsbG8=\x07";
    let mut view = headed();
    view.apply_event(&json!({
        "kind": "message.accepted",
        "message_id": "m-7",
        "from": "ev\u{202e}il",
        "pid": 4242,
        "workspace": "/tmp/w\x1b[2J",
        "body": format!("copy {OSC52} then \u{202e}reversed and a bare \x1b here"),
    }));
    view.apply_event(&json!({
        "kind": "turn.output",
        "message_id": "m-7",
        "stream": "stdout",
        "text": format!("out {OSC52} \u{202e}x \x1b end\n"),
    }));
    view.apply_event(&json!({
        "kind": "approval.requested", "message_id": "m-8", "from": "ev\u{202e}il\x07",
    }));
    view.header.name = "al\x1bpha".into();
    for c in ['p', '\u{202e}', '\x1b', 'q'] {
        view.editor.insert(c);
    }

    let screen = draw(&view, 80, 24).screen();
    assert_clean(&screen, "80x24");
    assert!(
        screen[0].starts_with(" al\\epha (4242-1111222233334444)  coding"),
        "{:?}",
        screen[0]
    );
    assert_eq!(
        screen[1..6],
        [
            "<< task m-7 from ev\\u{202e}il (pid 4242, /tmp/w\\e[2J):",
            "   copy \\e]52;c;aGVsbG8=\\u{7} then \\u{202e}reversed and a bare \\e here",
            "| out \\e]52;c;aGVsbG8=\\u{7} \\u{202e}x \\e end",
            "* task m-8 from ev\\u{202e}il\\u{7} waits for approval: y or n, or /approve m-8",
            "",
        ]
    );
    assert_eq!(
        screen[22],
        "approve task m-8 from ev\\u{202e}il\\u{7}? [y/n]"
    );
    assert_eq!(screen[23], "> p\\u{202e}\\eq");

    // On a narrow screen the escapes are wrapped or cut, never unescaped.
    let screen = draw(&view, 40, 10).screen();
    assert_eq!(screen.len(), 10);
    assert_clean(&screen, "40x10");
}

/// `/inbox` with more than a page (1001 tasks; a page holds at most
/// 1000) shows every task, the last one too, and the count in each place
/// at the bottom of the screen. (It used to show the first page only.)
#[test]
fn inbox_shows_every_page() {
    let env = Env::new();
    let ws = env.workspace("ws");
    let inst = env.serve_with(
        &ws,
        &[("BATON_FSYNC", "off"), ("BATON_MAX_QUEUE", "2000")],
        &["--name", "full"],
    );
    let mut c = inst.client();
    let ids: Vec<String> = (0..1001).map(|i| format!("task-{i:04}")).collect();
    for chunk in ids.chunks(64) {
        let reqs: Vec<(&str, Value)> = chunk
            .iter()
            .map(|id| ("message/send", inst.msg(id, "b")))
            .collect();
        for r in c.try_pipeline(&reqs).unwrap() {
            assert_eq!(r["status"], "accepted", "{r}");
        }
    }
    let mut pages = 0;
    let text = baton::tui::inbox_listing(&mut |params| {
        pages += 1;
        let r = c.call(100 + pages, "inbox/list", params);
        Ok(r["result"].clone())
    })
    .unwrap();
    assert_eq!(pages, 2);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 1002, "{}", &text[text.len() - 200..]);
    for (line, id) in lines.iter().zip(&ids) {
        assert_eq!(*line, format!("queued      {id}  from (cli)"));
    }
    let mut view = headed();
    view.push(Role::System, text.clone());
    let screen = draw(&view, 80, 10).screen();
    let shown: Vec<&str> = screen.iter().map(|l| l.trim()).collect();
    // The last line of the transcript, above the status and input rows.
    assert_eq!(
        shown[shown.len() - 3],
        "1001 tasks: 1001 queued, 0 processing, 0 interrupted, 0 rejected",
        "{shown:#?}"
    );
    assert!(
        shown.iter().any(|l| l.ends_with("task-1000  from (cli)")),
        "{shown:#?}"
    );
}

#[test]
fn the_editor_keys_edit_the_line_and_walk_the_history() {
    let mut e = Editor::default();
    let typed = |e: &mut Editor, s: &str| s.chars().for_each(|c| e.insert(c));
    // Left, right, home, end; insertion at the cursor.
    typed(&mut e, "hello world");
    assert_eq!(e.cursor, 11);
    for _ in 0..5 {
        e.left();
    }
    e.insert('X');
    assert_eq!((e.text().as_str(), e.cursor), ("hello Xworld", 7));
    e.right();
    assert_eq!(e.cursor, 8);
    e.end();
    e.right();
    assert_eq!(e.cursor, 12, "right stops at the end");
    e.home();
    e.left();
    assert_eq!(e.cursor, 0, "left stops at the start");
    // Backspace before the cursor, delete under it, each a no-op at its edge.
    e.backspace();
    assert_eq!(e.text(), "hello Xworld");
    e.delete();
    assert_eq!((e.text().as_str(), e.cursor), ("ello Xworld", 0));
    e.end();
    e.delete();
    assert_eq!(e.text(), "ello Xworld");
    e.backspace();
    assert_eq!((e.text().as_str(), e.cursor), ("ello Xworl", 10));
    // Ctrl-W: the word before the cursor, with the spaces after it.
    e.kill_word();
    assert_eq!((e.text().as_str(), e.cursor), ("ello ", 5));
    e.kill_word();
    assert_eq!((e.text().as_str(), e.cursor), ("", 0));
    e.kill_word();
    assert_eq!(e.text(), "");
    typed(&mut e, "one two  three");
    for _ in 0..5 {
        e.left();
    }
    e.kill_word();
    assert_eq!((e.text().as_str(), e.cursor), ("one three", 4));
    // Ctrl-U: everything before the cursor.
    e.kill_line();
    assert_eq!((e.text().as_str(), e.cursor), ("three", 0));
    e.end();
    e.kill_line();
    assert_eq!((e.text().as_str(), e.cursor), ("", 0));

    // History: Enter remembers non-blank lines, not the same one twice in a
    // row; Up walks back and stops at the oldest, Down walks forward and
    // then empties the line.
    let mut e = Editor::default();
    e.up();
    e.down();
    assert_eq!(e.text(), "", "no history yet");
    for line in [
        "/list-agents",
        "   ",
        "/send beta hi",
        "/send beta hi",
        "/inbox",
    ] {
        typed(&mut e, line);
        assert_eq!(e.take(), line);
        assert_eq!((e.text().as_str(), e.cursor), ("", 0));
    }
    e.up();
    assert_eq!((e.text().as_str(), e.cursor), ("/inbox", 6));
    e.up();
    assert_eq!(e.text(), "/send beta hi");
    e.up();
    assert_eq!(e.text(), "/list-agents");
    e.up();
    assert_eq!(e.text(), "/list-agents", "Up stops at the oldest line");
    e.down();
    assert_eq!(e.text(), "/send beta hi");
    e.down();
    assert_eq!(e.text(), "/inbox");
    e.down();
    assert_eq!(e.text(), "");
    e.down();
    assert_eq!(e.text(), "");
    // A recalled line can be edited; sent as it was, it is not kept twice.
    e.up();
    e.backspace();
    typed(&mut e, "x");
    assert_eq!(e.take(), "/inbox");
    e.up();
    assert_eq!(e.text(), "/inbox");
    e.up();
    assert_eq!(e.text(), "/send beta hi");
}

// ---------------------------------------------------------------------------
// End to end in a private tmux server.

pub(crate) const WAIT: Duration = Duration::from_secs(15);
/// The bound on one tmux command.
const TMUX_RUN: Duration = Duration::from_secs(10);

/// A private tmux server (its own socket, under the test world's temporary
/// directory), with a script per window so each pane sees exactly the test
/// world's environment. Dropping it kills the server and then every baton
/// it was told about that is still alive.
pub(crate) struct Tmux<'a> {
    env: &'a Env,
    socket: String,
    pub(crate) pids: Vec<u32>,
}

impl<'a> Tmux<'a> {
    /// Starts the server with one 100x30 window running `script`.
    pub(crate) fn start(env: &'a Env, window: &str, script: &str) -> Tmux<'a> {
        static N: AtomicUsize = AtomicUsize::new(0);
        let socket = format!(
            "baton-tui-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        );
        let conf = env.root.join("tmux.conf");
        // Panes stay when their command ends, for the files they leave; an
        // application may set the clipboard, so a leak would show in the
        // buffers.
        fs::write(&conf, "set -g remain-on-exit on\nset -g set-clipboard on\n").unwrap();
        let tmux = Tmux {
            env,
            socket,
            pids: Vec::new(),
        };
        let path = tmux.script(window, script);
        tmux.run(&[
            "-f",
            conf.to_str().unwrap(),
            "new-session",
            "-d",
            "-s",
            "t",
            "-n",
            window,
            "-x",
            "100",
            "-y",
            "30",
            &format!("sh {}", path.display()),
        ]);
        tmux
    }

    /// Writes `root/<window>.sh`: the test world's environment, then `body`.
    pub(crate) fn script(&self, window: &str, body: &str) -> PathBuf {
        let root = self.env.root.path();
        let path = root.join(format!("{window}.sh"));
        let q = |p: &Path| format!("'{}'", p.display());
        let text = format!(
            "export BATON_DIR={} XDG_STATE_HOME={} HOME={} TMPDIR={} PATH='{}' \
             TERM=xterm-256color LANG=C.UTF-8\nBATON={}\n{body}\n",
            q(&self.env.registry),
            q(&self.env.state),
            q(&root.join("home")),
            q(&root.join("tmp")),
            std::env::var("PATH").unwrap_or_default(),
            q(&baton_bin()),
        );
        fs::write(&path, text).unwrap();
        path
    }

    fn cmd(&self) -> Command {
        let mut cmd = Command::new("tmux");
        cmd.env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", self.env.root.join("home"))
            .env("TMUX_TMPDIR", self.env.root.join("tmp"))
            .env("LANG", "C.UTF-8")
            .args(["-L", &self.socket])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        cmd
    }

    /// Runs one tmux command (10 s bound) and returns its stdout.
    pub(crate) fn run(&self, args: &[&str]) -> String {
        let child = self.cmd().args(args).spawn().expect("spawn tmux");
        let out = finish(child, &format!("tmux {args:?}"), TMUX_RUN);
        assert!(
            out.status.success(),
            "tmux {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    pub(crate) fn window(&self, window: &str, script: &str) {
        let path = self.script(window, script);
        self.run(&[
            "new-window",
            "-t",
            "t",
            "-n",
            window,
            &format!("sh {}", path.display()),
        ]);
    }

    /// The pane's screen as text.
    pub(crate) fn screen(&self, window: &str) -> String {
        self.run(&["capture-pane", "-p", "-t", &format!("t:{window}")])
    }

    /// Types `text` and presses Enter.
    pub(crate) fn line(&self, window: &str, text: &str) {
        let target = format!("t:{window}");
        self.run(&["send-keys", "-t", &target, "-l", text]);
        self.run(&["send-keys", "-t", &target, "Enter"]);
    }

    pub(crate) fn key(&self, window: &str, key: &str) {
        self.run(&["send-keys", "-t", &format!("t:{window}"), key]);
    }

    /// Polls the pane (every `PANE_POLL`) until `ok` holds for its screen
    /// (15 s bound) and
    /// returns that screen; on timeout, fails showing it.
    pub(crate) fn wait(&self, window: &str, what: &str, ok: impl Fn(&str) -> bool) -> String {
        let mut screen = String::new();
        let shown = poll(WAIT, PANE_POLL, || {
            screen = self.screen(window);
            ok(&screen).then_some(())
        });
        if shown.is_none() {
            panic!("{window}: timed out after {WAIT:?} waiting for {what}; the pane:\n{screen}");
        }
        screen
    }

    /// Waits until the pane shows `needle` (with runs of blanks, line ends
    /// included, collapsed to one space, so wrapping does not matter).
    pub(crate) fn wait_for(&self, window: &str, needle: &str) -> String {
        let want = flat(needle);
        self.wait(window, &format!("{needle:?}"), |s| flat(s).contains(&want))
    }
}

impl Drop for Tmux<'_> {
    fn drop(&mut self) {
        if let Ok(child) = self.cmd().arg("kill-server").spawn() {
            let _ = finish(child, "tmux kill-server", TMUX_RUN);
        }
        // The panes' processes get SIGHUP from the server's end; a baton
        // that outlives that by 5 s is killed.
        let all_gone = || self.pids.iter().all(|&pid| !pid_alive(pid));
        let _ = poll(Duration::from_secs(5), POLL, || all_gone().then_some(()));
        for &pid in &self.pids {
            if pid_alive(pid) {
                // SAFETY: kill(2) has no memory-safety preconditions; the pid
                // is a baton this test started and saw running.
                unsafe {
                    libc::kill(pid as libc::pid_t, libc::SIGKILL);
                }
            }
        }
    }
}

/// Runs of blanks (line ends included) collapsed to one space.
pub(crate) fn flat(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The manifest of the live instance called `name`, waiting for it (15 s).
pub(crate) fn manifest(env: &Env, name: &str) -> Value {
    wait_for(&format!("a live instance named {name}"), WAIT, || {
        manifests(&env.registry).into_iter().find_map(|path| {
            fs::read(&path)
                .ok()
                .and_then(|b| serde_json::from_slice::<Value>(&b).ok())
                .filter(|m| {
                    m["name"] == name && m["pid"].as_u64().is_some_and(|p| pid_alive(p as u32))
                })
        })
    })
}

/// The message id in the first line of `screen` holding `before` ID `after`.
pub(crate) fn id_between(screen: &str, before: &str, after: &str) -> String {
    flat(screen)
        .split(before)
        .skip(1)
        .find_map(|rest| {
            let (id, tail) = rest.split_once(' ')?;
            tail.starts_with(after).then(|| id.to_string())
        })
        .unwrap_or_else(|| panic!("no {before:?}ID{after:?} in:\n{screen}"))
}

pub(crate) fn wait_file(path: &Path) -> String {
    wait_until(&format!("{} to appear", path.display()), WAIT, || {
        path.exists()
    });
    fs::read_to_string(path).unwrap()
}

#[test]
fn two_interactive_instances_relay_pause_quit_cleanly_and_reload_the_transcript() {
    if !have("tmux") {
        return;
    }
    let env = Env::new();
    let ws_a = env.workspace("alpha");
    let ws_b = env.workspace("beta");
    let root = env.root.path();
    let (before, after) = (root.join("stty-before"), root.join("stty-after"));
    let (rc, finished) = (root.join("alpha-rc"), root.join("alpha-finished"));
    let alpha = format!(
        "cd '{}'\nstty -a > '{}'\n\"$BATON\" --name alpha\necho $? > '{}'\nstty -a > '{}'\necho done > '{}'",
        ws_a.display(),
        before.display(),
        rc.display(),
        after.display(),
        finished.display()
    );
    let mut tmux = Tmux::start(&env, "alpha", &alpha);
    tmux.window(
        "beta",
        &format!(
            "cd '{}'\nexec \"$BATON\" --name beta --exec 'echo \"beta-got: $(grep -o hello-from-alpha)\"'",
            ws_b.display()
        ),
    );
    for window in ["alpha", "beta"] {
        let size = tmux.run(&[
            "display",
            "-p",
            "-t",
            &format!("t:{window}"),
            "#{window_width}x#{window_height}",
        ]);
        assert_eq!(size.trim(), "100x30", "{window}");
    }
    let (ma, mb) = (manifest(&env, "alpha"), manifest(&env, "beta"));
    let (pid_a, pid_b) = (ma["pid"].as_u64().unwrap(), mb["pid"].as_u64().unwrap());
    tmux.pids.extend([pid_a as u32, pid_b as u32]);
    let id_a = ma["instance_id"].as_str().unwrap().to_string();
    let id_b = mb["instance_id"].as_str().unwrap().to_string();

    // Each view: the header, the status row, the input line, 30 rows.
    let screen = tmux.wait_for(
        "alpha",
        &format!("baton alpha ({}) coding ready queued 0 interrupted 0", id_a),
    );
    let rows: Vec<&str> = screen.lines().collect();
    assert_eq!(rows.len(), 30, "{screen}");
    assert!(rows[0].starts_with(" baton  alpha ("), "{screen}");
    assert!(rows[28].contains("/help for commands"), "{screen}");
    assert_eq!(rows[29].trim_end(), ">", "{screen}");
    tmux.wait_for("alpha", &format!("* alpha started in {}", ws_a.display()));
    tmux.wait_for(
        "beta",
        &format!("baton beta ({}) coding ready queued 0", id_b),
    );

    // /list-agents in alpha lists beta (and not alpha itself).
    tmux.line("alpha", "/list-agents");
    let screen = tmux.wait_for("alpha", &format!("beta {pid_b} ready"));
    let row = screen
        .lines()
        .find(|l| l.contains(&format!(" beta  {pid_b} ")))
        .unwrap_or_else(|| panic!("no row for beta:\n{screen}"));
    assert_eq!(
        flat(row),
        format!("beta {pid_b} ready {} {}", id_b, ws_b.display()),
        "{screen}"
    );
    assert!(
        flat(&screen).contains("* NAME PID STATE ID WORKSPACE"),
        "{screen}"
    );
    assert!(
        !flat(&screen).contains(&format!(" alpha {pid_a} ")),
        "{screen}"
    );

    // A target that is no one: the candidates are beta with its whole id,
    // never alpha itself.
    tmux.line("alpha", "/send nosuch x");
    let screen = tmux.wait_for("alpha", "no_target: ");
    let refusal = flat(&screen);
    let refusal = &refusal[refusal.find("no_target: ").unwrap()..];
    assert!(
        refusal.contains(&format!("candidates: beta ({id_b})")),
        "{screen}"
    );
    assert!(
        !refusal.contains(&id_a),
        "alpha among its candidates:\n{screen}"
    );

    // /send delivers to the id /list-agents showed; beta shows the task
    // with its sender and the output.
    tmux.line("alpha", &format!("/send {id_b} hello-from-alpha"));
    let screen = tmux.wait_for("alpha", " to beta: accepted at position");
    assert!(
        flat(&screen).contains(&format!("> /send {id_b} hello-from-alpha")),
        "{screen}"
    );
    let id1 = id_between(&screen, "* sent ", "to beta: accepted");
    assert!(id1.starts_with(&format!("{id_a}-")), "{id1} is not alpha's");
    tmux.wait_for(
        "beta",
        &format!(
            "<< task {id1} from alpha (pid {pid_a}, {}): hello-from-alpha",
            ws_a.display()
        ),
    );
    let screen = tmux.wait_for("beta", &format!("* turn {id1} done, exit 0"));
    assert!(
        flat(&screen).contains("| beta-got: hello-from-alpha"),
        "{screen}"
    );
    assert!(
        flat(&screen).contains(&format!("* turn {id1} started")),
        "{screen}"
    );

    // Hostile text from a peer is shown escaped, and reaches neither the
    // terminal's clipboard nor its modes.
    let hostile = "copy \x1b]52;c;aGVsbG8=\x07 then \u{202e}reversed and \x1b end";
    let sent = env.run(&["send", "beta", hostile, "--json"]);
    assert_eq!(sent.status, 0, "{}", sent.stderr);
    let sent: Value = serde_json::from_str(&sent.stdout).unwrap();
    let id2 = sent["message_id"].as_str().unwrap().to_string();
    let screen = tmux.wait_for("beta", &format!("* turn {id2} done, exit 0"));
    assert!(
        flat(&screen).contains("copy \\e]52;c;aGVsbG8=\\u{7} then \\u{202e}reversed and \\e end"),
        "{screen}"
    );
    assert!(
        !screen.contains(['\x1b', '\x07', '\u{202e}']),
        "raw control characters on screen:\n{screen:?}"
    );
    assert_eq!(tmux.run(&["list-buffers"]), "", "the clipboard was set");

    // /agents pause in beta: the next send from alpha is refused as paused,
    // shown in alpha as not sent.
    tmux.line("beta", "/agents pause");
    tmux.wait_for("beta", "* relay paused");
    tmux.wait_for("beta", &format!("baton beta ({}) coding paused", id_b));
    tmux.line("alpha", "/send beta the-third-one");
    let screen = tmux.wait_for("alpha", " to beta: paused: ");
    let id3 = id_between(&screen, "! not sent ", "to beta: paused");
    assert_ne!(id3, id1);
    let screen = tmux.wait_for("beta", &format!("! refused task {id3} from alpha: paused"));
    assert!(!flat(&screen).contains("the-third-one"), "{screen}");

    // /quit: the shell around alpha finds the terminal as it left it.
    tmux.line("alpha", "/quit");
    wait_file(&finished);
    assert_eq!(fs::read_to_string(&rc).unwrap().trim(), "0");
    let (b, a) = (
        fs::read_to_string(&before).unwrap(),
        fs::read_to_string(&after).unwrap(),
    );
    assert!(b.contains("icanon") && b.contains("echo"), "{b}");
    assert_eq!(b, a, "stty -a differs after /quit");
    assert!(
        wait_gone(pid_a as u32, WAIT),
        "alpha still runs after /quit"
    );
    // What the terminal shows last says that alpha stopped, not the
    // `serving` line of its start that the view's screen gave back.
    let screen = tmux.wait_for("alpha", &format!("baton: alpha ({id_a}) stopped"));
    let said: Vec<&str> = screen
        .lines()
        .filter(|l| l.starts_with("baton: "))
        .collect();
    assert!(
        said.last().is_some_and(|l| l.contains(" stopped")),
        "{screen}"
    );

    // Alpha again in the same workspace: the earlier sends are shown again.
    tmux.window(
        "alpha2",
        &format!("cd '{}'\nexec \"$BATON\" --name alpha", ws_a.display()),
    );
    let m2 = manifest(&env, "alpha");
    let pid_a2 = m2["pid"].as_u64().unwrap();
    assert_ne!(pid_a2, pid_a);
    tmux.pids.push(pid_a2 as u32);
    let screen = tmux.wait_for("alpha2", &format!("sent {id1} to beta: accepted"));
    assert!(
        flat(&screen).contains(&format!("! not sent {id3} to beta: paused")),
        "{screen}"
    );
    tmux.line("alpha2", "/quit");
    tmux.line("beta", "/quit");
    let both_gone = || !pid_alive(pid_a2 as u32) && !pid_alive(pid_b as u32);
    assert!(
        poll(WAIT, POLL, || both_gone().then_some(())).is_some(),
        "an instance outlived /quit"
    );
    assert!(manifests(&env.registry).is_empty(), "manifests left behind");
}

#[test]
fn attach_answers_a_waiting_approval_with_y() {
    if !have("tmux") {
        return;
    }
    let env = Env::new();
    let ws = env.workspace("h");
    let mut h: Served = env.serve(
        &ws,
        &["--name", "h", "--exec", "echo ran-it", "--approve", "ask"],
    );
    let tmux = Tmux::start(
        &env,
        "view",
        &format!("cd '{}'\nexec \"$BATON\" attach h", ws.display()),
    );
    tmux.wait_for("view", &format!("baton h ({}) coding ready queued 0", h.id));

    let out = env.run_with(
        &[],
        Some(&ws),
        &["send", "h", "please run it", "--json"],
        None,
    );
    assert_eq!(out.status, 0, "{}", out.stderr);
    let sent: Value = serde_json::from_str(&out.stdout).unwrap();
    let id = sent["message_id"].as_str().unwrap().to_string();
    // The prompt and the entry say who sent it, from where, the mode, the
    // size and the body's first lines.
    let about = format!("(cli) ({}), mode queue, 13 bytes", ws.display());
    let prompt = format!("approve task {id} from {about}? [y/n]");
    let screen = tmux.wait("view", &format!("{prompt:?}"), |s| {
        s.lines()
            .nth(28)
            .is_some_and(|l| prompt.starts_with(l.trim_end()) && l.len() > 60)
    });
    let flat_screen = flat(&screen);
    assert!(
        flat_screen.contains(&format!("<< task {id} from (cli) (pid {}", out.pid)),
        "{screen}"
    );
    assert!(
        flat_screen.contains(&format!(
            "* task {id} from {about} waits for approval: y or n, or /approve {id} please run it"
        )),
        "{screen}"
    );
    let rows: Vec<&str> = screen.lines().collect();
    let at = rows
        .iter()
        .position(|l| l.ends_with(&format!("or /approve {id}")))
        .unwrap_or_else(|| panic!("no approval entry:\n{screen}"));
    assert_eq!(rows[at + 1].trim_end(), "    please run it", "{screen}");
    assert!(
        !flat_screen.contains("ran-it"),
        "ran before approval:\n{screen}"
    );

    tmux.key("view", "y");
    let screen = tmux.wait_for("view", &format!("* turn {id} done, exit 0"));
    let rows: Vec<&str> = screen.lines().collect();
    assert!(rows.iter().any(|l| l.trim_end() == "| ran-it"), "{screen}");
    assert!(rows[28].contains("/help for commands"), "{screen}");
    assert!(
        flat(&screen).contains(&format!("* task {id}: approve")),
        "{screen}"
    );
    // The log names the view as the one who answered.
    let resolved = crate::util::transcript(&h.spool())
        .into_iter()
        .find(|e| e["kind"] == "approval.resolved" && e["message_id"] == id.as_str())
        .unwrap_or_else(|| panic!("no approval.resolved for {id}"));
    assert_eq!(resolved["by"], "view", "{resolved}");

    // Leaving the view leaves the instance running.
    tmux.line("view", "/quit");
    tmux.wait("view", "the view to end", |_| {
        tmux.run(&["list-panes", "-t", "t:view", "-F", "#{pane_dead}"])
            .trim()
            == "1"
    });
    assert!(h.is_running(), "attach's /quit stopped the instance");
    drop(tmux);
    assert_eq!(h.term(), 0);
}
