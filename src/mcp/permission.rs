//! Claude Code's permission relay, for the operator of the session's
//! instance (docs/mcp.md, *Tool calls an operator allows*): with
//! `capabilities.experimental["claude/channel/permission"]` declared, the
//! host sends `notifications/claude/channel/permission_request` when a
//! tool call waits for its user's permission. The request goes to the
//! instance (`permission/ask`), whose controllers (`baton watch
//! --approve`) decide; their decision comes back as a
//! `permission.resolved` event and goes to the host as
//! `notifications/claude/channel/permission` (`allow` or `deny`). The
//! host's own dialog stays open; it takes whichever answer comes first.
//!
//! A decision is matched by the id the instance gave this session's
//! request (`approval_id`), never by the host's `request_id`, which anyone
//! may ask about again with other text. A request the instance stops
//! waiting on (32 newer ones push it out) is answered nothing: the host's
//! dialog decides. A host's `request_id` is relayed once while it waits.

use super::proto::{PermissionRequest, Verdict};
use super::{Adapter, notify};
use crate::text::sanitize::escape;
use crate::wire::Handling;
use crate::wire::answer::Handled;
use crate::wire::request::AskParams;
use crate::wire::{Call, Decision, Event};

/// The capability that asks the host to relay its permission prompts.
pub const PERMISSION: &str = "claude/channel/permission";
/// The host's request.
pub const REQUEST_METHOD: &str = "notifications/claude/channel/permission_request";
/// Our answer.
const VERDICT_METHOD: &str = "notifications/claude/channel/permission";
/// Requests this session remembers having relayed (a host's request is
/// answered at most once; older ones are forgotten past this).
const KEPT: usize = 64;

impl Adapter {
    /// The host asks for a tool call to be allowed: the request goes to
    /// the instance. A notification has no answer, so what goes wrong is
    /// said on stderr and the host's own dialog decides.
    pub(super) fn permission_request(&mut self, line: &str) {
        let asked = PermissionRequest::read(line);
        let (Some(request_id), Some(tool_name)) = (asked.request_id, asked.tool_name) else {
            eprintln!(
                "baton mcp: a {REQUEST_METHOD} without a string request_id and tool_name: not relayed"
            );
            return;
        };
        let shown = escape(&request_id).into_owned();
        if self.relayed.iter().any(|(_, r)| *r == request_id) {
            eprintln!(
                "baton mcp: permission request {shown} not relayed: it was relayed before and is not answered yet"
            );
            return;
        }
        let ask = AskParams {
            description: asked.description.unwrap_or_default(),
            host: self.host.clone(),
            input_preview: asked.input_preview.unwrap_or_default(),
            request_id: request_id.clone(),
            tool_name,
        };
        match self.call::<Handled>(Call::PermissionAsk, ask) {
            Ok((_, r)) if r.status == Handling::Waiting => match r.approval_id {
                Some(approval_id) => {
                    if self.relayed.len() >= KEPT {
                        self.relayed.remove(0);
                    }
                    self.relayed.push((approval_id, request_id));
                }
                None => eprintln!(
                    "baton mcp: permission request {shown} relayed, but the instance named no approval_id: its answer cannot reach the host"
                ),
            },
            Ok((_, r)) => eprintln!(
                "baton mcp: permission request {shown} not relayed: {}",
                r.reason.as_deref().unwrap_or("refused")
            ),
            Err(e) => eprintln!("baton mcp: permission request not relayed: {e}"),
        }
    }

    /// A controller decided on a tool call this session relayed: the host
    /// is told, once, under the request id it asked with.
    pub(super) fn permission_resolved(&mut self, ev: &Event) {
        let Some(approval_id) = ev.approval_id.as_deref() else {
            return;
        };
        let Some(at) = self.relayed.iter().position(|(a, _)| a == approval_id) else {
            return;
        };
        let (_, request_id) = self.relayed.remove(at);
        let allowed = ev.decision == Some(Decision::Approve);
        let behavior = if allowed { "allow" } else { "deny" };
        notify(
            VERDICT_METHOD,
            Verdict {
                behavior,
                request_id,
            },
        );
    }
}
