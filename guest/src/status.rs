//! `status.externalEndpoints` and the `ExternalAccessReady` condition.

use crate::endpoints::{External, Pending, format_ip};
use crate::gateway::Through;
use crate::layout::Layout;
use shardgate_contract::model::{
    Condition, ConditionStatus, IpAddress, NodeEndpoint, ServiceTopology, ServiceType,
    ShardEndpoint,
};
use shardgate_contract::names;

use shardgate_contract::conditions::EXTERNAL_ACCESS_READY;

/// One entry per shard of the layout, in order; `externals` are in layout
/// order.
pub fn external_endpoints(
    at: Where<'_>,
    service_type: ServiceType,
    externals: &[External],
    layout: &Layout,
) -> Vec<ShardEndpoint> {
    let mut rest = externals;
    layout
        .shards()
        .map(|(shard, nodes)| {
            let (chunk, tail) = rest.split_at(nodes.len().min(rest.len()));
            rest = tail;
            shard_endpoint(at, service_type, shard, nodes, chunk)
        })
        .collect()
}

/// The cluster's name and namespace, which in-cluster addresses name.
#[derive(Clone, Copy, Debug)]
pub struct Where<'a> {
    pub cluster: &'a str,
    pub namespace: &'a str,
}

/// The `host:port` that answers on node (shard, node)'s announced port from
/// inside Kubernetes, so in-cluster clients need not leave it (split
/// horizon): through a Gateway, the Gateway's address (in-cluster clients
/// reach it as well); with a load balancer, its Service's DNS name (the
/// Service port is the announced port); with NodePort, the pod's node
/// InternalIP (a NodePort opens on every node address). Empty while the
/// endpoint is not usable.
pub fn in_cluster(
    at: Where<'_>,
    service_type: ServiceType,
    shard: u32,
    node: u32,
    e: &External,
) -> String {
    if !e.usable() {
        return String::new();
    }
    if let Some(address) = &e.gateway_address {
        return match address.contains(':') {
            true => format!("[{address}]:{}", e.port),
            false => format!("{address}:{}", e.port),
        };
    }
    match service_type {
        // Only with a gateway (above).
        ServiceType::ClusterIp => String::new(),
        ServiceType::LoadBalancer => {
            let service = match e.via {
                ServiceTopology::PerShard => names::shard_service(at.cluster, shard),
                ServiceTopology::PerNode => names::node_service(at.cluster, shard, node),
            };
            format!("{service}.{}.svc:{}", at.namespace, e.port)
        }
        ServiceType::NodePort => match e.pod_host_ip {
            Some(ip @ IpAddress::V4(_)) => format!("{}:{}", format_ip(ip), e.port),
            Some(ip @ IpAddress::V6(_)) => format!("[{}]:{}", format_ip(ip), e.port),
            None => String::new(),
        },
    }
}

fn shard_endpoint(
    at: Where<'_>,
    service_type: ServiceType,
    shard: u32,
    nodes: &[u32],
    chunk: &[External],
) -> ShardEndpoint {
    // The seed's shape: `nodePorts[i]` is node i's allocated NodePort (0
    // until allocated), or the LoadBalancer's Service port.
    let span = nodes.last().map_or(0, |n| *n as usize + 1);
    let mut node_ports = vec![0; span];
    for (&node, e) in nodes.iter().zip(chunk) {
        node_ports[node as usize] = e.port;
    }
    ShardEndpoint {
        shard,
        node_ports,
        nodes: nodes
            .iter()
            .zip(chunk)
            .map(|(&node, e)| NodeEndpoint {
                node,
                host: e.host(),
                // A NodePort or listener port is known before the
                // endpoint is usable; a load balancer's port means nothing
                // without its address.
                port: if e.usable()
                    || service_type == ServiceType::NodePort
                    || e.gateway_address.is_some()
                {
                    e.port
                } else {
                    0
                },
                ready: e.usable() && e.pod_ready,
                in_cluster: in_cluster(at, service_type, shard, node, e),
            })
            .collect(),
    }
}

/// `ExternalAccessReady`: true once every node is announced and its pod ready;
/// otherwise the most fundamental thing still missing.
pub fn external_access_ready(externals: &[External], through: Option<&Through<'_>>) -> Condition {
    let total = externals.len();
    let count = |p: Pending| externals.iter().filter(|e| e.pending == Some(p)).count();
    let old = count(Pending::ServerTooOld);
    let gateway = through.map_or("", |t| t.gateway.name.as_str());
    let (reason, message) = if count(Pending::GatewayApi) > 0 {
        (
            shardgate_contract::conditions::GATEWAY_API_UNAVAILABLE,
            format!(
                "the API server does not serve the Gateway API kinds this cluster needs                  (gateway.networking.k8s.io Gateway and {}): install the Gateway API CRDs,                  then restart the operator; nothing external is announced",
                match through.map(|t| t.kind) {
                    Some(shardgate_contract::model::RouteKind::Tls) => "TLSRoute",
                    _ => "TCPRoute",
                }
            ),
        )
    } else if count(Pending::GatewayNotFound) > 0 {
        (
            "GatewayNotFound",
            format!(
                "there is no Gateway {gateway:?} in the cluster's namespace; nothing external                  is announced"
            ),
        )
    } else if count(Pending::GatewayListener) > 0 {
        let missing: Vec<String> = externals
            .iter()
            .filter(|e| e.pending == Some(Pending::GatewayListener) && e.port != 0)
            .map(|e| e.port.to_string())
            .collect();
        (
            "GatewayListenersMissing",
            format!(
                "{} of {total} nodes have no listener on Gateway {gateway:?} for their route                  (ports: {}); they are not announced until it has one",
                count(Pending::GatewayListener),
                missing.join(", ")
            ),
        )
    } else if count(Pending::GatewayAddress) > 0 {
        (
            "AwaitingGatewayAddress",
            format!(
                "Gateway {gateway:?} has no address yet; nothing external is announced for                  {} of {total} nodes",
                count(Pending::GatewayAddress)
            ),
        )
    } else if old > 0 {
        let versions: std::collections::BTreeSet<&str> = externals
            .iter()
            .filter_map(|e| e.old_server.as_deref())
            .collect();
        let versions: Vec<&str> = versions.into_iter().collect();
        (
            "ServerTooOld",
            format!(
                "{old} of {total} nodes run Valkey {}, which lacks \
                 cluster-announce-client-port (Valkey 9.0 or newer): their external endpoints \
                 are not announced, and clients inside Kubernetes still reach the cluster",
                versions.join(", ")
            ),
        )
    } else if count(Pending::LoadBalancerIngress) > 0 {
        (
            "AwaitingLoadBalancerIngress",
            format!(
                "{} of {total} nodes wait for their shard load balancer to get an ingress \
                 address; nothing external is announced for them",
                count(Pending::LoadBalancerIngress)
            ),
        )
    } else if count(Pending::NodePort) > 0 {
        (
            "AwaitingNodePorts",
            format!(
                "{} of {total} nodes have no allocated NodePort yet",
                count(Pending::NodePort)
            ),
        )
    } else if count(Pending::HostIp) > 0 {
        (
            "AwaitingHostIP",
            format!(
                "{} of {total} nodes' pods are not scheduled, so their host IP is unknown",
                count(Pending::HostIp)
            ),
        )
    } else if count(Pending::NodeExternalIp) > 0 {
        (
            "NoNodeExternalIP",
            format!(
                "{} of {total} nodes run on Kubernetes nodes without an ExternalIP address \
                 (nodeAddressType: ExternalIP); nothing external is announced for them",
                count(Pending::NodeExternalIp)
            ),
        )
    } else {
        let unready = externals.iter().filter(|e| !e.pod_ready).count();
        if unready > 0 {
            (
                "AwaitingPods",
                format!("{unready} of {total} nodes' pods are not ready"),
            )
        } else {
            return Condition {
                type_: EXTERNAL_ACCESS_READY.to_string(),
                status: ConditionStatus::True,
                reason: "EndpointsReady".to_string(),
                message: format!("all {total} nodes are announced and reachable"),
            };
        }
    };
    Condition {
        type_: EXTERNAL_ACCESS_READY.to_string(),
        status: ConditionStatus::False,
        reason: reason.to_string(),
        message,
    }
}
