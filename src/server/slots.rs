//! The connection slots (protocol §1): at most `BATON_MAX_CONNECTIONS`
//! connections at once, and no set of clients can hold them all against a
//! sender or a control call. Subscribers may hold all but a reserve of an
//! eighth of the slots. Every other connection holds its slot only until a
//! new connection needs it: when every slot is taken, one that is idle
//! (not handling a request, not writing a line) gives way, told why. The
//! oldest that has not said `initialize` goes first (and it must say it
//! within `INIT_TIMEOUT` anyway), then the one idle longest.

use super::out::Writer;
use crate::base::lock;
use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Instant;

/// Why a connection gave way to a new one: the line it is told depends on
/// it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GaveWay {
    /// It had not said `initialize`.
    Uninitialized,
    /// It had said `initialize` and was the one idle longest.
    Idle,
}

/// A connection in a slot: what it has said so far, and whether it may
/// give way.
struct Slot {
    /// How it is told and closed; none until its thread has started.
    out: Option<Writer>,
    /// Handling a line it sent, until the answer is written: it does not
    /// give way.
    busy: bool,
    initialized: bool,
    /// Subscribers never give way; they have their share instead.
    subscriber: bool,
    /// When it connected or last finished a line.
    since: Instant,
}

pub struct Slots {
    cap: usize,
    inner: Mutex<Inner>,
}

struct Inner {
    next_id: u64,
    /// By connection number: oldest first.
    held: BTreeMap<u64, Slot>,
}

impl Inner {
    /// Closes the connection that gives way to a new one, telling it why:
    /// the oldest idle one that has not initialized, else the one idle
    /// longest. None when every connection is busy or a subscriber.
    fn make_room(&self, refusal: &dyn Fn(GaveWay) -> Vec<u8>) -> Option<u64> {
        // Those not initialized first, oldest first; then by how long they
        // have been idle.
        let mut idle: Vec<_> = self
            .held
            .iter()
            .filter(|(_, slot)| !slot.busy && !slot.subscriber)
            .filter_map(|(&id, slot)| {
                let since = slot.initialized.then_some(slot.since);
                Some((slot.initialized, since, id, slot.out.as_ref()?))
            })
            .collect();
        idle.sort_by_key(|&(initialized, since, id, _)| (initialized, since, id));
        // One that is writing a line (an error before it closes) is left
        // alone: it is ending anyway.
        idle.into_iter()
            .find(|&(initialized, _, _, out)| {
                let why = if initialized {
                    GaveWay::Idle
                } else {
                    GaveWay::Uninitialized
                };
                out.close_now(&refusal(why))
            })
            .map(|(_, _, id, _)| id)
    }
}

impl Slots {
    pub fn new(cap: usize) -> Slots {
        Slots {
            cap,
            inner: Mutex::new(Inner {
                next_id: 1,
                held: BTreeMap::new(),
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

    /// A slot for a new connection: a free one, or the one of a connection
    /// that gives way (`Inner::make_room`), which is sent its `refusal`
    /// line and closed. None when every slot is held by a subscriber or a
    /// connection handling a request.
    pub fn admit(&self, refusal: &dyn Fn(GaveWay) -> Vec<u8>) -> Option<u64> {
        let mut inner = lock(&self.inner);
        if inner.held.len() >= self.cap {
            // Its thread sees the socket shut down and ends; the slot is
            // the new connection's already.
            let gone = inner.make_room(refusal)?;
            inner.held.remove(&gone);
        }
        let id = inner.next_id;
        inner.next_id += 1;
        inner.held.insert(
            id,
            Slot {
                out: None,
                busy: false,
                initialized: false,
                subscriber: false,
                since: Instant::now(),
            },
        );
        Some(id)
    }

    /// The connection's thread has its writer: from now on it can be made
    /// to give way.
    pub fn started(&self, id: u64, out: &Writer) {
        self.change(id, |slot| slot.out = Some(std::sync::Arc::clone(out)));
    }

    /// Changes connection `id`'s slot; false when it has none (it gave
    /// way).
    fn change(&self, id: u64, f: impl FnOnce(&mut Slot)) -> bool {
        lock(&self.inner).held.get_mut(&id).map(f).is_some()
    }

    /// The connection is handling a line (`true`), or has written its
    /// answer and waits for the next one (`false`). False when it has
    /// given way meanwhile: it must not act on the line.
    pub fn busy(&self, id: u64, busy: bool) -> bool {
        self.change(id, |slot| {
            slot.busy = busy;
            if !busy {
                slot.since = Instant::now();
            }
        })
    }

    /// The connection initialized: from now on it gives way only to
    /// connections that did too, when it is the one idle longest.
    pub fn initialized(&self, id: u64) {
        self.change(id, |slot| slot.initialized = true);
    }

    /// Makes an initialized connection a subscriber, if fewer than
    /// `max_subscribers` are.
    pub fn subscribe(&self, id: u64) -> bool {
        let mut inner = lock(&self.inner);
        if inner.held.values().filter(|slot| slot.subscriber).count() >= self.max_subscribers() {
            return false;
        }
        match inner.held.get_mut(&id) {
            Some(slot) if slot.initialized && !slot.subscriber => slot.subscriber = true,
            _ => return false,
        }
        true
    }

    /// A subscription that the foreground could not register.
    pub fn unsubscribe(&self, id: u64) {
        self.change(id, |slot| slot.subscriber = false);
    }

    /// The connection ended (or gave way, when this does nothing).
    pub fn release(&self, id: u64) {
        lock(&self.inner).held.remove(&id);
    }
}

#[cfg(test)]
mod tests {
    use super::super::out::Out;
    use super::*;
    use std::io::Read;
    use std::os::unix::net::UnixStream;
    use std::time::Duration;

    /// A started connection in a new slot, and its client's end.
    fn connect(slots: &Slots) -> (u64, UnixStream) {
        let (server, client) = UnixStream::pair().unwrap();
        let id = slots.admit(&|_| Vec::new()).unwrap();
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
        // a said hello, c is handling a line: b, which did not say hello,
        // gives way first, told why.
        let d = slots
            .admit(&|why| format!("{why:?}\n").into_bytes())
            .unwrap();
        let mut told = String::new();
        b_client.read_to_string(&mut told).unwrap();
        assert_eq!(told, "Uninitialized\n");
        assert!(!slots.busy(b, true), "b gave way: it must not go on");
        slots.release(b);
        // a is handling a line too, and d has not started: nobody can give
        // way now.
        assert!(slots.busy(a, true));
        assert_eq!(slots.admit(&|_| Vec::new()), None);
        slots.release(d);
        assert!(slots.admit(&|_| Vec::new()).is_some());
    }

    #[test]
    fn the_connection_idle_longest_gives_way_and_subscribers_never_do() {
        let slots = Slots::new(4);
        let (a, mut a_client) = connect(&slots);
        let (b, mut b_client) = connect(&slots);
        let (c, _c) = connect(&slots);
        let (d, _d) = connect(&slots);
        for id in [a, b, c, d] {
            slots.initialized(id);
        }
        assert!(slots.subscribe(d));
        // a finishes a line after b, c and d: b has been idle longest.
        for id in [b, c, a] {
            std::thread::sleep(Duration::from_millis(2));
            assert!(slots.busy(id, true));
            assert!(slots.busy(id, false));
        }
        let why = |why: GaveWay| format!("{why:?}\n").into_bytes();
        let e = slots.admit(&why).unwrap();
        let mut told = String::new();
        b_client.read_to_string(&mut told).unwrap();
        assert_eq!(told, "Idle\n");
        assert!(!slots.busy(b, true), "b gave way: it must not go on");
        // Then c; then a, once c is handling a line.
        assert!(slots.busy(c, true));
        let f = slots.admit(&why).unwrap();
        told.clear();
        a_client.read_to_string(&mut told).unwrap();
        assert_eq!(told, "Idle\n");
        // Left: d subscribes, c is busy, e and f have not started.
        assert_eq!(slots.admit(&why), None);
        for id in [c, d, e, f] {
            slots.release(id);
        }
        assert!(slots.admit(&why).is_some());
    }

    #[test]
    fn an_eighth_of_the_slots_is_kept_from_subscribers() {
        let slots = Slots::new(16);
        assert_eq!(slots.max_subscribers(), 14);
        // Full of connections that have not started: none can give way.
        let ids: Vec<u64> = (0..16)
            .map(|_| slots.admit(&|_| Vec::new()).unwrap())
            .collect();
        assert_eq!(slots.admit(&|_| Vec::new()), None);
        for &id in &ids {
            slots.initialized(id);
        }
        let subscribed = ids.iter().filter(|&&id| slots.subscribe(id)).count();
        assert_eq!(subscribed, 14);
        assert!(!slots.subscribe(ids[15]));
        slots.release(ids[0]);
        assert!(slots.subscribe(ids[15]), "a released subscriber's place");
        slots.release(ids[1]);
        assert!(slots.admit(&|_| Vec::new()).is_some());
        assert!(slots.admit(&|_| Vec::new()).is_some());
        assert_eq!(slots.admit(&|_| Vec::new()), None);
    }
}
