//! What the fast path reads, the general path reads to the same
//! `SendRequest`: a `message/send` request is read either straight from
//! its line (`fast_send`, the common request on a busy connection) or from
//! the parsed params (`SendRequest::read`, in wire), with only JSON types
//! checked here; the values are `deliver`'s to judge. A zcoder `enqueue`
//! is read to the same request (`from_zcoder`).

use super::RpcError;
use crate::registry;
use crate::wire::request::Fields;
pub use crate::wire::request::SendRequest;
use crate::wire::{Id, TaskMode};
use serde_json::value::RawValue;
use serde_json::{Map, Value};

/// A well-formed `message/send` request read straight into its fields,
/// without building a JSON tree: the common request on a busy connection.
/// `None` for anything else and for anything unusual (a member it does not
/// know, a duplicate key, a wrong type, a null or missing id, a bad
/// `jsonrpc`, a negative hop), which then takes the general path with its
/// exact errors. It skips no member unread: serde_json skips a value it
/// is not asked to read without the checks it makes on one it reads (no
/// nesting limit, no range check on numbers, lone surrogates and invalid
/// UTF-8 in strings let through), so a line with an unknown member goes to
/// the general path, and the id and body, taken raw, are read again by the
/// general parser. So what this accepts, the general path reads to the
/// same `SendRequest`. Also returns the id and the body as the line spelled
/// them: the id is echoed so, and the body is a JSON string that the task
/// file and the event copy instead of escaping it again.
pub(super) fn fast_send(line: &[u8]) -> Option<(Id, SendRequest, &RawValue)> {
    use serde::Deserialize;
    use std::borrow::Cow;
    type Text<'a> = Option<Cow<'a, str>>;
    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Frame<'a> {
        #[serde(borrow)]
        jsonrpc: Cow<'a, str>,
        #[serde(borrow)]
        id: Option<&'a RawValue>,
        #[serde(borrow)]
        method: Cow<'a, str>,
        #[serde(borrow)]
        params: Params<'a>,
    }
    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
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
    #[serde(deny_unknown_fields)]
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
    let id = Id::from_raw(f.id?).filter(|id| !id.is_null())?;
    let p = f.params;
    let body = json_string(p.body)?;
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

/// The text of `raw` if it is a JSON string (else the general path says
/// what it is instead). `raw` is valid JSON, so a string without a
/// backslash is its text between the quotes, copied as it stands; only
/// one with escapes is decoded.
fn json_string(raw: &RawValue) -> Option<String> {
    let json = raw.get();
    match json.strip_prefix('"').and_then(|s| s.strip_suffix('"')) {
        Some(text) if !text.contains('\\') => Some(text.to_owned()),
        _ => serde_json::from_str(json).ok(),
    }
}

impl From<crate::wire::request::Invalid> for RpcError {
    fn from(e: crate::wire::request::Invalid) -> RpcError {
        RpcError::new(crate::wire::INVALID_PARAMS, e.to_string())
    }
}

/// A zcoder `enqueue` read as `message/send`'s request; `None` when a
/// field has the wrong type.
pub(super) fn from_zcoder(obj: &Map<String, Value>) -> Option<SendRequest> {
    let f = Fields(obj);
    let s = |k: &str| f.text(k).ok();
    for k in ["sender_pid", "created_at"] {
        f.opt(k, "an integer", Value::as_u64).ok()?;
    }
    let project = s("sender_project")?;
    Some(SendRequest {
        message_id: s("message_id")??,
        target_instance_id: s("target_instance_id")??,
        body: s("body")??,
        // A plain command line's `cli-<pid>` names no instance: the
        // sender is shown as plain, by its peer credentials.
        sender_instance_id: s("sender_instance_id")?.filter(|id| !registry::is_plain_sender_id(id)),
        sender_name: project.map(|p| registry::default_name(std::path::Path::new(&p))),
        sender_workspace: s("sender_workspace")?,
        hop: Some(0),
        in_reply_to: None,
        mode: TaskMode::Queue.as_str().into(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::{self, Incoming};

    /// The general path's reading of a line, when it is a `message/send`
    /// request with well-typed params.
    fn general(line: &[u8]) -> Option<(Id, SendRequest)> {
        match wire::classify(line) {
            Incoming::Request { id, method, params } if method == "message/send" => {
                let Value::Object(p) = params else {
                    return None;
                };
                SendRequest::read(&p).ok().map(|r| (id, r))
            }
            _ => None,
        }
    }

    /// A `message/send` line with `extra` spliced in at the top level and
    /// into `params` and `sender`.
    fn with(top: &str, params: &str, sender: &str) -> String {
        format!(
            r#"{{"jsonrpc":"2.0","id":1,"method":"message/send"{top},"params":{{"message_id":"m","target_instance_id":"t","body":"b"{params},"sender":{{"name":"n"{sender}}}}}}}"#
        )
    }

    /// Whatever the fast path reads, the general path reads the same; the
    /// fast path's id is spelled as the line spelled it.
    fn agree(line: &[u8]) -> bool {
        let Some((id, req, body)) = fast_send(line) else {
            return false;
        };
        let text = String::from_utf8_lossy(line);
        // The body's JSON text as the line spelled it, which the task
        // file and the event copy.
        assert_eq!(
            serde_json::from_str::<String>(body.get()).unwrap(),
            req.body
        );
        assert!(
            text.contains(&format!(r#""body":{}"#, body.get())),
            "{text}"
        );
        // `d"` ends the key whether spelled `id` or `\u0069d`.
        assert!(text.contains(&format!(r#"d":{}"#, id.get())), "{text}");
        assert_eq!(Some((id, req)), general(line), "{text}");
        true
    }

    #[test]
    fn the_fast_send_path_reads_what_the_general_path_reads() {
        let ok = [
            r#"{"jsonrpc":"2.0","id":1,"method":"message/send","params":{"message_id":"m1","target_instance_id":"t","body":"hi","sender":{},"hop":0}}"#,
            r#"{"params":{"sender":{"instance_id":"a","name":"n","workspace":"/w"},"body":"a\"b\n\u00e9","target_instance_id":"t","message_id":"m2","mode":"steer","in_reply_to":"r"},"method":"message/send","id":"s","jsonrpc":"2.0"}"#,
            r#"{"jsonrpc":"2.0","id":18446744073709551615,"method":"message/send","params":{"message_id":"m3","target_instance_id":"t","body":"b","sender":{"name":null},"mode":null,"in_reply_to":null,"hop":null}}"#,
            r#" {"jsonrpc":"2.0","id":-1.5,"method":"message/send","params":{"message_id":"","target_instance_id":"","body":"","sender":{}}} "#,
            // Ids that a number type would respell.
            r#"{"jsonrpc":"2.0","id":123456789012345678901234567890,"method":"message/send","params":{"message_id":"m","target_instance_id":"t","body":"b","sender":{}}}"#,
            r#"{"jsonrpc":"2.0","id":-0,"method":"message/send","params":{"message_id":"m","target_instance_id":"t","body":"b","sender":{}}}"#,
            r#"{"jsonrpc":"2.0","id":1E2,"method":"message/send","params":{"message_id":"m","target_instance_id":"t","body":"b","sender":{}}}"#,
            r#"{"jsonrpc":"2.0","id":"\u0041\ud83d\ude00","method":"message/send","params":{"message_id":"m","target_instance_id":"t","body":"b","sender":{}}}"#,
            // Keys spelled with escapes are the same keys.
            r#"{"jsonrpc":"2.0","\u0069d":2,"method":"message/send","params":{"message_id":"m","target_instance_id":"t","body":"b","sender":{}}}"#,
        ];
        for line in ok {
            assert!(agree(line.as_bytes()), "not fast: {line}");
        }
        // Left to the general path, which reads them (a member the fast
        // path does not know is read only there).
        let general_only = [
            r#"{"params":{"sender":{"instance_id":"a","name":"n","workspace":"/w","x":1},"body":"a\"b\n\u00e9","target_instance_id":"t","message_id":"m2","mode":"steer","in_reply_to":"r","extra":[1]},"method":"message/send","id":"s","jsonrpc":"2.0","result":1}"#,
            &with(r#","x":{"a":[1,{"b":null}]}"#, "", ""),
            &with("", r#","x":"\ud83d\ude00""#, ""),
            &with("", "", r#","x":1e308"#),
            &with(
                &format!(r#","x":{}{}"#, "[".repeat(120), "]".repeat(120)),
                "",
                "",
            ),
        ];
        for line in general_only {
            assert!(fast_send(line.as_bytes()).is_none(), "fast: {line}");
            assert!(
                general(line.as_bytes()).is_some(),
                "general refused: {line}"
            );
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
        // Lines the general path refuses outright, which the fast path
        // must refuse too: what serde_json lets through in a value it
        // skips and refuses in one it reads (nesting past its limit of
        // 128, a number out of range, a lone surrogate, invalid UTF-8),
        // also in the id and the body, which the fast path takes raw.
        let deep = |n: usize| format!("{}{}", "[".repeat(n), "]".repeat(n));
        let mut refused: Vec<Vec<u8>> = [
            &with(&format!(r#","x":{}"#, deep(200)), "", ""),
            &with(&format!(r#","x":{}"#, deep(127)), "", ""),
            &with("", &format!(r#","x":{}"#, deep(126)), ""),
            &with("", "", &format!(r#","x":{}"#, deep(125))),
            &with(r#","x":1e400"#, "", ""),
            &with("", r#","x":-1e400"#, ""),
            &with("", "", &format!(r#","x":{}"#, "9".repeat(400))),
            &with(r#","x":"\ud800""#, "", ""),
            &with("", r#","x":"\udc00""#, ""),
            &with("", "", r#","x":{"\ud800":1}"#),
            r#"{"jsonrpc":"2.0","id":1e400,"method":"message/send","params":{"message_id":"m","target_instance_id":"t","body":"b","sender":{}}}"#,
            r#"{"jsonrpc":"2.0","id":"\udfff","method":"message/send","params":{"message_id":"m","target_instance_id":"t","body":"b","sender":{}}}"#,
            &format!(
                r#"{{"jsonrpc":"2.0","id":{},"method":"message/send","params":{{"message_id":"m","target_instance_id":"t","body":"b","sender":{{}}}}}}"#,
                deep(200)
            ),
            &format!(
                r#"{{"jsonrpc":"2.0","id":1,"method":"message/send","params":{{"message_id":"m","target_instance_id":"t","body":{},"sender":{{}}}}}}"#,
                deep(200)
            ),
        ]
        .iter()
        .map(|l| l.as_bytes().to_vec())
        .collect();
        let bad_utf8 = |at: &str| {
            let mut l = with(at, "", "").into_bytes();
            let i = l.windows(3).position(|w| w == b"\xc3\xa9\"").unwrap();
            l[i] = 0xff;
            l
        };
        refused.push(bad_utf8(r#","x":"é""#));
        // A control character in the body, which JSON spells escaped only.
        refused.push(
            r#"{"jsonrpc":"2.0","id":1,"method":"message/send","params":{"message_id":"m","target_instance_id":"t","body":"a	b","sender":{}}}"#
                .as_bytes()
                .to_vec(),
        );
        refused.push({
            let mut l = with("", "", "").into_bytes();
            let i = l.windows(5).position(|w| w == b"\"n\"}}").unwrap();
            l[i + 1] = 0xff;
            l
        });
        for line in &refused {
            let text = String::from_utf8_lossy(line);
            assert!(general(line).is_none(), "general read: {text}");
            assert!(fast_send(line).is_none(), "fast: {text}");
        }
        // Growing nesting around the limit: `agree` fails if the fast path
        // reads a line the general path reads otherwise or not at all.
        for n in 120..135 {
            for line in [
                with(&format!(r#","x":{}"#, deep(n)), "", ""),
                with("", &format!(r#","x":{}"#, deep(n)), ""),
                with("", "", &format!(r#","x":{}"#, deep(n))),
            ] {
                agree(line.as_bytes());
            }
        }
    }
}
