//! The per-shard Services.

use crate::endpoints::Index;
use crate::layout::Layout;
use shardgate_contract::model::{ExternalAccess, ServicePort, ShardService};
use shardgate_contract::names;

/// One Service per shard of the layout with one port per node, in node
/// order. Port `i` is named `vk-n<i>`, listens on `6379 + i` and targets the
/// container port of the same name, which only node `i`'s pod declares. An
/// allocated NodePort is kept, matched by port name.
pub fn shard_services(
    cluster: &str,
    ea: &ExternalAccess,
    index: &Index<'_>,
    layout: &Layout,
) -> Vec<ShardService> {
    layout
        .shards()
        .map(|(shard, nodes)| ShardService {
            shard,
            name: names::shard_service(cluster, shard),
            service_type: ea.service_type,
            external_traffic_policy: ea.external_traffic_policy,
            ports: nodes
                .iter()
                .map(|&node| ServicePort {
                    node,
                    name: names::port_name(node),
                    port: names::CLIENT_PORT + node,
                    node_port: index.node_port(shard, node),
                })
                .collect(),
        })
        .collect()
}
