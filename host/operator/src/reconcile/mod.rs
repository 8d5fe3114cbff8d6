//! One reconcile of one ValkeyCluster, flowing one way: observed snapshot
//! from the stores -> guest -> apply -> prune -> status.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{ConfigMap, Service};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::api::DeleteParams;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::events::{Event, EventType};
use kube::runtime::reflector::ObjectRef;
use kube::{Resource, ResourceExt};
use serde_json::json;
use shardgate_contract::model::{Desired, NodeRef, Severity, Step, Topology, Violation};
use tracing::{info, warn};

use shardgate_contract::labels;
use shardgate_k8s::apply::{self, Applied};
use shardgate_k8s::cache::entry::LABEL_REVISION;
use shardgate_k8s::cache::{CachedConfigMap, CachedPod, CachedService, CachedStatefulSet, Entry};
use shardgate_k8s::convert::{self, Labelled};
use shardgate_k8s::crd::{ValkeyCluster, ValkeyClusterStatus};
use shardgate_k8s::manager::FIELD_MANAGER;
use shardgate_k8s::prune;
use shardgate_valkey::{self as valkey_stage, Nodes};
use shardgate_wasm::CallError;

use crate::context::Context;

/// Why a reconcile failed; the controller requeues with backoff.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    #[error("{0}")]
    Module(#[from] CallError),
    #[error("the guest task failed: {0}")]
    Join(#[from] tokio::task::JoinError),
    #[error("cluster has no uid or namespace")]
    Incomplete,
    #[error("{0}")]
    Valkey(#[from] shardgate_valkey::Error),
    #[error("{0}")]
    Topology(#[from] valkey_stage::StepError),
}

impl Error {
    pub fn reason(&self) -> &'static str {
        match self {
            Error::Kube(_) => "ApiError",
            Error::Module(_) | Error::Join(_) => "ModuleFailed",
            Error::Incomplete => "Incomplete",
            Error::Valkey(_) | Error::Topology(_) => "ValkeyFailed",
        }
    }
}

/// How long to wait before looking again at a converged cluster.
pub const RESYNC: Duration = Duration::from_secs(300);
/// How soon to look again while something is still pending.
pub const PENDING_RECHECK: Duration = Duration::from_secs(15);
/// How soon to look again when the object caches have not been listed yet.
pub const CACHE_RECHECK: Duration = Duration::from_millis(200);
/// How soon to look again while the Valkey cluster is forming or changing
/// shape (gossip, syncs and migrations take seconds).
pub const TOPOLOGY_RECHECK: Duration = Duration::from_secs(1);

#[tracing::instrument(skip_all, fields(cluster = %vc.name_any(), namespace = vc.namespace().unwrap_or_default()))]
pub async fn reconcile(vc: Arc<ValkeyCluster>, ctx: Arc<Context>) -> Result<Action, Error> {
    if !ctx.stores.synced() {
        // Not counted as a reconcile: nothing was looked at.
        return Ok(Action::requeue(CACHE_RECHECK));
    }
    let started = Instant::now();
    ctx.metrics.reconciles.inc();
    let result = run(&vc, &ctx).await;
    ctx.metrics
        .reconcile_seconds
        .observe(started.elapsed().as_secs_f64());
    if result.is_ok() {
        ctx.succeeded(&ObjectRef::from_obj(vc.as_ref()));
    }
    result
}

/// Requeue with backoff, and say why.
pub fn error_policy(vc: Arc<ValkeyCluster>, err: &Error, ctx: Arc<Context>) -> Action {
    ctx.metrics.error(err.reason());
    let delay = ctx.failed(ObjectRef::from_obj(vc.as_ref()));
    warn!(cluster = %vc.name_any(), error = %err, retry_in = ?delay, "reconcile failed");
    let ctx2 = ctx.clone();
    let message = err.to_string();
    tokio::spawn(async move {
        publish(
            &ctx2,
            &vc,
            EventType::Warning,
            "ReconcileFailed",
            "Reconcile",
            message,
        )
        .await;
    });
    Action::requeue(delay)
}

async fn run(vc: &Arc<ValkeyCluster>, ctx: &Context) -> Result<Action, Error> {
    let namespace = vc.namespace().ok_or(Error::Incomplete)?;
    let uid = vc.uid().ok_or(Error::Incomplete)?;
    let name = vc.name_any();

    // 1. The observed snapshot: only objects this cluster owns.
    let owned = Owned::of(&ctx.stores, &namespace, &name, &uid);
    let Owned {
        services,
        stateful_sets,
        pods,
        ..
    } = &owned;
    // Every cluster is looked at; only the others' names are copied.
    let others: Vec<String> = ctx
        .stores
        .clusters
        .state()
        .iter()
        .filter(|c| c.metadata.namespace.as_deref() == Some(namespace.as_str()))
        .filter_map(|c| c.metadata.name.as_deref().filter(|n| *n != name))
        .map(String::from)
        .collect();
    let mut input = convert::input(
        vc,
        services.iter().map(|s| s.as_ref()),
        pods.iter().map(|p| p.as_ref()),
        others,
    );
    // The Valkey nodes' own facts, read at their pod IPs. TLS clusters are
    // not managed yet: the operator has no client certificate.
    let mut valkey = if ctx.manage_valkey && vc.spec.tls.is_none() {
        let targets = pods.iter().filter_map(|p| {
            let o = convert::observed_pod(&name, p.as_ref())?;
            let ip = convert::PodView::pod_ip(p.as_ref())?.parse().ok()?;
            o.ready.then_some((
                NodeRef {
                    shard: o.shard,
                    node: o.node,
                },
                ip,
            ))
        });
        Some(Nodes::observe(targets).await)
    } else {
        None
    };
    input.observed.valkey = valkey.as_ref().map(Nodes::facts);
    mark_outdated(&name, stateful_sets, pods, &mut input.observed.pods);

    // 2. The guest, off the async threads.
    let module = ctx.module();
    let used = module.clone();
    // Timed on the blocking thread, so waiting for a free thread is not
    // counted as guest time.
    let (result, guest_time) = tokio::task::spawn_blocking(move || {
        let started = Instant::now();
        let result = module.reconcile(&input);
        (result, started.elapsed())
    })
    .await?;
    let verdict = match result {
        Ok(verdict) => {
            ctx.module_succeeded(&used);
            verdict
        }
        Err(e) => {
            // Counts towards rolling the module back.
            ctx.module_failed(&used, &e);
            return Err(e.into());
        }
    };
    ctx.metrics.observe_guest(guest_time);
    let desired = match verdict {
        Ok(d) => d,
        Err(invalid) => return refuse(vc, ctx, invalid.violations).await,
    };
    // Warnings are reported once per spec generation, not on every resync.
    let new_generation =
        vc.status.as_ref().and_then(|s| s.observed_generation) != vc.metadata.generation;
    if new_generation {
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

    // 3. Apply every desired object.
    let objects = convert::objects(vc, &desired);
    let mut changed = 0usize;
    let mut created = Vec::new();
    let client = &ctx.client;
    let stores = &ctx.stores;
    for svc in &objects.shard_services {
        note(
            ctx,
            &mut changed,
            &mut created,
            "services",
            &svc.name_any(),
            apply::apply(client, &stores.services, &ctx.recent, svc).await?,
        );
    }
    for n in &objects.nodes {
        note(
            ctx,
            &mut changed,
            &mut created,
            "configmaps",
            &n.config_map.name_any(),
            apply::apply(client, &stores.config_maps, &ctx.recent, &n.config_map).await?,
        );
        note(
            ctx,
            &mut changed,
            &mut created,
            "services",
            &n.headless_service.name_any(),
            apply::apply(client, &stores.services, &ctx.recent, &n.headless_service).await?,
        );
        note(
            ctx,
            &mut changed,
            &mut created,
            "statefulsets",
            &n.stateful_set.name_any(),
            apply::apply(client, &stores.stateful_sets, &ctx.recent, &n.stateful_set).await?,
        );
    }
    if !created.is_empty() {
        publish(
            ctx,
            vc,
            EventType::Normal,
            "Created",
            "Apply",
            summary("created", &created),
        )
        .await;
    }

    // 4. The Valkey nodes: announce settings live, then the topology plan.
    // Both run before the prune, so external endpoints stop being announced
    // before their Services go, and departing shards are drained first (the
    // guest keeps their objects in `desired` until then).
    let mut steps_run = 0;
    let mut announce_spreading = false;
    if let Some(nodes) = valkey.as_mut() {
        let settings = nodes.announce(&desired).await?;
        if settings > 0 {
            info!(settings, "announce settings changed live");
        }
        // Until every node sees every other node's new announcement, a
        // client may still be redirected to an old endpoint: keep its
        // Service until then.
        announce_spreading = !nodes.announce_settled().await?;
        for (i, step) in desired.topology.steps.iter().enumerate() {
            match step {
                Step::Restart(at) => restart(ctx, &namespace, pods, *at).await?,
                _ => nodes.run_step(i, step).await?,
            }
            steps_run += 1;
        }
        if steps_run > 0 {
            let steps: Vec<String> = desired
                .topology
                .steps
                .iter()
                .map(valkey_stage::describe)
                .collect();
            publish(
                ctx,
                vc,
                EventType::Normal,
                "Topology",
                "Topology",
                steps.join("; "),
            )
            .await;
        }
    }

    // 5. Prune what this cluster owns and no longer wants (not while an
    // announce change is still spreading).
    let keep_services: BTreeSet<String> = objects
        .shard_services
        .iter()
        .map(|s| s.name_any())
        .chain(objects.nodes.iter().map(|n| n.headless_service.name_any()))
        .collect();
    let keep_nodes: BTreeSet<String> = objects
        .nodes
        .iter()
        .map(|n| n.stateful_set.name_any())
        .collect();
    let mut deleted = Vec::new();
    let scope = Scope {
        ctx,
        namespace: &namespace,
    };
    if !announce_spreading {
        scope
            .prune::<Service, _>(
                services,
                "services",
                "Service",
                &keep_services,
                &mut deleted,
            )
            .await?;
        scope
            .prune::<StatefulSet, _>(
                stateful_sets,
                "statefulsets",
                "StatefulSet",
                &keep_nodes,
                &mut deleted,
            )
            .await?;
        scope
            .prune::<ConfigMap, _>(
                &owned.config_maps,
                "configmaps",
                "ConfigMap",
                &keep_nodes,
                &mut deleted,
            )
            .await?;
    }
    if !deleted.is_empty() {
        publish(
            ctx,
            vc,
            EventType::Normal,
            "Deleted",
            "Prune",
            summary("deleted", &deleted),
        )
        .await;
    }
    changed += deleted.len();

    // 6. Status.
    let topology = valkey.is_some().then_some(&desired.topology);
    let pending = write_status(
        vc,
        ctx,
        &desired,
        changed,
        &input_pods_ready(&desired, pods, &name),
        topology,
        announce_spreading,
    )
    .await?;
    if changed > 0 {
        info!(changed, "applied");
    }
    let reshaping = topology.is_some_and(|t| !t.formed) || steps_run > 0 || announce_spreading;
    Ok(Action::requeue(if reshaping {
        TOPOLOGY_RECHECK
    } else if pending {
        PENDING_RECHECK
    } else {
        RESYNC
    }))
}

/// Marks the pods whose template is older than their StatefulSet's
/// (`controller-revision-hash` != the StatefulSet's `updateRevision`).
fn mark_outdated(
    cluster: &str,
    stateful_sets: &[Arc<CachedStatefulSet>],
    pods: &[Arc<CachedPod>],
    observed: &mut [shardgate_contract::model::ObservedPod],
) {
    let revisions: std::collections::BTreeMap<&str, &str> = stateful_sets
        .iter()
        .filter_map(|s| Some((s.uid()?, s.state.as_ref()?.update_revision.as_deref()?)))
        .collect();
    for pod in pods {
        let Some(o) = convert::observed_pod(cluster, pod.as_ref()) else {
            continue;
        };
        let revision = pod.controller_uid().and_then(|uid| revisions.get(uid));
        let current = pod.label(LABEL_REVISION);
        let outdated = matches!((revision, current), (Some(r), Some(c)) if *r != c);
        if let Some(p) = observed
            .iter_mut()
            .find(|p| p.shard == o.shard && p.node == o.node)
        {
            p.outdated = outdated;
        }
    }
}

/// Deletes a node's Pod so its StatefulSet recreates it from the current
/// template (the guest's `restart` step).
async fn restart(
    ctx: &Context,
    namespace: &str,
    pods: &[Arc<CachedPod>],
    at: NodeRef,
) -> Result<(), Error> {
    let cluster_pods = pods.iter().filter(|p| {
        p.label(labels::SHARD) == Some(at.shard.to_string().as_str())
            && p.label(labels::NODE) == Some(at.node.to_string().as_str())
    });
    for pod in cluster_pods {
        let api: Api<k8s_openapi::api::core::v1::Pod> =
            Api::namespaced(ctx.client.clone(), namespace);
        api.delete(pod.name(), &DeleteParams::default()).await?;
        ctx.metrics.write("delete", "pods");
        info!(pod = %pod.name(), "restarted (deleted) to apply a new template");
    }
    Ok(())
}

/// What one cluster owns, read from the stores through their by-cluster
/// indexes: labelled for the cluster AND controlled by its UID. Pods count
/// only if a StatefulSet the cluster controls controls them, so a stray pod
/// carrying the cluster's labels cannot inject a host IP.
struct Owned {
    services: Vec<Arc<CachedService>>,
    config_maps: Vec<Arc<CachedConfigMap>>,
    stateful_sets: Vec<Arc<CachedStatefulSet>>,
    pods: Vec<Arc<CachedPod>>,
}

impl Owned {
    fn of(stores: &crate::Stores, namespace: &str, cluster: &str, uid: &str) -> Self {
        fn owned<K: Entry>(objects: Vec<Arc<K>>, cluster: &str, uid: &str) -> Vec<Arc<K>> {
            objects
                .into_iter()
                .filter(|o| prune::owned_by(o.as_ref(), cluster, uid))
                .collect()
        }
        let stateful_sets = owned(
            stores.stateful_sets.labelled(namespace, cluster),
            cluster,
            uid,
        );
        let node_sets: BTreeSet<&str> = stateful_sets.iter().filter_map(|s| s.uid()).collect();
        let pods = stores
            .pods
            .labelled(namespace, cluster)
            .into_iter()
            .filter(|p| {
                p.controller_uid()
                    .is_some_and(|uid| node_sets.contains(uid))
            })
            .collect();
        Owned {
            services: owned(stores.services.labelled(namespace, cluster), cluster, uid),
            config_maps: owned(
                stores.config_maps.labelled(namespace, cluster),
                cluster,
                uid,
            ),
            stateful_sets,
            pods,
        }
    }
}

/// The cluster a prune acts for.
struct Scope<'a> {
    ctx: &'a Context,
    namespace: &'a str,
}

impl Scope<'_> {
    /// Prunes one kind, counting each delete and noting it for an Event.
    async fn prune<K, C: Entry>(
        &self,
        owned: &[Arc<C>],
        resource: &'static str,
        kind: &str,
        keep: &BTreeSet<String>,
        deleted: &mut Vec<String>,
    ) -> Result<(), Error>
    where
        K: Resource<DynamicType = (), Scope = kube::core::NamespaceResourceScope>
            + Clone
            + serde::de::DeserializeOwned
            + std::fmt::Debug,
    {
        let names = prune::prune::<K, C>(
            &self.ctx.client,
            &self.ctx.recent,
            owned,
            self.namespace,
            keep,
        )
        .await?;
        for n in names {
            self.ctx.metrics.write("delete", resource);
            deleted.push(format!("{kind} {n}"));
        }
        Ok(())
    }
}

/// One Event per reconcile, not per object: "created 3 objects: a, b, c".
/// A cluster's first reconcile creates dozens of objects; an Event each
/// cost as many API writes again.
fn summary(verb: &str, objects: &[String]) -> String {
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

fn note(
    ctx: &Context,
    changed: &mut usize,
    created: &mut Vec<String>,
    resource: &'static str,
    name: &str,
    result: Applied,
) {
    match result {
        Applied::Unchanged => {}
        Applied::Created => {
            ctx.metrics.write("apply", resource);
            *changed += 1;
            created.push(format!("{resource}/{name}"));
        }
        Applied::Updated => {
            ctx.metrics.write("apply", resource);
            *changed += 1;
        }
    }
}

/// (ready pods, expected pods).
fn input_pods_ready(desired: &Desired, pods: &[Arc<CachedPod>], cluster: &str) -> (usize, usize) {
    let ready = pods
        .iter()
        .filter_map(|p| convert::observed_pod(cluster, p.as_ref()))
        .filter(|p| {
            p.ready
                && desired
                    .nodes
                    .iter()
                    .any(|n| n.shard == p.shard && n.node == p.node)
        })
        .count();
    (ready, desired.nodes.len())
}

/// A spec the guest refuses: nothing is applied or deleted; status and an
/// Event say why.
async fn refuse(
    vc: &Arc<ValkeyCluster>,
    ctx: &Context,
    violations: Vec<Violation>,
) -> Result<Action, Error> {
    let message = violations
        .iter()
        .map(|v| v.to_string())
        .collect::<Vec<_>>()
        .join("; ");
    warn!(%message, "spec refused; nothing applied");
    ctx.metrics.error("InvalidSpec");
    publish(
        ctx,
        vc,
        EventType::Warning,
        "InvalidSpec",
        "Validate",
        message.clone(),
    )
    .await;
    let previous = vc.status.clone().unwrap_or_default();
    let now = now();
    let mut status = previous.clone();
    set_condition(
        &mut status.conditions,
        condition("Degraded", "True", "InvalidSpec", &message, vc, &now),
    );
    set_condition(
        &mut status.conditions,
        condition(
            "Progressing",
            "False",
            "InvalidSpec",
            "the spec must be fixed before anything is applied",
            vc,
            &now,
        ),
    );
    patch_status(vc, ctx, &previous, status).await?;
    Ok(Action::await_change())
}

/// Writes the status (guest's endpoints and ExternalAccessReady, plus Ready,
/// Progressing and Degraded) if it differs. Returns true while something is
/// still pending.
async fn write_status(
    vc: &Arc<ValkeyCluster>,
    ctx: &Context,
    desired: &Desired,
    changed: usize,
    (ready, expected): &(usize, usize),
    topology: Option<&Topology>,
    announce_spreading: bool,
) -> Result<bool, Error> {
    let previous = vc.status.clone().unwrap_or_default();
    let now = now();
    let mut status = convert::status(desired, Some(&previous), vc.metadata.generation, &now);
    let external_pending = status.conditions.iter().any(|c| {
        c.type_ == shardgate_contract::conditions::EXTERNAL_ACCESS_READY && c.status != "True"
    });
    let forming = topology.filter(|t| !t.formed);
    let all_ready = ready == expected && forming.is_none() && !announce_spreading;
    let (r_status, r_reason, r_msg) = if ready != expected {
        (
            "False",
            "NodesNotReady",
            format!("{ready} of {expected} nodes are ready"),
        )
    } else if let Some(t) = forming {
        ("False", "ClusterForming", t.waiting.clone())
    } else if announce_spreading {
        (
            "False",
            "AnnouncePending",
            "announce settings are still spreading by gossip".to_string(),
        )
    } else if external_pending {
        (
            "False",
            "ExternalAccessPending",
            "nodes are ready; external access is not".to_string(),
        )
    } else {
        (
            "True",
            "AllNodesReady",
            format!("all {expected} nodes are ready"),
        )
    };
    let (p_status, p_reason, p_msg) = if changed > 0 {
        ("True", "Applying", format!("{changed} objects changed"))
    } else if !all_ready || external_pending {
        (
            "True",
            "Waiting",
            "waiting for nodes or external endpoints".to_string(),
        )
    } else {
        (
            "False",
            "Converged",
            "every object is as desired".to_string(),
        )
    };
    let mut conditions = previous.conditions.clone();
    conditions.retain(|c| matches!(c.type_.as_str(), "Ready" | "Progressing" | "Degraded"));
    set_condition(
        &mut conditions,
        condition("Ready", r_status, r_reason, &r_msg, vc, &now),
    );
    set_condition(
        &mut conditions,
        condition("Progressing", p_status, p_reason, &p_msg, vc, &now),
    );
    set_condition(
        &mut conditions,
        condition("Degraded", "False", "AsExpected", "", vc, &now),
    );
    conditions.append(&mut status.conditions);
    conditions.sort_by(|a, b| a.type_.cmp(&b.type_));
    status.conditions = conditions;
    patch_status(vc, ctx, &previous, status).await?;
    Ok(!all_ready || external_pending || changed > 0)
}

async fn patch_status(
    vc: &ValkeyCluster,
    ctx: &Context,
    previous: &ValkeyClusterStatus,
    status: ValkeyClusterStatus,
) -> Result<(), Error> {
    if &status == previous {
        return Ok(());
    }
    let api: Api<ValkeyCluster> =
        Api::namespaced(ctx.client.clone(), &vc.namespace().unwrap_or_default());
    let body = json!({
        "apiVersion": ValkeyCluster::api_version(&()),
        "kind": ValkeyCluster::kind(&()),
        "status": status,
    });
    api.patch_status(
        &vc.name_any(),
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(&body),
    )
    .await?;
    ctx.metrics.write("apply", "valkeyclusters/status");
    if previous.external_endpoints.is_some() && status.external_endpoints.is_none() {
        // Apply dropped every entry; remove the (now empty) list itself, as
        // the seed's status shape requires.
        let remove = json!({"status": {"externalEndpoints": null}});
        api.patch_status(
            &vc.name_any(),
            &PatchParams::default(),
            &Patch::Merge(&remove),
        )
        .await?;
        ctx.metrics.write("patch", "valkeyclusters/status");
    }
    Ok(())
}

fn now() -> Time {
    Time(k8s_openapi::jiff::Timestamp::now())
}

fn condition(
    type_: &str,
    status: &str,
    reason: &str,
    message: &str,
    vc: &ValkeyCluster,
    now: &Time,
) -> Condition {
    Condition {
        type_: type_.into(),
        status: status.into(),
        reason: reason.into(),
        message: message.into(),
        last_transition_time: now.clone(),
        observed_generation: vc.metadata.generation,
    }
}

/// Replaces the condition of the same type, keeping its transition time if
/// the status did not change.
fn set_condition(conditions: &mut Vec<Condition>, mut new: Condition) {
    if let Some(old) = conditions.iter_mut().find(|c| c.type_ == new.type_) {
        if old.status == new.status {
            new.last_transition_time = old.last_transition_time.clone();
        }
        *old = new;
    } else {
        conditions.push(new);
    }
}

async fn publish(
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
