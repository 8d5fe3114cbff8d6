//! The operator's side of hot-swappable modules: what the swap manager
//! reports becomes metrics and Kubernetes Events ([`ModuleReporter`]), and a
//! module source is followed, a file by the manager's own follower, a
//! ConfigMap through the API ([`follow`]).
//!
//! Events are recorded against [`ModuleReporter::set_events`]' object
//! reference: the ConfigMap for a ConfigMap source, else the operator's own
//! Pod (`POD_NAME` in `POD_NAMESPACE`, see `shardgate run`).

use std::sync::{Arc, Mutex};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, ObjectReference};
use kube::api::Api;
use kube::runtime::{WatchStreamExt, watcher};
use shardgate_k8s::events::{EventType, Note, Recorder};
use shardgate_wasm::swap::source::{Offers, follow_file};
use shardgate_wasm::swap::{Checker, ModuleManager, ModuleSource, Observer, Serving};
use tracing::{info, warn};

use crate::metrics::Metrics;

struct EventSink {
    recorder: Recorder,
    reference: ObjectReference,
}

/// Turns what the module manager reports into metrics
/// (`shardgate_module_info`, `_swaps_total`, `_rollbacks_total`) and
/// `ModuleRejected`/`ModuleRolledBack` Events.
pub struct ModuleReporter {
    metrics: Arc<Metrics>,
    events: Mutex<Option<Arc<EventSink>>>,
}

impl ModuleReporter {
    /// Reports into `metrics`; Events only once [`Self::set_events`] is
    /// called.
    pub fn new(metrics: Arc<Metrics>) -> Arc<Self> {
        Arc::new(ModuleReporter {
            metrics,
            events: Mutex::new(None),
        })
    }

    /// The metrics reported into.
    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    /// Records Events about `reference` through `client`.
    pub fn set_events(&self, client: kube::Client, instance: &str, reference: ObjectReference) {
        *self.events.lock().unwrap() = Some(Arc::new(EventSink {
            recorder: Recorder::new(client, "shardgate", instance),
            reference,
        }));
    }

    /// Whether Events are recorded.
    pub fn has_events(&self) -> bool {
        self.events.lock().unwrap().is_some()
    }
}

impl Observer for ModuleReporter {
    fn serving(&self, replaced: Option<&Serving>, serving: &Serving) {
        self.metrics.set_module(
            replaced.map(|r| (r.digest.as_str(), r.source.as_str())),
            &serving.digest,
            &serving.source,
        );
    }

    fn checked(&self, result: &'static str) {
        self.metrics.module_swap(result);
    }

    fn rolled_back(&self) {
        self.metrics.module_rollbacks.inc();
    }

    fn warning(&self, reason: &'static str, action: &'static str, note: String) {
        let Some(sink) = self.events.lock().unwrap().clone() else {
            return;
        };
        let Ok(handle) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let metrics = self.metrics.clone();
        handle.spawn(async move {
            let ev = Note {
                type_: EventType::Warning,
                reason: reason.into(),
                note: note.chars().take(1000).collect(),
                action: action.into(),
            };
            match sink.recorder.publish(&ev, &sink.reference).await {
                Ok(()) => metrics.write("create", "events"),
                Err(e) => warn!(error = %e, reason, "could not record an event"),
            }
        });
    }
}

/// The object module Events are recorded against when the source is not a
/// ConfigMap: the operator's own Pod.
pub fn pod_reference(namespace: &str, name: &str) -> ObjectReference {
    ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("Pod".into()),
        namespace: Some(namespace.into()),
        name: Some(name.into()),
        ..ObjectReference::default()
    }
}

/// The object module Events are recorded against for `source`: the
/// ConfigMap itself, else the operator's Pod (`identity` in `namespace`).
pub fn event_reference(source: &ModuleSource, namespace: &str, identity: &str) -> ObjectReference {
    match source {
        ModuleSource::ConfigMap {
            namespace, name, ..
        } => ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("ConfigMap".into()),
            namespace: Some(namespace.clone()),
            name: Some(name.clone()),
            ..ObjectReference::default()
        },
        _ => pod_reference(namespace, identity),
    }
}

/// Follows `source` until the task is aborted, offering every new version
/// to `manager`. `Embedded` returns at once; `ConfigMap` needs `client`.
/// `initial` is the digest already serving from this source, if any.
pub fn follow(
    manager: Arc<ModuleManager>,
    checker: Checker,
    source: ModuleSource,
    client: Option<kube::Client>,
    initial: Option<String>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let result = match &source {
            ModuleSource::Embedded => Ok(()),
            ModuleSource::File { path, .. } => {
                follow_file(&manager, &checker, &source, path, initial).await
            }
            ModuleSource::ConfigMap { .. } => match client {
                Some(client) => {
                    follow_config_map(&manager, &checker, &source, client, initial).await
                }
                None => Err(anyhow::anyhow!(
                    "a ConfigMap source needs a Kubernetes client"
                )),
            },
        };
        if let Err(e) = result {
            warn!(source = %source.label(), error = %e, "module source watch stopped");
        }
    })
}

/// Follows a ConfigMap source through the API.
async fn follow_config_map(
    manager: &ModuleManager,
    checker: &Checker,
    source: &ModuleSource,
    client: kube::Client,
    initial: Option<String>,
) -> anyhow::Result<()> {
    let ModuleSource::ConfigMap {
        namespace,
        name,
        key,
        ..
    } = source
    else {
        anyhow::bail!("not a ConfigMap source: {}", source.label());
    };
    let api: Api<ConfigMap> = Api::namespaced(client, namespace);
    let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let mut stream = watcher(api, config)
        .default_backoff()
        .applied_objects()
        .boxed();
    info!(configmap = %format!("{namespace}/{name}"), %key, "watching the reconcile module ConfigMap");
    let mut offers = Offers::new(initial);
    while let Some(event) = stream.next().await {
        match event {
            Ok(cm) => match cm.binary_data.as_ref().and_then(|d| d.get(key.as_str())) {
                Some(bytes) => {
                    offers
                        .offer(manager, checker, source, bytes.0.clone())
                        .await
                }
                None => offers.unreadable(
                    manager,
                    source,
                    format!("ConfigMap {namespace}/{name} has no binaryData key {key:?}"),
                ),
            },
            Err(e) => warn!(error = %e, "watching the module ConfigMap"),
        }
    }
    Ok(())
}
