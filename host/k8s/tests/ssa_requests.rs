//! The exact requests the applier sends, pinned with tower-test mocks: an
//! object the cache does not hold is looked up first (never taken over; one
//! list for several), a server-side apply carries the field manager and
//! `force`, and an object already in place causes no request at all.

use std::time::Duration;

use http::{Request, Response};
use k8s_openapi::api::core::v1::{Service, ServicePort, ServiceSpec};
use kube::client::Body;
use kube::runtime::watcher;
use shardgate_k8s::apply::{self, Applied, Recent, Taken};
use shardgate_k8s::cache::Cache;
use shardgate_k8s::cache::entry::{self as cached, CachedService, Entry};
use shardgate_k8s::cache::watched::Watched;
use shardgate_k8s::manager::APPLIED_HASH;
use tower_test::mock::Handle;

fn service() -> Service {
    Service {
        metadata: kube::api::ObjectMeta {
            name: Some("shardgate-demo-shard-0".into()),
            namespace: Some("default".into()),
            ..Default::default()
        },
        spec: Some(ServiceSpec {
            type_: Some("NodePort".into()),
            ports: Some(vec![ServicePort {
                name: Some("vk-n0".into()),
                port: 6379,
                protocol: Some("TCP".into()),
                ..Default::default()
            }]),
            ..Default::default()
        }),
        status: None,
    }
}

type Server = Handle<Request<Body>, Response<Body>>;

/// Answers the lookup of an object the cache does not hold: `existing`, or
/// 404 Not Found.
async fn answer_lookup(handle: &mut Server, existing: Option<serde_json::Value>) {
    let (request, send) = handle.next_request().await.expect("the lookup");
    assert_eq!(request.method(), http::Method::GET);
    assert_eq!(
        request.uri().path(),
        "/api/v1/namespaces/default/services/shardgate-demo-shard-0"
    );
    let response = match existing {
        Some(object) => Response::builder().body(Body::from(serde_json::to_vec(&object).unwrap())),
        None => Response::builder().status(404).body(Body::from(
            serde_json::to_vec(&serde_json::json!({
                "kind": "Status", "apiVersion": "v1", "status": "Failure",
                "reason": "NotFound", "code": 404, "message": "not found"}))
            .unwrap(),
        )),
    };
    send.send_response(response.unwrap());
}

/// [`service`] as the cluster with UID `uid` wants it.
fn owned_service(uid: &str) -> Service {
    let mut svc = service();
    svc.metadata.owner_references = Some(vec![
        k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
            api_version: "shardgate.io/v1alpha1".into(),
            kind: "ValkeyCluster".into(),
            name: "demo".into(),
            uid: uid.into(),
            controller: Some(true),
            block_owner_deletion: Some(true),
        },
    ]);
    svc
}

/// Asserts that no request arrives within `ms` milliseconds.
async fn nothing_sent(handle: &mut Handle<Request<Body>, Response<Body>>, ms: u64) {
    let next = tokio::time::timeout(Duration::from_millis(ms), handle.next_request());
    assert!(next.await.is_err(), "a request was sent");
}

/// The body shardgate sends to create [`service`].
async fn sent_apply() -> serde_json::Value {
    let (mock, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let client = kube::Client::new(mock, "default");
    let empty = Cache::<CachedService>::default();
    let capture = tokio::spawn(async move {
        answer_lookup(&mut handle, None).await;
        let (request, send) = handle.next_request().await.unwrap();
        let body = request.into_body().collect_bytes().await.unwrap();
        send.send_response(Response::builder().body(Body::from(body.to_vec())).unwrap());
        serde_json::from_slice::<serde_json::Value>(&body).unwrap()
    });
    apply::apply(&client, &empty, &Recent::default(), &service(), None)
        .await
        .unwrap();
    capture.await.unwrap()
}

#[tokio::test]
async fn apply_sends_one_forced_server_side_apply_with_our_field_manager() {
    let (mock, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let client = kube::Client::new(mock, "default");
    let recent = Recent::default();
    let store = Cache::<CachedService>::default();
    let server = tokio::spawn(async move {
        answer_lookup(&mut handle, None).await;
        let (request, send) = handle.next_request().await.expect("the apply");
        assert_eq!(request.method(), http::Method::PATCH);
        let uri = request.uri().to_string();
        assert!(
            uri.starts_with("/api/v1/namespaces/default/services/shardgate-demo-shard-0?"),
            "{uri}"
        );
        assert!(uri.contains("fieldManager=shardgate"), "{uri}");
        assert!(uri.contains("force=true"), "{uri}");
        assert_eq!(
            request.headers()["content-type"],
            "application/apply-patch+yaml"
        );
        let body = request.into_body().collect_bytes().await.unwrap();
        let sent: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(sent["kind"], "Service");
        assert_eq!(sent["spec"]["ports"][0]["protocol"], "TCP");
        assert!(sent["metadata"]["annotations"][APPLIED_HASH].is_string());
        send.send_response(Response::builder().body(Body::from(body.to_vec())).unwrap());
        // Nothing else is sent.
        nothing_sent(&mut handle, 200).await;
    });
    let result = apply::apply(&client, &store, &recent, &service(), None)
        .await
        .unwrap();
    assert_eq!(result, Applied::Created);
    server.await.unwrap();
}

#[tokio::test]
async fn an_object_already_in_place_sends_nothing() {
    let (mock, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let client = kube::Client::new(mock, "default");
    let recent = Recent::default();
    let store = Cache::<CachedService>::default();

    // What the API server stores after our apply: our fields, our hash, and
    // fields it defaulted or other managers added.
    let mut live = sent_apply().await;
    live["metadata"]["resourceVersion"] = "7".into();
    live["metadata"]["labels"] = serde_json::json!({"cloud.example.com/zone": "a"});
    live["spec"]["clusterIP"] = "10.96.0.10".into();
    live["spec"]["ports"][0]["nodePort"] = 31000.into();
    live["spec"]["ports"][0]["targetPort"] = 6379.into();
    let live: Service = serde_json::from_value(live).unwrap();
    store.apply(watcher::Event::Apply(cached::service(
        Watched::of(&live),
        None,
    )));

    assert_eq!(
        apply::apply(&client, &store, &recent, &service(), None)
            .await
            .unwrap(),
        Applied::Unchanged
    );
    nothing_sent(&mut handle, 100).await;

    // A field we own changed by someone else: re-applied.
    let mut drifted = live;
    drifted.spec.as_mut().unwrap().type_ = Some("ClusterIP".into());
    store.apply(watcher::Event::Apply(cached::service(
        Watched::of(&drifted),
        None,
    )));
    let server = tokio::spawn(async move {
        let (request, send) = handle.next_request().await.expect("re-apply");
        assert_eq!(request.method(), http::Method::PATCH);
        let body = request.into_body().collect_bytes().await.unwrap();
        send.send_response(Response::builder().body(Body::from(body.to_vec())).unwrap());
    });
    assert_eq!(
        apply::apply(&client, &store, &recent, &service(), None)
            .await
            .unwrap(),
        Applied::Updated
    );
    server.await.unwrap();
}

#[tokio::test]
async fn an_apply_the_cache_has_not_shown_yet_is_not_sent_twice() {
    let (mock, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let client = kube::Client::new(mock, "default");
    let recent = Recent::default();
    let store = Cache::<CachedService>::default();
    let server = tokio::spawn(async move {
        answer_lookup(&mut handle, None).await;
        let (request, send) = handle.next_request().await.expect("the first apply");
        let body = request.into_body().collect_bytes().await.unwrap();
        send.send_response(Response::builder().body(Body::from(body.to_vec())).unwrap());
        // The store never sees the object, yet nothing more is sent.
        nothing_sent(&mut handle, 200).await;
    });
    assert_eq!(
        apply::apply(&client, &store, &recent, &service(), None)
            .await
            .unwrap(),
        Applied::Created
    );
    assert_eq!(
        apply::apply(&client, &store, &recent, &service(), None)
            .await
            .unwrap(),
        Applied::Unchanged
    );
    server.await.unwrap();
}

/// The digest path: the cache holds a digest of the fields shardgate
/// applied. When the API server itself changes a value inside a field
/// shardgate owns whole (here the whole `ports` list, with a defaulted
/// `targetPort`), one repair is sent and what it left is accepted: no write
/// loop. A later change by someone else is still repaired.
#[tokio::test]
async fn a_value_the_server_changed_costs_one_apply_not_a_loop() {
    let mut live = sent_apply().await;
    live["metadata"]["resourceVersion"] = "7".into();
    live["spec"]["ports"][0]["targetPort"] = 6379.into();
    live["metadata"]["managedFields"] = serde_json::json!([{
        "manager": "shardgate", "operation": "Apply", "fieldsType": "FieldsV1",
        "fieldsV1": {"f:metadata": {"f:annotations": {"f:shardgate.io/applied-hash": {}}},
                     "f:spec": {"f:type": {}, "f:ports": {}}}
    }]);
    let cached = |live: &serde_json::Value| {
        let cached = cached::service(serde_json::from_str(&live.to_string()).unwrap(), None);
        assert!(cached.owned_digest().is_some(), "cached with its digest");
        cached
    };
    let store = Cache::<CachedService>::default();
    store.apply(watcher::Event::Apply(cached(&live)));

    let (mock, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let client = kube::Client::new(mock, "default");
    let recent = Recent::default();
    let answer = live.clone();
    let server = tokio::spawn(async move {
        let (_, send) = handle.next_request().await.expect("one repair");
        send.send_response(
            Response::builder()
                .body(Body::from(serde_json::to_vec(&answer).unwrap()))
                .unwrap(),
        );
        handle
    });
    assert_eq!(
        apply::apply(&client, &store, &recent, &service(), None)
            .await
            .unwrap(),
        Applied::Updated
    );
    let mut handle = server.await.unwrap();
    // The same state again: accepted, nothing sent (a request would wait
    // for an answer that never comes).
    let desired = service();
    let again = apply::apply(&client, &store, &recent, &desired, None);
    assert_eq!(
        tokio::time::timeout(Duration::from_secs(2), again)
            .await
            .expect("applied again: a write loop")
            .unwrap(),
        Applied::Unchanged
    );
    nothing_sent(&mut handle, 100).await;
    // Someone else changed a field: repaired again.
    let mut changed = live.clone();
    changed["spec"]["type"] = "ClusterIP".into();
    store.apply(watcher::Event::Apply(cached(&changed)));
    let server = tokio::spawn(async move {
        let (_, send) = handle.next_request().await.expect("a second repair");
        send.send_response(
            Response::builder()
                .body(Body::from(b"{}".to_vec()))
                .unwrap(),
        );
    });
    assert_eq!(
        apply::apply(&client, &store, &recent, &service(), None)
            .await
            .unwrap(),
        Applied::Updated
    );
    server.await.unwrap();
}

/// No takeover: a Service of the wanted name that the cluster does not
/// control (hand-made, so not in the cache; or cached under another
/// controller) gets no apply at all.
#[tokio::test]
async fn a_name_another_owner_holds_gets_no_apply() {
    let (mock, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let client = kube::Client::new(mock, "default");
    let recent = Recent::default();
    let store = Cache::<CachedService>::default();
    let hand_made = serde_json::json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "shardgate-demo-shard-0", "namespace": "default", "uid": "theirs"},
        "spec": {"ports": [{"port": 80}]},
    });
    let server = tokio::spawn(async move {
        answer_lookup(&mut handle, Some(hand_made)).await;
        nothing_sent(&mut handle, 200).await;
        handle
    });
    assert_eq!(
        apply::apply(&client, &store, &recent, &owned_service("ours"), None)
            .await
            .unwrap(),
        Applied::Conflict
    );
    let mut handle = server.await.unwrap();

    // Cached (labelled as shardgate's) but controlled by another cluster.
    let mut other = owned_service("another");
    other.metadata.labels = Some([("shardgate.io/cluster".to_string(), "demo".to_string())].into());
    store.apply(watcher::Event::Apply(cached::service(
        Watched::of(&other),
        None,
    )));
    assert_eq!(
        apply::apply(&client, &store, &recent, &owned_service("ours"), None)
            .await
            .unwrap(),
        Applied::Conflict
    );
    nothing_sent(&mut handle, 100).await;

    // Its own object, not yet in the cache (a watch lag): applied.
    let store = Cache::<CachedService>::default();
    let mine = serde_json::to_value(owned_service("ours")).unwrap();
    let server = tokio::spawn(async move {
        answer_lookup(&mut handle, Some(mine)).await;
        let (request, send) = handle.next_request().await.expect("the apply");
        assert_eq!(request.method(), http::Method::PATCH);
        let body = request.into_body().collect_bytes().await.unwrap();
        send.send_response(Response::builder().body(Body::from(body.to_vec())).unwrap());
    });
    assert_eq!(
        apply::apply(&client, &store, &recent, &owned_service("ours"), None)
            .await
            .unwrap(),
        Applied::Created
    );
    server.await.unwrap();
}

/// A reconcile about to create several objects of one kind looks their
/// names up with one metadata list (page by page), not a GET each: a name
/// the list shows under another controller gets no apply, a free one only
/// its apply. With fewer missing names, nothing is listed.
#[tokio::test]
async fn names_about_to_be_created_are_looked_up_with_one_list() {
    let (mock, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let client = kube::Client::new(mock, "default");
    let recent = Recent::default();
    let store = Cache::<CachedService>::default();
    let resource = kube::api::ApiResource::erase::<Service>(&());
    let names = |n: usize| -> Vec<String> { (0..n).map(|i| format!("svc-{i}")).collect() };

    let (two, three) = (names(2), names(3));
    let few = Taken::list_if_many(&client, &store, &recent, &resource, "default", &two);
    assert!(few.await.unwrap().is_none());
    nothing_sent(&mut handle, 100).await;

    let server = tokio::spawn(async move {
        let page = |items: serde_json::Value, next: &str| {
            serde_json::json!({
                "kind": "PartialObjectMetadataList", "apiVersion": "meta.k8s.io/v1",
                "metadata": {"continue": next}, "items": items})
        };
        let hand_made = serde_json::json!([{"metadata": {
            "name": "shardgate-demo-shard-0", "namespace": "default", "uid": "theirs"}}]);
        let (request, send) = handle.next_request().await.expect("the first page");
        assert_eq!(request.method(), http::Method::GET);
        assert_eq!(request.uri().path(), "/api/v1/namespaces/default/services");
        let query = request.uri().query().unwrap_or_default().to_string();
        assert!(query.contains("limit=500"), "{query}");
        let accept = request.headers()["accept"].to_str().unwrap().to_string();
        assert!(accept.contains("as=PartialObjectMetadataList"), "{accept}");
        let body = serde_json::to_vec(&page(serde_json::json!([]), "more")).unwrap();
        send.send_response(Response::builder().body(Body::from(body)).unwrap());
        let (request, send) = handle.next_request().await.expect("the second page");
        let query = request.uri().query().unwrap_or_default().to_string();
        assert!(query.contains("continue=more"), "{query}");
        let body = serde_json::to_vec(&page(hand_made, "")).unwrap();
        send.send_response(Response::builder().body(Body::from(body)).unwrap());
        // The held name: nothing. The free one: its apply only.
        let (request, send) = handle.next_request().await.expect("the apply");
        assert_eq!(request.method(), http::Method::PATCH);
        assert!(request.uri().path().ends_with("/services/svc-0"));
        let body = request.into_body().collect_bytes().await.unwrap();
        send.send_response(Response::builder().body(Body::from(body.to_vec())).unwrap());
        nothing_sent(&mut handle, 200).await;
    });
    let many = Taken::list_if_many(&client, &store, &recent, &resource, "default", &three);
    let taken = many.await.unwrap().expect("three missing names are listed");
    let ours = owned_service("ours");
    let held = apply::apply(&client, &store, &recent, &ours, Some(&taken));
    assert_eq!(held.await.unwrap(), Applied::Conflict);
    let mut free = owned_service("ours");
    free.metadata.name = Some("svc-0".into());
    let free = apply::apply(&client, &store, &recent, &free, Some(&taken));
    assert_eq!(free.await.unwrap(), Applied::Created);
    server.await.unwrap();
}

/// The same desired object is not re-applied, whether its hash was
/// remembered or not; a changed one is, at once.
#[tokio::test]
async fn a_changed_desired_object_is_applied_although_its_last_form_was_remembered() {
    let (mock, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let client = kube::Client::new(mock, "default");
    let recent = Recent::default();
    let store = Cache::<CachedService>::default();
    let mut live = sent_apply().await;
    live["metadata"]["resourceVersion"] = "7".into();
    let live: Service = serde_json::from_value(live).unwrap();
    store.apply(watcher::Event::Apply(cached::service(
        Watched::of(&live),
        None,
    )));
    let same = service();
    for _ in 0..3 {
        let same = apply::apply(&client, &store, &recent, &same, None);
        assert_eq!(same.await.unwrap(), Applied::Unchanged);
    }
    nothing_sent(&mut handle, 100).await;

    let mut changed = service();
    changed.spec.as_mut().unwrap().ports.as_mut().unwrap()[0].port = 6380;
    let server = tokio::spawn(async move {
        let (request, send) = handle.next_request().await.expect("the apply");
        assert_eq!(request.method(), http::Method::PATCH);
        let body = request.into_body().collect_bytes().await.unwrap();
        let sent: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(sent["spec"]["ports"][0]["port"], 6380);
        send.send_response(Response::builder().body(Body::from(body.to_vec())).unwrap());
    });
    let applied = apply::apply(&client, &store, &recent, &changed, None);
    assert_eq!(applied.await.unwrap(), Applied::Updated);
    server.await.unwrap();
}
