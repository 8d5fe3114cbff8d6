//! `shardgate webhook`: a `ValidatingAdmissionWebhook` for ValkeyClusters
//! that runs the same reconcile module as the operator and `check`.
//!
//! A create or update is admitted only if the module accepts the cluster:
//! every error the guest's validation finds (each naming its field), plus
//! what the CRD's CEL rules cannot express — generated object names that
//! collide with another cluster's in the namespace. Warnings are returned as
//! admission warnings (`kubectl` prints them). Deletes are always admitted. A
//! module failure (trap, deadline, memory cap) denies with that reason: the
//! webhook fails closed, and the configuration's `failurePolicy` decides what
//! the API server does when the webhook itself is unreachable.

mod tls;

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::State;
use axum::routing::{get, post};
use axum::{Json, Router};
use kube::ResourceExt;
use kube::core::DynamicObject;
use kube::core::admission::{AdmissionRequest, AdmissionResponse, AdmissionReview, Operation};
use shardgate_contract::model::{Input, Observed, Severity};
use tracing::{info, warn};

use shardgate_k8s::{convert, manifest};
use shardgate_wasm::Reconciler;
pub use tls::{TlsFiles, TlsListener};

/// The names of the other ValkeyClusters in a namespace, for the collision
/// check.
pub trait ClusterNames: Send + Sync {
    /// The names of the ValkeyClusters in `namespace`.
    fn names(&self, namespace: &str) -> Vec<String>;
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
    let input = Input {
        cluster: convert::cluster(&cluster),
        observed: Observed::default(),
        other_clusters: others,
    };
    match module.reconcile(&input) {
        Err(e) => response.deny(format!("the reconcile module failed: {e}")),
        Ok(Err(invalid)) => {
            let message = invalid
                .violations
                .iter()
                .filter(|v| v.severity == Severity::Error)
                .map(|v| format!("{}: {}", v.field, v.message))
                .collect::<Vec<_>>()
                .join("; ");
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

struct AppState {
    module: Arc<dyn Reconciler>,
    clusters: Arc<dyn ClusterNames>,
}

/// The webhook's routes: `POST /validate` and `GET /healthz`.
pub fn router(module: Arc<dyn Reconciler>, clusters: Arc<dyn ClusterNames>) -> Router {
    Router::new()
        .route("/validate", post(validate))
        .route("/healthz", get(|| async { "ok" }))
        .with_state(Arc::new(AppState { module, clusters }))
}

async fn validate(
    State(state): State<Arc<AppState>>,
    Json(body): Json<AdmissionReview<DynamicObject>>,
) -> Json<AdmissionReview<DynamicObject>> {
    let state2 = state.clone();
    let decided =
        tokio::task::spawn_blocking(move || review(&*state2.module, &*state2.clusters, body)).await;
    match decided {
        Ok(r) => Json(r),
        Err(e) => {
            warn!(error = %e, "review task failed");
            Json(AdmissionResponse::invalid(format!("internal error: {e}")).into_review())
        }
    }
}

/// How `shardgate webhook` serves.
pub struct Options {
    pub listen: SocketAddr,
    pub tls: TlsFiles,
}

/// Serves the webhook over TLS until `shutdown` resolves.
pub async fn serve(
    options: Options,
    module: Arc<dyn Reconciler>,
    clusters: Arc<dyn ClusterNames>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let listener = TlsListener::bind(options.listen, options.tls).await?;
    info!(addr = %listener.local_addr()?, "serving the admission webhook");
    axum::serve(listener, router(module, clusters))
        .with_graceful_shutdown(shutdown)
        .await?;
    Ok(())
}
