//! Codex for the tests: a private `CODEX_HOME` whose model provider is a
//! stand-in Responses server (tests/util/model.rs), and `codex app-server
//! --listen unix://PATH` started in it.

use super::Env;
use super::hosts::Host;
use super::model::ModelServer;
use super::{POLL, poll};
use std::fs;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// How long Codex may take to start and make its socket.
pub const CODEX_START: Duration = Duration::from_secs(60);

/// A `CODEX_HOME` under the test's root whose model provider is the
/// stand-in `model`, with no retries and nothing that reaches out.
pub fn codex_home(env: &Env, model: &ModelServer) -> PathBuf {
    let codex_home = env.root.join("codex-home");
    fs::create_dir(&codex_home).unwrap();
    let config = format!(
        r#"model = "stand-in"
model_provider = "standin"

[model_providers.standin]
name = "stand-in"
base_url = "{}/v1"
wire_api = "responses"
request_max_retries = 0
stream_max_retries = 0

[features]
unbounded_connection_retries = false
plugins = false
"#,
        model.url()
    );
    fs::write(codex_home.join("config.toml"), config).unwrap();
    codex_home
}

/// `codex app-server --listen unix://SOCKET` in `cwd`, waited for until
/// its socket is there (PATH is a symlink Codex makes to its socket under
/// `/tmp/codex-daemon-$UID/`; `exists` follows it). Its output goes to
/// `codex-N.out`/`.err` under the test's root. Dropping the guard ends its
/// process group.
pub fn listen(
    env: &Env,
    codex: &Path,
    codex_home: &Path,
    cwd: &Path,
    socket: &Path,
    n: u32,
) -> Host {
    let mut cmd = env.cmd_for(codex);
    cmd.current_dir(cwd)
        .env("CODEX_HOME", codex_home)
        .arg("app-server")
        .arg("--listen")
        .arg(format!("unix://{}", socket.display()));
    let host = Host::spawn(
        cmd,
        &env.root.join(format!("codex-{n}.out")),
        &env.root.join(format!("codex-{n}.err")),
        false,
    );
    let up = poll(CODEX_START, POLL, || socket.exists().then_some(()));
    assert!(
        up.is_some(),
        "no socket at {} after {CODEX_START:?}\nstderr:\n{}",
        socket.display(),
        host.stderr()
    );
    host
}
