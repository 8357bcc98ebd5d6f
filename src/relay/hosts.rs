//! One command on several hosts (`--via CMD`..., `--hosts FILE`): which
//! hosts, and the command run on each of them in parallel (at most
//! `AT_ONCE` at a time), each bounded by its own deadline. A host that
//! fails is one line of what went wrong there; the others' answers stand.

use super::via::{self, Via};
use crate::base::config::Config;
use crate::base::error::{Error, Result};
use crate::text::sanitize::escape;
use std::path::Path;
use std::time::{Duration, Instant};

/// How many hosts are asked at once.
pub const AT_ONCE: usize = 8;

/// How long a host may take by default (`--host-timeout`).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

/// One host a command reaches: the via command line, and what the
/// `HOST` column calls it (the command's last word: `ssh -p 2222
/// ops@build` is `ops@build`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Host {
    pub via: String,
    pub name: String,
}

impl Host {
    pub fn new(via: &str) -> Host {
        let name = via.split_whitespace().last().unwrap_or("").to_string();
        Host {
            via: via.trim().to_string(),
            name,
        }
    }
}

/// The hosts of `--via` (each a command line, in order) and then of each
/// `--hosts FILE`: one a line, `#` starts a comment, blank lines are
/// skipped; a line of one word is an ssh destination (`ssh DEST`), a
/// longer one a command line as `--via` takes. The same command line
/// given twice is asked once.
pub fn hosts(vias: &[String], files: &[String]) -> Result<Vec<Host>> {
    let mut out: Vec<Host> = Vec::new();
    let mut add = |h: Host| {
        if !out.iter().any(|o| o.via == h.via) {
            out.push(h);
        }
    };
    for v in vias {
        via::check_via(v)?;
        add(Host::new(v));
    }
    for f in files {
        for h in read_hosts(Path::new(f))? {
            add(h);
        }
    }
    Ok(out)
}

/// The hosts a `--hosts FILE` lists.
fn read_hosts(path: &Path) -> Result<Vec<Host>> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        Error::Usage(format!(
            "--hosts {}: {}",
            escape(&path.display().to_string()),
            e
        ))
    })?;
    Ok(parse_hosts(&text))
}

fn parse_hosts(text: &str) -> Vec<Host> {
    text.lines()
        .map(|l| l.split('#').next().unwrap_or("").trim())
        .filter(|l| !l.is_empty())
        .map(|l| match l.split_whitespace().count() {
            1 => Host::new(&format!("ssh {l}")),
            _ => Host::new(l),
        })
        .collect()
}

/// What one host answered: its exit status, standard output and the
/// last line it wrote on stderr (escaped, without `baton: `); or why it
/// gave no answer.
pub type Answer = std::result::Result<Reply, Failure>;

#[derive(Clone, Debug)]
pub struct Reply {
    pub code: i32,
    pub out: Vec<u8>,
    pub said: Option<String>,
}

/// Why a host gave no answer, as its line on stderr says after `HOST: `.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Failure(pub String);

/// Runs `VIA REMOTE ARGS...` on every host with `input` on its stdin, at
/// most `AT_ONCE` at a time, each bounded by `timeout`, and gives the
/// answers in the hosts' order. The remote's stderr is kept, not passed
/// through.
pub fn ask_all(
    hosts: &[Host],
    config: &Config,
    args: &[String],
    input: &[u8],
    timeout: Duration,
    multiplex: bool,
) -> Vec<Answer> {
    let (tx, rx) = crossbeam_channel::unbounded();
    let mut answers: Vec<Option<Answer>> = vec![None; hosts.len()];
    let (mut next, mut running) = (0, 0);
    while next < hosts.len() || running > 0 {
        while running < AT_ONCE && next < hosts.len() {
            let (host, config, tx) = (hosts[next].clone(), config.clone(), tx.clone());
            let (args, input, at) = (args.to_vec(), input.to_vec(), next);
            std::thread::spawn(move || {
                let answer = ask(&host, &config, &args, &input, timeout, multiplex);
                let _ = tx.send((at, answer));
            });
            next += 1;
            running += 1;
        }
        // Each ask ends by its own deadline (its command is killed then).
        let Ok((at, answer)) = rx.recv() else { break };
        answers[at] = Some(answer);
        running -= 1;
    }
    (answers.into_iter())
        .map(|a| a.unwrap_or_else(|| Err(Failure("no answer".into()))))
        .collect()
}

/// One host's answer, by `timeout`: a failure when the command could not
/// be run, ssh could not reach the host (exit 255), no baton was found
/// there (127) or the time ran out; else what baton there answered.
pub fn ask(
    host: &Host,
    config: &Config,
    args: &[String],
    input: &[u8],
    timeout: Duration,
    multiplex: bool,
) -> Answer {
    let mut v = Via::spawn(&host.via, config, args, multiplex, true)
        .map_err(|e| Failure(format!("unreachable: {e}")))?;
    let until = Instant::now() + timeout;
    let late = || {
        let within = timeout.as_secs_f64();
        Failure(format!("unreachable: no answer within {within} s"))
    };
    let (out, err) = v.read_to_end(until, input, via::MAX_VIA_OUTPUT);
    let out = out.ok_or_else(late)?;
    if out.len() > via::MAX_VIA_OUTPUT {
        return Err(Failure(format!(
            "wrote more than {} MiB; stopped it",
            via::MAX_VIA_OUTPUT >> 20
        )));
    }
    let said = last_line(&err.unwrap_or_default());
    ended(v.exit_code(until), out, said).ok_or_else(late)?
}

/// What a host's command that ended with `code` (None: it had not
/// exited) gave: a failure when ssh could not reach the host (exit 255)
/// or no baton was found there (127); else baton's answer there.
fn ended(code: Option<i32>, out: Vec<u8>, said: Option<String>) -> Option<Answer> {
    Some(match code? {
        // ssh's own failure: it could not reach the host.
        255 => Err(Failure(format!(
            "unreachable: {}",
            said.unwrap_or_else(|| "ssh failed (exit status 255)".into())
        ))),
        127 => Err(Failure(format!(
            "no baton found there (exit status 127; set BATON_REMOTE to its path there, see docs/ssh.md){}",
            said.map(|s| format!(": {s}")).unwrap_or_default()
        ))),
        code => Ok(Reply { code, out, said }),
    })
}

/// What a host streaming its answer (`watch`) gives: a line of its
/// standard output, or its end.
pub enum Streamed {
    Line(usize, Vec<u8>),
    Ended(usize, Answer),
}

/// Runs `VIA REMOTE ARGS...` on every host at once, for as long as each
/// runs, and gives their lines as they come, each with its host's index,
/// then each host's end (its exit status and last stderr line, with no
/// output kept). A host's command is killed when its reader ends.
pub fn stream(
    hosts: &[Host],
    config: &Config,
    args: &[String],
    multiplex: bool,
) -> crossbeam_channel::Receiver<Streamed> {
    let (tx, rx) = crossbeam_channel::bounded(64);
    for (at, host) in hosts.iter().enumerate() {
        let (host, config, args, tx) = (host.clone(), config.clone(), args.to_vec(), tx.clone());
        std::thread::spawn(move || {
            let mut v = match Via::spawn(&host.via, &config, &args, multiplex, true) {
                Ok(v) => v,
                Err(e) => {
                    let _ = tx.send(Streamed::Ended(
                        at,
                        Err(Failure(format!("unreachable: {e}"))),
                    ));
                    return;
                }
            };
            let (out, err) = v.pipes();
            // At most 1 MiB of it.
            let err = via::read_all(err, (1 << 20) - 1);
            if let Some(out) = out {
                for line in std::io::BufRead::split(std::io::BufReader::new(out), b'\n') {
                    let Ok(line) = line else { break };
                    if tx.send(Streamed::Line(at, line)).is_err() {
                        return;
                    }
                }
            }
            let code = v.exit_code(Instant::now() + Duration::from_secs(5));
            let said = last_line(&err.recv().unwrap_or_default());
            let end = ended(code, Vec::new(), said)
                .unwrap_or_else(|| Err(Failure("did not exit".into())));
            let _ = tx.send(Streamed::Ended(at, end));
        });
    }
    rx
}

/// The last line a host wrote on stderr, escaped, without `baton: `.
fn last_line(err: &[u8]) -> Option<String> {
    let text = String::from_utf8_lossy(err);
    let line = text.lines().rev().find(|l| !l.trim().is_empty())?;
    let line = line.strip_prefix("baton: ").unwrap_or(line);
    Some(escape(line.trim()).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_host_is_named_by_its_commands_last_word() {
        assert_eq!(Host::new("ssh build").name, "build");
        assert_eq!(Host::new(" ssh -p 2222 ops@build2 ").name, "ops@build2");
        assert_eq!(
            Host::new("ssh -p 2222 ops@build2 ").via,
            "ssh -p 2222 ops@build2"
        );
    }

    #[test]
    fn a_hosts_file_has_destinations_commands_and_comments() {
        let hosts = parse_hosts("# the fleet\nbuild\n\n  ops@web1  # front\nssh -p 2222 db\n#x\n");
        let vias: Vec<&str> = hosts.iter().map(|h| h.via.as_str()).collect();
        assert_eq!(vias, ["ssh build", "ssh ops@web1", "ssh -p 2222 db"]);
        let names: Vec<&str> = hosts.iter().map(|h| h.name.as_str()).collect();
        assert_eq!(names, ["build", "ops@web1", "db"]);
    }

    #[test]
    fn the_same_host_twice_is_asked_once_and_an_empty_via_is_refused() {
        let h = hosts(&["ssh a".into(), "ssh b".into(), "ssh a".into()], &[]).unwrap();
        assert_eq!(h.len(), 2);
        assert!(hosts(&[" ".into()], &[]).is_err());
        let e = hosts(&[], &["/nonexistent/hosts".into()]).unwrap_err();
        assert!(e.to_string().contains("--hosts /nonexistent/hosts"), "{e}");
    }

    #[test]
    fn hosts_are_asked_in_parallel_and_answer_in_order() {
        // `sh -c` stands in for ssh: each "host" echoes its name after its
        // remote command's words, which it ignores. A host that waits for
        // its stdin to close would hang alone; together they end by the
        // deadline, the slow one as a failure.
        let config = Config {
            remote: Some("echo".into()),
            ..Config::default()
        };
        let hosts: Vec<Host> = (0..12)
            .map(|i| Host::new(&format!("true; echo h{i}; : ")))
            .collect();
        let answers = ask_all(
            &hosts,
            &config,
            &["list".into()],
            b"",
            Duration::from_secs(60),
            false,
        );
        for (i, a) in answers.iter().enumerate() {
            let a = a.as_ref().unwrap();
            assert_eq!(a.code, 0);
            assert!(
                String::from_utf8_lossy(&a.out).starts_with(&format!("h{i}\n")),
                "{i}"
            );
        }
        let slow = vec![Host::new("sleep 600; : ")];
        let a = ask_all(&slow, &config, &[], b"", Duration::from_millis(300), false);
        assert!(
            a[0].as_ref()
                .unwrap_err()
                .0
                .starts_with("unreachable: no answer within")
        );
        let fails = vec![Host::new(
            "echo 'baton: no live instance named x' >&2; exit 3; : ",
        )];
        let a = ask_all(&fails, &config, &[], b"", Duration::from_secs(60), false);
        let a = a[0].as_ref().unwrap();
        assert_eq!(
            (a.code, a.said.as_deref()),
            (3, Some("no live instance named x"))
        );
        let gone = vec![Host::new(
            "echo 'ssh: connect to host x port 22: Connection refused' >&2; exit 255; : ",
        )];
        let a = ask_all(&gone, &config, &[], b"", Duration::from_secs(60), false);
        assert_eq!(
            a[0].as_ref().unwrap_err().0,
            "unreachable: ssh: connect to host x port 22: Connection refused"
        );
    }
}
