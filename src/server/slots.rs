//! The connection slots (protocol §1): at most `BATON_MAX_CONNECTIONS`
//! connections at once, so that neither silent connections nor
//! subscribers can keep a sender or a control call out. Subscribers may
//! hold all but a reserve of an eighth of the slots. A connection that has
//! not yet said `initialize` holds its slot only until a new connection
//! needs it: when every slot is taken, the oldest such connection that is
//! not in the middle of a request gives way, told why (and it must say
//! `initialize` within `INIT_TIMEOUT` anyway).

use super::conn::Writer;
use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

/// How long a new connection has to complete `initialize`.
pub const INIT_TIMEOUT: Duration = Duration::from_secs(5);

/// What a connection in a slot has said so far.
enum Role {
    /// Not initialized: it gives way to a new connection unless `busy`
    /// (handling a line it sent). `out` is how it is told and closed;
    /// none until its thread has started.
    Pending {
        out: Option<Writer>,
        busy: bool,
    },
    /// Initialized, not a subscriber.
    Member,
    Subscriber,
}

pub struct Slots {
    cap: usize,
    inner: Mutex<Inner>,
}

struct Inner {
    next_id: u64,
    /// By connection number: oldest first.
    held: BTreeMap<u64, Role>,
    subscribers: usize,
}

impl Slots {
    pub fn new(cap: usize) -> Slots {
        Slots {
            cap,
            inner: Mutex::new(Inner {
                next_id: 1,
                held: BTreeMap::new(),
                subscribers: 0,
            }),
        }
    }

    pub fn cap(&self) -> usize {
        self.cap
    }

    /// The most subscribers at once: all slots but an eighth.
    pub fn max_subscribers(&self) -> usize {
        self.cap - self.cap / 8
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A slot for a new connection: a free one, or the one of the oldest
    /// idle connection that has not initialized, which is sent the
    /// `refusal` line and closed. None when every slot is held by a connection that has
    /// initialized or is handling a request.
    pub fn admit(&self, refusal: &dyn Fn() -> Vec<u8>) -> Option<u64> {
        let mut inner = self.lock();
        if inner.held.len() >= self.cap {
            let oldest = inner.held.iter().find_map(|(&id, role)| match role {
                Role::Pending {
                    out: Some(out),
                    busy: false,
                } => out.close_now(&refusal()).then_some(id),
                _ => None,
            });
            // Its thread sees the socket shut down and ends; the slot is
            // the new connection's already.
            inner.held.remove(&oldest?);
        }
        let id = inner.next_id;
        inner.next_id += 1;
        inner.held.insert(
            id,
            Role::Pending {
                out: None,
                busy: false,
            },
        );
        Some(id)
    }

    /// The connection's thread has its writer: from now on it can be made
    /// to give way.
    pub fn started(&self, id: u64, out: &Writer) {
        if let Some(Role::Pending { out: o, .. }) = self.lock().held.get_mut(&id) {
            *o = Some(std::sync::Arc::clone(out));
        }
    }

    /// A connection that has not initialized is handling a line (`true`),
    /// or waits for the next one (`false`). False when it has given way
    /// meanwhile: it must not act on the line.
    pub fn busy(&self, id: u64, busy: bool) -> bool {
        match self.lock().held.get_mut(&id) {
            Some(Role::Pending { busy: b, .. }) => {
                *b = busy;
                true
            }
            Some(_) => true,
            None => false,
        }
    }

    /// The connection initialized: it keeps its slot.
    pub fn initialized(&self, id: u64) {
        if let Some(role) = self.lock().held.get_mut(&id) {
            if matches!(role, Role::Pending { .. }) {
                *role = Role::Member;
            }
        }
    }

    /// Makes an initialized connection a subscriber, if fewer than
    /// `max_subscribers` are.
    pub fn subscribe(&self, id: u64) -> bool {
        let mut inner = self.lock();
        if inner.subscribers >= self.max_subscribers() {
            return false;
        }
        match inner.held.get_mut(&id) {
            Some(role @ Role::Member) => *role = Role::Subscriber,
            _ => return false,
        }
        inner.subscribers += 1;
        true
    }

    /// A subscription that the foreground could not register.
    pub fn unsubscribe(&self, id: u64) {
        let mut inner = self.lock();
        if let Some(role @ Role::Subscriber) = inner.held.get_mut(&id) {
            *role = Role::Member;
            inner.subscribers -= 1;
        }
    }

    /// The connection ended (or gave way, when this does nothing).
    pub fn release(&self, id: u64) {
        let mut inner = self.lock();
        if let Some(Role::Subscriber) = inner.held.remove(&id) {
            inner.subscribers -= 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::conn::Out;
    use super::*;
    use std::io::Read;
    use std::os::unix::net::UnixStream;

    /// A started connection in a new slot, and its client's end.
    fn connect(slots: &Slots) -> (u64, UnixStream) {
        let (server, client) = UnixStream::pair().unwrap();
        let id = slots.admit(&Vec::new).unwrap();
        slots.started(id, &Out::new(server, Duration::from_secs(1)));
        (id, client)
    }

    #[test]
    fn the_oldest_idle_connection_not_initialized_gives_way() {
        let slots = Slots::new(3);
        let (a, _a) = connect(&slots);
        let (b, mut b_client) = connect(&slots);
        let (c, _c) = connect(&slots);
        slots.initialized(a);
        assert!(slots.busy(b, true));
        assert!(slots.busy(b, false));
        assert!(slots.busy(c, true));
        // a said hello, c is handling a line: b gives way, told why.
        let d = slots.admit(&|| b"full\n".to_vec()).unwrap();
        let mut told = String::new();
        b_client.read_to_string(&mut told).unwrap();
        assert_eq!(told, "full\n");
        assert!(!slots.busy(b, true), "b gave way: it must not go on");
        slots.release(b);
        // d has not started, so nobody can give way now.
        assert_eq!(slots.admit(&Vec::new), None);
        slots.release(d);
        assert!(slots.admit(&Vec::new).is_some());
    }

    #[test]
    fn an_eighth_of_the_slots_is_kept_from_subscribers() {
        let slots = Slots::new(16);
        assert_eq!(slots.max_subscribers(), 14);
        // Full of connections that have not started: none can give way.
        let ids: Vec<u64> = (0..16).map(|_| slots.admit(&Vec::new).unwrap()).collect();
        assert_eq!(slots.admit(&Vec::new), None);
        for &id in &ids {
            slots.initialized(id);
        }
        let subscribed = ids.iter().filter(|&&id| slots.subscribe(id)).count();
        assert_eq!(subscribed, 14);
        assert!(!slots.subscribe(ids[15]));
        slots.release(ids[0]);
        assert!(slots.subscribe(ids[15]), "a released subscriber's place");
        slots.release(ids[1]);
        assert!(slots.admit(&Vec::new).is_some());
        assert!(slots.admit(&Vec::new).is_some());
        assert_eq!(slots.admit(&Vec::new), None);
    }
}
