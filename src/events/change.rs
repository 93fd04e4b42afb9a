//! A change notification: what `consoled_notify_change` sends and what clients receive.

use serde::{Deserialize, Serialize};

/// A change notification, as `consoled_notify_change` sends it and as clients receive it.
/// `project_id` and `org_id` are `null` when the resource has none (a `user`, an organization's
/// own project_id).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Change {
    #[serde(rename = "type")]
    pub kind: String,
    pub id: i64,
    pub op: String,
    #[serde(default)]
    pub project_id: Option<i64>,
    #[serde(default)]
    pub org_id: Option<i64>,
    /// The change's name on every instance, `<transaction id>-<16 hex digits>` (migration 0015):
    /// the event's `id:` line, not part of its data. `None` from a database function older than
    /// 0015.
    #[serde(default, skip_serializing)]
    pub event_id: Option<String>,
}

impl Change {
    /// The `change` event, formatted once and shared by every stream that gets it.
    pub fn event(&self) -> String {
        let data = serde_json::to_string(self).expect("a Change always serializes");
        match self.id() {
            Some(id) => format!("event: change\nid: {id}\ndata: {data}\n\n"),
            None => format!("event: change\ndata: {data}\n\n"),
        }
    }

    /// The id a client may send back (`Last-Event-ID`), if it is one.
    pub fn id(&self) -> Option<&str> {
        self.event_id.as_deref().filter(|id| is_event_id(id))
    }
}

/// Whether `id` can be an event's id line and be looked up again: short, and of the characters
/// the database writes (anything else would break the event's framing).
fn is_event_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= super::history::MAX_ID
        && id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
}
