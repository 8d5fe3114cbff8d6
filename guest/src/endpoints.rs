//! Where each node can be reached from outside Kubernetes, derived from the
//! spec and the observed Services and Pods. Announce settings, the node config
//! and the status all read these facts, so they can never disagree.

use shardgate_contract::model::{
    EndpointType, ExternalAccess, HostnameScope, Ingress, IpAddress, NodeAddressType, Observed,
    ObservedPod, ObservedService, ServiceTopology, ServiceType,
};
use shardgate_contract::names;

use crate::gateway::{Through, Unreachable};
use crate::server::Server;

/// Why a node has no usable external endpoint yet.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Pending {
    /// The node's server is too old to announce a port to clients only
    /// (`cluster-announce-client-port` came with Valkey 9.0).
    ServerTooOld,
    /// The shard's LoadBalancer has no ingress address.
    LoadBalancerIngress,
    /// The shard Service's NodePort for this node is not allocated yet.
    NodePort,
    /// The node's pod is not scheduled, so its host IP is unknown.
    HostIp,
    /// `nodeAddressType: ExternalIP`, and the pod's Kubernetes node has no
    /// ExternalIP.
    NodeExternalIp,
    /// The API server does not serve the Gateway API route kind needed.
    GatewayApi,
    /// The Gateway the spec names does not exist.
    GatewayNotFound,
    /// The Gateway has no listener for the node's route.
    GatewayListener,
    /// The Gateway has no address yet.
    GatewayAddress,
}

/// One node's external endpoint.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct External {
    /// `cluster-announce-hostname`.
    pub hostname: Option<String>,
    /// `cluster-announce-client-ipv4`/`-ipv6`.
    pub client_ip: Option<IpAddress>,
    /// The external port; 0 while unknown.
    pub port: u32,
    /// Announce `cluster-preferred-endpoint-type hostname`.
    pub prefer_hostname: bool,
    /// What is still missing; `None` when the endpoint is usable and announced.
    pub pending: Option<Pending>,
    /// The node's pod is ready.
    pub pod_ready: bool,
    /// `ip` mode was asked for, but the LoadBalancer ingress is hostname-only
    /// (AWS), so a hostname is announced instead.
    pub lb_hostname_fallback: bool,
    /// The version the node's server reported, when it is too old.
    pub old_server: Option<String>,
    /// The topology whose Service this endpoint goes through. During a
    /// switch it is the old one until the new one is usable.
    pub via: ServiceTopology,
    /// The pod's `status.hostIP` (its Kubernetes node's InternalIP).
    pub pod_host_ip: Option<IpAddress>,
    /// Through a Gateway: its address, as in-cluster clients reach it.
    pub gateway_address: Option<String>,
}

impl External {
    /// Usable: every fact a client needs is known and will be announced.
    pub fn usable(&self) -> bool {
        self.pending.is_none()
    }

    /// The address an outside client uses; empty while not usable.
    pub fn host(&self) -> String {
        if !self.usable() {
            return String::new();
        }
        if self.prefer_hostname {
            self.hostname.clone().unwrap_or_default()
        } else {
            self.client_ip.map(format_ip).unwrap_or_default()
        }
    }
}

/// Observed facts indexed by shard and node, so lookups are O(1).
pub struct Index<'a> {
    services: Vec<Option<&'a ObservedService>>,
    node_services: Vec<Option<&'a ObservedService>>,
    pods: Vec<Option<&'a ObservedPod>>,
    nodes: u32,
}

impl<'a> Index<'a> {
    /// Facts for `shards` shards of `nodes` nodes each. Facts about shards or
    /// nodes outside that range are ignored; the first fact about a shard or
    /// node wins.
    pub fn new(observed: &'a Observed, shards: u32, nodes: u32) -> Self {
        let mut services = vec![None; shards as usize];
        let mut node_services = vec![None; shards as usize * nodes as usize];
        for svc in &observed.services {
            let slot = match svc.node {
                None => services.get_mut(svc.shard as usize),
                Some(node) if svc.shard < shards && node < nodes => {
                    node_services.get_mut((svc.shard * nodes + node) as usize)
                }
                Some(_) => None,
            };
            if let Some(slot @ None) = slot {
                *slot = Some(svc);
            }
        }
        let mut pods = vec![None; shards as usize * nodes as usize];
        for pod in &observed.pods {
            if pod.shard < shards && pod.node < nodes {
                let slot = &mut pods[(pod.shard * nodes + pod.node) as usize];
                if slot.is_none() {
                    *slot = Some(pod);
                }
            }
        }
        Index {
            services,
            node_services,
            pods,
            nodes,
        }
    }

    /// `shard`'s observed Service, if it exists.
    pub fn service(&self, shard: u32) -> Option<&'a ObservedService> {
        self.services.get(shard as usize).copied().flatten()
    }

    /// The observed Service of node `node` of shard `shard` (`PerNode`), if
    /// it exists.
    pub fn node_service(&self, shard: u32, node: u32) -> Option<&'a ObservedService> {
        if node >= self.nodes {
            return None;
        }
        self.node_services
            .get((shard * self.nodes + node) as usize)
            .copied()
            .flatten()
    }

    /// The Service node `node` of shard `shard` is reached through in
    /// `topology`, if it exists.
    pub fn service_of(
        &self,
        topology: ServiceTopology,
        shard: u32,
        node: u32,
    ) -> Option<&'a ObservedService> {
        match topology {
            ServiceTopology::PerShard => self.service(shard),
            ServiceTopology::PerNode => self.node_service(shard, node),
        }
    }

    /// Some Service of `topology` is observed.
    pub fn has_any(&self, topology: ServiceTopology) -> bool {
        match topology {
            ServiceTopology::PerShard => self.services.iter().any(Option::is_some),
            ServiceTopology::PerNode => self.node_services.iter().any(Option::is_some),
        }
    }

    /// The observed Pod of node `node` of shard `shard`, if it exists.
    pub fn pod(&self, shard: u32, node: u32) -> Option<&'a ObservedPod> {
        self.pods
            .get((shard * self.nodes + node) as usize)
            .copied()
            .flatten()
    }

    /// The NodePort allocated to `node`'s port on its Service in
    /// `topology`, or 0.
    pub fn node_port(&self, topology: ServiceTopology, shard: u32, node: u32) -> u32 {
        self.service_of(topology, shard, node)
            .and_then(|s| s.ports.iter().find(|p| p.node == node))
            .map_or(0, |p| p.node_port)
    }
}

/// The external endpoint of node `node` of shard `shard`, whose server is
/// `server`: through the Gateway if the spec names one, else through the
/// topology the spec asks for, or, while that one is not usable yet and
/// the other's Service still exists and is, through the other (a switch:
/// clients keep the old endpoint until the new one works).
pub fn external(
    ea: &ExternalAccess,
    through: Option<&Through<'_>>,
    index: &Index<'_>,
    server: &Server,
    shard: u32,
    node: u32,
) -> External {
    let mut ext = match through {
        Some(t) => via_gateway(ea, t, index, shard, node),
        None => reachable(ea, ea.topology, index, shard, node),
    };
    let old = ea.topology.other();
    if through.is_none() && !ext.usable() && index.service_of(old, shard, node).is_some() {
        let before = reachable(ea, old, index, shard, node);
        if before.usable() {
            ext = before;
        }
    }
    if server.is_old() {
        ext.pending = Some(Pending::ServerTooOld);
        ext.old_server = Some(server.text().to_string());
    }
    ext
}

/// Where node `node` of shard `shard` is reachable through its Service in
/// `topology`, whatever it runs.
fn reachable(
    ea: &ExternalAccess,
    topology: ServiceTopology,
    index: &Index<'_>,
    shard: u32,
    node: u32,
) -> External {
    let pod = index.pod(shard, node);
    let pod_ready = pod.is_some_and(|p| p.ready);
    let domain_host = domain_hostname(ea, shard, node);
    let wants_hostname = ea.preferred_endpoint_type == EndpointType::Hostname;

    match ea.service_type {
        ServiceType::NodePort => {
            let port = index.node_port(topology, shard, node);
            let scheduled = pod.and_then(|p| p.host_ip).is_some();
            let client_ip = match ea.node_address_type {
                NodeAddressType::InternalIp => pod.and_then(|p| p.host_ip),
                NodeAddressType::ExternalIp => pod.and_then(|p| p.node_external_ip),
            };
            let prefer_hostname = wants_hostname && domain_host.is_some();
            let pending = if port == 0 {
                Some(Pending::NodePort)
            } else if !prefer_hostname && !scheduled {
                Some(Pending::HostIp)
            } else if !prefer_hostname && client_ip.is_none() {
                Some(Pending::NodeExternalIp)
            } else {
                None
            };
            External {
                hostname: domain_host,
                client_ip,
                port,
                prefer_hostname,
                pending,
                pod_ready,
                lb_hostname_fallback: false,
                old_server: None,
                via: topology,
                pod_host_ip: pod.and_then(|p| p.host_ip),
                gateway_address: None,
            }
        }
        // A ClusterIP Service has no ingress: without a gateway (which
        // validation refuses) nothing is reachable.
        ServiceType::LoadBalancer | ServiceType::ClusterIp => {
            let ingress = index
                .service_of(topology, shard, node)
                .map_or(&[][..], |s| &s.ingress[..]);
            let (ingress_ip, ingress_host) = first_ip_and_hostname(ingress);
            // An ingress with a hostname but no IP (AWS) cannot serve `ip` mode:
            // announce a hostname instead (the domain's, else the ingress's).
            let lb_hostname_fallback =
                !wants_hostname && ingress_ip.is_none() && ingress_host.is_some();
            let hostname = domain_host.or_else(|| ingress_host.filter(|_| lb_hostname_fallback));
            let prefer_hostname = (wants_hostname || lb_hostname_fallback) && hostname.is_some();
            let pending = if ingress.is_empty() || (!prefer_hostname && ingress_ip.is_none()) {
                Some(Pending::LoadBalancerIngress)
            } else {
                None
            };
            External {
                hostname,
                client_ip: ingress_ip,
                port: service_port(topology, node),
                prefer_hostname,
                pending,
                pod_ready,
                lb_hostname_fallback,
                old_server: None,
                via: topology,
                pod_host_ip: pod.and_then(|p| p.host_ip),
                gateway_address: None,
            }
        }
    }
}

/// Where node `node` of shard `shard` is reachable through the Gateway:
/// its listener port at the Gateway's address, or its hostname. The
/// Gateway's addresses are read as a load balancer's ingress: an address
/// that is a hostname only serves `ip` mode by announcing that hostname.
fn via_gateway(
    ea: &ExternalAccess,
    through: &Through<'_>,
    index: &Index<'_>,
    shard: u32,
    node: u32,
) -> External {
    let pod = index.pod(shard, node);
    let wants_hostname = ea.preferred_endpoint_type == EndpointType::Hostname;
    let domain_host = domain_hostname(ea, shard, node);
    let addresses = through.observed().map_or(&[][..], |g| &g.addresses[..]);
    let (address_ip, address_host) = first_ip_and_hostname(addresses);
    let hostname_fallback = !wants_hostname && address_ip.is_none() && address_host.is_some();
    let hostname = domain_host.or_else(|| address_host.clone().filter(|_| hostname_fallback));
    let prefer_hostname = (wants_hostname || hostname_fallback) && hostname.is_some();
    let reach = through.reach(shard, node);
    let pending = match reach {
        Err(Unreachable::Api) => Some(Pending::GatewayApi),
        Err(Unreachable::Gateway) => Some(Pending::GatewayNotFound),
        Err(Unreachable::Listener) => Some(Pending::GatewayListener),
        Err(Unreachable::Address) => Some(Pending::GatewayAddress),
        Ok(_) if !prefer_hostname && address_ip.is_none() => Some(Pending::GatewayAddress),
        Ok(_) => None,
    };
    External {
        hostname,
        client_ip: address_ip,
        port: through.port(shard, node).unwrap_or(0),
        prefer_hostname,
        pending,
        pod_ready: pod.is_some_and(|p| p.ready),
        lb_hostname_fallback: hostname_fallback,
        old_server: None,
        via: ea.topology,
        pod_host_ip: pod.and_then(|p| p.host_ip),
        gateway_address: address_ip.map(format_ip).or(address_host),
    }
}

/// The hostname node (`shard`, `node`) announces with a domain, by the
/// spec's hostname scope.
fn domain_hostname(ea: &ExternalAccess, shard: u32, node: u32) -> Option<String> {
    ea.domain.as_deref().map(|d| match ea.hostname_scope {
        HostnameScope::Shard => names::announce_hostname(&ea.hostname_prefix, shard, d),
        HostnameScope::Node => names::node_hostname(&ea.hostname_prefix, shard, node, d),
    })
}

/// The first IP and the first hostname among load-balancer ingress points
/// or Gateway addresses.
fn first_ip_and_hostname(points: &[Ingress]) -> (Option<IpAddress>, Option<String>) {
    let ip = points.iter().find_map(|i| match i {
        Ingress::Ip(ip) => Some(*ip),
        Ingress::Hostname(_) => None,
    });
    let host = points.iter().find_map(|i| match i {
        Ingress::Hostname(h) => Some(h.clone()),
        Ingress::Ip(_) => None,
    });
    (ip, host)
}

/// The port node `node` listens on in its Service of `topology`: a shard
/// Service has one port per node from 6379, a node's own Service only 6379.
pub fn service_port(topology: ServiceTopology, node: u32) -> u32 {
    match topology {
        ServiceTopology::PerShard => names::CLIENT_PORT + node,
        ServiceTopology::PerNode => names::CLIENT_PORT,
    }
}

/// Dotted-quad or RFC 5952 text for an address.
pub fn format_ip(ip: IpAddress) -> String {
    match ip {
        IpAddress::V4(v) => std::net::Ipv4Addr::from(v).to_string(),
        IpAddress::V6((hi, lo)) => {
            std::net::Ipv6Addr::from(((hi as u128) << 64) | lo as u128).to_string()
        }
    }
}
