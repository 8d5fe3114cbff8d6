//! `kube-emulator`: an in-process emulator of the parts of the Kubernetes API
//! server that shardgate's operator can observe, so the real operator code
//! (kube-rs `Controller`, server-side apply, reflectors, events, leases) runs
//! against it through an ordinary kubeconfig.
//!
//! ```no_run
//! # async fn demo() -> anyhow::Result<()> {
//! use kube_emulator::{CustomResource, Emulator};
//! let emu = Emulator::builder()
//!     .custom_resource(CustomResource::namespaced("shardgate.io", "v1alpha1", "ValkeyCluster", "valkeyclusters"))
//!     .statefulset_controller(true)
//!     .start()
//!     .await?;
//! let client = emu.client().await?;
//! // ... run the operator with `client`, then inspect:
//! println!("{} writes", emu.total_writes());
//! emu.shutdown().await;
//! # Ok(()) }
//! ```
//!
//! See the crate README for exactly what is and is not modelled.

mod age;
mod binding;
mod chaos;
mod cluster_ips;
mod counts;
mod defaulting;
mod discovery;
mod disruption;
mod errors;
mod eviction;
mod faults;
mod fieldset;
mod gc;
mod holdings;
mod jsonpath;
mod managed_fields;
mod nodeports;
mod ops;
mod printers;
mod resources;
mod schema;
mod selectors;
mod server;
mod ssa;
mod statefulset;
mod store;
mod table;
mod util;
mod verb;
mod volume_claims;
mod watch;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

pub use chaos::{ANONYMOUS, RequestRecord, WriteRecord};
pub use counts::WriteCounts;
pub use faults::{Fault, FaultAction};
pub use resources::{CustomResource, PrinterColumn};
pub use verb::Verb;

use ops::{Opts, PatchType, State, Target};
use server::Shared;
use store::Notice;

/// One `status.loadBalancer.ingress` entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Ingress {
    Ip(String),
    Hostname(String),
}

/// Configures and starts an [`Emulator`].
#[derive(Clone, Debug)]
pub struct EmulatorBuilder {
    custom_resources: Vec<CustomResource>,
    statefulset_controller: bool,
    instant_pods: bool,
    node_port_range: std::ops::RangeInclusive<i64>,
    namespaces: Vec<String>,
    auto_create_namespaces: bool,
    bookmark_interval: Duration,
    history_limit: usize,
    port: u16,
}

impl Default for EmulatorBuilder {
    fn default() -> Self {
        Self {
            custom_resources: Vec::new(),
            statefulset_controller: false,
            instant_pods: false,
            node_port_range: nodeports::NODE_PORT_RANGE,
            namespaces: vec!["default".into(), "kube-system".into()],
            auto_create_namespaces: false,
            bookmark_interval: Duration::from_secs(5),
            history_limit: 10_000,
            port: 0,
        }
    }
}

impl EmulatorBuilder {
    /// Serves a custom resource type (as if its CRD were installed).
    pub fn custom_resource(mut self, cr: CustomResource) -> Self {
        self.custom_resources.push(cr);
        self
    }

    /// Runs the built-in StatefulSet controller (creates/deletes Pods).
    pub fn statefulset_controller(mut self, on: bool) -> Self {
        self.statefulset_controller = on;
        self
    }

    /// Pods the StatefulSet controller creates start `Running` and `Ready`
    /// with a pod IP from 10.244.0.0/16 on, as if a kubelet had started them
    /// at once (for scale tests with no kubelet). Off by default: pod status
    /// is then left to the caller ([`Emulator::set_pod_status`]).
    pub fn instant_pods(mut self, on: bool) -> Self {
        self.instant_pods = on;
        self
    }

    /// The NodePort range, as the API server's `--service-node-port-range`
    /// (default 30000-32767). Out-of-range requests are refused with the
    /// server's message; allocation picks from this range.
    pub fn node_port_range(mut self, range: std::ops::RangeInclusive<u16>) -> Self {
        self.node_port_range = i64::from(*range.start())..=i64::from(*range.end());
        self
    }

    /// Creates a namespace at start (`default` and `kube-system` always exist).
    pub fn namespace(mut self, ns: &str) -> Self {
        self.namespaces.push(ns.to_string());
        self
    }

    /// Creates missing namespaces on first write into them instead of
    /// answering 404 like the real server (off by default).
    pub fn auto_create_namespaces(mut self, on: bool) -> Self {
        self.auto_create_namespaces = on;
        self
    }

    /// How often watches with `allowWatchBookmarks=true` get a BOOKMARK
    /// (default 5 s).
    pub fn bookmark_interval(mut self, d: Duration) -> Self {
        self.bookmark_interval = d;
        self
    }

    /// How many change events are kept for watch resumption (default 10 000);
    /// older resourceVersions get 410 Gone.
    pub fn history_limit(mut self, n: usize) -> Self {
        self.history_limit = n;
        self
    }

    /// Listens on this port of 127.0.0.1 (default: a random free port).
    pub fn port(mut self, port: u16) -> Self {
        self.port = port;
        self
    }

    /// Binds 127.0.0.1 and starts serving on the current tokio runtime.
    pub async fn start(self) -> anyhow::Result<Emulator> {
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", self.port)).await?;
        let addr = listener.local_addr()?;
        let mut registry = resources::Registry::with_builtins();
        for cr in &self.custom_resources {
            registry.add_custom(cr);
        }
        let mut state = State {
            registry,
            store: store::Store::new(self.history_limit),
            node_ports: nodeports::NodePorts::new(self.node_port_range.clone()),
            cluster_ips: Default::default(),
            counts: Default::default(),
            faults: Default::default(),
            statefulset_controller: self.statefulset_controller,
            instant_pods: self.instant_pods,
            pod_ips: 0,
            auto_create_namespaces: self.auto_create_namespaces,
            in_controller: false,
            in_disruption: false,
        };
        for ns in &self.namespaces {
            state.ensure_namespace(ns);
        }
        let shared = Arc::new(Shared {
            state: Mutex::new(state),
            bookmark_interval: self.bookmark_interval,
            server_address: addr.to_string(),
            chaos: Arc::default(),
        });
        let (stop_tx, stop_rx) = oneshot::channel::<()>();
        let app = server::router(shared.clone());
        let task = tokio::spawn(chaos::serve(listener, app, shared.chaos.clone(), stop_rx));
        Ok(Emulator {
            shared,
            addr,
            stop: Some(stop_tx),
            task: Some(task),
        })
    }
}

/// A running emulated API server on `127.0.0.1`.
pub struct Emulator {
    shared: Arc<Shared>,
    addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<()>>,
}

impl Emulator {
    /// A builder with the defaults, to configure and start an emulator.
    pub fn builder() -> EmulatorBuilder {
        EmulatorBuilder::default()
    }

    /// The listening address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// A kubeconfig (no TLS, no credentials) pointing at the emulator, with
    /// namespace `default`.
    pub fn kubeconfig_yaml(&self) -> String {
        self.kubeconfig_yaml_with(None)
    }

    /// [`Self::kubeconfig_yaml`] for a client told apart by its bearer
    /// `token` in the write log ([`Self::write_log`]) and by faults
    /// ([`Fault::client`]).
    pub fn kubeconfig_yaml_for(&self, token: &str) -> String {
        self.kubeconfig_yaml_with(Some(token))
    }

    fn kubeconfig_yaml_with(&self, token: Option<&str>) -> String {
        let user = match token {
            Some(t) => format!("{{token: {t}}}"),
            None => "{}".to_string(),
        };
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: kube-emulator\n  cluster:\n    server: {}\ncontexts:\n- name: kube-emulator\n  context:\n    cluster: kube-emulator\n    user: kube-emulator\n    namespace: default\ncurrent-context: kube-emulator\nusers:\n- name: kube-emulator\n  user: {user}\n",
            self.url()
        )
    }

    /// Writes [`Self::kubeconfig_yaml`] to `path`.
    pub fn write_kubeconfig(&self, path: impl AsRef<Path>) -> anyhow::Result<()> {
        std::fs::write(path, self.kubeconfig_yaml())?;
        Ok(())
    }

    /// A `kube::Client` built from the kubeconfig, as an operator would.
    pub async fn client(&self) -> anyhow::Result<kube::Client> {
        self.client_from(&self.kubeconfig_yaml()).await
    }

    /// A `kube::Client` of the client `token` ([`Self::kubeconfig_yaml_for`]).
    pub async fn client_for(&self, token: &str) -> anyhow::Result<kube::Client> {
        self.client_from(&self.kubeconfig_yaml_for(token)).await
    }

    async fn client_from(&self, kubeconfig: &str) -> anyhow::Result<kube::Client> {
        let kc = kube::config::Kubeconfig::from_yaml(kubeconfig)?;
        let config =
            kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
                .await?;
        Ok(kube::Client::try_from(config)?)
    }

    /// API writes that changed something, by `(verb, resource)`; resource is
    /// the plural, `plural/status` for the status subresource. Writes by the
    /// emulator itself (controllers, GC, the setters below) are not counted.
    pub fn write_counts(&self) -> WriteCounts {
        self.shared.lock().counts.writes.clone()
    }

    /// API writes that changed nothing (no resourceVersion bump), same keys.
    pub fn noop_counts(&self) -> WriteCounts {
        self.shared.lock().counts.noops.clone()
    }

    /// Sum of [`Self::write_counts`].
    pub fn total_writes(&self) -> u64 {
        self.shared.lock().counts.total()
    }

    /// Count of changing writes for one `(verb, resource)`.
    pub fn writes(&self, verb: Verb, resource: &str) -> u64 {
        self.write_counts()
            .get(&(verb.as_str().to_string(), resource.to_string()))
            .copied()
            .unwrap_or(0)
    }

    /// Zeroes write and no-op counters.
    pub fn reset_counts(&self) {
        let mut st = self.shared.lock();
        st.counts = Default::default();
        st.store.emitted.clear();
    }

    /// Change events emitted per resource since the last
    /// [`reset_counts`](Self::reset_counts), by resource (`pods`,
    /// `statefulsets.apps`, `valkeyclusters.shardgate.io`): API writes and the
    /// emulated controllers' writes alike, each one event that every watch
    /// of the resource is offered.
    pub fn emitted_events(&self) -> BTreeMap<String, u64> {
        self.shared.lock().store.emitted.clone()
    }

    /// Adds a fault rule.
    pub fn inject(&self, fault: Fault) {
        self.shared.lock().faults.add(fault);
    }

    /// Removes every fault rule.
    pub fn clear_faults(&self) {
        self.shared.lock().faults.clear();
    }

    /// Closes every open watch connection abruptly (mid-stream, no clean end
    /// of the chunked body), so clients must re-watch.
    pub fn drop_watches(&self) {
        let st = self.shared.lock();
        let _ = st.store.tx.send(Notice::DropAll);
    }

    /// Sends a BOOKMARK now on every watch that allows bookmarks.
    pub fn send_bookmarks(&self) {
        let st = self.shared.lock();
        let _ = st.store.tx.send(Notice::Bookmark(st.store.rv()));
    }

    /// Forgets the change history (like an etcd compaction): watches from
    /// any older resourceVersion get a 410 Gone ERROR event.
    pub fn compact(&self) {
        self.shared.lock().store.compact();
    }

    /// The current global resourceVersion.
    pub fn resource_version(&self) -> u64 {
        self.shared.lock().store.rv()
    }

    fn resolve(&self, st: &State, type_name: &str) -> anyhow::Result<resources::Res> {
        st.registry
            .lookup(type_name)
            .ok_or_else(|| anyhow::anyhow!("unknown resource type {type_name:?}"))
    }

    /// Whether the objects of a type live in namespaces, or `None` if the
    /// emulator does not serve the type (`type_name` as for [`get`](Self::get)):
    /// to check what a client is about to create.
    pub fn namespaced(&self, type_name: &str) -> Option<bool> {
        let st = self.shared.lock();
        self.resolve(&st, type_name).ok().map(|res| res.namespaced)
    }

    /// One object; `type_name` is `apiVersion/Kind` (`apps/v1/StatefulSet`),
    /// a Kind (`Service`) or a plural (`services`, `events.events.k8s.io`).
    /// `ns` is ignored for cluster-scoped types.
    pub fn get(&self, type_name: &str, ns: &str, name: &str) -> Option<Value> {
        let st = self.shared.lock();
        let res = self.resolve(&st, type_name).ok()?;
        let ns = if res.namespaced { ns } else { "" };
        st.store
            .get(&(res.key(), ns.to_string(), name.to_string()))
            .map(|o| Value::clone(o))
    }

    /// All objects of a type, optionally in one namespace.
    pub fn list(&self, type_name: &str, ns: Option<&str>) -> Vec<Value> {
        let st = self.shared.lock();
        let Ok(res) = self.resolve(&st, type_name) else {
            return Vec::new();
        };
        st.store.list(&res.key(), ns).into_iter().cloned().collect()
    }

    /// [`list`](Self::list) without copying: the stored objects themselves,
    /// shared. For polling many large objects without holding the lock for
    /// copies.
    pub fn list_shared(&self, type_name: &str, ns: Option<&str>) -> Vec<Arc<Value>> {
        let st = self.shared.lock();
        let Ok(res) = self.resolve(&st, type_name) else {
            return Vec::new();
        };
        st.store.list_shared(&res.key(), ns)
    }

    /// Creates an object directly (not counted as an API write). The type
    /// comes from the object's `apiVersion` and `kind`.
    pub fn create(&self, obj: Value) -> anyhow::Result<Value> {
        let mut st = self.shared.lock();
        let av = obj["apiVersion"].as_str().unwrap_or_default();
        let kind = obj["kind"].as_str().unwrap_or_default();
        let res = self.resolve(&st, &format!("{av}/{kind}"))?;
        let ns = if res.namespaced {
            obj["metadata"]["namespace"]
                .as_str()
                .unwrap_or("default")
                .to_string()
        } else {
            String::new()
        };
        st.create(&res, &ns, obj, &Opts::internal("kube-emulator"))
            .map(Arc::unwrap_or_clone)
            .map_err(errors::ApiError::into_anyhow)
    }

    fn status_patch(
        &self,
        type_name: &str,
        ns: &str,
        name: &str,
        manager: &str,
        patch: Value,
    ) -> anyhow::Result<Value> {
        let mut st = self.shared.lock();
        let res = self.resolve(&st, type_name)?;
        let t = Target {
            res,
            ns: ns.to_string(),
            name: name.to_string(),
            status: true,
        };
        st.patch(
            &t,
            PatchType::Merge,
            patch.to_string().as_bytes(),
            &Opts::internal(manager),
        )
        .map(Arc::unwrap_or_clone)
        .map_err(errors::ApiError::into_anyhow)
    }

    /// JSON-merge-patches an object's `/status` subresource as `manager`
    /// (not counted as an API write), e.g. a Node's addresses and
    /// conditions as its kubelet reports them. `ns` is ignored for
    /// cluster-scoped types.
    pub fn patch_status(
        &self,
        type_name: &str,
        ns: &str,
        name: &str,
        manager: &str,
        patch: Value,
    ) -> anyhow::Result<Value> {
        let namespaced = {
            let st = self.shared.lock();
            self.resolve(&st, type_name)?.namespaced
        };
        let ns = if namespaced { ns } else { "" };
        self.status_patch(type_name, ns, name, manager, patch)
    }

    /// Sets a Service's `status.loadBalancer.ingress`, as a cloud load
    /// balancer controller would (a real status change: new resourceVersion,
    /// MODIFIED event).
    pub fn set_load_balancer_ingress(
        &self,
        ns: &str,
        name: &str,
        ingress: Vec<Ingress>,
    ) -> anyhow::Result<Value> {
        let entries: Vec<Value> = ingress
            .into_iter()
            .map(|i| match i {
                Ingress::Ip(ip) => json!({"ip": ip, "ipMode": "VIP"}),
                Ingress::Hostname(h) => json!({"hostname": h}),
            })
            .collect();
        self.status_patch(
            "services",
            ns,
            name,
            "service-controller",
            json!({"status": {"loadBalancer": {"ingress": entries}}}),
        )
    }

    /// Sets a Pod's IPs and readiness as the kubelet would: `phase: Running`,
    /// `podIP(s)`, `hostIP(s)` and `Ready`/`ContainersReady` conditions.
    pub fn set_pod_status(
        &self,
        ns: &str,
        name: &str,
        pod_ip: &str,
        host_ip: &str,
        ready: bool,
    ) -> anyhow::Result<Value> {
        let now = util::now();
        let flag = if ready { "True" } else { "False" };
        let cond = |t: &str| json!({"type": t, "status": flag, "lastProbeTime": null, "lastTransitionTime": now});
        // One running container status per container of the spec, so that
        // READY reads `1/1` in `kubectl get pods`.
        let containers: Vec<Value> = self
            .get("pods", ns, name)
            .and_then(|p| p["spec"]["containers"].as_array().cloned())
            .unwrap_or_default()
            .iter()
            .map(|c| {
                json!({
                    "name": c["name"], "image": c["image"], "imageID": "",
                    "ready": ready, "started": true, "restartCount": 0,
                    "state": {"running": {"startedAt": now}},
                })
            })
            .collect();
        self.status_patch(
            "pods",
            ns,
            name,
            "kubelet",
            json!({"status": {
                "phase": "Running",
                "podIP": pod_ip,
                "podIPs": [{"ip": pod_ip}],
                "hostIP": host_ip,
                "hostIPs": [{"ip": host_ip}],
                "conditions": [
                    {"type": "PodScheduled", "status": "True", "lastProbeTime": null, "lastTransitionTime": now},
                    cond("Initialized"),
                    cond("ContainersReady"),
                    cond("Ready"),
                ],
                "containerStatuses": containers,
            }}),
        )
    }

    /// Binds a Pod to a Node as the `pods/binding` subresource does (not
    /// counted as an API write): sets `spec.nodeName` and the
    /// `PodScheduled: True` condition. A Pod already bound, or being
    /// deleted, is a 409 error; the Node is not checked (as the API server).
    pub fn bind_pod(&self, ns: &str, name: &str, node: &str) -> anyhow::Result<Value> {
        let mut st = self.shared.lock();
        let res = self.resolve(&st, "pods")?;
        let t = Target {
            res,
            ns: ns.to_string(),
            name: name.to_string(),
            status: false,
        };
        let body = json!({
            "apiVersion": "v1", "kind": "Binding",
            "metadata": {"name": name, "namespace": ns},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        });
        binding::bind(
            &mut st,
            &t,
            body.to_string().as_bytes(),
            &Opts::internal("kube-scheduler"),
        )
        .map_err(errors::ApiError::into_anyhow)?;
        st.get_obj(&t)
            .map(Arc::unwrap_or_clone)
            .map_err(errors::ApiError::into_anyhow)
    }

    /// Sets one Pod status condition (replacing the condition of the same
    /// `type`, keeping the others), as the scheduler does for
    /// `PodScheduled: False`. A real change only: an identical condition is
    /// a no-op.
    pub fn set_pod_condition(
        &self,
        ns: &str,
        name: &str,
        manager: &str,
        condition: Value,
    ) -> anyhow::Result<Value> {
        let pod = self
            .get("pods", ns, name)
            .ok_or_else(|| anyhow::anyhow!("404 NotFound: pods \"{name}\" not found"))?;
        let mut conditions: Vec<Value> = pod["status"]["conditions"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        match conditions
            .iter_mut()
            .find(|c| c["type"] == condition["type"])
        {
            Some(c) => *c = condition,
            None => conditions.push(condition),
        }
        self.status_patch(
            "pods",
            ns,
            name,
            manager,
            json!({"status": {"conditions": conditions}}),
        )
    }

    /// Starts (or stops) recording every write the API server accepts, by
    /// client ([`Self::write_log`]). Off by default: a long run would hold
    /// every write.
    pub fn record_writes(&self, on: bool) {
        self.shared.chaos.record_writes(on);
    }

    /// Every write accepted since [`Self::record_writes`], in order: who,
    /// what and when. Writes by the emulator itself are not in it.
    pub fn write_log(&self) -> Vec<WriteRecord> {
        self.shared.chaos.write_log()
    }

    /// Starts (or stops) recording every request for a resource, whatever
    /// its verb and answer, by client ([`Self::request_log`]): what an
    /// authorizer would be asked. Off by default.
    pub fn record_requests(&self, on: bool) {
        self.shared.chaos.record_requests(on);
    }

    /// Every request for a resource since [`Self::record_requests`], in
    /// order. The emulator's own controllers make none.
    pub fn request_log(&self) -> Vec<RequestRecord> {
        self.shared.chaos.request_log()
    }

    /// Begins an outage: the listening socket closes (connections are
    /// refused) and every open connection, watches included, is cut.
    pub fn outage_begin(&self) {
        self.shared.chaos.set_down(true);
    }

    /// Ends an outage: the same address is served again.
    pub fn outage_end(&self) {
        self.shared.chaos.set_down(false);
    }

    /// Whether an outage is under way.
    pub fn is_down(&self) -> bool {
        self.shared.chaos.is_down()
    }

    /// What fired, by kind: injected faults (`conflict`, `internal error`,
    /// `latency`), `410 gone` answers to watches, `outages` begun and
    /// `connections cut` by them.
    pub fn faults_fired(&self) -> BTreeMap<&'static str, u64> {
        self.shared.chaos.fired_counts()
    }

    /// Number of allocated NodePorts (for leak checks).
    pub fn allocated_node_ports(&self) -> usize {
        self.shared.lock().node_ports.allocated()
    }

    /// Stops serving: drops open watches and shuts the server down.
    pub async fn shutdown(mut self) {
        self.drop_watches();
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        if let Some(task) = self.task.take() {
            let abort = task.abort_handle();
            if tokio::time::timeout(Duration::from_secs(2), task)
                .await
                .is_err()
            {
                abort.abort();
            }
        }
    }
}

impl Drop for Emulator {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            let _ = self.shared.lock().store.tx.send(Notice::DropAll);
            task.abort();
        }
    }
}

/// Counts as a map keyed by `(verb, resource)`; re-exported for callers that
/// want to diff snapshots.
pub fn diff_counts(before: &WriteCounts, after: &WriteCounts) -> BTreeMap<(String, String), u64> {
    after
        .iter()
        .filter_map(|(k, v)| {
            let d = v.saturating_sub(before.get(k).copied().unwrap_or(0));
            (d > 0).then(|| (k.clone(), d))
        })
        .collect()
}
