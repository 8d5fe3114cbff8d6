//! Cluster-scoped `v1 Node`s (CRUD, status, apply, watch, discovery, the
//! Table printer) and binding Pods to them through `pods/binding` or
//! `Emulator::bind_pod`.

mod common;

use common::*;
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{Binding, Node, ObjectReference, Pod};
use kube::Api;
use kube::api::{
    DeleteParams, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams,
};
use kube_emulator::Verb;
use serde_json::{Value, json};

const KUBECTL_ACCEPT: &str = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json";

fn node(name: &str, zone: &str, ip: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": {
            "kubernetes.io/hostname": name, "topology.kubernetes.io/zone": zone}},
        "status": {
            "addresses": [{"type": "InternalIP", "address": ip}],
            "conditions": [{"type": "Ready", "status": "True"}],
            "nodeInfo": {"kubeletVersion": "v1.33.0"},
        },
    })
}

/// Creates `node` and then its status (which a create drops).
fn seed(emu: &kube_emulator::Emulator, node: Value) {
    let name = node["metadata"]["name"].as_str().unwrap().to_string();
    emu.create(node.clone()).unwrap();
    emu.patch_status(
        "nodes",
        "",
        &name,
        "kubelet",
        json!({"status": node["status"]}),
    )
    .unwrap();
}

fn pod(name: &str) -> Pod {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"containers": [{"name": "c", "image": "valkey/valkey:9"}]},
    }))
    .unwrap()
}

fn binding(pod: &str, node: &str) -> Binding {
    Binding {
        metadata: kube::api::ObjectMeta {
            name: Some(pod.into()),
            ..Default::default()
        },
        target: ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Node".into()),
            name: Some(node.into()),
            ..Default::default()
        },
    }
}

#[tokio::test]
async fn nodes_are_cluster_scoped_with_status_apply_and_watch() {
    let (emu, client) = start().await;
    let nodes: Api<Node> = Api::all(client.clone());
    let mut watch = nodes
        .watch(&WatchParams::default(), "0")
        .await
        .unwrap()
        .boxed();

    let created: Node = nodes
        .create(
            &PostParams::default(),
            &serde_json::from_value(node("n0", "z0", "10.0.0.1")).unwrap(),
        )
        .await
        .unwrap();
    // `.status` is the status subresource's: dropped on create.
    assert!(
        created
            .status
            .as_ref()
            .and_then(|s| s.addresses.as_ref())
            .is_none()
    );
    match watch.try_next().await.unwrap().unwrap() {
        WatchEvent::Added(n) => assert_eq!(n.metadata.name.as_deref(), Some("n0")),
        other => panic!("{other:?}"),
    }
    let status = node("n0", "z0", "10.0.0.1")["status"].clone();
    nodes
        .patch_status(
            "n0",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": status})),
        )
        .await
        .unwrap();
    let got = emu.get("Node", "", "n0").unwrap();
    assert_eq!(got["status"]["addresses"][0]["address"], "10.0.0.1");
    assert_eq!(
        got["metadata"]["labels"]["topology.kubernetes.io/zone"],
        "z0"
    );

    // Server-side apply, then a list with a label selector.
    let applied = json!({"apiVersion": "v1", "kind": "Node",
        "metadata": {"name": "n1", "labels": {"topology.kubernetes.io/zone": "z1"}}});
    nodes
        .patch("n1", &PatchParams::apply("test"), &Patch::Apply(applied))
        .await
        .unwrap();
    let in_z1 = nodes
        .list(&ListParams::default().labels("topology.kubernetes.io/zone=z1"))
        .await
        .unwrap();
    assert_eq!(in_z1.items.len(), 1);
    assert_eq!(emu.list("nodes", None).len(), 2);

    // No namespaced form.
    let (code, _) = raw(&emu, "GET", "/api/v1/namespaces/default/nodes/n0").await;
    assert_eq!(code, 404);

    nodes.delete("n1", &DeleteParams::default()).await.unwrap();
    assert!(emu.get("nodes", "", "n1").is_none());
    emu.shutdown().await;
}

#[tokio::test]
async fn discovery_lists_nodes_and_pod_binding() {
    let (emu, _client) = start().await;
    let (code, body) = raw(&emu, "GET", "/api/v1").await;
    assert_eq!(code, 200);
    let list: Value = serde_json::from_str(&body).unwrap();
    let find = |name: &str| {
        list["resources"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["name"] == name)
            .cloned()
            .unwrap_or_else(|| panic!("{name} in {list}"))
    };
    let nodes = find("nodes");
    assert_eq!(nodes["namespaced"], false);
    assert_eq!(nodes["kind"], "Node");
    assert_eq!(nodes["shortNames"], json!(["no"]));
    find("nodes/status");
    let binding = find("pods/binding");
    assert_eq!(binding["kind"], "Binding");
    assert_eq!(binding["verbs"], json!(["create"]));
    emu.shutdown().await;
}

#[tokio::test]
async fn nodes_print_as_kubectl_get_nodes() {
    let (emu, _client) = start().await;
    let mut ready = node("n0", "z0", "10.0.0.1");
    ready["metadata"]["labels"]["node-role.kubernetes.io/control-plane"] = json!("");
    seed(&emu, ready);
    let mut not_ready = node("n1", "z1", "10.0.0.2");
    not_ready["status"]["conditions"][0]["status"] = json!("False");
    not_ready["spec"] = json!({"unschedulable": true});
    seed(&emu, not_ready);
    let resp = raw_get(&emu, "/api/v1/nodes", &[("Accept", KUBECTL_ACCEPT)]).await;
    assert_eq!(resp.code, 200, "{}", resp.body);
    let t = resp.json();
    assert_eq!(t["kind"], "Table", "{t}");
    let names: Vec<&str> = t["columnDefinitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "Name",
            "Status",
            "Roles",
            "Age",
            "Version",
            "Internal-IP",
            "External-IP",
            "OS-Image",
            "Kernel-Version",
            "Container-Runtime"
        ]
    );
    let rows = t["rows"].as_array().unwrap();
    let cells = |i: usize| rows[i]["cells"].as_array().unwrap().clone();
    let n0 = cells(0);
    assert_eq!(n0[0], "n0");
    assert_eq!(n0[1], "Ready");
    assert_eq!(n0[2], "control-plane");
    assert_eq!(n0[4], "v1.33.0");
    assert_eq!(n0[5], "10.0.0.1");
    assert_eq!(n0[6], "<none>");
    let n1 = cells(1);
    assert_eq!(n1[1], "NotReady,SchedulingDisabled");
    assert_eq!(n1[2], "<none>");
    emu.shutdown().await;
}

#[tokio::test]
async fn binding_sets_the_node_once() {
    let (emu, client) = start().await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    pods.create(&PostParams::default(), &pod("p"))
        .await
        .unwrap();

    let _: Value = pods
        .create_subresource("binding", "p", &PostParams::default(), &binding("p", "n0"))
        .await
        .unwrap();
    let bound = emu.get("Pod", "default", "p").unwrap();
    assert_eq!(bound["spec"]["nodeName"], "n0");
    let scheduled = bound["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "PodScheduled")
        .unwrap();
    assert_eq!(scheduled["status"], "True");
    assert_eq!(emu.writes(Verb::Create, "pods/binding"), 1);

    // A bound pod cannot be bound again.
    let again = binding("p", "n1");
    let err = pods
        .create_subresource::<_, Value>("binding", "p", &PostParams::default(), &again)
        .await
        .unwrap_err();
    assert_eq!(api_code(&err), 409);
    assert!(
        err.to_string().contains("already assigned to node \"n0\""),
        "{err}"
    );

    // Another name in the body, a missing pod, a target that is no Node.
    let (code, _) = raw_body(
        &emu,
        "POST",
        "/api/v1/namespaces/default/pods/p/binding",
        "application/json",
        &serde_json::to_string(&binding("q", "n0")).unwrap(),
    )
    .await;
    assert_eq!(code, 400);
    let (code, _) = raw_body(
        &emu,
        "POST",
        "/api/v1/namespaces/default/pods/q/binding",
        "application/json",
        &serde_json::to_string(&binding("q", "n0")).unwrap(),
    )
    .await;
    assert_eq!(code, 404);
    pods.create(&PostParams::default(), &pod("r"))
        .await
        .unwrap();
    let mut to_service = serde_json::to_value(binding("r", "n0")).unwrap();
    to_service["target"]["kind"] = json!("Service");
    let (code, _) = raw_body(
        &emu,
        "POST",
        "/api/v1/namespaces/default/pods/r/binding",
        "application/json",
        &to_service.to_string(),
    )
    .await;
    assert_eq!(code, 422);
    let (code, _) = raw(&emu, "GET", "/api/v1/namespaces/default/pods/r/binding").await;
    assert_eq!(code, 405);

    // The emulator's own door: same rules, not counted.
    let bound = emu.bind_pod("default", "r", "n2").unwrap();
    assert_eq!(bound["spec"]["nodeName"], "n2");
    assert!(emu.bind_pod("default", "r", "n1").is_err());
    assert_eq!(emu.writes(Verb::Create, "pods/binding"), 1);

    // A field selector on spec.nodeName finds the bound pods.
    let on_n2 = pods
        .list(&ListParams::default().fields("spec.nodeName=n2"))
        .await
        .unwrap();
    assert_eq!(on_n2.items.len(), 1);
    emu.shutdown().await;
}

#[tokio::test]
async fn set_pod_condition_replaces_one_condition() {
    let (emu, client) = start().await;
    let pods: Api<Pod> = Api::namespaced(client, "default");
    pods.create(&PostParams::default(), &pod("p"))
        .await
        .unwrap();
    let cond = json!({"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                      "message": "0/3 nodes are available", "lastProbeTime": null,
                      "lastTransitionTime": "2024-01-01T00:00:00Z"});
    emu.set_pod_condition("default", "p", "kube-scheduler", cond.clone())
        .unwrap();
    let rv = emu.resource_version();
    emu.set_pod_condition("default", "p", "kube-scheduler", cond)
        .unwrap();
    assert_eq!(
        emu.resource_version(),
        rv,
        "the same condition again is a no-op"
    );
    let p = emu.get("Pod", "default", "p").unwrap();
    assert_eq!(p["status"]["conditions"][0]["reason"], "Unschedulable");
    assert_eq!(p["status"]["conditions"].as_array().unwrap().len(), 1);
    emu.shutdown().await;
}
