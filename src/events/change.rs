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
}

impl Change {
    /// The `change` event, formatted once and shared by every stream that gets it.
    pub fn event(&self) -> String {
        let data = serde_json::to_string(self).expect("a Change always serializes");
        format!("event: change\ndata: {data}\n\n")
    }
}
