//! The floor under P4's first start: the same HTTP requests and the same
//! watch events, of the same objects, against a server that does nothing
//! but what any API server must (parse each request body, serialise each
//! answer and each watch event once), decoded on the client side into
//! `k8s-openapi`'s types: what any client of those types pays. (The
//! operator's watches decode less since 2026-12-07: only what their caches
//! keep, `shardgate_k8s::cache::watched`; the floor stays the same
//! measure, so that part of the operator's gain shows against it.)
//!
//! What the floor leaves out is everything either side decides: no
//! server-side apply merge, managed fields, defaulting, validation or
//! controllers on the server; no caches, reconciles, guest calls, hashing or
//! diffing on the client. So its CPU is what moving P4's traffic through
//! HTTP/1.1 and JSON costs on this machine, for any operator and any API
//! server built on hyper and serde_json, and its wall time the least a first
//! start could take on these cores.
//!
//! The server runs on threads of its own, so the client's CPU (what an
//! operator's side of this traffic costs when the API server runs elsewhere,
//! as in a real cluster) is reported apart from the server's.
//!
//! The traffic is taken from the first start that just ran: per resource,
//! its count of API writes (each one a request whose body is one of that
//! resource's objects, stripped of what the server owns, and whose answer is
//! the stored object) and its count of watch events (each one a stored
//! object as a watch line), over the objects the emulator holds at the end.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{Method, StatusCode, header};
use axum::response::Response;
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Service};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{Api, WatchEvent, WatchParams};
use kube_emulator::Emulator;
use serde::de::{DeserializeOwned, IgnoredAny};
use serde_json::Value;
use shardgate_k8s::crd::ValkeyCluster;
use tokio::sync::mpsc;

/// Requests in flight at once: the operator's reconcile concurrency.
pub const CONCURRENCY: usize = 16;

/// One resource of the replayed traffic.
struct Resource {
    /// The plural, as in the URL.
    plural: &'static str,
    /// The API group path: `api/v1` or `apis/<group>/<version>`.
    prefix: &'static str,
    /// The emulator's resource key (`plural` or `plural.group`), for its
    /// objects and its event count.
    key: &'static str,
    /// Watched by the operator (so its events are decoded on this side).
    watched: bool,
}

const RESOURCES: [Resource; 8] = [
    Resource {
        plural: "services",
        prefix: "api/v1",
        key: "services",
        watched: true,
    },
    Resource {
        plural: "configmaps",
        prefix: "api/v1",
        key: "configmaps",
        watched: true,
    },
    Resource {
        plural: "statefulsets",
        prefix: "apis/apps/v1",
        key: "statefulsets.apps",
        watched: true,
    },
    Resource {
        plural: "pods",
        prefix: "api/v1",
        key: "pods",
        watched: true,
    },
    Resource {
        plural: "poddisruptionbudgets",
        prefix: "apis/policy/v1",
        key: "poddisruptionbudgets.policy",
        watched: true,
    },
    Resource {
        plural: "valkeyclusters",
        prefix: "apis/shardgate.io/v1alpha1",
        key: "valkeyclusters.shardgate.io",
        watched: true,
    },
    // Each cluster's generated passwords and ACL, read by name, never
    // watched.
    Resource {
        plural: "secrets",
        prefix: "api/v1",
        key: "secrets",
        watched: false,
    },
    // kube's event recorder writes events.k8s.io/v1 Events.
    Resource {
        plural: "events",
        prefix: "apis/events.k8s.io/v1",
        key: "events.events.k8s.io",
        watched: false,
    },
];

/// What a floor run did and cost.
pub struct Floor {
    pub writes: u64,
    /// Watch events decoded, and how many the first start emitted.
    pub events: u64,
    pub expected_events: u64,
    pub seconds: f64,
    /// The whole process's CPU over the replay: client and server.
    pub cpu_seconds: f64,
    /// The server's threads' share of it.
    pub server_cpu_seconds: f64,
}

impl Floor {
    /// The client's share: what an operator's side of this traffic costs.
    pub fn client_cpu_seconds(&self) -> f64 {
        self.cpu_seconds - self.server_cpu_seconds
    }
}

/// The floor server's thread name.
const SERVER_THREAD: &str = "floor-server";

/// CPU seconds of this process's threads named `name`, from each thread's
/// `/proc/self/task/<tid>/stat` through `cpu_of_stat`.
pub fn threads_cpu_seconds(name: &str, cpu_of_stat: &impl Fn(&str) -> f64) -> f64 {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return 0.0;
    };
    tasks
        .flatten()
        .filter(|t| {
            std::fs::read_to_string(t.path().join("comm")).is_ok_and(|c| c.trim_end() == name)
        })
        .map(|t| cpu_of_stat(&std::fs::read_to_string(t.path().join("stat")).unwrap_or_default()))
        .sum()
}

/// One write to replay: where it goes and what it carries.
struct Write {
    path: String,
    status: bool,
    body: Value,
}

/// The server's side: every stored object by path, and each watched
/// resource's event channel (taken by its one watch).
struct Server {
    objects: HashMap<String, Arc<Value>>,
    watches: Mutex<HashMap<&'static str, mpsc::UnboundedReceiver<Bytes>>>,
    senders: HashMap<&'static str, mpsc::UnboundedSender<Bytes>>,
}

fn watch_line(object: &[u8]) -> Bytes {
    let mut line = Vec::with_capacity(object.len() + 32);
    line.extend_from_slice(b"{\"type\":\"MODIFIED\",\"object\":");
    line.extend_from_slice(object);
    line.extend_from_slice(b"}\n");
    Bytes::from(line)
}

/// The resource a request path names: the segment after the group and
/// version, past `namespaces/<ns>` when there is one.
fn plural_of(path: &str) -> Option<&'static str> {
    let segs: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    let rest = match segs.as_slice() {
        ["api", _, rest @ ..] | ["apis", _, _, rest @ ..] => rest,
        _ => return None,
    };
    let plural = match rest {
        ["namespaces", _, plural, ..] => plural,
        [plural, ..] => plural,
        [] => return None,
    };
    RESOURCES.iter().map(|r| r.plural).find(|p| p == plural)
}

async fn handle(State(server): State<Arc<Server>>, req: Request) -> Response {
    let path = req.uri().path().to_string();
    let watch = req.uri().query().is_some_and(|q| q.contains("watch=true"));
    let method = req.method().clone();
    let body = axum::body::to_bytes(req.into_body(), 64 << 20)
        .await
        .unwrap_or_default();
    if method == Method::GET && watch {
        let rx = plural_of(&path).and_then(|p| server.watches.lock().unwrap().remove(p));
        let Some(rx) = rx else {
            return Response::builder()
                .status(StatusCode::NOT_FOUND)
                .body(Body::empty())
                .expect("a response");
        };
        let lines = futures::stream::unfold(rx, |mut rx| async move {
            let line = rx.recv().await?;
            Some((Ok::<_, std::io::Error>(line), rx))
        });
        return Response::builder()
            .header(header::CONTENT_TYPE, "application/json")
            .body(Body::from_stream(lines))
            .expect("a response");
    }
    // A write: parse what was sent, answer with the stored object, and offer
    // it to the resource's watch as the one serialisation of it.
    let parsed: Result<Value, _> = serde_json::from_slice(&body);
    let key = path.strip_suffix("/status").unwrap_or(&path);
    let (Ok(_), Some(object)) = (parsed, server.objects.get(key)) else {
        return Response::builder()
            .status(StatusCode::BAD_REQUEST)
            .body(Body::from(format!("floor: no object at {key}")))
            .expect("a response");
    };
    let bytes = Bytes::from(serde_json::to_vec(&**object).expect("a Value serialises"));
    if let Some(tx) = plural_of(key).and_then(|p| server.senders.get(p)) {
        let _ = tx.send(watch_line(&bytes));
    }
    Response::builder()
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(bytes))
        .expect("a response")
}

/// The object as a client would send it: without what the server owns.
fn request_body(object: &Value, status: bool) -> Value {
    let mut body = object.clone();
    if let Some(meta) = body["metadata"].as_object_mut() {
        for f in [
            "managedFields",
            "resourceVersion",
            "uid",
            "creationTimestamp",
            "generation",
        ] {
            meta.remove(f);
        }
    }
    if let Some(map) = body.as_object_mut() {
        if status {
            map.remove("spec");
        } else {
            map.remove("status");
        }
    }
    body
}

fn path_of(r: &Resource, object: &Value) -> String {
    let meta = &object["metadata"];
    format!(
        "/{}/namespaces/{}/{}/{}",
        r.prefix,
        meta["namespace"].as_str().unwrap_or_default(),
        r.plural,
        meta["name"].as_str().unwrap_or_default()
    )
}

/// Decodes `expected` events of one watched resource as `K`, as the
/// operator's watch does.
async fn decode<K>(client: kube::Client, expected: u64) -> anyhow::Result<u64>
where
    K: kube::Resource<DynamicType = ()> + Clone + DeserializeOwned + std::fmt::Debug,
{
    if expected == 0 {
        return Ok(0);
    }
    let api: Api<K> = Api::all(client);
    let mut stream = api.watch(&WatchParams::default(), "0").await?.boxed();
    let mut seen = 0;
    while let Some(event) = stream.try_next().await? {
        match event {
            WatchEvent::Modified(o) => {
                std::hint::black_box(o);
                seen += 1;
            }
            other => anyhow::bail!("floor: unexpected watch event {other:?}"),
        }
        if seen == expected {
            break;
        }
    }
    Ok(seen)
}

/// Replays the traffic `emu`'s last phase counted (`writes` and `events`
/// from it) against the floor server, and measures it; `cpu_of_stat` reads
/// CPU seconds from a `/proc` `stat` line.
pub async fn run(
    emu: &Emulator,
    writes: &kube_emulator::WriteCounts,
    events: &BTreeMap<String, u64>,
    cpu_of_stat: impl Fn(&str) -> f64,
) -> anyhow::Result<Floor> {
    let cpu_seconds =
        || cpu_of_stat(&std::fs::read_to_string("/proc/self/stat").unwrap_or_default());
    // The objects, and the writes of each namespace in turn.
    let mut objects = HashMap::new();
    let mut per_namespace: BTreeMap<String, Vec<Write>> = BTreeMap::new();
    let mut extra_events: Vec<(&'static str, Vec<Arc<Value>>, u64)> = Vec::new();
    let mut total_writes = 0;
    for r in &RESOURCES {
        let stored = emu.list_shared(r.key, None);
        let counted = |status: bool| -> u64 {
            writes
                .iter()
                .filter(|((_, res), _)| {
                    res.strip_suffix("/status").unwrap_or(res) == r.plural
                        && res.ends_with("/status") == status
                })
                .map(|(_, n)| n)
                .sum()
        };
        let (main, status) = (counted(false), counted(true));
        total_writes += main + status;
        let mut by_ns: BTreeMap<&str, Vec<&Arc<Value>>> = BTreeMap::new();
        for o in &stored {
            objects.insert(path_of(r, o), o.clone());
            by_ns
                .entry(o["metadata"]["namespace"].as_str().unwrap_or_default())
                .or_default()
                .push(o);
        }
        if (main + status > 0) && by_ns.is_empty() {
            anyhow::bail!("floor: {} writes but no {} stored", main + status, r.plural);
        }
        // Each namespace gets its share of the writes, over its objects.
        let namespaces = by_ns.len() as u64;
        for (is_status, count) in [(false, main), (true, status)] {
            for (i, (ns, objs)) in by_ns.iter().enumerate() {
                let share = count / namespaces + u64::from((i as u64) < count % namespaces);
                for k in 0..share as usize {
                    let o = objs[k % objs.len()];
                    per_namespace
                        .entry(ns.to_string())
                        .or_default()
                        .push(Write {
                            path: path_of(r, o),
                            status: is_status,
                            body: request_body(o, is_status),
                        });
                }
            }
        }
        // Events beyond the API writes' own: the controllers' writes (Pods
        // created and started, StatefulSet status), sent by the server.
        let emitted = events.get(r.key).copied().unwrap_or(0);
        if r.watched && emitted > main + status {
            extra_events.push((r.plural, stored.clone(), emitted - main - status));
        }
    }

    let mut senders = HashMap::new();
    let mut watches = HashMap::new();
    for r in RESOURCES.iter().filter(|r| r.watched) {
        let (tx, rx) = mpsc::unbounded_channel();
        senders.insert(r.plural, tx);
        watches.insert(r.plural, rx);
    }
    let server = Arc::new(Server {
        objects,
        watches: Mutex::new(watches),
        senders,
    });
    // The server runs on threads of its own, so that its CPU is counted
    // apart from the client's.
    let server_runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name(SERVER_THREAD)
        .enable_all()
        .build()?;
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    listener.set_nonblocking(true)?;
    let url = format!("http://{}", listener.local_addr()?);
    let app = axum::Router::new()
        .fallback(handle)
        .with_state(server.clone());
    let serving = server_runtime
        .spawn(async move { axum::serve(tokio::net::TcpListener::from_std(listener)?, app).await });
    let client = kube::Client::try_from(kube::Config::new(url.parse()?))?;

    let expected = |plural: &str| -> u64 {
        let key = RESOURCES
            .iter()
            .find(|r| r.plural == plural)
            .map_or("", |r| r.key);
        events.get(key).copied().unwrap_or(0)
    };
    let expected_events = RESOURCES
        .iter()
        .filter(|r| r.watched)
        .map(|r| expected(r.plural))
        .sum();
    let started = Instant::now();
    let cpu_before = cpu_seconds();
    let server_cpu_before = threads_cpu_seconds(SERVER_THREAD, &cpu_of_stat);
    let watchers = futures::future::try_join5(
        tokio::spawn(decode::<Service>(client.clone(), expected("services"))),
        tokio::spawn(decode::<ConfigMap>(client.clone(), expected("configmaps"))),
        tokio::spawn(decode::<StatefulSet>(
            client.clone(),
            expected("statefulsets"),
        )),
        tokio::spawn(decode::<Pod>(client.clone(), expected("pods"))),
        tokio::spawn(decode::<ValkeyCluster>(
            client.clone(),
            expected("valkeyclusters"),
        )),
    );
    let budgets = tokio::spawn(decode::<PodDisruptionBudget>(
        client.clone(),
        expected("poddisruptionbudgets"),
    ));
    // The controllers' events, serialised by the server as it goes.
    let extras = server_runtime.spawn({
        let server = server.clone();
        async move {
            for (plural, objects, count) in extra_events {
                let tx = &server.senders[plural];
                for k in 0..count as usize {
                    let o = &objects[k % objects.len()];
                    let bytes = serde_json::to_vec(&**o).expect("a Value serialises");
                    let _ = tx.send(watch_line(&bytes));
                    if k % 64 == 0 {
                        tokio::task::yield_now().await;
                    }
                }
            }
        }
    });
    // The writes: CONCURRENCY namespaces at a time, each one's in order.
    let queue: Vec<Vec<Write>> = per_namespace.into_values().collect();
    let queue = Arc::new(queue);
    let next = Arc::new(AtomicUsize::new(0));
    let mut workers = Vec::new();
    for _ in 0..CONCURRENCY {
        let (queue, next, client) = (queue.clone(), next.clone(), client.clone());
        workers.push(tokio::spawn(async move {
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(writes) = queue.get(i) else {
                    return Ok::<_, kube::Error>(());
                };
                for w in writes {
                    let body = serde_json::to_vec(&w.body).expect("a Value serialises");
                    let path = if w.status {
                        format!("{}/status", w.path)
                    } else {
                        w.path.clone()
                    };
                    let request = http::Request::patch(path)
                        .header(header::CONTENT_TYPE, "application/apply-patch+yaml")
                        .body(body)
                        .expect("a request");
                    client.request::<IgnoredAny>(request).await?;
                }
            }
        }));
    }
    for w in workers {
        w.await??;
    }
    extras.await?;
    let (s, c, t, p, v) = watchers.await?;
    let decoded = s? + c? + t? + p? + v? + budgets.await??;
    let floor = Floor {
        writes: total_writes,
        events: decoded,
        expected_events,
        seconds: started.elapsed().as_secs_f64(),
        cpu_seconds: cpu_seconds() - cpu_before,
        server_cpu_seconds: threads_cpu_seconds(SERVER_THREAD, &cpu_of_stat) - server_cpu_before,
    };
    serving.abort();
    server_runtime.shutdown_background();
    Ok(floor)
}
