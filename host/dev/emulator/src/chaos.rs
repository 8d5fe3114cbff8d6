//! What a chaos suite needs of an API server beyond faults on single
//! requests: who wrote what and when (the write log, by client), an outage
//! that refuses connections and cuts the open ones, and counts of what
//! fired.
//!
//! A client is told apart by the bearer token of its kubeconfig
//! ([`crate::Emulator::kubeconfig_yaml_for`]); a request without one is
//! `anonymous`.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use axum::http::{HeaderMap, header};
use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::{oneshot, watch};
use tokio::task::JoinSet;

use crate::verb::Verb;

/// The client a request without a bearer token is logged as.
pub const ANONYMOUS: &str = "anonymous";

/// One write the API server accepted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WriteRecord {
    /// The client's bearer token, or [`ANONYMOUS`].
    pub client: String,
    pub verb: Verb,
    /// The plural, with `/status` (or another subresource) when it was one.
    pub resource: String,
    pub namespace: String,
    pub name: String,
    /// When the answer was sent.
    pub at: Instant,
    /// The same instant by the wall clock (to set beside timestamps
    /// clients write, such as a Lease's `renewTime`).
    pub wall: SystemTime,
}

/// One request for a resource, as an authorizer sees it: who asked, with
/// which verb, for what. Discovery (`/api`, `/apis`) is not in it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RequestRecord {
    /// The client's bearer token, or [`ANONYMOUS`].
    pub client: String,
    /// [`Verb::Apply`] is a server-side apply: a `patch` to RBAC, and also
    /// a `create` when it created the object (`code` 201).
    pub verb: Verb,
    /// The API group, `""` for the core group.
    pub group: String,
    /// The plural, with `/status` (or another subresource) when it was one.
    pub resource: String,
    /// Empty for a cluster-scoped resource or a request across namespaces.
    pub namespace: String,
    /// Empty for a list, a watch or a create.
    pub name: String,
    /// The HTTP status of the answer.
    pub code: u16,
}

/// The chaos state of one emulator, shared by its server.
#[derive(Debug)]
pub(crate) struct Chaos {
    /// `None` until [`crate::Emulator::record_writes`] turns it on.
    log: Mutex<Option<Vec<WriteRecord>>>,
    /// `None` until [`crate::Emulator::record_requests`] turns it on.
    requests: Mutex<Option<Vec<RequestRecord>>>,
    /// True while an outage refuses connections.
    down: watch::Sender<bool>,
    /// Outages begun.
    outages: AtomicU64,
    /// Connections cut when an outage began.
    cut: AtomicU64,
    /// Injected faults that fired, by kind.
    fired: Mutex<BTreeMap<&'static str, u64>>,
}

impl Default for Chaos {
    fn default() -> Self {
        Chaos {
            log: Mutex::new(None),
            requests: Mutex::new(None),
            down: watch::Sender::new(false),
            outages: AtomicU64::new(0),
            cut: AtomicU64::new(0),
            fired: Mutex::new(BTreeMap::new()),
        }
    }
}

/// The client a request comes from: its bearer token.
pub(crate) fn client_of(headers: &HeaderMap) -> String {
    headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .unwrap_or(ANONYMOUS)
        .to_string()
}

impl Chaos {
    pub fn record_writes(&self, on: bool) {
        *self.log.lock().unwrap() = on.then(Vec::new);
    }

    /// Notes an accepted write, if writes are recorded.
    pub fn wrote(&self, client: &str, verb: Verb, resource: &str, namespace: &str, name: &str) {
        if let Some(log) = self.log.lock().unwrap().as_mut() {
            log.push(WriteRecord {
                client: client.to_string(),
                verb,
                resource: resource.to_string(),
                namespace: namespace.to_string(),
                name: name.to_string(),
                at: Instant::now(),
                wall: SystemTime::now(),
            });
        }
    }

    pub fn write_log(&self) -> Vec<WriteRecord> {
        self.log.lock().unwrap().clone().unwrap_or_default()
    }

    pub fn record_requests(&self, on: bool) {
        *self.requests.lock().unwrap() = on.then(Vec::new);
    }

    /// Notes a request for a resource, if requests are recorded.
    pub fn requested(&self, record: impl FnOnce() -> RequestRecord) {
        if let Some(log) = self.requests.lock().unwrap().as_mut() {
            log.push(record());
        }
    }

    pub fn request_log(&self) -> Vec<RequestRecord> {
        self.requests.lock().unwrap().clone().unwrap_or_default()
    }

    pub fn fired(&self, kind: &'static str) {
        *self.fired.lock().unwrap().entry(kind).or_default() += 1;
    }

    pub fn fired_counts(&self) -> BTreeMap<&'static str, u64> {
        let mut out = self.fired.lock().unwrap().clone();
        out.insert("outages", self.outages.load(Ordering::Relaxed));
        out.insert("connections cut", self.cut.load(Ordering::Relaxed));
        out
    }

    /// Begins (true) or ends (false) an outage.
    pub fn set_down(&self, down: bool) {
        if down && !*self.down.borrow() {
            self.outages.fetch_add(1, Ordering::Relaxed);
        }
        self.down.send_replace(down);
    }

    pub fn is_down(&self) -> bool {
        *self.down.borrow()
    }
}

/// Serves `app` on `listener` until `stop`. During an outage the listening
/// socket is closed (new connections are refused) and every open
/// connection is cut; when it ends, the same address is bound again.
pub(crate) async fn serve(
    listener: TcpListener,
    app: axum::Router,
    chaos: Arc<Chaos>,
    mut stop: oneshot::Receiver<()>,
) {
    let addr: SocketAddr = match listener.local_addr() {
        Ok(a) => a,
        Err(_) => return,
    };
    let mut down = chaos.down.subscribe();
    let mut listener = Some(listener);
    loop {
        let Some(current) = listener.take() else {
            return;
        };
        let mut connections = JoinSet::new();
        loop {
            tokio::select! {
                _ = &mut stop => {
                    connections.abort_all();
                    return;
                }
                _ = down.wait_for(|d| *d) => {
                    chaos.cut.fetch_add(connections.len() as u64, Ordering::Relaxed);
                    connections.abort_all();
                    break;
                }
                accepted = current.accept() => {
                    if let Ok((stream, _)) = accepted {
                        let service = TowerToHyperService::new(app.clone());
                        connections.spawn(async move {
                            let _ = hyper::server::conn::http1::Builder::new()
                                .serve_connection(TokioIo::new(stream), service)
                                .with_upgrades()
                                .await;
                        });
                    }
                }
                Some(_) = connections.join_next(), if !connections.is_empty() => {}
            }
        }
        drop(current);
        tokio::select! {
            _ = &mut stop => return,
            _ = down.wait_for(|d| !*d) => {}
        }
        listener = Some(rebind(addr).await);
    }
}

/// Binds `addr` again after an outage; the port was just released, so a
/// bind may need a few tries.
async fn rebind(addr: SocketAddr) -> TcpListener {
    let mut wait = Duration::from_millis(10);
    loop {
        match TcpListener::bind(addr).await {
            Ok(l) => return l,
            Err(e) => {
                if wait >= Duration::from_secs(5) {
                    panic!("kube-emulator: cannot bind {addr} again after an outage: {e}");
                }
                tokio::time::sleep(wait).await;
                wait *= 2;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_client_is_its_bearer_token() {
        let mut h = HeaderMap::new();
        assert_eq!(client_of(&h), ANONYMOUS);
        h.insert(header::AUTHORIZATION, "Bearer op-a".parse().unwrap());
        assert_eq!(client_of(&h), "op-a");
        h.insert(header::AUTHORIZATION, "Basic eDp5".parse().unwrap());
        assert_eq!(client_of(&h), ANONYMOUS);
    }
}
