//! `shardgate webhook`: a `ValidatingAdmissionWebhook` for ValkeyClusters
//! that runs the same reconcile module as the operator and `check`.
//!
//! A create or update is admitted only if the module accepts the cluster:
//! every error the guest's validation finds (each naming its field), plus
//! what the CRD's CEL rules cannot express — generated object names that
//! collide with another cluster's in the namespace, and NodePorts another
//! cluster already pins (a port the object pinned before is not checked
//! again, so an update never fails for a clash it did not make). Warnings are returned as
//! admission warnings (`kubectl` prints them). Deletes are always admitted. A
//! module failure (trap, exit, deadline, memory cap, a call abandoned by the
//! wall-clock guard) denies with that reason: the webhook fails closed, and
//! the configuration's `failurePolicy` decides what the API server does when
//! the webhook itself is unreachable.
//!
//! Module calls take a slot of a memory budget ([`Slots`]). A review that
//! finds no free slot waits for one, at most [`Slots::wait`], and then
//! answers HTTP 503 rather than a denial: a valid object is never denied for
//! lack of a slot, and the `failurePolicy` decides.

mod tls;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::{get, post};
use axum::{Json, Router};
use kube::ResourceExt;
use kube::core::DynamicObject;
use kube::core::admission::{AdmissionRequest, AdmissionResponse, AdmissionReview, Operation};
use shardgate_contract::model::{Input, Observed, PinnedPort, Severity, Violation};
use tracing::{info, warn};

use shardgate_k8s::{convert, manifest};
use shardgate_wasm::budget::DEFAULT_WEBHOOK_BUDGET;
use shardgate_wasm::{CallBudget, CallError, Reconciler, guard};
pub use tls::{Limits, TlsConnection, TlsFiles, TlsListener};

/// The names of the other ValkeyClusters in a namespace, for the collision
/// check, and the NodePorts the clusters pin.
pub trait ClusterNames: Send + Sync {
    /// The names of the ValkeyClusters in `namespace`.
    fn names(&self, namespace: &str) -> Vec<String>;

    /// The NodePorts pinned by every cluster but `namespace/name`.
    fn pins(&self, _namespace: &str, _name: &str) -> Vec<PinnedPort> {
        Vec::new()
    }
}

/// No lookups: only the cluster itself is checked.
pub struct NoClusters;

impl ClusterNames for NoClusters {
    fn names(&self, _: &str) -> Vec<String> {
        Vec::new()
    }
}

impl<F: Fn(&str) -> Vec<String> + Send + Sync> ClusterNames for F {
    fn names(&self, namespace: &str) -> Vec<String> {
        self(namespace)
    }
}

/// A ValkeyCluster store as the source of cluster names.
impl ClusterNames for kube::runtime::reflector::Store<shardgate_k8s::crd::ValkeyCluster> {
    fn names(&self, namespace: &str) -> Vec<String> {
        self.state()
            .iter()
            .filter(|c| c.namespace().as_deref() == Some(namespace))
            .map(|c| c.name_any())
            .collect()
    }

    fn pins(&self, namespace: &str, name: &str) -> Vec<PinnedPort> {
        let state = self.state();
        convert::pinned_elsewhere(state.iter().map(|c| c.as_ref()), namespace, name)
    }
}

/// The NodePorts the object before this update pinned.
fn pinned_before(request: &AdmissionRequest<DynamicObject>) -> Vec<u32> {
    let Some(old) = request
        .old_object
        .as_ref()
        .and_then(|o| serde_json::to_value(o).ok())
        .and_then(|v| manifest::cluster_from_value(v).ok())
    else {
        return Vec::new();
    };
    let c = convert::cluster(&old);
    let Some(pins) = c
        .external_access
        .as_ref()
        .and_then(|ea| ea.node_ports.as_ref())
    else {
        return Vec::new();
    };
    let shards = c.shards.max(0) as u32;
    let nodes = c.replicas.max(0) as u32 + 1;
    shardgate_contract::ports::every_pin(pins, shards, nodes)
        .into_iter()
        .map(|(_, _, port)| port)
        .collect()
}

/// Decides one AdmissionReview.
pub fn review(
    module: &dyn Reconciler,
    clusters: &dyn ClusterNames,
    review: AdmissionReview<DynamicObject>,
) -> AdmissionReview<DynamicObject> {
    let request: AdmissionRequest<DynamicObject> = match review.try_into() {
        Ok(r) => r,
        Err(e) => return AdmissionResponse::invalid(e.to_string()).into_review(),
    };
    decide(module, clusters, &request).into_review()
}

fn decide(
    module: &dyn Reconciler,
    clusters: &dyn ClusterNames,
    request: &AdmissionRequest<DynamicObject>,
) -> AdmissionResponse {
    let response = AdmissionResponse::from(request);
    if matches!(request.operation, Operation::Delete | Operation::Connect) {
        return response;
    }
    let Some(object) = &request.object else {
        return response.deny("the request has no object");
    };
    let value = match serde_json::to_value(object) {
        Ok(v) => v,
        Err(e) => return response.deny(format!("the object cannot be read: {e}")),
    };
    let mut cluster = match manifest::cluster_from_value(value) {
        Ok(c) => c,
        Err(e) => return response.deny(format!("{e:#}")),
    };
    // The API server fills in the namespace only after admission of a
    // create without one in the body.
    if cluster.metadata.namespace.is_none() {
        cluster.metadata.namespace = request.namespace.clone();
    }
    let namespace = cluster.namespace().unwrap_or_default();
    let name = cluster.name_any();
    let others: Vec<String> = clusters
        .names(&namespace)
        .into_iter()
        .filter(|n| *n != name)
        .collect();
    let before = pinned_before(request);
    let pinned_elsewhere = clusters
        .pins(&namespace, &name)
        .into_iter()
        .filter(|p| !before.contains(&p.port))
        .collect();
    let input = Input {
        cluster: convert::cluster(&cluster),
        observed: Observed::default(),
        other_clusters: others,
        pinned_elsewhere,
        // Admission checks the spec; passwords are the operator's to read.
        credentials: Default::default(),
    };
    match module.reconcile(&input) {
        Err(e) => response.deny(format!("the reconcile module failed: {e}")),
        Ok(Err(invalid)) => {
            let message = errors(&invalid.violations);
            info!(cluster = %name, namespace = %namespace, %message, "denied");
            response.deny(message)
        }
        Ok(Ok(desired)) => {
            let warnings: Vec<String> = desired
                .warnings
                .iter()
                .filter(|v| v.severity == Severity::Warning)
                .map(|v| format!("{}: {}", v.field, v.message))
                .collect();
            let mut response = response;
            if !warnings.is_empty() {
                response.warnings = Some(warnings);
            }
            response
        }
    }
}

/// The default [`Slots::wait`]: below the 5 s `timeoutSeconds` of the
/// webhook configuration, so the API server hears the 503 and applies the
/// `failurePolicy` itself.
pub const SLOT_WAIT: Duration = Duration::from_secs(3);

/// How many module calls run at once (a memory budget, see
/// [`shardgate_wasm::budget`]) and how long a review waits for a free one.
#[derive(Clone, Debug)]
pub struct Slots {
    /// The budget each module call takes a slot of.
    pub budget: CallBudget,
    /// How long a review waits for a free slot before answering 503.
    pub wait: Duration,
}

impl Default for Slots {
    /// [`DEFAULT_WEBHOOK_BUDGET`] for calls with the default limits, and
    /// [`SLOT_WAIT`].
    fn default() -> Self {
        Slots {
            budget: CallBudget::new(
                DEFAULT_WEBHOOK_BUDGET,
                shardgate_wasm::Limits::default().memory_bytes,
            ),
            wait: SLOT_WAIT,
        }
    }
}

struct AppState {
    module: Arc<dyn Reconciler>,
    clusters: Arc<dyn ClusterNames>,
    slots: Slots,
}

/// The webhook's routes: `POST /validate` and `GET /healthz`, with the
/// default [`Slots`].
pub fn router(module: Arc<dyn Reconciler>, clusters: Arc<dyn ClusterNames>) -> Router {
    router_with(module, clusters, Slots::default())
}

/// [`router`] with module calls limited by `slots`.
pub fn router_with(
    module: Arc<dyn Reconciler>,
    clusters: Arc<dyn ClusterNames>,
    slots: Slots,
) -> Router {
    Router::new()
        .route("/validate", post(validate))
        .route("/healthz", get(|| async { "ok" }))
        .with_state(Arc::new(AppState {
            module,
            clusters,
            slots,
        }))
}

/// The answer to a review whose module call failed before it answered: a
/// denial naming the failure when the module is at fault (the webhook
/// fails closed), else an HTTP 503, so that the API server's
/// `failurePolicy` decides (no free slot, host error).
fn unanswered(
    request: &AdmissionRequest<DynamicObject>,
    error: &CallError,
) -> Result<AdmissionResponse, (StatusCode, String)> {
    if error.is_module_failure() {
        Ok(AdmissionResponse::from(request).deny(format!("the reconcile module failed: {error}")))
    } else {
        Err((StatusCode::SERVICE_UNAVAILABLE, error.to_string()))
    }
}

/// Decides one AdmissionReview as [`review`] does, with the module call in
/// a slot of `slots` and under the wall-clock guard
/// ([`shardgate_wasm::guard`]). `Err` is an HTTP status and message.
pub async fn review_guarded(
    module: Arc<dyn Reconciler>,
    clusters: Arc<dyn ClusterNames>,
    slots: &Slots,
    review: AdmissionReview<DynamicObject>,
) -> Result<AdmissionReview<DynamicObject>, (StatusCode, String)> {
    let request: Arc<AdmissionRequest<DynamicObject>> = match review.try_into() {
        Ok(r) => Arc::new(r),
        Err(e) => return Ok(AdmissionResponse::invalid(e.to_string()).into_review()),
    };
    let deadline = guard::deadline_of(&*module);
    let asked = request.clone();
    let decided = guard::call(&slots.budget, Some(slots.wait), deadline, move || {
        decide(&*module, &*clusters, &asked)
    })
    .await;
    match decided {
        Ok(response) => Ok(response.into_review()),
        Err(e) => {
            warn!(error = %e, uid = %request.uid, "no answer from the reconcile module");
            unanswered(&request, &e).map(AdmissionResponse::into_review)
        }
    }
}

async fn validate(
    State(state): State<Arc<AppState>>,
    Json(body): Json<AdmissionReview<DynamicObject>>,
) -> Result<Json<AdmissionReview<DynamicObject>>, (StatusCode, String)> {
    review_guarded(
        state.module.clone(),
        state.clusters.clone(),
        &state.slots,
        body,
    )
    .await
    .map(Json)
}

/// How `shardgate webhook` serves.
pub struct Options {
    pub listen: SocketAddr,
    pub tls: TlsFiles,
    /// Module call slots (`--module-memory-budget`).
    pub slots: Slots,
}

/// Serves the webhook over TLS, with the default [`Limits`], until
/// `shutdown` resolves.
pub async fn serve(
    options: Options,
    module: Arc<dyn Reconciler>,
    clusters: Arc<dyn ClusterNames>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let listener = TlsListener::bind(options.listen, options.tls).await?;
    info!(addr = %listener.local_addr()?, "serving the admission webhook");
    listener
        .serve(router_with(module, clusters, options.slots), shutdown)
        .await
}

/// The errors among `violations`, as one denial message: `field: message`,
/// joined with `; `.
fn errors(violations: &[Violation]) -> String {
    violations
        .iter()
        .filter(|v| v.severity == Severity::Error)
        .map(|v| format!("{}: {}", v.field, v.message))
        .collect::<Vec<_>>()
        .join("; ")
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::Instant;

    use serde_json::{Value, json};
    use shardgate_contract::model::{Cluster, Desired, Error as GuestError, Violation};

    use super::*;

    /// Answers every cluster, or blocks the calling thread (as a host call
    /// stuck outside the epoch deadline would) until released.
    struct Module {
        stuck: Arc<AtomicBool>,
    }

    impl Reconciler for Module {
        fn reconcile(&self, _: &Input) -> Result<Result<Desired, GuestError>, CallError> {
            let started = Instant::now();
            while self.stuck.load(Ordering::Relaxed) && started.elapsed() < Duration::from_secs(60)
            {
                std::thread::sleep(Duration::from_millis(5));
            }
            Ok(Ok(Desired::default()))
        }
        fn validate(&self, _: &Cluster) -> Result<Vec<Violation>, CallError> {
            Ok(Vec::new())
        }
        fn deadline(&self) -> Option<Duration> {
            Some(Duration::from_millis(50))
        }
    }

    fn admission(name: &str) -> AdmissionReview<DynamicObject> {
        let object = json!({
            "apiVersion": "shardgate.io/v1alpha1",
            "kind": "ValkeyCluster",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"shards": 1},
        });
        serde_json::from_value(json!({
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {
                "uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
                "kind": {"group": "shardgate.io", "version": "v1alpha1", "kind": "ValkeyCluster"},
                "resource": {"group": "shardgate.io", "version": "v1alpha1", "resource": "valkeyclusters"},
                "name": name,
                "namespace": "default",
                "operation": "CREATE",
                "userInfo": {"username": "admin"},
                "object": object,
                "dryRun": false,
            }
        }))
        .unwrap()
    }

    fn verdict(review: &AdmissionReview<DynamicObject>) -> (bool, String) {
        let v: Value = serde_json::to_value(review).unwrap();
        let response = &v["response"];
        (
            response["allowed"].as_bool().unwrap(),
            response["status"]["message"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
        )
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_stuck_module_is_denied_and_a_full_budget_answers_503_not_a_denial() {
        let stuck = Arc::new(AtomicBool::new(false));
        let module: Arc<dyn Reconciler> = Arc::new(Module {
            stuck: stuck.clone(),
        });
        let clusters: Arc<dyn ClusterNames> = Arc::new(NoClusters);
        let slots = Slots {
            budget: CallBudget::new(1, 1),
            wait: Duration::from_millis(100),
        };
        let admitted = review_guarded(module.clone(), clusters.clone(), &slots, admission("a"))
            .await
            .unwrap();
        assert_eq!(verdict(&admitted), (true, String::new()));

        // Stuck in host code: abandoned after its deadline plus the margin,
        // and denied naming the deadline (the module is at fault).
        stuck.store(true, Ordering::Relaxed);
        let denied = review_guarded(module.clone(), clusters.clone(), &slots, admission("b"))
            .await
            .unwrap();
        let (allowed, message) = verdict(&denied);
        assert!(!allowed);
        assert!(message.contains("deadline of 50ms"), "{message}");

        // The stuck call still holds the only slot: the next review waits,
        // then answers 503 so that the failurePolicy decides.
        let (status, message) =
            review_guarded(module.clone(), clusters.clone(), &slots, admission("c"))
                .await
                .unwrap_err();
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
        assert!(
            message.contains("no reconcile module call slot"),
            "{message}"
        );

        // A review that finds the slot freed while it waits is answered.
        let waiting = tokio::spawn({
            let (module, clusters) = (module.clone(), clusters.clone());
            let slots = Slots {
                wait: Duration::from_secs(30),
                ..slots.clone()
            };
            async move { review_guarded(module, clusters, &slots, admission("d")).await }
        });
        stuck.store(false, Ordering::Relaxed);
        let answered = waiting.await.unwrap().unwrap();
        assert_eq!(verdict(&answered), (true, String::new()));
    }
}
