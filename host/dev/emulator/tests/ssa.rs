//! Server-side apply field ownership, no-op detection, Service defaulting and
//! NodePort allocation.

mod common;

use common::*;
use k8s_openapi::api::core::v1::{ConfigMap, Service};
use kube::api::{DeleteParams, Patch, PatchParams};
use kube::{Api, ResourceExt};
use kube_emulator::Verb;
use serde_json::{Value, json};

/// ConfigMap `c`; empty labels are left out (an applied `labels: {}` is a
/// field of its own: the applier owns the map, and the API server stores
/// no empty map, so the next apply sending one adds it and conflicts).
fn cm_cfg(labels: Value, data: Value) -> Value {
    let mut cfg =
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": data});
    if labels.as_object().is_some_and(|l| !l.is_empty()) {
        cfg["metadata"]["labels"] = labels;
    }
    cfg
}

#[tokio::test]
async fn apply_field_ownership() {
    let (emu, client) = start().await;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let a = PatchParams::apply("manager-a");

    let first = api
        .patch(
            "c",
            &a,
            &Patch::Apply(cm_cfg(json!({"a": "1"}), json!({"x": "1", "y": "2"}))),
        )
        .await
        .unwrap();
    let mf = first.managed_fields();
    assert_eq!(mf.len(), 1);
    assert_eq!(mf[0].operation.as_deref(), Some("Apply"));
    let fields = &mf[0].fields_v1.as_ref().unwrap().0;
    assert_eq!(fields["f:metadata"]["f:labels"]["f:a"], json!({}));
    assert_eq!(fields["f:data"]["f:x"], json!({}));

    // Another manager adds label b with a merge patch.
    api.patch(
        "c",
        &PatchParams {
            field_manager: Some("manager-b".into()),
            ..Default::default()
        },
        &Patch::Merge(json!({"metadata": {"labels": {"b": "2"}}})),
    )
    .await
    .unwrap();
    let before = api.get("c").await.unwrap();
    let writes_before = emu.total_writes();

    // A re-applies the same config: no-op.
    let again = api
        .patch(
            "c",
            &a,
            &Patch::Apply(cm_cfg(json!({"a": "1"}), json!({"x": "1", "y": "2"}))),
        )
        .await
        .unwrap();
    assert_eq!(
        rv(&again),
        rv(&before),
        "no-op apply must not bump resourceVersion"
    );
    assert_eq!(
        again.managed_fields(),
        before.managed_fields(),
        "timestamps unchanged on no-op"
    );
    assert_eq!(again.labels()["b"], "2");
    assert_eq!(emu.total_writes(), writes_before);
    assert_eq!(
        emu.noop_counts()[&("apply".to_string(), "configmaps".to_string())],
        1
    );

    // A drops data.y and label a: removed; b (owned by B) survives.
    let dropped = api
        .patch("c", &a, &Patch::Apply(cm_cfg(json!({}), json!({"x": "1"}))))
        .await
        .unwrap();
    assert!(rv(&dropped) > rv(&before));
    assert!(!dropped.data.as_ref().unwrap().contains_key("y"));
    assert!(!dropped.labels().contains_key("a"));
    assert_eq!(dropped.labels()["b"], "2");
    assert_eq!(emu.writes(Verb::Apply, "configmaps"), 2);

    // A field A applies that B also set to the same value is shared: when A
    // drops it, B's ownership keeps it.
    api.patch(
        "c",
        &a,
        &Patch::Apply(cm_cfg(json!({"b": "2"}), json!({"x": "1"}))),
    )
    .await
    .unwrap();
    let kept = api
        .patch("c", &a, &Patch::Apply(cm_cfg(json!({}), json!({"x": "1"}))))
        .await
        .unwrap();
    assert_eq!(kept.labels()["b"], "2");
    emu.shutdown().await;
}

#[tokio::test]
async fn apply_conflicts_and_force() {
    let (emu, client) = start().await;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    api.patch(
        "c",
        &PatchParams::apply("a"),
        &Patch::Apply(cm_cfg(json!({}), json!({"x": "1"}))),
    )
    .await
    .unwrap();
    let e = api
        .patch(
            "c",
            &PatchParams::apply("b"),
            &Patch::Apply(cm_cfg(json!({}), json!({"x": "2"}))),
        )
        .await
        .unwrap_err();
    assert_eq!((api_code(&e), api_reason(&e).as_str()), (409, "Conflict"));
    match &e {
        kube::Error::Api(s) => assert!(
            s.message.contains("conflict with \"a\"") && s.message.contains(".data.x"),
            "{}",
            s.message
        ),
        _ => unreachable!(),
    }
    // Same value: no conflict, shared ownership.
    api.patch(
        "c",
        &PatchParams::apply("b"),
        &Patch::Apply(cm_cfg(json!({}), json!({"x": "1"}))),
    )
    .await
    .unwrap();
    // Force takes ownership; a then loses it and dropping it from a's config keeps it.
    let forced = api
        .patch(
            "c",
            &PatchParams::apply("b").force(),
            &Patch::Apply(cm_cfg(json!({}), json!({"x": "3"}))),
        )
        .await
        .unwrap();
    assert_eq!(forced.data.unwrap()["x"], "3");
    let after = api
        .patch(
            "c",
            &PatchParams::apply("a"),
            &Patch::Apply(cm_cfg(json!({}), json!({}))),
        )
        .await
        .unwrap();
    assert_eq!(after.data.unwrap()["x"], "3");
    // Missing fieldManager is rejected.
    let e = api
        .patch(
            "c",
            &PatchParams::default(),
            &Patch::Apply(cm_cfg(json!({}), json!({}))),
        )
        .await
        .unwrap_err();
    assert_eq!(api_code(&e), 422);
    emu.shutdown().await;
}

fn svc(ty: &str, ports: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s"},
        "spec": {"type": ty, "selector": {"app": "x"}, "ports": ports}})
}

#[tokio::test]
async fn service_defaulting_and_node_ports() {
    let (emu, client) = start().await;
    let api: Api<Service> = Api::namespaced(client.clone(), "default");
    let pp = PatchParams::apply("op").force();
    let ports = json!([{"name": "client", "port": 6379}, {"name": "bus", "port": 16379}]);
    let created = api
        .patch("s", &pp, &Patch::Apply(svc("LoadBalancer", ports.clone())))
        .await
        .unwrap();
    let spec = created.spec.clone().unwrap();
    let ip: std::net::Ipv4Addr = spec.cluster_ip.clone().unwrap().parse().unwrap();
    assert_eq!(ip.octets()[0], 10);
    assert!((96..112).contains(&ip.octets()[1]));
    assert_eq!(spec.cluster_ips, Some(vec![ip.to_string()]));
    assert_eq!(spec.ip_families, Some(vec!["IPv4".into()]));
    assert_eq!(spec.ip_family_policy.as_deref(), Some("SingleStack"));
    assert_eq!(spec.session_affinity.as_deref(), Some("None"));
    assert_eq!(spec.internal_traffic_policy.as_deref(), Some("Cluster"));
    assert_eq!(spec.external_traffic_policy.as_deref(), Some("Cluster"));
    assert_eq!(spec.allocate_load_balancer_node_ports, Some(true));
    let sp = spec.ports.unwrap();
    assert_eq!(sp[0].protocol.as_deref(), Some("TCP"));
    assert_eq!(
        sp[0].target_port,
        Some(k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(6379))
    );
    let node_ports: Vec<i32> = sp.iter().map(|p| p.node_port.unwrap()).collect();
    assert!(node_ports.iter().all(|p| (30000..=32767).contains(p)));
    assert_ne!(node_ports[0], node_ports[1]);
    assert_eq!(emu.allocated_node_ports(), 2);

    // Re-apply without nodePort: ports and IP preserved, no write.
    let again = api
        .patch("s", &pp, &Patch::Apply(svc("LoadBalancer", ports.clone())))
        .await
        .unwrap();
    assert_eq!(rv(&again), rv(&created));
    let again_ports: Vec<i32> = again
        .spec
        .unwrap()
        .ports
        .unwrap()
        .iter()
        .map(|p| p.node_port.unwrap())
        .collect();
    assert_eq!(again_ports, node_ports);

    // A PUT that omits nodePorts keeps them too.
    let mut put = api.get("s").await.unwrap();
    for p in put.spec.as_mut().unwrap().ports.as_mut().unwrap() {
        p.node_port = None;
    }
    put.spec.as_mut().unwrap().cluster_ip = None;
    put.spec.as_mut().unwrap().cluster_ips = None;
    let replaced = api.replace("s", &Default::default(), &put).await.unwrap();
    let rp: Vec<i32> = replaced
        .spec
        .as_ref()
        .unwrap()
        .ports
        .as_ref()
        .unwrap()
        .iter()
        .map(|p| p.node_port.unwrap())
        .collect();
    assert_eq!(rp, node_ports);
    assert_eq!(
        replaced.spec.as_ref().unwrap().cluster_ip.as_deref(),
        Some(ip.to_string().as_str())
    );

    // Requesting a taken nodePort → 422.
    let taken = json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "t"},
        "spec": {"type": "NodePort", "ports": [{"port": 80, "nodePort": node_ports[0]}]}});
    let e = api
        .patch("t", &pp, &Patch::Apply(taken.clone()))
        .await
        .unwrap_err();
    assert_eq!((api_code(&e), api_reason(&e).as_str()), (422, "Invalid"));
    // Out of range → 422; missing ports → 422.
    let e = api
        .patch(
            "t",
            &pp,
            &Patch::Apply(
                json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "t"},
        "spec": {"type": "NodePort", "ports": [{"port": 80, "nodePort": 80}]}}),
            ),
        )
        .await
        .unwrap_err();
    assert_eq!(api_code(&e), 422);

    // LB ingress on demand is a real status change.
    let lb = emu
        .set_load_balancer_ingress(
            "default",
            "s",
            vec![kube_emulator::Ingress::Ip("203.0.113.7".into())],
        )
        .unwrap();
    assert_eq!(
        lb["status"]["loadBalancer"]["ingress"][0]["ip"],
        "203.0.113.7"
    );
    let got = api.get("s").await.unwrap();
    assert!(rv(&got) > rv(&replaced));

    // Changing type to ClusterIP frees the node ports.
    api.patch("s", &pp, &Patch::Apply(svc("ClusterIP", ports.clone())))
        .await
        .unwrap();
    let cip = api.get("s").await.unwrap();
    assert!(
        cip.spec
            .unwrap()
            .ports
            .unwrap()
            .iter()
            .all(|p| p.node_port.is_none())
    );
    assert_eq!(emu.allocated_node_ports(), 0);
    // Now the previously taken port can be requested.
    let t = api.patch("t", &pp, &Patch::Apply(taken)).await.unwrap();
    assert_eq!(
        t.spec.unwrap().ports.unwrap()[0].node_port,
        Some(node_ports[0])
    );
    assert_eq!(emu.allocated_node_ports(), 1);
    api.delete("t", &DeleteParams::default()).await.unwrap();
    assert_eq!(emu.allocated_node_ports(), 0, "freed on delete");

    // Headless service: clusterIP None, no allocation.
    let h = api
        .patch(
            "h",
            &pp,
            &Patch::Apply(
                json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "h"},
        "spec": {"clusterIP": "None", "selector": {"app": "x"}}}),
            ),
        )
        .await
        .unwrap();
    assert_eq!(h.spec.unwrap().cluster_ips, Some(vec!["None".to_string()]));
    emu.shutdown().await;
}

#[tokio::test]
async fn apply_list_map_merging() {
    let (emu, client) = start().await;
    let api: Api<Service> = Api::namespaced(client.clone(), "default");
    let a = PatchParams::apply("a").force();
    api.patch(
        "s",
        &a,
        &Patch::Apply(svc("ClusterIP", json!([{"name": "p1", "port": 1}]))),
    )
    .await
    .unwrap();
    // Manager b applies a second port: both coexist (ports keyed by port+protocol).
    let both = api
        .patch(
            "s",
            &PatchParams::apply("b"),
            &Patch::Apply(json!({"apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "s"}, "spec": {"ports": [{"name": "p2", "port": 2}]}})),
        )
        .await
        .unwrap();
    let names: Vec<String> = both
        .spec
        .unwrap()
        .ports
        .unwrap()
        .iter()
        .map(|p| p.name.clone().unwrap())
        .collect();
    assert_eq!(names, ["p1", "p2"]);
    let mf = api.get("s").await.unwrap().managed_fields().to_vec();
    let b = mf
        .iter()
        .find(|m| m.manager.as_deref() == Some("b"))
        .unwrap();
    let key = r#"k:{"port":2,"protocol":"TCP"}"#;
    assert!(
        b.fields_v1.as_ref().unwrap().0["f:spec"]["f:ports"]
            .get(key)
            .is_some(),
        "{:?}",
        b.fields_v1
    );
    // a drops its port: only p2 remains.
    let left = api
        .patch(
            "s",
            &a,
            &Patch::Apply(json!({"apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "s"}, "spec": {"selector": {"app": "x"}}})),
        )
        .await
        .unwrap();
    let names: Vec<String> = left
        .spec
        .unwrap()
        .ports
        .unwrap()
        .iter()
        .map(|p| p.name.clone().unwrap())
        .collect();
    assert_eq!(names, ["p2"]);
    emu.shutdown().await;
}

#[tokio::test]
async fn a_configured_node_port_range_is_allocated_from_and_enforced() {
    let emu = kube_emulator::Emulator::builder()
        .node_port_range(40000..=40001)
        .start()
        .await
        .unwrap();
    let client = emu.client().await.unwrap();
    let api: Api<Service> = Api::namespaced(client, "default");
    let pp = PatchParams::apply("op").force();
    let two = json!([{"name": "a", "port": 1}, {"name": "b", "port": 2}]);
    let created = api
        .patch("s", &pp, &Patch::Apply(svc("NodePort", two)))
        .await
        .unwrap();
    let mut ports: Vec<i32> = created
        .spec
        .unwrap()
        .ports
        .unwrap()
        .iter()
        .map(|p| p.node_port.unwrap())
        .collect();
    ports.sort();
    assert_eq!(ports, [40000, 40001]);
    // The range is full: a third port cannot be allocated.
    let mut other = svc("NodePort", json!([{"name": "c", "port": 3}]));
    other["metadata"]["name"] = "t".into();
    let e = api.patch("t", &pp, &Patch::Apply(other)).await.unwrap_err();
    assert_eq!(api_code(&e), 422, "{e}");
    // An explicit port outside the configured range is refused with it.
    let mut outside = svc(
        "NodePort",
        json!([{"name": "c", "port": 3, "nodePort": 30000}]),
    );
    outside["metadata"]["name"] = "u".into();
    let e = api
        .patch("u", &pp, &Patch::Apply(outside))
        .await
        .unwrap_err();
    assert!(e.to_string().contains("40000-40001"), "{e}");
    emu.shutdown().await;
}
