//! Ports chosen by formula: pinned NodePorts
//! (`spec.externalAccess.nodePorts`), which port each node asks for, and
//! the Gateway listener port each node is reached on
//! (`spec.externalAccess.gateway.basePort`). NodePorts are shared by the
//! whole Kubernetes cluster, so the guest renders them and the host, which
//! sees every ValkeyCluster, tells the guest which ports other clusters pin.

use crate::model::NodePorts;

/// The NodePort pinned for node `node` of shard `shard`, when the spec
/// pins one: `base + shard * spec_nodes + node`, or the explicit entry.
/// A node past the spec (departing) keeps what it was allocated, so it
/// never asks for the port of another shard's node.
pub fn pinned(pins: &NodePorts, spec_nodes: u32, shard: u32, node: u32) -> Option<u32> {
    if node >= spec_nodes {
        return None;
    }
    match pins.base {
        Some(base) => base.checked_add(shard.checked_mul(spec_nodes)?.checked_add(node)?),
        None => pins
            .ports
            .get(shard as usize)
            .and_then(|s| s.get(node as usize))
            .copied(),
    }
}

/// The Gateway listener port of node `node` of shard `shard`:
/// `base + shard * spec_nodes + node`. A node past the spec (a departing
/// replica) has none: its index would be the next shard's first node's.
/// None past 65535.
pub fn gateway_port(base: u32, spec_nodes: u32, shard: u32, node: u32) -> Option<u32> {
    if node >= spec_nodes {
        return None;
    }
    base.checked_add(shard.checked_mul(spec_nodes)?.checked_add(node)?)
        .filter(|p| *p <= u32::from(u16::MAX))
}

/// Every pin of a `shards` x `spec_nodes` cluster, as `(shard, node, port)`
/// in shard and node order.
pub fn every_pin(pins: &NodePorts, shards: u32, spec_nodes: u32) -> Vec<(u32, u32, u32)> {
    (0..shards)
        .flat_map(|s| (0..spec_nodes).map(move |n| (s, n)))
        .filter_map(|(s, n)| pinned(pins, spec_nodes, s, n).map(|p| (s, n, p)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gateway_ports_follow_the_base_formula_within_the_spec() {
        // (base, spec nodes, shard, node) => port
        for (base, nodes, shard, node, want) in [
            (7000, 2, 0, 0, Some(7000)),
            (7000, 2, 0, 1, Some(7001)),
            (7000, 2, 1, 0, Some(7002)),
            (7000, 3, 2, 2, Some(7008)),
            (7000, 2, 0, 2, None),       // a departing replica
            (7000, 2, 5, 1, Some(7011)), // a departing shard: past the others
            (65535, 1, 0, 0, Some(65535)),
            (65535, 1, 1, 0, None),
            (u32::MAX, 1, 1, 0, None),
        ] {
            assert_eq!(
                gateway_port(base, nodes, shard, node),
                want,
                "{base} {nodes} ({shard}, {node})"
            );
        }
    }

    #[test]
    fn every_pin_lists_the_base_formula_or_the_list() {
        let base = NodePorts {
            base: Some(30100),
            ports: vec![],
        };
        assert_eq!(
            every_pin(&base, 2, 2),
            [(0, 0, 30100), (0, 1, 30101), (1, 0, 30102), (1, 1, 30103)]
        );
        let list = NodePorts {
            base: None,
            ports: vec![vec![31000], vec![31010, 31011]],
        };
        assert_eq!(
            every_pin(&list, 2, 2),
            [(0, 0, 31000), (1, 0, 31010), (1, 1, 31011)]
        );
    }
}
