//! Stage 3, apply: every desired object that is not already in place is
//! applied with server-side apply ([`shardgate_k8s::apply`]); what was
//! created is told in one Event. An object whose name is taken by one the
//! cluster does not control is left alone and reported (no takeover).

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{ConfigMap, Service};
use kube::api::ApiResource;
use kube::core::NamespaceResourceScope;
use kube::runtime::events::EventType;
use kube::{Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use shardgate_contract::conditions;
use shardgate_contract::model::RouteKind;
use shardgate_k8s::apply::{self, Applied, Taken};
use shardgate_k8s::cache::{Cache, Entry};
use shardgate_k8s::convert::Objects;
use shardgate_k8s::crd::ValkeyCluster;
use shardgate_k8s::status;

use super::{Error, events};
use crate::context::Context;

/// What the applies of one reconcile did.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Changes {
    /// Objects created or updated.
    pub changed: usize,
    /// `resource/name` of each object created.
    created: Vec<String>,
    /// `Kind name` of each desired object whose name another owner holds.
    pub conflicts: Vec<String>,
}

impl Changes {
    /// Counts what one apply did; true if it wrote.
    fn note(&mut self, kind: &str, resource: &str, name: &str, applied: Applied) -> bool {
        match applied {
            Applied::Unchanged => return false,
            Applied::Conflict => {
                self.conflicts.push(format!("{kind} {name}"));
                return false;
            }
            Applied::Created => self.created.push(format!("{resource}/{name}")),
            Applied::Updated => {}
        }
        self.changed += 1;
        true
    }
}

/// Applies `objects` in order (shard Services, then each node's ConfigMap,
/// headless Service and StatefulSet, then the PodDisruptionBudget). Names
/// of a kind that several objects about to be created would take are
/// looked up with one list of that kind ([`Taken`]).
pub async fn run(ctx: &Context, vc: &ValkeyCluster, objects: &Objects) -> Result<Changes, Error> {
    let mut changes = Changes::default();
    let caches = &ctx.caches;
    let namespace = vc.namespace().unwrap_or_default();
    let services = names(
        (objects.shard_services.iter()).chain(objects.nodes.iter().map(|n| &n.headless_service)),
    );
    let config_maps = names(objects.nodes.iter().map(|n| &n.config_map));
    let stateful_sets = names(objects.nodes.iter().map(|n| &n.stateful_set));
    let services = taken::<Service, _>(ctx, &caches.services, &namespace, &services).await?;
    let config_maps =
        taken::<ConfigMap, _>(ctx, &caches.config_maps, &namespace, &config_maps).await?;
    let stateful_sets =
        taken::<StatefulSet, _>(ctx, &caches.stateful_sets, &namespace, &stateful_sets).await?;
    for svc in &objects.shard_services {
        let cache = &caches.services;
        one(ctx, cache, svc, "services", services.as_ref(), &mut changes)
            .await
            .map_err(|e| node_port_taken(vc, &svc.name_any(), e))?;
    }
    for n in &objects.nodes {
        let cache = &caches.config_maps;
        let cm = &n.config_map;
        one(
            ctx,
            cache,
            cm,
            "configmaps",
            config_maps.as_ref(),
            &mut changes,
        )
        .await?;
        let cache = &caches.services;
        let svc = &n.headless_service;
        one(ctx, cache, svc, "services", services.as_ref(), &mut changes).await?;
        let cache = &caches.stateful_sets;
        let sts = &n.stateful_set;
        one(
            ctx,
            cache,
            sts,
            "statefulsets",
            stateful_sets.as_ref(),
            &mut changes,
        )
        .await?;
    }
    if let Some(pdb) = &objects.disruption_budget {
        let cache = &caches.disruption_budgets;
        one(ctx, cache, pdb, "poddisruptionbudgets", None, &mut changes).await?;
    }
    // Routes of a kind the API server does not serve are not applied: the
    // guest has reported why (ExternalAccessReady), and the status says so.
    for r in &objects.routes {
        let Some((resource, object)) = r.object(&caches.gateway_api) else {
            continue;
        };
        let (cache, plural) = match r.route.kind {
            RouteKind::Tcp => (&caches.tcp_routes, "tcproutes"),
            RouteKind::Tls => (&caches.tls_routes, "tlsroutes"),
        };
        let body = serde_json::to_value(&object).expect("objects serialize");
        let recent = &ctx.recent;
        let applied =
            apply::apply_value(&ctx.client, cache, recent, &resource, &body, None).await?;
        if changes.note(&resource.kind, plural, &r.route.name, applied) {
            ctx.metrics.write("apply", plural);
        }
    }
    if !changes.created.is_empty() {
        let note = events::summary("created", &changes.created);
        events::publish(ctx, vc, EventType::Normal, "Created", "Apply", note).await;
    }
    if !changes.conflicts.is_empty() && !already_reported(vc, &changes.conflicts) {
        let note = status::name_conflict(&changes.conflicts);
        events::publish(ctx, vc, EventType::Warning, "NameConflict", "Apply", note).await;
    }
    Ok(changes)
}

fn names<'a, K: Resource + 'a>(objects: impl Iterator<Item = &'a K>) -> Vec<String> {
    objects.map(|o| o.name_any()).collect()
}

/// The names of `K` taken in `namespace`, when several of `desired` are
/// about to be created.
async fn taken<K, C>(
    ctx: &Context,
    cache: &Cache<C>,
    namespace: &str,
    names: &[String],
) -> Result<Option<Taken>, Error>
where
    K: Resource<DynamicType = ()>,
    C: Entry,
{
    let resource = ApiResource::erase::<K>(&());
    let recent = &ctx.recent;
    Ok(Taken::list_if_many(&ctx.client, cache, recent, &resource, namespace, names).await?)
}

/// `e`, or when the API server refused a NodePort as already allocated,
/// which pin of the spec asked for it.
fn node_port_taken(vc: &ValkeyCluster, service: &str, e: Error) -> Error {
    let Some(port) = (match &e {
        Error::Kube(k) => super::error::node_port_taken(k),
        _ => None,
    }) else {
        return e;
    };
    Error::NodePortTaken {
        field: pin_field(&shardgate_k8s::convert::cluster(vc), port),
        port,
        service: service.to_string(),
    }
}

/// The field of `cluster` that pins NodePort `port`.
fn pin_field(cluster: &shardgate_contract::model::Cluster, port: u32) -> String {
    const AT: &str = "spec.externalAccess.nodePorts";
    let Some(pins) = cluster
        .external_access
        .as_ref()
        .and_then(|ea| ea.node_ports.as_ref())
    else {
        return AT.to_string();
    };
    if pins.base.is_some() {
        return format!("{AT}.base");
    }
    let (shards, nodes) = (
        cluster.shards.max(0) as u32,
        cluster.replicas.max(0) as u32 + 1,
    );
    shardgate_contract::ports::every_pin(pins, shards, nodes)
        .into_iter()
        .find(|&(_, _, p)| p == port)
        .map_or(AT.to_string(), |(s, n, _)| format!("{AT}.ports[{s}][{n}]"))
}

/// The status already reports exactly these conflicts (the Event was sent).
fn already_reported(vc: &ValkeyCluster, conflicts: &[String]) -> bool {
    vc.status.as_ref().is_some_and(|s| {
        s.conditions.iter().any(|c| {
            c.type_ == conditions::DEGRADED
                && c.reason == "NameConflict"
                && c.message == status::name_conflict(conflicts)
        })
    })
}

async fn one<K, C>(
    ctx: &Context,
    cache: &Cache<C>,
    desired: &K,
    resource: &'static str,
    taken: Option<&Taken>,
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
    let applied = apply::apply(&ctx.client, cache, &ctx.recent, desired, taken).await?;
    if changes.note(&K::kind(&()), resource, &desired.name_any(), applied) {
        ctx.metrics.write("apply", resource);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_taken_node_port_is_blamed_on_the_pin_that_asked_for_it() {
        use shardgate_contract::model::{Cluster, ExternalAccess, NodePorts};
        let with = |pins: Option<NodePorts>| Cluster {
            shards: 2,
            replicas: 1,
            external_access: Some(ExternalAccess {
                node_ports: pins,
                ..ExternalAccess::default()
            }),
            ..Cluster::default()
        };
        let base = Some(NodePorts {
            base: Some(30100),
            ports: vec![],
        });
        let list = Some(NodePorts {
            base: None,
            ports: vec![vec![31000, 31001], vec![31010, 31011]],
        });
        // (pins, refused port) => field
        for (pins, port, want) in [
            (base, 30102, "spec.externalAccess.nodePorts.base"),
            (
                list.clone(),
                31010,
                "spec.externalAccess.nodePorts.ports[1][0]",
            ),
            (list, 32000, "spec.externalAccess.nodePorts"),
            (None, 30000, "spec.externalAccess.nodePorts"),
        ] {
            assert_eq!(pin_field(&with(pins), port), want, "{port}");
        }
    }

    #[test]
    fn creates_and_updates_count_as_changes_and_creates_are_named() {
        let mut changes = Changes::default();
        let wrote: Vec<bool> = [
            ("Service", "services", "a", Applied::Created),
            ("Service", "services", "b", Applied::Unchanged),
            ("ConfigMap", "configmaps", "c", Applied::Updated),
            ("Service", "services", "x", Applied::Conflict),
            ("StatefulSet", "statefulsets", "d", Applied::Created),
        ]
        .into_iter()
        .map(|(kind, resource, name, applied)| changes.note(kind, resource, name, applied))
        .collect();
        assert_eq!(wrote, [true, false, true, false, true]);
        assert_eq!(
            changes,
            Changes {
                changed: 3,
                created: vec!["services/a".into(), "statefulsets/d".into()],
                conflicts: vec!["Service x".into()],
            }
        );
    }
}
