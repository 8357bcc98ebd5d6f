//! A request's id as its line spelled it, so that an answer echoes it
//! verbatim (docs/protocol.md §1).

use super::valid_id;
use serde_json::Value;
use serde_json::value::RawValue;
use std::borrow::Cow;
use std::collections::HashMap;

/// A request's id exactly as its line spelled it: a string, a number or
/// `null`, echoed verbatim, so that `123456789012345678901234567890` or
/// `-0` comes back as sent and not as the nearest `f64`.
#[derive(Clone, Debug, serde::Serialize)]
#[serde(transparent)]
pub struct Id(Box<RawValue>);

impl Id {
    /// `null`, the id of an answer to a line whose id is unknown.
    pub fn null() -> Id {
        Id(RawValue::from_string("null".into()).expect("null is JSON"))
    }

    /// The id a line spelled as `raw`, if it is one: a string, a number or
    /// `null` that the general parser reads (no lone surrogate, no number
    /// out of range).
    pub fn from_raw(raw: &RawValue) -> Option<Id> {
        serde_json::from_str::<Value>(raw.get())
            .ok()
            .filter(valid_id)
            .map(|_| Id(raw.to_owned()))
    }

    /// The id of a value already parsed, spelled as serde_json spells it:
    /// for ids this server makes up, and as a fallback.
    pub fn from_value(v: &Value) -> Id {
        Id(serde_json::value::to_raw_value(v).expect("a Value always serializes"))
    }

    /// Its JSON text as the line spelled it.
    pub fn get(&self) -> &str {
        self.0.get()
    }

    pub fn is_null(&self) -> bool {
        self.get() == "null"
    }

    /// As a JSON value (a number becomes the nearest `f64` past 64 bits).
    pub fn to_value(&self) -> Value {
        serde_json::from_str(self.get()).expect("an id is JSON")
    }
}

/// Two ids are the same when they are spelled the same.
impl PartialEq for Id {
    fn eq(&self, other: &Id) -> bool {
        self.get() == other.get()
    }
}

impl Eq for Id {}

/// An id equals a value when it reads as that value.
impl PartialEq<Value> for Id {
    fn eq(&self, v: &Value) -> bool {
        self.to_value() == *v
    }
}

/// The raw text of the last `id` member of a line that parses as an
/// object (the member a JSON map keeps when the key repeats).
pub(super) fn raw_id(line: &[u8]) -> Option<&RawValue> {
    let members: HashMap<Cow<str>, &RawValue> = serde_json::from_slice(line).ok()?;
    members.get("id").copied()
}

/// The id to echo for a line whose parsed `id` is `parsed`: its own
/// spelling when it is a valid id, else null.
pub(super) fn echo_id(line: &[u8], parsed: Option<&Value>) -> Id {
    match parsed {
        Some(v) if valid_id(v) && !v.is_null() => raw_id(line)
            .and_then(Id::from_raw)
            .unwrap_or_else(|| Id::from_value(v)),
        _ => Id::null(),
    }
}

/// `[A-Za-z0-9_.-]{1,100}`: instance ids and message ids, as text (a
/// request's `Id` is any JSON string, number or `null`).
pub fn valid_text_id(s: &str) -> bool {
    (1..=100).contains(&s.len()) && s.bytes().all(id_byte)
}

/// A byte of an id or a name: `[A-Za-z0-9_.-]`.
pub fn id_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-')
}

#[cfg(test)]
mod tests {
    use crate::wire::{Incoming, classify, error_line, result_line};
    use serde_json::json;

    #[test]
    fn ids_are_echoed_as_spelled() {
        let ids = [
            "123456789012345678901234567890",
            "-0",
            "1E2",
            "1.50",
            "-1.5e-7",
            "18446744073709551616",
            r#""\u0041\/""#,
        ];
        for spelled in ids {
            let request = format!(r#"{{"jsonrpc":"2.0","id": {spelled} ,"method":"ping"}}"#);
            let Incoming::Request { id, .. } = classify(request.as_bytes()) else {
                panic!("not a request: {request}");
            };
            assert_eq!(id.get(), spelled);
            assert_eq!(
                String::from_utf8(result_line(&id, &json!({}))).unwrap(),
                format!("{{\"id\":{spelled},\"jsonrpc\":\"2.0\",\"result\":{{}}}}\n")
            );
            assert_eq!(
                String::from_utf8(error_line(&id, -1, "m", None)).unwrap(),
                format!(
                    "{{\"error\":{{\"code\":-1,\"message\":\"m\"}},\"id\":{spelled},\"jsonrpc\":\"2.0\"}}\n"
                )
            );
            // An invalid request echoes its id as spelled too.
            let invalid = format!(r#"{{"jsonrpc":"1.0","id":{spelled},"method":"ping"}}"#);
            let Incoming::Invalid { id, .. } = classify(invalid.as_bytes()) else {
                panic!("not invalid: {invalid}");
            };
            assert_eq!(id.get(), spelled);
        }
        // A repeated key: the member a JSON map keeps, the last.
        let twice = br#"{"jsonrpc":"2.0","id":1,"method":"ping","id":20000000000000000000001}"#;
        let Incoming::Request { id, .. } = classify(twice) else {
            panic!("not a request");
        };
        assert_eq!(id.get(), "20000000000000000000001");
        // A null id, and ids that are no ids, are echoed as null.
        for line in [
            r#"{"jsonrpc":"2.0","id":null,"method":"ping"}"#,
            r#"{"jsonrpc":"2.0","id":[1],"method":"ping"}"#,
            r#"{"jsonrpc":"1.0","id":{"a":1},"method":"ping"}"#,
        ] {
            match classify(line.as_bytes()) {
                Incoming::Request { id, .. } | Incoming::Invalid { id, .. } => {
                    assert!(id.is_null(), "{line}: {id:?}")
                }
                other => panic!("{line}: {other:?}"),
            }
        }
    }
}
