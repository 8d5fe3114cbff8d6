//! Stage 3, apply: every desired object that is not already in place is
//! applied with server-side apply ([`shardgate_k8s::apply`]); what was
//! created is told in one Event.

use kube::core::NamespaceResourceScope;
use kube::runtime::events::EventType;
use kube::{Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use shardgate_k8s::apply::{self, Applied};
use shardgate_k8s::cache::{Cache, Entry};
use shardgate_k8s::convert::Objects;
use shardgate_k8s::crd::ValkeyCluster;

use super::{Error, events};
use crate::context::Context;

/// What the applies of one reconcile did.
#[derive(Debug, Default, PartialEq, Eq)]
struct Changes {
    /// Objects created or updated.
    changed: usize,
    /// `resource/name` of each object created.
    created: Vec<String>,
}

impl Changes {
    /// Counts what one apply did; true if it wrote.
    fn note(&mut self, resource: &str, name: &str, applied: Applied) -> bool {
        match applied {
            Applied::Unchanged => return false,
            Applied::Created => self.created.push(format!("{resource}/{name}")),
            Applied::Updated => {}
        }
        self.changed += 1;
        true
    }
}

/// Applies `objects` in order (shard Services, then each node's ConfigMap,
/// headless Service and StatefulSet). Returns how many were written.
pub async fn run(ctx: &Context, vc: &ValkeyCluster, objects: &Objects) -> Result<usize, Error> {
    let mut changes = Changes::default();
    let caches = &ctx.caches;
    for svc in &objects.shard_services {
        one(ctx, &caches.services, svc, "services", &mut changes).await?;
    }
    for n in &objects.nodes {
        one(
            ctx,
            &caches.config_maps,
            &n.config_map,
            "configmaps",
            &mut changes,
        )
        .await?;
        one(
            ctx,
            &caches.services,
            &n.headless_service,
            "services",
            &mut changes,
        )
        .await?;
        one(
            ctx,
            &caches.stateful_sets,
            &n.stateful_set,
            "statefulsets",
            &mut changes,
        )
        .await?;
    }
    if !changes.created.is_empty() {
        let note = events::summary("created", &changes.created);
        events::publish(ctx, vc, EventType::Normal, "Created", "Apply", note).await;
    }
    Ok(changes.changed)
}

async fn one<K, C>(
    ctx: &Context,
    cache: &Cache<C>,
    desired: &K,
    resource: &'static str,
    changes: &mut Changes,
) -> Result<(), Error>
where
    K: Resource<DynamicType = (), Scope = NamespaceResourceScope>
        + Clone
        + Serialize
        + DeserializeOwned
        + std::fmt::Debug,
    C: Entry,
{
    let applied = apply::apply(&ctx.client, cache, &ctx.recent, desired).await?;
    if changes.note(resource, &desired.name_any(), applied) {
        ctx.metrics.write("apply", resource);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn creates_and_updates_count_as_changes_and_creates_are_named() {
        let mut changes = Changes::default();
        let wrote: Vec<bool> = [
            ("services", "a", Applied::Created),
            ("services", "b", Applied::Unchanged),
            ("configmaps", "c", Applied::Updated),
            ("statefulsets", "d", Applied::Created),
        ]
        .into_iter()
        .map(|(resource, name, applied)| changes.note(resource, name, applied))
        .collect();
        assert_eq!(wrote, [true, false, true, true]);
        assert_eq!(
            changes,
            Changes {
                changed: 3,
                created: vec!["services/a".into(), "statefulsets/d".into()],
            }
        );
    }
}
