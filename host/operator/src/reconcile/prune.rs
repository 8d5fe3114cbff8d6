//! Stage 5, prune: what the cluster owns and no longer wants is deleted
//! (ownership checked again, with a UID precondition), but not while an
//! announce change is still spreading; what was deleted is told in one
//! Event.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{ConfigMap, Service};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::ResourceExt;
use kube::api::ApiResource;
use kube::core::NamespaceResourceScope;
use kube::runtime::events::EventType;
use kube::runtime::reflector::ObjectRef;
use shardgate_contract::model::RouteKind;
use shardgate_k8s::cache::Entry;
use shardgate_k8s::convert::Objects;
use shardgate_k8s::crd::ValkeyCluster;
use shardgate_k8s::prune;
use shardgate_k8s::snapshot::Snapshot;

use super::{Error, events, retire};
use crate::context::Context;
use tracing::info;

/// The names to keep, by what they name.
#[derive(Debug, Default, PartialEq, Eq)]
struct Keep {
    /// Shard Services and the nodes' headless Services.
    services: BTreeSet<String>,
    /// The nodes' StatefulSets and ConfigMaps (they share the node's name).
    nodes: BTreeSet<String>,
    /// The PodDisruptionBudget, if wanted.
    disruption_budgets: BTreeSet<String>,
    /// The nodes' Gateway API routes, by kind.
    tcp_routes: BTreeSet<String>,
    tls_routes: BTreeSet<String>,
}

fn keep(objects: &Objects) -> Keep {
    Keep {
        services: objects
            .shard_services
            .iter()
            .map(|s| s.name_any())
            .chain(objects.nodes.iter().map(|n| n.headless_service.name_any()))
            .collect(),
        nodes: objects
            .nodes
            .iter()
            .map(|n| n.stateful_set.name_any())
            .collect(),
        disruption_budgets: objects
            .disruption_budget
            .iter()
            .map(|p| p.name_any())
            .collect(),
        tcp_routes: routes(objects, RouteKind::Tcp),
        tls_routes: routes(objects, RouteKind::Tls),
    }
}

fn routes(objects: &Objects, kind: RouteKind) -> BTreeSet<String> {
    objects
        .routes
        .iter()
        .filter(|r| r.route.kind == kind)
        .map(|r| r.route.name.clone())
        .collect()
}

/// What a prune did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Pruned {
    /// Objects deleted.
    pub deleted: usize,
    /// Old Services of a topology change are kept this much longer.
    pub retire_in: Option<Duration>,
}

/// Prunes what `snapshot` holds beyond `objects`, unless `hold`; the old
/// Services of a topology change only after their grace period
/// ([`retire`](super::retire)).
pub async fn run(
    ctx: &Context,
    vc: &ValkeyCluster,
    snapshot: &Snapshot,
    objects: &Objects,
    hold: bool,
) -> Result<Pruned, Error> {
    if hold {
        return Ok(Pruned::default());
    }
    let mut keep = keep(objects);
    let unwanted: BTreeSet<String> = snapshot
        .services
        .iter()
        .map(|s| s.name().to_string())
        .filter(|n| !keep.services.contains(n))
        .collect();
    let grace = vc
        .spec
        .external_access
        .as_ref()
        .map_or(0, |ea| ea.switch_grace_period_seconds);
    let (held, retire_in) = ctx.retiring.hold(
        &ObjectRef::from_obj(vc),
        &retire::retiring(vc, &unwanted),
        Duration::from_secs(grace.into()),
        Instant::now(),
    );
    if !held.is_empty() {
        info!(services = ?held, in_seconds = ?retire_in.map(|d| d.as_secs()), "old topology's Services retire after the grace period");
    }
    keep.services.extend(held);
    let namespace = vc.namespace().unwrap_or_default();
    let mut deleted = Vec::new();
    let at = Scope {
        ctx,
        namespace: &namespace,
    };
    at.kind::<Service, _>(&snapshot.services, "services", &keep.services, &mut deleted)
        .await?;
    at.kind::<StatefulSet, _>(
        &snapshot.stateful_sets,
        "statefulsets",
        &keep.nodes,
        &mut deleted,
    )
    .await?;
    at.kind::<ConfigMap, _>(
        &snapshot.config_maps,
        "configmaps",
        &keep.nodes,
        &mut deleted,
    )
    .await?;
    at.kind::<PodDisruptionBudget, _>(
        &snapshot.disruption_budgets,
        "poddisruptionbudgets",
        &keep.disruption_budgets,
        &mut deleted,
    )
    .await?;
    let api = &ctx.caches.gateway_api;
    for (resource, owned, keep, plural) in [
        (
            &api.tcp_routes,
            &snapshot.tcp_routes,
            &keep.tcp_routes,
            "tcproutes",
        ),
        (
            &api.tls_routes,
            &snapshot.tls_routes,
            &keep.tls_routes,
            "tlsroutes",
        ),
    ] {
        if let Some(resource) = resource {
            at.dynamic(resource, owned, plural, keep, &mut deleted)
                .await?;
        }
    }
    if !deleted.is_empty() {
        let note = events::summary("deleted", &deleted);
        events::publish(ctx, vc, EventType::Normal, "Deleted", "Prune", note).await;
    }
    Ok(Pruned {
        deleted: deleted.len(),
        retire_in,
    })
}

/// The namespace a prune acts in.
struct Scope<'a> {
    ctx: &'a Context,
    namespace: &'a str,
}

impl Scope<'_> {
    /// Prunes one kind, counting each delete and naming it for the Event.
    async fn kind<K, C: Entry>(
        &self,
        owned: &[Arc<C>],
        resource: &'static str,
        keep: &BTreeSet<String>,
        deleted: &mut Vec<String>,
    ) -> Result<(), Error>
    where
        K: kube::Resource<DynamicType = (), Scope = NamespaceResourceScope>,
    {
        self.dynamic(
            &ApiResource::erase::<K>(&()),
            owned,
            resource,
            keep,
            deleted,
        )
        .await
    }

    /// Prunes one kind known at run time, as [`Self::kind`].
    async fn dynamic<C: Entry>(
        &self,
        api: &ApiResource,
        owned: &[Arc<C>],
        resource: &'static str,
        keep: &BTreeSet<String>,
        deleted: &mut Vec<String>,
    ) -> Result<(), Error> {
        let names = prune::prune_resource(
            &self.ctx.client,
            &self.ctx.recent,
            api,
            owned,
            self.namespace,
            keep,
        )
        .await?;
        for n in names {
            self.ctx.metrics.write("delete", resource);
            deleted.push(format!("{} {n}", api.kind));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use shardgate_k8s::convert::NodeObjects;

    fn named<K: kube::Resource + Default>(name: &str) -> K {
        let mut o = K::default();
        *o.meta_mut() = ObjectMeta {
            name: Some(name.into()),
            ..ObjectMeta::default()
        };
        o
    }

    fn node(name: &str) -> NodeObjects {
        NodeObjects {
            config_map: named(name),
            headless_service: named(name),
            stateful_set: named(name),
        }
    }

    #[test]
    fn shard_services_and_node_objects_are_kept_by_name() {
        let set = |names: &[&str]| names.iter().map(|n| n.to_string()).collect::<BTreeSet<_>>();
        for (shards, nodes, services, node_names) in [
            (vec![], vec![], set(&[]), set(&[])),
            (
                vec!["shardgate-c-shard-0"],
                vec!["shardgate-c-0-0", "shardgate-c-0-1"],
                set(&["shardgate-c-shard-0", "shardgate-c-0-0", "shardgate-c-0-1"]),
                set(&["shardgate-c-0-0", "shardgate-c-0-1"]),
            ),
            (
                vec![],
                vec!["shardgate-c-1-0"],
                set(&["shardgate-c-1-0"]),
                set(&["shardgate-c-1-0"]),
            ),
        ] {
            let objects = Objects {
                shard_services: shards.iter().map(|s| named(s)).collect(),
                nodes: nodes.iter().map(|n| node(n)).collect(),
                disruption_budget: (!nodes.is_empty()).then(|| named("shardgate-c")),
                routes: Vec::new(),
            };
            let disruption_budgets = if nodes.is_empty() {
                set(&[])
            } else {
                set(&["shardgate-c"])
            };
            assert_eq!(
                keep(&objects),
                Keep {
                    services,
                    nodes: node_names,
                    disruption_budgets,
                    ..Keep::default()
                }
            );
        }
    }
}
