//! `/inbox`: the whole inbox of the view's instance, a page at a time.

use crate::base::error::{Error, Result};
use crate::client::{self, ListError, PLACES};
use crate::wire::answer::InboxPage;
use serde_json::Value;

/// `/inbox`: the whole inbox, read a page at a time through `call` (one
/// `inbox/list` with the params given), one line a task and then the
/// count in each place. An operator who asks for the inbox means all of
/// it, not its first 1000 tasks or 1 MiB; the view scrolls.
pub fn inbox_listing(call: &mut dyn FnMut(Value) -> Result<Value>) -> Result<String> {
    let all = client::list_all(&mut |p| {
        let page = call(serde_json::to_value(p).expect("params serialize"))?;
        serde_json::from_value::<InboxPage>(page)
            .map_err(|e| Error::Transport(format!("inbox/list answered {e}")))
    });
    match all {
        Ok(all) => Ok(inbox_text(&all)),
        Err(ListError::Call(e)) => Err(e),
        Err(ListError::KeptChanging) => Err(Error::Transport(
            "the inbox kept changing while it was listed; try /inbox again".into(),
        )),
        Err(e) => Err(Error::Transport(e.to_string())),
    }
}

fn inbox_text(all: &InboxPage) -> String {
    let mut out: Vec<String> = all
        .tasks()
        .map(|(place, t)| {
            let asked = place == "queued" && all.awaiting_approval.contains(&t.message_id);
            let place = if asked { "awaiting approval" } else { place };
            format!(
                "{place:<11} {}  from {}",
                t.message_id,
                crate::workers::turn::display_name(&t.sender)
            )
        })
        .collect();
    if out.is_empty() {
        return "the inbox is empty".into();
    }
    let counts: Vec<String> = PLACES
        .iter()
        .map(|p| format!("{} {p}", all.place(p).len()))
        .collect();
    let n = out.len();
    out.push(format!(
        "{n} task{}: {}",
        if n == 1 { "" } else { "s" },
        counts.join(", ")
    ));
    match all.awaiting_approval.len() {
        0 => {}
        1 => out.push("1 task awaits approval: /approve ID or /deny ID answers it".into()),
        n => out.push(format!(
            "{n} tasks await approval: /approve ID or /deny ID answers each"
        )),
    }
    out.join("\n")
}
