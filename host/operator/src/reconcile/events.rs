//! Events about a cluster: one per reconcile and kind of change, never one
//! per object.

use kube::Resource;
use kube::runtime::events::{Event, EventType};
use shardgate_contract::model::{Desired, Severity};
use shardgate_k8s::crd::ValkeyCluster;
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
    let ev = Event {
        type_,
        reason: reason.into(),
        note: Some(note),
        action: action.into(),
        secondary: None,
    };
    if let Err(e) = ctx.recorder.publish(&ev, &vc.object_ref(&())).await {
        warn!(error = %e, "could not record an event");
    } else {
        ctx.metrics.write("create", "events");
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
