//! `status.externalEndpoints` and the `ExternalAccessReady` condition.

use crate::endpoints::{External, Pending};
use shardgate_contract::model::{
    Condition, ConditionStatus, NodeEndpoint, ServiceType, ShardEndpoint,
};

use shardgate_contract::conditions::EXTERNAL_ACCESS_READY;

/// One entry per shard of `shards`, in that order. `externals` is
/// shard-major, `nodes` per shard.
pub fn external_endpoints(
    service_type: ServiceType,
    externals: &[External],
    shards: &[u32],
    nodes: u32,
) -> Vec<ShardEndpoint> {
    externals
        .chunks(nodes as usize)
        .zip(shards)
        .map(|(chunk, &shard)| ShardEndpoint {
            shard,
            // The seed's shape: the allocated NodePort (0 until allocated), or
            // the LoadBalancer's Service port.
            node_ports: chunk.iter().map(|e| e.port).collect(),
            nodes: chunk
                .iter()
                .enumerate()
                .map(|(node, e)| NodeEndpoint {
                    node: node as u32,
                    host: e.host(),
                    port: if e.usable() || service_type == ServiceType::NodePort {
                        e.port
                    } else {
                        0
                    },
                    ready: e.usable() && e.pod_ready,
                })
                .collect(),
        })
        .collect()
}

/// `ExternalAccessReady`: true once every node is announced and its pod ready;
/// otherwise the most fundamental thing still missing.
pub fn external_access_ready(externals: &[External]) -> Condition {
    let total = externals.len();
    let count = |p: Pending| externals.iter().filter(|e| e.pending == Some(p)).count();
    let (reason, message) = if count(Pending::LoadBalancerIngress) > 0 {
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
