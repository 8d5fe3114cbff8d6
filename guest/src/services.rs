//! The per-shard Services.

use crate::endpoints::Index;
use crate::layout::Layout;
use shardgate_contract::model::{
    ExternalAccess, HostnameScope, NodePorts, Pair, ServicePort, ServiceType, ShardService,
};
use shardgate_contract::names;

/// What a Service's annotation templates may name.
pub const TEMPLATE_SHARD: &str = "{shard}";
/// The hostnames the Service serves, comma-separated.
pub const TEMPLATE_HOSTNAME: &str = "{hostname}";
/// A node's index: only meaningful with one Service per node, which is not
/// built yet, so it is refused.
pub const TEMPLATE_NODE: &str = "{node}";

/// One Service per shard of the layout with one port per node, in node
/// order. Port `i` is named `vk-n<i>`, listens on `6379 + i` and targets the
/// container port of the same name, which only node `i`'s pod declares.
/// A pinned NodePort (`nodePorts`) is asked for; otherwise an allocated
/// one is kept, matched by port name.
pub fn shard_services(
    cluster: &str,
    ea: &ExternalAccess,
    index: &Index<'_>,
    layout: &Layout,
    spec_nodes: u32,
) -> Vec<ShardService> {
    let load_balancer = ea.service_type == ServiceType::LoadBalancer;
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
                    node_port: ea
                        .node_ports
                        .as_ref()
                        .and_then(|p| pinned(p, spec_nodes, shard, node))
                        .unwrap_or_else(|| index.node_port(shard, node)),
                })
                .collect(),
            annotations: annotations(ea, shard, nodes),
            load_balancer_source_ranges: if load_balancer {
                ea.load_balancer_source_ranges.clone()
            } else {
                Vec::new()
            },
            load_balancer_class: ea.load_balancer_class.clone().filter(|_| load_balancer),
            allocate_load_balancer_node_ports: ea
                .allocate_load_balancer_node_ports
                .filter(|_| load_balancer),
        })
        .collect()
}

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

/// The hostnames shard `shard`'s Service serves: the shard's, or each
/// node's with `hostnameScope: Node`; none without a domain.
pub fn hostnames(ea: &ExternalAccess, shard: u32, nodes: &[u32]) -> Vec<String> {
    let Some(domain) = ea.domain.as_deref() else {
        return Vec::new();
    };
    match ea.hostname_scope {
        HostnameScope::Shard => vec![names::announce_hostname(&ea.hostname_prefix, shard, domain)],
        HostnameScope::Node => nodes
            .iter()
            .map(|&n| names::node_hostname(&ea.hostname_prefix, shard, n, domain))
            .collect(),
    }
}

/// The Service's annotations: the user's, with `{shard}` and `{hostname}`
/// filled in, and external-dns's hostname annotation when asked for (the
/// user's own value for that key wins). Sorted by key.
fn annotations(ea: &ExternalAccess, shard: u32, nodes: &[u32]) -> Vec<Pair> {
    let hostnames = hostnames(ea, shard, nodes).join(",");
    let mut out: Vec<Pair> = ea
        .service_annotations
        .iter()
        .map(|(k, v)| {
            let v = v
                .replace(TEMPLATE_SHARD, &shard.to_string())
                .replace(TEMPLATE_HOSTNAME, &hostnames);
            (k.clone(), v)
        })
        .collect();
    if ea.external_dns
        && !hostnames.is_empty()
        && !out.iter().any(|(k, _)| k == names::EXTERNAL_DNS_HOSTNAME)
    {
        out.push((names::EXTERNAL_DNS_HOSTNAME.to_string(), hostnames));
    }
    out.sort();
    out.dedup_by(|a, b| a.0 == b.0);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pins_follow_the_base_formula_or_the_list_and_spare_departing_nodes() {
        let base = NodePorts {
            base: Some(30100),
            ports: vec![],
        };
        let list = NodePorts {
            base: None,
            ports: vec![vec![31000, 31001], vec![31010]],
        };
        // (pins, nodes per shard in the spec, shard, node) => port
        for (pins, spec_nodes, shard, node, want) in [
            (&base, 2, 0, 0, Some(30100)),
            (&base, 2, 0, 1, Some(30101)),
            (&base, 2, 1, 0, Some(30102)),
            (&base, 2, 2, 1, Some(30105)),
            (&base, 2, 0, 2, None), // departing: keeps its own
            (&list, 2, 0, 1, Some(31001)),
            (&list, 2, 1, 0, Some(31010)),
            (&list, 2, 1, 1, None), // not listed: allocated
            (&list, 2, 5, 0, None),
        ] {
            assert_eq!(
                pinned(pins, spec_nodes, shard, node),
                want,
                "{pins:?} {spec_nodes} ({shard}, {node})"
            );
        }
        let huge = NodePorts {
            base: Some(u32::MAX),
            ports: vec![],
        };
        assert_eq!(pinned(&huge, 2, 1, 0), None, "no overflow");
    }

    #[test]
    fn annotations_fill_templates_and_external_dns_names_every_hostname() {
        let mut ea = ExternalAccess {
            domain: Some("example.com".into()),
            service_annotations: vec![
                ("lb.example.com/name".into(), "shard-{shard}".into()),
                ("z.example.com/hosts".into(), "{hostname}".into()),
            ],
            external_dns: true,
            ..ExternalAccess::default()
        };
        let a = annotations(&ea, 2, &[0, 1]);
        assert_eq!(
            a,
            vec![
                (
                    names::EXTERNAL_DNS_HOSTNAME.to_string(),
                    "shard-2.example.com".to_string()
                ),
                ("lb.example.com/name".into(), "shard-2".into()),
                ("z.example.com/hosts".into(), "shard-2.example.com".into()),
            ]
        );
        ea.hostname_scope = HostnameScope::Node;
        let a = annotations(&ea, 2, &[0, 1]);
        assert_eq!(a[0].1, "shard-2-0.example.com,shard-2-1.example.com");
        // The user's own external-dns value wins; no domain, no hostname.
        ea.service_annotations = vec![(names::EXTERNAL_DNS_HOSTNAME.into(), "mine".into())];
        assert_eq!(annotations(&ea, 0, &[0])[0].1, "mine");
        ea.service_annotations.clear();
        ea.domain = None;
        assert!(annotations(&ea, 0, &[0]).is_empty());
    }
}
