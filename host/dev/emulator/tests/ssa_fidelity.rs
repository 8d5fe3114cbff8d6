//! Server-side apply as structured-merge-diff does it: one test per way the
//! emulator differed from the library (found by `tests/ssa_reference.rs`),
//! each expectation being what the library answered for the same writes.

mod common;

use common::*;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

fn params(manager: &str) -> PatchParams {
    PatchParams {
        field_manager: Some(manager.into()),
        ..PatchParams::default()
    }
}

fn post(manager: &str) -> PostParams {
    PostParams {
        field_manager: Some(manager.into()),
        ..PostParams::default()
    }
}

fn object(v: Value) -> DynamicObject {
    serde_json::from_value(v).unwrap()
}

fn configmaps(client: &kube::Client) -> Api<DynamicObject> {
    Api::default_namespaced_with(
        client.clone(),
        &kube::api::ApiResource::erase::<k8s_openapi::api::core::v1::ConfigMap>(&()),
    )
}

fn services(client: &kube::Client) -> Api<DynamicObject> {
    Api::default_namespaced_with(
        client.clone(),
        &kube::api::ApiResource::erase::<k8s_openapi::api::core::v1::Service>(&()),
    )
}

fn statefulsets(client: &kube::Client) -> Api<DynamicObject> {
    Api::default_namespaced_with(
        client.clone(),
        &kube::api::ApiResource::erase::<k8s_openapi::api::apps::v1::StatefulSet>(&()),
    )
}

/// The stored object as JSON.
async fn get(api: &Api<DynamicObject>, name: &str) -> Value {
    serde_json::to_value(api.get(name).await.unwrap()).unwrap()
}

/// `fieldsV1` of one manager's entry (`operation` Apply or Update).
fn fields(obj: &Value, manager: &str, operation: &str) -> Value {
    obj["metadata"]["managedFields"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["manager"] == manager && e["operation"] == operation)
        .unwrap_or_else(|| panic!("no {manager}/{operation} entry in {obj}"))["fieldsV1"]
        .clone()
}

/// ConfigMap `c` with these labels and data (none when null).
fn cm(labels: Value, data: Value) -> Value {
    let mut v = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "c", "labels": labels}});
    if !data.is_null() {
        v["data"] = data;
    }
    v
}

fn conflict_fields(e: &kube::Error) -> Vec<(String, String)> {
    match e {
        kube::Error::Api(s) if s.code == 409 => s
            .details
            .as_ref()
            .unwrap()
            .causes
            .iter()
            .map(|c| (c.message.clone(), c.field.clone()))
            .collect(),
        other => panic!("expected a conflict, got {other:?}"),
    }
}

/// An update records a map or associative list it adds as a member of its
/// own (`.` beside its entries), but not the fields every encoded object
/// has (a Service's `spec`, a pod template's `containers`).
#[tokio::test]
async fn an_update_owns_the_maps_and_lists_it_adds() {
    let (emu, client) = start().await;
    let cms = configmaps(&client);
    cms.create(
        &post("c"),
        &object(cm(json!({"a": "1"}), json!({"x": "1"}))),
    )
    .await
    .unwrap();
    let got = get(&cms, "c").await;
    assert_eq!(
        fields(&got, "c", "Update"),
        json!({"f:data": {".": {}, "f:x": {}}, "f:metadata": {"f:labels": {".": {}, "f:a": {}}}})
    );
    // A merge patch adding annotations adds that map too.
    cms.patch(
        "c",
        &params("d"),
        &Patch::Merge(json!({"metadata": {"annotations": {"n": "1"}}})),
    )
    .await
    .unwrap();
    let got = get(&cms, "c").await;
    assert_eq!(
        fields(&got, "d", "Update"),
        json!({"f:metadata": {"f:annotations": {".": {}, "f:n": {}}}})
    );

    let svcs = services(&client);
    svcs.create(
        &post("c"),
        &object(json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s"},
            "spec": {"clusterIP": "None", "ports": [{"name": "p", "port": 80, "protocol": "TCP", "targetPort": 80}]}})),
    )
    .await
    .unwrap();
    let f = fields(&get(&svcs, "s").await, "c", "Update");
    assert!(f["f:spec"].get(".").is_none(), "spec is always there: {f}");
    assert_eq!(
        f["f:spec"]["f:ports"],
        json!({".": {}, r#"k:{"port":80,"protocol":"TCP"}"#: {
            ".": {}, "f:name": {}, "f:port": {}, "f:protocol": {}, "f:targetPort": {}}})
    );

    let sts = statefulsets(&client);
    sts.create(
        &post("c"),
        &object(
            json!({"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "w"},
            "spec": {"selector": {"matchLabels": {"app": "w"}}, "serviceName": "w",
                "template": {"metadata": {"labels": {"app": "w"}},
                    "spec": {"containers": [{"name": "c", "image": "x:1"}]}}}}),
        ),
    )
    .await
    .unwrap();
    let f = fields(&get(&sts, "w").await, "c", "Update");
    let pod = &f["f:spec"]["f:template"]["f:spec"];
    assert!(pod["f:containers"].get(".").is_none(), "{f}");
    assert!(
        pod["f:containers"][r#"k:{"name":"c"}"#].get(".").is_some(),
        "{f}"
    );
    assert!(f["f:spec"]["f:template"].get(".").is_none(), "{f}");
    assert!(
        f["f:spec"]["f:template"]["f:metadata"]["f:labels"]
            .get(".")
            .is_some(),
        "{f}"
    );
    emu.shutdown().await;
}

/// A map or struct whose every field the applier stops applying goes
/// whole, not left as `{}` (a ValkeyCluster's `status.gateway`, labels);
/// a map emptied while someone else owns the map itself goes too, and that
/// manager keeps its `.`, so a later apply adding the map conflicts with it.
#[tokio::test]
async fn an_apply_that_drops_every_field_of_a_map_removes_the_map() {
    let (emu, client) = start().await;
    let vcs = vc_api(&client, "default");
    vcs.create(
        &post("kubectl"),
        &object(
            json!({"apiVersion": "shardgate.io/v1alpha1", "kind": "ValkeyCluster",
            "metadata": {"name": "v"}, "spec": {"shards": 1}}),
        ),
    )
    .await
    .unwrap();
    let status = |s: Value| {
        json!({"apiVersion": "shardgate.io/v1alpha1", "kind": "ValkeyCluster",
            "metadata": {"name": "v"}, "status": s})
    };
    let op = PatchParams::apply("shardgate").force();
    vcs.patch_status(
        "v",
        &op,
        &Patch::Apply(status(json!({"state": "Ready",
            "gateway": {"name": "g", "missingListeners": [7000]}}))),
    )
    .await
    .unwrap();
    let after = vcs
        .patch_status("v", &op, &Patch::Apply(status(json!({"state": "Ready"}))))
        .await
        .unwrap();
    let after = serde_json::to_value(after).unwrap();
    assert_eq!(after["status"], json!({"state": "Ready"}));
    assert_eq!(
        fields(&after, "shardgate", "Apply"),
        json!({"f:status": {"f:state": {}}})
    );

    // Labels: c created them (owning the map), a took the one label over;
    // a dropping it empties the map, which goes, c keeping its `.`.
    let cms = configmaps(&client);
    cms.create(&post("c"), &object(cm(json!({"tier": "y"}), Value::Null)))
        .await
        .unwrap();
    cms.patch(
        "c",
        &PatchParams::apply("a").force(),
        &Patch::Apply(cm(json!({"tier": "x"}), Value::Null)),
    )
    .await
    .unwrap();
    let emptied = cms
        .patch(
            "c",
            &PatchParams::apply("a"),
            &Patch::Apply(
                json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}}),
            ),
        )
        .await
        .unwrap();
    let emptied = serde_json::to_value(emptied).unwrap();
    assert!(emptied["metadata"].get("labels").is_none(), "{emptied}");
    assert_eq!(
        fields(&emptied, "c", "Update")["f:metadata"],
        json!({"f:labels": {}})
    );
    let e = cms
        .patch(
            "c",
            &PatchParams::apply("b"),
            &Patch::Apply(cm(json!({"app": "y"}), Value::Null)),
        )
        .await
        .unwrap_err();
    assert_eq!(
        conflict_fields(&e),
        [(
            "conflict with \"c\" using v1".to_string(),
            ".metadata.labels".to_string()
        )]
    );
    emu.shutdown().await;
}

/// What the applier stopped applying goes, what someone else still owns
/// in the same map stays, and a map left with nothing goes (no `data: {}`).
#[tokio::test]
async fn an_apply_keeps_what_others_own_and_leaves_no_empty_map() {
    let (emu, client) = start().await;
    let cms = configmaps(&client);
    let a = PatchParams::apply("a");
    cms.patch(
        "c",
        &a,
        &Patch::Apply(cm(json!({"a": "1"}), json!({"x": "1"}))),
    )
    .await
    .unwrap();
    cms.patch(
        "c",
        &params("b"),
        &Patch::Merge(json!({"metadata": {"labels": {"b": "2"}}})),
    )
    .await
    .unwrap();
    let left = cms
        .patch(
            "c",
            &a,
            &Patch::Apply(
                json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}}),
            ),
        )
        .await
        .unwrap();
    let left = serde_json::to_value(left).unwrap();
    assert_eq!(left["metadata"]["labels"], json!({"b": "2"}));
    assert!(left.get("data").is_none(), "no data: {{}} left: {left}");
    emu.shutdown().await;
}

/// A manager is its name and operation: an apply conflicts with the
/// Update entry of the same name (and says `using v1`, as the API server).
#[tokio::test]
async fn an_apply_conflicts_with_its_own_names_update() {
    let (emu, client) = start().await;
    let cms = configmaps(&client);
    cms.patch(
        "c",
        &PatchParams::apply("a"),
        &Patch::Apply(cm(json!({}), json!({"x": "1"}))),
    )
    .await
    .unwrap();
    cms.patch(
        "c",
        &params("a"),
        &Patch::Merge(json!({"data": {"x": "2"}})),
    )
    .await
    .unwrap();
    let e = cms
        .patch(
            "c",
            &PatchParams::apply("a"),
            &Patch::Apply(cm(json!({}), json!({"x": "1"}))),
        )
        .await
        .unwrap_err();
    assert_eq!(
        conflict_fields(&e),
        [(
            "conflict with \"a\" using v1".to_string(),
            ".data.x".to_string()
        )]
    );
    match &e {
        kube::Error::Api(s) => {
            assert_eq!(
                s.message,
                "Apply failed with 1 conflict: conflict with \"a\" using v1: .data.x"
            );
            assert_eq!(
                s.details.as_ref().unwrap().causes[0].reason,
                "FieldManagerConflict"
            );
        }
        _ => unreachable!(),
    }
    emu.shutdown().await;
}

/// Only leaves conflict: applying into a map another manager owns (its
/// `.`, or `{}`) changes the map's entries, not the map.
#[tokio::test]
async fn an_apply_into_a_map_another_manager_owns_is_no_conflict() {
    let (emu, client) = start().await;
    let sts = statefulsets(&client);
    let body = |security: Value, image: &str| {
        json!({"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "w"},
            "spec": {"selector": {"matchLabels": {"app": "w"}}, "serviceName": "w",
                "template": {"metadata": {"labels": {"app": "w"}},
                    "spec": {"securityContext": security,
                        "containers": [{"name": "c", "image": image, "resources": {}}]}}}})
    };
    // c's create owns the securityContext it added (`.`) and its fsGroup.
    sts.create(&post("c"), &object(body(json!({"fsGroup": 999}), "x:1")))
        .await
        .unwrap();
    let applied = sts
        .patch(
            "w",
            &PatchParams::apply("a"),
            &Patch::Apply(body(json!({}), "x:1")),
        )
        .await
        .unwrap();
    let applied = serde_json::to_value(applied).unwrap();
    assert_eq!(
        applied["spec"]["template"]["spec"]["securityContext"],
        json!({"fsGroup": 999})
    );
    let a = fields(&applied, "a", "Apply");
    assert_eq!(
        a["f:spec"]["f:template"]["f:spec"]["f:securityContext"],
        json!({})
    );
    let c = fields(&applied, "c", "Update");
    assert_eq!(
        c["f:spec"]["f:template"]["f:spec"]["f:securityContext"],
        json!({".": {}, "f:fsGroup": {}})
    );
    emu.shutdown().await;
}

/// Kubernetes' atomic types: a pod spec's `nodeSelector`
/// (`+mapType=atomic`), an env var's `fieldRef` and an owner reference
/// (`+structType=atomic`) are owned and conflict whole.
#[tokio::test]
async fn atomic_maps_and_structs_are_owned_whole() {
    let (emu, client) = start().await;
    let sts = statefulsets(&client);
    let body = |selector: Value, field_path: &str| {
        json!({"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "w"},
            "spec": {"selector": {"matchLabels": {"app": "w"}}, "serviceName": "w",
                "template": {"metadata": {"labels": {"app": "w"}},
                    "spec": {"nodeSelector": selector, "containers": [{"name": "c", "image": "x:1",
                        "env": [{"name": "IP", "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": field_path}}}]}]}}}})
    };
    let applied = sts
        .patch(
            "w",
            &PatchParams::apply("a"),
            &Patch::Apply(body(json!({"zone": "a"}), "status.podIP")),
        )
        .await
        .unwrap();
    let f = fields(&serde_json::to_value(applied).unwrap(), "a", "Apply");
    let pod = &f["f:spec"]["f:template"]["f:spec"];
    assert_eq!(pod["f:nodeSelector"], json!({}));
    assert_eq!(
        pod["f:containers"][r#"k:{"name":"c"}"#]["f:env"][r#"k:{"name":"IP"}"#]["f:valueFrom"],
        json!({"f:fieldRef": {}})
    );
    let e = sts
        .patch(
            "w",
            &PatchParams::apply("b"),
            &Patch::Apply(body(json!({"disk": "ssd"}), "status.hostIP")),
        )
        .await
        .unwrap_err();
    let mut got: Vec<String> = conflict_fields(&e).into_iter().map(|(_, f)| f).collect();
    got.sort();
    assert_eq!(
        got,
        [
            ".spec.template.spec.containers[name=\"c\"].env[name=\"IP\"].valueFrom.fieldRef",
            ".spec.template.spec.nodeSelector",
        ]
    );

    let cms = configmaps(&client);
    let owned = |controller: bool| {
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c",
            "ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "o",
                "uid": "u1", "controller": controller}]}})
    };
    let applied = cms
        .patch("c", &PatchParams::apply("a"), &Patch::Apply(owned(true)))
        .await
        .unwrap();
    assert_eq!(
        fields(&serde_json::to_value(applied).unwrap(), "a", "Apply"),
        json!({"f:metadata": {"f:ownerReferences": {r#"k:{"uid":"u1"}"#: {}}}})
    );
    let e = cms
        .patch("c", &PatchParams::apply("b"), &Patch::Apply(owned(false)))
        .await
        .unwrap_err();
    assert_eq!(
        conflict_fields(&e),
        [(
            "conflict with \"a\"".to_string(),
            ".metadata.ownerReferences[uid=\"u1\"]".to_string()
        )]
    );
    emu.shutdown().await;
}

/// A headless Service without ports has no `ports` (the field is
/// omitempty), not `ports: []`.
#[tokio::test]
async fn a_headless_service_without_ports_has_none() {
    let (emu, client) = start().await;
    let svcs = services(&client);
    let created = svcs
        .patch(
            "h",
            &PatchParams::apply("a"),
            &Patch::Apply(json!({"apiVersion": "v1", "kind": "Service",
                "metadata": {"name": "h"}, "spec": {"clusterIP": "None"}})),
        )
        .await
        .unwrap();
    let created = serde_json::to_value(created).unwrap();
    assert!(created["spec"].get("ports").is_none(), "{created}");
    emu.shutdown().await;
}

/// The API server stores no empty Go map (labels, annotations, a
/// ConfigMap's data, ...: `omitempty`), so a patch removing the last label
/// leaves no `labels: {}`, and no manager owns the map any more; a custom
/// resource's own content is stored as sent, `{}` included.
#[tokio::test]
async fn an_emptied_go_map_is_not_stored() {
    let (emu, client) = start().await;
    let cms = configmaps(&client);
    cms.create(
        &post("c"),
        &object(cm(json!({"a": "1"}), json!({"x": "1"}))),
    )
    .await
    .unwrap();
    let patched = cms
        .patch(
            "c",
            &params("d"),
            &Patch::Merge(json!({"metadata": {"labels": {"a": null}}, "data": {"x": null}})),
        )
        .await
        .unwrap();
    let patched = serde_json::to_value(patched).unwrap();
    assert!(patched["metadata"].get("labels").is_none(), "{patched}");
    assert!(patched.get("data").is_none(), "{patched}");
    assert!(
        patched["metadata"]["managedFields"]
            .as_array()
            .is_none_or(|m| m.iter().all(|e| e["manager"] != "c")),
        "c owned only what is gone: {patched}"
    );

    let vcs = vc_api(&client, "default");
    let created = vcs
        .create(
            &post("c"),
            &object(
                json!({"apiVersion": "shardgate.io/v1alpha1", "kind": "ValkeyCluster",
                "metadata": {"name": "v", "labels": {}}, "spec": {"config": {}}}),
            ),
        )
        .await
        .unwrap();
    let created = serde_json::to_value(created).unwrap();
    assert!(created["metadata"].get("labels").is_none(), "{created}");
    assert_eq!(created["spec"], json!({"config": {}}));
    emu.shutdown().await;
}
