//! Watches: kube-runtime's watcher, bookmarks, dropped connections, 410 Gone,
//! label-selector transitions.

mod common;

use std::time::Duration;

use common::*;
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Patch, PatchParams, PostParams, WatchEvent, WatchParams};
use kube::runtime::{WatchStreamExt, reflector, watcher};
use kube::{Api, ResourceExt};
use kube_emulator::Emulator;
use serde_json::json;

fn cm(name: &str, app: &str) -> ConfigMap {
    serde_json::from_value(json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "labels": {"app": app}}}))
    .unwrap()
}

async fn next_within<S: futures::Stream + Unpin>(s: &mut S, secs: u64) -> S::Item {
    tokio::time::timeout(Duration::from_secs(secs), s.next())
        .await
        .expect("timed out")
        .expect("stream ended")
}

#[tokio::test]
async fn watcher_and_reflector_survive_dropped_watches() {
    let (emu, client) = start().await;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    api.create(&PostParams::default(), &cm("one", "x"))
        .await
        .unwrap();

    let (reader, writer) = reflector::store::<ConfigMap>();
    let stream = reflector(writer, watcher(api.clone(), watcher::Config::default()))
        .default_backoff()
        .applied_objects();
    let mut stream = Box::pin(stream);
    let first = next_within(&mut stream, 5).await.unwrap();
    assert_eq!(first.name_any(), "one");

    api.create(&PostParams::default(), &cm("two", "x"))
        .await
        .unwrap();
    assert_eq!(next_within(&mut stream, 5).await.unwrap().name_any(), "two");

    // Abruptly drop the watch; the watcher re-watches and sees later changes.
    // Created while the watcher re-watches or after: seen either way.
    emu.drop_watches();
    api.create(&PostParams::default(), &cm("three", "x"))
        .await
        .unwrap();
    loop {
        let o = next_within(&mut stream, 10).await.unwrap();
        if o.name_any() == "three" {
            break;
        }
    }
    assert_eq!(reader.state().len(), 3);
    emu.shutdown().await;
}

#[tokio::test]
async fn raw_watch_events_bookmarks_and_selectors() {
    let emu = Emulator::builder()
        .bookmark_interval(Duration::from_millis(200))
        .start()
        .await
        .unwrap();
    let client = emu.client().await.unwrap();
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    api.create(&PostParams::default(), &cm("a", "x"))
        .await
        .unwrap();
    let start_rv = emu.resource_version().to_string();

    let wp = WatchParams::default().labels("app=x").timeout(20);
    let mut s = api.watch(&wp, &start_rv).await.unwrap().boxed();
    let pp = PatchParams::default();
    api.patch("a", &pp, &Patch::Merge(json!({"data": {"k": "1"}})))
        .await
        .unwrap();
    api.patch(
        "a",
        &pp,
        &Patch::Merge(json!({"metadata": {"labels": {"app": "y"}}})),
    )
    .await
    .unwrap();
    api.patch(
        "a",
        &pp,
        &Patch::Merge(json!({"metadata": {"labels": {"app": "x"}}})),
    )
    .await
    .unwrap();
    api.create(&PostParams::default(), &cm("other", "z"))
        .await
        .unwrap();
    api.delete("a", &Default::default()).await.unwrap();

    let mut kinds = Vec::new();
    let mut last_rv = 0u64;
    while kinds.len() < 4 {
        match next_within(&mut s, 5).await.unwrap() {
            WatchEvent::Added(o) => {
                kinds.push("ADDED");
                let r = rv(&o);
                assert!(r > last_rv);
                last_rv = r;
            }
            WatchEvent::Modified(o) => {
                kinds.push("MODIFIED");
                let r = rv(&o);
                assert!(r > last_rv);
                last_rv = r;
            }
            WatchEvent::Deleted(o) => {
                kinds.push("DELETED");
                let r = rv(&o);
                assert!(r > last_rv);
                last_rv = r;
            }
            WatchEvent::Bookmark(_) => {}
            WatchEvent::Error(e) => panic!("{e:?}"),
        }
    }
    // Modified; leaves selector → DELETED; re-enters → ADDED; deleted → DELETED.
    assert_eq!(kinds, ["MODIFIED", "DELETED", "ADDED", "DELETED"]);

    // Periodic bookmark carries the latest resourceVersion.
    let bm = loop {
        if let WatchEvent::Bookmark(b) = next_within(&mut s, 5).await.unwrap() {
            break b;
        }
    };
    assert_eq!(
        bm.metadata.resource_version,
        emu.resource_version().to_string()
    );
    emu.shutdown().await;
}

#[tokio::test]
async fn watch_from_compacted_version_is_gone() {
    let emu = Emulator::builder()
        .bookmark_interval(Duration::from_secs(60))
        .start()
        .await
        .unwrap();
    let client = emu.client().await.unwrap();
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let old = rv(&api
        .create(&PostParams::default(), &cm("a", "x"))
        .await
        .unwrap());
    api.patch(
        "a",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"k": "1"}})),
    )
    .await
    .unwrap();
    emu.compact();
    let mut s = api
        .watch(&WatchParams::default(), &old.to_string())
        .await
        .unwrap()
        .boxed();
    match next_within(&mut s, 5).await.unwrap() {
        WatchEvent::Error(e) => assert_eq!(e.code, 410),
        other => panic!("expected 410, got {other:?}"),
    }
    // On-demand bookmark on a fresh watch.
    let mut s = api
        .watch(&WatchParams::default(), &emu.resource_version().to_string())
        .await
        .unwrap()
        .boxed();
    emu.send_bookmarks();
    assert!(matches!(
        next_within(&mut s, 5).await.unwrap(),
        WatchEvent::Bookmark(_)
    ));

    // A watcher recovers from 410 by relisting.
    let events: Vec<_> = watcher(api.clone(), watcher::Config::default())
        .default_backoff()
        .applied_objects()
        .take(1)
        .try_collect()
        .await
        .unwrap();
    assert_eq!(events[0].name_any(), "a");
    emu.shutdown().await;
}

#[tokio::test]
async fn watch_timeout_ends_stream() {
    let (emu, client) = start().await;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let mut s = api
        .watch(&WatchParams::default().timeout(1), "0")
        .await
        .unwrap()
        .boxed();
    let end = tokio::time::timeout(Duration::from_secs(5), s.next())
        .await
        .expect("should end after timeoutSeconds");
    assert!(end.is_none());
    emu.shutdown().await;
}
