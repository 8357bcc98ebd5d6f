//! The MCP messages `baton mcp` reads from its host and writes to it, as
//! types (MCP's protocol, not baton's: docs/mcp.md). Each is written as
//! the map it replaces was, members in sorted order.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// `notifications/claude/channel/permission_request`'s params, read
/// leniently: a member that is not a string is not there.
#[derive(Clone, Debug, Default)]
pub struct PermissionRequest {
    pub request_id: Option<String>,
    pub tool_name: Option<String>,
    pub description: Option<String>,
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
        let params = serde_json::from_str::<Line>(line).map_or(Value::Null, |l| l.params);
        let field = |k: &str| params.get(k).and_then(Value::as_str).map(str::to_string);
        PermissionRequest {
            request_id: field("request_id"),
            tool_name: field("tool_name"),
            description: field("description"),
            input_preview: field("input_preview"),
        }
    }
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
