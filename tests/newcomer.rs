//! Issue 46, "small things a newcomer met": an unknown name gets the
//! nearest live and stopped names suggested; a health check's `baton mcp`
//! leaves no spool behind; the hook scripts of docs/hooks.md are installed
//! by `make install-only`; a resend of a task kept already is recorded as
//! a status, not a refusal.

use crate::hooks::recipe;
use crate::mcp::{Mcp, NEWEST};
use crate::util::{Env, baton_bin, have};
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// The spools under the world's state home whose directory is `name`'s.
fn spools_of(env: &Env, name: &str) -> Vec<PathBuf> {
    let root = env.state.join("baton").join("spool");
    let Ok(rd) = fs::read_dir(&root) else {
        return Vec::new();
    };
    rd.filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| {
            (p.file_name().and_then(|n| n.to_str()))
                .is_some_and(|n| n.starts_with(&format!("{name}-")))
        })
        .collect()
}

/// Issue 46: `baton status bta` with `beta` running said only that no
/// live instance has that name; a stopped name was never suggested.
#[test]
fn an_unknown_name_suggests_the_nearest_live_and_stopped_names() {
    let env = Env::new();
    let beta = env.serve(&env.workspace("beta"), &["--name", "beta"]);
    // gamma ran once: a stopped name, its spool kept by `serve`.
    let mut gamma = env.serve(&env.workspace("gamma"), &["--name", "gamma"]);
    assert_eq!(gamma.term(), 0, "{}", gamma.stderr());

    let out = env.run(&["status", "bta"]);
    assert_eq!(out.status, 3, "{out:?}");
    assert!(
        out.stderr.starts_with(
            "baton: no live instance has the id or name bta (did you mean beta?); candidates:\n"
        ),
        "{out:?}"
    );
    let out = env.run(&["send", "gama", "hello"]);
    assert_eq!(out.status, 3, "{out:?}");
    assert!(
        out.stderr.starts_with(
            "baton: no live instance has the id or name gama (did you mean gamma? gamma is stopped); "
        ),
        "{out:?}"
    );
    // Nothing near: today's message alone.
    let out = env.run(&["status", "zzzzzz"]);
    assert!(!out.stderr.contains("did you mean"), "{out:?}");
    drop(beta);
}

/// Issue 46: `claude mcp list` checks `baton mcp` by starting it and
/// ending the session; every check left a name behind for good
/// (`list --offline`). A session that received a task keeps its spool.
#[test]
fn a_health_check_of_baton_mcp_leaves_no_spool_behind() {
    let env = Env::new();
    let ws = env.workspace("claudeproj");
    let mut m = Mcp::start(&env, &ws, &[]);
    m.initialize(NEWEST);
    m.finish();
    assert_eq!(spools_of(&env, "claudeproj"), Vec::<PathBuf>::new());
    let out = env.run(&["list", "--offline"]);
    assert!(!out.stdout.contains("claudeproj"), "{out:?}");

    let mut m = Mcp::start(&env, &ws, &[]);
    m.initialize(NEWEST);
    let sent = env.run(&["send", "claudeproj", "Look at this."]);
    assert_eq!(sent.status, 0, "{sent:?}");
    m.finish();
    assert_eq!(spools_of(&env, "claudeproj").len(), 1);
    let out = env.run(&["list", "--offline"]);
    assert!(out.stdout.contains("claudeproj"), "{out:?}");
}

/// Issue 46: docs/hooks.md described `baton-stop-hook` and
/// `baton-agent-loop`, but `make install` installed neither.
#[test]
fn make_install_only_installs_the_hook_scripts_the_page_shows() {
    if !have("make") {
        return;
    }
    let env = Env::new();
    let dest = env.root.join("dest");
    let make = |target: &str| {
        let out = Command::new("make")
            .args(["--no-print-directory", "-C", ROOT, target])
            .arg(format!("DESTDIR={}", dest.display()))
            .arg("PREFIX=/usr")
            .arg(format!("RELEASE={}", baton_bin().display()))
            .env_remove("MAKEFLAGS")
            .env_remove("MFLAGS")
            .output()
            .unwrap();
        assert!(out.status.success(), "make {target}: {out:?}");
    };
    make("install-only");
    let share = dest.join("usr/share/baton");
    for name in ["baton-stop-hook", "baton-agent-loop"] {
        let installed = share.join(name);
        let text = fs::read_to_string(&installed).unwrap();
        assert_eq!(text, recipe(name), "{name} is not what docs/hooks.md shows");
        let kept = Path::new(ROOT).join("docs/hooks").join(name);
        assert_eq!(text, fs::read_to_string(kept).unwrap());
        let mode = fs::metadata(&installed).unwrap().permissions().mode();
        assert_eq!(mode & 0o7777, 0o755, "{name}");
    }
    make("uninstall");
    assert!(!share.join("baton-stop-hook").exists());
    assert!(!share.join("baton-agent-loop").exists());
    assert!(!dest.join("usr/bin/baton").exists());
}

/// Issue 46: a resend of a task the instance kept already (a sender
/// that waits again) was recorded as a refusal (`duplicate: ...`), which
/// `log`, `watch` and the view showed as an alarm.
#[test]
fn a_resend_of_a_kept_task_is_logged_as_a_status() {
    let env = Env::new();
    let mut s = env.serve(
        &env.workspace("beta"),
        &["--name", "beta", "--exec", "true"],
    );
    for _ in 0..2 {
        let out = env.run(&["send", "beta", "same body", "--message-id", "m-1"]);
        assert_eq!(out.status, 0, "{out:?}");
    }
    let log = env.run(&["log", "beta"]);
    let line = log.stdout.lines().find(|l| l.contains("message.rejected"));
    let line = line.unwrap_or_else(|| panic!("no message.rejected: {log:?}"));
    assert!(
        line.ends_with("): already accepted (duplicate): nothing stored again"),
        "{line}"
    );
    assert_eq!(s.term(), 0, "{}", s.stderr());
}

/// A sender that resends a task already kept, to wait for it again, is
/// told so as a status, not as an alarm.
#[test]
fn a_resend_that_waits_again_says_so_as_a_status() {
    let env = Env::new();
    let mut s = env.serve(&env.workspace("beta"), &["--name", "beta"]);
    let out = env.run(&["send", "beta", "same body", "--message-id", "m-1"]);
    assert_eq!(out.status, 0, "{out:?}");
    // Nobody claims it: the wait runs out (exit 5), the task stays.
    let args = [
        "send",
        "beta",
        "same body",
        "--message-id",
        "m-1",
        "--wait",
        "--timeout",
        "0.5",
    ];
    let out = env.run(&args);
    assert_eq!(out.status, 5, "{out:?}");
    assert!(
        out.stderr
            .starts_with("baton: already accepted as m-1 by beta; waiting for it to end\n"),
        "{out:?}"
    );
    assert_eq!(s.term(), 0, "{}", s.stderr());
}
