//! A front end's subscription through the library's client
//! (`baton::client::Session::into_events`): the reader thread ends with
//! its receiver, so the instance frees the subscriber's place at once.

use crate::util::{Env, POLL, poll};
use baton::client::{ClientError, Events, Session};
use serde_json::json;
use std::time::Duration;

/// The instance's cap on subscribers with the default 64 connections.
const SUBSCRIBERS: usize = 56;

/// A subscription on a connection of its own: its events and the
/// `next_seq` the instance answered.
fn subscribe(socket: &std::path::Path) -> Result<(Events, u64), ClientError> {
    let mut s = Session::open(socket, Duration::from_secs(10))?;
    let sub = s.subscribe(json!({}))?;
    let (events, _writer) = s.into_events();
    Ok((events, sub.next_seq))
}

/// Regression (issue 45, defect 3): dropped receivers used to keep their
/// reader threads, sockets and the instance's subscriber places until the
/// next event; with no event in between, the cap stayed full for good.
#[test]
fn dropped_event_receivers_free_their_subscriber_places() {
    let env = Env::new();
    let ws = env.workspace("ws");
    let inst = env.serve(&ws, &["--name", "watched"]);
    let mut held = Vec::new();
    for i in 0..SUBSCRIBERS {
        let (events, next_seq) =
            subscribe(&inst.socket).unwrap_or_else(|e| panic!("subscriber {} refused: {e}", i + 1));
        held.push((events, next_seq));
    }
    let next_seq = held[SUBSCRIBERS - 1].1;
    match subscribe(&inst.socket) {
        Err(ClientError::TooManyConnections { .. }) => {}
        Err(e) => panic!("past the cap: {e}"),
        Ok(_) => panic!("a subscriber past the cap of {SUBSCRIBERS} was taken"),
    }
    drop(held);
    // Every place comes back, with no event to wake the readers: as many
    // subscribers as the cap allows get in again.
    let mut again = Vec::new();
    let all_back = poll(Duration::from_secs(30), POLL * 5, || {
        while again.len() < SUBSCRIBERS {
            match subscribe(&inst.socket) {
                Ok(sub) => again.push(sub),
                Err(ClientError::TooManyConnections { .. }) => return None,
                Err(e) => panic!("subscribing again: {e}"),
            }
        }
        Some(())
    });
    assert!(
        all_back.is_some(),
        "only {} of {SUBSCRIBERS} subscriber places came back after their receivers were dropped",
        again.len()
    );
    for (events, seq) in &again {
        assert_eq!(*seq, next_seq, "an event was emitted in between");
        assert!(events.try_recv().is_err(), "an event arrived");
    }
}
