//! The MCP messages `baton mcp` reads from its host and writes to it, as
//! types (MCP's protocol, not baton's: docs/mcp.md). Each is written as
//! the map it replaces was, members in sorted order.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// `notifications/claude/channel/permission_request`'s params, read
/// leniently: a member that is not a string is not there.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default)]
pub struct PermissionRequest {
    #[serde(deserialize_with = "string")]
    pub request_id: Option<String>,
    #[serde(deserialize_with = "string")]
    pub tool_name: Option<String>,
    #[serde(deserialize_with = "string")]
    pub description: Option<String>,
    #[serde(deserialize_with = "string")]
    pub input_preview: Option<String>,
}

impl PermissionRequest {
    /// The params of the notification on `line`.
    pub fn read(line: &str) -> PermissionRequest {
        #[derive(Deserialize)]
        struct Line {
            #[serde(default)]
            params: Value,
        }
        match serde_json::from_str::<Line>(line).map(|l| l.params) {
            // Each member reads, whatever its value.
            Ok(p @ Value::Object(_)) => serde_json::from_value(p).unwrap_or_default(),
            _ => PermissionRequest::default(),
        }
    }
}

/// A string member; any other value is none.
fn string<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    Ok(match Value::deserialize(d)? {
        Value::String(s) => Some(s),
        _ => None,
    })
}

/// `notifications/claude/channel/permission`'s params: the decision on a
/// tool call, under the host's request id.
#[derive(Clone, Debug, Serialize)]
pub struct Verdict {
    /// `allow` or `deny`.
    pub behavior: &'static str,
    pub request_id: String,
}

/// A task pushed on the channel (`notifications/claude/channel`).
#[derive(Clone, Debug, Serialize)]
pub struct ChannelParams {
    pub content: String,
    pub meta: ChannelMeta,
}

/// What a channel event's tag names: the task and its sender.
#[derive(Clone, Debug, Serialize)]
pub struct ChannelMeta {
    pub from: String,
    pub message_id: String,
}

/// `notifications/message`'s params: a log line for the host.
#[derive(Clone, Debug, Serialize)]
pub struct LogParams {
    pub data: String,
    pub level: &'static str,
    pub logger: &'static str,
}

/// `initialize`'s result: the revision spoken, what the server offers,
/// who it is and how to use it.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct InitializeResult {
    pub capabilities: Capabilities,
    pub instructions: String,
    pub protocol_version: &'static str,
    pub server_info: ServerInfo,
}

/// Tools that do not change, logging, and the experimental capabilities
/// named (each an empty object).
#[derive(Clone, Debug, Serialize)]
pub struct Capabilities {
    pub experimental: std::collections::BTreeMap<&'static str, Empty>,
    pub logging: Empty,
    pub tools: ToolsCapability,
}

#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolsCapability {
    pub list_changed: bool,
}

#[derive(Clone, Debug, Serialize)]
pub struct ServerInfo {
    pub name: &'static str,
    pub title: &'static str,
    pub version: &'static str,
}

/// `{}`: an empty result, or a capability without options.
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct Empty {}

/// A tool's result: text for the model, whether it is an error, and the
/// same as data where there is some.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolResult {
    pub content: [TextContent; 1],
    pub is_error: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub structured_content: Option<Value>,
}

#[derive(Clone, Debug, Serialize)]
pub struct TextContent {
    pub text: String,
    #[serde(rename = "type")]
    pub kind: &'static str,
}

/// An agent as `list_agents` gives it.
#[derive(Clone, Debug, Serialize)]
pub struct Agent {
    pub instance_id: String,
    pub model: String,
    pub name: String,
    pub pid: u32,
    pub profile: String,
    pub state: String,
    pub wire: &'static str,
    pub workspace: String,
}

/// `list_agents`' data.
#[derive(Clone, Debug, Serialize)]
pub struct Agents<'a> {
    pub agents: &'a [Agent],
}

/// The params of the requests the server reads (`initialize`,
/// `logging/setLevel`, `tools/call`), each member as it came.
#[derive(Debug, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct Params {
    pub protocol_version: Option<Value>,
    pub client_info: Option<Value>,
    pub level: Option<Value>,
    pub name: Option<Value>,
    pub arguments: Option<Value>,
}

/// `initialize`'s `clientInfo`, where it names the host.
#[derive(Debug, Deserialize)]
pub struct ClientInfo {
    pub name: String,
}

/// The arguments of every tool, each as it came (`tools/call` refuses
/// those its tool does not take before they are read).
#[derive(Debug, Default, Deserialize)]
pub struct ToolArgs {
    pub target_instance_id: Option<Value>,
    pub message: Option<Value>,
    pub wait_seconds: Option<Value>,
    pub message_id: Option<Value>,
    pub reply: Option<Value>,
    pub reply_to_reply: Option<Value>,
}

/// `tools/list`'s result.
#[derive(Clone, Debug, Serialize)]
pub struct Tools {
    pub tools: [Tool; 5],
}

/// A tool as `tools/list` gives it.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Tool {
    pub description: String,
    pub input_schema: InputSchema,
    pub name: &'static str,
    pub title: &'static str,
}

/// A tool's input schema: an object of `properties`, the `required` ones
/// among them, and no others.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct InputSchema {
    pub additional_properties: bool,
    pub properties: Map<String, Value>,
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    pub required: &'static [&'static str],
    #[serde(rename = "type")]
    pub kind: &'static str,
}

impl Tool {
    /// A tool of these `properties` (an object of their schemas).
    pub fn new(
        (name, title): (&'static str, &'static str),
        description: impl Into<String>,
        properties: Value,
        required: &'static [&'static str],
    ) -> Tool {
        Tool {
            description: description.into(),
            input_schema: InputSchema {
                additional_properties: false,
                properties: serde_json::from_value(properties).unwrap_or_default(),
                required,
                kind: "object",
            },
            name,
            title,
        }
    }
}

/// `check_inbox`'s data for a task taken.
#[derive(Clone, Debug, Serialize)]
pub struct Taken<'a> {
    pub envelope: &'a str,
    pub in_reply_to: Option<&'a str>,
    pub message_id: &'a str,
    pub sender: &'a crate::wire::Sender,
}
