//! Proptest strategies for reconcile inputs: mostly valid specs (so the
//! interesting paths run), some invalid ones, and observed state that is
//! partial, out of order, stale or out of range.

use proptest::collection::vec;
use proptest::option;
use proptest::prelude::*;
use shardgate_contract::model::*;

/// Cluster names: mostly valid DNS labels, sometimes invalid ones.
pub fn name() -> impl Strategy<Value = String> {
    prop_oneof![
        9 => "[a-z][a-z0-9]{0,6}(-[a-z0-9]{1,6}){0,2}",
        1 => "[A-Za-z0-9._-]{0,50}",
    ]
}

fn ip() -> impl Strategy<Value = IpAddress> {
    prop_oneof![
        4 => any::<u32>().prop_map(IpAddress::V4),
        1 => any::<(u64, u64)>().prop_map(IpAddress::V6),
    ]
}

/// A SHA-256 hex digest, or now and then something that is not one.
fn digest() -> impl Strategy<Value = String> {
    prop_oneof![9 => "[0-9a-f]{64}", 1 => "[0-9a-zA-Z ]{0,8}"]
}

/// `spec.users[]` with the host's digests: mostly valid users, with the odd
/// reserved or malformed name, rule injection or `nopass`.
pub fn user() -> impl Strategy<Value = User> {
    (
        prop_oneof![8 => "[a-z][a-z0-9-]{0,8}", 1 => Just("default".to_string()), 1 => "[_ a-z#~]{0,6}"],
        prop::bool::weighted(0.9),
        vec(digest(), 0..3),
        prop::bool::weighted(0.1),
        vec(prop_oneof!["@(read|write|all|admin)", "[a-z]{3,8}", "[a-z ]{0,6}"], 0..3),
        vec("@(dangerous|admin)", 0..2),
        option::of(("[a-z*:]{1,6}", "[a-z*:]{0,6}").prop_map(|(rw, ro)| KeyPatterns {
            read_write: vec![rw],
            read_only: if ro.is_empty() { vec![] } else { vec![ro] },
            write_only: vec![],
        })),
        option::weighted(0.1, "[-+~&a-z@ ]{0,10}"),
    )
        .prop_map(|(name, enabled, password_hashes, nopass, allow, deny, keys, permissions)| User {
            name,
            enabled,
            password_secret: None,
            password_hashes,
            nopass,
            resetpass: false,
            commands_allow: allow,
            commands_deny: deny,
            keys,
            channels: vec![],
            permissions,
        })
}

/// The host's generated digests; mostly all present.
pub fn credentials() -> impl Strategy<Value = Credentials> {
    (option::weighted(0.9, digest()), digest(), digest()).prop_map(
        |(default_user, operator, replication)| Credentials {
            default_user,
            operator,
            replication,
        },
    )
}

/// `spec.externalAccess`: mostly enabled and valid, with the odd invalid
/// prefix or domain.
pub fn external_access() -> impl Strategy<Value = ExternalAccess> {
    (
        prop::bool::weighted(0.85),
        prop_oneof![
            5 => Just(ServiceType::NodePort),
            5 => Just(ServiceType::LoadBalancer),
            1 => Just(ServiceType::ClusterIp),
        ],
        prop_oneof![4 => Just(TrafficPolicy::Cluster), 1 => Just(TrafficPolicy::Local)],
        vec(("[a-z]{1,5}\\.io/[a-z]{1,8}", "[ -~]{0,12}"), 0..3),
        prop_oneof![9 => "[a-z]{1,8}", 1 => "[a-zA-Z_-]{0,70}"],
        option::weighted(
            0.6,
            prop_oneof![9 => "[a-z]{1,8}(\\.[a-z]{2,6}){1,2}", 1 => ".{0,10}"],
        ),
        prop_oneof![Just(EndpointType::Ip), Just(EndpointType::Hostname)],
        exposure_options(),
    )
        .prop_map(
            |(enabled, service_type, policy, annotations, prefix, domain, pref, options)| {
                ExternalAccess {
                    enabled,
                    service_type,
                    external_traffic_policy: policy,
                    service_annotations: annotations,
                    hostname_prefix: prefix,
                    domain,
                    preferred_endpoint_type: pref,
                    ..options
                }
            },
        )
}

/// The options beyond the seed's: hostname scope, topology, node address type,
/// pinned NodePorts (valid and not), load-balancer settings, external-dns.
fn exposure_options() -> impl Strategy<Value = ExternalAccess> {
    let pins = prop_oneof![
        (29990u32..32780).prop_map(|base| NodePorts {
            base: Some(base),
            ports: vec![],
        }),
        vec(vec(29990u32..32780, 0..4), 0..4).prop_map(|ports| NodePorts { base: None, ports }),
    ];
    (
        prop_oneof![Just(HostnameScope::Shard), Just(HostnameScope::Node)],
        prop_oneof![
            Just(NodeAddressType::InternalIp),
            Just(NodeAddressType::ExternalIp)
        ],
        option::weighted(0.2, pins),
        vec(
            prop_oneof![4 => Just("203.0.113.0/24".to_string()), 1 => "[0-9./]{0,12}"],
            0..2,
        ),
        option::weighted(0.1, "[a-z]{1,5}\\.io/[a-z]{1,8}"),
        option::of(any::<bool>()),
        prop::bool::weighted(0.2),
        prop_oneof![
            Just(ServiceTopology::PerShard),
            Just(ServiceTopology::PerNode)
        ],
        option::weighted(0.15, gateway()),
    )
        .prop_map(
            |(scope, address, pins, ranges, class, allocate, external_dns, topology, gateway)| {
                ExternalAccess {
                    gateway,
                    hostname_scope: scope,
                    topology,
                    node_address_type: address,
                    node_ports: pins,
                    load_balancer_source_ranges: ranges,
                    load_balancer_class: class,
                    allocate_load_balancer_node_ports: allocate,
                    external_dns,
                    ..ExternalAccess::default()
                }
            },
        )
}

/// `spec.externalAccess.gateway`: mostly valid, sometimes a bad name,
/// a section name or a base port past the range.
fn gateway() -> impl Strategy<Value = Gateway> {
    (
        prop_oneof![9 => "[a-z]{1,8}", 1 => "[A-Z_ ]{0,4}"],
        option::weighted(0.1, "[a-z]{1,6}"),
        prop_oneof![9 => 6990u32..7010, 1 => 0u32..70000],
    )
        .prop_map(|(name, section_name, base_port)| Gateway {
            name,
            section_name,
            base_port,
        })
}

/// What the host found of a Gateway: not served, missing, or found with
/// listeners around the usual base port and some addresses.
fn gateway_found() -> impl Strategy<Value = GatewayFound> {
    let protocol = prop_oneof![
        4 => Just(ListenerProtocol::Tcp),
        2 => Just(ListenerProtocol::Tls),
        1 => Just(ListenerProtocol::Other),
    ];
    let listener =
        ("[a-z]{1,6}", 6990u32..7030, protocol).prop_map(|(name, port, protocol)| Listener {
            name,
            port,
            protocol,
        });
    let address = prop_oneof![
        3 => ip().prop_map(Ingress::Ip),
        1 => "gw\\.[a-z]{3,8}\\.example".prop_map(Ingress::Hostname),
    ];
    prop_oneof![
        1 => Just(GatewayFound::NotServed),
        1 => Just(GatewayFound::Missing),
        6 => (vec(listener, 0..12), vec(address, 0..2)).prop_map(|(listeners, addresses)| {
            GatewayFound::Found(ObservedGateway {
                listeners,
                addresses,
            })
        }),
    ]
}

/// Cluster specs: mostly small and valid, sometimes out-of-range shards,
/// replicas or image.
pub fn cluster() -> impl Strategy<Value = Cluster> {
    (
        name(),
        prop_oneof![19 => 1i32..8, 1 => -2i32..1002],
        prop_oneof![19 => 0i32..4, 1 => -1i32..17],
        option::of(prop_oneof!["valkey/valkey:[0-9]\\.[0-9]", "[ a-z]{0,3}"]),
        option::weighted(0.2, "[a-z]{1,8}-tls"),
        option::weighted(0.8, external_access()),
        vec(user(), 0..3),
        (
            vec(setting(), 0..3),
            option::weighted(0.3, persistence()),
            any::<bool>(),
            scheduling(),
        ),
    )
        .prop_map(
            |(
                name,
                shards,
                replicas,
                image,
                tls,
                ea,
                users,
                (config, persistence, pdb, scheduling),
            )| Cluster {
                name,
                namespace: "default".into(),
                shards,
                replicas,
                image,
                resources: None,
                tls,
                external_access: ea,
                users,
                config,
                persistence,
                disruption_budget: pdb,
                scheduling,
            },
        )
}

/// Spread shorthands: mostly the default (a shard's pods on different
/// nodes where possible), sometimes any mix (some of them refused).
fn scheduling() -> impl Strategy<Value = Scheduling> {
    let strength = prop_oneof![
        Just(Strength::Disabled),
        Just(Strength::Preferred),
        Just(Strength::Required)
    ];
    let set =
        (strength.clone(), strength.clone(), strength).prop_map(|(shard, primaries, pods)| {
            SpreadSet {
                shard,
                primaries,
                pods,
            }
        });
    let default = Scheduling {
        node: SpreadSet {
            shard: Strength::Preferred,
            ..SpreadSet::default()
        },
        ..Scheduling::default()
    };
    prop_oneof![
        3 => Just(default),
        1 => (set.clone(), set).prop_map(|(node, zone)| Scheduling { node, zone }),
    ]
}

/// A `spec.config` entry: mostly settings users may set, sometimes one the
/// operator owns or a malformed one.
fn setting() -> impl Strategy<Value = (String, String)> {
    (
        prop_oneof![
            4 => Just("maxmemory".to_string()),
            2 => Just("databases".to_string()),
            1 => Just("port".to_string()),
            1 => Just("cluster-node-timeout".to_string()),
            1 => "[a-z -]{1,12}",
        ],
        prop_oneof![4 => "[0-9]{1,4}(mb|gb)?", 1 => "[a-z\n ]{0,6}"],
    )
}

fn persistence() -> impl Strategy<Value = Persistence> {
    (
        prop_oneof![4 => "[1-9][0-9]{0,2}Gi", 1 => "[0-9a-z]{0,4}"],
        option::of(prop_oneof!["[a-z]{1,8}", "[A-Z ]{1,3}"]),
        prop_oneof![Just(ReclaimPolicy::Retain), Just(ReclaimPolicy::Delete)],
    )
        .prop_map(|(size, storage_class_name, reclaim_policy)| Persistence {
            size,
            storage_class_name,
            reclaim_policy,
        })
}

/// Observed state for a cluster of about `shards` x `nodes`: ports,
/// ingress and pods present or not, some beyond the spec's range.
pub fn observed(shards: u32, nodes: u32) -> impl Strategy<Value = Observed> {
    let s = shards + 1;
    let n = nodes + 1;
    let port = (0..n, prop_oneof![1 => Just(0u32), 3 => 30000u32..32768]);
    let ingress = prop_oneof![
        ip().prop_map(Ingress::Ip),
        "[a-z]{3,8}\\.elb\\.example\\.com".prop_map(Ingress::Hostname)
    ];
    let service = (
        0..s,
        option::weighted(0.3, 0..n),
        vec(port, 0..(n as usize + 1)),
        vec(ingress, 0..2),
    )
        .prop_map(|(shard, node, ports, ingress)| ObservedService {
            shard,
            node,
            ports: ports
                .into_iter()
                .map(|(node, node_port)| ObservedPort { node, node_port })
                .collect(),
            ingress,
        });
    let pod = (
        0..s,
        0..n,
        option::weighted(0.8, ip()),
        option::weighted(0.5, ip()),
        any::<bool>(),
    )
        .prop_map(
            |(shard, node, host_ip, node_external_ip, ready)| ObservedPod {
                shard,
                node,
                host_ip,
                node_external_ip,
                ready,
                outdated: false,
            },
        );
    (
        vec(service, 0..(s as usize + 1)),
        vec(pod, 0..((s * n) as usize + 1)),
        option::weighted(0.3, gateway_found()),
    )
        .prop_map(|(services, pods, gateway)| Observed {
            services,
            pods,
            gateway,
            valkey: None,
        })
}

/// A cluster and observed state that fits it roughly.
pub fn input() -> impl Strategy<Value = Input> {
    cluster().prop_flat_map(|c| {
        let shards = c.shards.clamp(0, 8) as u32;
        let nodes = c.replicas.clamp(0, 4) as u32 + 1;
        (
            Just(c),
            observed(shards, nodes),
            vec(name(), 0..3),
            credentials(),
        )
            .prop_map(|(cluster, observed, other_clusters, credentials)| Input {
                cluster,
                observed,
                other_clusters,
                pinned_elsewhere: Vec::new(),
                credentials,
            })
    })
}
