//! CRUD, discovery, errors, selectors, status subresource, GC, faults.

mod common;

use std::time::{Duration, Instant};

use common::*;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod, Secret};
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::discovery::Discovery;
use kube::{Api, ResourceExt};
use kube_emulator::{Emulator, Fault, Verb};
use serde_json::json;

fn cm(name: &str, labels: serde_json::Value) -> ConfigMap {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "labels": labels},
        "data": {"k": "v"},
    }))
    .unwrap()
}

#[tokio::test]
async fn discovery_legacy_and_aggregated() {
    let (emu, client) = start().await;
    for aggregated in [false, true] {
        let d = Discovery::new(client.clone());
        let d = if aggregated {
            d.run_aggregated().await
        } else {
            d.run().await
        }
        .unwrap();
        let g = d.get("shardgate.io").expect("shardgate.io group");
        let (ar, caps) = g.recommended_kind("ValkeyCluster").expect("kind");
        assert_eq!(ar.plural, "valkeyclusters");
        assert_eq!(caps.scope, kube::discovery::Scope::Namespaced);
        assert!(
            caps.subresources
                .iter()
                .any(|(s, _)| s.plural == "valkeyclusters/status" || s.plural == "status"),
            "aggregated={aggregated}: {:?}",
            caps.subresources
        );
        assert!(
            d.get("apps")
                .unwrap()
                .recommended_kind("StatefulSet")
                .is_some()
        );
        assert!(
            d.get("coordination.k8s.io")
                .unwrap()
                .recommended_kind("Lease")
                .is_some()
        );
        assert!(d.get("").unwrap().recommended_kind("Service").is_some());
    }
    let v = client.apiserver_version().await.unwrap();
    assert_eq!(v.major, "1");
    emu.shutdown().await;
}

#[tokio::test]
async fn crud_and_errors() {
    let (emu, client) = start().await;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let created = api
        .create(&PostParams::default(), &cm("a", json!({"app": "x"})))
        .await
        .unwrap();
    assert!(created.uid().is_some());
    assert!(created.creation_timestamp().is_some());
    let dup = api
        .create(&PostParams::default(), &cm("a", json!({})))
        .await
        .unwrap_err();
    assert_eq!(
        (api_code(&dup), api_reason(&dup).as_str()),
        (409, "AlreadyExists")
    );
    api.create(&PostParams::default(), &cm("b", json!({"app": "y"})))
        .await
        .unwrap();

    let got = api.get("a").await.unwrap();
    assert_eq!(got.data.clone().unwrap()["k"], "v");
    let missing = api.get("zzz").await.unwrap_err();
    assert_eq!(
        (api_code(&missing), api_reason(&missing).as_str()),
        (404, "NotFound")
    );

    // Selectors.
    let names = |l: kube::core::ObjectList<ConfigMap>| {
        l.items.iter().map(|c| c.name_any()).collect::<Vec<_>>()
    };
    assert_eq!(
        names(
            api.list(&ListParams::default().labels("app=x"))
                .await
                .unwrap()
        ),
        ["a"]
    );
    assert_eq!(
        names(
            api.list(&ListParams::default().labels("app in (x,y)"))
                .await
                .unwrap()
        ),
        ["a", "b"]
    );
    assert_eq!(
        names(
            api.list(&ListParams::default().labels("app!=x"))
                .await
                .unwrap()
        ),
        ["b"]
    );
    assert_eq!(
        names(
            api.list(&ListParams::default().fields("metadata.name=b"))
                .await
                .unwrap()
        ),
        ["b"]
    );
    let list = api.list(&ListParams::default()).await.unwrap();
    assert_eq!(
        list.metadata
            .resource_version
            .unwrap()
            .parse::<u64>()
            .unwrap(),
        emu.resource_version()
    );
    // Metadata-only APIs deserialize the full objects.
    assert_eq!(api.get_metadata("a").await.unwrap().name_any(), "a");
    assert_eq!(
        api.list_metadata(&ListParams::default())
            .await
            .unwrap()
            .items
            .len(),
        2
    );
    let all: Api<ConfigMap> = Api::all(client.clone());
    assert_eq!(
        all.list(&ListParams::default()).await.unwrap().items.len(),
        2
    );

    // Optimistic concurrency on PUT.
    let mut stale = got.clone();
    api.patch(
        "a",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"k": "v2"}})),
    )
    .await
    .unwrap();
    stale.data = Some([("k".to_string(), "v3".to_string())].into());
    let e = api
        .replace("a", &PostParams::default(), &stale)
        .await
        .unwrap_err();
    assert_eq!((api_code(&e), api_reason(&e).as_str()), (409, "Conflict"));
    let mut fresh = api.get("a").await.unwrap();
    fresh.data = Some([("k".to_string(), "v3".to_string())].into());
    let replaced = api
        .replace("a", &PostParams::default(), &fresh)
        .await
        .unwrap();
    assert_eq!(replaced.data.unwrap()["k"], "v3");

    // JSON patch (kube's `jsonpatch` feature is off in this workspace: raw HTTP).
    let (code, _) = raw_body(
        &emu,
        "PATCH",
        "/api/v1/namespaces/default/configmaps/a",
        "application/json-patch+json",
        r#"[{"op": "add", "path": "/data/j", "value": "1"}]"#,
    )
    .await;
    assert_eq!(code, 200);
    assert_eq!(api.get("a").await.unwrap().data.unwrap()["j"], "1");
    let (code, body) = raw_body(
        &emu,
        "PATCH",
        "/api/v1/namespaces/default/configmaps/a",
        "text/plain",
        "x",
    )
    .await;
    assert_eq!(code, 415, "{body}");
    let e = api
        .patch(
            "a",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"resourceVersion": "2"}, "data": {"k": "x"}})),
        )
        .await
        .unwrap_err();
    assert_eq!(api_code(&e), 409);

    // Wrong namespace → 404 from the namespace check; invalid name → 422.
    let other: Api<ConfigMap> = Api::namespaced(client.clone(), "nope");
    assert_eq!(
        api_code(
            &other
                .create(&PostParams::default(), &cm("a", json!({})))
                .await
                .unwrap_err()
        ),
        404
    );
    let e = api
        .create(&PostParams::default(), &cm("Bad_Name", json!({})))
        .await
        .unwrap_err();
    assert_eq!((api_code(&e), api_reason(&e).as_str()), (422, "Invalid"));

    api.delete("a", &DeleteParams::default()).await.unwrap();
    assert_eq!(api_code(&api.get("a").await.unwrap_err()), 404);
    assert_eq!(
        api_code(&api.delete("a", &DeleteParams::default()).await.unwrap_err()),
        404
    );
    emu.shutdown().await;
}

#[tokio::test]
async fn lists_are_paged_with_limit_and_continue() {
    let (_emu, client) = start().await;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    for name in ["e", "a", "d", "b", "c"] {
        let app = if name == "c" { "other" } else { "x" };
        api.create(&PostParams::default(), &cm(name, json!({"app": app})))
            .await
            .unwrap();
    }
    // Pages of 2 in name order, the selector applied before the limit.
    let mut pages = Vec::new();
    let mut params = ListParams::default().labels("app=x").limit(2);
    loop {
        let page = api.list(&params).await.unwrap();
        pages.push(page.items.iter().map(|c| c.name_any()).collect::<Vec<_>>());
        match page.metadata.continue_ {
            Some(token) if !token.is_empty() => params = params.continue_token(&token),
            _ => break,
        }
    }
    assert_eq!(pages, [vec!["a", "b"], vec!["d", "e"]]);
    // No limit: everything, no token.
    let all = api.list(&ListParams::default()).await.unwrap();
    assert_eq!(all.items.len(), 5);
    assert_eq!(all.metadata.continue_, None);
    // A token that is not one of ours.
    let bad = api
        .list(&ListParams::default().continue_token("zz"))
        .await
        .unwrap_err();
    assert_eq!(api_code(&bad), 400);
}

#[tokio::test]
async fn a_list_across_namespaces_pages_on_after_its_token_object_is_deleted() {
    let (_emu, client) = start().await;
    let namespaces: Api<Namespace> = Api::all(client.clone());
    for ns in ["ns-a", "ns-b"] {
        let ns = serde_json::from_value(json!({"metadata": {"name": ns}})).unwrap();
        namespaces
            .create(&PostParams::default(), &ns)
            .await
            .unwrap();
    }
    for (ns, name) in [("ns-b", "a"), ("ns-a", "z"), ("ns-b", "c"), ("ns-a", "y")] {
        let api: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
        api.create(&PostParams::default(), &cm(name, json!({"app": "x"})))
            .await
            .unwrap();
    }
    let all: Api<ConfigMap> = Api::all(client.clone());
    let key = |c: &ConfigMap| format!("{}/{}", c.namespace().unwrap(), c.name_any());
    let first = all.list(&ListParams::default().limit(2)).await.unwrap();
    let token = first.metadata.continue_.clone().expect("more to come");
    assert_eq!(
        first.items.iter().map(key).collect::<Vec<_>>(),
        ["ns-a/y", "ns-a/z"]
    );
    // The page's last object goes away: the next page still starts after it.
    Api::<ConfigMap>::namespaced(client.clone(), "ns-a")
        .delete("z", &DeleteParams::default())
        .await
        .unwrap();
    let rest = all
        .list(&ListParams::default().limit(2).continue_token(&token))
        .await
        .unwrap();
    assert_eq!(
        rest.items.iter().map(key).collect::<Vec<_>>(),
        ["ns-b/a", "ns-b/c"]
    );
    assert_eq!(rest.metadata.continue_, None);
    // A namespaced list pages within its namespace only.
    let in_b: Api<ConfigMap> = Api::namespaced(client.clone(), "ns-b");
    let page = in_b.list(&ListParams::default().limit(1)).await.unwrap();
    let next = in_b
        .list(
            &ListParams::default()
                .limit(1)
                .continue_token(page.metadata.continue_.as_deref().expect("one more")),
        )
        .await
        .unwrap();
    assert_eq!(next.items.iter().map(key).collect::<Vec<_>>(), ["ns-b/c"]);
    assert_eq!(next.metadata.continue_, None);
    // A token from an earlier namespace starts this namespace's list at its
    // beginning; one from a later namespace leaves nothing.
    let from_a = in_b
        .list(&ListParams::default().continue_token(&token))
        .await
        .unwrap();
    assert_eq!(
        from_a.items.iter().map(key).collect::<Vec<_>>(),
        ["ns-b/a", "ns-b/c"]
    );
    let from_b = Api::<ConfigMap>::namespaced(client.clone(), "ns-a")
        .list(
            &ListParams::default()
                .continue_token(page.metadata.continue_.as_deref().expect("one more")),
        )
        .await
        .unwrap();
    assert!(from_b.items.is_empty());
}

#[tokio::test]
async fn status_subresource_isolation_and_generation() {
    let (emu, client) = start().await;
    let api = vc_api(&client, "default");
    let pp = PatchParams::apply("op").force();
    let obj = json!({"apiVersion": "shardgate.io/v1alpha1", "kind": "ValkeyCluster",
        "metadata": {"name": "vc"}, "spec": {"shards": 3}, "status": {"phase": "ignored"}});
    let created = api.patch("vc", &pp, &Patch::Apply(&obj)).await.unwrap();
    assert_eq!(created.metadata.generation, Some(1));
    assert!(
        created.data.get("status").is_none(),
        "status on main resource must be ignored"
    );

    // Status write changes only status; no generation bump.
    let st = api
        .patch_status("vc", &pp, &Patch::Apply(json!({"apiVersion": "shardgate.io/v1alpha1", "kind": "ValkeyCluster",
            "status": {"phase": "Ready", "externalEndpoints": [{"shardIndex": 0, "host": "a"}]}, "spec": {"shards": 99}})))
        .await
        .unwrap();
    assert_eq!(st.data["status"]["phase"], "Ready");
    assert_eq!(st.data["spec"]["shards"], 3);
    assert_eq!(st.metadata.generation, Some(1));
    let mf = st.managed_fields();
    assert!(
        mf.iter()
            .any(|m| m.manager.as_deref() == Some("op")
                && m.subresource.as_deref() == Some("status"))
    );

    // Spec change bumps generation, keeps status.
    let upd = api
        .patch(
            "vc",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"shards": 4}, "status": {"phase": "X"}})),
        )
        .await
        .unwrap();
    assert_eq!(upd.metadata.generation, Some(2));
    assert_eq!(upd.data["status"]["phase"], "Ready");
    // Label change does not bump generation.
    let lab = api
        .patch(
            "vc",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"l": "1"}}})),
        )
        .await
        .unwrap();
    assert_eq!(lab.metadata.generation, Some(2));
    // Status list-map keyed by shardIndex: another manager's entry survives.
    api.patch_status(
        "vc",
        &PatchParams::apply("other").force(),
        &Patch::Apply(
            json!({"apiVersion": "shardgate.io/v1alpha1", "kind": "ValkeyCluster",
        "status": {"externalEndpoints": [{"shardIndex": 1, "host": "b"}]}}),
        ),
    )
    .await
    .unwrap();
    let got = api.get_status("vc").await.unwrap();
    let eps = got.data["status"]["externalEndpoints"].as_array().unwrap();
    assert_eq!(eps.len(), 2, "{eps:?}");
    emu.shutdown().await;
}

#[tokio::test]
async fn garbage_collection_of_dependents() {
    let (emu, client) = start().await;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let owner = cms
        .create(&PostParams::default(), &cm("owner", json!({})))
        .await
        .unwrap();
    let other = cms
        .create(&PostParams::default(), &cm("other-owner", json!({})))
        .await
        .unwrap();
    let oref = |o: &ConfigMap| json!({"apiVersion": "v1", "kind": "ConfigMap", "name": o.name_any(), "uid": o.uid().unwrap()});
    let mut child = cm("child", json!({}));
    child.metadata.owner_references = Some(vec![serde_json::from_value(oref(&owner)).unwrap()]);
    let child = cms.create(&PostParams::default(), &child).await.unwrap();
    let mut grandchild = cm("grandchild", json!({}));
    grandchild.metadata.owner_references = Some(vec![serde_json::from_value(json!({"apiVersion": "v1", "kind": "ConfigMap", "name": "child", "uid": child.uid().unwrap()})).unwrap()]);
    cms.create(&PostParams::default(), &grandchild)
        .await
        .unwrap();
    let mut shared = cm("shared", json!({}));
    shared.metadata.owner_references = Some(vec![
        serde_json::from_value(oref(&owner)).unwrap(),
        serde_json::from_value(oref(&other)).unwrap(),
    ]);
    cms.create(&PostParams::default(), &shared).await.unwrap();
    // Owned once, then let go by an update: no longer a dependent.
    let mut released = cm("released", json!({}));
    released.metadata.owner_references = Some(vec![serde_json::from_value(oref(&owner)).unwrap()]);
    cms.create(&PostParams::default(), &released).await.unwrap();
    cms.patch(
        "released",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"ownerReferences": null}})),
    )
    .await
    .unwrap();

    cms.delete("owner", &DeleteParams::default()).await.unwrap();
    assert!(
        emu.get("configmaps", "default", "released").is_some(),
        "let go before the delete"
    );
    assert!(emu.get("configmaps", "default", "child").is_none());
    assert!(emu.get("configmaps", "default", "grandchild").is_none());
    let shared = emu
        .get("ConfigMap", "default", "shared")
        .expect("kept: other owner alive");
    assert_eq!(
        shared["metadata"]["ownerReferences"]
            .as_array()
            .unwrap()
            .len(),
        1
    );

    // Orphan propagation keeps dependents.
    cms.delete("other-owner", &DeleteParams::orphan())
        .await
        .unwrap();
    let shared = emu.get("ConfigMap", "default", "shared").expect("orphaned");
    assert!(
        shared["metadata"]
            .get("ownerReferences")
            .is_none_or(|r| r.as_array().unwrap().is_empty())
    );
    emu.shutdown().await;
}

#[tokio::test]
async fn finalizers_delay_deletion() {
    let (emu, client) = start().await;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let mut c = cm("f", json!({}));
    c.metadata.finalizers = Some(vec!["example.com/x".into()]);
    cms.create(&PostParams::default(), &c).await.unwrap();
    let res = cms.delete("f", &DeleteParams::default()).await.unwrap();
    assert!(res.is_left(), "object returned while finalizers pending");
    let pending = cms.get("f").await.unwrap();
    assert!(pending.metadata.deletion_timestamp.is_some());
    cms.patch(
        "f",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .unwrap();
    assert_eq!(api_code(&cms.get("f").await.unwrap_err()), 404);
    emu.shutdown().await;
}

#[tokio::test]
async fn fault_injection() {
    let (emu, client) = start().await;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    cms.create(&PostParams::default(), &cm("a", json!({})))
        .await
        .unwrap();

    emu.inject(
        Fault::conflict()
            .verb(Verb::Patch)
            .resource("configmaps")
            .times(2),
    );
    let merge = Patch::Merge(json!({"data": {"k": "z"}}));
    for _ in 0..2 {
        let e = cms
            .patch("a", &PatchParams::default(), &merge)
            .await
            .unwrap_err();
        assert_eq!((api_code(&e), api_reason(&e).as_str()), (409, "Conflict"));
    }
    cms.patch("a", &PatchParams::default(), &merge)
        .await
        .unwrap();

    emu.inject(Fault::internal_error().verb(Verb::Get));
    let e = cms.get("a").await.unwrap_err();
    assert_eq!(
        (api_code(&e), api_reason(&e).as_str()),
        (500, "InternalError")
    );
    cms.get("a").await.unwrap();

    emu.inject(
        Fault::latency(Duration::from_millis(300))
            .verb(Verb::List)
            .resource("configmaps"),
    );
    let latency = |emu: &Emulator| emu.faults_fired().get("latency").copied().unwrap_or(0);
    let t0 = Instant::now();
    cms.list(&ListParams::default()).await.unwrap();
    // A lower bound only: the delay was served (upper bounds are a
    // benchmark's business); the count says which requests it was put on.
    assert!(t0.elapsed() >= Duration::from_millis(300));
    assert_eq!(latency(&emu), 1);
    cms.get("a").await.unwrap();
    assert_eq!(latency(&emu), 1, "latency only on matching requests");
    emu.clear_faults();
    cms.list(&ListParams::default()).await.unwrap();
    assert_eq!(latency(&emu), 1, "no latency once cleared");
    emu.shutdown().await;
}

#[tokio::test]
async fn write_counters_and_http_endpoint() {
    let (emu, client) = start().await;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    cms.create(&PostParams::default(), &cm("a", json!({})))
        .await
        .unwrap();
    let merge = Patch::Merge(json!({"data": {"k": "z"}}));
    cms.patch("a", &PatchParams::default(), &merge)
        .await
        .unwrap();
    cms.patch("a", &PatchParams::default(), &merge)
        .await
        .unwrap(); // no-op
    cms.delete("a", &DeleteParams::default()).await.unwrap();
    assert_eq!(emu.writes(Verb::Create, "configmaps"), 1);
    assert_eq!(emu.writes(Verb::Patch, "configmaps"), 1);
    assert_eq!(emu.writes(Verb::Delete, "configmaps"), 1);
    assert_eq!(emu.total_writes(), 3);
    assert_eq!(
        emu.noop_counts()[&("patch".to_string(), "configmaps".to_string())],
        1
    );

    let (code, body) = raw(&emu, "GET", "/emulator/writes").await;
    assert_eq!(code, 200);
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["total"], 3);
    let (code, _) = raw(&emu, "DELETE", "/emulator/writes").await;
    assert_eq!(code, 200);
    assert_eq!(emu.total_writes(), 0);
    cms.create(&PostParams::default(), &cm("b", json!({})))
        .await
        .unwrap();
    emu.reset_counts();
    assert!(emu.write_counts().is_empty());
    emu.shutdown().await;
}

#[tokio::test]
async fn statefulset_controller_manages_pods() {
    let emu = Emulator::builder()
        .statefulset_controller(true)
        .start()
        .await
        .unwrap();
    let client = emu.client().await.unwrap();
    let sts: Api<StatefulSet> = Api::namespaced(client.clone(), "default");
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let manifest = |replicas: i32, image: &str, policy: &str| {
        json!({
        "apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "db"},
        "spec": {"replicas": replicas, "serviceName": "db", "podManagementPolicy": policy,
            "updateStrategy": {"type": "OnDelete"},
            "selector": {"matchLabels": {"app": "db"}},
            "template": {"metadata": {"labels": {"app": "db"}},
                "spec": {"containers": [{"name": "c", "image": image, "ports": [{"containerPort": 6379}]}]}}}})
    };
    let pp = PatchParams::apply("op").force();
    let created = sts
        .patch(
            "db",
            &pp,
            &Patch::Apply(manifest(3, "valkey:8", "OrderedReady")),
        )
        .await
        .unwrap();
    let spec = &created.spec;
    assert_eq!(spec.revision_history_limit, Some(10));
    // Re-applying the same manifest is a no-op despite server-side defaults.
    let again = sts
        .patch(
            "db",
            &pp,
            &Patch::Apply(manifest(3, "valkey:8", "OrderedReady")),
        )
        .await
        .unwrap();
    assert_eq!(
        again.resource_version(),
        sts.get("db").await.unwrap().resource_version()
    );
    assert_eq!(
        emu.noop_counts()[&("apply".to_string(), "statefulsets".to_string())],
        1
    );
    // OrderedReady: only pod-0 until it is Ready.
    let names = |pods: Vec<serde_json::Value>| {
        let mut n: Vec<String> = pods
            .iter()
            .map(|p| p["metadata"]["name"].as_str().unwrap().to_string())
            .collect();
        n.sort();
        n
    };
    assert_eq!(names(emu.list("pods", Some("default"))), ["db-0"]);
    emu.set_pod_status("default", "db-0", "10.0.0.10", "192.168.0.1", true)
        .unwrap();
    emu.set_pod_status("default", "db-1", "10.0.0.11", "192.168.0.1", true)
        .unwrap();
    assert_eq!(
        names(emu.list("pods", Some("default"))),
        ["db-0", "db-1", "db-2"]
    );
    let p0 = pods.get("db-0").await.unwrap();
    assert_eq!(
        p0.status.as_ref().unwrap().pod_ip.as_deref(),
        Some("10.0.0.10")
    );
    let owner = &p0.owner_references()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.controller),
        ("StatefulSet", Some(true))
    );
    assert_eq!(
        p0.spec.as_ref().unwrap().containers[0]
            .ports
            .as_ref()
            .unwrap()[0]
            .protocol
            .as_deref(),
        Some("TCP")
    );
    assert_eq!(p0.spec.as_ref().unwrap().subdomain.as_deref(), Some("db"));
    let status = sts.get_status("db").await.unwrap().status.unwrap();
    assert_eq!((status.replicas, status.ready_replicas), (3, Some(2)));

    // OnDelete: template change does not replace pods; a deleted pod comes back
    // with the new template.
    let uid0 = p0.uid();
    sts.patch(
        "db",
        &pp,
        &Patch::Apply(manifest(3, "valkey:9", "OrderedReady")),
    )
    .await
    .unwrap();
    let p0 = pods.get("db-0").await.unwrap();
    assert_eq!(p0.uid(), uid0);
    assert_eq!(
        p0.spec.unwrap().containers[0].image.as_deref(),
        Some("valkey:8")
    );
    pods.delete("db-1", &DeleteParams::default()).await.unwrap();
    let p1 = pods.get("db-1").await.unwrap();
    assert_eq!(
        p1.spec.unwrap().containers[0].image.as_deref(),
        Some("valkey:9")
    );

    // Scale down, then delete the StatefulSet: pods go away.
    sts.patch(
        "db",
        &pp,
        &Patch::Apply(manifest(1, "valkey:9", "OrderedReady")),
    )
    .await
    .unwrap();
    assert_eq!(names(emu.list("pods", Some("default"))), ["db-0"]);
    sts.delete("db", &DeleteParams::default()).await.unwrap();
    assert!(emu.list("pods", Some("default")).is_empty());
    // Parallel creates all at once.
    sts.patch(
        "db",
        &pp,
        &Patch::Apply(manifest(2, "valkey:9", "Parallel")),
    )
    .await
    .unwrap();
    assert_eq!(names(emu.list("pods", Some("default"))), ["db-0", "db-1"]);
    emu.shutdown().await;
}

#[tokio::test]
async fn instant_pods_start_ready_with_distinct_ips() {
    let emu = Emulator::builder()
        .statefulset_controller(true)
        .instant_pods(true)
        .start()
        .await
        .unwrap();
    let client = emu.client().await.unwrap();
    let sts: Api<StatefulSet> = Api::namespaced(client.clone(), "default");
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let manifest = json!({
        "apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "db"},
        "spec": {"replicas": 3, "serviceName": "db",
            "selector": {"matchLabels": {"app": "db"}},
            "template": {"metadata": {"labels": {"app": "db"}},
                "spec": {"containers": [{"name": "c", "image": "valkey:9"}]}}}});
    sts.patch(
        "db",
        &PatchParams::apply("op").force(),
        &Patch::Apply(manifest),
    )
    .await
    .unwrap();
    // OrderedReady creates pod N only once 0..N-1 are Ready: all three
    // exist at once because each started Ready.
    let list = pods.list(&Default::default()).await.unwrap().items;
    assert_eq!(list.len(), 3);
    let mut ips = std::collections::BTreeSet::new();
    for p in &list {
        let status = p.status.as_ref().unwrap();
        assert_eq!(status.phase.as_deref(), Some("Running"));
        assert!(
            status
                .conditions
                .iter()
                .flatten()
                .any(|c| c.type_ == "Ready" && c.status == "True")
        );
        let ip: std::net::Ipv4Addr = status.pod_ip.as_deref().unwrap().parse().unwrap();
        assert_eq!(ip.octets()[..2], [10, 244]);
        ips.insert(ip);
    }
    assert_eq!(ips.len(), 3, "each pod has its own IP");
    let before = sts.get("db").await.unwrap();
    assert_eq!(before.status.as_ref().unwrap().ready_replicas, Some(3));
    // A Pod write that changes nothing the StatefulSet reports leaves its
    // status, and so its resourceVersion, alone (no write).
    pods.patch(
        "db-1",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"touched": "yes"}}})),
    )
    .await
    .unwrap();
    let after = sts.get("db").await.unwrap();
    assert_eq!(
        after.metadata.resource_version,
        before.metadata.resource_version
    );
    // A deleted Pod comes back at once (instant, Ready), so here too the
    // status the StatefulSet reports ends where it was: not rewritten.
    let old_uid = pods.get("db-2").await.unwrap().metadata.uid;
    pods.delete("db-2", &Default::default()).await.unwrap();
    assert_ne!(pods.get("db-2").await.unwrap().metadata.uid, old_uid);
    let after = sts.get("db").await.unwrap();
    assert_eq!(
        after.metadata.resource_version,
        before.metadata.resource_version
    );
    emu.shutdown().await;
}

#[tokio::test]
async fn secret_string_data_is_merged_into_data_and_not_stored() {
    let emu = Emulator::builder().start().await.unwrap();
    let secrets: Api<Secret> = Api::namespaced(emu.client().await.unwrap(), "default");
    let created = secrets
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "metadata": {"name": "s"},
                "data": {"kept": "a2VwdA==", "over": "b2xk"},
                "stringData": {"over": "new", "plain": "text"},
            }))
            .unwrap(),
        )
        .await
        .unwrap();
    let data = created.data.unwrap();
    let text = |k: &str| String::from_utf8(data[k].0.clone()).unwrap();
    assert_eq!(
        (text("kept"), text("over"), text("plain")),
        ("kept".into(), "new".into(), "text".into())
    );
    assert_eq!(created.type_.as_deref(), Some("Opaque"));
    assert!(created.string_data.is_none());
    // A merge patch of stringData alone adds a key and keeps the others.
    let patched = secrets
        .patch(
            "s",
            &PatchParams::default(),
            &Patch::Merge(json!({"stringData": {"more": "m"}})),
        )
        .await
        .unwrap();
    let data = patched.data.unwrap();
    assert_eq!(data.len(), 4);
    assert_eq!(data["more"].0, b"m");
    let stored = emu.get("secrets", "default", "s").unwrap();
    assert!(stored.get("stringData").is_none(), "{stored}");
    emu.shutdown().await;
}

/// As the API server's stores do: deleting a Pod or a custom resource
/// answers with the deleted object (clients such as the Python one decode a
/// `V1Pod`), deleting a ConfigMap with a success `Status`.
#[tokio::test]
async fn a_delete_answers_as_the_api_server_does() {
    let emu = Emulator::builder()
        .custom_resource(valkey_cr())
        .start()
        .await
        .unwrap();
    let client = emu.client().await.unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "p"},
        "spec": {"containers": [{"name": "c", "image": "i"}]},
    }))
    .unwrap();
    pods.create(&PostParams::default(), &pod).await.unwrap();
    let deleted = pods.delete("p", &DeleteParams::default()).await.unwrap();
    assert!(
        deleted.left().is_some_and(|p| p.name_any() == "p"),
        "a Pod's delete answers with the Pod"
    );
    let cms: Api<ConfigMap> = Api::namespaced(client, "default");
    let cm: ConfigMap = serde_json::from_value(json!({"metadata": {"name": "cm"}})).unwrap();
    cms.create(&PostParams::default(), &cm).await.unwrap();
    let deleted = cms.delete("cm", &DeleteParams::default()).await.unwrap();
    assert!(
        deleted.right().is_some(),
        "a ConfigMap's delete answers a Status"
    );
    emu.shutdown().await;
}
