//! What `deploy/` ships is what the running operator does:
//!
//! - the RBAC table the manifests are checked against
//!   (`host/operator/src/rbac.rs`, written to `deploy/operator/rbac-rules.json`)
//!   grants every request the operator sends, and every verb it grants is
//!   one the operator was seen to send.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use kube_emulator::{Emulator, RequestRecord, Verb};
use serde_json::json;
use shardgate_operator::LeaseOptions;
use shardgate_operator::rbac::{self, GRANTS, Use};
use shardgate_tests::harness::{
    self, NS, Operator, Setup, cluster, condition, converged, create, eventually, patch_spec,
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
