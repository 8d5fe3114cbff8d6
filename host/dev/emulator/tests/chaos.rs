//! What a chaos suite needs: writes logged by client, faults for one
//! client, an outage that refuses connections and cuts open ones (watches
//! included), and counts of what fired.

mod common;

use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::api::{PostParams, WatchParams};
use kube_emulator::{ANONYMOUS, Emulator, Fault, Verb};
use serde_json::json;

fn cm(name: &str) -> ConfigMap {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": "default"},
        "data": {"k": "v"},
    }))
    .unwrap()
}

async fn emulator() -> Emulator {
    Emulator::builder().start().await.unwrap()
}

#[tokio::test]
async fn writes_are_logged_by_client_and_reads_are_not() {
    let emu = emulator().await;
    let a: Api<ConfigMap> = Api::default_namespaced(emu.client_for("op-a").await.unwrap());
    let b: Api<ConfigMap> = Api::default_namespaced(emu.client_for("op-b").await.unwrap());
    let anonymous: Api<ConfigMap> = Api::default_namespaced(emu.client().await.unwrap());
    a.create(&PostParams::default(), &cm("before"))
        .await
        .unwrap();
    assert!(emu.write_log().is_empty(), "not recorded until asked");
    emu.record_writes(true);
    a.create(&PostParams::default(), &cm("x")).await.unwrap();
    b.create(&PostParams::default(), &cm("y")).await.unwrap();
    anonymous
        .create(&PostParams::default(), &cm("z"))
        .await
        .unwrap();
    a.get("y").await.unwrap();
    b.list(&Default::default()).await.unwrap();
    // A refused write is not a write.
    assert!(b.create(&PostParams::default(), &cm("x")).await.is_err());
    let log: Vec<(String, Verb, String)> = emu
        .write_log()
        .into_iter()
        .map(|w| (w.client, w.verb, w.name))
        .collect();
    assert_eq!(
        log,
        [
            ("op-a".to_string(), Verb::Create, "x".to_string()),
            ("op-b".to_string(), Verb::Create, "y".to_string()),
            (ANONYMOUS.to_string(), Verb::Create, "z".to_string()),
        ]
    );
    let times: Vec<_> = emu.write_log().iter().map(|w| w.at).collect();
    assert!(times.windows(2).all(|w| w[0] <= w[1]), "in order");
}

#[tokio::test]
async fn a_fault_for_one_client_leaves_the_others_alone_and_is_counted() {
    let emu = emulator().await;
    emu.inject(
        Fault::internal_error()
            .client("op-a")
            .verb(Verb::Create)
            .resource("configmaps")
            .always(),
    );
    let a: Api<ConfigMap> = Api::default_namespaced(emu.client_for("op-a").await.unwrap());
    let b: Api<ConfigMap> = Api::default_namespaced(emu.client_for("op-b").await.unwrap());
    for i in 0..3 {
        let e = a
            .create(&PostParams::default(), &cm(&format!("a{i}")))
            .await;
        assert!(matches!(e, Err(kube::Error::Api(s)) if s.code == 500));
    }
    b.create(&PostParams::default(), &cm("b")).await.unwrap();
    assert_eq!(emu.faults_fired().get("internal error"), Some(&3));
    emu.inject(
        Fault::latency(Duration::from_millis(1))
            .client("op-b")
            .times(2),
    );
    b.get("b").await.unwrap();
    b.get("b").await.unwrap();
    b.get("b").await.unwrap();
    assert_eq!(emu.faults_fired().get("latency"), Some(&2));
}

#[tokio::test]
async fn an_outage_refuses_connections_cuts_watches_and_ends_on_the_same_address() {
    let emu = emulator().await;
    let api: Api<ConfigMap> = Api::default_namespaced(emu.client().await.unwrap());
    api.create(&PostParams::default(), &cm("x")).await.unwrap();
    let mut watch = api
        .watch(&WatchParams::default(), "0")
        .await
        .unwrap()
        .boxed();
    // The watch replays what exists.
    assert!(watch.next().await.is_some());

    emu.outage_begin();
    assert!(emu.is_down());
    // The open watch is cut: its stream ends (or errors) instead of waiting.
    loop {
        match watch.next().await {
            None | Some(Err(_)) => break,
            Some(Ok(_)) => continue,
        }
    }
    // New connections are refused, once the listener has closed.
    let addr = emu.addr();
    common::eventually("connections refused", || async move {
        tokio::net::TcpStream::connect(addr).await.is_err()
    })
    .await;
    assert!(api.get("x").await.is_err());

    emu.outage_end();
    let api = api.clone();
    common::eventually("served again", || {
        let api = api.clone();
        async move { api.get("x").await.is_ok() }
    })
    .await;
    let fired = emu.faults_fired();
    assert_eq!(fired.get("outages"), Some(&1));
    assert!(
        fired.get("connections cut").is_some_and(|n| *n >= 1),
        "{fired:?}"
    );
}

#[tokio::test]
async fn a_watch_from_a_compacted_version_is_counted_as_gone() {
    let emu = emulator().await;
    let api: Api<ConfigMap> = Api::default_namespaced(emu.client().await.unwrap());
    let made = api.create(&PostParams::default(), &cm("x")).await.unwrap();
    api.create(&PostParams::default(), &cm("y")).await.unwrap();
    emu.compact();
    let rv = made.metadata.resource_version.unwrap();
    let mut watch = api
        .watch(&WatchParams::default(), &rv)
        .await
        .unwrap()
        .boxed();
    let first = watch.next().await.expect("an answer");
    assert!(
        matches!(&first, Ok(kube::api::WatchEvent::Error(s)) if s.code == 410),
        "{first:?}"
    );
    assert_eq!(emu.faults_fired().get("410 gone"), Some(&1));
}
