//! Shared helpers for the integration tests.
#![allow(dead_code)]

use kube::api::{ApiResource, DynamicObject, GroupVersionKind};
use kube_emulator::{CustomResource, Emulator};

pub fn valkey_cr() -> CustomResource {
    CustomResource::namespaced(
        "shardgate.io",
        "v1alpha1",
        "ValkeyCluster",
        "valkeyclusters",
    )
}

pub async fn start() -> (Emulator, kube::Client) {
    let emu = Emulator::builder()
        .custom_resource(valkey_cr())
        .start()
        .await
        .expect("start");
    let client = emu.client().await.expect("client");
    (emu, client)
}

pub fn vc_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("shardgate.io", "v1alpha1", "ValkeyCluster"),
        "valkeyclusters",
    )
}

pub fn vc_api(client: &kube::Client, ns: &str) -> kube::Api<DynamicObject> {
    kube::Api::namespaced_with(client.clone(), ns, &vc_resource())
}

pub fn rv(obj: &impl kube::ResourceExt) -> u64 {
    obj.resource_version().unwrap().parse().unwrap()
}

pub fn api_code(e: &kube::Error) -> u16 {
    match e {
        kube::Error::Api(s) => s.code,
        other => panic!("expected an API error, got {other:?}"),
    }
}

pub fn api_reason(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(s) => s.reason.clone(),
        other => panic!("expected an API error, got {other:?}"),
    }
}

/// Raw HTTP/1.1 request to the emulator; returns (status, body).
pub async fn raw(emu: &Emulator, method: &str, path: &str) -> (u16, String) {
    raw_body(emu, method, path, "application/json", "").await
}

/// Raw HTTP/1.1 request with a body.
pub async fn raw_body(
    emu: &Emulator,
    method: &str,
    path: &str,
    content_type: &str,
    body: &str,
) -> (u16, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(emu.addr()).await.unwrap();
    let req = format!(
        "{method} {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).await.unwrap();
    let mut buf = String::new();
    s.read_to_string(&mut buf).await.unwrap();
    let code = buf[9..12].parse().unwrap();
    let body = buf
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    (code, body)
}

/// A client like [`Emulator::client`] but without kube's default retry
/// layer, which retries a 429 (a refused eviction) up to 15 times with
/// exponential backoff: a test wants the refusal itself.
pub async fn client_without_retry(emu: &Emulator) -> kube::Client {
    let kc = kube::config::Kubeconfig::from_yaml(&emu.kubeconfig_yaml()).unwrap();
    let mut config =
        kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
            .await
            .unwrap();
    config.default_retry = false;
    kube::Client::try_from(config).unwrap()
}

/// A raw HTTP response: status, headers (lower-cased names) and body
/// (de-chunked).
pub struct RawResponse {
    pub code: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl RawResponse {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.body))
    }
}

/// Raw HTTP/1.1 GET with extra request headers (e.g. kubectl's Accept);
/// reads until the server closes, so a watch needs `timeoutSeconds`.
pub async fn raw_get(emu: &Emulator, path: &str, headers: &[(&str, &str)]) -> RawResponse {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(emu.addr()).await.unwrap();
    let extra: String = headers
        .iter()
        .map(|(k, v)| format!("{k}: {v}\r\n"))
        .collect();
    let req = format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n{extra}\r\n");
    s.write_all(req.as_bytes()).await.unwrap();
    let mut buf = String::new();
    s.read_to_string(&mut buf).await.unwrap();
    let (head, body) = buf.split_once("\r\n\r\n").unwrap_or((&buf, ""));
    let mut lines = head.lines();
    let code = lines.next().unwrap_or_default()[9..12].parse().unwrap();
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let chunked = headers
        .iter()
        .any(|(k, v)| k == "transfer-encoding" && v.contains("chunked"));
    let body = if chunked {
        dechunk(body)
    } else {
        body.to_string()
    };
    RawResponse {
        code,
        headers,
        body,
    }
}

fn dechunk(mut s: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = s.split_once("\r\n") {
        let n = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
        if n == 0 {
            break;
        }
        out.push_str(&rest[..n]);
        s = rest[n..].strip_prefix("\r\n").unwrap_or(&rest[n..]);
    }
    out
}

/// Polls `check` every 20 ms until it holds, failing after 10 s.
pub async fn eventually<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !check().await {
        assert!(
            std::time::Instant::now() < deadline,
            "timed out waiting for: {what}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}
