//! Server-side printing: `meta.k8s.io/v1` Tables for the Accept header
//! kubectl sends, for a custom resource with printer columns, Pods,
//! Services and StatefulSets, single objects, lists and watches.

mod common;

use common::*;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube_emulator::{CustomResource, Emulator, Ingress};
use serde_json::{Value, json};

/// What kubectl 1.35 sends for `kubectl get`.
const KUBECTL_ACCEPT: &str = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json";

/// The shardgate CRD's printer columns (deploy/crds), trimmed to what the
/// table needs.
const CRD: &str = r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: valkeyclusters.shardgate.io
spec:
  group: shardgate.io
  names: {kind: ValkeyCluster, plural: valkeyclusters}
  scope: Namespaced
  versions:
  - name: v1alpha1
    served: true
    storage: true
    subresources: {status: {}}
    schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}
    additionalPrinterColumns:
    - {jsonPath: .status.state, name: State, type: string}
    - {jsonPath: .status.shards, name: Shards, type: integer}
    - {jsonPath: .status.readyShards, name: Ready Shards, type: integer}
    - {jsonPath: .spec.replicas, name: Replicas, type: integer}
    - {jsonPath: '.status.conditions[?(@.type=="Ready")].status', name: Ready, type: string}
    - {jsonPath: '.status.conditions[?(@.type=="ExternalAccessReady")].reason', name: External, type: string}
    - {jsonPath: .spec.shards, name: Wanted, type: integer, priority: 1, description: Shards asked for}
    - {jsonPath: .metadata.creationTimestamp, name: Age, type: date}
"#;

async fn start_with_crd() -> (Emulator, kube::Client) {
    let emu = Emulator::builder()
        .custom_resource(CustomResource::from_crd_yaml(CRD).expect("the CRD parses"))
        .start()
        .await
        .expect("start");
    let client = emu.client().await.expect("client");
    (emu, client)
}

async fn get_table(emu: &Emulator, path: &str) -> Value {
    let resp = raw_get(emu, path, &[("Accept", KUBECTL_ACCEPT)]).await;
    assert_eq!(resp.code, 200, "{path}: {}", resp.body);
    assert_eq!(
        resp.header("content-type"),
        Some("application/json;as=Table;v=v1;g=meta.k8s.io")
    );
    let t = resp.json();
    assert_eq!(t["kind"], "Table", "{t}");
    assert_eq!(t["apiVersion"], "meta.k8s.io/v1");
    t
}

fn column_names(t: &Value) -> Vec<String> {
    t["columnDefinitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap().to_string())
        .collect()
}

/// The rows' cells by the first cell (the name).
fn row<'a>(t: &'a Value, name: &str) -> &'a Value {
    t["rows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["cells"][0] == name)
        .unwrap_or_else(|| panic!("no row {name} in {t}"))
}

/// An age as the server prints it for something just created.
fn is_fresh_age(v: &Value) -> bool {
    v.as_str()
        .and_then(|s| s.strip_suffix('s'))
        .is_some_and(|n| n.parse::<u32>().is_ok_and(|n| n < 60))
}

#[tokio::test]
async fn custom_resource_table_has_its_printer_columns() {
    let (emu, client) = start_with_crd().await;
    let api = vc_api(&client, "default");
    for name in ["vc", "bare"] {
        let vc = serde_json::from_value(json!({
            "apiVersion": "shardgate.io/v1alpha1", "kind": "ValkeyCluster",
            "metadata": {"name": name}, "spec": {"shards": 3, "replicas": 1},
        }))
        .unwrap();
        api.create(&PostParams::default(), &vc).await.unwrap();
    }
    api.patch_status(
        "vc",
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {
            "state": "Running", "shards": 3, "readyShards": 2,
            "conditions": [
                {"type": "Ready", "status": "True", "reason": "AllShardsReady"},
                {"type": "ExternalAccessReady", "status": "False", "reason": "LoadBalancerPending"},
            ],
        }})),
    )
    .await
    .unwrap();

    let path = "/apis/shardgate.io/v1alpha1/namespaces/default/valkeyclusters";
    let t = get_table(&emu, path).await;
    assert_eq!(
        column_names(&t),
        [
            "Name",
            "State",
            "Shards",
            "Ready Shards",
            "Replicas",
            "Ready",
            "External",
            "Wanted",
            "Age"
        ]
    );
    let defs = &t["columnDefinitions"];
    assert_eq!(defs[0]["format"], "name");
    assert_eq!(defs[2]["type"], "integer");
    assert_eq!(defs[7]["priority"], 1);
    assert_eq!(defs[7]["description"], "Shards asked for");
    assert_eq!(
        defs[1]["description"],
        "Custom resource definition column (in JSONPath format): .status.state"
    );
    assert_eq!(defs[8]["type"], "date");
    assert_eq!(
        t["metadata"]["resourceVersion"],
        json!(emu.resource_version().to_string())
    );

    let vc = row(&t, "vc");
    let cells = vc["cells"].as_array().unwrap();
    assert_eq!(
        cells[..8],
        [
            json!("vc"),
            json!("Running"),
            json!(3),
            json!(2),
            json!(1),
            json!("True"),
            json!("LoadBalancerPending"),
            json!(3),
        ]
    );
    assert!(is_fresh_age(&cells[8]), "Age: {}", cells[8]);
    assert_eq!(vc["object"]["kind"], "PartialObjectMetadata");
    assert_eq!(vc["object"]["apiVersion"], "meta.k8s.io/v1");
    assert_eq!(vc["object"]["metadata"]["name"], "vc");
    assert_eq!(vc["object"]["metadata"]["namespace"], "default");
    assert!(vc["object"].get("spec").is_none());

    // Missing values are empty (null) cells.
    let bare = &row(&t, "bare")["cells"];
    assert_eq!(
        bare.as_array().unwrap()[..8],
        [
            json!("bare"),
            Value::Null,
            Value::Null,
            Value::Null,
            json!(1),
            Value::Null,
            Value::Null,
            json!(3),
        ]
    );

    // A single object: one row, the object's resourceVersion.
    let one = get_table(&emu, &format!("{path}/vc")).await;
    assert_eq!(one["rows"].as_array().unwrap().len(), 1);
    assert_eq!(one["rows"][0]["cells"][1], "Running");
    let stored = emu.get("ValkeyCluster", "default", "vc").unwrap();
    assert_eq!(
        one["metadata"]["resourceVersion"],
        stored["metadata"]["resourceVersion"]
    );
    assert_eq!(column_names(&one).len(), 9);

    // includeObject.
    let full = get_table(&emu, &format!("{path}/vc?includeObject=Object")).await;
    assert_eq!(full["rows"][0]["object"]["kind"], "ValkeyCluster");
    assert_eq!(full["rows"][0]["object"]["status"]["readyShards"], 2);
    let none = get_table(&emu, &format!("{path}?includeObject=None")).await;
    assert!(none["rows"][0]["object"].is_null());
    let bad = raw_get(
        &emu,
        &format!("{path}?includeObject=Everything"),
        &[("Accept", KUBECTL_ACCEPT)],
    )
    .await;
    assert_eq!(bad.code, 400, "{}", bad.body);
    assert_eq!(bad.json()["reason"], "BadRequest");

    // v1beta1 when asked for first; a plain list when JSON comes first.
    let beta = raw_get(
        &emu,
        path,
        &[(
            "Accept",
            "application/json;as=Table;v=v1beta1;g=meta.k8s.io",
        )],
    )
    .await;
    assert_eq!(beta.json()["apiVersion"], "meta.k8s.io/v1beta1");
    assert_eq!(
        beta.json()["rows"][0]["object"]["apiVersion"],
        "meta.k8s.io/v1beta1"
    );
    let plain = raw_get(&emu, path, &[("Accept", "application/json")]).await;
    assert_eq!(plain.json()["kind"], "ValkeyClusterList");
    let (_, plain) = raw(&emu, "GET", path).await;
    assert!(plain.contains("\"kind\":\"ValkeyClusterList\""), "{plain}");
    emu.shutdown().await;
}

fn pod(name: &str) -> Pod {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "finalizers": if name == "leaving" { json!(["example.com/hold"]) } else { json!([]) }},
        "spec": {"containers": [
            {"name": "valkey", "image": "valkey/valkey:8"},
            {"name": "exporter", "image": "exporter:1"},
        ]},
    }))
    .unwrap()
}

#[tokio::test]
async fn pod_table_has_ready_status_restarts_and_age() {
    let (emu, client) = start().await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    for name in ["pending", "running", "leaving"] {
        pods.create(&PostParams::default(), &pod(name))
            .await
            .unwrap();
    }
    emu.set_pod_status("default", "running", "10.244.0.7", "192.168.0.1", true)
        .unwrap();
    pods.patch_status(
        "running",
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"containerStatuses": [
            {"name": "valkey", "ready": true, "restartCount": 2, "image": "valkey/valkey:8", "imageID": "",
             "state": {"running": {"startedAt": "2024-01-01T00:00:00Z"}}},
            {"name": "exporter", "ready": false, "restartCount": 1, "image": "exporter:1", "imageID": "",
             "state": {"running": {"startedAt": "2024-01-01T00:00:00Z"}}},
        ]}})),
    )
    .await
    .unwrap();
    emu.set_pod_status("default", "leaving", "10.244.0.8", "192.168.0.1", true)
        .unwrap();
    pods.delete("leaving", &DeleteParams::default())
        .await
        .unwrap();

    let t = get_table(&emu, "/api/v1/namespaces/default/pods").await;
    assert_eq!(
        column_names(&t),
        [
            "Name",
            "Ready",
            "Status",
            "Restarts",
            "Age",
            "IP",
            "Node",
            "Nominated Node",
            "Readiness Gates"
        ]
    );
    let priorities: Vec<i64> = t["columnDefinitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["priority"].as_i64().unwrap())
        .collect();
    assert_eq!(priorities, [0, 0, 0, 0, 0, 1, 1, 1, 1]);

    let cells = |name: &str| row(&t, name)["cells"].as_array().unwrap().clone();
    let pending = cells("pending");
    assert_eq!(
        pending[..4],
        [json!("pending"), json!("0/2"), json!("Pending"), json!("0")]
    );
    assert!(is_fresh_age(&pending[4]), "Age: {}", pending[4]);
    assert_eq!(pending[5], "<none>");

    let running = cells("running");
    assert_eq!(
        running[..4],
        [json!("running"), json!("1/2"), json!("Running"), json!("3")]
    );
    assert_eq!(running[5], "10.244.0.7");

    let leaving = cells("leaving");
    assert_eq!(
        leaving[1], "2/2",
        "set_pod_status reports every container ready"
    );
    assert_eq!(leaving[2], "Terminating");
    assert_eq!(row(&t, "leaving")["object"]["metadata"]["name"], "leaving");

    // One pod, across all namespaces, and the single-object form.
    let one = get_table(&emu, "/api/v1/namespaces/default/pods/running").await;
    assert_eq!(one["rows"][0]["cells"][1], "1/2");
    let all = get_table(&emu, "/api/v1/pods").await;
    assert_eq!(all["rows"].as_array().unwrap().len(), 3);
    emu.shutdown().await;
}

#[tokio::test]
async fn services_and_statefulsets_have_their_columns() {
    let emu = Emulator::builder()
        .statefulset_controller(true)
        .instant_pods(true)
        .start()
        .await
        .unwrap();
    emu.create(json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "vc", "namespace": "default"},
        "spec": {"type": "LoadBalancer", "selector": {"app": "vc"},
                 "ports": [{"name": "valkey", "port": 6379, "nodePort": 31000}, {"name": "bus", "port": 16379, "nodePort": 31001}]},
    }))
    .unwrap();
    emu.set_load_balancer_ingress("default", "vc", vec![Ingress::Ip("203.0.113.7".into())])
        .unwrap();
    emu.create(json!({
        "apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": {"name": "vc", "namespace": "default"},
        "spec": {"replicas": 2, "serviceName": "vc", "selector": {"matchLabels": {"app": "vc"}},
                 "template": {"metadata": {"labels": {"app": "vc"}},
                              "spec": {"containers": [{"name": "valkey", "image": "valkey/valkey:8"}]}}},
    }))
    .unwrap();

    let svc = get_table(&emu, "/api/v1/namespaces/default/services").await;
    assert_eq!(
        column_names(&svc),
        [
            "Name",
            "Type",
            "Cluster-IP",
            "External-IP",
            "Port(s)",
            "Age",
            "Selector"
        ]
    );
    let cells = row(&svc, "vc")["cells"].as_array().unwrap().clone();
    let cluster_ip = emu.get("Service", "default", "vc").unwrap()["spec"]["clusterIP"].clone();
    assert_eq!(
        cells[..5],
        [
            json!("vc"),
            json!("LoadBalancer"),
            cluster_ip,
            json!("203.0.113.7"),
            json!("6379:31000/TCP,16379:31001/TCP"),
        ]
    );
    assert_eq!(cells[6], "app=vc");

    let sts = get_table(&emu, "/apis/apps/v1/namespaces/default/statefulsets").await;
    assert_eq!(
        column_names(&sts),
        ["Name", "Ready", "Age", "Containers", "Images"]
    );
    let cells = row(&sts, "vc")["cells"].as_array().unwrap().clone();
    assert_eq!(cells[1], "2/2");
    assert_eq!(cells[3], "valkey");
    assert_eq!(cells[4], "valkey/valkey:8");
    emu.shutdown().await;
}

#[tokio::test]
async fn table_watch_sends_one_row_tables_with_headers_first() {
    let (emu, client) = start_with_crd().await;
    let api = vc_api(&client, "default");
    for name in ["a", "b"] {
        let vc = serde_json::from_value(json!({
            "apiVersion": "shardgate.io/v1alpha1", "kind": "ValkeyCluster",
            "metadata": {"name": name}, "spec": {"replicas": 2},
        }))
        .unwrap();
        api.create(&PostParams::default(), &vc).await.unwrap();
    }
    let resp = raw_get(
        &emu,
        "/apis/shardgate.io/v1alpha1/namespaces/default/valkeyclusters?watch=true&timeoutSeconds=1",
        &[("Accept", KUBECTL_ACCEPT)],
    )
    .await;
    assert_eq!(resp.code, 200);
    assert_eq!(
        resp.header("content-type"),
        Some("application/json;as=Table;v=v1;g=meta.k8s.io")
    );
    let events: Vec<Value> = resp
        .body
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(events.len(), 2, "{events:?}");
    for (i, ev) in events.iter().enumerate() {
        assert_eq!(ev["type"], "ADDED");
        let t = &ev["object"];
        assert_eq!(t["kind"], "Table");
        assert_eq!(t["rows"].as_array().unwrap().len(), 1);
        assert_eq!(t["rows"][0]["cells"][4], 2, "Replicas");
        let headers = t["columnDefinitions"].as_array().unwrap().len();
        assert_eq!(headers, if i == 0 { 9 } else { 0 }, "event {i}");
    }
    emu.shutdown().await;
}
