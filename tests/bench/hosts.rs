//! Row 8e (issue 46): `baton list` over 20 ssh host aliases of one sshd
//! against one alias, connection sharing on: the hosts are asked in
//! parallel, so twenty cost little more than one.

use crate::util::sshd::{self, Masters, Sshd};
use crate::world::{self, World, run_timed};
use crate::{Fig, Row, Scale, Target, median, row, skipped};
use std::fs;
use std::time::Duration;

/// How many host aliases.
const HOSTS: usize = 20;

pub fn row_hosts(sc: &Scale) -> Result<Vec<Row>, String> {
    if let Some(what) = sshd::missing() {
        if std::env::var("BATON_REQUIRE_ALL").as_deref() == Ok("1") {
            return Err(format!(
                "{what} required (BATON_REQUIRE_ALL=1) but not installed"
            ));
        }
        eprintln!("bench: row 8e skipped: {what} not installed");
        return Ok(vec![skipped(
            "8e",
            &format!("`baton list` over {HOSTS} hosts: {what} not installed"),
        )]);
    }
    let mut remote = World::new(false, &[("BATON_FSYNC", "off")])?;
    remote.start(&["far".into()], &["--ephemeral-spool"])?;
    let bin = world::baton_bin();
    let local = World::new(false, &[("BATON_REMOTE", &bin.display().to_string())])?;
    let server = Sshd::start(None, None)?;
    let master = Masters(local.reg.clone());
    // Twenty names for the one sshd, each its own host to baton (and to
    // ssh: a master each).
    let config = local.root().join("ssh_config");
    let mut c = format!(
        "Host *\n  HostName 127.0.0.1\n  Port {}\n  IdentityFile {}\n  IdentitiesOnly yes\n  \
         BatchMode yes\n  StrictHostKeyChecking yes\n  UserKnownHostsFile {}\n  LogLevel ERROR\n  \
         SetEnv BATON_DIR={} XDG_STATE_HOME={}\n",
        server.port,
        server.key("user_key").display(),
        server.key("known_hosts").display(),
        remote.reg.display(),
        remote.state.display()
    );
    c.insert_str(0, "# the bench's host aliases\n");
    fs::write(&config, c).map_err(|e| e.to_string())?;
    let vias: Vec<String> = (0..HOSTS)
        .map(|i| format!("ssh -F {} h{i:02}", config.display()))
        .collect();
    let list = |hosts: &[String]| -> Result<Duration, String> {
        let mut cmd = local.cmd();
        cmd.args(["list", "--json", "--host-timeout", "60"]);
        for v in hosts {
            cmd.args(["--via", v]);
        }
        let (wall, out) = run_timed(&mut cmd, b"", Duration::from_secs(120))
            .map_err(|e| format!("baton list over {} hosts: {e}", hosts.len()))?;
        let n = String::from_utf8_lossy(&out).matches("\"host\":").count();
        if n != hosts.len() {
            return Err(format!(
                "baton list over {} hosts listed {n}: {}",
                hosts.len(),
                String::from_utf8_lossy(&out)
            ));
        }
        Ok(wall)
    };
    // The masters are opened once, then every list shares them.
    list(&vias)?;
    let (mut one, mut all) = (Vec::new(), Vec::new());
    for _ in 0..sc.ssh_rounds {
        one.push(list(&vias[..1])?);
        all.push(list(&vias)?);
    }
    master.stop();
    drop(server);
    remote.stop_all();
    Ok(vec![row(
        "8e",
        &format!(
            "`baton list` over {HOSTS} ssh hosts (aliases of one sshd, shared connections), median of {}; over 1",
            sc.ssh_rounds
        ),
        Fig::Time(median(&all)),
        Fig::Time(median(&one)),
        Target::Ratio(2.0),
    )])
}
