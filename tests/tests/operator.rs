//! The real operator (`shardgate_operator::run`: Controller, reflectors,
//! server-side apply, prune, status, leader election) against the API
//! emulator. Writes are counted by the emulator.

use kube::api::{Api, Patch, PatchParams};
use kube_emulator::{Emulator, Fault, Verb};
use serde_json::json;
use shardgate_operator::LeaseOptions;
use shardgate_tests::harness::{
    self, NS, Operator, Setup, cluster, condition, converged, create, emulator, events, eventually,
    node_ports, nodeport, patch_spec, shard_services, status,
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn converges_then_writes_nothing_and_follows_spec_changes() {
    let emu = emulator().await;
    let op = Operator::start(&emu, "solo").await;
    create(&emu, cluster("demo", 3, 1, nodeport())).await;
    eventually(&emu, "3x1 converged", |e| converged(e, "demo")).await;

    // Three shard Services, every port with an allocated NodePort, reported
    // in shard order.
    let services = shard_services(&emu);
    let names: Vec<_> = services
        .iter()
        .map(|s| s["metadata"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "shardgate-demo-shard-0",
            "shardgate-demo-shard-1",
            "shardgate-demo-shard-2"
        ]
    );
    let eps = status(&emu, "demo")["externalEndpoints"].clone();
    for (i, svc) in services.iter().enumerate() {
        let ports = node_ports(svc);
        assert!(
            ports.iter().all(|p| (30000..=32767).contains(p)),
            "{ports:?}"
        );
        assert_eq!(eps[i]["shardIndex"], i as i64);
        assert_eq!(eps[i]["nodePorts"], json!(ports));
        assert_eq!(eps[i]["nodes"][0]["host"], "127.0.0.1");
        assert_eq!(eps[i]["nodes"][0]["ready"], true);
    }
    assert_eq!(
        condition(&emu, "demo", "ExternalAccessReady").unwrap().0,
        "True"
    );

    // Steady state (P2): 1,000 more reconciles write nothing.
    emu.reset_counts();
    let before = op.reconciles();
    op.resync(1000).await;
    eventually(&emu, "1,000 reconciles", |_| {
        op.reconciles() >= before + 1000
    })
    .await;
    println!(
        "writes during {} reconciles of a converged 3x1 cluster: {} (no-op requests: {})",
        op.reconciles() - before,
        emu.total_writes(),
        emu.noop_counts().values().sum::<u64>()
    );
    assert_eq!(
        emu.write_counts(),
        Default::default(),
        "writes at steady state"
    );
    assert_eq!(
        emu.noop_counts(),
        Default::default(),
        "requests at steady state"
    );

    // Another manager's label and annotation survive, with no write loop.
    let client = emu.client().await.unwrap();
    let svcs: Api<k8s_openapi::api::core::v1::Service> = Api::namespaced(client.clone(), NS);
    svcs.patch(
        "shardgate-demo-shard-0",
        &PatchParams::apply("cloud-controller"),
        &Patch::Apply(json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "shardgate-demo-shard-0",
            "labels": {"cloud.example.com/zone": "a"}, "annotations": {"cloud.example.com/lb-id": "lb-1"}}})),
    )
    .await
    .unwrap();
    emu.reset_counts();
    let before = op.reconciles();
    op.resync(20).await;
    eventually(&emu, "20 reconciles", |_| op.reconciles() >= before + 20).await;
    assert_eq!(emu.total_writes(), 0, "{:?}", emu.write_counts());
    let s0 = emu.get("services", NS, "shardgate-demo-shard-0").unwrap();
    assert_eq!(s0["metadata"]["labels"]["cloud.example.com/zone"], "a");
    assert_eq!(
        s0["metadata"]["annotations"]["cloud.example.com/lb-id"],
        "lb-1"
    );
    assert_eq!(
        s0["metadata"]["labels"]["app.kubernetes.io/managed-by"],
        "shardgate"
    );

    // An annotation change writes the three shard Services and nothing else
    // (but the status, whose observedGeneration moves).
    let node_versions = |e: &Emulator| -> Vec<String> {
        ["statefulsets", "configmaps"]
            .iter()
            .flat_map(|r| e.list(r, Some(NS)))
            .map(|o| {
                o["metadata"]["resourceVersion"]
                    .as_str()
                    .unwrap()
                    .to_string()
            })
            .collect()
    };
    let nodes_before = node_versions(&emu);
    emu.reset_counts();
    patch_spec(
        &emu,
        "demo",
        json!({"externalAccess": {"serviceAnnotations": {"team.example.com/owner": "orders"}}}),
    )
    .await;
    eventually(&emu, "annotated", |e| {
        shard_services(e)
            .iter()
            .all(|s| s["metadata"]["annotations"]["team.example.com/owner"] == "orders")
            && converged(e, "demo")
    })
    .await;
    op.settle().await;
    let counts = emu.write_counts();
    println!("writes for an annotation change: {counts:?}");
    assert_eq!(emu.writes(Verb::Apply, "services"), 3, "{counts:?}");
    assert_eq!(
        node_versions(&emu),
        nodes_before,
        "node objects were rewritten"
    );

    // Replicas 1 -> 2: a port is added; allocated NodePorts are kept; the
    // existing nodes' objects are not rewritten.
    let old: Vec<Vec<i64>> = shard_services(&emu).iter().map(node_ports).collect();
    let nodes_before = node_versions(&emu);
    emu.reset_counts();
    patch_spec(&emu, "demo", json!({"replicas": 2})).await;
    eventually(&emu, "3 ports per shard", |e| {
        shard_services(e)
            .iter()
            .all(|s| node_ports(s).len() == 3 && node_ports(s)[2] != 0)
            && converged(e, "demo")
    })
    .await;
    for (svc, old) in shard_services(&emu).iter().zip(&old) {
        assert_eq!(&node_ports(svc)[..2], &old[..], "NodePorts kept");
    }
    println!("writes for replicas 1 -> 2: {:?}", emu.write_counts());
    let after = node_versions(&emu);
    for v in &nodes_before {
        assert!(after.contains(v), "an existing node object was rewritten");
    }
    assert_eq!(
        emu.writes(Verb::Apply, "statefulsets"),
        3,
        "only the 3 new nodes' StatefulSets"
    );

    // Shards 3 -> 1: the excess Services (and node objects) are pruned.
    patch_spec(&emu, "demo", json!({"shards": 1})).await;
    eventually(&emu, "one shard Service", |e| {
        shard_services(e).len() == 1 && converged(e, "demo")
    })
    .await;
    assert_eq!(emu.list("statefulsets", Some(NS)).len(), 3);
    assert_eq!(
        status(&emu, "demo")["externalEndpoints"]
            .as_array()
            .unwrap()
            .len(),
        1
    );

    // Disable: every shard Service goes, and the external status with it.
    patch_spec(&emu, "demo", json!({"externalAccess": {"enabled": false}})).await;
    eventually(&emu, "no shard Services", |e| {
        shard_services(e).is_empty() && converged(e, "demo")
    })
    .await;
    assert!(
        status(&emu, "demo")["externalEndpoints"].is_null(),
        "{:#}",
        emu.get("valkeyclusters", NS, "demo").unwrap()
    );
    assert!(condition(&emu, "demo", "ExternalAccessReady").is_none());
    op.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn never_deletes_what_it_does_not_own_and_applies_nothing_on_invalid_spec() {
    let emu = emulator().await;
    // Labelled as ours, but owned by nothing.
    emu.create(
        json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "shardgate-demo-shard-7",
        "namespace": NS, "labels": {"shardgate.io/cluster": "demo", "shardgate.io/shard": "7",
        "app.kubernetes.io/managed-by": "shardgate"}},
        "spec": {"ports": [{"name": "vk-n0", "port": 6379}]}}),
    )
    .unwrap();
    let op = Operator::start(&emu, "solo").await;
    create(&emu, cluster("demo", 2, 0, nodeport())).await;
    eventually(&emu, "converged", |e| converged(e, "demo")).await;
    assert!(
        emu.get("services", NS, "shardgate-demo-shard-7").is_some(),
        "a Service we do not own was deleted"
    );

    // An invalid spec: nothing applied, nothing deleted; status and an Event
    // say why.
    let snapshot = |e: &Emulator| -> Vec<(String, String)> {
        ["services", "statefulsets", "configmaps"]
            .iter()
            .flat_map(|r| e.list(r, Some(NS)))
            .map(|o| {
                (
                    o["metadata"]["name"].as_str().unwrap().into(),
                    o["metadata"]["resourceVersion"].as_str().unwrap().into(),
                )
            })
            .collect()
    };
    let before = snapshot(&emu);
    patch_spec(
        &emu,
        "demo",
        json!({"shards": 5, "externalAccess": {"preferredEndpointType": "hostname"}}),
    )
    .await;
    eventually(&emu, "Degraded InvalidSpec", |e| {
        condition(e, "demo", "Degraded") == Some(("True".into(), "InvalidSpec".into()))
    })
    .await;
    op.resync(5).await;
    op.settle().await;
    assert_eq!(snapshot(&emu), before, "objects changed on an invalid spec");
    let events = emu.list("events.k8s.io/v1/Event", Some(NS));
    assert!(
        events.iter().any(|e| e["reason"] == "InvalidSpec"
            && e["note"]
                .as_str()
                .unwrap_or("")
                .contains("spec.externalAccess.domain")),
        "{events:#?}"
    );
    op.stop().await;
}

/// No takeover: a hand-made Service already holds the name shard 0's
/// Service would have. The operator applies nothing to it, says so
/// (`Degraded`/`NameConflict` and an Event), and leaves it untouched while the
/// cluster is created, scaled in, has external access disabled, and is
/// deleted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hand_made_object_at_a_desired_name_is_never_taken_over() {
    let emu = emulator().await;
    let hand_made = "shardgate-demo-shard-0";
    emu.create(json!({"apiVersion": "v1", "kind": "Service",
        "metadata": {"name": hand_made, "namespace": NS, "labels": {"team": "web"}},
        "spec": {"type": "ClusterIP", "selector": {"app": "web"},
                 "ports": [{"name": "http", "port": 80}]}}))
        .unwrap();
    let original = emu.get("services", NS, hand_made).unwrap();
    let untouched = |e: &Emulator, when: &str| {
        let now = e
            .get("services", NS, hand_made)
            .unwrap_or_else(|| panic!("deleted {when}"));
        assert_eq!(now, original, "the hand-made Service changed {when}");
    };
    let op = Operator::start(&emu, "solo").await;
    create(&emu, cluster("demo", 3, 0, nodeport())).await;
    eventually(&emu, "NameConflict reported", |e| {
        condition(e, "demo", "Degraded") == Some(("True".into(), "NameConflict".into()))
            && shard_services(e).len() == 3
            && !events(e, "NameConflict").is_empty()
    })
    .await;
    let note = events(&emu, "NameConflict")[0]["note"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(note.contains(&format!("Service {hand_made}")), "{note}");
    assert_eq!(condition(&emu, "demo", "Ready").unwrap().1, "NameConflict");
    untouched(&emu, "at create");
    // The other shards were created as usual.
    assert!(emu.get("services", NS, "shardgate-demo-shard-1").is_some());

    patch_spec(&emu, "demo", json!({"shards": 1})).await;
    eventually(&emu, "scaled in", |e| {
        e.get("services", NS, "shardgate-demo-shard-1").is_none()
            && e.get("statefulsets", NS, "shardgate-demo-1-0").is_none()
    })
    .await;
    untouched(&emu, "at scale-in");

    patch_spec(&emu, "demo", json!({"externalAccess": {"enabled": false}})).await;
    eventually(&emu, "external access off, no conflict left", |e| {
        converged(e, "demo")
            && condition(e, "demo", "Degraded") == Some(("False".into(), "AsExpected".into()))
    })
    .await;
    untouched(&emu, "after disabling external access");

    let api: Api<shardgate_k8s::crd::ValkeyCluster> =
        Api::namespaced(emu.client().await.unwrap(), NS);
    api.delete("demo", &Default::default()).await.unwrap();
    eventually(&emu, "the cluster's objects collected", |e| {
        e.get("statefulsets", NS, "shardgate-demo-0-0").is_none()
            && e.get("valkeyclusters", NS, "demo").is_none()
    })
    .await;
    untouched(&emu, "after the cluster was deleted");
    op.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn converges_through_conflicts_errors_and_dropped_watches() {
    let emu = emulator().await;
    emu.inject(
        Fault::conflict()
            .verb(Verb::Apply)
            .resource("services")
            .times(3),
    );
    emu.inject(
        Fault::internal_error()
            .verb(Verb::Apply)
            .resource("statefulsets")
            .times(3),
    );
    let op = Operator::start(&emu, "solo").await;
    create(&emu, cluster("demo", 3, 1, nodeport())).await;
    eventually(&emu, "a first reconcile", |_| op.reconciles() >= 1).await;
    emu.drop_watches();
    patch_spec(&emu, "demo", json!({"replicas": 0})).await;
    emu.drop_watches();
    eventually(&emu, "converged after faults", |e| converged(e, "demo")).await;
    assert_eq!(shard_services(&emu).len(), 3);
    assert_eq!(
        emu.list("statefulsets", Some(NS)).len(),
        3,
        "no orphan node objects"
    );
    assert_eq!(emu.list("configmaps", Some(NS)).len(), 3);
    for s in shard_services(&emu) {
        assert_eq!(node_ports(&s).len(), 1);
    }
    op.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_lease_holder_writes() {
    let emu = emulator().await;
    let lease = |name: &str| LeaseOptions {
        name: name.into(),
        namespace: NS.into(),
        duration_seconds: 3,
        grace_seconds: 1,
    };
    let a = Operator::with(
        &emu,
        Setup::new("replica-a").lease(lease("shardgate-leader")),
    )
    .await;
    eventually(&emu, "a leads", |e| {
        e.get("leases", NS, "shardgate-leader")
            .is_some_and(|l| l["spec"]["holderIdentity"] == "replica-a")
    })
    .await;
    let b = Operator::with(
        &emu,
        Setup::new("replica-b").lease(lease("shardgate-leader")),
    )
    .await;
    create(&emu, cluster("demo", 2, 0, nodeport())).await;
    eventually(&emu, "converged", |e| converged(e, "demo")).await;
    assert!(a.writes() > 0);
    assert_eq!((b.writes(), b.reconciles()), (0, 0), "the standby wrote");

    // The leader goes away; the standby takes over and reconciles.
    a.stop().await;
    patch_spec(&emu, "demo", json!({"shards": 3})).await;
    eventually(&emu, "b took over", |e| {
        shard_services(e).len() == 3 && converged(e, "demo")
    })
    .await;
    assert!(b.writes() > 0);
    b.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn load_balancer_endpoints_wait_for_ingress() {
    let emu = emulator().await;
    let op = Operator::start(&emu, "solo").await;
    let lb = json!({"enabled": true, "serviceType": "LoadBalancer", "preferredEndpointType": "ip",
                    "externalTrafficPolicy": "Cluster", "hostnamePrefix": "shard"});
    create(&emu, cluster("edge", 2, 1, lb)).await;
    eventually(&emu, "waiting for ingress", |e| {
        condition(e, "edge", "ExternalAccessReady")
            == Some(("False".into(), "AwaitingLoadBalancerIngress".into()))
            && condition(e, "edge", "Ready").is_some_and(|(_, r)| r == "ExternalAccessPending")
    })
    .await;
    // Nothing external is announced before the load balancer has an address.
    let conf = |e: &Emulator, name: &str| {
        e.get("configmaps", NS, name).unwrap()["data"]["valkey.conf"]
            .as_str()
            .unwrap()
            .to_string()
    };
    assert!(!conf(&emu, "shardgate-edge-1-1").contains("client-port"));

    for shard in 0..2 {
        emu.set_load_balancer_ingress(
            NS,
            &format!("shardgate-edge-shard-{shard}"),
            vec![kube_emulator::Ingress::Ip(format!("127.0.2.{}", shard + 1))],
        )
        .unwrap();
    }
    eventually(&emu, "converged with ingress", |e| converged(e, "edge")).await;
    let eps = status(&emu, "edge")["externalEndpoints"].clone();
    assert_eq!(eps[1]["nodePorts"], json!([6379, 6380]));
    assert_eq!(eps[1]["nodes"][1]["host"], "127.0.2.2");
    assert_eq!(eps[1]["nodes"][1]["port"], 6380);
    let c = conf(&emu, "shardgate-edge-1-1");
    assert!(
        c.contains("cluster-announce-client-ipv4 127.0.2.2\n"),
        "{c}"
    );
    assert!(c.contains("cluster-announce-client-port 6380\n"), "{c}");
    op.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stray_pod_with_the_clusters_labels_is_ignored() {
    let emu = emulator().await;
    // Not created by the cluster's StatefulSets, but labelled as node 0-0.
    emu.create(json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "impostor", "namespace": NS,
        "labels": {"shardgate.io/cluster": "solo", "shardgate.io/shard": "0", "shardgate.io/node": "0",
                   "app.kubernetes.io/managed-by": "shardgate"}},
        "spec": {"containers": [{"name": "x", "image": "x"}]}}))
    .unwrap();
    emu.set_pod_status(NS, "impostor", "10.9.9.9", "203.0.113.66", true)
        .unwrap();
    let op = Operator::start(&emu, "solo").await;
    create(&emu, cluster("solo", 1, 0, nodeport())).await;
    eventually(&emu, "converged", |e| converged(e, "solo")).await;
    let eps = status(&emu, "solo")["externalEndpoints"].clone();
    assert_eq!(eps[0]["nodes"][0]["host"], "127.0.0.1", "{eps:#}");
    let conf =
        emu.get("configmaps", NS, "shardgate-solo-0-0").unwrap()["data"]["valkey.conf"].clone();
    assert!(!conf.as_str().unwrap().contains("203.0.113.66"), "{conf}");
    op.stop().await;
}

/// Fields shardgate applied and someone else changed (an edit: an `Update`
/// that takes the field over) or removed are put back; fields another
/// manager added stay. The cache keeps only a digest of shardgate's fields
/// for ConfigMaps and StatefulSets, so this is what proves the digest sees
/// drift.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn repairs_fields_someone_else_changed_or_removed() {
    let emu = emulator().await;
    let op = Operator::start(&emu, "solo").await;
    create(&emu, cluster("demo", 2, 0, nodeport())).await;
    eventually(&emu, "converged", |e| converged(e, "demo")).await;
    let conf_before = emu.get("configmaps", NS, "shardgate-demo-0-0").unwrap()["data"].clone();
    let template_before =
        emu.get("statefulsets", NS, "shardgate-demo-1-0").unwrap()["spec"]["template"].clone();

    let client = emu.client().await.unwrap();
    let edit = PatchParams {
        field_manager: Some("kubectl-edit".into()),
        ..PatchParams::default()
    };
    let config_maps: Api<k8s_openapi::api::core::v1::ConfigMap> =
        Api::namespaced(client.clone(), NS);
    config_maps
        .patch(
            "shardgate-demo-0-0",
            &edit,
            &Patch::Merge(json!({"data": {"valkey.conf": "port 1\n", "extra": "kept"}})),
        )
        .await
        .unwrap();
    let stateful_sets: Api<k8s_openapi::api::apps::v1::StatefulSet> =
        Api::namespaced(client.clone(), NS);
    stateful_sets
        .patch(
            "shardgate-demo-1-0",
            &edit,
            &Patch::Json::<()>(
                serde_json::from_value(json!([
                    {"op": "replace", "path": "/spec/template/spec/containers/0/image", "value": "evil:1"},
                    {"op": "remove", "path": "/spec/template/spec/containers/0/securityContext"}
                ]))
                .unwrap(),
            ),
        )
        .await
        .unwrap();

    op.resync(3).await;
    eventually(&emu, "repaired", |e| {
        let cm = e.get("configmaps", NS, "shardgate-demo-0-0").unwrap();
        let sts = e.get("statefulsets", NS, "shardgate-demo-1-0").unwrap();
        cm["data"]["valkey.conf"] == conf_before["valkey.conf"]
            && sts["spec"]["template"] == template_before
    })
    .await;
    let cm = emu.get("configmaps", NS, "shardgate-demo-0-0").unwrap();
    assert_eq!(cm["data"]["extra"], "kept", "another manager's key");

    // Repaired once: at rest again, nothing more is written.
    op.settle().await;
    emu.reset_counts();
    let before = op.reconciles();
    op.resync(20).await;
    eventually(&emu, "20 reconciles", |_| op.reconciles() >= before + 20).await;
    assert_eq!(emu.total_writes(), 0, "{:?}", emu.write_counts());
    op.stop().await;
}

/// A reconcile that fails after the cluster was Ready says so in status
/// (`Ready=False`, `Degraded=True`, state `Degraded`), sends its Warning
/// once however often it is retried, and the per-cluster metrics follow;
/// once the fault clears, the cluster is Ready again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_reconcile_is_told_in_status_once_and_metrics() {
    let emu = emulator().await;
    let op = Operator::start(&emu, "solo").await;
    create(&emu, cluster("demo", 2, 0, nodeport())).await;
    eventually(&emu, "2x0 converged", |e| converged(e, "demo")).await;
    assert_eq!(status(&emu, "demo")["state"], "Ready");
    assert_eq!(status(&emu, "demo")["readyShards"], 2);
    let state_metric = |state: &str| {
        harness::metric_sum(
            &op.metrics,
            &format!(
                "shardgate_cluster_state{{namespace=\"{NS}\",cluster=\"demo\",state=\"{state}\"}}"
            ),
        )
    };
    assert_eq!(state_metric("Ready"), 1);

    // Until cleared: a fault that fires once is retried away after 200 ms,
    // before a loaded machine has looked at the status and the metric (CI
    // saw the metric never say Degraded).
    emu.inject(
        Fault::internal_error()
            .verb(Verb::Apply)
            .resource("statefulsets")
            .always(),
    );
    patch_spec(&emu, "demo", json!({"shards": 3})).await;
    eventually(&emu, "the failure in status", |e| {
        condition(e, "demo", "Degraded").is_some_and(|(s, r)| s == "True" && r == "ReconcileFailed")
    })
    .await;
    assert_eq!(
        condition(&emu, "demo", "Ready").unwrap(),
        ("False".to_string(), "ReconcileFailed".to_string())
    );
    assert_eq!(status(&emu, "demo")["state"], "Degraded");
    eventually(&emu, "the state metric", |_| state_metric("Degraded") == 1).await;
    // Retried with backoff, but told once.
    let retried = op.reconciles();
    eventually(&emu, "several retries", |_| op.reconciles() >= retried + 3).await;
    let failed = events(&emu, "ReconcileFailed");
    let times = harness::times_said(&emu, "ReconcileFailed", "");
    assert_eq!(
        times, 1,
        "one Warning while the same failure holds: {failed:?}"
    );

    emu.clear_faults();
    eventually(&emu, "3x0 converged", |e| converged(e, "demo")).await;
    assert_eq!(status(&emu, "demo")["state"], "Ready");
    assert_eq!(status(&emu, "demo")["shards"], 3);
    assert_eq!(state_metric("Ready"), 1);
    assert_eq!(state_metric("Degraded"), 0);
    op.stop().await;
}

/// A TLS cluster is served only with a usable TLS Secret: a missing one,
/// or one whose key is not its certificate's, refuses the spec naming
/// `spec.tls.secretName` (nothing applied, never Ready); once the Secret
/// is right the cluster converges.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tls_cluster_waits_for_a_usable_tls_secret_and_is_never_ready_before() {
    use shardgate_sandbox::certs::Authority;
    let emu = emulator().await;
    let op = Operator::start(&emu, "solo").await;
    let mut c = cluster("secure", 1, 0, nodeport());
    c["spec"]["tls"] = json!({"secretName": "secure-cert"});
    create(&emu, c).await;
    let message = |e: &Emulator| -> String {
        status(e, "secure")["conditions"]
            .as_array()
            .and_then(|cs| cs.iter().find(|c| c["type"] == "Degraded"))
            .map(|c| c["message"].as_str().unwrap_or("").to_string())
            .unwrap_or_default()
    };
    eventually(&emu, "refused for the missing Secret", |e| {
        message(e).contains("spec.tls.secretName") && message(e).contains("does not exist")
    })
    .await;
    assert!(emu.list("statefulsets", Some(NS)).is_empty());
    assert_ne!(
        condition(&emu, "secure", "Ready").map(|c| c.0),
        Some("True".into())
    );

    let ca = Authority::new("test CA").unwrap();
    let names = ["*.example.com".to_string()];
    let (good, other) = (ca.issue(&names).unwrap(), ca.issue(&names).unwrap());
    let secret = |cert: &str, key: &str| {
        use base64_encode as b64;
        json!({"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
               "metadata": {"name": "secure-cert", "namespace": NS},
               "data": {"ca.crt": b64(ca.ca_pem()), "tls.crt": b64(cert), "tls.key": b64(key)}})
    };
    // The key of another certificate: still refused, saying so.
    emu.create(secret(&good.cert, &other.key)).unwrap();
    eventually(&emu, "refused for the mismatched key", |e| {
        message(e).contains("spec.tls.secretName") && message(e).contains("is not the key")
    })
    .await;
    assert!(emu.list("statefulsets", Some(NS)).is_empty());

    let secrets: Api<k8s_openapi::api::core::v1::Secret> =
        Api::namespaced(emu.client().await.unwrap(), NS);
    let fix = json!({"data": {"tls.key": base64_encode(&good.key)}});
    secrets
        .patch("secure-cert", &PatchParams::default(), &Patch::Merge(&fix))
        .await
        .unwrap();
    eventually(&emu, "converged with the right Secret", |e| {
        converged(e, "secure")
    })
    .await;
    op.stop().await;
}

/// Base64 of `text`, as a Secret's `data` holds it.
fn base64_encode(text: &str) -> String {
    serde_json::to_value(k8s_openapi::ByteString(text.as_bytes().to_vec()))
        .unwrap()
        .as_str()
        .unwrap()
        .to_string()
}

/// NodePorts are shared by the whole Kubernetes cluster: a cluster that
/// pins a port another cluster pins is refused by field, with nothing
/// applied, while the cluster that holds the port goes on; moving the pins
/// clear of it is accepted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_port_another_cluster_pins_is_refused_by_field() {
    let emu = emulator().await;
    let op = Operator::start(&emu, "solo").await;
    let pinned = |base: u32| {
        let mut ea = nodeport();
        ea["nodePorts"] = json!({"base": base});
        ea
    };
    create(&emu, cluster("holder", 2, 0, pinned(30100))).await;
    eventually(&emu, "holder converged", |e| converged(e, "holder")).await;
    create(&emu, cluster("newcomer", 2, 0, pinned(30101))).await;
    eventually(&emu, "newcomer refused", |e| {
        condition(e, "newcomer", "Degraded") == Some(("True".into(), "InvalidSpec".into()))
    })
    .await;
    let message = status(&emu, "newcomer")["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "Degraded")
        .unwrap()["message"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        message.contains("spec.externalAccess.nodePorts.base")
            && message.contains("30101")
            && message.contains(&format!("{NS}/holder")),
        "{message}"
    );
    let newcomer_services = |e: &Emulator| {
        e.list("services", Some(NS))
            .into_iter()
            .filter(|s| s["metadata"]["labels"]["shardgate.io/cluster"] == "newcomer")
            .count()
    };
    assert_eq!(newcomer_services(&emu), 0, "nothing applied");
    assert!(converged(&emu, "holder"), "the holder goes on");
    patch_spec(
        &emu,
        "newcomer",
        json!({"externalAccess": {"nodePorts": {"base": 30200}}}),
    )
    .await;
    eventually(&emu, "newcomer converged", |e| converged(e, "newcomer")).await;
    let ports: Vec<i64> = shard_services(&emu)
        .iter()
        .filter(|s| s["metadata"]["labels"]["shardgate.io/cluster"] == "newcomer")
        .flat_map(node_ports)
        .collect();
    assert_eq!(ports.len(), 2);
    assert!(
        ports.iter().all(|p| (30200..30202).contains(p)),
        "{ports:?}"
    );
    op.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pinned_node_port_the_api_server_refuses_is_named_in_status() {
    let emu = emulator().await;
    // A Service of no ValkeyCluster holds 30301: the webhook and the
    // operator cannot see it; only the API server can refuse the port.
    emu.create(json!({"apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "someone-else", "namespace": NS},
        "spec": {"type": "NodePort", "selector": {"app": "x"},
                 "ports": [{"port": 80, "nodePort": 30301}]}}))
        .unwrap();
    let op = Operator::start(&emu, "solo").await;
    let mut ea = nodeport();
    ea["nodePorts"] = json!({"base": 30300});
    create(&emu, cluster("late", 2, 0, ea)).await;
    eventually(&emu, "the taken port told in status", |e| {
        status(e, "late")["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|c| {
                let m = c["message"].as_str().unwrap_or_default();
                c["type"] == "Degraded"
                    && c["status"] == "True"
                    && m.contains("spec.externalAccess.nodePorts.base")
                    && m.contains("NodePort 30301 is already allocated")
                    && m.contains("shardgate-late-shard-1")
            })
    })
    .await;
    // The error is counted in the error policy, after the reconcile has
    // written it to status: wait for it, too.
    eventually(&emu, "the error counted as NodePortTaken", |_| {
        harness::metric_sum(
            &op.metrics,
            "shardgate_reconcile_errors_total{reason=\"NodePortTaken\"}",
        ) > 0
    })
    .await;
    // The other Service holds its port; nothing was taken from it.
    let other = emu.get("services", NS, "someone-else").unwrap();
    assert_eq!(other["spec"]["ports"][0]["nodePort"], 30301);
    op.stop().await;
}

/// A Gateway `valkey` with a TCP listener on each of `ports`, at 203.0.113.10.
async fn gateway(emu: &Emulator, ports: &[u32]) {
    let gateway = harness::gateway_object("valkey", ports.iter().copied());
    harness::apply_gateway(emu, &gateway).await;
    emu.patch_status(
        "gateways",
        NS,
        "valkey",
        "gateway-controller",
        json!({"status": {"addresses": [{"type": "IPAddress", "value": "203.0.113.10"}]}}),
    )
    .unwrap();
}

fn routes(emu: &Emulator) -> Vec<serde_json::Value> {
    let mut v = emu.list("tcproutes", Some(NS));
    v.sort_by_key(|r| r["metadata"]["name"].as_str().unwrap().to_string());
    v
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn behind_a_gateway_each_node_gets_a_route_and_missing_listeners_are_reported() {
    let emu = harness::emulator_with_gateway_api().await;
    // Listeners for three of the four nodes.
    gateway(&emu, &[7000, 7001, 7002]).await;
    let op = Operator::start(&emu, "solo").await;
    let gw =
        json!({"enabled": true, "gateway": {"gatewayRef": {"name": "valkey"}, "basePort": 7000}});
    create(&emu, cluster("gw", 2, 1, gw)).await;
    eventually(&emu, "a missing listener reported", |e| {
        status(e, "gw")["gateway"]["missingListeners"] == json!([7003])
            && condition(e, "gw", "ExternalAccessReady")
                == Some(("False".into(), "GatewayListenersMissing".into()))
    })
    .await;
    // ClusterIP Services (the default with a gateway) and one route per
    // node, to its own port of its shard's Service.
    for svc in shard_services(&emu) {
        assert_eq!(svc["spec"]["type"], "ClusterIP", "{svc:#}");
        assert!(svc["spec"].get("externalTrafficPolicy").is_none());
    }
    let r = routes(&emu);
    assert_eq!(r.len(), 4);
    assert_eq!(r[3]["metadata"]["name"], "shardgate-gw-1-1");
    assert_eq!(r[3]["metadata"]["labels"]["shardgate.io/cluster"], "gw");
    assert_eq!(
        r[3]["metadata"]["ownerReferences"][0]["kind"],
        "ValkeyCluster"
    );
    assert_eq!(
        r[3]["spec"]["parentRefs"],
        json!([{"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": "valkey", "port": 7003}])
    );
    assert_eq!(
        r[3]["spec"]["rules"][0]["backendRefs"],
        json!([{"group": "", "kind": "Service", "name": "shardgate-gw-shard-1", "port": 6380, "weight": 1}])
    );
    let eps = status(&emu, "gw")["externalEndpoints"].clone();
    assert_eq!(eps[1]["nodes"][0]["host"], "203.0.113.10");
    assert_eq!(eps[1]["nodes"][0]["port"], 7002);
    assert_eq!(
        eps[1]["nodes"][1]["host"], "",
        "not announced without its listener"
    );
    assert_eq!(eps[1]["nodes"][1]["ready"], false);

    // The Gateway gains the listener: the cluster follows, no resync needed.
    gateway(&emu, &[7000, 7001, 7002, 7003]).await;
    eventually(&emu, "every node announced", |e| converged(e, "gw")).await;
    assert!(
        status(&emu, "gw")["gateway"]
            .get("missingListeners")
            .is_none()
    );
    let conf = emu.get("configmaps", NS, "shardgate-gw-1-1").unwrap();
    let conf = conf["data"]["valkey.conf"].as_str().unwrap();
    assert!(
        conf.contains("cluster-announce-client-ipv4 203.0.113.10\n"),
        "{conf}"
    );
    assert!(
        conf.contains("cluster-announce-client-port 7003\n"),
        "{conf}"
    );

    // Steady state: nothing written.
    emu.reset_counts();
    let before = op.reconciles();
    op.resync(20).await;
    eventually(&emu, "20 reconciles", |_| op.reconciles() >= before + 20).await;
    assert_eq!(emu.total_writes(), 0, "{:?}", emu.write_counts());

    // Without the gateway the routes go and the Services are NodePorts.
    patch_spec(
        &emu,
        "gw",
        json!({"externalAccess": {"gateway": null, "serviceType": "NodePort"}}),
    )
    .await;
    eventually(&emu, "routes pruned, status.gateway gone", |e| {
        routes(e).is_empty() && converged(e, "gw") && status(e, "gw").get("gateway").is_none()
    })
    .await;
    assert!(
        shard_services(&emu)
            .iter()
            .all(|s| s["spec"]["type"] == "NodePort")
    );
    op.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gateway_without_the_gateway_api_degrades_the_cluster_and_writes_no_route() {
    let emu = emulator().await;
    let op = Operator::start(&emu, "solo").await;
    let gw =
        json!({"enabled": true, "gateway": {"gatewayRef": {"name": "valkey"}, "basePort": 7000}});
    create(&emu, cluster("nogw", 1, 0, gw)).await;
    eventually(&emu, "degraded for the missing API", |e| {
        condition(e, "nogw", "Degraded") == Some(("True".into(), "GatewayAPIUnavailable".into()))
            && status(e, "nogw")["state"] == "Degraded"
    })
    .await;
    // The rest of the cluster is there; nothing is announced.
    assert_eq!(shard_services(&emu).len(), 1);
    assert!(emu.get("statefulsets", NS, "shardgate-nogw-0-0").is_some());
    assert_eq!(
        condition(&emu, "nogw", "ExternalAccessReady"),
        Some(("False".into(), "GatewayAPIUnavailable".into()))
    );
    assert!(op.errors() == 0, "a missing API is no reconcile error");
    op.stop().await;
}
