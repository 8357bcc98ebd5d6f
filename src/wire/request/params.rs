//! Reading a call's params with the protocol's own refusals: a member
//! that is missing, or of the wrong JSON type, is refused with the text
//! docs/protocol.md gives (`message_id must be a string`), which serde's
//! messages would not match. Each typed request's `read` goes through
//! here, once, where the server takes the call.

use serde_json::{Map, Value};
use std::fmt;

/// Why params were refused: answered as `-32602 invalid params: …`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Invalid(String);

impl Invalid {
    /// `what`, said after `invalid params: `.
    pub fn new(what: impl Into<String>) -> Invalid {
        Invalid(what.into())
    }
}

impl fmt::Display for Invalid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid params: {}", self.0)
    }
}

impl std::error::Error for Invalid {}

/// The params of a call that takes none: `{}`.
#[derive(Clone, Copy, Debug, Default, serde::Serialize)]
pub struct NoParams {}

/// A call's params, read a member at a time. A member is named by its
/// path (`sender.name`): the key is the last dotted part.
#[derive(Clone, Copy)]
pub struct Fields<'a>(pub &'a Map<String, Value>);

impl<'a> Fields<'a> {
    fn get(&self, name: &str) -> Option<&'a Value> {
        self.0.get(name.rsplit('.').next().unwrap_or(name))
    }

    /// Member `name` as `read` takes it: `None` when absent or null;
    /// `want` names what `read` accepts.
    pub fn opt<T>(
        &self,
        name: &str,
        want: &str,
        read: impl FnOnce(&'a Value) -> Option<T>,
    ) -> Result<Option<T>, Invalid> {
        match self.get(name) {
            None | Some(Value::Null) => Ok(None),
            Some(v) => read(v).map(Some).ok_or_else(|| bad_type(name, want)),
        }
    }

    /// The same, for a member that must be there: a null is of the
    /// wrong type.
    pub fn need<T>(
        &self,
        name: &str,
        want: &str,
        read: impl FnOnce(&'a Value) -> Option<T>,
    ) -> Result<T, Invalid> {
        match self.get(name) {
            None => Err(missing(name)),
            Some(v) => read(v).ok_or_else(|| bad_type(name, want)),
        }
    }

    /// A string member, if there.
    pub fn text(&self, name: &str) -> Result<Option<String>, Invalid> {
        self.opt(name, "a string", |v| v.as_str().map(String::from))
    }

    /// A string member that must be there (a null is missing).
    pub fn need_text(&self, name: &str) -> Result<String, Invalid> {
        self.text(name)?.ok_or_else(|| missing(name))
    }

    /// A string member, ignored when of another type: one the connection
    /// already checked (`sender_instance_id`).
    pub fn checked_text(&self, name: &str) -> Option<String> {
        self.get(name).and_then(Value::as_str).map(String::from)
    }
}

/// `field is missing`.
pub fn missing(field: &str) -> Invalid {
    Invalid::new(format!("{field} is missing"))
}

fn bad_type(field: &str, want: &str) -> Invalid {
    Invalid::new(format!("{field} must be {want}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_member_is_refused_as_the_protocol_says() {
        let p = json!({"message_id": 5, "after": null, "sender": {"name": "x"}});
        let f = Fields(p.as_object().unwrap());
        let err = f.need_text("message_id").unwrap_err().to_string();
        assert_eq!(err, "invalid params: message_id must be a string");
        assert_eq!(f.text("after"), Ok(None));
        let err = f.need_text("after").unwrap_err().to_string();
        assert_eq!(err, "invalid params: after is missing");
        let err = f.need_text("body").unwrap_err().to_string();
        assert_eq!(err, "invalid params: body is missing");
        assert_eq!(f.checked_text("message_id"), None);
    }
}
