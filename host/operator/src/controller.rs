//! The controller's wiring: a watch per owned kind into shardgate's caches
//! (a change triggers the cluster that owns the object), the clusters in
//! kube's reflector store, and the reconcile ([`crate::reconcile`]) run on
//! each trigger, with bounded concurrency.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use futures::{FutureExt, StreamExt, TryStreamExt};
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{ConfigMap, Node, Service};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{Api, ApiResource, DynamicObject};
use kube::core::PartialObjectMeta;
use kube::runtime::reflector::{self, ObjectRef};
use kube::runtime::{Controller, WatchStreamExt, watcher};
use shardgate_contract::labels::{self, MANAGED_SELECTOR};
use shardgate_k8s::cache::watched::{Watched, WatchedPod};
use shardgate_k8s::cache::{self, Entry, entry as cached};
use shardgate_k8s::crd::ValkeyCluster;
use shardgate_k8s::gateway_api::{GatewayApi, Gateways};
use shardgate_k8s::node_addresses::NodeAddresses;
use shardgate_k8s::snapshot::Caches;
use shardgate_wasm::swap::ModuleManager;
use tokio::sync::watch;
use tracing::{info, warn};

use crate::{Context, Health, Metrics, Options, reconcile};

fn api<K>(client: &kube::Client, namespace: Option<&str>) -> Api<K>
where
    K: kube::Resource<DynamicType = (), Scope = kube::core::NamespaceResourceScope>,
{
    match namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    }
}

/// The controller itself; returns when `stop` resolves.
pub(crate) async fn controller(
    options: &Options,
    client: kube::Client,
    module: Arc<ModuleManager>,
    metrics: Arc<Metrics>,
    health: Arc<Health>,
    mut stop: watch::Receiver<bool>,
) -> anyhow::Result<()> {
    let stop = async move {
        let _ = stop.wait_for(|s| *s).await;
    };
    let ns = options.namespace.as_deref();
    let managed = watcher::Config::default()
        .labels(MANAGED_SELECTOR)
        .any_semantic()
        .page_size(LIST_PAGE_SIZE);
    // Digests of objects whose status alone changed are taken over, and
    // a watch event that changes nothing a reconcile reads wakes none
    // (both off only to measure what they save).
    let shortcuts = options.apply_shortcuts;

    let (services, service_stream) = cached_watch(
        api::<Watched<Service>>(&client, ns),
        &managed,
        shortcuts,
        cached::service,
    );
    let (config_maps, config_map_stream) = cached_watch(
        api::<Watched<ConfigMap>>(&client, ns),
        &managed,
        shortcuts,
        cached::config_map,
    );
    let (stateful_sets, stateful_set_stream) = cached_watch(
        api::<Watched<StatefulSet>>(&client, ns),
        &managed,
        shortcuts,
        cached::stateful_set,
    );
    let (pods, pod_stream) = cached_watch(
        api::<WatchedPod>(&client, ns),
        &managed,
        shortcuts,
        |pod, _| cached::pod(pod),
    );
    let (disruption_budgets, disruption_budget_stream) = cached_watch(
        api::<Watched<PodDisruptionBudget>>(&client, ns),
        &managed,
        shortcuts,
        cached::disruption_budget,
    );

    // The Gateway API, if served: the routes the clusters own, and the
    // Gateways they name (a change re-reconciles the clusters naming it).
    let gateway_api = discover_gateway_api(&client).await;
    info!(
        gateways = gateway_api.gateways.is_some(),
        tcp_routes = gateway_api.tcp_routes.is_some(),
        tls_routes = gateway_api.tls_routes.is_some(),
        "Gateway API kinds served"
    );
    let (tcp_routes, tcp_route_stream) =
        route_watch(&client, ns, &managed, gateway_api.tcp_routes.as_ref());
    let (tls_routes, tls_route_stream) =
        route_watch(&client, ns, &managed, gateway_api.tls_routes.as_ref());
    let gateways = match &gateway_api.gateways {
        Some(_) => Gateways::default(),
        None => Gateways::unserved(),
    };

    // Every Kubernetes node's ExternalIP (nodeAddressType: ExternalIP). A
    // changed address re-reconciles every cluster; heartbeats do not.
    let node_addresses = NodeAddresses::default();
    let (node_news, _) = tokio::sync::broadcast::channel::<()>(4);
    let node_watch = tokio::spawn({
        let node_addresses = node_addresses.clone();
        let node_news = node_news.clone();
        let nodes = watcher(
            Api::<Node>::all(client.clone()),
            watcher::Config::default()
                .any_semantic()
                .page_size(LIST_PAGE_SIZE),
        )
        .default_backoff();
        async move {
            let mut nodes = std::pin::pin!(nodes);
            while let Some(event) = nodes.next().await {
                match event {
                    Ok(event) => {
                        if node_addresses.apply(event) {
                            let _ = node_news.send(());
                        }
                    }
                    Err(e) => warn!(error = %e, "node watch"),
                }
            }
        }
    });

    // Reconciles run concurrently up to a bound well inside the wasm
    // runtime's instance pool (one instance per in-flight guest call).
    let concurrency = (shardgate_wasm::Engine::MAX_INSTANCES / 4) as u16;
    // The clusters' cache, without their managed fields: nothing reads
    // them, and a cluster's status (an endpoint per node) makes them large.
    let (clusters, cluster_writer) = reflector::store();
    let cluster_stream = watcher(
        api::<ValkeyCluster>(&client, ns),
        watcher::Config::default()
            .any_semantic()
            .page_size(LIST_PAGE_SIZE),
    )
    .default_backoff()
    .modify(|vc| vc.metadata.managed_fields = None)
    .reflect(cluster_writer)
    .applied_objects()
    .predicate_filter(
        move |vc: &ValkeyCluster| shortcuts.then(|| wants_a_look(vc)),
        Default::default(),
    )
    .filter_map(|r| absorbed(r, "ValkeyCluster"));
    let gateway_stream = gateway_stream(
        &client,
        ns,
        gateway_api.gateways.as_ref(),
        gateways.clone(),
        clusters.clone(),
    );
    let controller = Controller::for_stream(cluster_stream, clusters).with_config(
        kube::runtime::controller::Config::default()
            .concurrency(concurrency)
            .debounce(options.debounce),
    );
    let caches = Caches {
        services: services.clone(),
        config_maps: config_maps.clone(),
        stateful_sets: stateful_sets.clone(),
        pods: pods.clone(),
        disruption_budgets: disruption_budgets.clone(),
        tcp_routes: tcp_routes.clone(),
        tls_routes: tls_routes.clone(),
        node_addresses: node_addresses.clone(),
        gateways: gateways.clone(),
        gateway_api: gateway_api.clone(),
    };
    let ctx = Arc::new(
        Context::new(
            client,
            controller.store(),
            caches,
            module,
            metrics,
            options.identity.clone(),
            options.manage_valkey,
        )
        .with_recheck(options.recheck)
        .with_apply_shortcuts(options.apply_shortcuts),
    );

    // Ready once every cache has its first list.
    tokio::spawn({
        let health = health.clone();
        async move {
            futures::join!(
                services.wait_until_ready(),
                config_maps.wait_until_ready(),
                stateful_sets.wait_until_ready(),
                pods.wait_until_ready(),
                disruption_budgets.wait_until_ready(),
                tcp_routes.wait_until_ready(),
                tls_routes.wait_until_ready(),
                node_addresses.wait_until_ready(),
                gateways.wait_until_ready()
            );
            health.ready.store(true, Ordering::Relaxed);
        }
    });

    // A deleted cluster's metrics go with it.
    let sweep = tokio::spawn({
        let ctx = ctx.clone();
        async move {
            let mut every = tokio::time::interval(METRICS_SWEEP);
            loop {
                every.tick().await;
                ctx.metrics.retain_clusters(|c| {
                    let key = ObjectRef::<ValkeyCluster>::new(&c.cluster).within(&c.namespace);
                    ctx.clusters.get(&key).is_some()
                });
            }
        }
    });

    info!(namespace = ns.unwrap_or("<all>"), "controller starting");
    // Re-reconcile everything on request and after every module swap or
    // rollback.
    let triggers = |rx: tokio::sync::broadcast::Receiver<()>| {
        futures::stream::unfold(rx, |mut rx| async move {
            loop {
                match rx.recv().await {
                    Ok(()) => return Some(((), rx)),
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => continue,
                    Err(tokio::sync::broadcast::error::RecvError::Closed) => return None,
                }
            }
        })
        .boxed()
    };
    let swaps = futures::stream::select(
        triggers(ctx.modules().subscribe()),
        triggers(node_news.subscribe()),
    );
    let controller = match &options.reconcile_all {
        Some(tx) => {
            controller.reconcile_all_on(futures::stream::select(triggers(tx.subscribe()), swaps))
        }
        None => controller.reconcile_all_on(swaps),
    };
    controller
        .watches_stream(service_stream, trigger)
        .watches_stream(config_map_stream, trigger)
        .watches_stream(stateful_set_stream, trigger)
        .watches_stream(pod_stream, trigger)
        .watches_stream(disruption_budget_stream, trigger)
        .watches_stream(tcp_route_stream, trigger)
        .watches_stream(tls_route_stream, trigger)
        .watches_stream(gateway_stream, trigger)
        .graceful_shutdown_on(stop)
        .run(reconcile::reconcile, reconcile::error_policy, ctx)
        .for_each(|result| async move {
            if let Err(e) = result {
                warn!(error = %e, "controller");
            }
        })
        .boxed()
        .await;
    sweep.abort();
    node_watch.abort();
    info!("controller stopped");
    Ok(())
}

/// Which Gateway API kinds the API server serves, asked until it answers
/// (nothing can be reconciled before it does).
async fn discover_gateway_api(client: &kube::Client) -> GatewayApi {
    let mut wait = std::time::Duration::from_millis(500);
    loop {
        match GatewayApi::discover(client).await {
            Ok(api) => return api,
            Err(e) => {
                warn!(error = %e, "Gateway API discovery failed; retrying");
                tokio::time::sleep(wait).await;
                wait = (wait * 2).min(std::time::Duration::from_secs(30));
            }
        }
    }
}

/// The watch of one Gateway API route kind the clusters own, into its
/// cache, if the kind is served; else an empty, ready cache and no events.
fn route_watch(
    client: &kube::Client,
    namespace: Option<&str>,
    config: &watcher::Config,
    resource: Option<&ApiResource>,
) -> (
    cache::Cache<cached::CachedRoute>,
    futures::stream::BoxStream<'static, Result<Trigger, watcher::Error>>,
) {
    let Some(resource) = resource else {
        return (cache::Cache::unserved(), futures::stream::empty().boxed());
    };
    let api: Api<Watched<DynamicObject>> = match namespace {
        Some(ns) => Api::namespaced_with(client.clone(), ns, resource),
        None => Api::all_with(client.clone(), resource),
    };
    let (store, stream) = cached_watch(api, config, true, cached::route);
    (store, stream.boxed())
}

/// The watch of the Gateways, if served, into `gateways`: each change to
/// what the guest reads of one triggers every cluster of its namespace
/// that names it.
fn gateway_stream(
    client: &kube::Client,
    namespace: Option<&str>,
    resource: Option<&ApiResource>,
    gateways: Gateways,
    clusters: reflector::Store<ValkeyCluster>,
) -> futures::stream::BoxStream<'static, Result<Trigger, watcher::Error>> {
    let Some(resource) = resource else {
        return futures::stream::empty().boxed();
    };
    let api: Api<DynamicObject> = match namespace {
        Some(ns) => Api::namespaced_with(client.clone(), ns, resource),
        None => Api::all_with(client.clone(), resource),
    };
    watcher(api, watcher::Config::default().any_semantic())
        .default_backoff()
        .map_ok(move |event| {
            let changed = gateways.apply(event);
            let state = clusters.state();
            let naming: Vec<Trigger> = changed
                .iter()
                .flat_map(|(ns, name)| naming_gateway(state.iter().map(|c| c.as_ref()), ns, name))
                .collect();
            futures::stream::iter(naming.into_iter().map(Ok))
        })
        .try_flatten()
        .filter_map(|r| absorbed(r, "Gateway"))
        .boxed()
}

/// The clusters of `namespace` whose spec names the Gateway `name`.
fn naming_gateway<'a>(
    clusters: impl Iterator<Item = &'a ValkeyCluster>,
    namespace: &str,
    name: &str,
) -> Vec<Trigger> {
    clusters
        .filter(|c| c.metadata.namespace.as_deref() == Some(namespace))
        .filter(|c| {
            c.spec
                .external_access
                .as_ref()
                .and_then(|ea| ea.gateway.as_ref())
                .is_some_and(|g| g.gateway_ref.name == name)
        })
        .filter_map(|c| Some(trigger_for(c.metadata.name.as_deref()?, namespace)))
        .collect()
}

/// How often the series of deleted clusters are removed from the metrics.
const METRICS_SWEEP: std::time::Duration = std::time::Duration::from_secs(60);

/// A cluster to reconcile, carried from a watch of owned objects to the
/// controller as that cluster's name and namespace.
type Trigger = PartialObjectMeta<ValkeyCluster>;

/// The cluster to reconcile when `o` changes: its controller, if that is a
/// ValkeyCluster, else the one its cluster label names (a Pod's controller
/// is its StatefulSet). The caches keep no owner references, so this stands
/// in for kube's owner triggers; a reconcile still checks ownership (label
/// AND controller UID) before it trusts an object.
fn cluster_to_reconcile(o: &impl Entry) -> Option<Trigger> {
    let cluster = o
        .controller_cluster()
        .or_else(|| o.label(labels::CLUSTER))?;
    Some(trigger_for(cluster, o.namespace()))
}

/// The trigger of cluster `name` in `namespace`.
fn trigger_for(name: &str, namespace: &str) -> Trigger {
    PartialObjectMeta {
        types: None,
        metadata: kube::api::ObjectMeta {
            name: Some(name.to_string()),
            namespace: Some(namespace.to_string()),
            ..Default::default()
        },
        _phantom: std::marker::PhantomData,
    }
}

/// The controller's reference to a [`Trigger`]'s cluster.
fn trigger(t: Trigger) -> Option<ObjectRef<ValkeyCluster>> {
    let meta = t.metadata;
    Some(ObjectRef::new(meta.name.as_deref()?).within(meta.namespace.as_deref()?))
}

/// Objects per page of a watch's initial list. A page is decoded whole,
/// before [`cached`] trims its objects, and the four owned kinds list at once:
/// kube's default of 500 held ~50 MiB of untrimmed objects at the peak of a
/// restart with 100 clusters (heaptrack). 100 costs 5x the list requests,
/// each a fifth of the size.
const LIST_PAGE_SIZE: u32 = 100;

/// A watch of one kind of managed object, kept in a [`cache::Cache`];
/// `cache` turns each object into what the cache keeps (dropping what the
/// operator never reads), given the entry it replaces (with `shortcuts`).
/// Returns the cache and the stream of clusters to reconcile: with
/// `shortcuts`, only for objects that changed what a reconcile reads.
fn cached_watch<K, C>(
    api: Api<K>,
    config: &watcher::Config,
    shortcuts: bool,
    cache: fn(K, Option<&C>) -> C,
) -> (
    cache::Cache<C>,
    impl futures::Stream<Item = Result<Trigger, watcher::Error>> + Send + 'static,
)
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
    C: Entry,
{
    let store = cache::Cache::default();
    let stream = watcher(api, config.clone())
        .default_backoff()
        .map_ok({
            let store = store.clone();
            move |event| {
                let prior = shortcuts.then_some(&store);
                let (touched, changed) = store.apply(cached_event(event, prior, cache))?;
                // An object that reads as it did wakes no reconcile.
                if shortcuts && !changed {
                    return None;
                }
                cluster_to_reconcile(touched.as_ref())
            }
        })
        .try_filter_map(|trigger| futures::future::ready(Ok(trigger)))
        .filter_map(|r| absorbed(r, "owned objects"));
    (store, stream)
}

/// What of a cluster, changed, wakes its reconcile: its identity (a
/// cluster deleted and created again under the same name starts at
/// generation 1 again), its spec (through its generation), its labels and
/// annotations, and its deletion. A status write alone (the operator's
/// own, three in a first start) does not: the reconcile that wrote it has
/// already seen everything else, and the store still has the new status for
/// the next one.
fn wants_a_look(vc: &ValkeyCluster) -> u64 {
    use std::hash::{BuildHasher, BuildHasherDefault, DefaultHasher};
    let meta = &vc.metadata;
    let seen = (
        &meta.uid,
        meta.generation,
        &meta.labels,
        &meta.annotations,
        meta.deletion_timestamp.as_ref().map(|t| t.0.as_second()),
        &meta.finalizers,
    );
    BuildHasherDefault::<DefaultHasher>::default().hash_one(seen)
}

/// A watch's item, with its error logged and dropped. Each watch retries
/// on its own, with its own backoff; an error passed on to the controller
/// would also back off the controller's intake of every trigger, all
/// watches together, with one backoff that grows with every error of any
/// of them (after an API server restart or a compaction, 410 Gone answers
/// to every watch paused reconciling for up to a minute).
fn absorbed<T>(
    item: Result<T, watcher::Error>,
    what: &'static str,
) -> std::future::Ready<Option<Result<T, watcher::Error>>> {
    std::future::ready(match item {
        Ok(t) => Some(Ok(t)),
        Err(e) => {
            warn!(error = %e, watch = what, "watch error; the watch retries");
            None
        }
    })
}

/// `event` with its objects as the cache keeps them, each given the entry
/// of that name in `store`, if any.
fn cached_event<K: kube::Resource, C: Entry>(
    event: watcher::Event<K>,
    store: Option<&cache::Cache<C>>,
    cache: fn(K, Option<&C>) -> C,
) -> watcher::Event<C> {
    use watcher::Event;
    let cache = |o: K| {
        let meta = o.meta();
        let (namespace, name) = (meta.namespace.as_deref(), meta.name.as_deref());
        let prior =
            store.and_then(|s| s.get(namespace.unwrap_or_default(), name.unwrap_or_default()));
        cache(o, prior.as_deref())
    };
    match event {
        Event::Apply(o) => Event::Apply(cache(o)),
        Event::Delete(o) => Event::Delete(cache(o)),
        Event::Init => Event::Init,
        Event::InitApply(o) => Event::InitApply(cache(o)),
        Event::InitDone => Event::InitDone,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    fn labelled_and_controlled(cluster_label: Option<&str>, controller: (&str, &str)) -> Value {
        serde_json::json!({
            "metadata": {"name": "o", "namespace": "ns",
                "labels": cluster_label.map(|c| serde_json::json!({"shardgate.io/cluster": c})),
                "ownerReferences": [{"apiVersion": "x", "kind": controller.0,
                    "name": controller.1, "uid": "u", "controller": true}]}
        })
    }
    #[test]
    fn a_cluster_s_status_alone_wakes_no_reconcile() {
        let vc = |uid: &str, generation: i64, label: &str, ready: i32| -> ValkeyCluster {
            serde_json::from_value(serde_json::json!({
                "apiVersion": "shardgate.io/v1alpha1", "kind": "ValkeyCluster",
                "metadata": {"name": "c", "namespace": "ns", "uid": uid,
                    "generation": generation, "labels": {"team": label},
                    "resourceVersion": ready.to_string()},
                "spec": {},
                "status": {"readyShards": ready},
            }))
            .unwrap()
        };
        let seen = wants_a_look(&vc("u1", 1, "a", 0));
        // (uid, generation, label, ready shards) => looked at again
        for (uid, generation, label, ready, look) in [
            ("u1", 1, "a", 3, false),
            ("u1", 2, "a", 0, true),
            ("u1", 1, "b", 0, true),
            // Deleted and created again under the same name.
            ("u2", 1, "a", 0, true),
        ] {
            let other = wants_a_look(&vc(uid, generation, label, ready));
            assert_eq!(other != seen, look, "{uid} {generation} {label} {ready}");
        }
    }

    #[test]
    fn a_change_triggers_the_controlling_cluster_else_the_labelled_one() {
        let svc = |label, controller| {
            cached::service(
                serde_json::from_value(labelled_and_controlled(label, controller)).unwrap(),
                None,
            )
        };
        let target = |o: &dyn Fn() -> Option<Trigger>| {
            let r = trigger(o()?)?;
            Some((r.name, r.namespace.unwrap_or_default()))
        };
        let ns = |name: &str| Some((name.to_string(), "ns".to_string()));
        assert_eq!(
            target(&|| cluster_to_reconcile(&svc(Some("b"), ("ValkeyCluster", "a")))),
            ns("a"),
            "relabelled: still its controller"
        );
        assert_eq!(
            target(&|| cluster_to_reconcile(&svc(None, ("ValkeyCluster", "a")))),
            ns("a"),
            "label removed: still its controller"
        );
        let pod: WatchedPod =
            serde_json::from_value(labelled_and_controlled(Some("c"), ("StatefulSet", "s")))
                .unwrap();
        assert_eq!(
            target(&|| cluster_to_reconcile(&cached::pod(pod.clone()))),
            ns("c")
        );
        assert_eq!(
            target(&|| cluster_to_reconcile(&svc(None, ("Deployment", "d")))),
            None
        );
    }
}
