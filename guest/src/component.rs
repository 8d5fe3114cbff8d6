//! The `shardgate:reconcile` component export: converts between the
//! wit-bindgen types and [`crate::model`] and calls the pure logic.

wit_bindgen::generate!({
    path: "../wit/reconcile.wit",
    world: "shardgate",
});

use exports::shardgate::reconcile::reconciler::Guest;
use shardgate::reconcile::types as w;
use shardgate_contract::model as m;

struct Component;

export!(Component);

impl Guest for Component {
    fn reconcile(input: w::Input) -> Result<w::Desired, w::Error> {
        let input = m::Input {
            cluster: cluster(input.cluster),
            credentials: m::Credentials {
                default_user: input.credentials.default_user,
                operator: input.credentials.operator,
                replication: input.credentials.replication,
            },
            observed: m::Observed {
                services: input
                    .observed
                    .services
                    .into_iter()
                    .map(observed_service)
                    .collect(),
                pods: input.observed.pods.into_iter().map(observed_pod).collect(),
                gateway: input.observed.gateway.map(gateway_found),
                valkey: input
                    .observed
                    .valkey
                    .map(|nodes| nodes.into_iter().map(valkey_node).collect()),
            },
            other_clusters: input.other_clusters,
            pinned_elsewhere: input
                .pinned_elsewhere
                .into_iter()
                .map(|p| m::PinnedPort {
                    port: p.port,
                    cluster: p.cluster,
                })
                .collect(),
        };
        crate::reconcile(&input).map(desired).map_err(|e| w::Error {
            violations: e.violations.into_iter().map(violation).collect(),
        })
    }

    fn validate(c: w::Cluster) -> Vec<w::Violation> {
        crate::validate(&cluster(c))
            .into_iter()
            .map(violation)
            .collect()
    }
}

// ---- into the model -------------------------------------------------------

fn cluster(c: w::Cluster) -> m::Cluster {
    m::Cluster {
        name: c.name,
        namespace: c.namespace,
        shards: c.shards,
        replicas: c.replicas,
        image: c.image,
        resources: c.resources.map(resources_in),
        tls: c.tls,
        external_access: c.external_access.map(|ea| m::ExternalAccess {
            enabled: ea.enabled,
            service_type: service_type_in(ea.service_type),
            external_traffic_policy: match ea.external_traffic_policy {
                w::TrafficPolicy::Cluster => m::TrafficPolicy::Cluster,
                w::TrafficPolicy::Local => m::TrafficPolicy::Local,
            },
            service_annotations: ea.service_annotations,
            hostname_prefix: ea.hostname_prefix,
            domain: ea.domain,
            preferred_endpoint_type: match ea.preferred_endpoint_type {
                w::EndpointType::Ip => m::EndpointType::Ip,
                w::EndpointType::Hostname => m::EndpointType::Hostname,
            },
            hostname_scope: match ea.hostname_scope {
                w::HostnameScope::Shard => m::HostnameScope::Shard,
                w::HostnameScope::Node => m::HostnameScope::Node,
            },
            topology: match ea.topology {
                w::ServiceTopology::PerShard => m::ServiceTopology::PerShard,
                w::ServiceTopology::PerNode => m::ServiceTopology::PerNode,
            },
            node_address_type: match ea.node_address_type {
                w::NodeAddressType::InternalIp => m::NodeAddressType::InternalIp,
                w::NodeAddressType::ExternalIp => m::NodeAddressType::ExternalIp,
            },
            node_ports: ea.node_ports.map(|p| m::NodePorts {
                base: p.base,
                ports: p.ports,
            }),
            load_balancer_source_ranges: ea.load_balancer_source_ranges,
            load_balancer_class: ea.load_balancer_class,
            allocate_load_balancer_node_ports: ea.allocate_load_balancer_node_ports,
            external_dns: ea.external_dns,
            gateway: ea.gateway.map(|g| m::Gateway {
                name: g.name,
                section_name: g.section_name,
                base_port: g.base_port,
            }),
        }),
        users: c.users.into_iter().map(user_in).collect(),
        config: c.config,
        persistence: c.persistence.map(persistence_in),
        disruption_budget: c.disruption_budget,
        scheduling: m::Scheduling {
            node: spread_set_in(c.scheduling.node),
            zone: spread_set_in(c.scheduling.zone),
        },
    }
}

fn spread_set_in(s: w::SpreadSet) -> m::SpreadSet {
    let strength = |s: w::Strength| match s {
        w::Strength::Disabled => m::Strength::Disabled,
        w::Strength::Preferred => m::Strength::Preferred,
        w::Strength::Required => m::Strength::Required,
    };
    m::SpreadSet {
        shard: strength(s.shard),
        primaries: strength(s.primaries),
        pods: strength(s.pods),
    }
}

fn spread_out(s: m::Spread) -> w::Spread {
    w::Spread {
        axis: match s.axis {
            m::Axis::Node => w::Axis::Node,
            m::Axis::Zone => w::Axis::Zone,
        },
        scope: match s.scope {
            m::Scope::Shard => w::Scope::Shard,
            m::Scope::Primaries => w::Scope::Primaries,
            m::Scope::Pods => w::Scope::Pods,
        },
        required: s.required,
    }
}

fn persistence_in(p: w::Persistence) -> m::Persistence {
    m::Persistence {
        size: p.size,
        storage_class_name: p.storage_class_name,
        reclaim_policy: match p.reclaim_policy {
            w::ReclaimPolicy::Retain => m::ReclaimPolicy::Retain,
            w::ReclaimPolicy::Delete => m::ReclaimPolicy::Delete,
        },
    }
}

fn persistence_out(p: m::Persistence) -> w::Persistence {
    w::Persistence {
        size: p.size,
        storage_class_name: p.storage_class_name,
        reclaim_policy: match p.reclaim_policy {
            m::ReclaimPolicy::Retain => w::ReclaimPolicy::Retain,
            m::ReclaimPolicy::Delete => w::ReclaimPolicy::Delete,
        },
    }
}

fn user_in(u: w::User) -> m::User {
    m::User {
        name: u.name,
        enabled: u.enabled,
        password_secret: u.password_secret.map(|p| m::PasswordSecret {
            name: p.name,
            keys: p.keys,
        }),
        password_hashes: u.password_hashes,
        nopass: u.nopass,
        resetpass: u.resetpass,
        commands_allow: u.commands_allow,
        commands_deny: u.commands_deny,
        keys: u.keys.map(|k| m::KeyPatterns {
            read_write: k.read_write,
            read_only: k.read_only,
            write_only: k.write_only,
        }),
        channels: u.channels,
        permissions: u.permissions,
    }
}

fn resources_in(r: w::Resources) -> m::Resources {
    m::Resources {
        requests: r.requests,
        limits: r.limits,
    }
}

fn service_type_in(t: w::ServiceType) -> m::ServiceType {
    match t {
        w::ServiceType::NodePort => m::ServiceType::NodePort,
        w::ServiceType::LoadBalancer => m::ServiceType::LoadBalancer,
        w::ServiceType::ClusterIp => m::ServiceType::ClusterIp,
    }
}

fn ingress_in(i: w::Ingress) -> m::Ingress {
    match i {
        w::Ingress::Ip(ip) => m::Ingress::Ip(ip_in(ip)),
        w::Ingress::Hostname(h) => m::Ingress::Hostname(h),
    }
}

fn gateway_found(g: w::GatewayFound) -> m::GatewayFound {
    match g {
        w::GatewayFound::NotServed => m::GatewayFound::NotServed,
        w::GatewayFound::Missing => m::GatewayFound::Missing,
        w::GatewayFound::Found(g) => m::GatewayFound::Found(m::ObservedGateway {
            listeners: g
                .listeners
                .into_iter()
                .map(|l| m::Listener {
                    name: l.name,
                    port: l.port,
                    protocol: match l.protocol {
                        w::ListenerProtocol::Tcp => m::ListenerProtocol::Tcp,
                        w::ListenerProtocol::Tls => m::ListenerProtocol::Tls,
                        w::ListenerProtocol::Other => m::ListenerProtocol::Other,
                    },
                })
                .collect(),
            addresses: g.addresses.into_iter().map(ingress_in).collect(),
        }),
    }
}

fn ip_in(ip: w::IpAddress) -> m::IpAddress {
    match ip {
        w::IpAddress::V4(v) => m::IpAddress::V4(v),
        w::IpAddress::V6(v) => m::IpAddress::V6(v),
    }
}

fn observed_service(s: w::ObservedService) -> m::ObservedService {
    m::ObservedService {
        shard: s.shard,
        node: s.node,
        ports: s
            .ports
            .into_iter()
            .map(|p| m::ObservedPort {
                node: p.node,
                node_port: p.node_port,
            })
            .collect(),
        ingress: s.ingress.into_iter().map(ingress_in).collect(),
    }
}

fn observed_pod(p: w::ObservedPod) -> m::ObservedPod {
    m::ObservedPod {
        shard: p.shard,
        node: p.node,
        host_ip: p.host_ip.map(ip_in),
        node_external_ip: p.node_external_ip.map(ip_in),
        ready: p.ready,
        outdated: p.outdated,
    }
}

fn slot_range_in(r: w::SlotRange) -> m::SlotRange {
    m::SlotRange {
        start: r.start,
        end: r.end,
    }
}

fn valkey_node(n: w::ValkeyNode) -> m::ValkeyNode {
    m::ValkeyNode {
        shard: n.shard,
        node: n.node,
        id: n.id,
        primary: n.primary,
        slots: n.slots.into_iter().map(slot_range_in).collect(),
        peers: n
            .peers
            .into_iter()
            .map(|p| m::Peer {
                id: p.id,
                failed: p.failed,
                linked: p.linked,
            })
            .collect(),
        migrating: n.migrating,
        synced: n.synced,
        cluster_ok: n.cluster_ok,
        version: n.version,
    }
}

// ---- out of the model -----------------------------------------------------

fn node_ref_out(r: m::NodeRef) -> w::NodeRef {
    w::NodeRef {
        shard: r.shard,
        node: r.node,
    }
}

fn slots_out(slots: Vec<m::SlotRange>) -> Vec<w::SlotRange> {
    slots
        .into_iter()
        .map(|r| w::SlotRange {
            start: r.start,
            end: r.end,
        })
        .collect()
}

fn step_out(s: m::Step) -> w::Step {
    match s {
        m::Step::Meet(x) => w::Step::Meet(w::Meet {
            node: node_ref_out(x.node),
            peer: node_ref_out(x.peer),
        }),
        m::Step::AddSlots(x) => w::Step::AddSlots(w::AddSlots {
            node: node_ref_out(x.node),
            slots: slots_out(x.slots),
        }),
        m::Step::Replicate(x) => w::Step::Replicate(w::Replicate {
            node: node_ref_out(x.node),
            primary: node_ref_out(x.primary),
        }),
        m::Step::Migrate(x) => w::Step::Migrate(w::Migrate {
            source: node_ref_out(x.source),
            target: node_ref_out(x.target),
            slots: slots_out(x.slots),
        }),
        m::Step::Forget(id) => w::Step::Forget(id),
        m::Step::Failover(r) => w::Step::Failover(node_ref_out(r)),
        m::Step::Restart(r) => w::Step::Restart(node_ref_out(r)),
    }
}

fn topology_out(t: m::Topology) -> w::Topology {
    w::Topology {
        steps: t.steps.into_iter().map(step_out).collect(),
        formed: t.formed,
        waiting: t.waiting,
        departing: t.departing.into_iter().map(node_ref_out).collect(),
    }
}

fn violation(v: m::Violation) -> w::Violation {
    w::Violation {
        severity: match v.severity {
            m::Severity::Error => w::Severity::Error,
            m::Severity::Warning => w::Severity::Warning,
        },
        field: v.field,
        message: v.message,
    }
}

fn service_type_out(t: m::ServiceType) -> w::ServiceType {
    match t {
        m::ServiceType::NodePort => w::ServiceType::NodePort,
        m::ServiceType::LoadBalancer => w::ServiceType::LoadBalancer,
        m::ServiceType::ClusterIp => w::ServiceType::ClusterIp,
    }
}

fn desired(d: m::Desired) -> w::Desired {
    w::Desired {
        labels: d.labels,
        services: d
            .services
            .into_iter()
            .map(|s| w::ShardService {
                shard: s.shard,
                node: s.node,
                name: s.name,
                service_type: service_type_out(s.service_type),
                external_traffic_policy: match s.external_traffic_policy {
                    m::TrafficPolicy::Cluster => w::TrafficPolicy::Cluster,
                    m::TrafficPolicy::Local => w::TrafficPolicy::Local,
                },
                ports: s
                    .ports
                    .into_iter()
                    .map(|p| w::ServicePort {
                        node: p.node,
                        name: p.name,
                        port: p.port,
                        node_port: p.node_port,
                    })
                    .collect(),
                annotations: s.annotations,
                load_balancer_source_ranges: s.load_balancer_source_ranges,
                load_balancer_class: s.load_balancer_class,
                allocate_load_balancer_node_ports: s.allocate_load_balancer_node_ports,
            })
            .collect(),
        routes: d
            .routes
            .into_iter()
            .map(|r| w::Route {
                shard: r.shard,
                node: r.node,
                name: r.name,
                kind: match r.kind {
                    m::RouteKind::Tcp => w::RouteKind::Tcp,
                    m::RouteKind::Tls => w::RouteKind::Tls,
                },
                gateway: r.gateway,
                section_name: r.section_name,
                port: r.port,
                hostnames: r.hostnames,
                service: r.service,
                service_port: r.service_port,
            })
            .collect(),
        acl: d.acl,
        workload: w::Workload {
            image: d.workload.image,
            command: d.workload.command,
            resources: d.workload.resources.map(|r| w::Resources {
                requests: r.requests,
                limits: r.limits,
            }),
            tls_secret: d.workload.tls_secret,
            persistence: d.workload.persistence.map(persistence_out),
            restart_settings: d.workload.restart_settings,
            spreads: d.workload.spreads.into_iter().map(spread_out).collect(),
        },
        nodes: d
            .nodes
            .into_iter()
            .map(|n| w::Node {
                shard: n.shard,
                node: n.node,
                name: n.name,
                node_name: n.node_name,
                port_name: n.port_name,
                config: n.config,
                announce: n.announce,
            })
            .collect(),
        status: w::Status {
            external_endpoints: d.status.external_endpoints.map(|eps| {
                eps.into_iter()
                    .map(|e| w::ShardEndpoint {
                        shard: e.shard,
                        node_ports: e.node_ports,
                        nodes: e
                            .nodes
                            .into_iter()
                            .map(|n| w::NodeEndpoint {
                                in_cluster: n.in_cluster,
                                node: n.node,
                                host: n.host,
                                port: n.port,
                                ready: n.ready,
                            })
                            .collect(),
                    })
                    .collect()
            }),
            conditions: d
                .status
                .conditions
                .into_iter()
                .map(|c| w::Condition {
                    type_: c.type_,
                    status: match c.status {
                        m::ConditionStatus::True => w::ConditionStatus::True,
                        m::ConditionStatus::False => w::ConditionStatus::False,
                        m::ConditionStatus::Unknown => w::ConditionStatus::Unknown,
                    },
                    reason: c.reason,
                    message: c.message,
                })
                .collect(),
            gateway: d.status.gateway.map(|g| w::GatewayStatus {
                name: g.name,
                missing_listeners: g.missing_listeners,
            }),
        },
        warnings: d.warnings.into_iter().map(violation).collect(),
        topology: topology_out(d.topology),
        live_settings: d.live_settings,
        disruption_budget: d.disruption_budget,
    }
}
