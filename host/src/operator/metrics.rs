//! Prometheus metrics: reconciles, their duration and errors, API writes by
//! verb and resource, and guest call time.

use std::sync::Mutex;
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct WriteLabels {
    pub verb: &'static str,
    pub resource: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ErrorLabels {
    pub reason: &'static str,
}

pub struct Metrics {
    registry: Mutex<Registry>,
    pub reconciles: Counter,
    pub reconcile_errors: Family<ErrorLabels, Counter>,
    pub reconcile_seconds: Histogram,
    pub guest_seconds: Histogram,
    pub api_writes: Family<WriteLabels, Counter>,
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::with_prefix("shardgate");
        let reconciles = Counter::default();
        let reconcile_errors = Family::<ErrorLabels, Counter>::default();
        let reconcile_seconds = Histogram::new(exponential_buckets(0.0005, 2.0, 16));
        let guest_seconds = Histogram::new(exponential_buckets(0.00001, 2.0, 18));
        let api_writes = Family::<WriteLabels, Counter>::default();
        registry.register("reconciles", "Reconciles run", reconciles.clone());
        registry.register(
            "reconcile_errors",
            "Reconciles that failed, by reason",
            reconcile_errors.clone(),
        );
        registry.register(
            "reconcile_duration_seconds",
            "Reconcile duration",
            reconcile_seconds.clone(),
        );
        registry.register(
            "guest_call_duration_seconds",
            "Time in the reconcile module per call",
            guest_seconds.clone(),
        );
        registry.register(
            "api_writes",
            "Kubernetes API writes, by verb and resource",
            api_writes.clone(),
        );
        Metrics {
            registry: Mutex::new(registry),
            reconciles,
            reconcile_errors,
            reconcile_seconds,
            guest_seconds,
            api_writes,
        }
    }
}

impl Metrics {
    pub fn write(&self, verb: &'static str, resource: &'static str) {
        self.api_writes
            .get_or_create(&WriteLabels { verb, resource })
            .inc();
    }

    pub fn error(&self, reason: &'static str) {
        self.reconcile_errors
            .get_or_create(&ErrorLabels { reason })
            .inc();
    }

    pub fn observe_guest(&self, d: Duration) {
        self.guest_seconds.observe(d.as_secs_f64());
    }

    /// Registers an extra metric (e.g. module info).
    pub fn register(
        &self,
        name: &str,
        help: &str,
        metric: impl prometheus_client::registry::Metric,
    ) {
        self.registry.lock().unwrap().register(name, help, metric);
    }

    /// The OpenMetrics text exposition.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        let registry = self.registry.lock().unwrap();
        prometheus_client::encoding::text::encode(&mut out, &registry)
            .expect("encoding to a String");
        out
    }
}
