//! `inbox/list` read to its last page: one listing of the whole inbox,
//! for `baton inbox list`, the view's `/inbox` and `inbox wait`. A task
//! listed twice (it moved while the pages were read) is kept where it
//! was seen last; a page that follows a task that left the inbox
//! meanwhile starts the reading over.

use crate::wire::Summary;
use crate::wire::answer::InboxPage;
use crate::wire::request::ListParams;
use std::collections::{HashMap, HashSet};
use std::fmt;

/// How often the reading starts over before it gives up.
const ATTEMPTS: usize = 5;

/// Why the whole inbox could not be read.
#[derive(Debug)]
pub enum ListError<E> {
    /// A call failed.
    Call(E),
    /// A page with no tasks said another followed it.
    EmptyPage,
    /// The inbox changed under every attempt.
    KeptChanging,
}

impl<E: fmt::Display> fmt::Display for ListError<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ListError::Call(e) => e.fmt(f),
            ListError::EmptyPage => {
                f.write_str("inbox/list answered a page without tasks that is not the last")
            }
            ListError::KeptChanging => f.write_str("the inbox kept changing while it was listed"),
        }
    }
}

/// Every page, merged into one with no `next`.
pub fn list_all<E>(
    call: &mut dyn FnMut(&ListParams) -> Result<InboxPage, E>,
) -> Result<InboxPage, ListError<E>> {
    for _ in 0..ATTEMPTS {
        if let Some(all) = pages(call)? {
            return Ok(all);
        }
    }
    Err(ListError::KeptChanging)
}

/// The places of a page, in the order a listing shows them.
pub const PLACES: [&str; 4] = ["queued", "processing", "interrupted", "rejected"];

impl InboxPage {
    /// A place's tasks by its name in `PLACES`.
    pub fn place(&self, place: &str) -> &[Summary] {
        match place {
            "queued" => &self.queued,
            "processing" => &self.processing,
            "interrupted" => &self.interrupted,
            _ => &self.rejected,
        }
    }

    fn place_mut(&mut self, place: &str) -> &mut Vec<Summary> {
        match place {
            "queued" => &mut self.queued,
            "processing" => &mut self.processing,
            "interrupted" => &mut self.interrupted,
            _ => &mut self.rejected,
        }
    }

    /// Every task with its place, in `PLACES` order.
    pub fn tasks(&self) -> impl Iterator<Item = (&'static str, &Summary)> {
        PLACES
            .into_iter()
            .flat_map(move |p| self.place(p).iter().map(move |t| (p, t)))
    }
}

fn pages<E>(
    call: &mut dyn FnMut(&ListParams) -> Result<InboxPage, E>,
) -> Result<Option<InboxPage>, ListError<E>> {
    let mut seen: Vec<Option<(&'static str, Summary)>> = Vec::new();
    let mut at: HashMap<String, usize> = HashMap::new();
    let mut waiting = HashSet::new();
    let mut params = ListParams::default();
    loop {
        let mut page = call(&params).map_err(ListError::Call)?;
        if page.status.is_some() {
            return Ok(None);
        }
        let mut n = 0;
        for place in PLACES {
            for t in std::mem::take(page.place_mut(place)) {
                if let Some(earlier) = at.insert(t.message_id.clone(), seen.len()) {
                    seen[earlier] = None;
                }
                seen.push(Some((place, t)));
                n += 1;
            }
        }
        waiting.extend(page.awaiting_approval);
        match page.next {
            None => break,
            Some(_) if n == 0 => return Err(ListError::EmptyPage),
            Some(next) => params.after = Some(next),
        }
    }
    let mut all = InboxPage::default();
    for (place, t) in seen.into_iter().flatten() {
        if place == "queued" && waiting.contains(&t.message_id) {
            all.awaiting_approval.push(t.message_id.clone());
        }
        all.place_mut(place).push(t);
    }
    Ok(Some(all))
}
