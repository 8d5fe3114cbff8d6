//! The whole system on one machine: the API emulator, the real operator
//! loop (`operator::run`, managing Valkey), the process kubelet and the
//! forwarding kube-proxy, for one ValkeyCluster.
//!
//! Ready means: the cluster's status says `Ready` for its current
//! generation (every node up, the Valkey cluster formed, external access
//! ready), and every external endpoint in `status.externalEndpoints`
//! reaches the very node it names: `CLUSTER MYID` through the endpoint
//! equals `CLUSTER MYID` at the node's pod IP.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::{CustomResourceExt, Resource, ResourceExt};
use kube_emulator::{CustomResource, Emulator};
use serde::Serialize;
use serde_json::Value;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use shardgate_contract::{auth, names};
use shardgate_k8s::crd::ValkeyCluster;
use shardgate_operator::{self as operator, Metrics, Options as OperatorOptions};
use shardgate_valkey::{CLIENT_PORT, Dial, Login, NodeClient, Trust};
use shardgate_wasm::{Engine, Limits, Reconciler};

use crate::certs::Authority;
use crate::gateway_api;
use crate::kubelet::{Kubelet, KubeletOptions};
use crate::nodes::{MAX_NODES, SandboxNode, sandbox_nodes};
use crate::proxy::{Proxy, ProxyOptions};

/// Where the sandbox runs its stand-ins.
#[derive(Clone, Debug)]
pub struct Options {
    pub valkey_server: PathBuf,
    /// Volumes and logs of every pod.
    pub work_dir: PathBuf,
    /// Pod `k` gets `.k+1` of this network (127.0.1.0 → 127.0.1.1, ...).
    pub pod_network: Ipv4Addr,
    /// How many Kubernetes nodes (`sandbox-node-0..`, see
    /// [`crate::nodes`]): pods are scheduled onto them, report their node's
    /// InternalIP (127.0.3.i+1) as host IP, and every NodePort listens on
    /// every node's InternalIP and ExternalIP (127.0.4.i+1).
    pub nodes: u32,
    /// Shard `s`'s LoadBalancer ingress is `.s` of this network.
    pub load_balancer_network: Ipv4Addr,
    /// Gateways (Gateway API) get addresses `.1`, `.2`, ... of this
    /// network, in name order (see [`crate::gateway`]).
    pub gateway_network: Ipv4Addr,
    /// Objects created in the cluster's namespace before it (a Gateway, a
    /// Secret, ...), in order; each of a kind the sandbox's API server
    /// serves. A namespace other than the cluster's is refused.
    pub objects: Vec<Value>,
    /// How soon the operator looks again at a reshaping cluster (the
    /// default, adaptive; benches compare it with a fixed tick).
    pub recheck: operator::Recheck,
    /// How long the operator gathers one cluster's watch events before it
    /// reconciles ([`operator::DEBOUNCE`] by default; benches vary it).
    pub debounce: Duration,
    /// Run the operator in this process (the default). Off, the sandbox
    /// runs everything but the operator, and the caller runs it (in
    /// processes of its own, to kill them, say).
    pub operator: bool,
    /// The operator talks to the Valkey nodes (the default). Off, it
    /// applies every object but never forms the cluster: a bench forms it
    /// itself, to measure the floor under the operator.
    pub manage_valkey: bool,
}

impl Options {
    /// Runs `valkey_server` with state under `work_dir`, on the default
    /// loopback addresses: pods on 127.0.1.x, three nodes on 127.0.3.x
    /// (InternalIP) and 127.0.4.x (ExternalIP), LoadBalancers on
    /// 127.0.2.x and Gateways on 127.0.6.x; no objects besides the cluster.
    pub fn new(valkey_server: PathBuf, work_dir: PathBuf) -> Self {
        Options {
            valkey_server,
            work_dir,
            pod_network: Ipv4Addr::new(127, 0, 1, 0),
            nodes: 3,
            load_balancer_network: Ipv4Addr::new(127, 0, 2, 0),
            gateway_network: Ipv4Addr::new(127, 0, 6, 0),
            objects: Vec::new(),
            recheck: operator::Recheck::default(),
            debounce: operator::DEBOUNCE,
            operator: true,
            manage_valkey: true,
        }
    }

    /// The nodes [`Options::nodes`] asks for.
    pub fn node_list(&self) -> Vec<SandboxNode> {
        sandbox_nodes(self.nodes)
    }
}

/// One node's external endpoint, as the ready file reports it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Endpoint {
    pub shard: u32,
    pub node: u32,
    /// The announced host an outside client is given (an IP or a hostname).
    pub host: String,
    pub port: u16,
    /// Where `host:port` leads on this machine (the sandbox's DNS).
    pub address: SocketAddr,
}

/// The content of the ready file.
#[derive(Clone, Debug, Serialize)]
pub struct Ready {
    pub cluster: String,
    pub namespace: String,
    pub endpoints: Vec<Endpoint>,
    /// The user a client logs in as: `default`.
    pub username: String,
    /// The `default` user's password, from Secret `<cluster>-users` (none
    /// when the manifest lists `default` with passwords of its own).
    pub password: Option<String>,
    /// Where the password is: `<namespace>/<cluster>-users`, key `default`.
    pub password_secret: String,
    /// A TLS cluster's CA certificate, for clients to verify the nodes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ca_file: Option<PathBuf>,
    /// Seconds from start to ready.
    pub seconds: f64,
}

/// A running sandbox: the emulator, kubelet, kube-proxy and operator, and
/// the one ValkeyCluster they serve.
pub struct Sandbox {
    emu: Arc<Emulator>,
    client: kube::Client,
    kubelet: Option<Kubelet>,
    proxy: Option<Proxy>,
    operator: Option<(oneshot::Sender<()>, JoinHandle<anyhow::Result<()>>)>,
    // The wasm engine (and its epoch thread) outlives the operator.
    _engine: Engine,
    name: String,
    namespace: String,
    options: Options,
    started: Instant,
    /// The CA that issued a TLS cluster's Secret.
    tls: Option<SandboxTls>,
    /// Asks the operator to reconcile the cluster again.
    resync: tokio::sync::broadcast::Sender<()>,
    metrics: Arc<Metrics>,
}

/// A TLS cluster's certificate authority, the names it certifies, and
/// where the CA certificate is written for clients.
struct SandboxTls {
    authority: Authority,
    names: Vec<String>,
    secret: String,
    ca_file: PathBuf,
}

impl SandboxTls {
    /// Makes a CA, writes its certificate to `<work_dir>/tls/ca.crt` and
    /// creates Secret `secret` (unless it exists: then it is the user's
    /// and left alone) with a certificate for every name a client may
    /// dial: `*.<domain>` of hostname mode, `localhost`, and every
    /// loopback address the sandbox serves on.
    async fn issue(
        client: &kube::Client,
        namespace: &str,
        secret: &str,
        cluster: &ValkeyCluster,
        options: &Options,
    ) -> anyhow::Result<Self> {
        let authority = Authority::new("shardgate sandbox CA")?;
        let mut names = Vec::new();
        if let Some(domain) = cluster
            .spec
            .external_access
            .as_ref()
            .and_then(|ea| ea.domain.as_deref())
        {
            names.push(format!("*.{domain}"));
        }
        names.push("localhost".into());
        names.push("127.0.0.1".into());
        for n in options.node_list() {
            names.push(n.internal_ip.to_string());
            names.push(n.external_ip.to_string());
        }
        let lb = options.load_balancer_network.octets();
        names.extend((0..64).map(|s| Ipv4Addr::new(lb[0], lb[1], lb[2], s).to_string()));
        let gw = options.gateway_network.octets();
        names.extend((1..=16).map(|g| Ipv4Addr::new(gw[0], gw[1], gw[2], g).to_string()));
        let dir = options.work_dir.join("tls");
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let ca_file = dir.join("ca.crt");
        std::fs::write(&ca_file, authority.ca_pem())
            .with_context(|| format!("writing {}", ca_file.display()))?;
        let me = SandboxTls {
            authority,
            names,
            secret: secret.into(),
            ca_file,
        };
        let api: Api<Secret> = Api::namespaced(client.clone(), namespace);
        if api.get_opt(secret).await?.is_none() {
            api.create(&PostParams::default(), &me.secret_object()?)
                .await
                .with_context(|| format!("creating Secret {secret}"))?;
        }
        Ok(me)
    }

    /// The Secret with a newly issued certificate and key.
    fn secret_object(&self) -> anyhow::Result<Secret> {
        let issued = self.authority.issue(&self.names)?;
        let data = [
            ("ca.crt", self.authority.ca_pem().to_string()),
            ("tls.crt", issued.cert),
            ("tls.key", issued.key),
        ];
        Ok(Secret {
            metadata: kube::api::ObjectMeta {
                name: Some(self.secret.clone()),
                ..Default::default()
            },
            type_: Some("kubernetes.io/tls".into()),
            data: Some(
                data.into_iter()
                    .map(|(k, v)| (k.to_string(), ByteString(v.into_bytes())))
                    .collect(),
            ),
            ..Default::default()
        })
    }

    /// How the sandbox's checks trust the nodes.
    fn trust(&self) -> anyhow::Result<Trust> {
        Ok(Trust::from_pem(self.authority.ca_pem().as_bytes())?)
    }
}

impl Sandbox {
    /// Starts everything and creates `cluster`. Refuses an invalid spec
    /// (every violation, with its field) before starting anything.
    pub async fn start(cluster: ValkeyCluster, options: Options) -> anyhow::Result<Sandbox> {
        let started = Instant::now();
        let engine = Engine::new(Limits::default())?;
        let module = engine.load_embedded()?;
        let violations = module.validate(&shardgate_k8s::convert::cluster(&cluster))?;
        let errors: Vec<String> = violations
            .iter()
            .filter(|v| v.severity == shardgate_contract::model::Severity::Error)
            .map(|v| v.to_string())
            .collect();
        if !errors.is_empty() {
            bail!("the cluster spec is invalid:\n{}", errors.join("\n"));
        }
        if !(1..=MAX_NODES).contains(&options.nodes) {
            bail!(
                "the sandbox models 1 to {MAX_NODES} nodes, not {}",
                options.nodes
            );
        }
        let name = cluster.name_any();
        let namespace = cluster.namespace().unwrap_or_else(|| "default".into());
        std::fs::create_dir_all(&options.work_dir)
            .with_context(|| format!("creating {}", options.work_dir.display()))?;

        // JSON is YAML too.
        let crd = serde_json::to_string(&ValkeyCluster::crd())?;
        let builder = Emulator::builder()
            .custom_resource(CustomResource::from_crd_yaml(&crd)?)
            .statefulset_controller(true)
            .namespace(&namespace);
        let emu = Arc::new(gateway_api::register(builder).start().await?);
        create_objects(&emu, &namespace, &options.objects)?;
        let client = emu.client().await?;
        let nodes = options.node_list();
        let tls = match &cluster.spec.tls {
            Some(spec) => Some(
                SandboxTls::issue(&client, &namespace, &spec.secret_name, &cluster, &options)
                    .await?,
            ),
            None => None,
        };
        // The kubelet registers the nodes (their `Node` objects) as it
        // starts, and schedules pending pods onto them on every tick.
        let kubelet = Kubelet::start(
            emu.clone(),
            KubeletOptions {
                valkey_server: options.valkey_server.clone(),
                work_dir: options.work_dir.clone(),
                pod_network: options.pod_network,
                nodes: nodes.clone(),
                namespace: namespace.clone(),
            },
        )?;
        let proxy = Proxy::start(
            emu.clone(),
            ProxyOptions {
                node_ips: nodes
                    .iter()
                    .flat_map(|n| [n.internal_ip, n.external_ip])
                    .collect(),
                load_balancer_network: options.load_balancer_network,
                gateway_network: options.gateway_network,
                namespace: namespace.clone(),
            },
        )?;
        let (stop, stopped) = oneshot::channel::<()>();
        let (resync, _) = tokio::sync::broadcast::channel::<()>(4);
        let metrics = Arc::new(Metrics::default());
        let operator = options.operator.then(|| {
            tokio::spawn(operator::run(
                OperatorOptions {
                    kubeconfig: None,
                    context: None,
                    namespace: Some(namespace.clone()),
                    listen: None,
                    lease: None,
                    identity: "shardgate-sandbox".into(),
                    reconcile_all: Some(resync.clone()),
                    manage_valkey: options.manage_valkey,
                    debounce: options.debounce,
                    recheck: options.recheck,
                    apply_shortcuts: true,
                },
                client.clone(),
                Arc::new(module) as Arc<dyn Reconciler>,
                metrics.clone(),
                async move {
                    let _ = stopped.await;
                },
            ))
        });
        let mut object = cluster;
        object.metadata.namespace = Some(namespace.clone());
        object.metadata.resource_version = None;
        object.metadata.uid = None;
        object.status = None;
        Api::<ValkeyCluster>::namespaced(client.clone(), &namespace)
            .create(&PostParams::default(), &object)
            .await
            .context("creating the ValkeyCluster")?;
        Ok(Sandbox {
            emu,
            client,
            kubelet: Some(kubelet),
            proxy: Some(proxy),
            operator: operator.map(|task| (stop, task)),
            _engine: engine,
            name,
            namespace,
            options,
            started,
            tls,
            resync,
            metrics,
        })
    }

    /// Has the operator reconcile the cluster `n` more times, each started
    /// after the previous one began (fails after 10 s without one).
    pub async fn resync(&self, n: usize) -> anyhow::Result<()> {
        for _ in 0..n {
            let before = self.metrics.reconciles.get();
            self.resync.send(()).ok();
            let deadline = Instant::now() + Duration::from_secs(10);
            while self.metrics.reconciles.get() <= before {
                if Instant::now() >= deadline {
                    bail!("no reconcile started within 10 s of a resync");
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
        Ok(())
    }

    /// The options it was started with.
    pub fn options(&self) -> &Options {
        &self.options
    }

    /// The Kubernetes nodes it models.
    pub fn nodes(&self) -> Vec<SandboxNode> {
        self.options.node_list()
    }

    /// The emulated API server.
    pub fn emulator(&self) -> &Emulator {
        &self.emu
    }

    /// The process kubelet that runs the pods.
    pub fn kubelet(&self) -> &Kubelet {
        self.kubelet.as_ref().expect("running")
    }

    /// The forwarding kube-proxy that serves the external endpoints.
    pub fn proxy(&self) -> &Proxy {
        self.proxy.as_ref().expect("running")
    }

    /// The ValkeyCluster's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The ValkeyCluster's namespace.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// ValkeyClusters in the sandbox's namespace.
    pub fn api(&self) -> Api<ValkeyCluster> {
        Api::namespaced(self.client.clone(), &self.namespace)
    }

    /// Changes the cluster's spec with a JSON merge patch, as `kubectl
    /// patch --type merge` would.
    pub async fn patch_spec(&self, spec: Value) -> anyhow::Result<ValkeyCluster> {
        let patch = serde_json::json!({ "spec": spec });
        Ok(self
            .api()
            .patch(&self.name, &PatchParams::default(), &Patch::Merge(&patch))
            .await?)
    }

    /// The node's pod IP, from the Pod (`<node object>-0`).
    pub fn pod_ip(&self, shard: u32, node: u32) -> Option<IpAddr> {
        let pod = format!("{}-0", names::node_object(&self.name, shard, node));
        let value = self.emu.get("pods", &self.namespace, &pod)?;
        value["status"]["podIP"].as_str()?.parse().ok()
    }

    /// The sandbox's DNS: where an announced host leads. An IP is itself; a
    /// hostname leads to the Gateway's address when the cluster's spec
    /// names one (`externalAccess.gateway.gatewayRef.name`), else to its
    /// node's own load balancer, else its shard's, else to node 0's
    /// InternalIP (every NodePort listens on every node).
    pub fn resolve(&self, shard: u32, node: u32, host: &str) -> IpAddr {
        if let Ok(ip) = host.parse() {
            return ip;
        }
        if let Some(ip) = self.gateway_address() {
            return ip;
        }
        let ingress = |service: String| {
            let s = self.emu.get("services", &self.namespace, &service)?;
            s["status"]["loadBalancer"]["ingress"][0]["ip"]
                .as_str()
                .and_then(|ip| ip.parse().ok())
        };
        ingress(names::node_service(&self.name, shard, node))
            .or_else(|| ingress(names::shard_service(&self.name, shard)))
            .unwrap_or(IpAddr::V4(SandboxNode::new(0).internal_ip))
    }

    /// The address of the Gateway the cluster's spec names, once the
    /// sandbox's gateway has given it one. Read as JSON from the stored
    /// cluster, so it works whether or not this build's ValkeyCluster type
    /// knows `externalAccess.gateway`.
    pub fn gateway_address(&self) -> Option<IpAddr> {
        let cluster = self
            .emu
            .get("valkeyclusters", &self.namespace, &self.name)?;
        gateway_address(&self.emu, &self.namespace, &cluster)
    }

    /// Key `key` of Secret `name` in the sandbox's namespace, as text.
    pub fn secret_value(&self, name: &str, key: &str) -> Option<String> {
        secret_value(&self.emu, &self.namespace, name, key)
    }

    /// How the operator reaches the nodes (its system user, TLS trusting
    /// the cluster's CA), for the readiness check's `CLUSTER MYID`.
    fn operator_dial(&self) -> anyhow::Result<Dial> {
        let system = names::system_secret(&self.name);
        let password = self
            .secret_value(&system, auth::OPERATOR_KEY)
            .with_context(|| format!("Secret {system} has no operator password yet"))?;
        Ok(Dial {
            login: Some(Login {
                username: auth::OPERATOR_USER.into(),
                password,
            }),
            tls: self.tls.as_ref().map(SandboxTls::trust).transpose()?,
            timeout: Duration::from_secs(2),
        })
    }

    /// A TLS cluster's CA certificate file (`<work_dir>/tls/ca.crt`).
    pub fn ca_file(&self) -> Option<&Path> {
        self.tls.as_ref().map(|t| t.ca_file.as_path())
    }

    /// Renews a TLS cluster's certificate as cert-manager does: a new key
    /// and certificate from the same CA, written over the Secret's
    /// `tls.crt` and `tls.key`. Returns the new `tls.crt`.
    pub async fn renew_certificate(&self) -> anyhow::Result<String> {
        let tls = self.tls.as_ref().context("the cluster has no spec.tls")?;
        let secret = tls.secret_object()?;
        let cert = secret.data.as_ref().and_then(|d| d.get("tls.crt")).cloned();
        Api::<Secret>::namespaced(self.client.clone(), &self.namespace)
            .replace(&tls.secret, &PostParams::default(), &secret)
            .await
            .with_context(|| format!("renewing Secret {}", tls.secret))?;
        Ok(String::from_utf8(
            cert.context("issued without tls.crt")?.0,
        )?)
    }

    /// Waits until the cluster is ready (see the module docs) and returns
    /// its endpoints. Fails after `timeout`, saying what is still missing.
    pub async fn wait_ready(&self, timeout: Duration) -> anyhow::Result<Ready> {
        let deadline = Instant::now() + timeout;
        loop {
            let why = match self.ready_now().await {
                Ok(ready) => return Ok(ready),
                Err(why) => why,
            };
            if Instant::now() >= deadline {
                let mut problems = self.kubelet().errors();
                problems.extend(self.proxy().errors());
                bail!(
                    "not ready after {timeout:?}: {why:#}{}",
                    if problems.is_empty() {
                        String::new()
                    } else {
                        format!("\n{}", problems.join("\n"))
                    }
                );
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// The cluster's endpoints if it is ready now (see the module docs),
    /// else why not.
    pub async fn ready_now(&self) -> anyhow::Result<Ready> {
        let endpoints = self.check_ready().await?;
        let users = names::users_secret(&self.name);
        Ok(Ready {
            cluster: self.name.clone(),
            namespace: self.namespace.clone(),
            endpoints,
            username: auth::DEFAULT_USER.into(),
            password: self.secret_value(&users, auth::DEFAULT_USER),
            password_secret: format!("{}/{users} key {}", self.namespace, auth::DEFAULT_USER),
            ca_file: self.ca_file().map(Path::to_path_buf),
            seconds: self.started.elapsed().as_secs_f64(),
        })
    }

    async fn check_ready(&self) -> anyhow::Result<Vec<Endpoint>> {
        let vc = self.api().get(&self.name).await?;
        let status = vc.status.clone().unwrap_or_default();
        if status.observed_generation != vc.meta().generation {
            bail!("the operator has not seen the latest spec yet");
        }
        let ready = status.conditions.iter().find(|c| c.type_ == "Ready");
        match ready {
            Some(c) if c.status == "True" => {}
            Some(c) => bail!("Ready is {}: {}: {}", c.status, c.reason, c.message),
            None => bail!("no Ready condition yet"),
        }
        let mut endpoints = Vec::new();
        for shard in status.external_endpoints.iter().flatten() {
            for n in &shard.nodes {
                let (s, node) = (shard.shard_index as u32, n.node_index as u32);
                let port = u16::try_from(n.port).context("port out of range")?;
                let address = SocketAddr::new(self.resolve(s, node, &n.host), port);
                endpoints.push(Endpoint {
                    shard: s,
                    node,
                    host: n.host.clone(),
                    port,
                    address,
                });
            }
        }
        let dial = self.operator_dial()?;
        for e in &endpoints {
            let pod_ip = self
                .pod_ip(e.shard, e.node)
                .with_context(|| format!("shard {} node {} has no pod IP", e.shard, e.node))?;
            let inside = my_id(SocketAddr::new(pod_ip, CLIENT_PORT), &dial).await?;
            let outside = my_id(e.address, &dial).await?;
            if inside != outside {
                bail!(
                    "{}:{} ({}) reaches node {outside}, not shard {} node {} ({inside})",
                    e.host,
                    e.port,
                    e.address,
                    e.shard,
                    e.node
                );
            }
        }
        Ok(endpoints)
    }

    /// Stops the operator, the proxy and every process the kubelet started.
    pub async fn shutdown(mut self) {
        if let Some((stop, task)) = self.operator.take() {
            let _ = stop.send(());
            let _ = tokio::time::timeout(Duration::from_secs(10), task).await;
        }
        if let Some(proxy) = self.proxy.take() {
            proxy.shutdown().await;
        }
        if let Some(kubelet) = self.kubelet.take() {
            kubelet.shutdown().await;
        }
    }
}

/// The Gateway a cluster object names in
/// `spec.externalAccess.gateway.gatewayRef.name`, if any.
pub fn gateway_ref(cluster: &Value) -> Option<String> {
    cluster["spec"]["externalAccess"]["gateway"]["gatewayRef"]["name"]
        .as_str()
        .map(str::to_string)
}

/// The first address in the status of the Gateway that `cluster` (an
/// object in `namespace`) names ([`gateway_ref`]), if both exist.
pub fn gateway_address(emu: &Emulator, namespace: &str, cluster: &Value) -> Option<IpAddr> {
    let object = emu.get(
        &format!(
            "{}/{}/Gateway",
            gateway_api::GROUP,
            gateway_api::GATEWAY_VERSION
        ),
        namespace,
        &gateway_ref(cluster)?,
    )?;
    object["status"]["addresses"]
        .as_array()?
        .iter()
        .find_map(|a| a["value"].as_str()?.parse().ok())
}

/// Creates `objects` in `namespace` (their namespace if unset), in order.
/// An object of a kind `emu` does not serve, or in another namespace, is
/// an error naming it.
pub fn create_objects(emu: &Emulator, namespace: &str, objects: &[Value]) -> anyhow::Result<()> {
    for (i, object) in objects.iter().enumerate() {
        let api_version = object["apiVersion"].as_str().unwrap_or_default();
        let kind = object["kind"].as_str().unwrap_or_default();
        let name = object["metadata"]["name"].as_str().unwrap_or_default();
        let what = format!("object {} ({api_version} {kind} {name:?})", i + 1);
        let Some(namespaced) = emu.namespaced(&format!("{api_version}/{kind}")) else {
            bail!(
                "{what}: the sandbox's API server does not serve kind {kind:?} of \
                 apiVersion {api_version:?}"
            );
        };
        let mut object = object.clone();
        match object["metadata"]["namespace"].as_str() {
            _ if !namespaced => {}
            None => object["metadata"]["namespace"] = Value::String(namespace.into()),
            Some(ns) if ns == namespace => {}
            Some(ns) => bail!(
                "{what}: namespace {ns:?}: the sandbox serves one namespace, the cluster's \
                 ({namespace:?})"
            ),
        }
        emu.create(object)
            .with_context(|| format!("creating {what}"))?;
    }
    Ok(())
}

async fn my_id(addr: SocketAddr, dial: &Dial) -> anyhow::Result<String> {
    let mut c = NodeClient::dial(addr, dial).await?;
    Ok(c.my_id().await?)
}

/// The UTF-8 value of `key` in Secret `namespace/name` in `emu`, if both
/// exist.
pub fn secret_value(emu: &Emulator, namespace: &str, name: &str, key: &str) -> Option<String> {
    let secret = emu.get("secrets", namespace, name)?;
    let encoded = secret["data"][key].as_str()?;
    let bytes: ByteString = serde_json::from_value(Value::String(encoded.into())).ok()?;
    String::from_utf8(bytes.0).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    async fn emulator() -> Emulator {
        gateway_api::register(Emulator::builder().namespace("ns"))
            .start()
            .await
            .unwrap()
    }

    fn gateway(namespace: Option<&str>) -> Value {
        let mut gw = json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
               "metadata": {"name": "valkey"},
               "spec": {"gatewayClassName": "sandbox",
                        "listeners": [{"name": "tcp-7000", "port": 7000, "protocol": "TCP"}]}});
        if let Some(ns) = namespace {
            gw["metadata"]["namespace"] = json!(ns);
        }
        gw
    }

    #[tokio::test]
    async fn objects_are_created_in_the_clusters_namespace_if_served() {
        let emu = emulator().await;
        let node = json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n"}});
        create_objects(&emu, "ns", &[gateway(None), node]).unwrap();
        assert!(emu.get("Gateway", "ns", "valkey").is_some());
        assert!(emu.get("Node", "", "n").is_some(), "cluster-scoped: as is");
        let err = create_objects(&emu, "ns", &[gateway(Some("ns"))]).unwrap_err();
        assert!(format!("{err:#}").contains("already exists"), "{err:#}");

        let widget = json!({"apiVersion": "example.com/v1", "kind": "Widget",
                            "metadata": {"name": "w"}});
        let err = create_objects(&emu, "ns", &[widget])
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("object 1 (example.com/v1 Widget \"w\")")
                && err.contains("does not serve kind \"Widget\""),
            "{err}"
        );
        let err = create_objects(&emu, "ns", &[gateway(Some("other"))])
            .unwrap_err()
            .to_string();
        assert!(err.contains("namespace \"other\""), "{err}");
        emu.shutdown().await;
    }

    #[tokio::test]
    async fn a_cluster_naming_a_gateway_leads_to_its_address() {
        let emu = emulator().await;
        create_objects(&emu, "ns", &[gateway(None)]).unwrap();
        let cluster = |gateway: Value| json!({"spec": {"externalAccess": {"enabled": true, "gateway": gateway}}});
        let named = cluster(json!({"gatewayRef": {"name": "valkey"}, "basePort": 7000}));
        assert_eq!(gateway_ref(&named).as_deref(), Some("valkey"));
        assert_eq!(gateway_ref(&json!({"spec": {}})), None);
        // No address yet: the DNS falls back as before.
        assert_eq!(gateway_address(&emu, "ns", &named), None);
        emu.patch_status(
            "Gateway",
            "ns",
            "valkey",
            "test",
            json!({"status": {"addresses": [{"type": "IPAddress", "value": "127.0.6.1"}]}}),
        )
        .unwrap();
        assert_eq!(
            gateway_address(&emu, "ns", &named),
            Some("127.0.6.1".parse().unwrap())
        );
        let other = cluster(json!({"gatewayRef": {"name": "other"}}));
        assert_eq!(gateway_address(&emu, "ns", &other), None);
        emu.shutdown().await;
    }
}
