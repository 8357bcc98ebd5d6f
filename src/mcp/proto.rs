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
