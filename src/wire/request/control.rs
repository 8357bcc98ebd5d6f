//! The operator's methods: `control/*`, `approval/*`, `permission/ask`,
//! `initialize`, `ping`, `agent/info` and `events/subscribe`.
//!
//! Each request's params are written by a client with `Serialize` and
//! read by the server once, with `read`: that reader keeps the server's
//! own refusals (`invalid params: … must be …`), which serde's would not.

use super::{Fields, Invalid};
use crate::wire::answer::{BridgeParams, HelloParams, Software};
use crate::wire::{ApprovalKind, Decision, Handling, Manifest, Said, TaskMode};
use serde::Serialize;
use serde_json::{Map, Value};

impl HelloParams {
    /// Reads `initialize`'s params as the server takes them; `valid_key`
    /// says which `bridge.key` labels are (`want_key` names them).
    pub fn read(
        p: &Map<String, Value>,
        valid_key: impl Fn(&str) -> bool,
        want_key: &str,
    ) -> Result<HelloParams, Invalid> {
        let f = Fields(p);
        let protocol_version = f.need("protocol_version", "an integer", |v| match v {
            Value::Number(n) if n.is_u64() || n.is_i64() => Some(n.clone()),
            _ => None,
        })?;
        let c = Fields(f.need("client", "an object", Value::as_object)?);
        let client = Software {
            name: String::from(c.need("client.name", "a string", Value::as_str)?),
            version: String::from(c.need("client.version", "a string", Value::as_str)?),
        };
        let label = |v: &Value| v.as_str().filter(|l| valid_key(l)).map(String::from);
        let bridge = match f.opt("bridge", "an object", Value::as_object)?.map(Fields) {
            None => None,
            Some(b) => Some(BridgeParams {
                target: b.need("bridge.target", "a string", Value::as_str)?.into(),
                remote: b.text("bridge.remote")?,
                key: b.opt("bridge.key", want_key, label)?,
            }),
        };
        Ok(HelloParams {
            bridge,
            client,
            protocol_version,
        })
    }
}

/// The data of `initialize`'s refusal of a version: the ones served.
#[derive(Clone, Debug, Serialize)]
pub struct Supported {
    pub supported: Vec<u64>,
}

/// `agent/info`'s answer: the manifest, and the queue as counted now.
#[derive(Clone, Debug, Serialize)]
pub struct AgentInfo {
    #[serde(flatten)]
    pub manifest: Manifest,
    pub queue: InfoQueue,
}

/// The queue as `agent/info` counts it.
#[derive(Clone, Debug, Serialize)]
pub struct InfoQueue {
    pub max: usize,
    pub processing: usize,
    pub queued: usize,
}

/// `events/subscribe`'s params.
#[derive(Clone, Debug, Default, Serialize)]
pub struct SubscribeParams {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub controller: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub since: Option<u64>,
}

impl SubscribeParams {
    /// From event `since` on (recorded ones first).
    pub fn since(since: u64) -> SubscribeParams {
        SubscribeParams {
            since: Some(since),
            ..SubscribeParams::default()
        }
    }

    pub fn read(p: &Map<String, Value>) -> Result<SubscribeParams, Invalid> {
        Ok(SubscribeParams {
            since: Fields(p).opt("since", "a non-negative integer", Value::as_u64)?,
            controller: Fields(p).opt("controller", "a boolean", Value::as_bool)?,
        })
    }
}

/// What a task's approval shows (`approval/request`'s params, and an
/// entry of `approval/list`): the digest is of it without `approval_id`,
/// `digest`, `kind` and `body`.
#[derive(Clone, Debug, Serialize)]
pub struct TaskShown {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub approval_id: Option<String>,
    /// `approval/list` with `full`: the body, null when its file could
    /// not be read.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub body: Option<Option<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub body_sha256: Option<String>,
    pub bytes: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub digest: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub excerpt: Option<String>,
    pub from: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kind: Option<ApprovalKind>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lines: Option<usize>,
    pub message_id: String,
    pub mode: TaskMode,
    pub pid: Option<u32>,
    pub sender_name: Option<String>,
    pub workspace: Option<String>,
}

/// What a tool call's approval shows (`permission/ask`), as `TaskShown`.
#[derive(Clone, Debug, Serialize)]
pub struct ToolShown {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub approval_id: Option<String>,
    pub description: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub digest: Option<String>,
    pub host: Option<String>,
    pub host_pid: Option<u32>,
    pub input_preview: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kind: Option<ApprovalKind>,
    pub pid: Option<u32>,
    pub request_id: String,
    pub tool_name: String,
}

/// What an approval shows: a task's or a tool call's.
#[derive(Clone, Debug, Serialize)]
#[serde(untagged)]
pub enum Shown {
    Task(TaskShown),
    Tool(ToolShown),
}

impl Shown {
    /// Its id and digest, as its requests and its event carry them.
    pub fn with_id(mut self, approval_id: &str, digest: &str) -> Shown {
        let (id, d) = match &mut self {
            Shown::Task(t) => (&mut t.approval_id, &mut t.digest),
            Shown::Tool(t) => (&mut t.approval_id, &mut t.digest),
        };
        *id = Some(approval_id.to_string());
        *d = Some(digest.to_string());
        self
    }

    /// The host's request id of a tool call's.
    pub fn request_id(&self) -> Option<&str> {
        match self {
            Shown::Task(_) => None,
            Shown::Tool(t) => Some(&t.request_id),
        }
    }

    /// As `approval/list` lists it: with its kind, and with `full` a
    /// task's whole body (`read_body`).
    pub fn listed(&self, full: bool, read_body: impl FnOnce(&str) -> Option<String>) -> Shown {
        let mut s = self.clone();
        match &mut s {
            Shown::Task(t) => {
                t.kind = Some(ApprovalKind::Task);
                if full {
                    t.body = Some(read_body(&t.message_id));
                }
            }
            Shown::Tool(t) => t.kind = Some(ApprovalKind::Tool),
        }
        s
    }

    pub fn to_value(&self) -> Value {
        serde_json::to_value(self).expect("strings and numbers serialize")
    }
}

/// `approval/list`'s params.
#[derive(Clone, Debug, Default, Serialize)]
pub struct ApprovalListParams {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub approval_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub full: Option<bool>,
}

impl ApprovalListParams {
    pub fn read(p: &Map<String, Value>) -> Result<ApprovalListParams, Invalid> {
        Ok(ApprovalListParams {
            full: Fields(p).opt("full", "a boolean", Value::as_bool)?,
            approval_id: Fields(p).text("approval_id")?,
        })
    }
}

/// `approval/list`'s answer as the instance writes it (a client reads
/// `answer::ApprovalList`).
#[derive(Clone, Debug, Serialize)]
pub struct ApprovalsShown {
    pub approvals: Vec<Shown>,
}

/// `approval/respond`'s params, and the result of an `approval/request`
/// a controller answers (without its `approval_id`).
#[derive(Clone, Debug, Serialize)]
pub struct RespondParams {
    #[serde(skip_serializing_if = "String::is_empty")]
    pub approval_id: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub by: Option<String>,
    pub decision: Said<Decision>,
    pub digest: Value,
}

impl RespondParams {
    pub fn read(p: &Map<String, Value>) -> Result<RespondParams, Invalid> {
        let f = Fields(p);
        let needed = |k: &str| {
            f.text(k)?.ok_or_else(|| {
                Invalid::new(format!(
                    "{k} is missing: an answer names the approval_id and the digest its approval/request carried"
                ))
            })
        };
        Ok(RespondParams {
            approval_id: needed("approval_id")?,
            digest: Value::String(needed("digest")?),
            decision: Said::spelled(&f.need_text("decision")?),
            by: f.text("by")?,
        })
    }
}

/// A controller's reply to an `approval/request`, read leniently: a
/// member that is not a string is not there.
#[derive(Clone, Debug, Default)]
pub struct ControllerReply {
    /// The request's id.
    pub id: Option<String>,
    pub by: Option<String>,
    pub decision: Option<String>,
    pub digest: Option<String>,
}

impl ControllerReply {
    pub fn read(reply: &Map<String, Value>) -> ControllerReply {
        let text = |v: Option<&Value>| v.and_then(Value::as_str).map(String::from);
        let result = reply.get("result");
        let field = |k: &str| text(result.and_then(|r| r.get(k)));
        ControllerReply {
            id: text(reply.get("id")),
            by: field("by"),
            decision: field("decision"),
            digest: field("digest"),
        }
    }
}

/// `approval/respond`'s answer: what was decided, of which task or tool
/// call, or why nothing (`invalid`).
#[derive(Clone, Debug, Serialize)]
pub struct Decided {
    pub approval_id: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub request_id: Option<String>,
    pub status: Handling,
}

impl Decided {
    pub fn invalid(approval_id: &str, reason: &str) -> Decided {
        Decided {
            approval_id: approval_id.to_string(),
            message_id: None,
            reason: Some(reason.to_string()),
            request_id: None,
            status: Handling::Invalid,
        }
    }
}

/// `permission/ask`'s params: a tool call an MCP host asks about.
#[derive(Clone, Debug, Serialize)]
pub struct AskParams {
    pub description: String,
    pub host: Option<String>,
    pub input_preview: String,
    pub request_id: String,
    pub tool_name: String,
}

impl AskParams {
    pub fn read(p: &Map<String, Value>) -> Result<AskParams, Invalid> {
        let f = Fields(p);
        Ok(AskParams {
            request_id: f.need_text("request_id")?,
            tool_name: f.need_text("tool_name")?,
            description: f.text("description")?.unwrap_or_default(),
            input_preview: f.text("input_preview")?.unwrap_or_default(),
            host: f.text("host")?,
        })
    }
}

/// `permission/ask`'s answer: `waiting` under an approval id, asked of
/// so many controllers, or why not (`invalid`).
#[derive(Clone, Debug, Serialize)]
pub struct Asking {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub approval_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub controllers: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    pub request_id: String,
    pub status: Handling,
}

impl Asking {
    pub fn invalid(request_id: &str, reason: String) -> Asking {
        Asking {
            approval_id: None,
            controllers: None,
            reason: Some(reason),
            request_id: request_id.to_string(),
            status: Handling::Invalid,
        }
    }
}
