//! Table tests of the reconcile logic, run natively.

use shardgate_contract::model::*;
use shardgate_guest::{reconcile, validate};

fn cluster(shards: i32, replicas: i32, ea: Option<ExternalAccess>) -> Cluster {
    Cluster {
        name: "demo".into(),
        namespace: "default".into(),
        shards,
        replicas,
        external_access: ea,
        ..Cluster::default()
    }
}

fn hostname_ea() -> ExternalAccess {
    ExternalAccess {
        domain: Some("valkey.example.com".into()),
        preferred_endpoint_type: EndpointType::Hostname,
        ..ExternalAccess::default()
    }
}

fn lb_ea() -> ExternalAccess {
    ExternalAccess {
        service_type: ServiceType::LoadBalancer,
        ..ExternalAccess::default()
    }
}

fn input(c: Cluster, observed: Observed) -> Input {
    Input {
        cluster: c,
        observed,
        other_clusters: vec![],
        pinned_elsewhere: Vec::new(),
        credentials: Default::default(),
    }
}

fn run(c: Cluster, observed: Observed) -> Desired {
    reconcile(&input(c, observed)).expect("valid input")
}

fn errors(c: Cluster) -> Vec<(String, String)> {
    match reconcile(&input(c, Observed::default())) {
        Ok(_) => vec![],
        Err(e) => e
            .violations
            .into_iter()
            .map(|v| (v.field, v.message))
            .collect(),
    }
}

fn announce<'a>(d: &'a Desired, shard: u32, node: u32, key: &str) -> &'a str {
    let n = d
        .nodes
        .iter()
        .find(|n| n.shard == shard && n.node == node)
        .unwrap();
    &n.announce.iter().find(|(k, _)| k == key).unwrap().1
}

fn ports(shard: u32, node_ports: &[(u32, u32)]) -> ObservedService {
    ObservedService {
        node: None,
        shard,
        ports: node_ports
            .iter()
            .map(|&(node, node_port)| ObservedPort { node, node_port })
            .collect(),
        ingress: vec![],
    }
}

fn pod(shard: u32, node: u32, host: Option<u32>) -> ObservedPod {
    ObservedPod {
        shard,
        node,
        host_ip: host.map(IpAddress::V4),
        node_external_ip: None,
        ready: true,
        outdated: false,
    }
}

const HOST: u32 = 0x0a00_0005; // 10.0.0.5

#[test]
fn sample_hostname_cluster_without_observed_state() {
    let d = run(cluster(3, 1, Some(hostname_ea())), Observed::default());
    let names: Vec<_> = d.services.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "shardgate-demo-shard-0",
            "shardgate-demo-shard-1",
            "shardgate-demo-shard-2"
        ]
    );
    for s in &d.services {
        assert_eq!(s.service_type, ServiceType::NodePort);
        assert_eq!(s.external_traffic_policy, TrafficPolicy::Cluster);
        let p: Vec<_> = s
            .ports
            .iter()
            .map(|p| (p.name.as_str(), p.port, p.node_port))
            .collect();
        assert_eq!(p, [("vk-n0", 6379, 0), ("vk-n1", 6380, 0)]);
    }
    assert_eq!(d.nodes.len(), 6);
    let n = &d.nodes[3];
    assert_eq!((n.shard, n.node), (1, 1));
    assert_eq!(n.name, "shardgate-demo-1-1");
    assert_eq!(n.node_name, "demo-1-1");
    assert_eq!(n.port_name, "vk-n1");
    // No NodePort yet: only the human name is announced, no endpoint.
    assert_eq!(
        announce(&d, 1, 1, "cluster-announce-human-nodename"),
        "demo-1-1"
    );
    assert_eq!(announce(&d, 1, 1, "cluster-announce-client-port"), "0");
    assert_eq!(announce(&d, 1, 1, "cluster-announce-hostname"), "");
    let eps = d.status.external_endpoints.as_ref().unwrap();
    assert_eq!(eps.len(), 3);
    assert_eq!(eps[2].shard, 2);
    assert_eq!(eps[2].node_ports, [0, 0]);
    assert!(eps[2].nodes.iter().all(|n| !n.ready && n.host.is_empty()));
    assert_eq!(d.status.conditions[0].type_, "ExternalAccessReady");
    assert_eq!(d.status.conditions[0].status, ConditionStatus::False);
    assert_eq!(d.status.conditions[0].reason, "AwaitingNodePorts");
}

#[test]
fn allocated_node_ports_are_kept_and_announced() {
    let observed = Observed {
        services: (0..3)
            .map(|s| ports(s, &[(0, 31000 + 10 * s), (1, 31001 + 10 * s)]))
            .collect(),
        pods: (0..3)
            .flat_map(|s| (0..2).map(move |n| pod(s, n, None)))
            .collect(),
        gateway: None,
        valkey: None,
    };
    let d = run(cluster(3, 1, Some(hostname_ea())), observed);
    assert_eq!(d.services[2].ports[1].node_port, 31021);
    assert_eq!(announce(&d, 2, 1, "cluster-announce-client-port"), "31021");
    assert_eq!(
        announce(&d, 2, 1, "cluster-announce-hostname"),
        "shard-2.valkey.example.com"
    );
    assert_eq!(
        announce(&d, 2, 1, "cluster-preferred-endpoint-type"),
        "hostname"
    );
    let node = &d.nodes[5];
    assert!(node.config.contains("cluster-announce-client-port 31021\n"));
    assert!(
        node.config
            .contains("cluster-announce-hostname shard-2.valkey.example.com\n")
    );
    assert!(
        node.config
            .contains("cluster-preferred-endpoint-type hostname\n")
    );
    assert!(
        node.config
            .contains("cluster-announce-human-nodename demo-2-1\n")
    );
    let eps = d.status.external_endpoints.as_ref().unwrap();
    assert_eq!(eps[1].node_ports, [31010, 31011]);
    assert_eq!(eps[1].nodes[0].host, "shard-1.valkey.example.com");
    assert!(eps[1].nodes[0].ready);
    assert_eq!(d.status.conditions[0].status, ConditionStatus::True);
}

#[test]
fn node_ports_are_matched_by_port_name_not_position() {
    // Out of order, node 1 missing, and an extra port for a node that does
    // not exist.
    let observed = Observed {
        services: vec![ports(0, &[(2, 30002), (0, 30000), (7, 30007)])],
        pods: vec![],
        gateway: None,
        valkey: None,
    };
    let d = run(cluster(1, 2, Some(ExternalAccess::default())), observed);
    let p: Vec<_> = d.services[0]
        .ports
        .iter()
        .map(|p| (p.node, p.node_port))
        .collect();
    assert_eq!(p, [(0, 30000), (1, 0), (2, 30002)]);
}

#[test]
fn ip_mode_never_announces_a_port_without_a_reachable_ip() {
    // Upstream W1: port allocated, host IP unknown -> announce nothing.
    let observed = Observed {
        services: vec![ports(0, &[(0, 30000)])],
        pods: vec![pod(0, 0, None)],
        gateway: None,
        valkey: None,
    };
    let d = run(cluster(1, 0, Some(ExternalAccess::default())), observed);
    assert_eq!(announce(&d, 0, 0, "cluster-announce-client-port"), "0");
    assert_eq!(announce(&d, 0, 0, "cluster-announce-client-ipv4"), "");
    assert!(!d.nodes[0].config.contains("client-port"));
    assert_eq!(d.status.conditions[0].reason, "AwaitingHostIP");
    let ep = &d.status.external_endpoints.as_ref().unwrap()[0];
    assert_eq!(ep.node_ports, [30000]);
    assert!(!ep.nodes[0].ready);

    // Once the pod is scheduled, its host IP and the NodePort are announced.
    let observed = Observed {
        services: vec![ports(0, &[(0, 30000)])],
        pods: vec![pod(0, 0, Some(HOST))],
        gateway: None,
        valkey: None,
    };
    let d = run(cluster(1, 0, Some(ExternalAccess::default())), observed);
    assert_eq!(
        announce(&d, 0, 0, "cluster-announce-client-ipv4"),
        "10.0.0.5"
    );
    assert_eq!(announce(&d, 0, 0, "cluster-announce-client-port"), "30000");
    assert_eq!(announce(&d, 0, 0, "cluster-preferred-endpoint-type"), "ip");
    let ep = &d.status.external_endpoints.as_ref().unwrap()[0];
    assert_eq!(
        (ep.nodes[0].host.as_str(), ep.nodes[0].port),
        ("10.0.0.5", 30000)
    );
    assert!(ep.nodes[0].ready);
}

#[test]
fn ipv6_host_ip_is_announced_as_client_ipv6() {
    let observed = Observed {
        services: vec![ports(0, &[(0, 30000)])],
        pods: vec![ObservedPod {
            shard: 0,
            node: 0,
            host_ip: Some(IpAddress::V6((0x2001_0db8_0000_0000, 1))),
            node_external_ip: None,
            ready: true,
            outdated: false,
        }],
        gateway: None,
        valkey: None,
    };
    let d = run(cluster(1, 0, Some(ExternalAccess::default())), observed);
    assert_eq!(
        announce(&d, 0, 0, "cluster-announce-client-ipv6"),
        "2001:db8::1"
    );
    assert_eq!(announce(&d, 0, 0, "cluster-announce-client-ipv4"), "");
}

#[test]
fn load_balancer_ports_and_pending_ingress() {
    let d = run(cluster(2, 1, Some(lb_ea())), Observed::default());
    for s in &d.services {
        assert_eq!(s.service_type, ServiceType::LoadBalancer);
        let p: Vec<_> = s.ports.iter().map(|p| p.port).collect();
        assert_eq!(p, [6379, 6380]);
    }
    // No ingress yet: nothing external is announced, and status says why.
    assert_eq!(announce(&d, 0, 1, "cluster-announce-client-port"), "0");
    assert_eq!(d.status.conditions[0].reason, "AwaitingLoadBalancerIngress");
    let eps = d.status.external_endpoints.as_ref().unwrap();
    assert_eq!(eps[0].node_ports, [6379, 6380]);
    assert!(eps[0].nodes.iter().all(|n| n.port == 0 && !n.ready));
}

#[test]
fn load_balancer_ingress_ip_is_announced() {
    let mut svc = ports(0, &[]);
    svc.ingress = vec![Ingress::Ip(IpAddress::V4(0x7f00_0201))];
    let observed = Observed {
        services: vec![svc],
        pods: vec![pod(0, 0, Some(HOST)), pod(0, 1, Some(HOST))],
        gateway: None,
        valkey: None,
    };
    let d = run(cluster(1, 1, Some(lb_ea())), observed);
    assert_eq!(
        announce(&d, 0, 1, "cluster-announce-client-ipv4"),
        "127.0.2.1"
    );
    assert_eq!(announce(&d, 0, 1, "cluster-announce-client-port"), "6380");
    let ep = &d.status.external_endpoints.as_ref().unwrap()[0];
    assert_eq!(
        (ep.nodes[1].host.as_str(), ep.nodes[1].port),
        ("127.0.2.1", 6380)
    );
    assert_eq!(d.status.conditions[0].status, ConditionStatus::True);
}

#[test]
fn hostname_only_load_balancer_announces_its_hostname() {
    let mut svc = ports(0, &[]);
    svc.ingress = vec![Ingress::Hostname("abc.elb.amazonaws.com".into())];
    let d = run(
        cluster(1, 0, Some(lb_ea())),
        Observed {
            services: vec![svc],
            pods: vec![pod(0, 0, Some(HOST))],
            gateway: None,
            valkey: None,
        },
    );
    assert_eq!(
        announce(&d, 0, 0, "cluster-announce-hostname"),
        "abc.elb.amazonaws.com"
    );
    assert_eq!(
        announce(&d, 0, 0, "cluster-preferred-endpoint-type"),
        "hostname"
    );
    assert_eq!(announce(&d, 0, 0, "cluster-announce-client-port"), "6379");
    assert!(
        d.warnings
            .iter()
            .any(|w| w.field == "spec.externalAccess.preferredEndpointType")
    );
}

#[test]
fn replicas_one_to_two_adds_ports_and_keeps_node_ports() {
    let observed = Observed {
        services: vec![ports(0, &[(0, 30100), (1, 30101)])],
        pods: vec![],
        gateway: None,
        valkey: None,
    };
    let d = run(cluster(1, 2, Some(ExternalAccess::default())), observed);
    let p: Vec<_> = d.services[0]
        .ports
        .iter()
        .map(|p| (p.name.as_str(), p.node_port))
        .collect();
    assert_eq!(p, [("vk-n0", 30100), ("vk-n1", 30101), ("vk-n2", 0)]);
}

#[test]
fn shards_three_to_one_drops_excess_services() {
    let observed = Observed {
        services: (0..3).map(|s| ports(s, &[(0, 30000 + s)])).collect(),
        pods: vec![],
        gateway: None,
        valkey: None,
    };
    let d = run(cluster(1, 0, Some(ExternalAccess::default())), observed);
    assert_eq!(d.services.len(), 1);
    assert_eq!(d.services[0].ports[0].node_port, 30000);
    assert_eq!(d.status.external_endpoints.as_ref().unwrap().len(), 1);
    assert_eq!(d.nodes.len(), 1);
}

/// With Valkey managed, a departing shard that still serves slots keeps its
/// Service (with its NodePort), its node objects and its endpoints.
#[test]
fn shards_three_to_two_keep_a_draining_shard() {
    use shardgate_contract::model::{Peer, SlotRange, ValkeyNode};
    let fact = |shard: u32, start: u32, end: u32| ValkeyNode {
        shard,
        node: 0,
        id: format!("id-{shard}"),
        primary: None,
        slots: vec![SlotRange { start, end }],
        peers: (0..3)
            .filter(|s| *s != shard)
            .map(|s| Peer {
                id: format!("id-{s}"),
                failed: false,
                linked: true,
            })
            .collect(),
        migrating: false,
        synced: true,
        cluster_ok: true,
        version: "9.1.2".into(),
    };
    let observed = Observed {
        services: (0..3).map(|s| ports(s, &[(0, 30000 + s)])).collect(),
        pods: (0..3).map(|s| pod(s, 0, None)).collect(),
        gateway: None,
        valkey: Some(vec![
            fact(0, 0, 5461),
            fact(1, 5462, 10922),
            fact(2, 10923, 16383),
        ]),
    };
    let d = run(cluster(2, 0, Some(ExternalAccess::default())), observed);
    assert_eq!(d.topology.departing, vec![NodeRef { shard: 2, node: 0 }]);
    let shards: Vec<u32> = d.services.iter().map(|s| s.shard).collect();
    assert_eq!(shards, vec![0, 1, 2]);
    assert_eq!(d.services[2].ports[0].node_port, 30002);
    assert_eq!(d.nodes.len(), 3);
    assert!(!d.topology.formed);
    assert!(
        d.topology
            .steps
            .iter()
            .all(|s| matches!(s, Step::Migrate(_)))
    );
}

#[test]
fn disabled_is_identical_to_absent() {
    let observed = Observed {
        services: vec![ports(0, &[(0, 30000)])],
        pods: vec![pod(0, 0, Some(HOST))],
        gateway: None,
        valkey: None,
    };
    let disabled = ExternalAccess {
        enabled: false,
        ..hostname_ea()
    };
    let a = run(cluster(2, 1, Some(disabled)), observed.clone());
    let b = run(cluster(2, 1, None), observed);
    assert_eq!(a, b);
    assert!(a.services.is_empty());

    assert_eq!(a.status.external_endpoints, None);
    assert!(a.status.conditions.is_empty());
    for n in &a.nodes {
        assert!(!n.config.contains("announce"), "{}", n.config);
        // Every announce key is reset, so disabling undoes enabling live.
        assert_eq!(n.announce.len(), 7);
        assert!(n.announce.iter().all(|(k, v)| v.is_empty()
            || v == "0"
            || (k == "cluster-preferred-endpoint-type" && v == "ip")));
    }
}

#[test]
fn enabling_changes_nothing_about_the_pod_template() {
    let off = run(cluster(2, 1, None), Observed::default());
    let on = run(cluster(2, 1, Some(hostname_ea())), Observed::default());
    assert_eq!(off.workload, on.workload);
    for (a, b) in off.nodes.iter().zip(&on.nodes) {
        assert_eq!((&a.name, &a.port_name), (&b.name, &b.port_name));
    }
}

#[test]
fn tls_announces_the_external_port_for_tls_and_plaintext_connections() {
    let mut c = cluster(1, 0, Some(hostname_ea()));
    c.tls = Some("valkey-tls".into());
    let d = run(
        c,
        Observed {
            services: vec![ports(0, &[(0, 30500)])],
            pods: vec![],
            gateway: None,
            valkey: None,
        },
    );
    assert_eq!(
        announce(&d, 0, 0, "cluster-announce-client-tls-port"),
        "30500"
    );
    // Where TLS ends in front of the node, Valkey answers with the plain
    // port: it is the external one too.
    assert_eq!(announce(&d, 0, 0, "cluster-announce-client-port"), "30500");
    assert!(d.nodes[0].config.contains("tls-port 6379\n"));
    assert_eq!(d.workload.tls_secret.as_deref(), Some("valkey-tls"));
}

#[test]
fn annotations_policy_and_labels() {
    let ea = ExternalAccess {
        service_annotations: vec![
            ("z.example.com/b".into(), "2".into()),
            ("a.example.com/a".into(), "1".into()),
        ],
        external_traffic_policy: TrafficPolicy::Local,
        ..ExternalAccess::default()
    };
    let d = run(cluster(1, 0, Some(ea.clone())), Observed::default());
    assert_eq!(d.services[0].annotations[0].0, "a.example.com/a");
    assert_eq!(d.services[0].external_traffic_policy, TrafficPolicy::Local);
    // NodePort ip mode sends every client to its pod's own node: Local is
    // right there (and keeps source IPs), so no warning.
    assert!(d.warnings.is_empty(), "{:?}", d.warnings);
    // A load balancer spreads a shard's traffic over nodes: Local drops.
    let lb = ExternalAccess {
        service_type: ServiceType::LoadBalancer,
        ..ea
    };
    let d = run(cluster(1, 0, Some(lb)), Observed::default());
    let w: Vec<_> = d.warnings.iter().map(|w| w.field.as_str()).collect();
    assert_eq!(w, ["spec.externalAccess.externalTrafficPolicy"]);
    let keys: Vec<_> = d.labels.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(
        keys,
        [
            "app.kubernetes.io/instance",
            "app.kubernetes.io/managed-by",
            "app.kubernetes.io/name",
            "shardgate.io/cluster"
        ]
    );
    assert_eq!(d.workload.image, "valkey/valkey:9.0");
}

#[test]
fn every_validation_error_names_its_field() {
    let field = |c: Cluster| -> Vec<String> { errors(c).into_iter().map(|(f, _)| f).collect() };
    let with = |f: &dyn Fn(&mut ExternalAccess)| {
        let mut ea = ExternalAccess::default();
        f(&mut ea);
        cluster(3, 1, Some(ea))
    };
    assert_eq!(field(cluster(0, 0, None)), ["spec.shards"]);
    assert_eq!(field(cluster(1001, 0, None)), ["spec.shards"]);
    assert_eq!(field(cluster(1, -1, None)), ["spec.replicas"]);
    assert_eq!(field(cluster(1, 16, None)), ["spec.replicas"]);
    // At most 400 nodes, counted as shards x (replicas + 1).
    assert_eq!(field(cluster(401, 0, None)), ["spec.shards"]);
    assert_eq!(field(cluster(201, 1, None)), ["spec.shards"]);
    assert_eq!(field(cluster(26, 15, None)), ["spec.shards"]);
    for (shards, replicas) in [(400, 0), (200, 1), (25, 15)] {
        assert!(
            field(cluster(shards, replicas, None)).is_empty(),
            "{shards} x {replicas}"
        );
    }
    assert_eq!(
        field(with(&|ea| ea.domain = Some("Bad_Domain".into()))),
        ["spec.externalAccess.domain"]
    );
    assert_eq!(
        field(with(&|ea| ea.domain = Some(String::new()))),
        ["spec.externalAccess.domain"]
    );
    assert_eq!(
        field(with(&|ea| ea.hostname_prefix = "-x".into())),
        ["spec.externalAccess.hostnamePrefix"]
    );
    assert_eq!(
        field(with(&|ea| ea.hostname_prefix = "a".repeat(63))),
        ["spec.externalAccess.hostnamePrefix"]
    );
    assert_eq!(
        field(with(&|ea| {
            ea.hostname_prefix = "a".repeat(60);
            ea.domain = Some(
                [
                    "b".repeat(60),
                    "c".repeat(60),
                    "d".repeat(60),
                    "e".repeat(60),
                ]
                .join("."),
            );
        })),
        ["spec.externalAccess.domain"]
    );
    assert_eq!(
        field(with(
            &|ea| ea.preferred_endpoint_type = EndpointType::Hostname
        )),
        ["spec.externalAccess.domain"]
    );
    // W11: the hostname rule only applies when enabled.
    assert!(
        field(with(&|ea| {
            ea.enabled = false;
            ea.preferred_endpoint_type = EndpointType::Hostname;
        }))
        .is_empty()
    );
    assert_eq!(
        field(with(
            &|ea| ea.service_annotations = vec![("bad key".into(), "v".into())]
        )),
        ["spec.externalAccess.serviceAnnotations[\"bad key\"]"]
    );
    let mut c = cluster(1, 0, None);
    c.name = "Demo".into();
    assert_eq!(field(c), ["metadata.name"]);
    let mut c = cluster(1, 0, None);
    c.name = "a".repeat(44);
    let e = errors(c);
    assert_eq!(e[0].0, "metadata.name");
    assert!(e[0].1.contains("StatefulSet"), "{}", e[0].1);
    let mut c = cluster(1, 0, None);
    c.image = Some(String::new());
    assert_eq!(field(c), ["spec.image"]);
    let mut c = cluster(1, 0, None);
    c.tls = Some("Not A Secret".into());
    assert_eq!(field(c), ["spec.tls.secretName"]);
    let mut c = cluster(1, 0, None);
    c.resources = Some(Resources {
        requests: vec![("cpu".into(), "lots".into())],
        limits: vec![],
    });
    assert_eq!(field(c), ["spec.resources.requests.cpu"]);
    // Several errors are all reported, in a fixed order.
    let mut c = cluster(
        0,
        -1,
        Some(ExternalAccess {
            domain: Some("..".into()),
            ..ExternalAccess::default()
        }),
    );
    c.name = "X".into();
    assert_eq!(
        field(c),
        [
            "metadata.name",
            "spec.shards",
            "spec.replicas",
            "spec.externalAccess.domain"
        ]
    );
}

#[test]
fn validate_reports_warnings_and_errors_without_observed_state() {
    let ea = ExternalAccess {
        external_traffic_policy: TrafficPolicy::Local,
        service_type: ServiceType::LoadBalancer,
        ..ExternalAccess::default()
    };
    let v = validate(&cluster(0, 0, Some(ea)));
    let got: Vec<_> = v.iter().map(|v| (v.severity, v.field.as_str())).collect();
    assert_eq!(
        got,
        [
            (Severity::Error, "spec.shards"),
            (
                Severity::Warning,
                "spec.externalAccess.externalTrafficPolicy"
            )
        ]
    );
}

#[test]
fn name_collisions_with_other_clusters_are_errors() {
    // The naming grammar keeps clusters apart; the check guards it.
    let c = cluster(3, 1, None);
    let i = Input {
        cluster: c,
        observed: Observed::default(),
        other_clusters: vec!["demo-shard".into(), "demo-0".into(), "demo".into()],
        pinned_elsewhere: Vec::new(),
        credentials: Default::default(),
    };
    assert!(reconcile(&i).is_ok());
}

#[test]
fn output_ignores_observed_objects_out_of_range() {
    let observed = Observed {
        services: vec![ports(9, &[(0, 30000)])],
        pods: vec![pod(0, 9, Some(HOST)), pod(9, 0, Some(HOST))],
        gateway: None,
        valkey: None,
    };
    let a = run(cluster(1, 0, Some(ExternalAccess::default())), observed);
    let b = run(
        cluster(1, 0, Some(ExternalAccess::default())),
        Observed::default(),
    );
    assert_eq!(a, b);
}

#[test]
fn every_node_requires_a_login_whatever_the_exposure() {
    for ea in [
        None,
        Some(ExternalAccess::default()),
        Some(hostname_ea()),
        Some(lb_ea()),
    ] {
        let exposed = ea.is_some();
        let mut i = input(cluster(3, 1, ea), Observed::default());
        i.credentials = Credentials {
            default_user: Some("d".repeat(64)),
            operator: "o".repeat(64),
            replication: "r".repeat(64),
        };
        let d = reconcile(&i).unwrap();
        for node in &d.nodes {
            let c = &node.config;
            assert!(c.contains("protected-mode yes\n"), "{exposed}: {c}");
            assert!(c.contains("aclfile /etc/valkey/acl/users.acl\n"), "{c}");
            assert!(c.contains("masteruser _replication\n"), "{c}");
            assert!(!c.contains("protected-mode no"), "{c}");
            assert!(
                !c.contains("requirepass"),
                "passwords are never in the config"
            );
        }
        // The default user has the generated password and nothing logs in
        // without one.
        assert!(
            d.acl
                .starts_with(&format!("user default on #{} ", "d".repeat(64))),
            "{}",
            d.acl
        );
        assert!(!d.acl.contains("nopass"), "{}", d.acl);
    }
}

/// One shard, node 1 its primary after a failover, node 0 its replica.
fn failed_over_pair(version: &str) -> Vec<ValkeyNode> {
    let node = |n: u32, primary: Option<&str>, slots: Vec<SlotRange>| ValkeyNode {
        shard: 0,
        node: n,
        id: format!("id-{n}"),
        primary: primary.map(String::from),
        slots,
        peers: vec![Peer {
            id: format!("id-{}", 1 - n),
            failed: false,
            linked: true,
        }],
        migrating: false,
        synced: true,
        cluster_ok: true,
        version: version.into(),
    };
    vec![
        node(0, Some("id-1"), vec![]),
        node(
            1,
            None,
            vec![SlotRange {
                start: 0,
                end: 16383,
            }],
        ),
    ]
}

/// `replicas: 1 -> 0` after node 1 took over: node 1 keeps its objects, its
/// Service port and its endpoint while it serves, and hands over first.
#[test]
fn a_departing_node_that_serves_keeps_its_objects_and_hands_over() {
    let observed = Observed {
        services: vec![ports(0, &[(0, 30000), (1, 30001)])],
        pods: vec![pod(0, 0, Some(HOST)), pod(0, 1, Some(HOST))],
        gateway: None,
        valkey: Some(failed_over_pair("9.1.2")),
    };
    let d = run(cluster(1, 0, Some(ExternalAccess::default())), observed);
    let kept: Vec<(u32, u32)> = d.nodes.iter().map(|n| (n.shard, n.node)).collect();
    assert_eq!(kept, [(0, 0), (0, 1)]);
    assert_eq!(d.topology.departing, vec![NodeRef { shard: 0, node: 1 }]);
    assert_eq!(
        d.topology.steps,
        vec![Step::Failover(NodeRef { shard: 0, node: 0 })]
    );
    let ports: Vec<(&str, u32)> = d.services[0]
        .ports
        .iter()
        .map(|p| (p.name.as_str(), p.node_port))
        .collect();
    assert_eq!(ports, [("vk-n0", 30000), ("vk-n1", 30001)]);
    let eps = d.status.external_endpoints.as_ref().unwrap();
    assert_eq!(eps[0].node_ports, vec![30000, 30001]);
    assert_eq!(announce(&d, 0, 1, "cluster-announce-client-port"), "30001");
}

/// Valkey 8.1 has no `cluster-announce-client-port`: the cluster is still
/// rendered and formed, nothing external is announced (or asked of the
/// server), and the condition says why.
#[test]
fn an_old_server_is_told_apart_and_asked_only_for_what_it_has() {
    let observed = Observed {
        services: vec![ports(0, &[(0, 30000), (1, 30001)])],
        pods: vec![pod(0, 0, Some(HOST)), pod(0, 1, Some(HOST))],
        gateway: None,
        valkey: Some(failed_over_pair("8.1.8")),
    };
    let d = run(cluster(1, 1, Some(ExternalAccess::default())), observed);
    let c = &d.status.conditions[0];
    assert_eq!(
        (c.type_.as_str(), c.status, c.reason.as_str()),
        (
            "ExternalAccessReady",
            ConditionStatus::False,
            "ServerTooOld"
        )
    );
    assert!(c.message.contains("8.1.8") && c.message.contains("cluster-announce-client-port"));
    for n in &d.nodes {
        assert!(
            !n.announce.iter().any(|(k, _)| k.contains("client-port")),
            "{:?}",
            n.announce
        );
        assert!(!n.config.contains("client-port") && !n.config.contains("client-ipv4"));
        assert!(n.config.contains("cluster-announce-human-nodename"));
    }
    let eps = d.status.external_endpoints.as_ref().unwrap();
    assert!(eps[0].nodes.iter().all(|n| !n.ready && n.host.is_empty()));
}

#[test]
fn config_and_persistence_are_checked_by_field() {
    let mut c = cluster(3, 0, None);
    c.config = vec![
        ("port".into(), "7000".into()),
        ("tls-port".into(), "7001".into()),
        ("maxmemory".into(), "100mb".into()),
    ];
    c.persistence = Some(Persistence {
        size: "0".into(),
        storage_class_name: Some("Bad Class".into()),
        reclaim_policy: ReclaimPolicy::Retain,
    });
    let fields: Vec<String> = errors(c).into_iter().map(|(f, _)| f).collect();
    assert_eq!(
        fields,
        [
            "spec.persistence.size",
            "spec.persistence.storageClassName",
            "spec.config.port",
            "spec.config.tls-port"
        ]
    );
}

#[test]
fn config_is_set_live_or_rolled_and_written_for_restarts() {
    let mut c = cluster(1, 0, None);
    c.config = vec![
        ("maxmemory".into(), "100mb".into()),
        ("databases".into(), "4".into()),
    ];
    c.disruption_budget = true;
    c.persistence = Some(Persistence {
        size: "1Gi".into(),
        ..Persistence::default()
    });
    let d = run(c.clone(), Observed::default());
    assert_eq!(d.live_settings, vec![("maxmemory".into(), "100mb".into())]);
    assert_eq!(d.workload.restart_settings, "databases 4\n");
    assert_eq!(d.workload.persistence, c.persistence);
    assert_eq!(d.disruption_budget, Some(1));
    let conf = &d.nodes[0].config;
    assert!(conf.contains("\ndatabases 4\n") && conf.contains("\nmaxmemory 100mb\n"));
    c.disruption_budget = false;
    c.config.clear();
    let d = run(c, Observed::default());
    assert_eq!(d.disruption_budget, None);
    assert!(d.live_settings.is_empty() && d.workload.restart_settings.is_empty());
}

#[test]
fn every_exposure_option_error_names_its_field() {
    let field = |ea: ExternalAccess| -> Vec<String> {
        errors(cluster(2, 1, Some(ea)))
            .into_iter()
            .map(|(f, _)| f)
            .collect()
    };
    let pins = |base: Option<u32>, ports: Vec<Vec<u32>>| ExternalAccess {
        node_ports: Some(NodePorts { base, ports }),
        ..ExternalAccess::default()
    };
    let at = |f: &str| format!("spec.externalAccess.{f}");
    // 2 shards x 2 nodes: the base's ports must all fit 30000-32767.
    for (ea, want) in [
        (pins(Some(30000), vec![]), vec![]),
        (pins(Some(32764), vec![]), vec![]),
        (pins(Some(32765), vec![]), vec![at("nodePorts.base")]),
        (pins(Some(29999), vec![]), vec![at("nodePorts.base")]),
        (pins(None, vec![]), vec![at("nodePorts")]),
        (pins(Some(30000), vec![vec![30001]]), vec![at("nodePorts")]),
        (pins(None, vec![vec![30001, 30002], vec![30003]]), vec![]),
        (
            pins(None, vec![vec![30001, 30001]]),
            vec![at("nodePorts.ports[0][1]")],
        ),
        (
            pins(None, vec![vec![80]]),
            vec![at("nodePorts.ports[0][0]")],
        ),
        (
            pins(None, vec![vec![30001, 30002, 30003]]),
            vec![at("nodePorts.ports[0]")],
        ),
        (
            pins(None, vec![vec![30001], vec![30002], vec![30003]]),
            vec![at("nodePorts.ports")],
        ),
        (
            ExternalAccess {
                load_balancer_source_ranges: vec!["10.0.0.0/8".into(), "10.0.0.0".into()],
                ..lb_ea()
            },
            vec![at("loadBalancerSourceRanges[1]")],
        ),
        (
            ExternalAccess {
                load_balancer_class: Some("not a class".into()),
                ..lb_ea()
            },
            vec![at("loadBalancerClass")],
        ),
        (
            ExternalAccess {
                external_dns: true,
                ..ExternalAccess::default()
            },
            vec![at("externalDNS")],
        ),
        (
            ExternalAccess {
                service_annotations: vec![("lb.example.com/name".into(), "n-{node}".into())],
                ..ExternalAccess::default()
            },
            vec![at("serviceAnnotations[\"lb.example.com/name\"]")],
        ),
        (
            ExternalAccess {
                hostname_scope: HostnameScope::Node,
                hostname_prefix: "a".repeat(60),
                ..hostname_ea()
            },
            vec![at("hostnamePrefix")],
        ),
        (
            ExternalAccess {
                topology: ServiceTopology::PerNode,
                service_type: ServiceType::LoadBalancer,
                ..hostname_ea()
            },
            vec![at("hostnameScope")],
        ),
        (
            ExternalAccess {
                topology: ServiceTopology::PerNode,
                service_annotations: vec![("lb.example.com/name".into(), "n-{node}".into())],
                ..ExternalAccess::default()
            },
            vec![],
        ),
    ] {
        assert_eq!(field(ea.clone()), want, "{ea:?}");
    }
}

#[test]
fn options_that_do_not_apply_are_warned_about_not_refused() {
    let warned = |ea: ExternalAccess| -> Vec<String> {
        run(cluster(1, 0, Some(ea)), Observed::default())
            .warnings
            .into_iter()
            .map(|w| w.field)
            .collect()
    };
    let lb_options_on_node_port = ExternalAccess {
        load_balancer_class: Some("example.com/lb".into()),
        allocate_load_balancer_node_ports: Some(false),
        ..ExternalAccess::default()
    };
    assert_eq!(
        warned(lb_options_on_node_port),
        [
            "spec.externalAccess.loadBalancerClass",
            "spec.externalAccess.allocateLoadBalancerNodePorts"
        ]
    );
    let external_ip_on_lb = ExternalAccess {
        node_address_type: NodeAddressType::ExternalIp,
        ..lb_ea()
    };
    assert_eq!(
        warned(external_ip_on_lb),
        ["spec.externalAccess.nodeAddressType"]
    );
    let node_scope_without_domain = ExternalAccess {
        hostname_scope: HostnameScope::Node,
        ..ExternalAccess::default()
    };
    assert_eq!(
        warned(node_scope_without_domain),
        ["spec.externalAccess.hostnameScope"]
    );
}

#[test]
fn external_ip_mode_announces_the_nodes_external_address_once_known() {
    let ea = ExternalAccess {
        node_address_type: NodeAddressType::ExternalIp,
        ..ExternalAccess::default()
    };
    const EXTERNAL: u32 = 0xcb00_7107; // 203.0.113.7
    let with_external = ObservedPod {
        node_external_ip: Some(IpAddress::V4(EXTERNAL)),
        ..pod(0, 0, Some(HOST))
    };
    let observed = |p: ObservedPod| Observed {
        services: vec![ports(0, &[(0, 31000)])],
        pods: vec![p],
        gateway: None,
        valkey: None,
    };
    let d = run(cluster(1, 0, Some(ea.clone())), observed(with_external));
    assert_eq!(
        announce(&d, 0, 0, "cluster-announce-client-ipv4"),
        "203.0.113.7"
    );
    assert_eq!(announce(&d, 0, 0, "cluster-announce-client-port"), "31000");
    let ready = &d.status.conditions[0];
    assert_eq!(ready.reason, "EndpointsReady", "{ready:?}");
    // A node without an ExternalIP: nothing announced (never the private
    // InternalIP), and the condition says why.
    let d = run(cluster(1, 0, Some(ea)), observed(pod(0, 0, Some(HOST))));
    assert_eq!(announce(&d, 0, 0, "cluster-announce-client-ipv4"), "");
    assert_eq!(announce(&d, 0, 0, "cluster-announce-client-port"), "0");
    assert_eq!(d.status.conditions[0].reason, "NoNodeExternalIP");
}

#[test]
fn node_scope_hostnames_pins_and_load_balancer_settings_are_rendered() {
    let ea = ExternalAccess {
        hostname_scope: HostnameScope::Node,
        node_ports: Some(NodePorts {
            base: Some(30100),
            ports: vec![],
        }),
        external_dns: true,
        ..hostname_ea()
    };
    // Announced once the Service has its ports (the pins, applied).
    let observed = Observed {
        services: vec![ports(1, &[(0, 30102), (1, 30103)])],
        ..Observed::default()
    };
    let d = run(cluster(2, 1, Some(ea)), observed);
    let pinned: Vec<Vec<u32>> = d
        .services
        .iter()
        .map(|s| s.ports.iter().map(|p| p.node_port).collect())
        .collect();
    assert_eq!(pinned, [[30100, 30101], [30102, 30103]]);
    assert_eq!(
        announce(&d, 1, 1, "cluster-announce-hostname"),
        "shard-1-1.valkey.example.com"
    );
    assert_eq!(
        d.services[1].annotations,
        [(
            "external-dns.alpha.kubernetes.io/hostname".to_string(),
            "shard-1-0.valkey.example.com,shard-1-1.valkey.example.com".to_string()
        )]
    );
    assert!(d.services[0].load_balancer_class.is_none());

    let lb = ExternalAccess {
        load_balancer_source_ranges: vec!["203.0.113.0/24".into()],
        load_balancer_class: Some("example.com/lb".into()),
        allocate_load_balancer_node_ports: Some(false),
        ..lb_ea()
    };
    let d = run(cluster(1, 0, Some(lb)), Observed::default());
    let s = &d.services[0];
    assert_eq!(s.load_balancer_source_ranges, ["203.0.113.0/24"]);
    assert_eq!(s.load_balancer_class.as_deref(), Some("example.com/lb"));
    assert_eq!(s.allocate_load_balancer_node_ports, Some(false));
}

fn per_node(ea: ExternalAccess) -> ExternalAccess {
    ExternalAccess {
        topology: ServiceTopology::PerNode,
        ..ea
    }
}

/// A node's own Service, as the API server left it.
fn node_svc(shard: u32, node: u32, node_port: u32, ingress: Vec<Ingress>) -> ObservedService {
    ObservedService {
        shard,
        node: Some(node),
        ports: vec![ObservedPort { node, node_port }],
        ingress,
    }
}

fn pods(shards: u32, nodes: u32) -> Vec<ObservedPod> {
    (0..shards)
        .flat_map(|s| (0..nodes).map(move |n| pod(s, n, Some(HOST + s * 8 + n))))
        .collect()
}

/// The Services of a 2x1 cluster with `topology: PerNode`.
const NODE_SERVICES: [&str; 4] = [
    "shardgate-demo-shard-0-node-0",
    "shardgate-demo-shard-0-node-1",
    "shardgate-demo-shard-1-node-0",
    "shardgate-demo-shard-1-node-1",
];

fn service_names(d: &Desired) -> Vec<&str> {
    d.services.iter().map(|s| s.name.as_str()).collect()
}

#[test]
fn per_node_topology_makes_a_single_port_service_per_node() {
    let ea = per_node(ExternalAccess {
        service_annotations: vec![("lb.example.com/name".into(), "vk-{shard}-{node}".into())],
        ..ExternalAccess::default()
    });
    let observed = Observed {
        services: vec![node_svc(1, 1, 31011, vec![])],
        pods: pods(2, 2),
        ..Observed::default()
    };
    let d = run(cluster(2, 1, Some(ea)), observed);
    assert_eq!(service_names(&d), NODE_SERVICES);
    for s in &d.services {
        let node = s.node.expect("a node's own Service");
        let p: Vec<_> = s
            .ports
            .iter()
            .map(|p| (p.node, p.name.as_str(), p.port))
            .collect();
        assert_eq!(p, [(node, format!("vk-n{node}").as_str(), 6379)]);
        assert_eq!(
            s.annotations,
            [(
                "lb.example.com/name".to_string(),
                format!("vk-{}-{node}", s.shard)
            )]
        );
    }
    // The allocated NodePort is kept and announced; the others wait for theirs.
    assert_eq!(d.services[3].ports[0].node_port, 31011);
    assert_eq!(announce(&d, 1, 1, "cluster-announce-client-port"), "31011");
    assert_eq!(announce(&d, 1, 0, "cluster-announce-client-port"), "0");
}

#[test]
fn per_node_load_balancers_announce_each_nodes_own_address_and_allow_local() {
    let ea = per_node(ExternalAccess {
        external_traffic_policy: TrafficPolicy::Local,
        ..lb_ea()
    });
    let lb = |s: u32, n: u32| vec![Ingress::Ip(IpAddress::V4(0xc633_6400 + s * 8 + n))];
    let observed = Observed {
        services: (0..2)
            .flat_map(|s| (0..2).map(move |n| node_svc(s, n, 0, lb(s, n))))
            .collect(),
        pods: pods(2, 2),
        ..Observed::default()
    };
    let d = run(cluster(2, 1, Some(ea.clone())), observed);
    assert_eq!(
        announce(&d, 1, 1, "cluster-announce-client-ipv4"),
        "198.51.100.9"
    );
    assert_eq!(announce(&d, 1, 1, "cluster-announce-client-port"), "6379");
    assert_eq!(
        announce(&d, 0, 1, "cluster-announce-client-ipv4"),
        "198.51.100.1"
    );
    // One pod behind each load balancer: Local drops nothing.
    let warnings = validate(&cluster(2, 1, Some(ea)));
    assert!(
        !warnings
            .iter()
            .any(|w| w.field.ends_with("externalTrafficPolicy")),
        "{warnings:?}"
    );
    let shared = validate(&cluster(
        2,
        1,
        Some(ExternalAccess {
            external_traffic_policy: TrafficPolicy::Local,
            ..lb_ea()
        }),
    ));
    assert!(
        shared
            .iter()
            .any(|w| w.field.ends_with("externalTrafficPolicy"))
    );
}

/// PerShard to PerNode on a live cluster, reconcile by reconcile: the old
/// endpoints stay announced, and their Services wanted, until every node's
/// new endpoint is usable; then only the new Services are wanted.
#[test]
fn a_topology_switch_keeps_the_old_services_until_every_new_endpoint_is_usable() {
    let old: Vec<ObservedService> = (0..2)
        .map(|s| ports(s, &[(0, 31000 + 10 * s), (1, 31001 + 10 * s)]))
        .collect();
    let c = cluster(2, 1, Some(per_node(ExternalAccess::default())));
    // 1. Nothing of the new topology exists yet.
    let d = run(
        c.clone(),
        Observed {
            services: old.clone(),
            pods: pods(2, 2),
            ..Observed::default()
        },
    );
    assert_eq!(
        service_names(&d),
        [
            "shardgate-demo-shard-0",
            "shardgate-demo-shard-0-node-0",
            "shardgate-demo-shard-0-node-1",
            "shardgate-demo-shard-1",
            "shardgate-demo-shard-1-node-0",
            "shardgate-demo-shard-1-node-1",
        ]
    );
    assert_eq!(announce(&d, 1, 1, "cluster-announce-client-port"), "31011");
    // The old Services keep their ports.
    let shard1 = d
        .services
        .iter()
        .find(|s| s.name == "shardgate-demo-shard-1")
        .unwrap();
    assert_eq!(
        shard1.ports.iter().map(|p| p.node_port).collect::<Vec<_>>(),
        [31010, 31011]
    );
    let eps = d.status.external_endpoints.as_ref().unwrap();
    assert!(
        eps.iter().all(|e| e.nodes.iter().all(|n| n.ready)),
        "{eps:?}"
    );

    // 2. Three of the four new Services have their NodePorts: those nodes
    //    move, the fourth keeps its old endpoint, and the old Services stay.
    let mut services = old.clone();
    services.extend([
        node_svc(0, 0, 32000, vec![]),
        node_svc(0, 1, 32001, vec![]),
        node_svc(1, 0, 32010, vec![]),
        node_svc(1, 1, 0, vec![]),
    ]);
    let observed = |services: Vec<ObservedService>| Observed {
        services,
        pods: pods(2, 2),
        ..Observed::default()
    };
    let d = run(c.clone(), observed(services.clone()));
    assert_eq!(d.services.len(), 6);
    assert_eq!(announce(&d, 0, 1, "cluster-announce-client-port"), "32001");
    assert_eq!(announce(&d, 1, 1, "cluster-announce-client-port"), "31011");

    // 3. Every new endpoint is usable: only the new Services are wanted.
    services.pop();
    services.push(node_svc(1, 1, 32011, vec![]));
    let d = run(c.clone(), observed(services.clone()));
    assert_eq!(service_names(&d), NODE_SERVICES);
    assert_eq!(announce(&d, 1, 1, "cluster-announce-client-port"), "32011");

    // And back: PerNode to PerShard works the same way round.
    let back = cluster(2, 1, Some(ExternalAccess::default()));
    let new_only: Vec<ObservedService> = services
        .iter()
        .filter(|s| s.node.is_some())
        .cloned()
        .collect();
    let d = run(back, observed(new_only));
    assert_eq!(d.services.len(), 6);
    assert_eq!(announce(&d, 1, 1, "cluster-announce-client-port"), "32011");
}

#[test]
fn a_topology_switch_with_pinned_node_ports_is_refused_by_field() {
    let ea = per_node(ExternalAccess {
        node_ports: Some(NodePorts {
            base: Some(30100),
            ports: vec![],
        }),
        ..ExternalAccess::default()
    });
    let observed = Observed {
        services: vec![ports(0, &[(0, 30100), (1, 30101)])],
        pods: pods(1, 2),
        ..Observed::default()
    };
    let err = reconcile(&input(cluster(1, 1, Some(ea.clone())), observed)).unwrap_err();
    assert_eq!(err.violations.len(), 1);
    assert_eq!(err.violations[0].field, "spec.externalAccess.topology");
    assert!(err.violations[0].message.contains("nodePorts"), "{err:?}");
    // Pinned from the start, PerNode is fine: node (s, n) gets base + s*2 + n.
    let d = run(cluster(2, 1, Some(ea)), Observed::default());
    let pins: Vec<u32> = d.services.iter().map(|s| s.ports[0].node_port).collect();
    assert_eq!(pins, [30100, 30101, 30102, 30103]);
}

/// `shardgate-<c>-shard-<s>-node-<n>` is 11 characters longer than the node
/// StatefulSet's `shardgate-<c>-<s>-<n>`, whose limit is 11 under a label's,
/// so every name the StatefulSet check accepts fits a per-node Service.
#[test]
fn per_node_service_names_fit_whenever_the_node_objects_do() {
    for (shards, replicas) in [(1, 0), (10, 9), (100, 3), (25, 15)] {
        let mut longest = None;
        for len in 1..64 {
            let mut c = cluster(shards, replicas, Some(per_node(ExternalAccess::default())));
            c.name = "a".repeat(len);
            if errors(c.clone()).is_empty() {
                longest = Some(c);
            }
        }
        let c = longest.expect("some name fits");
        let last =
            shardgate_contract::names::node_service(&c.name, shards as u32 - 1, replicas as u32);
        assert!(last.len() <= 63, "{last} ({} characters)", last.len());
        let d = run(c, Observed::default());
        assert!(d.services.iter().all(|s| s.name.len() <= 63));
    }
}

fn in_cluster(d: &Desired, shard: u32, node: u32) -> &str {
    let eps = d.status.external_endpoints.as_ref().unwrap();
    let e = eps.iter().find(|e| e.shard == shard).unwrap();
    &e.nodes.iter().find(|n| n.node == node).unwrap().in_cluster
}

/// Status gives each node the in-cluster address that answers on its
/// announced port: the load balancer Service's DNS name (the one it is
/// reached through, during a switch too), or the pod's node InternalIP and
/// NodePort; nothing while the endpoint is not usable.
#[test]
fn status_gives_each_node_an_in_cluster_address_on_its_announced_port() {
    let lb = |s: u32, n: u32| vec![Ingress::Ip(IpAddress::V4(0xc633_6400 + s * 8 + n))];
    let node_lbs: Vec<ObservedService> = (0..2)
        .flat_map(|s| (0..2).map(move |n| node_svc(s, n, 0, lb(s, n))))
        .collect();
    let shard_lbs: Vec<ObservedService> = (0..2)
        .map(|s| ObservedService {
            ingress: lb(s, 7),
            ..ports(s, &[])
        })
        .collect();
    let observed = |services: Vec<ObservedService>| Observed {
        services,
        pods: pods(2, 2),
        ..Observed::default()
    };
    // (topology, what exists) => node (1, 1)'s in-cluster address
    for (topology, services, want) in [
        (
            ServiceTopology::PerNode,
            node_lbs.clone(),
            "shardgate-demo-shard-1-node-1.default.svc:6379",
        ),
        (
            ServiceTopology::PerShard,
            shard_lbs.clone(),
            "shardgate-demo-shard-1.default.svc:6380",
        ),
        // Switching to PerShard: still reached through its own Service.
        (
            ServiceTopology::PerShard,
            node_lbs.clone(),
            "shardgate-demo-shard-1-node-1.default.svc:6379",
        ),
        (ServiceTopology::PerNode, vec![], ""),
    ] {
        let ea = ExternalAccess {
            topology,
            ..lb_ea()
        };
        let d = run(cluster(2, 1, Some(ea)), observed(services));
        assert_eq!(in_cluster(&d, 1, 1), want, "{topology:?}");
    }
    let d = run(
        cluster(2, 1, Some(ExternalAccess::default())),
        observed(vec![ports(1, &[(0, 31010), (1, 31011)])]),
    );
    assert_eq!(in_cluster(&d, 1, 1), "10.0.0.14:31011");
    assert_eq!(in_cluster(&d, 0, 1), "", "no NodePort yet");
}

/// A pin another cluster holds refuses the spec, naming the field and the
/// other cluster, unless this cluster's own Service already has the port
/// (the cluster that has a port keeps it; only the newcomer is refused).
#[test]
fn a_node_port_pinned_elsewhere_is_refused_unless_already_held() {
    let pinned = |pins: NodePorts| ExternalAccess {
        node_ports: Some(pins),
        ..ExternalAccess::default()
    };
    let base = NodePorts {
        base: Some(30100),
        ports: vec![],
    };
    let list = NodePorts {
        base: None,
        ports: vec![vec![30100], vec![30200, 30101]],
    };
    let elsewhere = vec![PinnedPort {
        port: 30101,
        cluster: "shop/orders".into(),
    }];
    let attempt = |ea: ExternalAccess, services: Vec<ObservedService>| {
        let input = Input {
            cluster: cluster(2, 1, Some(ea)),
            observed: Observed {
                services,
                ..Observed::default()
            },
            other_clusters: vec![],
            pinned_elsewhere: elsewhere.clone(),
            credentials: Default::default(),
        };
        match reconcile(&input) {
            Ok(_) => vec![],
            Err(e) => e
                .violations
                .into_iter()
                .map(|v| {
                    assert!(v.message.contains("shop/orders"), "{v:?}");
                    v.field
                })
                .collect(),
        }
    };
    let held = vec![ports(0, &[(0, 30100), (1, 30101)])];
    for (ea, services, want) in [
        (
            pinned(base.clone()),
            vec![],
            vec!["spec.externalAccess.nodePorts.base"],
        ),
        (
            pinned(list.clone()),
            vec![],
            vec!["spec.externalAccess.nodePorts.ports[1][1]"],
        ),
        (pinned(base.clone()), held.clone(), vec![]),
        (
            ExternalAccess {
                enabled: false,
                ..pinned(base.clone())
            },
            vec![],
            vec![],
        ),
        (ExternalAccess::default(), vec![], vec![]),
    ] {
        assert_eq!(attempt(ea.clone(), services), want, "{ea:?}");
    }
}

// ---- Gateway API ----------------------------------------------------------

const GATEWAY_IP: u32 = 0xcb00_710a; // 203.0.113.10

fn gateway_ea(section: Option<&str>) -> ExternalAccess {
    ExternalAccess {
        service_type: ServiceType::ClusterIp,
        gateway: Some(Gateway {
            name: "valkey".into(),
            section_name: section.map(String::from),
            base_port: 7000,
        }),
        ..ExternalAccess::default()
    }
}

/// A Gateway with a listener of `protocol` on each of `ports`, at
/// [`GATEWAY_IP`].
fn gateway_with(ports: &[u32], protocol: ListenerProtocol) -> GatewayFound {
    GatewayFound::Found(ObservedGateway {
        listeners: ports
            .iter()
            .map(|&port| Listener {
                name: format!("valkey-{port}"),
                port,
                protocol,
            })
            .collect(),
        addresses: vec![Ingress::Ip(IpAddress::V4(GATEWAY_IP))],
    })
}

fn every_pod(shards: u32, nodes: u32) -> Vec<ObservedPod> {
    (0..shards)
        .flat_map(|s| (0..nodes).map(move |n| pod(s, n, Some(HOST))))
        .collect()
}

fn behind(gateway: Option<GatewayFound>, shards: u32, nodes: u32) -> Observed {
    Observed {
        pods: every_pod(shards, nodes),
        gateway,
        ..Observed::default()
    }
}

fn condition(d: &Desired) -> &Condition {
    d.status
        .conditions
        .iter()
        .find(|c| c.type_ == "ExternalAccessReady")
        .unwrap()
}

#[test]
fn behind_a_gateway_each_node_is_announced_on_its_listener_port_at_the_gateway() {
    let listeners: Vec<u32> = (7000..7006).collect();
    let found = gateway_with(&listeners, ListenerProtocol::Tcp);
    let d = run(
        cluster(3, 1, Some(gateway_ea(None))),
        behind(Some(found), 3, 2),
    );
    // ClusterIP Services: no NodePort, no traffic policy to speak of.
    assert!(
        d.services
            .iter()
            .all(|s| s.service_type == ServiceType::ClusterIp)
    );
    assert!(
        d.services
            .iter()
            .flat_map(|s| &s.ports)
            .all(|p| p.node_port == 0)
    );
    assert_eq!(d.routes.len(), 6);
    for r in &d.routes {
        let k = r.shard * 2 + r.node;
        assert_eq!(r.port, 7000 + k, "{r:?}");
        assert_eq!(r.kind, RouteKind::Tcp);
        assert_eq!(r.service, format!("shardgate-demo-shard-{}", r.shard));
        assert_eq!(r.service_port, 6379 + r.node);
        assert_eq!(
            announce(&d, r.shard, r.node, "cluster-announce-client-ipv4"),
            "203.0.113.10"
        );
        assert_eq!(
            announce(&d, r.shard, r.node, "cluster-announce-client-port"),
            (7000 + k).to_string()
        );
    }
    let eps = d.status.external_endpoints.as_ref().unwrap();
    let n = &eps[2].nodes[1];
    assert_eq!(
        (n.host.as_str(), n.port, n.ready),
        ("203.0.113.10", 7005, true)
    );
    assert_eq!(
        n.in_cluster, "203.0.113.10:7005",
        "the Gateway answers inside too"
    );
    assert_eq!(condition(&d).status, ConditionStatus::True);
    let g = d.status.gateway.as_ref().unwrap();
    assert_eq!((g.name.as_str(), g.missing_listeners.len()), ("valkey", 0));
}

#[test]
fn a_node_whose_listener_is_missing_is_reported_and_not_announced() {
    // Listeners for shard 0 only (7000, 7001), and 7003 as TLS.
    let mut found = gateway_with(&[7000, 7001], ListenerProtocol::Tcp);
    if let GatewayFound::Found(g) = &mut found {
        g.listeners.push(Listener {
            name: "tls".into(),
            port: 7003,
            protocol: ListenerProtocol::Tls,
        });
    }
    let d = run(
        cluster(2, 1, Some(gateway_ea(None))),
        behind(Some(found), 2, 2),
    );
    assert_eq!(
        d.status.gateway.as_ref().unwrap().missing_listeners,
        [7002, 7003]
    );
    assert_eq!(announce(&d, 0, 1, "cluster-announce-client-port"), "7001");
    for node in 0..2 {
        assert_eq!(announce(&d, 1, node, "cluster-announce-client-port"), "0");
        assert_eq!(announce(&d, 1, node, "cluster-announce-client-ipv4"), "");
    }
    // The route exists anyway: it attaches once the listener does.
    assert_eq!(d.routes.len(), 4);
    let eps = d.status.external_endpoints.as_ref().unwrap();
    let n = &eps[1].nodes[0];
    assert_eq!((n.host.as_str(), n.port, n.ready), ("", 7002, false));
    let c = condition(&d);
    assert_eq!(
        (c.status, c.reason.as_str()),
        (ConditionStatus::False, "GatewayListenersMissing")
    );
    assert!(c.message.contains("7002, 7003"), "{}", c.message);
}

#[test]
fn without_the_gateway_or_its_api_nothing_external_is_announced() {
    // (what the host found) => the condition's reason
    for (found, reason) in [
        (None, "GatewayAPIUnavailable"),
        (Some(GatewayFound::NotServed), "GatewayAPIUnavailable"),
        (Some(GatewayFound::Missing), "GatewayNotFound"),
        (
            Some(GatewayFound::Found(ObservedGateway {
                addresses: vec![],
                ..match gateway_with(&[7000], ListenerProtocol::Tcp) {
                    GatewayFound::Found(g) => g,
                    _ => unreachable!(),
                }
            })),
            "AwaitingGatewayAddress",
        ),
    ] {
        let d = run(
            cluster(1, 0, Some(gateway_ea(None))),
            behind(found.clone(), 1, 1),
        );
        assert_eq!(condition(&d).reason, reason, "{found:?}");
        assert_eq!(announce(&d, 0, 0, "cluster-announce-client-port"), "0");
        // Routes and Services are still wanted: nothing to lose.
        assert_eq!(d.routes.len(), 1);
        assert_eq!(d.services.len(), 1);
    }
}

#[test]
fn a_hostname_behind_a_gateway_needs_no_gateway_address_and_tls_routes_match_it() {
    let mut ea = gateway_ea(None);
    ea.domain = Some("valkey.example.com".into());
    ea.preferred_endpoint_type = EndpointType::Hostname;
    ea.hostname_scope = HostnameScope::Node;
    let mut c = cluster(1, 1, Some(ea));
    c.tls = Some("demo-cert".into());
    let mut found = gateway_with(&[7000, 7001], ListenerProtocol::Tls);
    if let GatewayFound::Found(g) = &mut found {
        g.addresses.clear();
    }
    let d = run(c, behind(Some(found), 1, 2));
    assert_eq!(d.routes[1].kind, RouteKind::Tls);
    assert_eq!(d.routes[1].hostnames, ["shard-0-1.valkey.example.com"]);
    assert_eq!(
        announce(&d, 0, 1, "cluster-announce-hostname"),
        "shard-0-1.valkey.example.com"
    );
    assert_eq!(
        announce(&d, 0, 1, "cluster-announce-client-tls-port"),
        "7001"
    );
    assert_eq!(condition(&d).status, ConditionStatus::True);
}

#[test]
fn gateway_specs_are_checked_field_by_field() {
    let with = |f: &dyn Fn(&mut Cluster)| {
        let mut c = cluster(3, 1, Some(gateway_ea(None)));
        f(&mut c);
        errors(c)
            .into_iter()
            .map(|(field, _)| field)
            .collect::<Vec<_>>()
    };
    fn ea(c: &mut Cluster) -> &mut ExternalAccess {
        c.external_access.as_mut().unwrap()
    }
    fn gw(c: &mut Cluster) -> &mut Gateway {
        ea(c).gateway.as_mut().unwrap()
    }
    assert!(with(&|_| {}).is_empty());
    // (change) => the fields refused
    /// A change to the spec, and the fields it makes refused.
    type Case = (fn(&mut Cluster), Vec<&'static str>);
    let cases: Vec<Case> = vec![
        (
            |c| ea(c).gateway = None,
            vec!["spec.externalAccess.serviceType"],
        ),
        (
            |c| gw(c).name = "Not_A_Name".into(),
            vec!["spec.externalAccess.gateway.gatewayRef.name"],
        ),
        (
            |c| gw(c).section_name = Some("valkey".into()),
            vec!["spec.externalAccess.gateway.gatewayRef.sectionName"],
        ),
        (
            |c| gw(c).base_port = 0,
            vec!["spec.externalAccess.gateway.basePort"],
        ),
        (
            |c| gw(c).base_port = 65531,
            vec!["spec.externalAccess.gateway.basePort"],
        ),
        (
            |c| {
                ea(c).node_ports = Some(NodePorts {
                    base: Some(30000),
                    ports: vec![],
                })
            },
            vec!["spec.externalAccess.nodePorts"],
        ),
        (
            |c| c.tls = Some("cert".into()),
            vec![
                "spec.externalAccess.domain",
                "spec.externalAccess.hostnameScope",
                "spec.externalAccess.preferredEndpointType",
            ],
        ),
    ];
    for (change, want) in cases {
        assert_eq!(with(&change), want);
    }
    // 6 nodes from 65530 end at 65535: in range.
    assert!(with(&|c| gw(c).base_port = 65530).is_empty());
    // A one-node cluster may name its listener.
    let mut one = cluster(1, 0, Some(gateway_ea(Some("valkey"))));
    assert!(errors(one.clone()).is_empty());
    one.external_access.as_mut().unwrap().service_type = ServiceType::NodePort;
    let warned = validate(&one);
    assert!(
        warned.iter().any(
            |v| v.field == "spec.externalAccess.serviceType" && v.severity == Severity::Warning
        ),
        "{warned:?}"
    );
}
