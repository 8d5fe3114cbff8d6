//! The real operator against the in-repo API emulator: start both, create
//! and patch clusters, act as the kubelet, and read back what the operator
//! wrote. Every operator test and bench uses this one harness.

use std::sync::{Arc, LazyLock};
use std::time::Duration;

use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube_emulator::{CustomResource, Emulator};
use serde_json::{Value, json};
use shardgate_k8s::crd::ValkeyCluster;
use shardgate_operator::{LeaseOptions, Metrics, ModuleReporter, Options};
use shardgate_wasm::swap::ModuleManager;
use shardgate_wasm::{Engine, Limits, Module, Reconciler};
use tokio::sync::{broadcast, oneshot};

use crate::wait;

/// The namespace every harness cluster lives in.
pub const NS: &str = "default";
/// How long the harness waits for the operator to get somewhere.
pub const WAIT: Duration = Duration::from_secs(30);

/// The committed CRD, as the emulator serves it.
pub const CRD: &str = include_str!("../../deploy/crds/valkeyclusters.shardgate.io.yaml");

static ENGINE: LazyLock<Engine> = LazyLock::new(|| Engine::new(Limits::default()).unwrap());
static EMBEDDED: LazyLock<Module> = LazyLock::new(|| ENGINE.load_embedded().unwrap());

/// The shared engine, alive for the whole test binary.
pub fn engine() -> &'static Engine {
    &ENGINE
}

/// The embedded reconcile module, compiled once per test binary.
pub fn embedded() -> Module {
    EMBEDDED.clone()
}

/// The emulator with the ValkeyCluster CRD and its StatefulSet controller.
pub async fn emulator() -> Emulator {
    Emulator::builder()
        .custom_resource(CustomResource::from_crd_yaml(CRD).unwrap())
        .statefulset_controller(true)
        .bookmark_interval(Duration::from_millis(500))
        .start()
        .await
        .unwrap()
}

/// The emulator of [`emulator`], also serving the Gateway API kinds the
/// operator uses, as the sandbox does.
pub async fn emulator_with_gateway_api() -> Emulator {
    let builder = Emulator::builder()
        .custom_resource(CustomResource::from_crd_yaml(CRD).unwrap())
        .statefulset_controller(true)
        .bookmark_interval(Duration::from_millis(500));
    shardgate_sandbox::gateway_api::register(builder)
        .start()
        .await
        .unwrap()
}

/// A Gateway `name` with a TCP listener `valkey-<port>` on each of `ports`,
/// as its owner writes it.
pub fn gateway_object(name: &str, ports: impl IntoIterator<Item = u32>) -> Value {
    let listeners: Vec<Value> = ports
        .into_iter()
        .map(|p| json!({"name": format!("valkey-{p}"), "port": p, "protocol": "TCP"}))
        .collect();
    json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"gatewayClassName": "example", "listeners": listeners}})
}

/// Applies `gateway` (a [`gateway_object`]) as its owner, manager
/// `gateway-owner`: created, or its listeners replaced.
pub async fn apply_gateway(emu: &Emulator, gateway: &Value) {
    let resource = kube::api::ApiResource {
        group: "gateway.networking.k8s.io".into(),
        version: "v1".into(),
        api_version: "gateway.networking.k8s.io/v1".into(),
        kind: "Gateway".into(),
        plural: "gateways".into(),
    };
    let namespace = gateway["metadata"]["namespace"].as_str().unwrap_or(NS);
    let api: Api<DynamicObject> =
        Api::namespaced_with(emu.client().await.unwrap(), namespace, &resource);
    let name = gateway["metadata"]["name"].as_str().unwrap();
    api.patch(
        name,
        &PatchParams::apply("gateway-owner").force(),
        &Patch::Apply(gateway),
    )
    .await
    .unwrap();
}

/// How a harness operator is set up.
pub struct Setup {
    pub identity: String,
    pub lease: Option<LeaseOptions>,
    /// Talk to the Valkey nodes: only where the pods are real processes.
    pub manage_valkey: bool,
    /// The module manager and its reporter; `None` serves the embedded
    /// module with a reporter of its own.
    pub modules: Option<(Arc<ModuleManager>, Arc<ModuleReporter>)>,
    /// The bearer token the operator's client sends, telling its requests
    /// apart in the emulator's logs; `None`: anonymous.
    pub token: Option<String>,
    /// Serve `/metrics`, `/healthz` and `/readyz` here, as `--listen`.
    pub listen: Option<std::net::SocketAddr>,
}

impl Setup {
    /// The embedded module, no lease, no Valkey.
    pub fn new(identity: &str) -> Self {
        Setup {
            identity: identity.into(),
            lease: None,
            manage_valkey: false,
            modules: None,
            token: None,
            listen: None,
        }
    }

    /// Sends `token` with every request (see [`Setup::token`]).
    pub fn token(mut self, token: &str) -> Self {
        self.token = Some(token.into());
        self
    }

    /// Serves the operator's HTTP endpoints on `addr`.
    pub fn listen(mut self, addr: std::net::SocketAddr) -> Self {
        self.listen = Some(addr);
        self
    }

    /// Elects a leader with `lease` before running the controller.
    pub fn lease(mut self, lease: LeaseOptions) -> Self {
        self.lease = Some(lease);
        self
    }

    /// Serves the module `modules` serves, reporting to `reporter`.
    pub fn modules(mut self, modules: Arc<ModuleManager>, reporter: Arc<ModuleReporter>) -> Self {
        self.modules = Some((modules, reporter));
        self
    }
}

/// The real operator loop on a task, stopped by [`Operator::stop`].
pub struct Operator {
    stop: Option<oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<anyhow::Result<()>>,
    pub metrics: Arc<Metrics>,
    resync: broadcast::Sender<()>,
}

impl Operator {
    /// Starts an operator with the embedded module against `emu`.
    pub async fn start(emu: &Emulator, identity: &str) -> Operator {
        Self::with(emu, Setup::new(identity)).await
    }

    /// Starts an operator set up as `setup` says.
    pub async fn with(emu: &Emulator, setup: Setup) -> Operator {
        let client = match &setup.token {
            Some(token) => emu.client_for(token).await.unwrap(),
            None => emu.client().await.unwrap(),
        };
        let (stop, stopped) = oneshot::channel::<()>();
        let (resync, _) = broadcast::channel(16);
        let options = Options {
            kubeconfig: None,
            context: None,
            namespace: None,
            listen: setup.listen,
            lease: setup.lease,
            identity: setup.identity,
            reconcile_all: Some(resync.clone()),
            manage_valkey: setup.manage_valkey,
            // Every trigger reconciles: the tests count reconciles.
            debounce: Duration::ZERO,
            recheck: Default::default(),
            apply_shortcuts: true,
        };
        let shutdown = async {
            let _ = stopped.await;
        };
        let (metrics, task) = match setup.modules {
            Some((modules, reporter)) => {
                let metrics = reporter.metrics().clone();
                let run = shardgate_operator::run_with_modules(
                    options, client, modules, reporter, shutdown,
                );
                (metrics, tokio::spawn(run))
            }
            None => {
                let metrics = Arc::new(Metrics::default());
                let module: Arc<dyn Reconciler> = Arc::new(embedded());
                let run =
                    shardgate_operator::run(options, client, module, metrics.clone(), shutdown);
                (metrics, tokio::spawn(run))
            }
        };
        Operator {
            stop: Some(stop),
            task,
            metrics,
            resync,
        }
    }

    /// Re-reconciles every cluster `n` times: each round starts once the
    /// previous one has started a reconcile.
    pub async fn resync(&self, n: usize) {
        for _ in 0..n {
            let before = self.reconciles();
            self.resync.send(()).ok();
            wait::until(
                "a resync to start a reconcile",
                Duration::from_secs(10),
                || self.reconciles() > before,
            )
            .await;
        }
    }

    /// At rest: a reconcile of every cluster started after this call and
    /// every reconcile started so far has finished. What a test reads after
    /// this includes everything those reconciles wrote; no sleep needed.
    pub async fn settle(&self) {
        self.resync(1).await;
        wait::until(
            "every started reconcile to finish",
            Duration::from_secs(30),
            || self.finished() >= self.reconciles(),
        )
        .await;
    }

    /// Reconciles that have finished, with or without an error.
    pub fn finished(&self) -> u64 {
        metric_sum(&self.metrics, "shardgate_reconcile_duration_seconds_count")
    }

    /// Asks for every cluster to be reconciled, without waiting: a clone of
    /// the sender, for a task that asks again and again.
    pub fn resync_sender(&self) -> broadcast::Sender<()> {
        self.resync.clone()
    }

    /// API writes the operator counted, every verb and resource.
    pub fn writes(&self) -> u64 {
        metric_sum(&self.metrics, "shardgate_api_writes_total{")
    }

    /// Reconciles the operator has run so far.
    pub fn reconciles(&self) -> u64 {
        self.metrics.reconciles.get()
    }

    /// Failed reconciles, every reason.
    pub fn errors(&self) -> u64 {
        metric_sum(&self.metrics, "shardgate_reconcile_errors_total{")
    }

    /// Shuts the operator down and waits for it to stop cleanly.
    pub async fn stop(mut self) {
        self.stop.take().unwrap().send(()).ok();
        tokio::time::timeout(Duration::from_secs(20), self.task)
            .await
            .expect("operator stops on shutdown")
            .unwrap()
            .unwrap();
    }
}

/// The sum of every sample whose line starts with `prefix`.
pub fn metric_sum(metrics: &Metrics, prefix: &str) -> u64 {
    metrics
        .encode()
        .lines()
        .filter(|l| l.starts_with(prefix))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum()
}

/// How many module swaps ended with `result` (`accepted`, `rejected`).
pub fn module_swaps(metrics: &Metrics, result: &str) -> u64 {
    metric_sum(
        metrics,
        &format!("shardgate_module_swaps_total{{result=\"{result}\"}}"),
    )
}

/// Whether `conditions` (an object's `status.conditions`) holds a condition
/// of `type_` with status `True`.
pub fn condition_true(conditions: &Value, type_: &str) -> bool {
    conditions.as_array().is_some_and(|cs| {
        cs.iter()
            .any(|c| c["type"] == type_ && c["status"] == "True")
    })
}

/// A ValkeyCluster in [`NS`].
pub fn cluster(name: &str, shards: i32, replicas: i32, external: Value) -> Value {
    json!({
        "apiVersion": "shardgate.io/v1alpha1",
        "kind": "ValkeyCluster",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"shards": shards, "replicas": replicas, "externalAccess": external},
    })
}

/// External access through NodePorts, announced by IP.
pub fn nodeport() -> Value {
    json!({"enabled": true, "serviceType": "NodePort", "preferredEndpointType": "ip",
           "externalTrafficPolicy": "Cluster", "hostnamePrefix": "shard"})
}

/// Creates `obj` (a ValkeyCluster) as a user would, without client-side
/// validation.
pub async fn create(emu: &Emulator, obj: Value) {
    let api: Api<DynamicObject> = Api::namespaced_with(
        emu.client().await.unwrap(),
        NS,
        &kube::api::ApiResource::erase::<ValkeyCluster>(&()),
    );
    api.create(
        &PostParams::default(),
        &serde_json::from_value(obj).unwrap(),
    )
    .await
    .unwrap();
}

/// Merges `spec` into cluster `name`'s spec.
pub async fn patch_spec(emu: &Emulator, name: &str, spec: Value) {
    let api: Api<ValkeyCluster> = Api::namespaced(emu.client().await.unwrap(), NS);
    api.patch(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": spec})),
    )
    .await
    .unwrap();
}

/// Cluster `name`'s status (`Null` when it has none).
pub fn status(emu: &Emulator, name: &str) -> Value {
    emu.get("valkeyclusters", NS, name)
        .map(|c| c["status"].clone())
        .unwrap_or(Value::Null)
}

/// The status and reason of cluster `name`'s condition `type_`.
pub fn condition(emu: &Emulator, name: &str, type_: &str) -> Option<(String, String)> {
    status(emu, name)["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)
        .map(|c| {
            (
                c["status"].as_str().unwrap().into(),
                c["reason"].as_str().unwrap().into(),
            )
        })
}

/// Ready, not progressing, and the status speaks of the current spec.
pub fn converged(emu: &Emulator, name: &str) -> bool {
    let Some(obj) = emu.get("valkeyclusters", NS, name) else {
        return false;
    };
    if obj["status"]["observedGeneration"] != obj["metadata"]["generation"] {
        return false;
    }
    condition(emu, name, "Ready").is_some_and(|(s, _)| s == "True")
        && condition(emu, name, "Progressing").is_some_and(|(s, _)| s == "False")
}

/// Does what a kubelet would for every Pod without an IP: gives it one, the
/// host IP 127.0.0.1 and Ready.
pub fn act_as_kubelet(emu: &Emulator) {
    let pods = emu.list("pods", Some(NS));
    let n = pods.len();
    for pod in pods {
        if pod["status"]["podIP"].is_null() {
            let name = pod["metadata"]["name"].as_str().unwrap().to_string();
            let _ = emu.set_pod_status(
                NS,
                &name,
                &format!("10.1.0.{}", n % 250 + 1),
                "127.0.0.1",
                true,
            );
        }
    }
}

/// Waits (up to [`WAIT`]) for `check` to hold, acting as the kubelet
/// meanwhile. On timeout the clusters' statuses and the writes are shown.
pub async fn eventually(emu: &Emulator, what: &str, check: impl Fn(&Emulator) -> bool) {
    let check = || {
        act_as_kubelet(emu);
        check(emu)
    };
    let context = || {
        let clusters = emu.list("valkeyclusters", Some(NS));
        let statuses: Vec<_> = clusters.iter().map(|c| &c["status"]).collect();
        format!(
            "status: {statuses:#?}
writes: {:?}",
            emu.write_counts()
        )
    };
    wait::until_or(what, WAIT, check, context).await;
}

/// The shard Services, by name.
pub fn shard_services(emu: &Emulator) -> Vec<Value> {
    let mut v: Vec<_> = emu
        .list("services", Some(NS))
        .into_iter()
        .filter(|s| s["metadata"]["name"].as_str().unwrap().contains("-shard-"))
        .collect();
    v.sort_by_key(|s| s["metadata"]["name"].as_str().unwrap().to_string());
    v
}

/// Each port's NodePort (0 when none is allocated).
pub fn node_ports(svc: &Value) -> Vec<i64> {
    svc["spec"]["ports"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["nodePort"].as_i64().unwrap_or(0))
        .collect()
}

/// The Events with `reason`.
/// How many times Events of `reason` whose note contains `text` were said:
/// an exact repeat is one Event whose series counts it.
pub fn times_said(emu: &Emulator, reason: &str, text: &str) -> u64 {
    events(emu, reason)
        .iter()
        .filter(|e| e["note"].as_str().unwrap_or_default().contains(text))
        .map(|e| e["series"]["count"].as_u64().unwrap_or(1))
        .sum()
}

pub fn events(emu: &Emulator, reason: &str) -> Vec<Value> {
    emu.list("events.k8s.io/v1/Event", None)
        .into_iter()
        .filter(|e| e["reason"] == reason)
        .collect()
}
