//! The real kube-runtime `Controller` (with owned Services, server-side apply,
//! status patches and the events `Recorder`) settles against the emulator:
//! no-op applies stop the reconcile loop.

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;
use futures::StreamExt;
use k8s_openapi::api::core::v1::Service;
use kube::api::{DynamicObject, Patch, PatchParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::watcher;
use kube::{Api, Resource, ResourceExt};
use serde_json::json;

struct Ctx {
    client: kube::Client,
    recorder: Recorder,
    /// The `nudge` annotation of the last reconcile that finished.
    nudged: Mutex<Option<String>>,
}

async fn reconcile(vc: Arc<DynamicObject>, ctx: Arc<Ctx>) -> Result<Action, kube::Error> {
    let ns = vc.namespace().unwrap();
    let name = vc.name_any();
    let pp = PatchParams::apply("shardgate").force();
    let svc = json!({"apiVersion": "v1", "kind": "Service",
        "metadata": {"name": name, "ownerReferences": [{"apiVersion": "shardgate.io/v1alpha1", "kind": "ValkeyCluster",
            "name": name, "uid": vc.uid().unwrap(), "controller": true, "blockOwnerDeletion": true}]},
        "spec": {"type": "LoadBalancer", "selector": {"app": name}, "ports": [{"name": "client", "port": 6379}]}});
    Api::<Service>::namespaced(ctx.client.clone(), &ns)
        .patch(&name, &pp, &Patch::Apply(svc))
        .await?;
    let was_ready = vc.data["status"]["phase"] == "Ready";
    let status = json!({"apiVersion": "shardgate.io/v1alpha1", "kind": "ValkeyCluster",
        "status": {"phase": "Ready", "observedGeneration": vc.meta().generation}});
    vc_api(&ctx.client, &ns)
        .patch_status(&name, &pp, &Patch::Apply(status))
        .await?;
    if !was_ready {
        let ev = Event {
            type_: EventType::Normal,
            reason: "Reconciled".into(),
            note: Some("service applied".into()),
            action: "Reconcile".into(),
            secondary: None,
        };
        ctx.recorder
            .publish(&ev, &vc.object_ref(&vc_resource()))
            .await?;
    }
    *ctx.nudged.lock().unwrap() = vc.annotations().get("nudge").cloned();
    Ok(Action::await_change())
}

fn error_policy(_: Arc<DynamicObject>, _: &kube::Error, _: Arc<Ctx>) -> Action {
    Action::requeue(Duration::from_millis(100))
}

#[tokio::test]
async fn controller_settles_and_owned_objects_are_collected() {
    let (emu, client) = start().await;
    let reporter = Reporter {
        controller: "shardgate".into(),
        instance: None,
    };
    let ctx = Arc::new(Ctx {
        client: client.clone(),
        recorder: Recorder::new(client.clone(), reporter),
        nudged: Mutex::new(None),
    });
    let controller = Controller::new_with(
        vc_api(&client, "default"),
        watcher::Config::default(),
        vc_resource(),
    )
    .owns(
        Api::<Service>::namespaced(client.clone(), "default"),
        watcher::Config::default(),
    )
    .run(reconcile, error_policy, ctx.clone())
    .for_each(|_| async {});
    let handle = tokio::spawn(controller);

    vc_api(&client, "default")
        .patch(
            "vc",
            &PatchParams::apply("user"),
            &Patch::Apply(json!({"apiVersion": "shardgate.io/v1alpha1",
            "kind": "ValkeyCluster", "metadata": {"name": "vc"}, "spec": {"shards": 3}})),
        )
        .await
        .unwrap();

    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let ready = emu
            .get("valkeyclusters", "default", "vc")
            .is_some_and(|o| o["status"]["phase"] == "Ready");
        if ready
            && emu.get("services", "default", "vc").is_some()
            && !emu.list("events.events.k8s.io", Some("default")).is_empty()
        {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "controller did not converge"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Settled: further reconciles (triggered by its own status write) are no-ops.
    // Its own writes trigger a reconcile whose applies are no-ops.
    eventually("a no-op apply", || async {
        emu.noop_counts()
            .keys()
            .any(|(v, r)| v == "apply" && r == "services")
    })
    .await;
    // Nudged by a change that needs nothing, it reconciles and writes
    // nothing: the only write is the nudge itself.
    let settled = emu.total_writes();
    vc_api(&client, "default")
        .patch(
            "vc",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {"nudge": "1"}}})),
        )
        .await
        .unwrap();
    eventually("the nudged reconcile", || async {
        ctx.nudged.lock().unwrap().as_deref() == Some("1")
    })
    .await;
    assert_eq!(
        emu.total_writes(),
        settled + 1,
        "controller keeps writing: {:?}",
        emu.write_counts()
    );

    // Deleting the custom resource garbage-collects the Service.
    vc_api(&client, "default")
        .delete("vc", &Default::default())
        .await
        .unwrap();
    assert!(emu.get("services", "default", "vc").is_none());
    handle.abort();
    emu.shutdown().await;
}
