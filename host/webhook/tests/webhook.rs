//! The admission webhook over real HTTPS: a self-signed certificate, the
//! server from `shardgate_webhook::serve`, and AdmissionReview JSON as the
//! API server sends it.

use std::net::SocketAddr;
use std::sync::Arc;

use rustls_pki_types::{CertificateDer, ServerName};
use serde_json::{Value, json};
use shardgate_wasm::{Engine, Limits, Reconciler};
use shardgate_webhook::{self as webhook, TlsFiles};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

struct Server {
    addr: SocketAddr,
    cert: CertificateDer<'static>,
    _dir: std::path::PathBuf,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    _engine: Engine,
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

async fn start(others: Vec<String>) -> Server {
    let key =
        rcgen::generate_simple_self_signed(vec!["localhost".into(), "127.0.0.1".into()]).unwrap();
    let dir = std::env::temp_dir().join(format!("shardgate-webhook-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let files = TlsFiles {
        cert: dir.join(format!("{}.crt", others.len())),
        key: dir.join(format!("{}.key", others.len())),
    };
    std::fs::write(&files.cert, key.cert.pem()).unwrap();
    std::fs::write(&files.key, key.signing_key.serialize_pem()).unwrap();
    let engine = Engine::new(Limits::default()).unwrap();
    let module: Arc<dyn Reconciler> = Arc::new(engine.load_embedded().unwrap());
    let listener = webhook::TlsListener::bind("127.0.0.1:0".parse().unwrap(), files)
        .await
        .unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let clusters = move |_: &str| others.clone();
    tokio::spawn(async move {
        axum::serve(listener, webhook::router(module, Arc::new(clusters)))
            .with_graceful_shutdown(async move {
                let _ = stopped.await;
            })
            .await
            .unwrap();
    });
    Server {
        addr,
        cert: key.cert.der().clone(),
        _dir: dir,
        stop: Some(stop),
        _engine: engine,
    }
}

/// POSTs `body` to `/validate` over TLS, trusting only the server's own
/// certificate; returns the response status and JSON body.
async fn post(server: &Server, body: &Value) -> (u16, Value) {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(server.cert.clone()).unwrap();
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let tcp = TcpStream::connect(server.addr).await.unwrap();
    let mut tls = connector
        .connect(ServerName::try_from("localhost").unwrap(), tcp)
        .await
        .unwrap();
    let payload = body.to_string();
    let request = format!(
        "POST /validate HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{payload}",
        payload.len()
    );
    tls.write_all(request.as_bytes()).await.unwrap();
    let mut response = Vec::new();
    tls.read_to_end(&mut response).await.unwrap();
    let text = String::from_utf8(response).unwrap();
    let (head, body) = text.split_once("\r\n\r\n").unwrap();
    let status = head.split_whitespace().nth(1).unwrap().parse().unwrap();
    let body = serde_json::from_str(body).unwrap_or_else(|_| Value::String(body.to_string()));
    (status, body)
}

fn review(operation: &str, object: Value) -> Value {
    json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
            "kind": {"group": "shardgate.io", "version": "v1alpha1", "kind": "ValkeyCluster"},
            "resource": {"group": "shardgate.io", "version": "v1alpha1", "resource": "valkeyclusters"},
            "requestKind": {"group": "shardgate.io", "version": "v1alpha1", "kind": "ValkeyCluster"},
            "requestResource": {"group": "shardgate.io", "version": "v1alpha1", "resource": "valkeyclusters"},
            "name": object["metadata"]["name"],
            "namespace": "default",
            "operation": operation,
            "userInfo": {"username": "admin", "groups": ["system:authenticated"]},
            "object": object,
            "oldObject": null,
            "dryRun": false,
            "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"},
        }
    })
}

fn cluster(name: &str, spec: Value) -> Value {
    json!({
        "apiVersion": "shardgate.io/v1alpha1",
        "kind": "ValkeyCluster",
        "metadata": {"name": name, "namespace": "default"},
        "spec": spec,
    })
}

fn sample(file: &str) -> Value {
    let path = format!("{}/../../deploy/samples/{file}", env!("CARGO_MANIFEST_DIR"));
    shardgate_k8s::manifest::documents(&std::fs::read_to_string(path).unwrap())
        .remove(0)
        .unwrap()
}

#[tokio::test]
async fn admits_good_clusters_and_denies_bad_ones_with_field_paths() {
    let server = start(vec!["demo".into()]).await;
    for file in [
        "valkeycluster-external.yaml",
        "valkeycluster-nodeport-ip.yaml",
        "valkeycluster-loadbalancer.yaml",
    ] {
        let (status, body) = post(&server, &review("CREATE", sample(file))).await;
        assert_eq!(status, 200);
        assert_eq!(body["kind"], "AdmissionReview");
        assert_eq!(
            body["response"]["uid"], "705ab4f5-6393-11e8-b7cc-42010a800002",
            "the response names the request"
        );
        assert_eq!(body["response"]["allowed"], true, "{file}: {body}");
    }

    // Hostnames without a domain: the guest's rule, named by field.
    let bad = cluster(
        "other",
        json!({"shards": 3, "replicas": 1, "externalAccess": {
            "enabled": true, "preferredEndpointType": "hostname"}}),
    );
    let (_, body) = post(&server, &review("UPDATE", bad)).await;
    assert_eq!(body["response"]["allowed"], false);
    let message = body["response"]["status"]["message"].as_str().unwrap();
    assert!(message.contains("spec.externalAccess.domain"), "{message}");

    // A wrong type: the field path comes from deserialisation.
    let typo = cluster("typo", json!({"shards": "three"}));
    let (_, body) = post(&server, &review("CREATE", typo)).await;
    assert_eq!(body["response"]["allowed"], false);
    let message = body["response"]["status"]["message"].as_str().unwrap();
    assert!(message.contains("spec.shards"), "{message}");

    // A TLS cluster is admitted; a Secret name Kubernetes would refuse is
    // denied by field.
    let tls = cluster("secure", json!({"tls": {"secretName": "valkey-tls"}}));
    let (_, body) = post(&server, &review("CREATE", tls)).await;
    assert_eq!(body["response"]["allowed"], true, "{body}");
    let tls = cluster("secure", json!({"tls": {"secretName": "Valkey_TLS"}}));
    let (_, body) = post(&server, &review("CREATE", tls)).await;
    assert_eq!(body["response"]["allowed"], false);
    let message = body["response"]["status"]["message"].as_str().unwrap();
    assert!(message.contains("spec.tls.secretName"), "{message}");

    // Deletes are always admitted.
    let (_, body) = post(&server, &review("DELETE", cluster("x", json!({})))).await;
    assert_eq!(body["response"]["allowed"], true);

    // Not an AdmissionReview with a request: a 4xx from the JSON extractor
    // or an invalid-review answer, never "allowed".
    let (status, body) = post(&server, &json!({"kind": "AdmissionReview"})).await;
    assert!(
        status >= 400 || body["response"]["allowed"] == false,
        "{status} {body}"
    );
}

/// The namespace's other clusters reach the guest's collision check. The
/// naming grammar (`shardgate-<cluster>-shard-<i>`, `shardgate-<cluster>-<s>-<n>`)
/// keeps prefix-related clusters apart, which `tests/tests/properties.rs`
/// proves over random names, so the check is a guard that admits them.
#[tokio::test]
async fn prefix_related_neighbours_are_admitted_by_the_collision_guard() {
    let server = start(vec!["a".into(), "a-1-0".into(), "a-shard".into()]).await;
    let (_, body) = post(
        &server,
        &review(
            "CREATE",
            cluster("a-1", json!({"shards": 12, "replicas": 1})),
        ),
    )
    .await;
    assert_eq!(body["response"]["allowed"], true, "{body}");
}

/// The clusters the webhook sees, as the operator's store would hold them.
struct Existing(Vec<shardgate_k8s::crd::ValkeyCluster>);

impl webhook::ClusterNames for Existing {
    fn names(&self, namespace: &str) -> Vec<String> {
        self.0
            .iter()
            .filter(|c| c.metadata.namespace.as_deref() == Some(namespace))
            .map(|c| c.metadata.name.clone().unwrap_or_default())
            .collect()
    }

    fn pins(&self, namespace: &str, name: &str) -> Vec<shardgate_contract::model::PinnedPort> {
        shardgate_k8s::convert::pinned_elsewhere(self.0.iter(), namespace, name)
    }
}

/// NodePorts are shared by the whole Kubernetes cluster: a cluster that pins
/// a port another cluster (in any namespace) pins is denied, naming the
/// field and the other cluster; an update keeps what the object pinned
/// before.
#[test]
fn a_node_port_pinned_by_another_cluster_is_denied_naming_both() {
    let engine = Engine::new(Limits::default()).unwrap();
    let module = engine.load_embedded().unwrap();
    let pinned = |name: &str, namespace: &str, base: u32| {
        let mut c = cluster(
            name,
            json!({"shards": 2, "replicas": 1,
                   "externalAccess": {"enabled": true, "nodePorts": {"base": base}}}),
        );
        c["metadata"]["namespace"] = json!(namespace);
        c
    };
    let holder: shardgate_k8s::crd::ValkeyCluster =
        serde_json::from_value(pinned("holder", "other", 30100)).unwrap();
    let existing = Existing(vec![holder]);
    let decide = |body: Value| -> Value {
        let review = serde_json::from_value(body).unwrap();
        serde_json::to_value(webhook::review(&module, &existing, review)).unwrap()
    };
    // 30103..30106 overlaps the holder's 30100..30103 at 30103.
    let out = decide(review("CREATE", pinned("newcomer", "default", 30103)));
    assert_eq!(out["response"]["allowed"], false, "{out:#}");
    let message = out["response"]["status"]["message"].as_str().unwrap();
    assert!(
        message.contains("spec.externalAccess.nodePorts.base")
            && message.contains("30103")
            && message.contains("other/holder"),
        "{message}"
    );
    // Clear of the holder's ports: admitted.
    let out = decide(review("CREATE", pinned("newcomer", "default", 30200)));
    assert_eq!(out["response"]["allowed"], true, "{out:#}");
    // An update of an object that pinned the port before (the clash is not
    // of its making) is admitted.
    let mut update = review("UPDATE", pinned("newcomer", "default", 30103));
    update["request"]["oldObject"] = pinned("newcomer", "default", 30103);
    let out = decide(update);
    assert_eq!(out["response"]["allowed"], true, "{out:#}");
}
