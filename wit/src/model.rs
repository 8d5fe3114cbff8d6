//! The types of `wit/reconcile.wit`, as plain Rust.
//!
//! These are the types the native host passes to and receives from the wasm
//! component (with the `wasmtime` feature they derive wasmtime's lifting and
//! lowering), and the types the native build of the guest works on. One set of
//! types for both paths is what makes the differential test exact.
//!
//! Every item here mirrors the WIT item of the same (kebab-case) name; field
//! order matters to the canonical ABI and must match the WIT.

#[cfg(feature = "wasmtime")]
use wasmtime::component::{ComponentType, Lift, Lower};

/// `(key, value)`.
pub type Pair = (String, String);

/// `spec.externalAccess.serviceType`: how shard Services are exposed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(
    feature = "wasmtime",
    derive(ComponentType, Lift, Lower),
    component(enum)
)]
#[repr(u8)]
pub enum ServiceType {
    #[default]
    #[cfg_attr(feature = "wasmtime", component(name = "node-port"))]
    NodePort,
    #[cfg_attr(feature = "wasmtime", component(name = "load-balancer"))]
    LoadBalancer,
    /// Only with a gateway: the Services are internal, the Gateway is the
    /// way in.
    #[cfg_attr(feature = "wasmtime", component(name = "cluster-ip"))]
    ClusterIp,
}

/// `spec.externalAccess.externalTrafficPolicy` of the shard Services.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(
    feature = "wasmtime",
    derive(ComponentType, Lift, Lower),
    component(enum)
)]
#[repr(u8)]
pub enum TrafficPolicy {
    #[default]
    #[cfg_attr(feature = "wasmtime", component(name = "cluster"))]
    Cluster,
    #[cfg_attr(feature = "wasmtime", component(name = "local"))]
    Local,
}

/// `spec.externalAccess.preferredEndpointType`: whether nodes announce an IP
/// or a hostname.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(
    feature = "wasmtime",
    derive(ComponentType, Lift, Lower),
    component(enum)
)]
#[repr(u8)]
pub enum EndpointType {
    #[default]
    #[cfg_attr(feature = "wasmtime", component(name = "ip"))]
    Ip,
    #[cfg_attr(feature = "wasmtime", component(name = "hostname"))]
    Hostname,
}

/// An IP address. IPv4 is the address as a big-endian u32; IPv6 is the high
/// and low 64 bits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(
    feature = "wasmtime",
    derive(ComponentType, Lift, Lower),
    component(variant)
)]
pub enum IpAddress {
    #[cfg_attr(feature = "wasmtime", component(name = "v4"))]
    V4(u32),
    #[cfg_attr(feature = "wasmtime", component(name = "v6"))]
    V6((u64, u64)),
}

/// `spec.resources`: quantities as written by the user, e.g. `("cpu", "500m")`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(
    feature = "wasmtime",
    derive(ComponentType, Lift, Lower),
    component(record)
)]
pub struct Resources {
    pub requests: Vec<Pair>,
    pub limits: Vec<Pair>,
}

/// `spec.externalAccess.hostnameScope`: one announced hostname per shard
/// (`<prefix>-<shard>.<domain>`) or per node (`<prefix>-<shard>-<node>.<domain>`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(
    feature = "wasmtime",
    derive(ComponentType, Lift, Lower),
    component(enum)
)]
#[repr(u8)]
pub enum HostnameScope {
    #[default]
    #[cfg_attr(feature = "wasmtime", component(name = "shard"))]
    Shard,
    #[cfg_attr(feature = "wasmtime", component(name = "node"))]
    Node,
}

/// `spec.externalAccess.topology`: one external Service per shard (a port
/// per node) or one per node (a single port, so a LoadBalancer gives each
/// node its own address).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(
    feature = "wasmtime",
    derive(ComponentType, Lift, Lower),
    component(enum)
)]
#[repr(u8)]
pub enum ServiceTopology {
    #[default]
    #[cfg_attr(feature = "wasmtime", component(name = "per-shard"))]
    PerShard,
    #[cfg_attr(feature = "wasmtime", component(name = "per-node"))]
    PerNode,
}

impl ServiceTopology {
    /// The other topology: the one a switch comes from.
    pub fn other(self) -> Self {
        match self {
            ServiceTopology::PerShard => ServiceTopology::PerNode,
            ServiceTopology::PerNode => ServiceTopology::PerShard,
        }
    }
}

/// `spec.externalAccess.nodeAddressType`: which address of a pod's
/// Kubernetes node NodePort `ip` mode announces.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(
    feature = "wasmtime",
    derive(ComponentType, Lift, Lower),
    component(enum)
)]
#[repr(u8)]
pub enum NodeAddressType {
    #[default]
    #[cfg_attr(feature = "wasmtime", component(name = "internal-ip"))]
    InternalIp,
    #[cfg_attr(feature = "wasmtime", component(name = "external-ip"))]
    ExternalIp,
}

/// `spec.externalAccess.nodePorts`: NodePorts chosen by the user.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(
    feature = "wasmtime",
    derive(ComponentType, Lift, Lower),
    component(record)
)]
pub struct NodePorts {
    /// Node (s, n) gets `base + s * (replicas + 1) + n`.
    pub base: Option<u32>,
    /// `ports[shard][node]`.
    pub ports: Vec<Vec<u32>>,
}

/// `spec.externalAccess.gateway`: nodes are reached through a Gateway API
/// Gateway in the cluster's namespace, one route per node.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(
    feature = "wasmtime",
    derive(ComponentType, Lift, Lower),
    component(record)
)]
pub struct Gateway {
    /// `gatewayRef.name`.
    pub name: String,
    /// `gatewayRef.sectionName`.
    #[cfg_attr(feature = "wasmtime", component(name = "section-name"))]
    pub section_name: Option<String>,
    /// Node (s, n) is on listener port `base_port + s * (replicas + 1) + n`.
    #[cfg_attr(feature = "wasmtime", component(name = "base-port"))]
    pub base_port: u32,
}

/// `spec.externalAccess`: how nodes are reached from outside Kubernetes.
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(
    feature = "wasmtime",
    derive(ComponentType, Lift, Lower),
    component(record)
)]
pub struct ExternalAccess {
    pub enabled: bool,
    #[cfg_attr(feature = "wasmtime", component(name = "service-type"))]
    pub service_type: ServiceType,
    #[cfg_attr(feature = "wasmtime", component(name = "external-traffic-policy"))]
    pub external_traffic_policy: TrafficPolicy,
    #[cfg_attr(feature = "wasmtime", component(name = "service-annotations"))]
    pub service_annotations: Vec<Pair>,
    #[cfg_attr(feature = "wasmtime", component(name = "hostname-prefix"))]
    pub hostname_prefix: String,
    pub domain: Option<String>,
    #[cfg_attr(feature = "wasmtime", component(name = "preferred-endpoint-type"))]
    pub preferred_endpoint_type: EndpointType,
    #[cfg_attr(feature = "wasmtime", component(name = "hostname-scope"))]
    pub hostname_scope: HostnameScope,
    pub topology: ServiceTopology,
    #[cfg_attr(feature = "wasmtime", component(name = "node-address-type"))]
    pub node_address_type: NodeAddressType,
    #[cfg_attr(feature = "wasmtime", component(name = "node-ports"))]
    pub node_ports: Option<NodePorts>,
    #[cfg_attr(feature = "wasmtime", component(name = "load-balancer-source-ranges"))]
    pub load_balancer_source_ranges: Vec<String>,
    #[cfg_attr(feature = "wasmtime", component(name = "load-balancer-class"))]
    pub load_balancer_class: Option<String>,
    #[cfg_attr(
        feature = "wasmtime",
        component(name = "allocate-load-balancer-node-ports")
    )]
    pub allocate_load_balancer_node_ports: Option<bool>,
    /// Set `external-dns.alpha.kubernetes.io/hostname` on each Service.
    #[cfg_attr(feature = "wasmtime", component(name = "external-dns"))]
    pub external_dns: bool,
    #[cfg_attr(feature = "serde", serde(default))]
    pub gateway: Option<Gateway>,
}

impl Default for ExternalAccess {
    /// The CRD defaults, with `enabled: true`.
    fn default() -> Self {
        ExternalAccess {
            enabled: true,
            service_type: ServiceType::NodePort,
            external_traffic_policy: TrafficPolicy::Cluster,
            service_annotations: Vec::new(),
            hostname_prefix: crate::names::DEFAULT_HOSTNAME_PREFIX.to_string(),
            domain: None,
            preferred_endpoint_type: EndpointType::Ip,
            hostname_scope: HostnameScope::Shard,
            topology: ServiceTopology::PerShard,
            node_address_type: NodeAddressType::InternalIp,
            node_ports: None,
            load_balancer_source_ranges: Vec::new(),
            load_balancer_class: None,
            allocate_load_balancer_node_ports: None,
            external_dns: false,
            gateway: None,
        }
    }
}

/// `spec.users[].passwordSecret`: where a user's passwords are. The host
/// reads the Secret; only digests cross the boundary.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(
    feature = "wasmtime",
    derive(ComponentType, Lift, Lower),
    component(record)
)]
pub struct PasswordSecret {
    /// The Secret's name (the host defaults it to `<cluster>-users`).
    pub name: String,
    /// Each key holds one valid password (the host defaults them to the
    /// user's name).
    pub keys: Vec<String>,
}

/// `spec.users[].keys`: key patterns by access.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(
    feature = "wasmtime",
    derive(ComponentType, Lift, Lower),
    component(record)
)]
pub struct KeyPatterns {
    #[cfg_attr(feature = "wasmtime", component(name = "read-write"))]
    pub read_write: Vec<String>,
    #[cfg_attr(feature = "wasmtime", component(name = "read-only"))]
    pub read_only: Vec<String>,
    #[cfg_attr(feature = "wasmtime", component(name = "write-only"))]
    pub write_only: Vec<String>,
}

/// `spec.users[]`: one ACL user.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(
    feature = "wasmtime",
    derive(ComponentType, Lift, Lower),
    component(record)
)]
pub struct User {
    pub name: String,
    pub enabled: bool,
    #[cfg_attr(feature = "wasmtime", component(name = "password-secret"))]
    pub password_secret: Option<PasswordSecret>,
    /// The hex SHA-256 digest of each password the host read from
    /// `password_secret`, in key order. Passwords never cross.
    #[cfg_attr(feature = "wasmtime", component(name = "password-hashes"))]
    pub password_hashes: Vec<String>,
    pub nopass: bool,
    pub resetpass: bool,
    /// `commands.allow`: categories (`@read`), commands, `cmd|sub`.
    #[cfg_attr(feature = "wasmtime", component(name = "commands-allow"))]
    pub commands_allow: Vec<String>,
    /// `commands.deny`.
    #[cfg_attr(feature = "wasmtime", component(name = "commands-deny"))]
    pub commands_deny: Vec<String>,
    pub keys: Option<KeyPatterns>,
    /// `channels.patterns`.
    pub channels: Vec<String>,
    /// Raw ACL rules appended to the user's line.
    pub permissions: Option<String>,
}

/// `spec.persistence.reclaimPolicy`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(
    feature = "wasmtime",
    derive(ComponentType, Lift, Lower),
    component(enum)
)]
#[repr(u8)]
pub enum ReclaimPolicy {
    #[default]
    #[cfg_attr(feature = "wasmtime", component(name = "retain"))]
    Retain,
    #[cfg_attr(feature = "wasmtime", component(name = "delete"))]
    Delete,
}

/// `spec.persistence`: a volume per node.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(
    feature = "wasmtime",
    derive(ComponentType, Lift, Lower),
    component(record)
)]
pub struct Persistence {
    pub size: String,
    #[cfg_attr(feature = "wasmtime", component(name = "storage-class-name"))]
    pub storage_class_name: Option<String>,
    #[cfg_attr(feature = "wasmtime", component(name = "reclaim-policy"))]
    pub reclaim_policy: ReclaimPolicy,
}

/// How strongly pods are spread.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(
    feature = "wasmtime",
    derive(ComponentType, Lift, Lower),
    component(enum)
)]
#[repr(u8)]
pub enum Strength {
    #[default]
    #[cfg_attr(feature = "wasmtime", component(name = "disabled"))]
    Disabled,
    #[cfg_attr(feature = "wasmtime", component(name = "preferred"))]
    Preferred,
    #[cfg_attr(feature = "wasmtime", component(name = "required"))]
    Required,
}

/// `spec.scheduling.node` or `.zone`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(
    feature = "wasmtime",
    derive(ComponentType, Lift, Lower),
    component(record)
)]
pub struct SpreadSet {
    pub shard: Strength,
    pub primaries: Strength,
    pub pods: Strength,
}

/// `spec.scheduling`'s spread shorthands.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(
    feature = "wasmtime",
    derive(ComponentType, Lift, Lower),
    component(record)
)]
pub struct Scheduling {
    pub node: SpreadSet,
    pub zone: SpreadSet,
}

/// Which axis a spread keeps pods apart on.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(
    feature = "wasmtime",
    derive(ComponentType, Lift, Lower),
    component(enum)
)]
#[repr(u8)]
pub enum Axis {
    #[default]
    #[cfg_attr(feature = "wasmtime", component(name = "node"))]
    Node,
    #[cfg_attr(feature = "wasmtime", component(name = "zone"))]
    Zone,
}

/// Which pods a spread keeps apart.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(
    feature = "wasmtime",
    derive(ComponentType, Lift, Lower),
    component(enum)
)]
#[repr(u8)]
pub enum Scope {
    #[default]
    #[cfg_attr(feature = "wasmtime", component(name = "shard"))]
    Shard,
    #[cfg_attr(feature = "wasmtime", component(name = "primaries"))]
    Primaries,
    #[cfg_attr(feature = "wasmtime", component(name = "pods"))]
    Pods,
}

/// One spread for the host to render.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(
    feature = "wasmtime",
    derive(ComponentType, Lift, Lower),
    component(record)
)]
pub struct Spread {
    pub axis: Axis,
    pub scope: Scope,
    pub required: bool,
}

/// A ValkeyCluster: `metadata.name`, `metadata.namespace` and `spec`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(
    feature = "wasmtime",
    derive(ComponentType, Lift, Lower),
    component(record)
)]
pub struct Cluster {
    pub name: String,
    pub namespace: String,
    pub shards: i32,
    pub replicas: i32,
    pub image: Option<String>,
    pub resources: Option<Resources>,
    pub tls: Option<String>,
    #[cfg_attr(feature = "wasmtime", component(name = "external-access"))]
    pub external_access: Option<ExternalAccess>,
    /// `spec.users`, with the host's password digests.
    pub users: Vec<User>,
    /// `spec.config`, as written.
    pub config: Vec<Pair>,
    pub persistence: Option<Persistence>,
    /// `spec.podDisruptionBudget.mode` is `Cluster`.
    #[cfg_attr(feature = "wasmtime", component(name = "disruption-budget"))]
    pub disruption_budget: bool,
    /// The spread shorthands, the host's default filled in.
    pub scheduling: Scheduling,
}

/// One load-balancer ingress point of a shard Service.
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(
    feature = "wasmtime",
    derive(ComponentType, Lift, Lower),
    component(variant)
)]
pub enum Ingress {
    #[cfg_attr(feature = "wasmtime", component(name = "ip"))]
    Ip(IpAddress),
    #[cfg_attr(feature = "wasmtime", component(name = "hostname"))]
    Hostname(String),
}

/// A port of an existing shard Service, identified by node index.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(
    feature = "wasmtime",
    derive(ComponentType, Lift, Lower),
    component(record)
)]
pub struct ObservedPort {
    pub node: u32,
    #[cfg_attr(feature = "wasmtime", component(name = "node-port"))]
    pub node_port: u32,
}

/// An external Service as it exists in the cluster: a shard's, or with
/// `node` one node's.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(
    feature = "wasmtime",
    derive(ComponentType, Lift, Lower),
    component(record)
)]
pub struct ObservedService {
    pub shard: u32,
    #[cfg_attr(feature = "serde", serde(default))]
    pub node: Option<u32>,
    pub ports: Vec<ObservedPort>,
    pub ingress: Vec<Ingress>,
}

/// A node's Pod as it exists in the cluster.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(
    feature = "wasmtime",
    derive(ComponentType, Lift, Lower),
    component(record)
)]
pub struct ObservedPod {
    pub shard: u32,
    pub node: u32,
    #[cfg_attr(feature = "wasmtime", component(name = "host-ip"))]
    pub host_ip: Option<IpAddress>,
    /// The ExternalIP of the Kubernetes node the Pod runs on.
    #[cfg_attr(feature = "wasmtime", component(name = "node-external-ip"))]
    pub node_external_ip: Option<IpAddress>,
    pub ready: bool,
    pub outdated: bool,
}

/// A Gateway listener's protocol, as far as routes to Valkey care.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(
    feature = "wasmtime",
    derive(ComponentType, Lift, Lower),
    component(enum)
)]
#[repr(u8)]
pub enum ListenerProtocol {
    #[cfg_attr(feature = "wasmtime", component(name = "tcp"))]
    Tcp,
    #[cfg_attr(feature = "wasmtime", component(name = "tls"))]
    Tls,
    #[cfg_attr(feature = "wasmtime", component(name = "other"))]
    Other,
}

/// One of a Gateway's `spec.listeners`.
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(
    feature = "wasmtime",
    derive(ComponentType, Lift, Lower),
    component(record)
)]
pub struct Listener {
    pub name: String,
    pub port: u32,
    pub protocol: ListenerProtocol,
}

/// The Gateway a cluster's routes attach to, as it exists.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(
    feature = "wasmtime",
    derive(ComponentType, Lift, Lower),
    component(record)
)]
pub struct ObservedGateway {
    pub listeners: Vec<Listener>,
    /// `status.addresses`.
    pub addresses: Vec<Ingress>,
}

/// What the host found of the Gateway the spec names.
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(
    feature = "wasmtime",
    derive(ComponentType, Lift, Lower),
    component(variant)
)]
pub enum GatewayFound {
    /// The API server does not serve the route kind the cluster needs.
    #[cfg_attr(feature = "wasmtime", component(name = "not-served"))]
    NotServed,
    /// No Gateway of that name.
    #[cfg_attr(feature = "wasmtime", component(name = "missing"))]
    Missing,
    #[cfg_attr(feature = "wasmtime", component(name = "found"))]
    Found(ObservedGateway),
}

/// What exists now; only objects this cluster owns are included.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(
    feature = "wasmtime",
    derive(ComponentType, Lift, Lower),
    component(record)
)]
pub struct Observed {
    pub services: Vec<ObservedService>,
    pub pods: Vec<ObservedPod>,
    /// The Gateway, when the spec asks for one and the host looked.
    #[cfg_attr(feature = "serde", serde(default))]
    pub gateway: Option<GatewayFound>,
    pub valkey: Option<Vec<ValkeyNode>>,
}

/// An inclusive range of hash slots.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(
    feature = "wasmtime",
    derive(ComponentType, Lift, Lower),
    component(record)
)]
pub struct SlotRange {
    pub start: u32,
    pub end: u32,
}

/// A node, by shard and node index.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(
    feature = "wasmtime",
    derive(ComponentType, Lift, Lower),
    component(record)
)]
pub struct NodeRef {
    pub shard: u32,
    pub node: u32,
}

/// Another node as one Valkey node sees it (a line of `CLUSTER NODES`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(
    feature = "wasmtime",
    derive(ComponentType, Lift, Lower),
    component(record)
)]
pub struct Peer {
    pub id: String,
    pub failed: bool,
    /// The cluster-bus link is up and the peer is not suspected; or the
    /// host's own meet, to spread news, broke it within the last second.
    pub linked: bool,
}

/// What one Valkey node reports about itself, read by the host at its pod IP.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(
    feature = "wasmtime",
    derive(ComponentType, Lift, Lower),
    component(record)
)]
pub struct ValkeyNode {
    pub shard: u32,
    pub node: u32,
    pub id: String,
    pub primary: Option<String>,
    pub slots: Vec<SlotRange>,
    pub peers: Vec<Peer>,
    pub migrating: bool,
    pub synced: bool,
    #[cfg_attr(feature = "wasmtime", component(name = "cluster-ok"))]
    pub cluster_ok: bool,
    /// `valkey_version`, e.g. `9.0.1`; empty if unknown.
    pub version: String,
}

/// Everything `reconcile` computes from: the cluster, what is observed, and
/// the names of the other clusters in the namespace.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(
    feature = "wasmtime",
    derive(ComponentType, Lift, Lower),
    component(record)
)]
pub struct Input {
    pub cluster: Cluster,
    pub credentials: Credentials,
    pub observed: Observed,
    #[cfg_attr(feature = "wasmtime", component(name = "other-clusters"))]
    pub other_clusters: Vec<String>,
    /// NodePorts other clusters pin.
    #[cfg_attr(feature = "wasmtime", component(name = "pinned-elsewhere"))]
    #[cfg_attr(feature = "serde", serde(default))]
    pub pinned_elsewhere: Vec<PinnedPort>,
}

/// A NodePort another cluster pins.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(
    feature = "wasmtime",
    derive(ComponentType, Lift, Lower),
    component(record)
)]
pub struct PinnedPort {
    pub port: u32,
    /// `namespace/name` of the cluster that pins it.
    pub cluster: String,
}

/// The digests of the passwords the host generated and keeps in Secrets of
/// its own: the `default` user's (none when `spec.users` lists `default`)
/// and the system users' (`_operator`, `_replication`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(
    feature = "wasmtime",
    derive(ComponentType, Lift, Lower),
    component(record)
)]
pub struct Credentials {
    #[cfg_attr(feature = "wasmtime", component(name = "default-user"))]
    pub default_user: Option<String>,
    pub operator: String,
    pub replication: String,
}

/// Whether a violation rejects the spec (`Error`) or only warns.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(
    feature = "wasmtime",
    derive(ComponentType, Lift, Lower),
    component(enum)
)]
#[repr(u8)]
pub enum Severity {
    #[cfg_attr(feature = "wasmtime", component(name = "error"))]
    Error,
    #[cfg_attr(feature = "wasmtime", component(name = "warning"))]
    Warning,
}

/// A problem with the input, naming the field it concerns, e.g.
/// `spec.externalAccess.domain`.
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(
    feature = "wasmtime",
    derive(ComponentType, Lift, Lower),
    component(record)
)]
pub struct Violation {
    pub severity: Severity,
    pub field: String,
    pub message: String,
}

impl std::fmt::Display for Violation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let level = match self.severity {
            Severity::Error => "error",
            Severity::Warning => "warning",
        };
        write!(f, "{level}: {}: {}", self.field, self.message)
    }
}

/// Why `reconcile` produced nothing: every violation of severity `Error`.
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(
    feature = "wasmtime",
    derive(ComponentType, Lift, Lower),
    component(record)
)]
pub struct Error {
    pub violations: Vec<Violation>,
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (i, v) in self.violations.iter().enumerate() {
            if i > 0 {
                f.write_str("\n")?;
            }
            write!(f, "{v}")?;
        }
        Ok(())
    }
}

impl std::error::Error for Error {}

/// One port of a shard Service, for node `node` of the shard.
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(
    feature = "wasmtime",
    derive(ComponentType, Lift, Lower),
    component(record)
)]
pub struct ServicePort {
    pub node: u32,
    pub name: String,
    pub port: u32,
    #[cfg_attr(feature = "wasmtime", component(name = "node-port"))]
    pub node_port: u32,
}

/// An external Service: a shard's, exposing every node of the shard, or
/// with `node` one node's.
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(
    feature = "wasmtime",
    derive(ComponentType, Lift, Lower),
    component(record)
)]
pub struct ShardService {
    pub shard: u32,
    #[cfg_attr(feature = "serde", serde(default))]
    pub node: Option<u32>,
    pub name: String,
    #[cfg_attr(feature = "wasmtime", component(name = "service-type"))]
    pub service_type: ServiceType,
    #[cfg_attr(feature = "wasmtime", component(name = "external-traffic-policy"))]
    pub external_traffic_policy: TrafficPolicy,
    pub ports: Vec<ServicePort>,
    /// The user's annotations (templates filled in) and external-dns's.
    pub annotations: Vec<Pair>,
    #[cfg_attr(feature = "wasmtime", component(name = "load-balancer-source-ranges"))]
    pub load_balancer_source_ranges: Vec<String>,
    #[cfg_attr(feature = "wasmtime", component(name = "load-balancer-class"))]
    pub load_balancer_class: Option<String>,
    #[cfg_attr(
        feature = "wasmtime",
        component(name = "allocate-load-balancer-node-ports")
    )]
    pub allocate_load_balancer_node_ports: Option<bool>,
}

/// A route's kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(
    feature = "wasmtime",
    derive(ComponentType, Lift, Lower),
    component(enum)
)]
#[repr(u8)]
pub enum RouteKind {
    /// `TCPRoute`, for plaintext clusters.
    #[cfg_attr(feature = "wasmtime", component(name = "tcp"))]
    Tcp,
    /// `TLSRoute` (TLS passthrough, routed by SNI), for TLS clusters.
    #[cfg_attr(feature = "wasmtime", component(name = "tls"))]
    Tls,
}

/// One node's Gateway API route: it attaches to the Gateway's listener on
/// `port` and forwards to `service`'s port `service_port`, which reaches
/// only that node.
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(
    feature = "wasmtime",
    derive(ComponentType, Lift, Lower),
    component(record)
)]
pub struct Route {
    pub shard: u32,
    pub node: u32,
    /// `shardgate-<cluster>-<shard>-<node>`.
    pub name: String,
    pub kind: RouteKind,
    pub gateway: String,
    #[cfg_attr(feature = "wasmtime", component(name = "section-name"))]
    pub section_name: Option<String>,
    /// The listener port, which the node announces.
    pub port: u32,
    /// TLS routes: the SNI name.
    pub hostnames: Vec<String>,
    pub service: String,
    #[cfg_attr(feature = "wasmtime", component(name = "service-port"))]
    pub service_port: u32,
}

/// The pod template shared by every node of the cluster.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(
    feature = "wasmtime",
    derive(ComponentType, Lift, Lower),
    component(record)
)]
pub struct Workload {
    pub image: String,
    pub command: Vec<String>,
    pub resources: Option<Resources>,
    #[cfg_attr(feature = "wasmtime", component(name = "tls-secret"))]
    pub tls_secret: Option<String>,
    pub persistence: Option<Persistence>,
    /// The start-only `spec.config` settings as canonical lines; the host
    /// puts their digest on the pod template.
    #[cfg_attr(feature = "wasmtime", component(name = "restart-settings"))]
    pub restart_settings: String,
    /// The spreads to render on each pod.
    pub spreads: Vec<Spread>,
}

/// One node: `<cluster>-<shard>-<node>`. The host derives from it a
/// StatefulSet, a ConfigMap and a headless Service, all named `name`.
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(
    feature = "wasmtime",
    derive(ComponentType, Lift, Lower),
    component(record)
)]
pub struct Node {
    pub shard: u32,
    pub node: u32,
    pub name: String,
    #[cfg_attr(feature = "wasmtime", component(name = "node-name"))]
    pub node_name: String,
    #[cfg_attr(feature = "wasmtime", component(name = "port-name"))]
    pub port_name: String,
    pub config: String,
    pub announce: Vec<Pair>,
}

/// One node's external endpoint.
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(
    feature = "wasmtime",
    derive(ComponentType, Lift, Lower),
    component(record)
)]
pub struct NodeEndpoint {
    pub node: u32,
    pub host: String,
    pub port: u32,
    pub ready: bool,
    /// `host:port` answering on the announced port inside Kubernetes.
    #[cfg_attr(feature = "wasmtime", component(name = "in-cluster"))]
    #[cfg_attr(feature = "serde", serde(default))]
    pub in_cluster: String,
}

/// One entry of `status.externalEndpoints`.
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(
    feature = "wasmtime",
    derive(ComponentType, Lift, Lower),
    component(record)
)]
pub struct ShardEndpoint {
    pub shard: u32,
    #[cfg_attr(feature = "wasmtime", component(name = "node-ports"))]
    pub node_ports: Vec<u32>,
    pub nodes: Vec<NodeEndpoint>,
}

/// A status condition's `status`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(
    feature = "wasmtime",
    derive(ComponentType, Lift, Lower),
    component(enum)
)]
#[repr(u8)]
pub enum ConditionStatus {
    #[cfg_attr(feature = "wasmtime", component(name = "true"))]
    True,
    #[cfg_attr(feature = "wasmtime", component(name = "false"))]
    False,
    #[cfg_attr(feature = "wasmtime", component(name = "unknown"))]
    Unknown,
}

impl ConditionStatus {
    /// The value as Kubernetes writes it: `True`, `False` or `Unknown`.
    pub fn as_str(self) -> &'static str {
        match self {
            ConditionStatus::True => "True",
            ConditionStatus::False => "False",
            ConditionStatus::Unknown => "Unknown",
        }
    }
}

/// One entry of `status.conditions`.
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(
    feature = "wasmtime",
    derive(ComponentType, Lift, Lower),
    component(record)
)]
pub struct Condition {
    #[cfg_attr(feature = "wasmtime", component(name = "type"))]
    pub type_: String,
    pub status: ConditionStatus,
    pub reason: String,
    pub message: String,
}

/// `status.gateway`: the Gateway the routes attach to and the listener
/// ports it lacks.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(
    feature = "wasmtime",
    derive(ComponentType, Lift, Lower),
    component(record)
)]
pub struct GatewayStatus {
    pub name: String,
    #[cfg_attr(feature = "wasmtime", component(name = "missing-listeners"))]
    pub missing_listeners: Vec<u32>,
}

/// The ValkeyCluster's `status`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(
    feature = "wasmtime",
    derive(ComponentType, Lift, Lower),
    component(record)
)]
pub struct Status {
    #[cfg_attr(feature = "wasmtime", component(name = "external-endpoints"))]
    pub external_endpoints: Option<Vec<ShardEndpoint>>,
    pub conditions: Vec<Condition>,
    #[cfg_attr(feature = "serde", serde(default))]
    pub gateway: Option<GatewayStatus>,
}

/// Everything shardgate applies for one cluster: Services, nodes, status and
/// the topology plan.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(
    feature = "wasmtime",
    derive(ComponentType, Lift, Lower),
    component(record)
)]
pub struct Desired {
    pub labels: Vec<Pair>,
    pub services: Vec<ShardService>,
    /// One per node with a gateway.
    #[cfg_attr(feature = "serde", serde(default))]
    pub routes: Vec<Route>,
    pub workload: Workload,
    /// The cluster's ACL as Valkey's aclfile: one `user` line per user,
    /// system users included.
    pub acl: String,
    pub nodes: Vec<Node>,
    pub status: Status,
    pub warnings: Vec<Violation>,
    pub topology: Topology,
    /// `spec.config` settings to `CONFIG SET` live on every node.
    #[cfg_attr(feature = "wasmtime", component(name = "live-settings"))]
    pub live_settings: Vec<Pair>,
    /// The PodDisruptionBudget's `maxUnavailable`; none without one.
    #[cfg_attr(feature = "wasmtime", component(name = "disruption-budget"))]
    pub disruption_budget: Option<u32>,
}

/// `CLUSTER MEET <peer's pod IP> 6379 16379`, sent to `node`.
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(
    feature = "wasmtime",
    derive(ComponentType, Lift, Lower),
    component(record)
)]
pub struct Meet {
    pub node: NodeRef,
    pub peer: NodeRef,
}

/// `CLUSTER ADDSLOTSRANGE`, sent to `node`.
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(
    feature = "wasmtime",
    derive(ComponentType, Lift, Lower),
    component(record)
)]
pub struct AddSlots {
    pub node: NodeRef,
    pub slots: Vec<SlotRange>,
}

/// `CLUSTER REPLICATE <primary's ID>`, sent to `node`.
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(
    feature = "wasmtime",
    derive(ComponentType, Lift, Lower),
    component(record)
)]
pub struct Replicate {
    pub node: NodeRef,
    pub primary: NodeRef,
}

/// `CLUSTER MIGRATESLOTS SLOTSRANGE ... NODE <target's ID>` (Valkey 9's
/// atomic slot migration), sent to `source`.
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(
    feature = "wasmtime",
    derive(ComponentType, Lift, Lower),
    component(record)
)]
pub struct Migrate {
    pub source: NodeRef,
    pub target: NodeRef,
    pub slots: Vec<SlotRange>,
}

/// One step of bringing the Valkey cluster to the spec. The host runs a
/// plan's steps in order and stops at the first failure.
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(
    feature = "wasmtime",
    derive(ComponentType, Lift, Lower),
    component(variant)
)]
pub enum Step {
    #[cfg_attr(feature = "wasmtime", component(name = "meet"))]
    Meet(Meet),
    #[cfg_attr(feature = "wasmtime", component(name = "add-slots"))]
    AddSlots(AddSlots),
    #[cfg_attr(feature = "wasmtime", component(name = "replicate"))]
    Replicate(Replicate),
    #[cfg_attr(feature = "wasmtime", component(name = "migrate"))]
    Migrate(Migrate),
    #[cfg_attr(feature = "wasmtime", component(name = "forget"))]
    Forget(String),
    #[cfg_attr(feature = "wasmtime", component(name = "failover"))]
    Failover(NodeRef),
    #[cfg_attr(feature = "wasmtime", component(name = "restart"))]
    Restart(NodeRef),
}

/// The Valkey cluster's formation and upkeep.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(
    feature = "wasmtime",
    derive(ComponentType, Lift, Lower),
    component(record)
)]
pub struct Topology {
    pub steps: Vec<Step>,
    pub formed: bool,
    pub waiting: String,
    /// Nodes past the spec that must stay until they hand over, drain and
    /// are forgotten.
    pub departing: Vec<NodeRef>,
}
