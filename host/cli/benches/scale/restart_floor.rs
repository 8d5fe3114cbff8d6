//! The floor under P4's restart: what a new operator on converged state
//! must at least ask the API server, through HTTP and JSON with no logic on
//! either side, decoded on the client into `k8s-openapi`'s types (the
//! operator's watches decode only what their caches keep, as in
//! [`super::floor`]).
//!
//! The traffic, as the operator's restart makes it (`controller.rs`,
//! `reconcile/credentials.rs`):
//! - **the lists** of every kind it watches, each kind at once as its
//!   watches start: the ValkeyClusters and the Nodes, and the managed
//!   Services, ConfigMaps, StatefulSets, Pods and PodDisruptionBudgets (with
//!   the operator's label selector), each from `resourceVersion=0` in pages
//!   of the operator's `LIST_PAGE_SIZE` (100), through a `kube::Client` into
//!   `k8s-openapi`'s types and shardgate's `ValkeyCluster`;
//! - **each watch opened** from its list's resourceVersion (the response's
//!   headers; on converged state no event follows);
//! - **the Secret reads by name** each cluster's reconcile makes, once per
//!   cluster: its system Secret and its users Secret (both read by
//!   `credentials::resolve`, which creates them only when missing) and its
//!   ACL Secret (read by `credentials::deliver_acl`, written only when the
//!   aclfile changed). These run after every list is in, as the operator's
//!   reconciles wait for its caches, with the operator's reconcile
//!   concurrency bound (one cluster's reads in order).
//!
//! The server serialises each page and each Secret once per request from
//! the objects the emulator holds, and does nothing else. Left out, on the
//! server: selector matching (every listed object is managed, so the
//! selector matches all), resourceVersion consistency, watch caches; on the
//! client: the operator's API discovery (a few small GETs for the Gateway
//! API), its caches and their trimming, the controller's queue, the
//! reconciles themselves (the guest call, the desired objects compared with
//! the cached ones, the status computed and found unchanged) and its
//! metrics. So its client CPU is the least a restart on this state costs an
//! operator that lists, watches and reads its Secrets through
//! `kube::Client`; the restart's CPU over it is what the operator adds.
//!
//! The server runs on threads of its own (named [`SERVER_THREAD`]), so the
//! client's CPU is reported apart from the server's, as in
//! [`super::floor`].

use std::collections::HashMap;
use std::io::Write as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::response::Response;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{ConfigMap, Node, Pod, Secret, Service};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{Api, ListParams, WatchParams};
use kube_emulator::Emulator;
use serde::de::DeserializeOwned;
use serde_json::Value;
use shardgate_contract::{labels::MANAGED_SELECTOR, names};
use shardgate_k8s::crd::ValkeyCluster;

use super::floor::{CONCURRENCY, threads_cpu_seconds};

/// The operator's page size for a watch's initial list (`LIST_PAGE_SIZE`
/// in `host/operator/src/controller.rs`).
const PAGE_SIZE: u32 = 100;

/// The restart floor server's thread name (at most 15 bytes: the kernel's
/// `comm`).
const SERVER_THREAD: &str = "restart-floor";

/// One watched kind.
struct Kind {
    plural: &'static str,
    /// The API group path: `api/v1` or `apis/<group>/<version>`.
    prefix: &'static str,
    /// The emulator's resource key, for its objects.
    key: &'static str,
    /// The list's `kind`.
    list_kind: &'static str,
    /// Listed with the operator's managed-objects label selector.
    managed: bool,
}

const KINDS: [Kind; 7] = [
    Kind {
        plural: "valkeyclusters",
        prefix: "apis/shardgate.io/v1alpha1",
        key: "valkeyclusters.shardgate.io",
        list_kind: "ValkeyClusterList",
        managed: false,
    },
    Kind {
        plural: "services",
        prefix: "api/v1",
        key: "services",
        list_kind: "ServiceList",
        managed: true,
    },
    Kind {
        plural: "configmaps",
        prefix: "api/v1",
        key: "configmaps",
        list_kind: "ConfigMapList",
        managed: true,
    },
    Kind {
        plural: "statefulsets",
        prefix: "apis/apps/v1",
        key: "statefulsets.apps",
        list_kind: "StatefulSetList",
        managed: true,
    },
    Kind {
        plural: "pods",
        prefix: "api/v1",
        key: "pods",
        list_kind: "PodList",
        managed: true,
    },
    Kind {
        plural: "poddisruptionbudgets",
        prefix: "apis/policy/v1",
        key: "poddisruptionbudgets.policy",
        list_kind: "PodDisruptionBudgetList",
        managed: true,
    },
    Kind {
        plural: "nodes",
        prefix: "api/v1",
        key: "nodes",
        list_kind: "NodeList",
        managed: false,
    },
];

impl Kind {
    fn list_path(&self) -> String {
        format!("/{}/{}", self.prefix, self.plural)
    }

    fn api_version(&self) -> &'static str {
        self.prefix
            .strip_prefix("apis/")
            .or_else(|| self.prefix.strip_prefix("api/"))
            .unwrap_or(self.prefix)
    }
}

/// What a restart floor run did and cost.
pub struct RestartFloor {
    /// Objects listed, and the pages they came in.
    pub listed: u64,
    pub pages: u64,
    /// Watches opened.
    pub watches: u64,
    /// Secrets read by name.
    pub secret_reads: u64,
    pub seconds: f64,
    /// The whole process's CPU over the run: client and server.
    pub cpu_seconds: f64,
    /// The server's threads' share of it.
    pub server_cpu_seconds: f64,
}

impl RestartFloor {
    /// The client's share: what an operator's side of this traffic costs.
    pub fn client_cpu_seconds(&self) -> f64 {
        self.cpu_seconds - self.server_cpu_seconds
    }
}

/// The server's side: each kind's objects in list order by list path, each
/// Secret by path, and the resourceVersion every list answers with.
struct Server {
    lists: HashMap<String, (&'static Kind, Vec<Arc<Value>>)>,
    secrets: HashMap<String, Arc<Value>>,
    resource_version: String,
    watches: AtomicU64,
}

fn query_param<'q>(query: &'q str, name: &str) -> Option<&'q str> {
    query
        .split('&')
        .find_map(|kv| kv.strip_prefix(name)?.strip_prefix('='))
}

fn response(status: StatusCode, body: Body) -> Response {
    Response::builder()
        .status(status)
        .header(header::CONTENT_TYPE, "application/json")
        .body(body)
        .expect("a response")
}

async fn handle(State(server): State<Arc<Server>>, req: Request) -> Response {
    let path = req.uri().path();
    let query = req.uri().query().unwrap_or_default();
    if let Some((kind, items)) = server.lists.get(path) {
        if query_param(query, "watch") == Some("true") {
            // Converged state: the watch opens and stays quiet.
            server.watches.fetch_add(1, Ordering::Relaxed);
            let quiet = futures::stream::pending::<Result<Bytes, std::io::Error>>();
            return response(StatusCode::OK, Body::from_stream(quiet));
        }
        // One page: `limit` objects from the `continue` token's index,
        // serialised once.
        let start: usize = query_param(query, "continue")
            .and_then(|c| c.parse().ok())
            .unwrap_or(0)
            .min(items.len());
        let limit: usize = query_param(query, "limit")
            .and_then(|l| l.parse().ok())
            .filter(|l| *l > 0)
            .unwrap_or(usize::MAX);
        let end = start.saturating_add(limit).min(items.len());
        let mut body = Vec::with_capacity(64 << 10);
        let _ = write!(
            body,
            r#"{{"kind":"{}","apiVersion":"{}","metadata":{{"resourceVersion":"{}""#,
            kind.list_kind,
            kind.api_version(),
            server.resource_version
        );
        if end < items.len() {
            let _ = write!(body, r#","continue":"{end}""#);
        }
        body.extend_from_slice(br#"},"items":["#);
        for (i, o) in items[start..end].iter().enumerate() {
            if i > 0 {
                body.push(b',');
            }
            serde_json::to_writer(&mut body, &**o).expect("a Value serialises");
        }
        body.extend_from_slice(b"]}");
        return response(StatusCode::OK, Body::from(body));
    }
    match server.secrets.get(path) {
        Some(secret) => response(
            StatusCode::OK,
            Body::from(serde_json::to_vec(&**secret).expect("a Value serialises")),
        ),
        None => response(
            StatusCode::NOT_FOUND,
            Body::from(format!("restart floor: nothing at {path}")),
        ),
    }
}

/// Lists one kind in pages as the operator's watch does, decoding each page
/// into `K`, then opens its watch; returns objects and pages.
async fn list_and_watch<K>(client: kube::Client, managed: bool) -> anyhow::Result<(u64, u64)>
where
    K: kube::Resource<DynamicType = ()> + Clone + DeserializeOwned + std::fmt::Debug,
{
    let api: Api<K> = Api::all(client);
    let mut params = ListParams::default().match_any().limit(PAGE_SIZE);
    let mut watch = WatchParams::default();
    if managed {
        params = params.labels(MANAGED_SELECTOR);
        watch = watch.labels(MANAGED_SELECTOR);
    }
    let (mut objects, mut pages) = (0, 0);
    let resource_version = loop {
        let page = api.list(&params).await?;
        pages += 1;
        objects += page.items.len() as u64;
        std::hint::black_box(page.items);
        match page.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(token) => params = params.continue_token(&token),
            None => break page.metadata.resource_version.unwrap_or_default(),
        }
    };
    // Opened once its response's headers are in.
    let stream = api.watch(&watch, &resource_version).await?;
    drop(stream);
    Ok((objects, pages))
}

/// Runs the restart floor over the state `emu` holds now, and measures it;
/// `cpu_of_stat` reads CPU seconds from a `/proc` `stat` line.
pub async fn run(
    emu: &Emulator,
    cpu_of_stat: impl Fn(&str) -> f64,
) -> anyhow::Result<RestartFloor> {
    let cpu_seconds =
        || cpu_of_stat(&std::fs::read_to_string("/proc/self/stat").unwrap_or_default());
    let mut lists = HashMap::new();
    for kind in &KINDS {
        lists.insert(kind.list_path(), (kind, emu.list_shared(kind.key, None)));
    }
    // The Secrets each cluster's reconcile reads, by namespace, in the order
    // it reads them.
    let mut secrets = HashMap::new();
    let mut reads: Vec<(String, Vec<String>)> = Vec::new();
    for vc in emu.list_shared("valkeyclusters", None) {
        let meta = &vc["metadata"];
        let (ns, cluster) = (
            meta["namespace"].as_str().unwrap_or_default(),
            meta["name"].as_str().unwrap_or_default(),
        );
        let names = [
            names::system_secret(cluster),
            names::users_secret(cluster),
            names::acl_secret(cluster),
        ];
        for name in &names {
            let stored = emu
                .get("secrets", ns, name)
                .ok_or_else(|| anyhow::anyhow!("restart floor: no Secret {ns}/{name}"))?;
            secrets.insert(
                format!("/api/v1/namespaces/{ns}/secrets/{name}"),
                Arc::new(stored),
            );
        }
        reads.push((ns.to_string(), names.to_vec()));
    }
    let server = Arc::new(Server {
        lists,
        secrets,
        resource_version: emu.resource_version().to_string(),
        watches: AtomicU64::new(0),
    });
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

    let started = Instant::now();
    let cpu_before = cpu_seconds();
    let server_cpu_before = threads_cpu_seconds(SERVER_THREAD, &cpu_of_stat);
    // Every kind at once, as the operator's watches start.
    let c = &client;
    let managed = |plural: &str| KINDS.iter().any(|k| k.plural == plural && k.managed);
    let listed = futures::future::try_join_all([
        tokio::spawn(list_and_watch::<ValkeyCluster>(
            c.clone(),
            managed("valkeyclusters"),
        )),
        tokio::spawn(list_and_watch::<Service>(c.clone(), managed("services"))),
        tokio::spawn(list_and_watch::<ConfigMap>(
            c.clone(),
            managed("configmaps"),
        )),
        tokio::spawn(list_and_watch::<StatefulSet>(
            c.clone(),
            managed("statefulsets"),
        )),
        tokio::spawn(list_and_watch::<Pod>(c.clone(), managed("pods"))),
        tokio::spawn(list_and_watch::<PodDisruptionBudget>(
            c.clone(),
            managed("poddisruptionbudgets"),
        )),
        tokio::spawn(list_and_watch::<Node>(c.clone(), managed("nodes"))),
    ])
    .await?;
    let (mut objects, mut pages) = (0, 0);
    for result in listed {
        let (o, p) = result?;
        objects += o;
        pages += p;
    }
    // Then each cluster's Secret reads, CONCURRENCY clusters at a time.
    let reads = Arc::new(reads);
    let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut workers = Vec::new();
    for _ in 0..CONCURRENCY {
        let (reads, next, client) = (reads.clone(), next.clone(), client.clone());
        workers.push(tokio::spawn(async move {
            let mut read = 0u64;
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some((ns, names)) = reads.get(i) else {
                    return Ok::<_, kube::Error>(read);
                };
                let api: Api<Secret> = Api::namespaced(client.clone(), ns);
                for name in names {
                    std::hint::black_box(api.get(name).await?);
                    read += 1;
                }
            }
        }));
    }
    let mut secret_reads = 0;
    for w in workers {
        secret_reads += w.await??;
    }
    let floor = RestartFloor {
        listed: objects,
        pages,
        watches: server.watches.load(Ordering::Relaxed),
        secret_reads,
        seconds: started.elapsed().as_secs_f64(),
        cpu_seconds: cpu_seconds() - cpu_before,
        server_cpu_seconds: threads_cpu_seconds(SERVER_THREAD, &cpu_of_stat) - server_cpu_before,
    };
    serving.abort();
    server_runtime.shutdown_background();
    Ok(floor)
}
