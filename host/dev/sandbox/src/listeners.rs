//! Listening sockets kept in step with what each proxy tick wants: one
//! accepting task per wanted key, bound when it is first wanted and closed,
//! with every connection it accepted, once it is not. The Service part of
//! the proxy and the gateway each keep a set.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Debug;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tokio::task::{JoinHandle, JoinSet};
use tracing::{info, warn};

/// What a listener is for: where it listens, and how it is named in logs
/// and errors.
pub(crate) trait ListenKey: Ord + Clone + Debug + Send + Sync + 'static {
    fn addr(&self) -> SocketAddr;
    /// E.g. `service vc-shard-0 port "vk-n0"`.
    fn describe(&self) -> String;
}

/// The open listeners of one kind.
pub(crate) struct Listeners<K> {
    inner: Mutex<Inner<K>>,
}

struct Inner<K> {
    open: BTreeMap<K, JoinHandle<()>>,
    /// Wanted listeners that failed to bind, with the error (reported once).
    bind_failures: BTreeMap<K, String>,
}

impl<K: ListenKey> Listeners<K> {
    pub(crate) fn new() -> Self {
        Listeners {
            inner: Mutex::new(Inner {
                open: BTreeMap::new(),
                bind_failures: BTreeMap::new(),
            }),
        }
    }

    fn inner(&self) -> MutexGuard<'_, Inner<K>> {
        self.inner
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The listeners open now.
    pub(crate) fn keys(&self) -> Vec<K> {
        self.inner().open.keys().cloned().collect()
    }

    /// Makes exactly `wanted` listen: closes the others (their accepting
    /// task is aborted, which drops the connections it accepted), binds
    /// the missing ones and runs `serve(key, listener)` on each. A bind
    /// failure is retried on every call and returned the first time only
    /// (the errors to report).
    pub(crate) async fn sync<F, Fut>(&self, wanted: BTreeSet<K>, serve: F) -> Vec<String>
    where
        F: Fn(K, TcpListener) -> Fut,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let missing: Vec<K> = {
            let mut inner = self.inner();
            inner.bind_failures.retain(|k, _| wanted.contains(k));
            let unwanted: Vec<K> = inner
                .open
                .keys()
                .filter(|k| !wanted.contains(*k))
                .cloned()
                .collect();
            for key in unwanted {
                if let Some(task) = inner.open.remove(&key) {
                    info!(addr = %key.addr(), "{}: listener closed", key.describe());
                    task.abort();
                }
            }
            wanted
                .into_iter()
                .filter(|k| !inner.open.contains_key(k))
                .collect()
        };
        let mut errors = Vec::new();
        for key in missing {
            match TcpListener::bind(key.addr()).await {
                Ok(listener) => {
                    info!(addr = %key.addr(), "{}: listening", key.describe());
                    let task = tokio::spawn(serve(key.clone(), listener));
                    let mut inner = self.inner();
                    inner.bind_failures.remove(&key);
                    inner.open.insert(key, task);
                }
                Err(e) => {
                    let message =
                        format!("{}: cannot listen on {}: {e}", key.describe(), key.addr());
                    let previous = self.inner().bind_failures.insert(key, message.clone());
                    if previous.as_ref() != Some(&message) {
                        errors.push(message);
                    }
                }
            }
        }
        errors
    }

    /// Aborts every listener (and so its connections) without waiting.
    pub(crate) fn abort_all(&self) {
        for (_, task) in std::mem::take(&mut self.inner().open) {
            task.abort();
        }
    }

    /// Closes every listener and waits until each has stopped.
    pub(crate) async fn close_all(&self) {
        let open = std::mem::take(&mut self.inner().open);
        for (_, task) in open {
            task.abort();
            let _ = task.await;
        }
    }
}

/// Accepts connections on `listener` until aborted, running `handle` on
/// each; aborting also drops every connection still being handled.
pub(crate) async fn accept_loop<F, Fut>(listener: TcpListener, what: String, handle: F)
where
    F: Fn(TcpStream) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    connections.spawn(handle(stream));
                }
                Err(e) => {
                    warn!("{what}: accept: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
}
