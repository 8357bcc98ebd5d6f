//! An instance on a thread of this process, for the front ends that bring
//! their own (`baton mcp`, and bare `baton` with its view): started
//! through `instance::Embedded`, then reached through its socket like any
//! other instance (`client::Reconnecting`).

use crate::base::config::Config;
use crate::base::error::{Error, Result};
use crate::instance::{self, Embedded, ServeOptions};
use crossbeam_channel::{self as chan, select};
use std::path::PathBuf;
use std::time::Duration;

/// How long an instance may take to publish itself.
const START_WAIT: Duration = Duration::from_secs(15);
/// How long `stop` waits for the instance to unpublish itself.
const STOP_WAIT: Duration = Duration::from_secs(10);

/// A running instance on its own thread. Dropping it stops the instance
/// without waiting for it; `stop` waits.
pub struct Instance {
    pub id: String,
    pub socket: PathBuf,
    /// `instance::serve`'s result, once it returned.
    pub done: chan::Receiver<Result<()>>,
    stop: chan::Sender<()>,
}

/// Runs `instance::serve(opts)` on a thread of its own and returns once
/// peers can find it, or with the reason it did not start.
pub fn start(mut opts: ServeOptions, config: &Config) -> Result<Instance> {
    let (ready_tx, ready_rx) = chan::bounded(1);
    let (stop, stop_rx) = chan::bounded::<()>(1);
    opts.embedded = Some(Embedded {
        ready: ready_tx,
        stop: stop_rx,
    });
    let (done_tx, done) = chan::bounded(1);
    let cfg = config.clone();
    std::thread::Builder::new()
        .name("baton-instance".into())
        .spawn(move || {
            let _ = done_tx.send(instance::serve(opts, cfg));
        })
        .map_err(|e| Error::Env(format!("cannot start the instance thread: {e}")))?;
    select! {
        recv(ready_rx) -> r => {
            // The instance dropped its ready channel as it failed: its
            // error, which says why (a spool in use names its holder),
            // is on `done` at once.
            let Ok((id, socket)) = r else {
                let failed = done.recv_timeout(Duration::from_secs(5)).ok().and_then(Result::err);
                let why = || Error::Env("the instance did not start".into());
                return Err(failed.unwrap_or_else(why));
            };
            Ok(Instance { id, socket, done, stop })
        },
        recv(done) -> r => Err(r.ok().and_then(Result::err).unwrap_or_else(|| {
            Error::Env("the instance stopped before it was ready".into())
        })),
        default(START_WAIT) => Err(Error::Env("the instance did not start within 15 s".into())),
    }
}

impl Instance {
    /// Tells the instance to stop and waits (boundedly) until it has
    /// unpublished itself.
    pub fn stop(self) {
        drop(self.stop);
        let _ = self.done.recv_timeout(STOP_WAIT);
    }
}
