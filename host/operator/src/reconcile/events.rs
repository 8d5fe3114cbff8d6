//! Events about a cluster: one per reconcile and kind of change, never one
//! per object.

use std::collections::HashMap;
use std::sync::Mutex;

use kube::Resource;
use kube::runtime::reflector::ObjectRef;
use shardgate_contract::model::{Desired, Severity};
use shardgate_k8s::crd::ValkeyCluster;
pub use shardgate_k8s::events::EventType;
use shardgate_k8s::events::Note;
use tracing::warn;

use crate::context::Context;

/// Records an Event about `vc`; a failure to record is logged, not raised.
pub async fn publish(
    ctx: &Context,
    vc: &ValkeyCluster,
    type_: EventType,
    reason: &str,
    action: &str,
    note: String,
) {
    let ev = Note {
        type_,
        reason: reason.into(),
        note,
        action: action.into(),
    };
    if let Err(e) = ctx.recorder.publish(&ev, &vc.object_ref(&())).await {
        warn!(error = %e, "could not record an event");
    } else {
        ctx.metrics.write("create", "events");
    }
}

/// What was last said about each cluster, by reason: an Event whose reason
/// and message are what was last said is not sent again while that holds.
#[derive(Debug, Default)]
pub struct Said(Mutex<HashMap<(ObjectRef<ValkeyCluster>, String), String>>);

impl Said {
    /// Whether `message` is news for `obj` under `reason`; remembers it.
    pub fn news(&self, obj: &ObjectRef<ValkeyCluster>, reason: &str, message: &str) -> bool {
        let mut said = self.0.lock().unwrap();
        let key = (obj.clone(), reason.to_string());
        if said.get(&key).is_some_and(|m| m == message) {
            return false;
        }
        said.insert(key, message.to_string());
        true
    }

    /// `reason` no longer holds for `obj`: the next message under it is news.
    pub fn clear(&self, obj: &ObjectRef<ValkeyCluster>, reason: &str) {
        self.0
            .lock()
            .unwrap()
            .remove(&(obj.clone(), reason.to_string()));
    }
}

/// Records a Warning Event about `vc` unless the same reason and message
/// was the last thing said and still holds.
pub async fn warn_once(
    ctx: &Context,
    vc: &ValkeyCluster,
    reason: &str,
    action: &str,
    note: String,
) {
    if ctx.said.news(&ObjectRef::from_obj(vc), reason, &note) {
        publish(ctx, vc, EventType::Warning, reason, action, note).await;
    }
}

/// The guest's warnings, once per spec generation (not on every resync).
pub async fn warnings(ctx: &Context, vc: &ValkeyCluster, desired: &Desired) {
    if !new_generation(vc) {
        return;
    }
    for w in desired
        .warnings
        .iter()
        .filter(|w| w.severity == Severity::Warning)
    {
        publish(
            ctx,
            vc,
            EventType::Warning,
            "SpecWarning",
            "Validate",
            w.to_string(),
        )
        .await;
    }
}

/// The spec changed since the status was last written.
fn new_generation(vc: &ValkeyCluster) -> bool {
    vc.status.as_ref().and_then(|s| s.observed_generation) != vc.metadata.generation
}

/// One note for many objects: "created 3 objects: a, b, c". A cluster's
/// first reconcile creates dozens of objects; an Event each would cost as
/// many API writes again.
pub fn summary(verb: &str, objects: &[String]) -> String {
    const SHOWN: usize = 10;
    let mut text = format!(
        "{verb} {} object{}: {}",
        objects.len(),
        if objects.len() == 1 { "" } else { "s" },
        objects
            .iter()
            .take(SHOWN)
            .map(String::as_str)
            .collect::<Vec<_>>()
            .join(", ")
    );
    if objects.len() > SHOWN {
        text.push_str(&format!(" and {} more", objects.len() - SHOWN));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_summary_names_at_most_ten_objects() {
        let names = |n: usize| (0..n).map(|i| format!("o{i}")).collect::<Vec<_>>();
        for (n, want) in [
            (1, "created 1 object: o0"),
            (3, "created 3 objects: o0, o1, o2"),
            (
                12,
                "created 12 objects: o0, o1, o2, o3, o4, o5, o6, o7, o8, o9 and 2 more",
            ),
        ] {
            assert_eq!(summary("created", &names(n)), want);
        }
    }

    #[test]
    fn a_message_is_said_once_while_it_holds() {
        let said = Said::default();
        let a = ObjectRef::<ValkeyCluster>::new("a").within("ns");
        let b = ObjectRef::<ValkeyCluster>::new("b").within("ns");
        // (object, reason, message, clear before) => news
        let steps = [
            (&a, "ReconcileFailed", "x", false, true),
            (&a, "ReconcileFailed", "x", false, false),
            (&b, "ReconcileFailed", "x", false, true),
            (&a, "InvalidSpec", "x", false, true),
            (&a, "ReconcileFailed", "y", false, true),
            (&a, "ReconcileFailed", "x", false, true),
            (&a, "ReconcileFailed", "x", true, true),
        ];
        for (i, (obj, reason, message, clear, want)) in steps.into_iter().enumerate() {
            if clear {
                said.clear(obj, reason);
            }
            assert_eq!(said.news(obj, reason, message), want, "step {i}");
        }
    }

    #[test]
    fn warnings_are_for_a_new_generation_only() {
        let cluster = |generation: Option<i64>, observed: Option<i64>| {
            let mut vc =
                ValkeyCluster::new("c", serde_json::from_value(serde_json::json!({})).unwrap());
            vc.metadata.generation = generation;
            vc.status = observed.map(|g| shardgate_k8s::crd::ValkeyClusterStatus {
                observed_generation: Some(g),
                ..Default::default()
            });
            vc
        };
        for (generation, observed, new) in [
            (Some(1), None, true),
            (Some(2), Some(1), true),
            (Some(2), Some(2), false),
        ] {
            assert_eq!(new_generation(&cluster(generation, observed)), new);
        }
    }
}
