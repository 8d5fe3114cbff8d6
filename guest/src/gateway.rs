//! Nodes reached through a Gateway API Gateway
//! (`spec.externalAccess.gateway`): one route per node, each attached to
//! the Gateway's listener on the node's own port and forwarding to the
//! Service port that reaches only that node. The Gateway is the user's;
//! the guest reads its listeners and addresses, announces a node only when
//! the listener its route needs exists, and reports the ports that are
//! missing.

use shardgate_contract::model::{
    ExternalAccess, Gateway, GatewayFound, GatewayStatus, Listener, ListenerProtocol,
    ObservedGateway, Route, RouteKind, ServiceTopology,
};
use shardgate_contract::{names, ports};

use crate::endpoints;
use crate::layout::Layout;

/// What the guest knows of the cluster's Gateway: the spec's reference,
/// what the host found, the route kind the cluster needs and the spec's
/// nodes per shard (the port formula's stride).
#[derive(Clone, Copy, Debug)]
pub struct Through<'a> {
    pub gateway: &'a Gateway,
    /// None when the host did not look (`shardgate render` without
    /// observed state).
    pub found: Option<&'a GatewayFound>,
    pub kind: RouteKind,
    pub spec_nodes: u32,
}

/// Why a node cannot be reached through the Gateway yet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unreachable {
    /// The API server does not serve the route kind, or nobody looked.
    Api,
    /// No Gateway of that name in the namespace.
    Gateway,
    /// The Gateway has no listener for the node's route (or the node, a
    /// departing replica, has no port).
    Listener,
    /// The Gateway has no address yet (and no hostname is announced).
    Address,
}

impl<'a> Through<'a> {
    /// The Gateway of `ea`, if it has one.
    pub fn of(
        ea: &'a ExternalAccess,
        found: Option<&'a GatewayFound>,
        tls: bool,
        spec_nodes: u32,
    ) -> Option<Self> {
        Some(Through {
            gateway: ea.gateway.as_ref()?,
            found,
            kind: if tls { RouteKind::Tls } else { RouteKind::Tcp },
            spec_nodes,
        })
    }

    /// The listener port node `node` of shard `shard` is reached on.
    pub fn port(&self, shard: u32, node: u32) -> Option<u32> {
        ports::gateway_port(self.gateway.base_port, self.spec_nodes, shard, node)
    }

    /// The Gateway as it exists, or why it cannot be used.
    pub fn observed(&self) -> Result<&'a ObservedGateway, Unreachable> {
        match self.found {
            None | Some(GatewayFound::NotServed) => Err(Unreachable::Api),
            Some(GatewayFound::Missing) => Err(Unreachable::Gateway),
            Some(GatewayFound::Found(g)) => Ok(g),
        }
    }

    /// The Gateway has a listener a route of this cluster attaches to on
    /// `port`: that port, the protocol of the route's kind, and the
    /// `sectionName`'s name if the spec names one.
    pub fn listens(&self, gateway: &ObservedGateway, port: u32) -> bool {
        gateway.listeners.iter().any(|l| self.attaches(l, port))
    }

    fn attaches(&self, l: &Listener, port: u32) -> bool {
        let protocol = match self.kind {
            RouteKind::Tcp => ListenerProtocol::Tcp,
            RouteKind::Tls => ListenerProtocol::Tls,
        };
        l.port == port
            && l.protocol == protocol
            && self
                .gateway
                .section_name
                .as_ref()
                .is_none_or(|s| *s == l.name)
    }

    /// Where node (`shard`, `node`) is reached: its listener port, or why
    /// it cannot be.
    pub fn reach(&self, shard: u32, node: u32) -> Result<u32, Unreachable> {
        let gateway = self.observed()?;
        match self.port(shard, node) {
            Some(port) if self.listens(gateway, port) => Ok(port),
            _ => Err(Unreachable::Listener),
        }
    }

    /// `status.gateway`: the listener ports the Gateway lacks for the
    /// nodes of `layout` that have one, in order. None missing while the
    /// Gateway is not found (the condition says why).
    pub fn status(&self, layout: &Layout) -> GatewayStatus {
        let mut missing: Vec<u32> = match self.observed() {
            Ok(gateway) => layout
                .iter()
                .filter_map(|(s, n)| self.port(s, n))
                .filter(|&p| !self.listens(gateway, p))
                .collect(),
            Err(_) => Vec::new(),
        };
        missing.sort_unstable();
        missing.dedup();
        GatewayStatus {
            name: self.gateway.name.clone(),
            missing_listeners: missing,
        }
    }
}

/// One route per node of `layout` that has a listener port, in layout
/// order, to the node's port on its Service of `ea.topology`. A TLS route
/// matches the node's own hostname (SNI), so it needs `ea.domain`
/// (validation requires it); without one it matches none.
pub fn routes(
    cluster: &str,
    ea: &ExternalAccess,
    through: &Through<'_>,
    layout: &Layout,
) -> Vec<Route> {
    layout
        .iter()
        .filter_map(|(shard, node)| {
            let port = through.port(shard, node)?;
            let hostnames = match (through.kind, ea.domain.as_deref()) {
                (RouteKind::Tls, Some(domain)) => vec![names::node_hostname(
                    &ea.hostname_prefix,
                    shard,
                    node,
                    domain,
                )],
                _ => Vec::new(),
            };
            let service = match ea.topology {
                ServiceTopology::PerShard => names::shard_service(cluster, shard),
                ServiceTopology::PerNode => names::node_service(cluster, shard, node),
            };
            Some(Route {
                shard,
                node,
                name: names::node_object(cluster, shard, node),
                kind: through.kind,
                gateway: through.gateway.name.clone(),
                section_name: through.gateway.section_name.clone(),
                port,
                hostnames,
                service,
                service_port: endpoints::service_port(ea.topology, node),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use shardgate_contract::model::{Ingress, IpAddress};

    fn listener(name: &str, port: u32, protocol: ListenerProtocol) -> Listener {
        Listener {
            name: name.into(),
            port,
            protocol,
        }
    }

    fn found(listeners: Vec<Listener>) -> GatewayFound {
        GatewayFound::Found(ObservedGateway {
            listeners,
            addresses: vec![Ingress::Ip(IpAddress::V4(0x7f00_0601))],
        })
    }

    fn gateway(section: Option<&str>) -> Gateway {
        Gateway {
            name: "gw".into(),
            section_name: section.map(String::from),
            base_port: 7000,
        }
    }

    #[test]
    fn a_node_is_reached_only_through_a_listener_of_its_port_protocol_and_section() {
        use ListenerProtocol::{Other, Tcp, Tls};
        use Unreachable::*;
        let tcp = |n: &str, p| listener(n, p, Tcp);
        // (section, tls, what the host found, (shard, node)) => reach
        type Case = (
            Option<&'static str>,
            bool,
            Option<GatewayFound>,
            (u32, u32),
            Result<u32, Unreachable>,
        );
        let cases: Vec<Case> = vec![
            (
                None,
                false,
                Some(found(vec![tcp("a", 7000)])),
                (0, 0),
                Ok(7000),
            ),
            (
                None,
                false,
                Some(found(vec![tcp("a", 7000)])),
                (0, 1),
                Err(Listener),
            ),
            (
                None,
                false,
                Some(found(vec![tcp("a", 7003)])),
                (1, 1),
                Ok(7003),
            ),
            // The listener's protocol must be the route kind's.
            (
                None,
                true,
                Some(found(vec![tcp("a", 7000)])),
                (0, 0),
                Err(Listener),
            ),
            (
                None,
                true,
                Some(found(vec![listener("a", 7000, Tls)])),
                (0, 0),
                Ok(7000),
            ),
            (
                None,
                false,
                Some(found(vec![listener("a", 7000, Other)])),
                (0, 0),
                Err(Listener),
            ),
            // A section name must name the listener.
            (
                Some("a"),
                false,
                Some(found(vec![tcp("a", 7000)])),
                (0, 0),
                Ok(7000),
            ),
            (
                Some("b"),
                false,
                Some(found(vec![tcp("a", 7000)])),
                (0, 0),
                Err(Listener),
            ),
            // A departing replica (node 2 of 2 per shard) has no port.
            (
                None,
                false,
                Some(found(vec![tcp("a", 7002)])),
                (0, 2),
                Err(Listener),
            ),
            (
                None,
                false,
                Some(GatewayFound::Missing),
                (0, 0),
                Err(Gateway),
            ),
            (None, false, Some(GatewayFound::NotServed), (0, 0), Err(Api)),
            (None, false, None, (0, 0), Err(Api)),
        ];
        for (section, tls, found, (s, n), want) in cases {
            let gw = gateway(section);
            let ea = ExternalAccess {
                gateway: Some(gw.clone()),
                ..ExternalAccess::default()
            };
            let through = Through::of(&ea, found.as_ref(), tls, 2).unwrap();
            assert_eq!(
                through.reach(s, n),
                want,
                "{section:?} tls={tls} {found:?} ({s}, {n})"
            );
        }
    }

    #[test]
    fn the_status_lists_each_missing_listener_port_once() {
        let ea = ExternalAccess {
            gateway: Some(gateway(None)),
            ..ExternalAccess::default()
        };
        let have = found(vec![
            listener("a", 7000, ListenerProtocol::Tcp),
            listener("b", 7002, ListenerProtocol::Tcp),
        ]);
        let through = Through::of(&ea, Some(&have), false, 2).unwrap();
        // Shard 0 node 2 is departing: no port, not missing.
        let layout = Layout::new(
            2,
            2,
            &[shardgate_contract::model::NodeRef { shard: 0, node: 2 }],
        );
        let status = through.status(&layout);
        assert_eq!(status.name, "gw");
        assert_eq!(status.missing_listeners, [7001, 7003]);
        let missing = GatewayFound::Missing;
        let through = Through::of(&ea, Some(&missing), false, 2).unwrap();
        assert!(through.status(&layout).missing_listeners.is_empty());
    }

    #[test]
    fn each_node_gets_a_route_to_its_own_service_port() {
        let mut ea = ExternalAccess {
            gateway: Some(gateway(Some("valkey"))),
            domain: Some("example.com".into()),
            ..ExternalAccess::default()
        };
        let layout = Layout::new(2, 2, &[]);
        let through = Through::of(&ea, None, false, 2).unwrap();
        let r = routes("c", &ea, &through, &layout);
        assert_eq!(r.len(), 4);
        assert_eq!(
            r[3],
            Route {
                shard: 1,
                node: 1,
                name: "shardgate-c-1-1".into(),
                kind: RouteKind::Tcp,
                gateway: "gw".into(),
                section_name: Some("valkey".into()),
                port: 7003,
                hostnames: vec![],
                service: "shardgate-c-shard-1".into(),
                service_port: 6380,
            }
        );
        ea.topology = ServiceTopology::PerNode;
        let through = Through::of(&ea, None, true, 2).unwrap();
        let r = routes("c", &ea, &through, &layout);
        assert_eq!(r[3].kind, RouteKind::Tls);
        assert_eq!(r[3].hostnames, ["shard-1-1.example.com"]);
        assert_eq!(r[3].service, "shardgate-c-shard-1-node-1");
        assert_eq!(r[3].service_port, 6379);
    }
}
