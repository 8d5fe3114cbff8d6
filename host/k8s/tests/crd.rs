//! The CRD's CEL rules, evaluated offline with kube's `validate_cel`.

use shardgate_k8s::crd::*;

fn cluster(
    name: &str,
    shards: i32,
    replicas: i32,
    ea: Option<ExternalAccessSpec>,
) -> ValkeyCluster {
    let mut vc = ValkeyCluster::new(
        name,
        ValkeyClusterSpec {
            shards,
            replicas,
            image: None,
            resources: None,
            tls: None,
            external_access: ea,
            users: Vec::new(),
            config: Default::default(),
            persistence: None,
            pod_disruption_budget: None,
            scheduling: None,
        },
    );
    vc.metadata.namespace = Some("default".into());
    vc
}

fn ea(enabled: bool, pref: EndpointType, domain: Option<&str>) -> ExternalAccessSpec {
    ExternalAccessSpec {
        enabled,
        service_type: Some(ServiceType::NodePort),
        external_traffic_policy: TrafficPolicy::Cluster,
        service_annotations: Default::default(),
        hostname_prefix: "shard".into(),
        domain: domain.map(String::from),
        preferred_endpoint_type: pref,
        ..ExternalAccessSpec::default()
    }
}

fn rejected(vc: &ValkeyCluster) -> String {
    match vc.validate_cel() {
        Ok(()) => panic!("accepted {:?}", vc.spec),
        Err(e) => format!("{e:?}"),
    }
}

#[test]
fn valid_clusters_pass() {
    cluster("demo", 3, 1, None).validate_cel().unwrap();
    cluster(
        "demo",
        3,
        1,
        Some(ea(true, EndpointType::Hostname, Some("valkey.example.com"))),
    )
    .validate_cel()
    .unwrap();
    // Upstream W11: the hostname rule applies only when enabled.
    cluster("demo", 3, 1, Some(ea(false, EndpointType::Hostname, None)))
        .validate_cel()
        .unwrap();
}

#[test]
fn hostname_without_domain_is_rejected_when_enabled() {
    let msg = rejected(&cluster(
        "demo",
        3,
        1,
        Some(ea(true, EndpointType::Hostname, None)),
    ));
    assert!(msg.contains("domain is required"), "{msg}");
}

#[test]
fn bad_domain_and_prefix_are_rejected() {
    let msg = rejected(&cluster(
        "demo",
        3,
        1,
        Some(ea(true, EndpointType::Ip, Some("Bad_Domain"))),
    ));
    assert!(msg.contains("domain must be a valid DNS name"), "{msg}");
    let mut e = ea(true, EndpointType::Ip, None);
    e.hostname_prefix = "-bad".into();
    let msg = rejected(&cluster("demo", 3, 1, Some(e)));
    assert!(msg.contains("hostnamePrefix must be a DNS label"), "{msg}");
}

#[test]
fn names_that_make_invalid_object_names_are_rejected() {
    // shardgate-<name>-<shard>-<node> must fit 52 characters: with shard "9"
    // and node "1" that leaves 38 for the name.
    let msg = rejected(&cluster(&"a".repeat(39), 10, 1, None));
    assert!(msg.contains("too long"), "{msg}");
    cluster(&"a".repeat(38), 10, 1, None)
        .validate_cel()
        .unwrap();
    let msg = rejected(&cluster("has.dot", 1, 0, None));
    assert!(msg.contains("DNS label"), "{msg}");
}

#[test]
fn cel_length_rule_agrees_with_the_guest() {
    // The CRD's rule and the guest's check accept exactly the same names.
    for len in 30..50 {
        for (shards, replicas) in [(1, 0), (10, 1), (100, 9), (1000, 15)] {
            let vc = cluster(&"a".repeat(len), shards, replicas, None);
            let cel_ok = vc.validate_cel().is_ok();
            let guest_ok =
                shardgate_guest::validate(&shardgate_k8s::convert::cluster(&vc)).is_empty();
            assert_eq!(cel_ok, guest_ok, "name length {len}, {shards}x{replicas}");
        }
    }
}

#[test]
fn cel_node_limit_agrees_with_the_guest() {
    // At most 400 nodes, counted as shards x (replicas + 1), in both.
    for (shards, replicas, ok) in [
        (400, 0, true),
        (401, 0, false),
        (200, 1, true),
        (201, 1, false),
        (25, 15, true),
        (26, 15, false),
    ] {
        let vc = cluster("demo", shards, replicas, None);
        let cel = vc.validate_cel();
        let guest = shardgate_guest::validate(&shardgate_k8s::convert::cluster(&vc));
        assert_eq!(cel.is_ok(), ok, "{shards}x{replicas}: {cel:?}");
        assert_eq!(guest.is_empty(), ok, "{shards}x{replicas}: {guest:?}");
        if !ok {
            assert!(guest.iter().all(|v| v.field == "spec.shards"), "{guest:?}");
        }
    }
}

/// `spec.persistence` is fixed at creation (a StatefulSet's claim templates
/// cannot change): the API server refuses a change, naming the field, and
/// nothing reaches the operator.
#[test]
fn persistence_cannot_change_once_the_cluster_exists() {
    let plain = cluster("demo", 3, 1, None);
    let mut persistent = plain.clone();
    persistent.spec.persistence = Some(PersistenceSpec {
        size: "1Gi".into(),
        storage_class_name: None,
        reclaim_policy: ReclaimPolicy::Retain,
    });
    let mut bigger = persistent.clone();
    bigger.spec.persistence.as_mut().unwrap().size = "2Gi".into();
    // (old, new) => refused
    for (old, new, refused) in [
        (&plain, &plain, false),
        (&persistent, &persistent, false),
        (&plain, &persistent, true),
        (&persistent, &plain, true),
        (&persistent, &bigger, true),
    ] {
        let result = new.validate_cel_update(old);
        assert_eq!(result.is_err(), refused, "{result:?}");
        if let Err(e) = result {
            let msg = format!("{e:?}");
            assert!(msg.contains("spec.persistence cannot change"), "{msg}");
        }
    }
    // A new cluster may have it.
    persistent.validate_cel().unwrap();
}

/// `status.externalAccessType` (the `External Access` column) says how the
/// spec exposes the nodes.
#[test]
fn the_external_access_type_follows_the_spec() {
    use ExternalAccessType as T;
    let of = |ea: Option<ExternalAccessSpec>| ExternalAccessType::of(ea.as_ref());
    let on = |service_type: Option<ServiceType>| ExternalAccessSpec {
        service_type,
        ..ea(true, EndpointType::Ip, None)
    };
    assert_eq!(of(None), T::None);
    assert_eq!(of(Some(ea(false, EndpointType::Ip, None))), T::None);
    assert_eq!(of(Some(on(None))), T::NodePort, "NodePort is the default");
    assert_eq!(
        of(Some(on(Some(ServiceType::LoadBalancer)))),
        T::LoadBalancer
    );
    assert_eq!(of(Some(on(Some(ServiceType::ClusterIp)))), T::ClusterIp);
    let gateway = GatewaySpec {
        gateway_ref: serde_json::from_value(serde_json::json!({"name": "valkey"})).unwrap(),
        base_port: 7000,
    };
    let behind = ExternalAccessSpec {
        gateway: Some(gateway),
        ..on(Some(ServiceType::ClusterIp))
    };
    assert_eq!(of(Some(behind.clone())), T::Gateway);
    assert_eq!(
        of(Some(ExternalAccessSpec {
            enabled: false,
            ..behind
        })),
        T::None,
        "off wins over a gateway"
    );
    assert_eq!(
        serde_json::to_value(T::ClusterIp).unwrap(),
        serde_json::json!("ClusterIP")
    );
}
