//! What `deploy/` ships is what the running operator does:
//!
//! - the RBAC table the manifests are checked against
//!   (`host/operator/src/rbac.rs`, written to `deploy/operator/rbac-rules.json`)
//!   grants every request the operator sends, and every verb it grants is
//!   one the operator was seen to send;
//! - every metric the Helm chart's alerts and Grafana dashboard query is in
//!   what the operator's `/metrics` serves over HTTP.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::Duration;

use kube_emulator::{Emulator, Fault, RequestRecord, Verb};
use serde_json::json;
use shardgate_operator::LeaseOptions;
use shardgate_operator::rbac::{self, GRANTS, Use};
use shardgate_tests::harness::{
    self, NS, Operator, Setup, cluster, condition, converged, create, eventually, nodeport,
    patch_spec,
};
use shardgate_tests::wait;

/// The operator's bearer token: its requests, told apart from the test's.
const OPERATOR: &str = "shardgate-operator";

/// Verbs granted that this test's run does not reach, and why: each is
/// still read in the code named.
const NOT_REACHED: &[(&str, &str, &str, &str)] = &[(
    "",
    "pods",
    "delete",
    "controlled restarts talk to real Valkey nodes first \
     (host/operator/src/reconcile/reshape.rs; tests/tests/e2e.rs runs them)",
)];

/// The RBAC verbs a request needs: a server-side apply is a `patch`, and a
/// `create` too when it created the object.
fn needs(r: &RequestRecord) -> Vec<&'static str> {
    match r.verb {
        Verb::Apply if r.code == 201 => vec!["patch", "create"],
        Verb::Apply => vec!["patch"],
        v => vec![v.as_str()],
    }
}

/// Base64 of `text`, as a Secret's `data` holds it.
fn base64(text: &str) -> String {
    serde_json::to_value(k8s_openapi::ByteString(text.as_bytes().to_vec()))
        .unwrap()
        .as_str()
        .unwrap()
        .to_string()
}

/// A Gateway `valkey` with TCP listeners on ports 7000-7004 and TLS
/// passthrough ones on 7005-7009, and the address its controller would
/// give it.
async fn gateway(emu: &Emulator) {
    let mut gw = harness::gateway_object("valkey", 7000..7010);
    for l in gw["spec"]["listeners"].as_array_mut().unwrap() {
        if l["port"].as_u64() >= Some(7005) {
            l["protocol"] = json!("TLS");
            l["tls"] = json!({"mode": "Passthrough"});
        }
    }
    harness::apply_gateway(emu, &gw).await;
    emu.patch_status(
        "gateways",
        NS,
        "valkey",
        "gateway-controller",
        json!({"status": {"addresses": [{"type": "IPAddress", "value": "203.0.113.10"}]}}),
    )
    .unwrap();
}

/// Drives the operator (with leader election, against the emulator serving
/// the Gateway API) through what it does without real Valkey nodes: a
/// cluster behind a gateway (TCPRoutes) and a TLS one (TLSRoutes, the TLS
/// Secret), users (password Secrets, the ACL), a PodDisruptionBudget,
/// scale-in and external access turned off (prunes), an invalid spec told
/// twice (an Event's count raised), the Lease renewed; then
/// compares every request it sent with [`rbac::GRANTS`], both ways.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_operator_sends_exactly_the_requests_its_rbac_table_grants() {
    use shardgate_sandbox::certs::Authority;
    let emu = harness::emulator_with_gateway_api().await;
    emu.record_requests(true);
    gateway(&emu).await;
    let lease = LeaseOptions {
        name: "shardgate-leader".into(),
        namespace: NS.into(),
        duration_seconds: 2,
        grace_seconds: 1,
    };
    let op = Operator::with(&emu, Setup::new("replica-a").lease(lease).token(OPERATOR)).await;

    // Behind the gateway, with a user and the default PodDisruptionBudget.
    let behind = |base: u32| json!({"enabled": true, "gateway": {"gatewayRef": {"name": "valkey"}, "basePort": base}});
    // The user's password is in a Secret of the user's, read by name.
    emu.create(json!({"apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "app-password", "namespace": NS},
        "data": {"app": base64("app-password")}}))
        .unwrap();
    let app = |permissions: &str| {
        json!([{"name": "app", "passwordSecret": {"name": "app-password"},
                "permissions": permissions}])
    };
    let mut plain = cluster("plain", 2, 0, behind(7000));
    plain["spec"]["users"] = app("+@read ~*");
    create(&emu, plain).await;
    // TLS behind the gateway: TLSRoutes, and the Secret read by name.
    let ca = Authority::new("test CA").unwrap();
    let cert = ca.issue(&["*.example.com".to_string()]).unwrap();
    emu.create(
        json!({"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
        "metadata": {"name": "secure-cert", "namespace": NS},
        "data": {"ca.crt": base64(ca.ca_pem()), "tls.crt": base64(&cert.cert),
                 "tls.key": base64(&cert.key)}}),
    )
    .unwrap();
    let mut secure = cluster("secure", 1, 0, behind(7005));
    secure["spec"]["tls"] = json!({"secretName": "secure-cert"});
    // Routed by SNI: each node's own hostname.
    let ea = &mut secure["spec"]["externalAccess"];
    ea["domain"] = json!("example.com");
    ea["hostnameScope"] = json!("Node");
    ea["preferredEndpointType"] = json!("hostname");
    create(&emu, secure).await;
    eventually(&emu, "both converged", |e| {
        converged(e, "plain") && converged(e, "secure")
    })
    .await;
    assert_eq!(emu.list("tlsroutes", Some(NS)).len(), 1);

    // A user's password changes the ACL; scale-in and no budget prune.
    patch_spec(
        &emu,
        "plain",
        json!({"shards": 1, "podDisruptionBudget": {"mode": "Disabled"},
               "users": app("+@all ~*")}),
    )
    .await;
    eventually(&emu, "plain scaled in", |e| {
        converged(e, "plain") && emu_count(e, "poddisruptionbudgets") == 1
    })
    .await;
    patch_spec(
        &emu,
        "secure",
        json!({"externalAccess": {"enabled": false}}),
    )
    .await;
    eventually(&emu, "secure without routes", |e| {
        converged(e, "secure") && e.list("tlsroutes", Some(NS)).is_empty()
    })
    .await;
    // An invalid spec, fixed, then the same again: the second telling of
    // the same Event raises its count.
    let invalid = json!({"externalAccess": {"enabled": true, "preferredEndpointType": "hostname",
                                            "gateway": null, "serviceType": "NodePort"}});
    let refused = |e: &Emulator| {
        condition(e, "plain", "Degraded").is_some_and(|(s, r)| s == "True" && r == "InvalidSpec")
    };
    patch_spec(&emu, "plain", invalid.clone()).await;
    eventually(&emu, "the invalid spec refused", refused).await;
    patch_spec(
        &emu,
        "plain",
        json!({"externalAccess": {"preferredEndpointType": "ip"}}),
    )
    .await;
    eventually(&emu, "the fixed spec converged", |e| converged(e, "plain")).await;
    patch_spec(&emu, "plain", invalid).await;
    eventually(&emu, "refused again", refused).await;
    let operator_sent = |verb: Verb, resource: &str| {
        emu.request_log()
            .iter()
            .any(|r| r.client == OPERATOR && r.verb == verb && r.resource == resource)
    };
    wait::until("the Event's count raised", Duration::from_secs(10), || {
        operator_sent(Verb::Patch, "events")
    })
    .await;
    // The Lease renewed (the leader renews well within its 2 s).
    wait::until("the Lease renewed", Duration::from_secs(10), || {
        operator_sent(Verb::Patch, "leases")
    })
    .await;
    op.stop().await;

    let log: Vec<RequestRecord> = emu
        .request_log()
        .into_iter()
        .filter(|r| r.client == OPERATOR)
        .collect();
    assert!(!log.is_empty(), "no request of the operator recorded");
    // Every request is granted.
    let mut ungranted = BTreeMap::<String, u32>::new();
    let mut sent = BTreeSet::<(String, String, &'static str)>::new();
    for r in &log {
        for verb in needs(r) {
            sent.insert((r.group.clone(), r.resource.clone(), verb));
            if !rbac::granted(&r.group, &r.resource, verb) {
                *ungranted
                    .entry(format!("{verb} {}/{} ({})", r.group, r.resource, r.code))
                    .or_default() += 1;
            }
        }
    }
    assert!(
        ungranted.is_empty(),
        "requests host/operator/src/rbac.rs does not grant: {ungranted:#?}"
    );
    // Every grant is used.
    let mut unused = Vec::new();
    for g in GRANTS.iter().filter(|g| g.used == Use::Request) {
        for resource in g.resources {
            for verb in g.verbs {
                let key = (g.api_group.to_string(), resource.to_string(), *verb);
                let excused = NOT_REACHED
                    .iter()
                    .any(|(gr, r, v, _)| (*gr, *r, *v) == (g.api_group, *resource, *verb));
                if !sent.contains(&key) && !excused {
                    unused.push(format!("{verb} {}/{resource}", g.api_group));
                }
            }
        }
    }
    assert!(
        unused.is_empty(),
        "granted in host/operator/src/rbac.rs but never sent: {unused:?}\nsent: {sent:#?}"
    );
    // What is excused is granted, and really not reached here.
    for (group, resource, verb, why) in NOT_REACHED {
        assert!(rbac::granted(group, resource, verb), "{why}");
        assert!(
            !sent.contains(&(group.to_string(), resource.to_string(), *verb)),
            "{verb} {group}/{resource} is reached now: drop it from NOT_REACHED"
        );
    }
}

fn emu_count(emu: &Emulator, plural: &str) -> usize {
    emu.list(plural, Some(NS)).len()
}

// ---------------------------------------------------------------- metrics

/// `GET path` from `addr` over HTTP/1.1 (one connection, closed after):
/// the status code and the body.
async fn http_get(addr: std::net::SocketAddr, path: &str) -> std::io::Result<(u16, String)> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut tcp = tokio::net::TcpStream::connect(addr).await?;
    let request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    tcp.write_all(request.as_bytes()).await?;
    let mut raw = Vec::new();
    tcp.read_to_end(&mut raw).await?;
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = text
        .split_once("\r\n\r\n")
        .ok_or_else(|| std::io::Error::other(format!("no HTTP head in {text:?}")))?;
    let code = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| std::io::Error::other(format!("no status in {head:?}")))?;
    if head.lines().any(|l| {
        l.to_ascii_lowercase()
            .starts_with("transfer-encoding: chunked")
    }) {
        return Err(std::io::Error::other(
            "a chunked body; expected a sized one",
        ));
    }
    Ok((code, body.to_string()))
}

/// What a scrape says is exported: the names of its samples, and the
/// families it declares (`# TYPE name kind`).
struct Scrape {
    samples: BTreeMap<String, Vec<String>>,
    families: BTreeMap<String, String>,
}

impl Scrape {
    fn parse(text: &str) -> Scrape {
        let mut samples = BTreeMap::<String, Vec<String>>::new();
        let mut families = BTreeMap::new();
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("# TYPE ") {
                let (name, kind) = rest.split_once(' ').expect("# TYPE name kind");
                families.insert(name.to_string(), kind.to_string());
            } else if !line.starts_with('#') && !line.is_empty() {
                let end = line.find(['{', ' ']).unwrap_or(line.len());
                samples
                    .entry(line[..end].to_string())
                    .or_default()
                    .push(line.to_string());
            }
        }
        Scrape { samples, families }
    }

    /// Whether `name` is a sample name of a family declared with no
    /// series yet (a counter before its first count).
    fn declared(&self, name: &str) -> bool {
        self.families.iter().any(|(family, kind)| {
            let suffixes: &[&str] = match kind.as_str() {
                "counter" => &["_total"],
                "histogram" => &["_bucket", "_sum", "_count"],
                _ => &[""],
            };
            suffixes.iter().any(|s| format!("{family}{s}") == name)
        })
    }
}

/// The `shardgate_…` identifiers in `text`.
fn used(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut rest = text;
    while let Some(at) = rest.find("shardgate_") {
        let before = rest[..at].chars().next_back();
        let tail = &rest[at..];
        let end = tail
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(tail.len());
        if !before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_') {
            out.insert(tail[..end].to_string());
        }
        rest = &tail[end..];
    }
    out
}

fn chart_file(path: &str) -> String {
    let full = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../deploy/helm/shardgate")
        .join(path);
    std::fs::read_to_string(&full).unwrap_or_else(|e| panic!("{}: {e}", full.display()))
}

#[test]
fn metric_names_are_found_as_written() {
    assert_eq!(
        used("x shardgate_a_total{y} (shardgate_b) my_shardgate_c"),
        BTreeSet::from(["shardgate_a_total".to_string(), "shardgate_b".into()])
    );
    let scrape = Scrape::parse(
        "# TYPE shardgate_r counter\n# TYPE shardgate_h histogram\n\
         shardgate_h_count{a=\"b\"} 1\n# EOF\n",
    );
    assert!(scrape.declared("shardgate_r_total") && scrape.declared("shardgate_h_sum"));
    assert!(!scrape.declared("shardgate_r") && !scrape.declared("shardgate_h"));
    assert_eq!(
        scrape.samples.keys().collect::<Vec<_>>(),
        ["shardgate_h_count"]
    );
}

/// The operator runs as `shardgate run --listen` runs it, reconciles a
/// cluster (and fails one reconcile, so the error counter has a series),
/// and its `/metrics`, scraped over HTTP, carries every metric the chart's
/// PrometheusRule and Grafana dashboard use: as a sample, or declared by
/// its family (a counter without labels shows 0; a labelled family only
/// once it has a series); the per-cluster ones with the cluster's series.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_charts_alerts_and_dashboard_use_only_metrics_served_on_metrics() {
    let emu = harness::emulator().await;
    // A free port for --listen: the operator binds it itself.
    let addr = {
        let probe = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        probe.local_addr().unwrap()
    };
    let op = Operator::with(&emu, Setup::new("solo").listen(addr)).await;
    let ready = wait::until_async("/readyz to answer 200", Duration::from_secs(30), || async {
        matches!(http_get(addr, "/readyz").await, Ok((200, _)))
    });
    ready.await;
    emu.inject(
        Fault::internal_error()
            .verb(Verb::Apply)
            .resource("statefulsets"),
    );
    create(&emu, cluster("demo", 2, 1, nodeport())).await;
    eventually(&emu, "converged after a failed reconcile", |e| {
        converged(e, "demo")
    })
    .await;

    let scrape_has_cluster = |text: &str| {
        text.lines().any(|l| {
            l.starts_with("shardgate_cluster_ready_shards{") && l.contains("cluster=\"demo\"")
        })
    };
    let text = wait::until_async(
        "/metrics to carry the cluster's series",
        Duration::from_secs(30),
        || async {
            match http_get(addr, "/metrics").await {
                Ok((200, body)) if scrape_has_cluster(&body) => Some(body),
                _ => None,
            }
        },
    )
    .await;
    op.stop().await;

    let scrape = Scrape::parse(&text);
    assert!(
        scrape
            .samples
            .contains_key("shardgate_reconcile_errors_total"),
        "the failed reconcile is counted:\n{text}"
    );
    for file in ["templates/prometheusrule.yaml", "dashboards/shardgate.json"] {
        let names = used(&chart_file(file));
        assert!(!names.is_empty(), "{file} uses no shardgate metric");
        let unknown: Vec<_> = names
            .iter()
            .filter(|n| !scrape.samples.contains_key(*n) && !scrape.declared(n))
            .collect();
        assert!(
            unknown.is_empty(),
            "{file} uses metrics /metrics does not serve: {unknown:?}\n/metrics:\n{text}"
        );
        // The per-cluster metrics carry the cluster's series.
        for name in names.iter().filter(|n| n.starts_with("shardgate_cluster_")) {
            let series = scrape.samples.get(name).cloned().unwrap_or_default();
            assert!(
                series
                    .iter()
                    .any(|s| s.contains(&format!("namespace=\"{NS}\""))
                        && s.contains("cluster=\"demo\"")),
                "{file}: {name} has no series of cluster demo:\n{text}"
            );
        }
    }
}
