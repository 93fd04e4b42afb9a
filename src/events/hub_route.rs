//! Routing changes: the streams allowed to see each (through the hub's indexes), gathered in a
//! batch that `deliver` writes (`fanout`); each change's place in the history (kept under the
//! index's lock, so that a stream being opened is either routed a change or finds it in the
//! history); and the project -> organization lookups routing needs.

use std::sync::{Arc, MutexGuard};
use std::time::Instant;

use super::{Hub, Routed};
use crate::events::change::Change;
use crate::events::delivery::{per_stream, Batch, Sub};
use crate::events::history::{History, Reach, View};
use crate::events::stream::Msg;

impl Hub {
    /// The project whose organization must be looked up before `change` can be routed: a change
    /// that names a project but no organization (for the session streams open now, and for
    /// those that resume later: the history keeps the organization).
    pub fn unknown_project(&self, change: &Change) -> Option<i64> {
        let project = change.project_id?;
        let needed = change.org_id.is_none() && !self.lock().project_org.contains_key(&project);
        needed.then_some(project)
    }

    pub fn remember_project(&self, project_id: i64, org_id: i64) {
        self.lock().project_org.insert(project_id, org_id);
    }

    /// A deleted project: a later change naming only it reaches no session stream (its
    /// organization is looked up again, and there is none).
    pub fn forget_project(&self, project_id: i64) {
        self.lock().project_org.remove(&project_id);
    }

    /// Queues `change` on every stream allowed to see it, and keeps it in the history: a batch
    /// of one (`route_into`, then `deliver`).
    /// `concerns`: the users whose organizations its transaction changed (`history::Concerns`).
    pub fn route(&self, change: &Change, concerns: &[i64]) -> Routed {
        let mut batch = Batch::default();
        self.route_into(change, concerns, &mut batch);
        self.deliver(batch)
    }

    /// Finds the streams allowed to see `change` now and adds it to `batch` for them, and keeps
    /// it in the history at once; nothing is written to a stream until `deliver`. (A stream
    /// subscribed in between finds the change in the history, or is not told `resumed`.)
    pub fn route_into(&self, change: &Change, concerns: &[i64], batch: &mut Batch) {
        let event: Msg = change.event().into();
        let targets = self.targets(change, &event, concerns);
        if targets.is_empty() {
            return;
        }
        let at = batch.events.len() as u32;
        batch.events.push(event);
        batch
            .deliveries
            .extend(targets.into_iter().map(|(id, sub)| (id, sub, at)));
    }

    /// Writes each stream's changes of `batch` to it, in order and in one write.
    pub fn deliver(&self, batch: Batch) -> Routed {
        if batch.is_empty() {
            return Routed::default();
        }
        let (delivered, dropped) = self.fanout.run(per_stream(batch));
        Routed { delivered, dropped }
    }

    fn targets(&self, change: &Change, event: &Msg, concerns: &[i64]) -> Vec<(u64, Arc<Sub>)> {
        let mut ix = self.lock();
        let mut ids: Vec<u64> = Vec::new();
        if let Some(project) = change.project_id {
            ids.extend(ix.by_project.get(&project).into_iter().flatten());
        }
        // The organization a session stream must belong to; a change's own org_id is trusted
        // (the caller announces the resource's project and organization).
        let org = change.org_id.or_else(|| {
            change
                .project_id
                .and_then(|p| ix.project_org.get(&p).copied())
        });
        let announces = change.kind == "membership" || change.kind == "organization";
        let mut users: Vec<i64> = Vec::new();
        if let Some(org) = org {
            users.extend(ix.by_org.get(&org).into_iter().flatten());
            if announces {
                users.extend(ix.just_left.remove(&org).into_iter().flatten());
            }
        }
        let own = if change.kind == "user" {
            users.push(change.id);
            vec![change.id].into()
        } else if announces {
            concerns.into()
        } else {
            Box::default()
        };
        let reach = Reach {
            project: change.project_id,
            org,
            users: own,
        };
        self.history()
            .record(change.id(), event.clone(), reach, Instant::now());
        for user in users {
            if let Some(entry) = ix.users.get(&user) {
                ids.extend(entry.streams.iter());
            }
        }
        ids.sort_unstable();
        ids.dedup();
        ids.iter()
            .filter_map(|id| Some((*id, ix.subs.get(id)?.clone())))
            .collect()
    }

    fn history(&self) -> MutexGuard<'_, History> {
        self.history.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The changes after the one named `after` that `view` may see, for a stream that resumes;
    /// `None` when this instance cannot tell them all (`History::replay`). Called once the
    /// stream is subscribed and its organizations set: what is routed from then on reaches it
    /// as well (at worst twice, never not at all).
    pub fn replay(&self, after: &str, view: View<'_>, max: usize) -> Option<Vec<Msg>> {
        self.history().replay(after, view, max, Instant::now())
    }

    /// The listener reconnected: what it heard before does not continue into what it hears now.
    pub fn forget_history(&self) {
        self.history().clear();
    }
}
