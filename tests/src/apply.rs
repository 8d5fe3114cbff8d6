//! What the API server and kubelet would report after a desired state is
//! applied: the model the fixed-point property checks against.

use std::collections::BTreeSet;

use shardgate_contract::model::*;

/// The observed state after applying `desired` on top of `before`: each
/// desired shard Service exists with its desired ports; a port without a
/// NodePort gets the lowest free one (as the API server allocates); ingress
/// and pods are as they were.
pub fn applied(desired: &Desired, before: &Observed) -> Observed {
    let mut used: BTreeSet<u32> = desired
        .services
        .iter()
        .flat_map(|s| s.ports.iter().map(|p| p.node_port))
        .filter(|p| *p != 0)
        .collect();
    let mut next = 30000;
    let services = desired
        .services
        .iter()
        .map(|s| ObservedService {
            shard: s.shard,
            node: s.node,
            ports: s
                .ports
                .iter()
                .map(|p| {
                    let node_port = if p.node_port != 0 {
                        p.node_port
                    } else {
                        while used.contains(&next) {
                            next += 1;
                        }
                        used.insert(next);
                        next
                    };
                    ObservedPort {
                        node: p.node,
                        node_port,
                    }
                })
                .collect(),
            ingress: before
                .services
                .iter()
                .find(|o| o.shard == s.shard)
                .map(|o| o.ingress.clone())
                .unwrap_or_default(),
        })
        .collect();
    Observed {
        services,
        pods: before.pods.clone(),
        gateway: before.gateway.clone(),
        valkey: None,
    }
}
