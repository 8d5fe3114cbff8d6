//! PodDisruptionBudgets (policy/v1, status kept by the emulated disruption
//! controller) and the Pod `eviction` subresource.

mod common;

use std::time::Duration;

use common::*;
use futures::StreamExt;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetStatus};
use kube::api::{DeleteParams, EvictParams, Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, ResourceExt};
use kube_emulator::{Emulator, Verb};
use serde_json::{Value, json};

const REFUSED: &str = "Cannot evict pod as it would violate the pod's disruption budget.";

/// A budget over `app: db` with the given `minAvailable`/`maxUnavailable`.
fn budget(name: &str, rule: Value) -> Value {
    let mut spec = json!({"selector": {"matchLabels": {"app": "db"}}});
    spec.as_object_mut()
        .unwrap()
        .extend(rule.as_object().unwrap().clone());
    json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
        "metadata": {"name": name}, "spec": spec})
}

fn statefulset(replicas: i32) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "db"},
        "spec": {"replicas": replicas, "serviceName": "db", "podManagementPolicy": "Parallel",
            "selector": {"matchLabels": {"app": "db"}},
            "template": {"metadata": {"labels": {"app": "db"}},
                "spec": {"containers": [{"name": "c", "image": "valkey:8"}]}}}})
}

/// A Pod with `labels`, controlled by `owner` if given.
fn pod(name: &str, labels: Value, owner: Option<&StatefulSet>) -> Pod {
    let mut p = json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": labels},
        "spec": {"containers": [{"name": "c", "image": "valkey:8"}]}});
    if let Some(sts) = owner {
        p["metadata"]["ownerReferences"] = json!([{"apiVersion": "apps/v1", "kind": "StatefulSet",
            "name": sts.name_any(), "uid": sts.uid().unwrap(), "controller": true}]);
    }
    serde_json::from_value(p).unwrap()
}

fn ready(emu: &Emulator, name: &str, ready: bool) {
    emu.set_pod_status("default", name, "10.0.0.1", "192.168.0.1", ready)
        .unwrap();
}

/// `(currentHealthy, desiredHealthy, expectedPods, disruptionsAllowed)`.
fn counts(s: &PodDisruptionBudgetStatus) -> (i32, i32, i32, i32) {
    (
        s.current_healthy.expect("currentHealthy"),
        s.desired_healthy.expect("desiredHealthy"),
        s.expected_pods.expect("expectedPods"),
        s.disruptions_allowed.expect("disruptionsAllowed"),
    )
}

async fn status(api: &Api<PodDisruptionBudget>, name: &str) -> PodDisruptionBudgetStatus {
    api.get_status(name).await.unwrap().status.unwrap()
}

fn condition(s: &PodDisruptionBudgetStatus) -> (String, String) {
    let c = s
        .conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == "DisruptionAllowed")
        .expect("a DisruptionAllowed condition");
    (c.status.clone(), c.reason.clone())
}

fn api_message(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(s) => s.message.clone(),
        other => panic!("expected an API error, got {other:?}"),
    }
}

#[tokio::test]
async fn budget_status_follows_pods_spec_and_scale() {
    let emu = Emulator::builder()
        .statefulset_controller(true)
        .start()
        .await
        .unwrap();
    let client = emu.client().await.unwrap();
    let sts: Api<StatefulSet> = Api::namespaced(client.clone(), "default");
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(client.clone(), "default");
    let pp = PatchParams::apply("op").force();
    sts.patch("db", &pp, &Patch::Apply(statefulset(3)))
        .await
        .unwrap();
    let created = pdbs
        .patch(
            "db",
            &pp,
            &Patch::Apply(budget("db", json!({"maxUnavailable": 1}))),
        )
        .await
        .unwrap();
    assert_eq!(created.metadata.generation, Some(1));

    // Three pods, none Ready yet: expected from the StatefulSet's scale.
    let s = status(&pdbs, "db").await;
    assert_eq!(counts(&s), (0, 2, 3, 0));
    assert_eq!(s.observed_generation, Some(1));
    assert_eq!(condition(&s), ("False".into(), "InsufficientPods".into()));

    // A watch sees the budget open up once the pods are Ready.
    let mut events = Box::pin(
        watcher(pdbs.clone(), watcher::Config::default())
            .applied_objects()
            .boxed(),
    );
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let first = tokio::time::timeout_at(deadline, events.next())
        .await
        .expect("no initial watch event before the deadline")
        .expect("stream ended")
        .unwrap();
    assert_eq!(counts(&first.status.unwrap()).3, 0);
    for p in ["db-0", "db-1", "db-2"] {
        ready(&emu, p, true);
    }
    loop {
        let next = tokio::time::timeout_at(deadline, events.next())
            .await
            .expect("no watch event with disruptionsAllowed 1 before the deadline")
            .expect("stream ended")
            .unwrap();
        if next.status.as_ref().is_some_and(|s| counts(s).3 == 1) {
            break;
        }
    }
    let s = status(&pdbs, "db").await;
    assert_eq!(counts(&s), (3, 2, 3, 1));
    assert_eq!(condition(&s), ("True".into(), "SufficientPods".into()));

    // Percentages round up: 50% of 3 is 2 unavailable.
    let changed = pdbs
        .patch(
            "db",
            &pp,
            &Patch::Apply(budget("db", json!({"maxUnavailable": "50%"}))),
        )
        .await
        .unwrap();
    assert_eq!(changed.metadata.generation, Some(2));
    let s = status(&pdbs, "db").await;
    assert_eq!(counts(&s), (3, 1, 3, 2));
    assert_eq!(s.observed_generation, Some(2));

    // minAvailable as a count: expected is the matching pods.
    pdbs.patch(
        "db",
        &pp,
        &Patch::Apply(budget("db", json!({"minAvailable": 3}))),
    )
    .await
    .unwrap();
    assert_eq!(counts(&status(&pdbs, "db").await), (3, 3, 3, 0));
    // ... and as a percentage of the scale, rounded up: 34% of 3 is 2.
    pdbs.patch(
        "db",
        &pp,
        &Patch::Apply(budget("db", json!({"minAvailable": "34%"}))),
    )
    .await
    .unwrap();
    assert_eq!(counts(&status(&pdbs, "db").await), (3, 2, 3, 1));

    // A pod that stops being Ready stops counting.
    ready(&emu, "db-2", false);
    assert_eq!(counts(&status(&pdbs, "db").await), (2, 2, 3, 0));
    // Scaling up raises the expected count before the new pod is Ready.
    sts.patch("db", &pp, &Patch::Apply(statefulset(4)))
        .await
        .unwrap();
    assert_eq!(counts(&status(&pdbs, "db").await), (2, 2, 4, 0));
    ready(&emu, "db-2", true);
    ready(&emu, "db-3", true);
    assert_eq!(counts(&status(&pdbs, "db").await), (4, 2, 4, 2));

    // Validation as the API server's.
    for (rule, field) in [
        (json!({"minAvailable": 1, "maxUnavailable": 1}), "spec"),
        (json!({"maxUnavailable": "150%"}), "spec.maxUnavailable"),
        (json!({"minAvailable": "half"}), "spec.minAvailable"),
        (json!({"minAvailable": -1}), "spec.minAvailable"),
    ] {
        let bad: PodDisruptionBudget = serde_json::from_value(budget("bad", rule)).unwrap();
        let e = pdbs.create(&PostParams::default(), &bad).await.unwrap_err();
        assert_eq!(api_code(&e), 422, "{field}");
        assert!(api_message(&e).contains(&format!("{field}: ")), "{e}");
    }

    // Discovery lists the budgets and the eviction subresource.
    let (code, body) = raw(&emu, "GET", "/apis/policy/v1").await;
    assert_eq!(code, 200);
    let list: Value = serde_json::from_str(&body).unwrap();
    let names: Vec<&str> = list["resources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        ["poddisruptionbudgets", "poddisruptionbudgets/status"]
    );
    let (_, body) = raw(&emu, "GET", "/api/v1").await;
    let core: Value = serde_json::from_str(&body).unwrap();
    let eviction = core["resources"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == "pods/eviction")
        .expect("pods/eviction in discovery");
    assert_eq!(
        (&eviction["group"], &eviction["kind"], &eviction["verbs"]),
        (&json!("policy"), &json!("Eviction"), &json!(["create"]))
    );

    pdbs.delete("db", &DeleteParams::default()).await.unwrap();
    assert!(emu.get("PodDisruptionBudget", "default", "db").is_none());
    emu.shutdown().await;
}

#[tokio::test]
async fn evicting_one_of_three_ready_pods_succeeds_and_a_second_is_refused() {
    let emu = Emulator::builder().start().await.unwrap();
    let client = client_without_retry(&emu).await;
    let sts: Api<StatefulSet> = Api::namespaced(client.clone(), "default");
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(client.clone(), "default");
    // A StatefulSet of 3 (no controller running: its pods are made here, so
    // an evicted pod stays gone).
    let set = sts
        .patch(
            "db",
            &PatchParams::apply("op"),
            &Patch::Apply(statefulset(3)),
        )
        .await
        .unwrap();
    for name in ["db-0", "db-1", "db-2"] {
        pods.create(
            &PostParams::default(),
            &pod(name, json!({"app": "db"}), Some(&set)),
        )
        .await
        .unwrap();
        ready(&emu, name, true);
    }
    pdbs.patch(
        "db",
        &PatchParams::apply("op"),
        &Patch::Apply(budget("db", json!({"maxUnavailable": 1}))),
    )
    .await
    .unwrap();
    assert_eq!(counts(&status(&pdbs, "db").await), (3, 2, 3, 1));

    let ok = pods.evict("db-0", &EvictParams::default()).await.unwrap();
    assert!(ok.is_success(), "{ok:?}");
    assert_eq!(
        api_code(&pods.get("db-0").await.unwrap_err()),
        404,
        "the evicted pod is deleted"
    );
    let s = status(&pdbs, "db").await;
    assert_eq!(counts(&s), (2, 2, 3, 0));
    assert_eq!(s.disrupted_pods, None, "the mark goes with the pod");

    let uid1 = pods.get("db-1").await.unwrap().uid();
    let err = pods
        .evict("db-1", &EvictParams::default())
        .await
        .unwrap_err();
    let kube::Error::Api(st) = &err else {
        panic!("expected an API error, got {err:?}");
    };
    assert_eq!((st.code, st.reason.as_str()), (429, "TooManyRequests"));
    assert_eq!(st.message, REFUSED);
    let cause = &st.details.as_ref().unwrap().causes[0];
    assert_eq!(cause.reason, "DisruptionBudget");
    assert_eq!(
        cause.message,
        "The disruption budget db needs 2 healthy pods and has 2 currently"
    );
    let still = pods.get("db-1").await.unwrap();
    assert_eq!(still.uid(), uid1, "the refused pod is untouched");
    assert!(still.metadata.deletion_timestamp.is_none());
    assert_eq!(emu.writes(Verb::Create, "pods/eviction"), 1);
    emu.shutdown().await;
}

#[tokio::test]
async fn an_evicted_statefulset_pod_comes_back_and_restores_the_budget_once_ready() {
    let emu = Emulator::builder()
        .statefulset_controller(true)
        .start()
        .await
        .unwrap();
    let client = client_without_retry(&emu).await;
    let sts: Api<StatefulSet> = Api::namespaced(client.clone(), "default");
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(client.clone(), "default");
    let pp = PatchParams::apply("op");
    sts.patch("db", &pp, &Patch::Apply(statefulset(3)))
        .await
        .unwrap();
    for p in ["db-0", "db-1", "db-2"] {
        ready(&emu, p, true);
    }
    pdbs.patch(
        "db",
        &pp,
        &Patch::Apply(budget("db", json!({"maxUnavailable": 1}))),
    )
    .await
    .unwrap();

    let old = pods.get("db-0").await.unwrap().uid();
    pods.evict("db-0", &EvictParams::default()).await.unwrap();
    let replacement = pods.get("db-0").await.unwrap();
    assert_ne!(replacement.uid(), old, "deleted and recreated");
    assert_eq!(
        replacement.status.unwrap().phase.as_deref(),
        Some("Pending")
    );
    let e = pods
        .evict("db-1", &EvictParams::default())
        .await
        .unwrap_err();
    assert_eq!(api_code(&e), 429);
    // A Pending pod is evicted whatever the budget says.
    let pending = pods.get("db-0").await.unwrap().uid();
    pods.evict("db-0", &EvictParams::default()).await.unwrap();
    assert_ne!(pods.get("db-0").await.unwrap().uid(), pending);

    ready(&emu, "db-0", true);
    assert_eq!(counts(&status(&pdbs, "db").await), (3, 2, 3, 1));
    pods.evict("db-1", &EvictParams::default()).await.unwrap();
    assert_eq!(counts(&status(&pdbs, "db").await), (2, 2, 3, 0));
    emu.shutdown().await;
}

#[tokio::test]
async fn eviction_without_budget_unhealthy_pods_overlaps_and_errors() {
    let emu = Emulator::builder().start().await.unwrap();
    let client = client_without_retry(&emu).await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(client.clone(), "default");
    let pp = PatchParams::apply("op");
    let create = |name: &'static str, app: &'static str| {
        let pods = pods.clone();
        async move {
            pods.create(
                &PostParams::default(),
                &pod(name, json!({"app": app}), None),
            )
            .await
            .unwrap()
        }
    };

    // No budget selects the pod: it is deleted. A dry run deletes nothing.
    create("lone", "other").await;
    ready(&emu, "lone", true);
    let dry = EvictParams {
        post_options: PostParams {
            dry_run: true,
            ..Default::default()
        },
        ..Default::default()
    };
    pods.evict("lone", &dry).await.unwrap();
    assert!(pods.get("lone").await.is_ok());
    pods.evict("lone", &EvictParams::default()).await.unwrap();
    assert_eq!(api_code(&pods.get("lone").await.unwrap_err()), 404);
    // A missing pod is 404.
    let e = pods
        .evict("lone", &EvictParams::default())
        .await
        .unwrap_err();
    assert_eq!((api_code(&e), api_reason(&e).as_str()), (404, "NotFound"));

    // minAvailable 2 over three bare Ready pods (a count needs no controller).
    for name in ["a", "b", "c"] {
        create(name, "db").await;
        ready(&emu, name, true);
    }
    pdbs.patch(
        "db",
        &pp,
        &Patch::Apply(budget("db", json!({"minAvailable": 2}))),
    )
    .await
    .unwrap();
    assert_eq!(counts(&status(&pdbs, "db").await), (3, 2, 3, 1));

    // Two budgets over one pod: 500, nothing evicted.
    let everything = json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
        "metadata": {"name": "all"}, "spec": {"selector": {}, "maxUnavailable": "100%"}});
    pdbs.patch("all", &pp, &Patch::Apply(everything))
        .await
        .unwrap();
    let e = pods.evict("a", &EvictParams::default()).await.unwrap_err();
    assert_eq!(api_code(&e), 500);
    assert_eq!(
        api_message(&e),
        "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support."
    );
    assert!(pods.get("a").await.is_ok());
    pdbs.delete("all", &DeleteParams::default()).await.unwrap();

    // An unready pod costs no budget while the budget is met.
    ready(&emu, "c", false);
    assert_eq!(counts(&status(&pdbs, "db").await), (2, 2, 3, 0));
    pods.evict("c", &EvictParams::default()).await.unwrap();
    assert_eq!(counts(&status(&pdbs, "db").await), (2, 2, 2, 0));
    let e = pods.evict("a", &EvictParams::default()).await.unwrap_err();
    assert_eq!(api_code(&e), 429);

    // Below the budget, an unready pod is protected too (IfHealthyBudget),
    // unless the budget says AlwaysAllow.
    ready(&emu, "b", false);
    let e = pods.evict("b", &EvictParams::default()).await.unwrap_err();
    assert_eq!(api_code(&e), 429);
    pdbs.patch(
        "db",
        &pp,
        &Patch::Apply(budget(
            "db",
            json!({"minAvailable": 2, "unhealthyPodEvictionPolicy": "AlwaysAllow"}),
        )),
    )
    .await
    .unwrap();
    pods.evict("b", &EvictParams::default()).await.unwrap();
    assert_eq!(api_code(&pods.get("b").await.unwrap_err()), 404);

    // A Pending pod goes regardless of the budget.
    create("d", "db").await;
    pods.evict("d", &EvictParams::default()).await.unwrap();
    assert_eq!(api_code(&pods.get("d").await.unwrap_err()), 404);
    assert_eq!(emu.writes(Verb::Create, "pods/eviction"), 4);

    // The body must name the pod of the URL; only POST is served.
    let (code, _) = raw_body(
        &emu,
        "POST",
        "/api/v1/namespaces/default/pods/a/eviction",
        "application/json",
        r#"{"apiVersion":"policy/v1","kind":"Eviction","metadata":{"name":"b"}}"#,
    )
    .await;
    assert_eq!(code, 400);
    let (code, _) = raw(&emu, "GET", "/api/v1/namespaces/default/pods/a/eviction").await;
    assert_eq!(code, 405);
    assert!(pods.get("a").await.is_ok());
    emu.shutdown().await;
}
