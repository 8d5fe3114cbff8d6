//! PersistentVolumeClaims: an ordinary stored resource, and the claims the
//! StatefulSet controller makes from `volumeClaimTemplates`, kept or
//! collected per `persistentVolumeClaimRetentionPolicy`.

mod common;

use std::time::Duration;

use common::*;
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use kube::api::{
    DeleteParams, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams,
};
use kube::{Api, ResourceExt};
use kube_emulator::Emulator;
use serde_json::{Value, json};

fn statefulset(replicas: i32, policy: Option<Value>) -> Value {
    let mut s = json!({
        "apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "db"},
        "spec": {"replicas": replicas, "serviceName": "db", "podManagementPolicy": "Parallel",
            "selector": {"matchLabels": {"app": "db"}},
            "template": {"metadata": {"labels": {"app": "db"}},
                "spec": {"containers": [{"name": "c", "image": "valkey:8",
                    "volumeMounts": [{"name": "data", "mountPath": "/data"}]}]}},
            "volumeClaimTemplates": [{"metadata": {"name": "data", "labels": {"tier": "storage"}},
                "spec": {"accessModes": ["ReadWriteOnce"],
                    "resources": {"requests": {"storage": "1Gi"}}}}]}});
    if let Some(p) = policy {
        s["spec"]["persistentVolumeClaimRetentionPolicy"] = p;
    }
    s
}

struct Env {
    emu: Emulator,
    sts: Api<StatefulSet>,
    pods: Api<Pod>,
    pvcs: Api<PersistentVolumeClaim>,
}

async fn env() -> Env {
    let emu = Emulator::builder()
        .statefulset_controller(true)
        .start()
        .await
        .unwrap();
    let client = emu.client().await.unwrap();
    Env {
        sts: Api::namespaced(client.clone(), "default"),
        pods: Api::namespaced(client.clone(), "default"),
        pvcs: Api::namespaced(client, "default"),
        emu,
    }
}

impl Env {
    async fn apply(&self, manifest: Value) -> StatefulSet {
        self.sts
            .patch(
                "db",
                &PatchParams::apply("op").force(),
                &Patch::Apply(manifest),
            )
            .await
            .unwrap()
    }

    fn claim_names(&self) -> Vec<String> {
        let mut n: Vec<String> = self
            .emu
            .list("persistentvolumeclaims", Some("default"))
            .iter()
            .map(|c| c["metadata"]["name"].as_str().unwrap().to_string())
            .collect();
        n.sort();
        n
    }

    /// `(kind, uid)` of a claim's owners.
    async fn owners(&self, claim: &str) -> Vec<(String, String)> {
        self.pvcs
            .get(claim)
            .await
            .unwrap()
            .owner_references()
            .iter()
            .map(|r| {
                assert_eq!(r.controller, Some(true));
                (r.kind.clone(), r.uid.clone())
            })
            .collect()
    }
}

fn claim_of(pod: &Pod, volume: &str) -> Option<String> {
    pod.spec
        .as_ref()?
        .volumes
        .iter()
        .flatten()
        .find(|v| v.name == volume)?
        .persistent_volume_claim
        .as_ref()
        .map(|c| c.claim_name.clone())
}

#[tokio::test]
async fn statefulset_pods_get_bound_claims_that_outlive_them() {
    let e = env().await;
    e.apply(statefulset(1, None)).await;
    let claim = e.pvcs.get("data-db-0").await.unwrap();
    let labels: Vec<(&str, &str)> = claim
        .labels()
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    assert_eq!(labels, [("app", "db"), ("tier", "storage")]);
    assert!(claim.owner_references().is_empty(), "Retain: no owner");
    let spec = claim.spec.as_ref().unwrap();
    assert_eq!(
        spec.access_modes.as_deref(),
        Some(&["ReadWriteOnce".to_string()][..])
    );
    assert_eq!(spec.volume_mode.as_deref(), Some("Filesystem"));
    let status = claim.status.as_ref().unwrap();
    assert_eq!(status.phase.as_deref(), Some("Bound"));
    assert_eq!(status.capacity.as_ref().unwrap()["storage"].0, "1Gi");
    let pod = e.pods.get("db-0").await.unwrap();
    assert_eq!(claim_of(&pod, "data").as_deref(), Some("data-db-0"));

    // Deleting the pod keeps its claim; the new pod uses the same one.
    e.pods
        .delete("db-0", &DeleteParams::default())
        .await
        .unwrap();
    let again = e.pods.get("db-0").await.unwrap();
    assert_ne!(again.uid(), pod.uid());
    assert_eq!(claim_of(&again, "data").as_deref(), Some("data-db-0"));
    assert_eq!(e.pvcs.get("data-db-0").await.unwrap().uid(), claim.uid());

    // Retain: the claim outlives the StatefulSet and serves its successor.
    e.sts.delete("db", &DeleteParams::default()).await.unwrap();
    assert!(e.emu.list("pods", Some("default")).is_empty());
    assert_eq!(e.claim_names(), ["data-db-0"]);
    e.apply(statefulset(1, None)).await;
    assert_eq!(e.pvcs.get("data-db-0").await.unwrap().uid(), claim.uid());
    assert_eq!(e.claim_names(), ["data-db-0"]);
    e.emu.shutdown().await;
}

#[tokio::test]
async fn when_deleted_delete_claims_go_with_the_statefulset_only() {
    let e = env().await;
    let policy = json!({"whenDeleted": "Delete", "whenScaled": "Retain"});
    let set = e.apply(statefulset(2, Some(policy.clone()))).await;
    let set_owner = vec![("StatefulSet".to_string(), set.uid().unwrap())];
    assert_eq!(e.claim_names(), ["data-db-0", "data-db-1"]);
    assert_eq!(e.owners("data-db-0").await, set_owner);
    assert_eq!(e.owners("data-db-1").await, set_owner);

    // Neither a deleted pod nor a scale-down (whenScaled: Retain) takes a
    // claim with it.
    e.pods
        .delete("db-1", &DeleteParams::default())
        .await
        .unwrap();
    e.apply(statefulset(1, Some(policy))).await;
    assert_eq!(e.claim_names(), ["data-db-0", "data-db-1"]);
    assert_eq!(e.owners("data-db-1").await, set_owner);

    // The garbage collector takes them with the StatefulSet.
    e.sts.delete("db", &DeleteParams::default()).await.unwrap();
    assert!(e.claim_names().is_empty());
    e.emu.shutdown().await;
}

#[tokio::test]
async fn when_scaled_delete_claims_go_with_scaled_down_pods() {
    let e = env().await;
    let policy = |deleted: &str| json!({"whenDeleted": deleted, "whenScaled": "Delete"});
    e.apply(statefulset(3, Some(policy("Retain")))).await;
    assert_eq!(e.claim_names(), ["data-db-0", "data-db-1", "data-db-2"]);
    assert!(e.owners("data-db-2").await.is_empty(), "in range: no owner");

    e.apply(statefulset(1, Some(policy("Retain")))).await;
    assert_eq!(e.claim_names(), ["data-db-0"]);

    // A policy change reaches existing claims: now owned by the set...
    let set = e.apply(statefulset(1, Some(policy("Delete")))).await;
    assert_eq!(
        e.owners("data-db-0").await,
        [("StatefulSet".to_string(), set.uid().unwrap())]
    );
    // ... and kept by an orphaning delete, which only drops the reference.
    e.sts.delete("db", &DeleteParams::orphan()).await.unwrap();
    assert_eq!(e.claim_names(), ["data-db-0"]);
    assert!(e.owners("data-db-0").await.is_empty());
    e.emu.shutdown().await;
}

#[tokio::test]
async fn claims_are_an_ordinary_resource() {
    let emu = Emulator::builder().start().await.unwrap();
    let client = emu.client().await.unwrap();
    let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(client, "default");
    let claim = |name: &str, spec: Value| -> PersistentVolumeClaim {
        serde_json::from_value(json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": {"name": name, "labels": {"app": "db"}}, "spec": spec}))
        .unwrap()
    };
    let good =
        json!({"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}});
    let rv = pvcs
        .list(&ListParams::default())
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap();
    let mut events = pvcs
        .watch(&WatchParams::default(), &rv)
        .await
        .unwrap()
        .boxed();

    let created = pvcs
        .create(&PostParams::default(), &claim("c", good.clone()))
        .await
        .unwrap();
    assert_eq!(
        created.status.as_ref().unwrap().phase.as_deref(),
        Some("Pending"),
        "no provisioner binds an API-made claim"
    );
    assert_eq!(
        created.spec.as_ref().unwrap().volume_mode.as_deref(),
        Some("Filesystem")
    );
    pvcs.create(&PostParams::default(), &claim("other", good.clone()))
        .await
        .unwrap();
    pvcs.patch(
        "other",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"app": "cache"}}})),
    )
    .await
    .unwrap();
    let db: Vec<String> = pvcs
        .list(&ListParams::default().labels("app=db"))
        .await
        .unwrap()
        .iter()
        .map(|c| c.name_any())
        .collect();
    assert_eq!(db, ["c"]);

    // Requests may grow; the rest of the spec is immutable.
    pvcs.patch(
        "c",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"resources": {"requests": {"storage": "2Gi"}}}})),
    )
    .await
    .unwrap();
    let err = pvcs
        .patch(
            "c",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"accessModes": ["ReadWriteMany"]}})),
        )
        .await
        .unwrap_err();
    assert_eq!(api_code(&err), 422);
    let err = pvcs
        .create(
            &PostParams::default(),
            &claim(
                "bad",
                json!({"resources": {"requests": {"storage": "1Gi"}}}),
            ),
        )
        .await
        .unwrap_err();
    assert_eq!(api_code(&err), 422);
    // Status through its subresource only.
    pvcs.patch_status(
        "c",
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"phase": "Bound"}})),
    )
    .await
    .unwrap();
    assert_eq!(
        pvcs.get("c")
            .await
            .unwrap()
            .status
            .unwrap()
            .phase
            .as_deref(),
        Some("Bound")
    );
    pvcs.delete("c", &DeleteParams::default()).await.unwrap();

    // The watch saw it all, in order, for `c`.
    let mut seen = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while seen.last().map(String::as_str) != Some("DELETED c") {
        let ev = tokio::time::timeout_at(deadline, events.try_next())
            .await
            .expect("watch events before the deadline")
            .unwrap()
            .expect("stream ended");
        let (kind, obj) = match ev {
            WatchEvent::Added(o) => ("ADDED", o),
            WatchEvent::Modified(o) => ("MODIFIED", o),
            WatchEvent::Deleted(o) => ("DELETED", o),
            other => panic!("unexpected {other:?}"),
        };
        if obj.name_any() == "c" {
            seen.push(format!("{kind} c"));
        }
    }
    assert_eq!(seen, ["ADDED c", "MODIFIED c", "MODIFIED c", "DELETED c"]);

    let (_, body) = raw(&emu, "GET", "/api/v1").await;
    let core: Value = serde_json::from_str(&body).unwrap();
    let entry = core["resources"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == "persistentvolumeclaims")
        .expect("persistentvolumeclaims in discovery");
    assert_eq!(entry["shortNames"], json!(["pvc"]));
    emu.shutdown().await;
}
