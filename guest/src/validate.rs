//! Validation of a cluster spec. Every violation names the field it concerns.

use crate::syntax;
use shardgate_contract::model::{
    Cluster, EndpointType, ExternalAccess, HostnameScope, Input, NodeAddressType, NodePorts,
    ServiceTopology, ServiceType, Severity, TrafficPolicy, Violation,
};
use shardgate_contract::{auth, names};

/// Most shards a cluster may have (Valkey advises against more than about a
/// thousand nodes per cluster).
pub const MAX_SHARDS: i32 = 1000;
/// Most replicas per shard.
pub const MAX_REPLICAS: i32 = 15;
/// Most nodes (`shards x (replicas + 1)`) a cluster may have: what is
/// proven to reconcile within the module's limits with room to spare. The
/// guest's input holds every node's view of every peer, so it grows with
/// the square of the node count: 600 nodes took 27.5 MiB and 0.54 s of the
/// 64 MiB and 1 s a call may use, 1,000 nodes passed the memory cap
/// (`cargo bench -p shardgate --bench size_limits`, docs/reliability.md).
pub const MAX_NODES: i64 = 400;
/// Ports in Kubernetes' default NodePort range (30000-32767).
pub const DEFAULT_NODE_PORT_RANGE: u64 = 2768;
/// The default NodePort range, which pins must lie in.
pub const NODE_PORT_MIN: u32 = 30000;
pub const NODE_PORT_MAX: u32 = 32767;
/// The API server's limit on the total size of an object's annotations.
pub const MAX_ANNOTATIONS_BYTES: usize = 256 * 1024;

/// Every error and warning for `cluster`, in a fixed order.
/// `other_clusters` are the other ValkeyClusters of the namespace.
pub fn validate(cluster: &Cluster, other_clusters: &[String]) -> Vec<Violation> {
    let mut out = Findings::default();
    check_name(cluster, &mut out);
    check_size(cluster, &mut out);
    check_workload(cluster, &mut out);
    check_external_access(cluster, &mut out);
    check_users(cluster, &mut out);
    if out.errors == 0 {
        check_collisions(cluster, other_clusters, &mut out);
    }
    out.list
}

/// True if any violation is an error.
pub fn has_errors(violations: &[Violation]) -> bool {
    violations.iter().any(|v| v.severity == Severity::Error)
}

#[derive(Default)]
struct Findings {
    list: Vec<Violation>,
    errors: usize,
}

impl Findings {
    fn error(&mut self, field: impl Into<String>, message: impl Into<String>) {
        self.errors += 1;
        self.list.push(Violation {
            severity: Severity::Error,
            field: field.into(),
            message: message.into(),
        });
    }

    fn warning(&mut self, field: impl Into<String>, message: impl Into<String>) {
        self.list.push(Violation {
            severity: Severity::Warning,
            field: field.into(),
            message: message.into(),
        });
    }
}

/// Nodes per shard, once `replicas` is known to be valid.
fn nodes_per_shard(cluster: &Cluster) -> u32 {
    cluster.replicas.clamp(0, MAX_REPLICAS) as u32 + 1
}

fn check_name(cluster: &Cluster, out: &mut Findings) {
    let name = &cluster.name;
    if !syntax::is_dns_label(name) {
        out.error(
            "metadata.name",
            format!(
                "{name:?} must be a DNS label (lowercase letters, digits and '-', starting and \
                 ending with a letter or digit) because it is part of Service names"
            ),
        );
        return;
    }
    if !(1..=MAX_SHARDS).contains(&cluster.shards)
        || !(0..=MAX_REPLICAS).contains(&cluster.replicas)
    {
        return; // lengths depend on valid counts; those errors are reported below
    }
    let last_shard = cluster.shards as u32 - 1;
    let last_node = nodes_per_shard(cluster) - 1;
    let service = names::shard_service(name, last_shard);
    if service.len() > syntax::MAX_LABEL {
        out.error(
            "metadata.name",
            format!(
                "is too long: the shard Service name {service:?} has {} characters, more than \
                 the {} allowed",
                service.len(),
                syntax::MAX_LABEL
            ),
        );
    }
    let node = names::node_object(name, last_shard, last_node);
    if node.len() > syntax::MAX_STATEFULSET_NAME {
        out.error(
            "metadata.name",
            format!(
                "is too long: the node StatefulSet name {node:?} has {} characters, more than \
                 the {} allowed (its pods' controller-revision-hash label must fit 63)",
                node.len(),
                syntax::MAX_STATEFULSET_NAME
            ),
        );
    }
}

fn check_size(cluster: &Cluster, out: &mut Findings) {
    if cluster.shards < 1 {
        out.error(
            "spec.shards",
            format!("must be at least 1, got {}", cluster.shards),
        );
    } else if cluster.shards > MAX_SHARDS {
        out.error(
            "spec.shards",
            format!("must be at most {MAX_SHARDS}, got {}", cluster.shards),
        );
    }
    if cluster.replicas < 0 {
        out.error(
            "spec.replicas",
            format!("must not be negative, got {}", cluster.replicas),
        );
    } else if cluster.replicas > MAX_REPLICAS {
        out.error(
            "spec.replicas",
            format!(
                "must be at most {MAX_REPLICAS} per shard, got {}",
                cluster.replicas
            ),
        );
    }
    let nodes = i64::from(cluster.shards) * (i64::from(cluster.replicas) + 1);
    if (1..=MAX_SHARDS).contains(&cluster.shards)
        && (0..=MAX_REPLICAS).contains(&cluster.replicas)
        && nodes > MAX_NODES
    {
        out.error(
            "spec.shards",
            format!(
                "a cluster may have at most {MAX_NODES} nodes (shards x (replicas + 1)), \
                 got {} x {} = {nodes}: the largest size proven to reconcile within the \
                 reconcile module's limits",
                cluster.shards,
                cluster.replicas + 1
            ),
        );
    }
}

fn check_workload(cluster: &Cluster, out: &mut Findings) {
    if let Some(image) = &cluster.image
        && (image.is_empty() || image.chars().any(char::is_whitespace))
    {
        out.error(
            "spec.image",
            format!("{image:?} is not a container image reference"),
        );
    }
    if let Some(secret) = &cluster.tls
        && !syntax::is_dns_subdomain(secret)
    {
        out.error(
            "spec.tls.secretName",
            format!("{secret:?} is not a valid Secret name"),
        );
    }
    if let Some(resources) = &cluster.resources {
        for (section, list) in [
            ("requests", &resources.requests),
            ("limits", &resources.limits),
        ] {
            for (key, value) in list {
                let field = format!("spec.resources.{section}.{key}");
                if !syntax::is_qualified_name(key) {
                    out.error(&field, format!("{key:?} is not a valid resource name"));
                }
                if !is_quantity(value) {
                    out.error(
                        field,
                        format!("{value:?} is not a quantity (e.g. 500m, 1Gi)"),
                    );
                }
            }
        }
    }
    if let Some(p) = &cluster.persistence {
        if !is_quantity(&p.size) || p.size.starts_with(['-', '+', '0']) {
            out.error(
                "spec.persistence.size",
                format!("{:?} is not a volume size (e.g. 1Gi)", p.size),
            );
        }
        if let Some(class) = &p.storage_class_name
            && !syntax::is_dns_subdomain(class)
        {
            out.error(
                "spec.persistence.storageClassName",
                format!("{class:?} is not a valid StorageClass name"),
            );
        }
    }
    for (field, message) in crate::placement::check(&cluster.scheduling) {
        out.error(field, message);
    }
    for (key, value) in &cluster.config {
        if let Some(why) = crate::settings::refusal(key, value) {
            out.error(format!("spec.config.{key}"), why);
        }
    }
}

fn check_external_access(cluster: &Cluster, out: &mut Findings) {
    let Some(ea) = &cluster.external_access else {
        return;
    };
    const EA: &str = "spec.externalAccess";
    let mut domain_ok = true;
    if let Some(domain) = &ea.domain
        && !syntax::is_dns_subdomain(domain)
    {
        domain_ok = false;
        out.error(
            format!("{EA}.domain"),
            format!("{domain:?} is not a valid DNS name (lowercase labels separated by dots)"),
        );
    }
    let mut prefix_ok = true;
    if !syntax::is_dns_label(&ea.hostname_prefix) {
        prefix_ok = false;
        out.error(
            format!("{EA}.hostnamePrefix"),
            format!("{:?} is not a DNS label", ea.hostname_prefix),
        );
    }
    if (1..=MAX_SHARDS).contains(&cluster.shards) && prefix_ok {
        let last = cluster.shards as u32 - 1;
        let last_node = nodes_per_shard(cluster).saturating_sub(1);
        let node_part = match ea.hostname_scope {
            HostnameScope::Shard => 0,
            HostnameScope::Node => 1 + syntax::digits(last_node),
        };
        let label = ea.hostname_prefix.len() + 1 + syntax::digits(last) + node_part;
        if label > syntax::MAX_LABEL {
            out.error(
                format!("{EA}.hostnamePrefix"),
                format!(
                    "is too long: the hostname label \"{}-{last}\" has {label} characters, more \
                     than {}",
                    ea.hostname_prefix,
                    syntax::MAX_LABEL
                ),
            );
        } else if let Some(domain) = ea.domain.as_deref().filter(|_| domain_ok) {
            let host = match ea.hostname_scope {
                HostnameScope::Shard => names::announce_hostname(&ea.hostname_prefix, last, domain),
                HostnameScope::Node => {
                    names::node_hostname(&ea.hostname_prefix, last, last_node, domain)
                }
            };
            if host.len() > syntax::MAX_DNS_NAME {
                out.error(
                    format!("{EA}.domain"),
                    format!(
                        "is too long: the hostname {host:?} has {} characters, more than {}",
                        host.len(),
                        syntax::MAX_DNS_NAME
                    ),
                );
            }
        }
    }
    let mut annotation_bytes = 0;
    for (key, value) in &ea.service_annotations {
        annotation_bytes += key.len() + value.len();
        if !syntax::is_qualified_name(key) {
            out.error(
                format!("{EA}.serviceAnnotations[{key:?}]"),
                "is not a valid annotation key (an optional DNS prefix and '/', then up to 63 \
                 characters of [A-Za-z0-9._-])",
            );
        }
        if value.contains(crate::services::TEMPLATE_NODE)
            && ea.topology == ServiceTopology::PerShard
        {
            out.error(
                format!("{EA}.serviceAnnotations[{key:?}]"),
                "{node} needs topology PerNode: with PerShard each Service serves a whole \
                 shard; use {shard} or {hostname}",
            );
        }
    }
    if annotation_bytes > MAX_ANNOTATIONS_BYTES {
        out.error(
            format!("{EA}.serviceAnnotations"),
            format!("total size {annotation_bytes} bytes exceeds {MAX_ANNOTATIONS_BYTES}"),
        );
    }
    if !ea.enabled {
        return;
    }
    if ea.preferred_endpoint_type == EndpointType::Hostname && ea.domain.is_none() {
        out.error(
            format!("{EA}.domain"),
            "is required when preferredEndpointType is hostname",
        );
    }
    if ea.external_traffic_policy == TrafficPolicy::Local
        && let Some(why) = local_policy_drops(ea)
    {
        out.warning(format!("{EA}.externalTrafficPolicy"), why);
    }
    check_exposure_options(cluster, ea, out);
    check_gateway(cluster, ea, out);
    if ea.service_type == ServiceType::NodePort && (1..=MAX_SHARDS).contains(&cluster.shards) {
        let ports = cluster.shards as u64 * nodes_per_shard(cluster) as u64;
        if ports > DEFAULT_NODE_PORT_RANGE / 2 {
            out.warning(
                format!("{EA}.serviceType"),
                format!(
                    "NodePort needs {ports} NodePorts; the default range has \
                     {DEFAULT_NODE_PORT_RANGE} for the whole Kubernetes cluster"
                ),
            );
        }
    }
}

/// Why `externalTrafficPolicy: Local` drops traffic in this mode, if it
/// does. Each Service port has exactly one pod, and `Local` serves a port
/// only on the Kubernetes node that runs it. NodePort `ip` mode announces
/// that very node's address, so every client lands there and `Local` works
/// (and keeps the client's source IP); a load balancer or a hostname may
/// send a client to any node.
pub fn local_policy_drops(ea: &ExternalAccess) -> Option<&'static str> {
    if ea.gateway.is_some() {
        // The Gateway forwards to the Services from inside the cluster.
        return None;
    }
    match (ea.service_type, ea.preferred_endpoint_type) {
        (ServiceType::NodePort, EndpointType::Ip) => None,
        // No external traffic: refused without a gateway.
        (ServiceType::ClusterIp, _) => None,
        // A node's own load balancer health-checks its one pod's node only.
        (ServiceType::LoadBalancer, _) if ea.topology == ServiceTopology::PerNode => None,
        (ServiceType::NodePort, EndpointType::Hostname) => Some(
            "Local serves a port only on the Kubernetes node that runs its pod, and an \
             announced hostname may resolve to any node: traffic reaching another node is \
             dropped. Use Local with hostnames only if each hostname resolves to the node \
             running its pod; NodePort ip mode needs no such care",
        ),
        (ServiceType::LoadBalancer, _) => Some(
            "Local serves a port only on the Kubernetes node that runs its pod, and the load \
             balancer spreads a shard's traffic over every node with one of the shard's pods: \
             traffic for a node's port that lands on another node is dropped",
        ),
    }
}

/// `nodePorts`, `nodeAddressType`, `hostnameScope`, `externalDNS` and the
/// load-balancer settings.
fn check_exposure_options(cluster: &Cluster, ea: &ExternalAccess, out: &mut Findings) {
    const EA: &str = "spec.externalAccess";
    let node_port = ea.service_type == ServiceType::NodePort;
    if let Some(pins) = &ea.node_ports {
        check_node_ports(cluster, pins, out);
    }
    if ea.node_address_type == NodeAddressType::ExternalIp
        && (!node_port || ea.preferred_endpoint_type == EndpointType::Hostname)
    {
        out.warning(
            format!("{EA}.nodeAddressType"),
            "only NodePort ip mode announces a node address; it has no effect here",
        );
    }
    if ea.topology == ServiceTopology::PerNode
        && !node_port
        && ea.preferred_endpoint_type == EndpointType::Hostname
        && ea.hostname_scope == HostnameScope::Shard
    {
        out.error(
            format!("{EA}.hostnameScope"),
            "must be Node with topology PerNode, serviceType LoadBalancer and hostname \
             endpoints: each node has its own load balancer, so one hostname per shard \
             cannot name them all",
        );
    }
    if ea.hostname_scope == HostnameScope::Node && ea.domain.is_none() {
        out.warning(
            format!("{EA}.hostnameScope"),
            "has no effect without domain: no hostname is announced",
        );
    }
    if ea.external_dns && ea.domain.is_none() {
        out.error(
            format!("{EA}.externalDNS"),
            "needs domain: external-dns is given the announced hostnames",
        );
    }
    for (i, range) in ea.load_balancer_source_ranges.iter().enumerate() {
        if !syntax::is_cidr(range) {
            out.error(
                format!("{EA}.loadBalancerSourceRanges[{i}]"),
                format!("{range:?} is not a CIDR block such as 203.0.113.0/24"),
            );
        }
    }
    if let Some(class) = &ea.load_balancer_class
        && !syntax::is_qualified_name(class)
    {
        out.error(
            format!("{EA}.loadBalancerClass"),
            format!("{class:?} is not a valid class name (e.g. example.com/lb)"),
        );
    }
    if ea.service_type != ServiceType::LoadBalancer {
        for (set, field) in [
            (
                !ea.load_balancer_source_ranges.is_empty(),
                "loadBalancerSourceRanges",
            ),
            (ea.load_balancer_class.is_some(), "loadBalancerClass"),
            (
                ea.allocate_load_balancer_node_ports.is_some(),
                "allocateLoadBalancerNodePorts",
            ),
        ] {
            if set {
                out.warning(
                    format!("{EA}.{field}"),
                    "applies to serviceType LoadBalancer only; it has no effect here",
                );
            }
        }
    }
}

/// `gateway` and what goes with it: `serviceType: ClusterIP` only behind
/// a Gateway; a listener port per node that fits in 1-65535; a section
/// name only for a one-node cluster (a listener has one port); and a TLS
/// cluster reached by each node's own hostname, which its TLSRoute
/// matches (SNI).
fn check_gateway(cluster: &Cluster, ea: &ExternalAccess, out: &mut Findings) {
    const EA: &str = "spec.externalAccess";
    let Some(gw) = &ea.gateway else {
        if ea.service_type == ServiceType::ClusterIp {
            out.error(
                format!("{EA}.serviceType"),
                "ClusterIP makes no external endpoint: it is for a gateway, which is then the                  only way in (set gateway, or use NodePort or LoadBalancer)",
            );
        }
        return;
    };
    const GW: &str = "spec.externalAccess.gateway";
    if !syntax::is_dns_subdomain(&gw.name) {
        out.error(
            format!("{GW}.gatewayRef.name"),
            format!("{:?} is not a valid object name", gw.name),
        );
    }
    let sized = (1..=MAX_SHARDS).contains(&cluster.shards);
    let total = cluster.shards.max(0) as u64 * nodes_per_shard(cluster) as u64;
    if let Some(section) = &gw.section_name {
        if !syntax::is_dns_subdomain(section) {
            out.error(
                format!("{GW}.gatewayRef.sectionName"),
                format!("{section:?} is not a valid listener name"),
            );
        } else if sized && total > 1 {
            out.error(
                format!("{GW}.gatewayRef.sectionName"),
                format!(
                    "names one listener, and a listener has one port: the cluster's {total}                      nodes need {total} listener ports from basePort. Leave sectionName unset                      so each node's route attaches to the listener on its own port"
                ),
            );
        }
    }
    let last = gw.base_port as u64 + total.max(1) - 1;
    if gw.base_port == 0 || (sized && last > u64::from(u16::MAX)) {
        out.error(
            format!("{GW}.basePort"),
            format!(
                "{}: the {} listener ports {}-{last} must lie in 1-65535",
                gw.base_port,
                total.max(1),
                gw.base_port
            ),
        );
    }
    if ea.service_type == ServiceType::ClusterIp && ea.node_ports.is_some() {
        out.error(
            format!("{EA}.nodePorts"),
            "ClusterIP Services have no NodePorts: remove nodePorts, or use serviceType NodePort",
        );
    }
    if ea.service_type != ServiceType::ClusterIp {
        out.warning(
            format!("{EA}.serviceType"),
            "with a gateway every node is announced at the Gateway: the Services' own external              addresses are made but never announced (ClusterIP, the default with a gateway,              makes none)",
        );
    }
    if ea.external_traffic_policy == TrafficPolicy::Local {
        out.warning(
            format!("{EA}.externalTrafficPolicy"),
            "has no effect with a gateway: the Gateway forwards to the Services from inside              the cluster",
        );
    }
    if ea.external_dns {
        out.warning(
            format!("{EA}.externalDNS"),
            "annotates the Services, which a gateway keeps internal: point the announced names              at the Gateway's address (external-dns's Gateway sources read TLSRoute hostnames)",
        );
    }
    if cluster.tls.is_some() {
        let why = "a TLS cluster behind a gateway is routed by SNI: each node's TLSRoute                    matches the node's own hostname, <hostnamePrefix>-<shard>-<node>.<domain>,                    which clients must connect to";
        if ea.domain.is_none() {
            out.error(format!("{EA}.domain"), format!("is required: {why}"));
        }
        if ea.hostname_scope != HostnameScope::Node {
            out.error(
                format!("{EA}.hostnameScope"),
                format!("must be Node: {why}"),
            );
        }
        if ea.preferred_endpoint_type != EndpointType::Hostname {
            out.error(
                format!("{EA}.preferredEndpointType"),
                format!("must be hostname: {why}"),
            );
        }
    }
}

/// Pins of this cluster that another cluster pins too (NodePorts are shared
/// by the whole Kubernetes cluster), unless this cluster's own Service
/// already holds the port: the cluster that has a port keeps it, and only
/// the newcomer is refused.
pub fn pin_clashes(input: &Input) -> Vec<Violation> {
    let cluster = &input.cluster;
    let Some(ea) = cluster.external_access.as_ref().filter(|ea| ea.enabled) else {
        return Vec::new();
    };
    let Some(pins) = &ea.node_ports else {
        return Vec::new();
    };
    if input.pinned_elsewhere.is_empty() {
        return Vec::new();
    }
    let held: std::collections::BTreeSet<u32> = input
        .observed
        .services
        .iter()
        .flat_map(|s| s.ports.iter().map(|p| p.node_port))
        .collect();
    let mut out = Findings::default();
    let (shards, nodes) = (cluster.shards.max(0) as u32, nodes_per_shard(cluster));
    for (shard, node, port) in shardgate_contract::ports::every_pin(pins, shards, nodes) {
        if held.contains(&port) {
            continue;
        }
        if let Some(other) = input.pinned_elsewhere.iter().find(|p| p.port == port) {
            let field = match pins.base {
                Some(_) => "spec.externalAccess.nodePorts.base".to_string(),
                None => format!("spec.externalAccess.nodePorts.ports[{shard}][{node}]"),
            };
            out.error(
                field,
                format!(
                    "NodePort {port} (shard {shard}, node {node}) is pinned by ValkeyCluster {} \
                     too; NodePorts are shared by the whole Kubernetes cluster",
                    other.cluster
                ),
            );
        }
    }
    out.list
}

/// Pinned NodePorts: one way of pinning, every port in 30000-32767, none
/// twice, and no entry for a shard or node the cluster does not have.
fn check_node_ports(cluster: &Cluster, pins: &NodePorts, out: &mut Findings) {
    const AT: &str = "spec.externalAccess.nodePorts";
    if !(1..=MAX_SHARDS).contains(&cluster.shards) {
        return;
    }
    let (shards, nodes) = (cluster.shards as u32, nodes_per_shard(cluster));
    let in_range = |p: u32| (NODE_PORT_MIN..=NODE_PORT_MAX).contains(&p);
    match (pins.base, pins.ports.is_empty()) {
        (Some(_), false) => out.error(AT, "give base or ports, not both"),
        (None, true) => out.error(AT, "give base or ports"),
        (Some(base), true) => {
            let last = base as u64 + shards as u64 * nodes as u64 - 1;
            if !in_range(base) || last > NODE_PORT_MAX as u64 {
                out.error(
                    format!("{AT}.base"),
                    format!(
                        "{base}: the {} ports {base}-{last} must lie in {NODE_PORT_MIN}-{NODE_PORT_MAX}",
                        shards * nodes
                    ),
                );
            }
        }
        (None, false) => {
            if pins.ports.len() > shards as usize {
                out.error(
                    format!("{AT}.ports"),
                    format!("has {} shards; the cluster has {shards}", pins.ports.len()),
                );
            }
            let mut seen = std::collections::BTreeSet::new();
            for (s, row) in pins.ports.iter().enumerate() {
                if row.len() > nodes as usize {
                    out.error(
                        format!("{AT}.ports[{s}]"),
                        format!("has {} nodes; a shard has {nodes}", row.len()),
                    );
                }
                for (n, &port) in row.iter().enumerate() {
                    let field = format!("{AT}.ports[{s}][{n}]");
                    if !in_range(port) {
                        out.error(
                            field,
                            format!("{port} is outside {NODE_PORT_MIN}-{NODE_PORT_MAX}"),
                        );
                    } else if !seen.insert(port) {
                        out.error(field, format!("{port} is pinned twice"));
                    }
                }
            }
        }
    }
}

/// Reports an error if any object name of `cluster` is also generated by one
/// of `others`. Only names with a shared prefix can collide, so only those
/// clusters' names are generated.
/// `spec.users`: names Valkey accepts and no system name, each user once,
/// no rule that could smuggle in another rule or line, and no user without a
/// password on a cluster reachable from outside.
fn check_users(cluster: &Cluster, out: &mut Findings) {
    let exposed = cluster
        .external_access
        .as_ref()
        .is_some_and(|ea| ea.enabled);
    let mut seen: Vec<&str> = Vec::with_capacity(cluster.users.len());
    for (i, u) in cluster.users.iter().enumerate() {
        let at = format!("spec.users[{i}]");
        if u.name.is_empty() || !is_acl_token(&u.name) {
            out.error(
                format!("{at}.name"),
                format!(
                    "{:?} is not a valid user name (no spaces or control characters)",
                    u.name
                ),
            );
        } else if u.name.starts_with(auth::SYSTEM_PREFIX) {
            out.error(
                format!("{at}.name"),
                format!(
                    "{:?}: names starting with {:?} are reserved for shardgate's system users",
                    u.name,
                    auth::SYSTEM_PREFIX
                ),
            );
        } else if seen.contains(&u.name.as_str()) {
            out.error(
                format!("{at}.name"),
                format!("user {:?} is listed twice", u.name),
            );
        }
        seen.push(&u.name);
        if u.nopass && u.password_secret.is_some() {
            out.error(
                format!("{at}.nopass"),
                "nopass and passwordSecret exclude each other",
            );
        }
        if let Some(ps) = &u.password_secret {
            if !ps.name.is_empty() && !syntax::is_dns_subdomain(&ps.name) {
                out.error(
                    format!("{at}.passwordSecret.name"),
                    format!("{:?} is not a valid Secret name", ps.name),
                );
            }
            for (j, key) in ps.keys.iter().enumerate() {
                if !is_secret_key(key) {
                    out.error(
                        format!("{at}.passwordSecret.keys[{j}]"),
                        format!("{key:?} is not a valid Secret key"),
                    );
                }
            }
        }
        if exposed && u.enabled && u.nopass {
            out.error(
                format!("{at}.nopass"),
                format!(
                    "user {:?} has no password, and external access is enabled: anyone who \
                     reaches an endpoint could log in as it",
                    u.name
                ),
            );
        }
        let mut tokens = |field: &str, list: &[String]| {
            for (j, t) in list.iter().enumerate() {
                if t.is_empty() || !is_acl_token(t) {
                    out.error(
                        format!("{at}.{field}[{j}]"),
                        format!(
                            "{t:?} must be one non-empty word (no spaces or control characters)"
                        ),
                    );
                }
            }
        };
        tokens("commands.allow", &u.commands_allow);
        tokens("commands.deny", &u.commands_deny);
        tokens("channels.patterns", &u.channels);
        if let Some(k) = &u.keys {
            tokens("keys.readWrite", &k.read_write);
            tokens("keys.readOnly", &k.read_only);
            tokens("keys.writeOnly", &k.write_only);
        }
        if let Some(p) = &u.permissions
            && p.chars().any(|c| c.is_control())
        {
            out.error(
                format!("{at}.permissions"),
                "must be one line of ACL rules (no line breaks or control characters)",
            );
        }
    }
}

/// One word of an aclfile line: no whitespace or control characters.
fn is_acl_token(s: &str) -> bool {
    !s.chars().any(|c| c.is_whitespace() || c.is_control())
}

/// A Secret data key: `[-._a-zA-Z0-9]+`, at most 253 characters.
fn is_secret_key(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 253
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-._".contains(&b))
}

fn check_collisions(cluster: &Cluster, others: &[String], out: &mut Findings) {
    let name = cluster.name.as_str();
    for other in others {
        if other == name {
            continue; // the same object
        }
        let related = other
            .strip_prefix(name)
            .or_else(|| name.strip_prefix(other.as_str()))
            .is_some_and(|rest| rest.starts_with('-'));
        if !related {
            continue;
        }
        let mine = crate::generated_names(cluster);
        let theirs_cluster = Cluster {
            name: other.clone(),
            ..cluster.clone()
        };
        let theirs = crate::generated_names(&theirs_cluster);
        if let Some(shared) = mine.iter().find(|n| theirs.contains(*n)) {
            out.error(
                "metadata.name",
                format!("generates {shared:?}, which cluster {other:?} also generates"),
            );
        }
    }
}

/// A Kubernetes resource quantity: a signed decimal number with an optional
/// binary (Ki..Ei), decimal (n, u, m, k, M..E) or exponent suffix.
pub fn is_quantity(s: &str) -> bool {
    let s = s.strip_prefix(['+', '-']).unwrap_or(s);
    let digits_end = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (number, suffix) = s.split_at(digits_end);
    let dots = number.matches('.').count();
    let has_digit = number.bytes().any(|b| b.is_ascii_digit());
    if !has_digit || dots > 1 {
        return false;
    }
    match suffix {
        "" | "n" | "u" | "m" | "k" | "M" | "G" | "T" | "P" | "E" => true,
        "Ki" | "Mi" | "Gi" | "Ti" | "Pi" | "Ei" => true,
        exp => {
            let rest = exp.strip_prefix(['e', 'E']);
            rest.map(|r| r.strip_prefix(['+', '-']).unwrap_or(r))
                .is_some_and(|r| !r.is_empty() && r.bytes().all(|b| b.is_ascii_digit()))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use shardgate_contract::model::{ExternalAccess, KeyPatterns, PasswordSecret, User};

    fn user(name: &str) -> User {
        User {
            name: name.into(),
            enabled: true,
            ..User::default()
        }
    }

    /// The fields of the errors `check_users` finds for `users`.
    fn user_errors(users: Vec<User>, exposed: bool) -> Vec<String> {
        let cluster = Cluster {
            users,
            external_access: exposed.then(ExternalAccess::default),
            ..Cluster::default()
        };
        let mut out = Findings::default();
        check_users(&cluster, &mut out);
        assert_eq!(out.errors, out.list.len());
        out.list.into_iter().map(|v| v.field).collect()
    }

    #[test]
    fn users_are_checked_field_by_field() {
        let secret = |name: &str, keys: &[&str]| PasswordSecret {
            name: name.into(),
            keys: keys.iter().map(|k| k.to_string()).collect(),
        };
        let cases: Vec<(Vec<User>, bool, Vec<&str>)> = vec![
            (vec![user("app"), user("default")], true, vec![]),
            (vec![user("_operator")], false, vec!["spec.users[0].name"]),
            (vec![user("a b")], false, vec!["spec.users[0].name"]),
            (vec![user("")], false, vec!["spec.users[0].name"]),
            (
                vec![user("app"), user("app")],
                false,
                vec!["spec.users[1].name"],
            ),
            (
                vec![User {
                    nopass: true,
                    ..user("open")
                }],
                false,
                vec![],
            ),
            (
                vec![User {
                    nopass: true,
                    ..user("open")
                }],
                true,
                vec!["spec.users[0].nopass"],
            ),
            (
                vec![User {
                    nopass: true,
                    enabled: false,
                    ..user("open")
                }],
                true,
                vec![],
            ),
            (
                vec![User {
                    nopass: true,
                    password_secret: Some(secret("s", &["k"])),
                    ..user("both")
                }],
                false,
                vec!["spec.users[0].nopass"],
            ),
            (
                vec![User {
                    password_secret: Some(secret("Bad_Name", &["ok", "no/slash"])),
                    ..user("u")
                }],
                false,
                vec![
                    "spec.users[0].passwordSecret.name",
                    "spec.users[0].passwordSecret.keys[1]",
                ],
            ),
            (
                vec![User {
                    commands_allow: vec!["@read".into(), "get on".into()],
                    commands_deny: vec!["".into()],
                    channels: vec!["a\nuser x".into()],
                    keys: Some(KeyPatterns {
                        read_only: vec!["k *".into()],
                        ..KeyPatterns::default()
                    }),
                    permissions: Some("+get\nuser evil on nopass +@all".into()),
                    ..user("u")
                }],
                false,
                vec![
                    "spec.users[0].commands.allow[1]",
                    "spec.users[0].commands.deny[0]",
                    "spec.users[0].channels.patterns[0]",
                    "spec.users[0].keys.readOnly[0]",
                    "spec.users[0].permissions",
                ],
            ),
        ];
        for (users, exposed, want) in cases {
            let names: Vec<String> = users.iter().map(|u| u.name.clone()).collect();
            assert_eq!(
                user_errors(users, exposed),
                want,
                "{names:?} exposed={exposed}"
            );
        }
    }

    #[test]
    fn quantities() {
        for ok in ["1", "500m", "1.5Gi", "2e3", "+1k", ".5", "128Mi", "1E-3"] {
            assert!(is_quantity(ok), "{ok}");
        }
        for bad in ["", "Gi", "1..2", "1GB", "1e", "abc", "1 Gi"] {
            assert!(!is_quantity(bad), "{bad}");
        }
    }
}
