//! A forwarding kube-proxy (and cloud load-balancer controller) for one
//! namespace of the API emulator: makes NodePort and LoadBalancer Services
//! reachable as TCP listeners on loopback addresses.
//!
//! Every ~100 ms it lists the namespace's Services and keeps one listener
//! per exposed address:
//!
//! - **NodePort** (and LoadBalancer) Services: each port with a `nodePort`
//!   listens on `ip:nodePort` for every address in `node_ips` (every
//!   node's InternalIP and ExternalIP, as kube-proxy opens a NodePort on
//!   every node), all forwarding to the same pod.
//! - **LoadBalancer** Services: acting as the cloud controller, the proxy
//!   gives each one an address in `load_balancer_network` (a loopback /24):
//!   `.S` for a Service labelled `shardgate.io/shard: S` and no
//!   `shardgate.io/node` (a shard's: 127.0.2.0 for shard 0, all of 127/8
//!   is loopback), otherwise (a node's own Service, say), or if that
//!   address is taken by another Service, the highest free one. It
//!   writes `status.loadBalancer.ingress: [{ip}]` (only when it differs) and
//!   listens on `ip:port` for each port. When a Service stops being a
//!   LoadBalancer its address is released and its ingress cleared.
//!
//! - **Gateways** (Gateway API): acting as their implementation, the proxy
//!   gives each Gateway an address in `gateway_network` and serves its
//!   TCP and TLS (passthrough) listeners that have routes; see
//!   [`crate::gateway`].
//!
//! Listeners of ports or Services that disappeared are closed (with the
//! connections they accepted); a changed `nodePort` is a new listener
//! ([`crate::listeners`] keeps them).
//!
//! Each accepted connection is forwarded to the endpoint resolved **at
//! connection time** from the emulator ([`resolve`]): the Service port's
//! `targetPort` (a container port name, or a number) on the Ready pods with
//! a podIP that match the Service's selector. Exactly one such pod: the
//! connection is relayed byte for byte to `podIP:containerPort`. None, or
//! more than one: the connection is closed and an error naming the Service,
//! the port and the pods is recorded ([`Proxy::errors`]) — each port must
//! reach exactly one pod, which is what the sandbox demonstrates.
//!
//! **Not modelled:** load balancing over several endpoints (refused
//! instead, see above), ClusterIPs, Endpoints/EndpointSlices objects,
//! `externalTrafficPolicy` (every node forwards to the pod wherever it is;
//! no source-IP preservation: the pod sees the proxy's address), `sessionAffinity`, UDP and SCTP ports,
//! `loadBalancerSourceRanges`, `loadBalancerIP`, hostnames in ingress, health
//! check node ports, and connection tracking (removing a listener closes its
//! connections).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use anyhow::Context;
use k8s_openapi::api::core::v1::{Pod, Service, ServicePort};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube_emulator::{Emulator, Ingress};
use tokio::net::TcpStream;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tracing::{debug, info, warn};

use crate::gateway::{self, GatewayListener};
use crate::ip_pool::IpPool;
use crate::kubelet::is_ready;
use crate::listeners::{ListenKey, Listeners, accept_loop};

/// How often the proxy looks at the emulator's Services.
const TICK: Duration = Duration::from_millis(100);
/// How long connecting to a pod may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// Errors kept by [`Proxy::errors`]; older ones are dropped.
const MAX_ERRORS: usize = 1000;
/// The label whose value picks a LoadBalancer Service's address.
const SHARD_LABEL: &str = "shardgate.io/shard";
/// A node's own Service carries this too, and takes no shard's address.
const NODE_LABEL: &str = "shardgate.io/node";

/// Where the proxy listens.
#[derive(Clone, Debug)]
pub struct ProxyOptions {
    /// The nodes' addresses: every NodePort listens on each of them (e.g.
    /// each node's InternalIP and ExternalIP).
    pub node_ips: Vec<Ipv4Addr>,
    /// A loopback /24 for LoadBalancer addresses (e.g. 127.0.2.0).
    pub load_balancer_network: Ipv4Addr,
    /// A loopback /24 for Gateway addresses (the sandbox's: 127.0.6.0;
    /// the first Gateway gets `.1`).
    pub gateway_network: Ipv4Addr,
    /// The namespace whose Services are exposed.
    pub namespace: String,
}

/// A running proxy; see the module docs. Dropping it closes every listener.
pub struct Proxy {
    shared: Arc<Shared>,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<()>>,
}

/// One listener: a Service, one of its port names and the listen address.
type Endpoint = (String, String, SocketAddr);

impl ListenKey for Endpoint {
    fn addr(&self) -> SocketAddr {
        self.2
    }

    fn describe(&self) -> String {
        format!("service {} port {:?}", self.0, self.1)
    }
}

/// What the proxy's loop and its connections share; the gateway
/// ([`crate::gateway`]) uses it too.
pub(crate) struct Shared {
    pub(crate) emu: Arc<Emulator>,
    pub(crate) options: ProxyOptions,
    state: Mutex<State>,
    listeners: Listeners<Endpoint>,
    pub(crate) gateway: gateway::Gateways,
    ticks: AtomicU64,
}

struct State {
    /// LoadBalancer Service name to its address.
    load_balancers: BTreeMap<String, Ipv4Addr>,
    lb_ips: IpPool,
    errors: Vec<String>,
}

/// A Service port, by name (a NodePort or load balancer listener's) or by
/// number (a Gateway route's backendRef).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PortRef {
    Name(String),
    Number(u16),
}

impl fmt::Display for PortRef {
    /// A name quoted (`"vk-n0"`), a number as is (`6379`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PortRef::Name(name) => write!(f, "{name:?}"),
            PortRef::Number(n) => write!(f, "{n}"),
        }
    }
}

/// Why a Service port does not lead to exactly one pod.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ResolveError {
    #[error("service {service}: no port {port}")]
    NoSuchPort { service: String, port: PortRef },
    #[error("service {service}: no selector, so no endpoints")]
    NoSelector { service: String },
    #[error(
        "service {service} port {port} (targetPort {target}): no endpoint; selected pods: [{}]",
        selected.join(", ")
    )]
    NoEndpoint {
        service: String,
        port: PortRef,
        target: String,
        /// The pods the selector matches, each with why it is not an
        /// endpoint (e.g. `vc-0 (not ready)`).
        selected: Vec<String>,
    },
    #[error(
        "service {service} port {port} (targetPort {target}): {} endpoints, expected one: [{}]",
        pods.len(),
        pods.join(", ")
    )]
    Ambiguous {
        service: String,
        port: PortRef,
        target: String,
        /// Each endpoint pod as `name (ip:port)`.
        pods: Vec<String>,
    },
}

impl Proxy {
    /// Starts the proxy on the current tokio runtime.
    pub fn start(emu: Arc<Emulator>, options: ProxyOptions) -> anyhow::Result<Proxy> {
        let runtime = tokio::runtime::Handle::try_current()
            .context("the sandbox proxy must be started inside a tokio runtime")?;
        let shared = Arc::new(Shared {
            emu,
            state: Mutex::new(State {
                load_balancers: BTreeMap::new(),
                lb_ips: IpPool::new(options.load_balancer_network),
                errors: Vec::new(),
            }),
            listeners: Listeners::new(),
            gateway: gateway::Gateways::new(options.gateway_network),
            ticks: AtomicU64::new(0),
            options,
        });
        let (stop, stopped) = oneshot::channel();
        let task = runtime.spawn(run(shared.clone(), stopped));
        Ok(Proxy {
            shared,
            stop: Some(stop),
            task: Some(task),
        })
    }

    /// Every Service listener: `(service, port name, listen address)`.
    /// The Gateways' are [`Proxy::gateway_listeners`].
    pub fn endpoints(&self) -> Vec<(String, String, SocketAddr)> {
        self.shared.listeners.keys()
    }

    /// Every Gateway listener open now (those with at least one route).
    pub fn gateway_listeners(&self) -> Vec<GatewayListener> {
        self.shared.gateway.listeners()
    }

    /// Each Gateway's address, by Gateway name.
    pub fn gateway_addresses(&self) -> BTreeMap<String, Ipv4Addr> {
        self.shared.gateway.addresses()
    }

    /// How many ticks (passes over the Services and Gateways) have
    /// finished: a test waits for two more to know that a whole tick saw
    /// what it did before.
    pub fn ticks(&self) -> u64 {
        self.shared.ticks.load(Ordering::SeqCst)
    }

    /// Errors so far, oldest first: refused connections (naming the
    /// Service, port and pods, or the Gateway listener and routes),
    /// listeners that could not bind, failed connections to pods, failed
    /// status writes, Gateway listeners the sandbox cannot serve.
    pub fn errors(&self) -> Vec<String> {
        self.shared.state().errors.clone()
    }

    /// Stops the proxy: closes every listener and every forwarded
    /// connection. LoadBalancer ingress and Gateway status are left as
    /// they are.
    pub async fn shutdown(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
        self.shared.listeners.close_all().await;
        self.shared.gateway.close_all().await;
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
        self.shared.listeners.abort_all();
        self.shared.gateway.abort_all();
    }
}

/// The proxy loop: one sync per tick until told to stop.
async fn run(shared: Arc<Shared>, mut stop: oneshot::Receiver<()>) {
    let mut tick = tokio::time::interval(TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = &mut stop => return,
            _ = tick.tick() => shared.sync().await,
        }
    }
}

impl Shared {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    pub(crate) fn record(&self, message: String) {
        warn!("sandbox proxy: {message}");
        let mut st = self.state();
        st.errors.push(message);
        if st.errors.len() > MAX_ERRORS {
            st.errors.remove(0);
        }
    }

    /// One pass: load balancer addresses, then listeners, then the
    /// Gateways.
    async fn sync(self: &Arc<Self>) {
        let services = self.services();
        self.assign_load_balancers(&services);
        let wanted = self.wanted_endpoints(&services);
        let shared = self.clone();
        let errors = self
            .listeners
            .sync(wanted, move |(service, port, _), listener| {
                let shared = shared.clone();
                let what = format!("service {service} port {port:?}");
                accept_loop(listener, what, move |stream| {
                    let (shared, service, port) = (shared.clone(), service.clone(), port.clone());
                    async move { shared.forward(service, port, stream).await }
                })
            })
            .await;
        for e in errors {
            self.record(e);
        }
        gateway::sync(self).await;
        self.ticks.fetch_add(1, Ordering::SeqCst);
    }

    /// The namespace's Services.
    fn services(&self) -> Vec<Service> {
        self.emu
            .list("services", Some(&self.options.namespace))
            .into_iter()
            .filter_map(|v| serde_json::from_value(v).ok())
            .collect()
    }

    /// Gives every LoadBalancer Service an address and its ingress; takes
    /// them back from Services that are no longer LoadBalancers.
    fn assign_load_balancers(&self, services: &[Service]) {
        let lbs: BTreeMap<String, &Service> = services
            .iter()
            .filter(|s| service_type(s) == "LoadBalancer")
            .map(|s| (name(s), s))
            .collect();
        self.release_load_balancers(services, &lbs);
        for (svc_name, svc) in lbs {
            let Some(ip) = self.load_balancer_ip(&svc_name, svc) else {
                self.record(format!("service {svc_name}: no free load balancer address"));
                continue;
            };
            if ingress_ips(svc) != [ip.to_string()] {
                self.set_ingress(&svc_name, vec![Ingress::Ip(ip.to_string())]);
            }
        }
    }

    /// Frees the addresses of Services that are gone or no longer
    /// LoadBalancers, clearing the ingress of those that remain.
    fn release_load_balancers(&self, services: &[Service], lbs: &BTreeMap<String, &Service>) {
        let released: Vec<(String, Ipv4Addr)> = {
            let mut st = self.state();
            let gone: Vec<String> = st
                .load_balancers
                .keys()
                .filter(|n| !lbs.contains_key(*n))
                .cloned()
                .collect();
            gone.into_iter()
                .filter_map(|n| st.load_balancers.remove(&n).map(|ip| (n, ip)))
                .collect()
        };
        for (svc_name, ip) in released {
            self.state().lb_ips.release(ip);
            info!(service = %svc_name, %ip, "load balancer address released");
            let still_there = services.iter().find(|s| name(s) == svc_name);
            if still_there.is_some_and(|s| !ingress_ips(s).is_empty()) {
                self.set_ingress(&svc_name, Vec::new());
            }
        }
    }

    /// The Service's load balancer address, allocated on first sight.
    fn load_balancer_ip(&self, svc_name: &str, svc: &Service) -> Option<Ipv4Addr> {
        let mut st = self.state();
        if let Some(ip) = st.load_balancers.get(svc_name) {
            return Some(*ip);
        }
        let preferred = shard_index(svc);
        let ip = preferred
            .and_then(|host| st.lb_ips.claim(host))
            .or_else(|| st.lb_ips.allocate_from_top())?;
        info!(service = svc_name, %ip, "load balancer address assigned");
        st.load_balancers.insert(svc_name.to_string(), ip);
        Some(ip)
    }

    fn set_ingress(&self, svc_name: &str, ingress: Vec<Ingress>) {
        if let Err(e) =
            self.emu
                .set_load_balancer_ingress(&self.options.namespace, svc_name, ingress)
        {
            self.record(format!(
                "service {svc_name}: setting the load balancer ingress: {e:#}"
            ));
        }
    }

    /// Every address that should be listening.
    fn wanted_endpoints(&self, services: &[Service]) -> BTreeSet<Endpoint> {
        let st = self.state();
        services
            .iter()
            .flat_map(|svc| {
                let lb = st.load_balancers.get(&name(svc)).copied();
                listen_addresses(svc, &self.options.node_ips, lb)
            })
            .collect()
    }

    /// The pod address for a new connection to `service`'s `port`, from the
    /// emulator's current objects.
    pub(crate) fn endpoint(&self, service: &str, port: &PortRef) -> Result<SocketAddr, String> {
        let ns = &self.options.namespace;
        let svc: Service = self
            .emu
            .get("Service", ns, service)
            .and_then(|v| serde_json::from_value(v).ok())
            .ok_or_else(|| format!("service {service}: not found"))?;
        let pods: Vec<Pod> = self
            .emu
            .list("pods", Some(ns))
            .into_iter()
            .filter_map(|v| serde_json::from_value(v).ok())
            .collect();
        resolve_port(&svc, port, &pods).map_err(|e| e.to_string())
    }

    /// Relays one accepted connection to its pod, or closes it.
    async fn forward(&self, service: String, port: String, inbound: TcpStream) {
        let what = format!("service {service} port {port:?}");
        match self.endpoint(&service, &PortRef::Name(port)) {
            Ok(target) => self.relay(&what, target, inbound).await,
            Err(e) => self.record(format!("connection refused: {e}")),
        }
    }

    /// Connects to `target` and relays byte for byte between it and
    /// `inbound` until either side closes; a failed connect is recorded
    /// (naming `what`) and closes `inbound`.
    pub(crate) async fn relay(&self, what: &str, target: SocketAddr, mut inbound: TcpStream) {
        let outbound = tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(target)).await;
        let mut outbound = match outbound {
            Ok(Ok(stream)) => stream,
            Ok(Err(e)) => {
                self.record(format!("{what}: connecting to {target}: {e}"));
                return;
            }
            Err(_) => {
                self.record(format!("{what}: connecting to {target}: timed out"));
                return;
            }
        };
        if let Err(e) = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await {
            debug!(%target, "{what}: forwarded connection ended: {e}");
        }
    }
}

fn name(svc: &Service) -> String {
    svc.metadata.name.clone().unwrap_or_default()
}

fn service_type(svc: &Service) -> &str {
    svc.spec
        .as_ref()
        .and_then(|s| s.type_.as_deref())
        .unwrap_or("ClusterIP")
}

fn shard_index(svc: &Service) -> Option<u8> {
    let labels = svc.metadata.labels.as_ref()?;
    if labels.contains_key(NODE_LABEL) {
        return None;
    }
    labels.get(SHARD_LABEL)?.parse().ok()
}

fn ingress_ips(svc: &Service) -> Vec<String> {
    svc.status
        .as_ref()
        .and_then(|s| s.load_balancer.as_ref())
        .and_then(|lb| lb.ingress.as_ref())
        .into_iter()
        .flatten()
        .map(|i| i.ip.clone().unwrap_or_default())
        .collect()
}

fn tcp_ports(svc: &Service) -> impl Iterator<Item = &ServicePort> {
    svc.spec
        .as_ref()
        .and_then(|s| s.ports.as_ref())
        .into_iter()
        .flatten()
        .filter(|p| p.protocol.as_deref().unwrap_or("TCP") == "TCP")
}

/// The addresses a Service is exposed on: `ip:nodePort` for each of
/// `node_ips` and each port of a NodePort or LoadBalancer Service, and
/// `lb:port` when it has a load balancer address.
fn listen_addresses(svc: &Service, node_ips: &[Ipv4Addr], lb: Option<Ipv4Addr>) -> Vec<Endpoint> {
    let svc_name = name(svc);
    let exposed = matches!(service_type(svc), "NodePort" | "LoadBalancer");
    let mut out = Vec::new();
    for port in tcp_ports(svc) {
        let port_name = port.name.clone().unwrap_or_default();
        if let Some(node_port) = port
            .node_port
            .filter(|_| exposed)
            .and_then(|p| u16::try_from(p).ok())
        {
            for ip in node_ips {
                out.push((
                    svc_name.clone(),
                    port_name.clone(),
                    SocketAddr::from((*ip, node_port)),
                ));
            }
        }
        if let (Some(ip), Ok(p)) = (lb, u16::try_from(port.port)) {
            out.push((svc_name.clone(), port_name, SocketAddr::from((ip, p))));
        }
    }
    out
}

/// Where a connection to `service`'s port `port_name` goes: the one Ready
/// pod with a podIP (any pod if `publishNotReadyAddresses`) that matches the
/// selector, is in the Service's namespace, is not being deleted and has
/// the `targetPort` (a container port name; a number is taken as is;
/// absent means `port`).
pub fn resolve(
    service: &Service,
    port_name: &str,
    pods: &[Pod],
) -> Result<SocketAddr, ResolveError> {
    resolve_port(service, &PortRef::Name(port_name.to_string()), pods)
}

/// [`resolve`], for a Service port given by name or by number (`port`,
/// as a Gateway route's backendRef names it).
pub fn resolve_port(
    service: &Service,
    port_ref: &PortRef,
    pods: &[Pod],
) -> Result<SocketAddr, ResolveError> {
    let svc_name = name(service);
    let port = tcp_ports(service)
        .find(|p| match port_ref {
            PortRef::Name(n) => p.name.as_deref().unwrap_or_default() == n,
            PortRef::Number(n) => p.port == i32::from(*n),
        })
        .ok_or_else(|| ResolveError::NoSuchPort {
            service: svc_name.clone(),
            port: port_ref.clone(),
        })?;
    let selector = service
        .spec
        .as_ref()
        .and_then(|s| s.selector.as_ref())
        .filter(|s| !s.is_empty())
        .ok_or_else(|| ResolveError::NoSelector {
            service: svc_name.clone(),
        })?;
    let target = port
        .target_port
        .clone()
        .unwrap_or(IntOrString::Int(port.port));
    let not_ready_ok = service
        .spec
        .as_ref()
        .and_then(|s| s.publish_not_ready_addresses)
        .unwrap_or(false);
    let selected = pods.iter().filter(|p| {
        let labels = p.metadata.labels.clone().unwrap_or_default();
        p.metadata.namespace == service.metadata.namespace
            && selector.iter().all(|(k, v)| labels.get(k) == Some(v))
    });
    let mut endpoints = Vec::new();
    let mut excluded = Vec::new();
    for pod in selected {
        let pod_name = pod.metadata.name.clone().unwrap_or_default();
        match endpoint_of(pod, &target, not_ready_ok) {
            Ok(addr) => endpoints.push((pod_name, addr)),
            Err(why) => excluded.push(format!("{pod_name} ({why})")),
        }
    }
    let target = match &target {
        IntOrString::Int(n) => n.to_string(),
        IntOrString::String(s) => format!("{s:?}"),
    };
    match endpoints.as_slice() {
        [(_, addr)] => Ok(*addr),
        [] => Err(ResolveError::NoEndpoint {
            service: svc_name,
            port: port_ref.clone(),
            target,
            selected: excluded,
        }),
        many => Err(ResolveError::Ambiguous {
            service: svc_name,
            port: port_ref.clone(),
            target,
            pods: many.iter().map(|(n, a)| format!("{n} ({a})")).collect(),
        }),
    }
}

/// The pod's address for `target`, or why it has none.
fn endpoint_of(pod: &Pod, target: &IntOrString, not_ready_ok: bool) -> Result<SocketAddr, String> {
    if pod.metadata.deletion_timestamp.is_some() {
        return Err("terminating".into());
    }
    if !not_ready_ok && !is_ready(pod) {
        return Err("not ready".into());
    }
    let ip: Ipv4Addr = pod
        .status
        .as_ref()
        .and_then(|s| s.pod_ip.as_deref())
        .ok_or("no podIP")?
        .parse()
        .map_err(|_| "podIP is not IPv4")?;
    let port = match target {
        IntOrString::Int(n) => *n,
        IntOrString::String(port_name) => {
            named_port(pod, port_name).ok_or_else(|| format!("declares no port {port_name:?}"))?
        }
    };
    let port = u16::try_from(port).map_err(|_| format!("port {port} out of range"))?;
    Ok(SocketAddr::from((ip, port)))
}

/// The TCP container port named `port_name` in any of the pod's containers.
fn named_port(pod: &Pod, port_name: &str) -> Option<i32> {
    pod.spec
        .as_ref()?
        .containers
        .iter()
        .flat_map(|c| c.ports.iter().flatten())
        .find(|p| {
            p.name.as_deref() == Some(port_name) && p.protocol.as_deref().unwrap_or("TCP") == "TCP"
        })
        .map(|p| p.container_port)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{
        Container, ContainerPort, PodCondition, PodSpec, PodStatus, ServiceSpec,
    };
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use tokio::net::TcpListener;

    fn labels(pairs: &[(&str, &str)]) -> Option<BTreeMap<String, String>> {
        Some(
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        )
    }

    fn service(target: IntOrString) -> Service {
        Service {
            metadata: ObjectMeta {
                name: Some("vc-shard-0".into()),
                namespace: Some("ns".into()),
                ..ObjectMeta::default()
            },
            spec: Some(ServiceSpec {
                type_: Some("NodePort".into()),
                selector: labels(&[("shardgate.io/cluster", "vc"), ("shardgate.io/shard", "0")]),
                ports: Some(vec![
                    ServicePort {
                        name: Some("vk-n0".into()),
                        port: 6379,
                        node_port: Some(30001),
                        target_port: Some(target),
                        ..ServicePort::default()
                    },
                    ServicePort {
                        name: Some("vk-n1".into()),
                        port: 6380,
                        node_port: Some(30002),
                        target_port: Some(IntOrString::String("vk-n1".into())),
                        ..ServicePort::default()
                    },
                ]),
                ..ServiceSpec::default()
            }),
            status: None,
        }
    }

    fn pod(name: &str, node: u32, ip: &str, ready: bool) -> Pod {
        Pod {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("ns".into()),
                labels: labels(&[
                    ("shardgate.io/cluster", "vc"),
                    ("shardgate.io/shard", "0"),
                    ("shardgate.io/node", &node.to_string()),
                ]),
                ..ObjectMeta::default()
            },
            spec: Some(PodSpec {
                containers: vec![Container {
                    name: "server".into(),
                    ports: Some(vec![ContainerPort {
                        name: Some(format!("vk-n{node}")),
                        container_port: 6379,
                        ..ContainerPort::default()
                    }]),
                    ..Container::default()
                }],
                ..PodSpec::default()
            }),
            status: Some(PodStatus {
                pod_ip: Some(ip.into()),
                conditions: Some(vec![PodCondition {
                    type_: "Ready".into(),
                    status: if ready { "True" } else { "False" }.into(),
                    ..PodCondition::default()
                }]),
                ..PodStatus::default()
            }),
        }
    }

    fn named() -> Service {
        service(IntOrString::String("vk-n0".into()))
    }

    #[test]
    fn a_named_port_reaches_the_one_pod_declaring_it() {
        let pods = [
            pod("vc-0-0-0", 0, "127.0.1.1", true),
            pod("vc-0-1-0", 1, "127.0.1.2", true),
        ];
        assert_eq!(
            resolve(&named(), "vk-n0", &pods),
            Ok("127.0.1.1:6379".parse().unwrap())
        );
        assert_eq!(
            resolve(&named(), "vk-n1", &pods),
            Ok("127.0.1.2:6379".parse().unwrap())
        );
    }

    #[test]
    fn no_endpoint_names_the_selected_pods_and_why() {
        let pods = [
            pod("vc-0-0-0", 0, "127.0.1.1", false),
            pod("vc-0-1-0", 1, "127.0.1.2", true),
        ];
        let err = resolve(&named(), "vk-n0", &pods).unwrap_err();
        assert!(matches!(err, ResolveError::NoEndpoint { .. }), "{err:?}");
        let text = err.to_string();
        assert!(
            text.contains("vc-shard-0") && text.contains("vk-n0"),
            "{text}"
        );
        assert!(text.contains("vc-0-0-0 (not ready)"), "{text}");
        assert!(
            text.contains("vc-0-1-0 (declares no port \"vk-n0\")"),
            "{text}"
        );

        let err = resolve(&named(), "vk-n0", &[]).unwrap_err();
        assert!(matches!(&err, ResolveError::NoEndpoint { selected, .. } if selected.is_empty()));

        let err = resolve(&named(), "vk-n9", &pods).unwrap_err();
        assert!(matches!(err, ResolveError::NoSuchPort { .. }));
    }

    #[test]
    fn two_pods_declaring_the_port_are_refused() {
        let pods = [
            pod("a", 0, "127.0.1.1", true),
            pod("b", 0, "127.0.1.2", true),
        ];
        let err = resolve(&named(), "vk-n0", &pods).unwrap_err();
        let text = err.to_string();
        assert!(matches!(err, ResolveError::Ambiguous { .. }), "{err:?}");
        assert!(
            text.contains("a (127.0.1.1:6379)") && text.contains("b (127.0.1.2:6379)"),
            "{text}"
        );
    }

    #[test]
    fn a_numeric_target_port_is_taken_as_is() {
        let svc = service(IntOrString::Int(7000));
        let pods = [
            pod("a", 5, "127.0.1.7", true),
            pod("other", 0, "127.0.1.8", false),
        ];
        assert_eq!(
            resolve(&svc, "vk-n0", &pods),
            Ok("127.0.1.7:7000".parse().unwrap())
        );
        // Other namespaces and unmatched labels are not selected.
        let mut elsewhere = pod("b", 5, "127.0.1.9", true);
        elsewhere.metadata.namespace = Some("other".into());
        let mut unlabelled = pod("c", 5, "127.0.1.10", true);
        unlabelled.metadata.labels = None;
        assert_eq!(
            resolve(&svc, "vk-n0", &[pods[0].clone(), elsewhere, unlabelled]),
            Ok("127.0.1.7:7000".parse().unwrap())
        );
    }

    #[test]
    fn a_port_by_number_resolves_as_by_name() {
        let pods = [
            pod("vc-0-0-0", 0, "127.0.1.1", true),
            pod("vc-0-1-0", 1, "127.0.1.2", true),
        ];
        for (number, name) in [(6379, "vk-n0"), (6380, "vk-n1")] {
            assert_eq!(
                resolve_port(&named(), &PortRef::Number(number), &pods),
                resolve(&named(), name, &pods)
            );
        }
        assert_eq!(
            resolve_port(&named(), &PortRef::Number(6380), &pods),
            Ok("127.0.1.2:6379".parse().unwrap())
        );
        let err = resolve_port(&named(), &PortRef::Number(7000), &pods).unwrap_err();
        assert_eq!(err.to_string(), "service vc-shard-0: no port 7000");
        let err = resolve(&named(), "vk-n9", &pods).unwrap_err();
        assert_eq!(err.to_string(), "service vc-shard-0: no port \"vk-n9\"");
    }

    #[test]
    fn listen_addresses_follow_the_service_type() {
        let node = [Ipv4Addr::LOCALHOST];
        let svc = named();
        let addrs: Vec<SocketAddr> = listen_addresses(&svc, &node, None)
            .into_iter()
            .map(|e| e.2)
            .collect();
        assert_eq!(
            addrs,
            [
                "127.0.0.1:30001".parse().unwrap(),
                "127.0.0.1:30002".parse().unwrap()
            ]
        );
        let lb = Some(Ipv4Addr::new(127, 0, 2, 1));
        assert_eq!(listen_addresses(&svc, &node, lb).len(), 4);
        // Every node's addresses: a NodePort on each.
        let three = [
            Ipv4Addr::new(127, 0, 3, 1),
            Ipv4Addr::new(127, 0, 3, 2),
            Ipv4Addr::new(127, 0, 4, 1),
        ];
        assert_eq!(listen_addresses(&svc, &three, lb).len(), 2 * 3 + 2);
        let mut cluster_ip = named();
        cluster_ip.spec.as_mut().unwrap().type_ = Some("ClusterIP".into());
        assert!(listen_addresses(&cluster_ip, &node, None).is_empty());
    }

    // ---- the proxy against the emulator, with plain TCP echo servers as
    // pods (127.0.6.0/24 for load balancers, 127.0.7.N for pods: unique to
    // this test).

    /// An echo server standing in for a pod's container.
    async fn echo_server(ip: Ipv4Addr) -> (SocketAddr, JoinHandle<()>) {
        let listener = TcpListener::bind((ip, 0)).await.unwrap();
        let addr = listener.local_addr().unwrap();
        let task = tokio::spawn(async move {
            loop {
                let Ok((mut stream, _)) = listener.accept().await else {
                    continue;
                };
                tokio::spawn(async move {
                    let (mut r, mut w) = stream.split();
                    let _ = tokio::io::copy(&mut r, &mut w).await;
                });
            }
        });
        (addr, task)
    }

    fn pod_json(name: &str, port: u16) -> serde_json::Value {
        serde_json::json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "default",
                         "labels": {"shardgate.io/cluster": "vc", "shardgate.io/shard": "3"}},
            "spec": {"containers": [{"name": "server", "image": "valkey",
                     "ports": [{"name": "vk-n0", "containerPort": port}]}]},
        })
    }

    /// Sends `hello` through `addr`; the echo, or why not.
    async fn round_trip(addr: SocketAddr) -> std::io::Result<Vec<u8>> {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut s = TcpStream::connect(addr).await?;
        s.write_all(b"hello").await?;
        let mut buf = [0u8; 5];
        tokio::time::timeout(Duration::from_secs(5), s.read_exact(&mut buf))
            .await
            .map_err(|_| std::io::Error::other("timed out"))??;
        Ok(buf.to_vec())
    }

    async fn eventually<T>(what: &str, check: impl FnMut() -> Option<T>) -> T {
        shardgate_tests::wait::until(what, Duration::from_secs(10), check).await
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn load_balancer_and_node_port_forward_to_the_one_pod() {
        let emu = Arc::new(Emulator::builder().start().await.unwrap());
        let (backend, echo) = echo_server(Ipv4Addr::new(127, 0, 7, 1)).await;
        emu.create(pod_json("p1", backend.port())).unwrap();
        emu.set_pod_status("default", "p1", "127.0.7.1", "127.0.0.1", true)
            .unwrap();
        emu.create(serde_json::json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "vc-shard-3", "namespace": "default",
                         "labels": {"shardgate.io/shard": "3"}},
            "spec": {"type": "LoadBalancer",
                     "selector": {"shardgate.io/cluster": "vc", "shardgate.io/shard": "3"},
                     "ports": [{"name": "vk-n0", "port": 6379, "targetPort": "vk-n0"}]},
        }))
        .unwrap();
        let proxy = Proxy::start(
            emu.clone(),
            ProxyOptions {
                node_ips: vec![Ipv4Addr::LOCALHOST, Ipv4Addr::new(127, 0, 6, 201)],
                load_balancer_network: Ipv4Addr::new(127, 0, 6, 0),
                gateway_network: Ipv4Addr::new(127, 0, 11, 0),
                namespace: "default".into(),
            },
        )
        .unwrap();

        // The cloud controller's part: ingress 127.0.6.3 for shard 3.
        let lb: SocketAddr = "127.0.6.3:6379".parse().unwrap();
        eventually("the ingress", || {
            let svc = emu.get("Service", "default", "vc-shard-3")?;
            (svc["status"]["loadBalancer"]["ingress"][0]["ip"] == "127.0.6.3").then_some(())
        })
        .await;
        let svc = emu.get("Service", "default", "vc-shard-3").unwrap();
        let node_port = svc["spec"]["ports"][0]["nodePort"].as_u64().unwrap() as u16;
        let node: SocketAddr = (Ipv4Addr::LOCALHOST, node_port).into();
        let other_node: SocketAddr = (Ipv4Addr::new(127, 0, 6, 201), node_port).into();
        eventually("the listeners", || {
            let eps = proxy.endpoints();
            let has = |a| {
                eps.iter()
                    .any(|(s, p, addr)| s == "vc-shard-3" && p == "vk-n0" && *addr == a)
            };
            (has(lb) && has(node) && has(other_node)).then_some(())
        })
        .await;
        assert_eq!(round_trip(lb).await.unwrap(), b"hello");
        assert_eq!(round_trip(node).await.unwrap(), b"hello");
        assert_eq!(round_trip(other_node).await.unwrap(), b"hello");
        assert!(proxy.errors().is_empty(), "{:?}", proxy.errors());

        // A second pod declaring the same port name: refused, and said so.
        emu.create(pod_json("p2", backend.port())).unwrap();
        emu.set_pod_status("default", "p2", "127.0.7.2", "127.0.0.1", true)
            .unwrap();
        assert!(round_trip(lb).await.is_err(), "two endpoints: closed");
        let err = eventually("the refusal", || proxy.errors().pop()).await;
        assert!(err.contains("vc-shard-3") && err.contains("vk-n0"), "{err}");
        assert!(
            err.contains("p1 (127.0.7.1:") && err.contains("p2 (127.0.7.2:"),
            "{err}"
        );

        // Resolved per connection: p2 not ready, p1 is reached again.
        emu.set_pod_status("default", "p2", "127.0.7.2", "127.0.0.1", false)
            .unwrap();
        assert_eq!(round_trip(lb).await.unwrap(), b"hello");

        // The Service deleted: listeners closed.
        let client = emu.client().await.unwrap();
        kube::Api::<Service>::namespaced(client, "default")
            .delete("vc-shard-3", &Default::default())
            .await
            .unwrap();
        eventually("listeners closed", || {
            proxy.endpoints().is_empty().then_some(())
        })
        .await;
        assert!(round_trip(lb).await.is_err());
        proxy.shutdown().await;
        echo.abort();
    }
}
