//! What the fast path reads, the general path reads to the same
//! `SendRequest`: a `message/send` request is read either straight from
//! its line (`fast_send`, the common request on a busy connection) or from
//! the parsed params (`SendRequest::from_params`), with only JSON types
//! checked here; the values are `deliver`'s to judge.

use super::{RpcError, bad_type, missing};
use serde_json::value::RawValue;
use serde_json::{Map, Value};

/// A `message/send` request with well-typed fields; values are not yet
/// checked.
#[derive(Debug, PartialEq)]
pub struct SendRequest {
    pub message_id: String,
    pub target_instance_id: String,
    pub body: String,
    pub sender_instance_id: Option<String>,
    pub sender_name: Option<String>,
    pub sender_workspace: Option<String>,
    /// `None` for a negative hop, a value error rather than a type error.
    pub hop: Option<u64>,
    pub in_reply_to: Option<String>,
    pub mode: String,
}

/// A well-formed `message/send` request read straight into its fields,
/// without building a JSON tree: the common request on a busy connection.
/// `None` for anything else and for anything unusual (a duplicate key, a
/// wrong type, a null or missing id, a bad `jsonrpc`, a negative hop),
/// which then takes the general path with its exact errors. What this
/// accepts, the general path reads to the same `SendRequest`. Also returns
/// the body as the line spelled it, a JSON string that the task file and
/// the event then copy instead of escaping the body again.
pub(super) fn fast_send(line: &[u8]) -> Option<(Value, SendRequest, &RawValue)> {
    use serde::Deserialize;
    use std::borrow::Cow;
    type Text<'a> = Option<Cow<'a, str>>;
    #[derive(Deserialize)]
    struct Frame<'a> {
        #[serde(borrow)]
        jsonrpc: Cow<'a, str>,
        id: Option<Value>,
        #[serde(borrow)]
        method: Cow<'a, str>,
        #[serde(borrow)]
        params: Params<'a>,
    }
    #[derive(Deserialize)]
    struct Params<'a> {
        #[serde(borrow)]
        message_id: Cow<'a, str>,
        #[serde(borrow)]
        target_instance_id: Cow<'a, str>,
        #[serde(borrow)]
        body: &'a RawValue,
        #[serde(borrow)]
        sender: From<'a>,
        hop: Option<u64>,
        #[serde(borrow, default)]
        in_reply_to: Text<'a>,
        #[serde(borrow, default)]
        mode: Text<'a>,
    }
    #[derive(Deserialize)]
    struct From<'a> {
        #[serde(borrow, default)]
        instance_id: Text<'a>,
        #[serde(borrow, default)]
        name: Text<'a>,
        #[serde(borrow, default)]
        workspace: Text<'a>,
    }
    let f: Frame = serde_json::from_slice(line).ok()?;
    if f.jsonrpc != "2.0" || f.method != "message/send" {
        return None;
    }
    let id =
        f.id.filter(|id| matches!(id, Value::String(_) | Value::Number(_)))?;
    let p = f.params;
    // A string, or the general path says what it is instead.
    let body: String = serde_json::from_str(p.body.get()).ok()?;
    let own = |t: Text| t.map(Cow::into_owned);
    Some((
        id,
        SendRequest {
            message_id: p.message_id.into_owned(),
            target_instance_id: p.target_instance_id.into_owned(),
            body,
            sender_instance_id: own(p.sender.instance_id),
            sender_name: own(p.sender.name),
            sender_workspace: own(p.sender.workspace),
            hop: Some(p.hop.unwrap_or(0)),
            in_reply_to: own(p.in_reply_to),
            mode: own(p.mode).unwrap_or_else(|| "queue".into()),
        },
        p.body,
    ))
}

fn get_str(p: &Map<String, Value>, k: &str, prefix: &str) -> Result<Option<String>, RpcError> {
    match p.get(k) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(_) => Err(bad_type(&format!("{prefix}{k}"), "a string")),
    }
}

fn need_str(p: &Map<String, Value>, k: &str) -> Result<String, RpcError> {
    get_str(p, k, "")?.ok_or_else(|| missing(k))
}

impl SendRequest {
    pub fn from_params(p: &Map<String, Value>) -> Result<SendRequest, RpcError> {
        let message_id = need_str(p, "message_id")?;
        let target_instance_id = need_str(p, "target_instance_id")?;
        let body = need_str(p, "body")?;
        let sender = match p.get("sender") {
            Some(Value::Object(s)) => s,
            Some(_) => return Err(bad_type("sender", "an object")),
            None => return Err(missing("sender")),
        };
        let hop = match p.get("hop") {
            None | Some(Value::Null) => Some(0),
            Some(v) if v.is_u64() => v.as_u64(),
            Some(v) if v.is_i64() => None,
            Some(_) => return Err(bad_type("hop", "an integer")),
        };
        Ok(SendRequest {
            message_id,
            target_instance_id,
            body,
            sender_instance_id: get_str(sender, "instance_id", "sender.")?,
            sender_name: get_str(sender, "name", "sender.")?,
            sender_workspace: get_str(sender, "workspace", "sender.")?,
            hop,
            in_reply_to: get_str(p, "in_reply_to", "")?,
            mode: get_str(p, "mode", "")?.unwrap_or_else(|| "queue".into()),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::{self, Incoming};

    /// The general path's reading of a line, when it is a `message/send`
    /// request with well-typed params.
    fn general(line: &str) -> Option<(Value, SendRequest)> {
        match wire::classify(line.as_bytes()) {
            Incoming::Request { id, method, params } if method == "message/send" => {
                let Value::Object(p) = params else {
                    return None;
                };
                SendRequest::from_params(&p).ok().map(|r| (id, r))
            }
            _ => None,
        }
    }

    #[test]
    fn the_fast_send_path_reads_what_the_general_path_reads() {
        let ok = [
            r#"{"jsonrpc":"2.0","id":1,"method":"message/send","params":{"message_id":"m1","target_instance_id":"t","body":"hi","sender":{},"hop":0}}"#,
            r#"{"params":{"sender":{"instance_id":"a","name":"n","workspace":"/w","x":1},"body":"a\"b\n\u00e9","target_instance_id":"t","message_id":"m2","mode":"steer","in_reply_to":"r","extra":[1]},"method":"message/send","id":"s","jsonrpc":"2.0","result":1}"#,
            r#"{"jsonrpc":"2.0","id":18446744073709551615,"method":"message/send","params":{"message_id":"m3","target_instance_id":"t","body":"b","sender":{"name":null},"mode":null,"in_reply_to":null,"hop":null}}"#,
            r#" {"jsonrpc":"2.0","id":-1.5,"method":"message/send","params":{"message_id":"","target_instance_id":"","body":"","sender":{}}} "#,
        ];
        for line in ok {
            let (id, req, body) =
                fast_send(line.as_bytes()).unwrap_or_else(|| panic!("not fast: {line}"));
            // The body's JSON text as the line spelled it, which the task
            // file and the event copy.
            assert_eq!(
                serde_json::from_str::<String>(body.get()).unwrap(),
                req.body
            );
            assert!(
                line.contains(&format!(r#""body":{}"#, body.get())),
                "{line}"
            );
            assert_eq!(Some((id, req)), general(line), "{line}");
        }
        // Left to the general path, which answers each with its own
        // result or error.
        let slow = [
            r#"{"jsonrpc":"2.0","id":null,"method":"message/send","params":{"message_id":"m","target_instance_id":"t","body":"b","sender":{}}}"#,
            r#"{"jsonrpc":"2.0","method":"message/send","params":{"message_id":"m","target_instance_id":"t","body":"b","sender":{}}}"#,
            r#"{"jsonrpc":"2.0","id":true,"method":"message/send","params":{"message_id":"m","target_instance_id":"t","body":"b","sender":{}}}"#,
            r#"{"jsonrpc":"1.0","id":1,"method":"message/send","params":{"message_id":"m","target_instance_id":"t","body":"b","sender":{}}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"ping","params":{"message_id":"m","target_instance_id":"t","body":"b","sender":{}}}"#,
            r#"{"jsonrpc":"2.0","id":1,"id":2,"method":"message/send","params":{"message_id":"m","target_instance_id":"t","body":"b","sender":{}}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"message/send","params":{"message_id":"m","message_id":"n","target_instance_id":"t","body":"b","sender":{}}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"message/send","params":{"message_id":"m","target_instance_id":"t","body":"b","sender":{},"hop":-1}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"message/send","params":{"message_id":"m","target_instance_id":"t","body":"b","sender":{},"hop":1.0}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"message/send","params":{"message_id":"m","target_instance_id":"t","body":"b","sender":null}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"message/send","params":{"message_id":"m","target_instance_id":"t","body":"b"}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"message/send","params":{"message_id":null,"target_instance_id":"t","body":"b","sender":{}}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"message/send","params":{"message_id":"m","target_instance_id":"t","body":7,"sender":{}}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"message/send","params":{"message_id":"m","target_instance_id":"t","body":null,"sender":{}}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"message/send","params":{"message_id":"m","target_instance_id":"t","body":["b"],"sender":{}}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"message/send","params":{"message_id":"m","target_instance_id":"t","body":"b","sender":{"name":5}}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"message/send","params":[]}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"message/send","params":{"message_id":"m","target_instance_id":"t","body":"b","sender":{}}} x"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"message/send","params":{"message_id":"m","target_instance_id":"t","body":"\ud800","sender":{}}}"#,
        ];
        for line in slow {
            assert!(fast_send(line.as_bytes()).is_none(), "fast: {line}");
        }
    }
}
