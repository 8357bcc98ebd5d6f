//! `/inbox`: the whole inbox of the view's instance, a page at a time.

use serde_json::{Value, json};

/// The places of `inbox/list`, in the order `/inbox` shows them.
const PLACES: [&str; 4] = ["queued", "processing", "interrupted", "rejected"];

/// How often `/inbox` starts over when the task its next page would
/// follow left the inbox meanwhile (as `baton inbox list` does).
const LIST_ATTEMPTS: usize = 5;

/// `/inbox`: the whole inbox, read a page at a time through `call` (one
/// `inbox/list` with the params given), one line a task and then the
/// count in each place. An operator who asks for the inbox means all of
/// it, not its first 1000 tasks or 1 MiB; the view scrolls.
pub fn inbox_listing(
    call: &mut dyn FnMut(Value) -> std::result::Result<Value, String>,
) -> std::result::Result<String, String> {
    for _ in 0..LIST_ATTEMPTS {
        if let Some(tasks) = inbox_pages(call)? {
            return Ok(inbox_text(&tasks));
        }
    }
    Err("the inbox kept changing while it was listed; try /inbox again".into())
}

/// Every task of the pages from the first to the last, with its place; a
/// task listed twice (it moved meanwhile) where it was seen last. None
/// when the task a page was to follow left the inbox meanwhile.
fn inbox_pages(
    call: &mut dyn FnMut(Value) -> std::result::Result<Value, String>,
) -> std::result::Result<Option<Vec<(&'static str, Value)>>, String> {
    let mut seen: Vec<Option<(&'static str, Value)>> = Vec::new();
    let mut at: std::collections::HashMap<String, usize> = std::collections::HashMap::new();
    let mut after: Option<String> = None;
    loop {
        let params = match &after {
            Some(a) => json!({"after": a}),
            None => json!({}),
        };
        let mut r = call(params)?;
        if r.get("status").is_some() {
            return Ok(None);
        }
        let mut n = 0;
        for place in PLACES {
            let Some(Value::Array(tasks)) = r.get_mut(place).map(Value::take) else {
                continue;
            };
            for t in tasks {
                let id = t["message_id"].as_str().unwrap_or("").to_string();
                if let Some(earlier) = at.insert(id, seen.len()) {
                    seen[earlier] = None;
                }
                seen.push(Some((place, t)));
                n += 1;
            }
        }
        match r.get("next").and_then(Value::as_str) {
            None => break,
            Some(_) if n == 0 => {
                return Err("inbox/list answered a page without tasks that is not the last".into());
            }
            Some(next) => after = Some(next.to_string()),
        }
    }
    let mut tasks: Vec<(&'static str, Value)> = seen.into_iter().flatten().collect();
    // Stable: each place keeps its order.
    tasks.sort_by_key(|(place, _)| PLACES.iter().position(|p| p == place));
    Ok(Some(tasks))
}

fn inbox_text(tasks: &[(&'static str, Value)]) -> String {
    if tasks.is_empty() {
        return "the inbox is empty".into();
    }
    let mut out: Vec<String> = tasks
        .iter()
        .map(|(place, t)| {
            format!(
                "{place:<11} {}  from {}",
                t["message_id"].as_str().unwrap_or(""),
                t["sender"]["name"].as_str().unwrap_or("(cli)")
            )
        })
        .collect();
    let counts: Vec<String> = PLACES
        .iter()
        .map(|p| format!("{} {p}", tasks.iter().filter(|(q, _)| q == p).count()))
        .collect();
    out.push(format!(
        "{} task{}: {}",
        tasks.len(),
        if tasks.len() == 1 { "" } else { "s" },
        counts.join(", ")
    ));
    out.join("\n")
}
