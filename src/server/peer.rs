//! The process at the other end of a connection: its pid, and what is
//! found of it once per connection (its working directory, its role, a
//! bridge's declaration, the instance it serves).

use super::{RpcError, Shared};
use crate::sys;
use crate::wire::access::{self, BridgeKey, Caller, Door};
use crate::wire::answer::ErrorData;
use crate::wire::{self, Method};

/// The process at the other end of a connection.
#[derive(Default)]
pub struct Peer {
    /// The kernel's peer pid, where the platform reports it.
    pub pid: Option<u32>,
    /// Its account, as the kernel says.
    pub uid: u32,
    /// Its working directory, read from the kernel once per connection,
    /// when a plain sender first needs it.
    cwd: std::cell::OnceCell<Option<String>>,
    /// Its role (`access`), found once per connection, when a request
    /// first needs it.
    classified: std::cell::RefCell<Option<Caller>>,
    /// What a bridge declared in `initialize`: for the rest of the
    /// connection it is that key, whatever it says later.
    pub(super) bridge: std::cell::OnceCell<BridgeKey>,
    /// The instance id and socket it was last found to serve (sender
    /// verification, deliver.rs).
    serving: std::cell::RefCell<Option<(String, String)>>,
}

impl Peer {
    pub fn new(pid: Option<u32>, uid: u32) -> Peer {
        Peer {
            pid,
            uid,
            ..Peer::default()
        }
    }

    /// Who the peer is, for the access table: found once, unless it could
    /// not be told for want of a resource (then again next time).
    pub fn caller(&self, shared: &Shared) -> Caller {
        let known = self.classified.borrow().clone();
        let c = known.unwrap_or_else(|| {
            let c = access::classify(self.pid, self.uid, &shared.ours());
            if !c.unsure {
                *self.classified.borrow_mut() = Some(c.clone());
            }
            c
        });
        match self.bridge.get() {
            Some(key) => c.as_bridge(key.clone()),
            None => c,
        }
    }

    /// `Err`: the access table shuts `door` to this peer, with the error
    /// that says so. A door every role may use is not asked about.
    pub(super) fn check(&self, shared: &Shared, door: Door) -> Result<(), RpcError> {
        let elsewhere = self
            .bridge
            .get()
            .is_some_and(|b| b.target != shared.instance_id);
        if door.roles().len() == access::Role::ALL.len() && !elsewhere {
            return Ok(());
        }
        let caller = self.caller(shared);
        if caller.unsure {
            // A shortage is no verdict on the caller (docs/security.md).
            return Err(RpcError::new(
                wire::INTERNAL_ERROR,
                "cannot tell who the caller is now (its ancestry could not be read: out of descriptors or memory): try again",
            ));
        }
        let hello = door == Door::Method(Method::Ping);
        if caller.may(door) && (!elsewhere || hello) {
            return Ok(());
        }
        let name = shared.lock_manifest().name.clone();
        Err(RpcError {
            code: wire::NOT_PERMITTED,
            message: caller.refusal(door, &name, &shared.instance_id),
            data: Some(ErrorData::role(caller.role.as_str())),
        })
    }

    /// Checks, with `check`, that it serves `socket` as instance `id`,
    /// unless it was found to on this connection; a pass is kept in place
    /// of what was kept before.
    pub(super) fn serves<E>(
        &self,
        id: &str,
        socket: &str,
        check: impl FnOnce() -> Result<(), E>,
    ) -> Result<(), E> {
        let mut serving = self.serving.borrow_mut();
        if serving.as_ref().is_none_or(|(i, s)| i != id || s != socket) {
            check()?;
            *serving = Some((id.to_string(), socket.to_string()));
        }
        Ok(())
    }

    pub(super) fn cwd(&self) -> Option<String> {
        self.cwd
            .get_or_init(|| {
                self.pid
                    .and_then(sys::process_cwd)
                    .map(|p| p.display().to_string())
            })
            .clone()
    }
}
