//! The `ValkeyCluster` custom resource (`shardgate.io/v1alpha1`).
//!
//! The CRD YAML under `deploy/crds/` is generated from these types by
//! `shardgate crd`. CEL rules here reject what the API server can check on
//! its own; the guest's `validate` checks everything, with field paths.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Affinity, ResourceRequirements, Toleration, TopologySpreadConstraint,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A sharded Valkey cluster, optionally reachable from outside Kubernetes.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "shardgate.io",
    version = "v1alpha1",
    kind = "ValkeyCluster",
    plural = "valkeyclusters",
    shortname = "vkc",
    category = "shardgate",
    doc = "A sharded Valkey cluster that shardgate runs and, with spec.externalAccess, makes reachable from outside Kubernetes: one external host:port per node, announced to cluster clients. Authentication is always on (spec.users); TLS with spec.tls. status.conditions say what is Ready and why not; status.externalEndpoints lists the addresses clients use.",
    namespaced,
    status = "ValkeyClusterStatus",
    cel,
    printcolumn = r#"{"name":"State","type":"string","description":"Where the cluster is: Initializing, Reconciling, Ready, Degraded or Failed","jsonPath":".status.state"}"#,
    printcolumn = r#"{"name":"Shards","type":"string","description":"Shards whose every node is ready, of the shards the spec wants","jsonPath":".status.shardReadiness"}"#,
    printcolumn = r#"{"name":"External Access","type":"string","description":"How clients outside reach the nodes: NodePort, LoadBalancer, Gateway, or None","jsonPath":".status.externalAccessType"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#,
    printcolumn = r#"{"name":"Replicas","type":"integer","priority":1,"description":"Replicas per primary","jsonPath":".spec.replicas"}"#,
    printcolumn = r#"{"name":"Ready","type":"string","priority":1,"description":"The Ready condition's reason","jsonPath":".status.conditions[?(@.type==\"Ready\")].reason"}"#,
    printcolumn = r#"{"name":"External","type":"string","priority":1,"description":"The ExternalAccessReady condition's reason","jsonPath":".status.conditions[?(@.type==\"ExternalAccessReady\")].reason"}"#,
    validation = Rule::new("size(self.metadata.name) + size(string(self.spec.shards - 1)) + size(string(self.spec.replicas)) <= 40").message("metadata.name is too long: the node StatefulSet name shardgate-<name>-<shard>-<node> must fit 52 characters").field_path(".metadata.name"),
    validation = Rule::new("self.spec.shards * (self.spec.replicas + 1) <= 400").message("a cluster may have at most 400 nodes (shards x (replicas + 1)): the largest size proven to reconcile within the reconcile module's limits").field_path(".spec.shards"),
    validation = Rule::new("self.metadata.name.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$')").message("metadata.name must be a DNS label: it is part of Service names").field_path(".metadata.name"),
    validation = Rule::new("has(self.spec.persistence) == has(oldSelf.spec.persistence) && (!has(self.spec.persistence) || self.spec.persistence == oldSelf.spec.persistence)").message("spec.persistence cannot change once the cluster exists: a StatefulSet's volume claim templates are immutable").field_path(".spec.persistence"),
)]
#[serde(rename_all = "camelCase")]
pub struct ValkeyClusterSpec {
    /// Number of shards (primaries).
    #[serde(default = "default_shards")]
    #[schemars(range(min = 1, max = 1000))]
    pub shards: i32,
    /// Replicas per shard; each shard has 1 + replicas nodes.
    #[serde(default)]
    #[schemars(range(min = 0, max = 15))]
    pub replicas: i32,
    /// Server image. Default `valkey/valkey:9.0`; Valkey 9.0 or later is
    /// required for client-only announce ports.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// Resources of each node's server container.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<ResourceRequirements>,
    /// Serve TLS only (clients, the cluster bus and replication) with the
    /// certificate in this Secret (`tls.crt`, `tls.key`, `ca.crt`, as
    /// cert-manager writes them). The operator connects over TLS trusting
    /// `ca.crt`; a renewed certificate is loaded live, with no restart.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<TlsSpec>,
    /// Make every node reachable from outside Kubernetes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub external_access: Option<ExternalAccessSpec>,
    /// ACL users. Authentication is always on: when `default` is not listed
    /// it gets a password the operator generates into the Secret
    /// `<cluster>-users` (key `default`), and the operator's own system
    /// users (`_operator`, `_replication`) are always there.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    pub users: Vec<UserSpec>,
    /// valkey.conf settings (`maxmemory: 100mb`). Settings Valkey changes
    /// at runtime (a vetted list) are set live with `CONFIG SET`; any other
    /// change restarts the pods one at a time. Settings the operator owns
    /// (`port`, `tls-*`, `cluster-*`, `aclfile`, `dir`, `protected-mode`,
    /// the announce and replication authentication keys) are refused.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub config: BTreeMap<String, IntOrString>,
    /// Keep each node's data on a volume of its own (append-only file),
    /// so a deleted, evicted or rescheduled pod comes back with it. Set at
    /// creation: a StatefulSet's volume claim templates cannot change.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub persistence: Option<PersistenceSpec>,
    /// A PodDisruptionBudget over the cluster's pods, so a node drain
    /// takes at most one node of the cluster at a time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_disruption_budget: Option<PodDisruptionBudgetSpec>,
    /// Where the pods may run and how they are spread. Default: a shard's
    /// pods on different Kubernetes nodes where possible (`node.shard:
    /// Preferred`). A change reaches each pod when it next restarts; the
    /// operator rolls the pods one at a time for it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheduling: Option<SchedulingSpec>,
}

/// `spec.scheduling`, in upstream valkey-operator's shape.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SchedulingSpec {
    /// Copied onto every pod.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tolerations: Vec<Toleration>,
    /// Copied onto every pod.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub node_selector: BTreeMap<String, String>,
    /// Copied onto every pod; the spreads below are added to it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub affinity: Option<Affinity>,
    /// Copied onto every pod; the spreads below are added to them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub topology_spread_constraints: Vec<TopologySpreadConstraint>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority_class_name: Option<String>,
    /// Spreads across Kubernetes nodes (`kubernetes.io/hostname`). Default,
    /// when `node` is absent: `shard: Preferred`; a `node` that is given
    /// starts from all `Disabled`.
    #[serde(default = "default_node_spread")]
    pub node: SpreadSpec,
    /// Spreads across zones (`topology.kubernetes.io/zone`).
    #[serde(default)]
    pub zone: SpreadSpec,
}

impl Default for SchedulingSpec {
    /// As an absent `spec.scheduling` reads: `node.shard: Preferred`.
    fn default() -> Self {
        SchedulingSpec {
            tolerations: Vec::new(),
            node_selector: BTreeMap::new(),
            affinity: None,
            topology_spread_constraints: Vec::new(),
            priority_class_name: None,
            node: default_node_spread(),
            zone: SpreadSpec::default(),
        }
    }
}

fn default_node_spread() -> SpreadSpec {
    SpreadSpec {
        shard: Strength::Preferred,
        ..SpreadSpec::default()
    }
}

/// Which pods to keep apart on one axis. Two of one strength on an axis
/// are refused.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SpreadSpec {
    /// A shard's pods apart from each other.
    #[serde(default)]
    pub shard: Strength,
    /// The node-index-0 pods (each shard's first primary) apart.
    #[serde(default)]
    pub primaries: Strength,
    /// Every pod of the cluster apart.
    #[serde(default)]
    pub pods: Strength,
}

/// How strongly to spread: not at all, where possible, or always (a pod
/// that cannot be placed so stays Pending).
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum Strength {
    #[default]
    Disabled,
    Preferred,
    Required,
}

/// `spec.persistence`, in upstream valkey-operator's shape.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PersistenceSpec {
    /// Each node's volume size, a quantity (`1Gi`).
    pub size: String,
    /// The StorageClass; default: the cluster's default class.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage_class_name: Option<String>,
    /// What happens to a node's volume when the node is removed or the
    /// cluster deleted: kept (`Retain`, the default) or deleted.
    #[serde(default)]
    pub reclaim_policy: ReclaimPolicy,
}

/// `spec.persistence.reclaimPolicy`.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum ReclaimPolicy {
    #[default]
    Retain,
    Delete,
}

/// `spec.podDisruptionBudget`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PodDisruptionBudgetSpec {
    #[serde(default)]
    pub mode: DisruptionBudgetMode,
}

/// `Cluster` (the default): one PodDisruptionBudget with `maxUnavailable: 1`
/// over every pod of the cluster. `Disabled`: none.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum DisruptionBudgetMode {
    #[default]
    Cluster,
    Disabled,
}

/// `spec.users[]`: one ACL user, in upstream valkey-operator's shape.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct UserSpec {
    /// The user name; names starting with `_` are reserved.
    #[schemars(length(min = 1, max = 128))]
    pub name: String,
    /// Whether the user may log in.
    #[serde(default = "enabled_by_default")]
    pub enabled: bool,
    /// Where the user's passwords are. Default: Secret `<cluster>-users`,
    /// key = the user name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub password_secret: Option<PasswordSecretSpec>,
    /// Log in with any password (refused while external access is on).
    #[serde(default)]
    pub nopass: bool,
    /// Clear passwords before setting them.
    #[serde(default)]
    pub resetpass: bool,
    /// Commands and categories allowed and denied.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub commands: Option<CommandsSpec>,
    /// Key patterns by access.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keys: Option<KeysSpec>,
    /// Pub/sub channel patterns.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub channels: Option<ChannelsSpec>,
    /// Raw ACL rules appended to the user's rules.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub permissions: Option<String>,
}

fn enabled_by_default() -> bool {
    true
}

/// `spec.users[].passwordSecret`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PasswordSecretSpec {
    /// The Secret's name. Default `<cluster>-users`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Keys whose values are valid passwords; several allow a rotation
    /// without downtime. Default: the user name.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub keys: Vec<String>,
}

/// `spec.users[].commands`: `@category`, `command` or `command|subcommand`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CommandsSpec {
    /// Allowed, as `+<entry>` (`@read`, `get`, `config|get`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allow: Vec<String>,
    /// Denied after the allowed ones, as `-<entry>`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub deny: Vec<String>,
}

/// `spec.users[].keys`: glob patterns.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KeysSpec {
    /// Keys the user may read and write (`~<pattern>`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub read_write: Vec<String>,
    /// Keys the user may only read (`%R~<pattern>`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub read_only: Vec<String>,
    /// Keys the user may only write (`%W~<pattern>`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub write_only: Vec<String>,
}

/// `spec.users[].channels`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ChannelsSpec {
    /// Channels the user may publish and subscribe to (`&<pattern>`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub patterns: Vec<String>,
}

fn default_shards() -> i32 {
    3
}

/// `spec.tls`: the Secret holding the server's certificate.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TlsSpec {
    /// Name of a Secret in the cluster's namespace.
    pub secret_name: String,
}

/// External access: one Service per shard with one port per node, and each
/// node announcing that endpoint to clients.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
#[x_kube(
    validation = Rule::new("!self.enabled || self.preferredEndpointType != 'hostname' || (has(self.domain) && self.domain != '')").message("domain is required when preferredEndpointType is hostname").field_path(".domain").reason(Reason::FieldValueRequired),
)]
pub struct ExternalAccessSpec {
    #[serde(default)]
    pub enabled: bool,
    /// How the Services are exposed. Default: `NodePort`, or `ClusterIP`
    /// with a gateway.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_type: Option<ServiceType>,
    #[serde(default)]
    pub external_traffic_policy: TrafficPolicy,
    /// Annotations for every shard Service (e.g. for a cloud load
    /// balancer). In values, `{shard}` is the shard's index and
    /// `{hostname}` the hostnames the Service serves (comma-separated).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub service_annotations: BTreeMap<String, String>,
    /// Announced hostnames are `<hostnamePrefix>-<shard>.<domain>`, or
    /// `<hostnamePrefix>-<shard>-<node>.<domain>` with `hostnameScope: Node`.
    #[serde(default = "default_hostname_prefix")]
    #[x_kube(validation = Rule::new("self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$')").message("hostnamePrefix must be a DNS label"))]
    #[schemars(length(min = 1, max = 58))]
    pub hostname_prefix: String,
    /// DNS domain of the announced hostnames. Without it no hostname is
    /// announced (except a hostname-only load balancer's own).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$')").message("domain must be a valid DNS name"))]
    #[schemars(length(min = 1, max = 240))]
    pub domain: Option<String>,
    #[serde(default)]
    pub preferred_endpoint_type: EndpointType,
    /// One announced hostname per shard (default) or per node (for per-node
    /// certificates and TLS SNI routing).
    #[serde(default)]
    pub hostname_scope: HostnameScope,
    /// One Service per shard with a port per node (default), or one per
    /// node with a single port, so a LoadBalancer gives each node its own
    /// address. Changing it on a live cluster keeps every client working:
    /// the new Services are made and announced before the old ones go.
    #[serde(default)]
    pub topology: ServiceTopology,
    /// After a topology change, how long the old Services stay once every
    /// node announces its new endpoint: clients that refresh their view of
    /// the cluster periodically (go-redis every 10 s, valkey-glide every
    /// 60 s) move to the new endpoints meanwhile. A client that learns
    /// addresses only from redirects must be given a new seed endpoint.
    #[serde(default = "default_switch_grace")]
    #[schemars(range(max = 3600))]
    pub switch_grace_period_seconds: u32,
    /// Which address of a pod's Kubernetes node NodePort `ip` mode
    /// announces: `InternalIP` (default) or `ExternalIP` (on clouds whose
    /// InternalIP is private).
    #[serde(default)]
    pub node_address_type: NodeAddressType,
    /// NodePorts chosen by you (for firewall rules) instead of allocated:
    /// `base` (node (s, n) gets `base + s*(replicas+1) + n`) or `ports`
    /// (`ports[shard][node]`). Each in 30000-32767, none twice.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_ports: Option<NodePortsSpec>,
    /// LoadBalancer only: the client CIDR blocks the load balancers admit.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub load_balancer_source_ranges: Vec<String>,
    /// LoadBalancer only: the load-balancer implementation to use.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub load_balancer_class: Option<String>,
    /// LoadBalancer only: whether the Services also get NodePorts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allocate_load_balancer_node_ports: Option<bool>,
    /// Set `external-dns.alpha.kubernetes.io/hostname` on each Service to
    /// the hostnames it serves (needs `domain`).
    #[serde(default, rename = "externalDNS")]
    pub external_dns: bool,
    /// Reach every node through a Gateway API Gateway instead (one
    /// TCPRoute per node; a TLSRoute, routed by SNI, for a TLS cluster):
    /// node (s, n) is announced at the Gateway's address on port
    /// `basePort + s*(replicas+1) + n`, which must be one of its listeners.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gateway: Option<GatewaySpec>,
}

impl ExternalAccessSpec {
    /// `serviceType`, defaulted: `ClusterIP` with a gateway, else `NodePort`.
    pub fn service_type(&self) -> ServiceType {
        self.service_type.unwrap_or(match self.gateway {
            Some(_) => ServiceType::ClusterIp,
            None => ServiceType::NodePort,
        })
    }
}

/// `spec.externalAccess.gateway`, in upstream valkey-operator's shape.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GatewaySpec {
    /// The Gateway, in the cluster's namespace; it is yours, with a
    /// listener per node (TCP, or TLS passthrough for a TLS cluster).
    pub gateway_ref: GatewayRef,
    /// Node (s, n)'s listener port is `basePort + s*(replicas+1) + n`.
    #[schemars(range(min = 1, max = 65535))]
    pub base_port: i32,
}

/// The Gateway every route of the cluster attaches to.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GatewayRef {
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
    /// One listener of the Gateway. A listener has one port, so only a
    /// one-node cluster can use it; otherwise leave it unset and each
    /// route attaches to the listener on its node's port.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub section_name: Option<String>,
}

/// `spec.externalAccess.nodePorts`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodePortsSpec {
    /// Node (s, n) gets `base + s*(replicas+1) + n`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 30000, max = 32767))]
    pub base: Option<i32>,
    /// `ports[shard][node]`: each node's NodePort.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ports: Vec<Vec<i32>>,
}

/// `spec.externalAccess.hostnameScope`.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum HostnameScope {
    #[default]
    Shard,
    Node,
}

/// `spec.externalAccess.topology`.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum ServiceTopology {
    #[default]
    PerShard,
    PerNode,
}

/// `spec.externalAccess.nodeAddressType`.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum NodeAddressType {
    #[default]
    #[serde(rename = "InternalIP")]
    InternalIp,
    #[serde(rename = "ExternalIP")]
    ExternalIp,
}

impl Default for ExternalAccessSpec {
    /// The CRD's defaults (external access off).
    fn default() -> Self {
        ExternalAccessSpec {
            enabled: false,
            service_type: None,
            external_traffic_policy: TrafficPolicy::default(),
            service_annotations: BTreeMap::new(),
            hostname_prefix: default_hostname_prefix(),
            domain: None,
            preferred_endpoint_type: EndpointType::default(),
            hostname_scope: HostnameScope::default(),
            topology: ServiceTopology::default(),
            switch_grace_period_seconds: default_switch_grace(),
            node_address_type: NodeAddressType::default(),
            node_ports: None,
            load_balancer_source_ranges: Vec::new(),
            load_balancer_class: None,
            allocate_load_balancer_node_ports: None,
            external_dns: false,
            gateway: None,
        }
    }
}

/// `spec.externalAccess.switchGracePeriodSeconds`' default.
pub const DEFAULT_SWITCH_GRACE_SECONDS: u32 = 120;

fn default_switch_grace() -> u32 {
    DEFAULT_SWITCH_GRACE_SECONDS
}

fn default_hostname_prefix() -> String {
    shardgate_contract::names::DEFAULT_HOSTNAME_PREFIX.to_string()
}

/// How the shard Services are exposed: a NodePort on every Kubernetes node,
/// a cloud load balancer per shard, or (only with a gateway, which is then
/// the way in) not at all.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum ServiceType {
    #[default]
    NodePort,
    LoadBalancer,
    #[serde(rename = "ClusterIP")]
    ClusterIp,
}

/// The shard Services' `externalTrafficPolicy`. `Local` keeps the client's
/// source IP but drops traffic that reaches a node without the pod.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum TrafficPolicy {
    #[default]
    Cluster,
    Local,
}

/// What clients are told to connect to: the node's IP, or its hostname.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum EndpointType {
    #[default]
    Ip,
    Hostname,
}

/// What the operator last saw and did: every node's external endpoint, and
/// the conditions (`Ready`, `Progressing`, `Degraded`, `ExternalAccessReady`).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ValkeyClusterStatus {
    /// One entry per shard, in shard order; absent when external access is off.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["shardIndex"]))]
    pub external_endpoints: Option<Vec<ShardEndpointStatus>>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// One word for where the cluster is: `Initializing` (never Ready
    /// yet), `Reconciling` (changing to the spec), `Ready`, `Degraded`
    /// (the last reconcile failed) or `Failed` (the spec is refused).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<ClusterState>,
    /// Shards in the spec.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shards: Option<i32>,
    /// Shards whose every node is ready.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready_shards: Option<i32>,
    /// `readyShards/shards` in one string, e.g. `2/3`: the `Shards` column
    /// of `kubectl get vkc`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shard_readiness: Option<String>,
    /// How clients outside Kubernetes reach the nodes, as the spec says:
    /// `NodePort`, `LoadBalancer` or `ClusterIP` (the shard Services'
    /// type), `Gateway` (`externalAccess.gateway`), or `None` (external
    /// access off).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub external_access_type: Option<ExternalAccessType>,
    /// With a gateway: the Gateway and the listener ports it lacks (the
    /// nodes behind them are not announced).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gateway: Option<GatewayStatus>,
}

/// `status.gateway`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GatewayStatus {
    #[serde(default)]
    pub name: String,
    /// Listener ports the routes need and the Gateway does not have.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub missing_listeners: Vec<i32>,
}

/// `status.externalAccessType`.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum ExternalAccessType {
    NodePort,
    LoadBalancer,
    #[serde(rename = "ClusterIP")]
    ClusterIp,
    Gateway,
    None,
}

impl ExternalAccessType {
    /// How `external_access` (a cluster's `spec.externalAccess`) exposes
    /// the nodes.
    pub fn of(external_access: Option<&ExternalAccessSpec>) -> Self {
        match external_access {
            None => ExternalAccessType::None,
            Some(ea) if !ea.enabled => ExternalAccessType::None,
            Some(ea) if ea.gateway.is_some() => ExternalAccessType::Gateway,
            Some(ea) => match ea.service_type.unwrap_or_default() {
                ServiceType::NodePort => ExternalAccessType::NodePort,
                ServiceType::LoadBalancer => ExternalAccessType::LoadBalancer,
                ServiceType::ClusterIp => ExternalAccessType::ClusterIp,
            },
        }
    }
}

/// `status.state`.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum ClusterState {
    Initializing,
    Reconciling,
    Ready,
    Degraded,
    Failed,
}

/// One shard's external endpoints.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ShardEndpointStatus {
    pub shard_index: i32,
    /// `nodePorts[i]` is node i's external port: the allocated NodePort (0
    /// until allocated) or the LoadBalancer's Service port.
    pub node_ports: Vec<i32>,
    /// Where each node is reached from outside, and whether it is ready.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub nodes: Vec<NodeEndpointStatus>,
}

/// One node's external endpoint.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeEndpointStatus {
    pub node_index: i32,
    /// Hostname or IP an outside client uses; empty while unknown.
    #[serde(default)]
    pub host: String,
    /// External port; 0 while unknown.
    #[serde(default)]
    pub port: i32,
    pub ready: bool,
    /// `host:port` answering on the same port from inside Kubernetes (split
    /// horizon): the load balancer Service's DNS name, or the pod's node
    /// InternalIP and NodePort.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub in_cluster: String,
}
