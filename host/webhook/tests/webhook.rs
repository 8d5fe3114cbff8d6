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
