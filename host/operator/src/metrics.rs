//! Prometheus metrics: reconciles, their duration and errors, API writes by
//! verb and resource, and guest call time.

use std::sync::Mutex;
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// `shardgate_api_writes_total`'s labels: the write's verb and resource.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct WriteLabels {
    pub verb: &'static str,
    pub resource: &'static str,
}

/// `shardgate_module_info`'s labels: the serving module's SHA-256 and source.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ModuleLabels {
    pub digest: String,
    pub source: String,
}

/// `shardgate_module_swaps_total`'s label: `accepted` or `rejected`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SwapLabels {
    pub result: &'static str,
}

/// `shardgate_reconcile_errors_total`'s label: why the reconcile failed.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ErrorLabels {
    pub reason: &'static str,
}

/// The operator's Prometheus metrics, all registered under the `shardgate`
/// prefix.
pub struct Metrics {
    registry: Mutex<Registry>,
    pub reconciles: Counter,
    pub reconcile_errors: Family<ErrorLabels, Counter>,
    pub reconcile_seconds: Histogram,
    pub guest_seconds: Histogram,
    pub api_writes: Family<WriteLabels, Counter>,
    /// 1 for the serving module; a swap removes the old label set.
    pub module_info: Family<ModuleLabels, Gauge>,
    /// Candidate modules by `result`: `accepted` or `rejected`.
    pub module_swaps: Family<SwapLabels, Counter>,
    pub module_rollbacks: Counter,
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
        let module_info = Family::<ModuleLabels, Gauge>::default();
        let module_swaps = Family::<SwapLabels, Counter>::default();
        let module_rollbacks = Counter::default();
        registry.register(
            "module_info",
            "The serving reconcile module (1), by SHA-256 digest and source",
            module_info.clone(),
        );
        registry.register(
            "module_swaps",
            "Candidate reconcile modules, by result (accepted, rejected)",
            module_swaps.clone(),
        );
        registry.register(
            "module_rollbacks",
            "Rollbacks to the previous reconcile module after repeated reconcile-time failures",
            module_rollbacks.clone(),
        );
        Metrics {
            registry: Mutex::new(registry),
            module_info,
            module_swaps,
            module_rollbacks,
            reconciles,
            reconcile_errors,
            reconcile_seconds,
            guest_seconds,
            api_writes,
        }
    }
}

impl Metrics {
    /// Counts one API write of `verb` on `resource`.
    pub fn write(&self, verb: &'static str, resource: &'static str) {
        self.api_writes
            .get_or_create(&WriteLabels { verb, resource })
            .inc();
    }

    /// Counts one failed reconcile, by `reason`.
    pub fn error(&self, reason: &'static str) {
        self.reconcile_errors
            .get_or_create(&ErrorLabels { reason })
            .inc();
    }

    /// Marks `digest` from `source` as serving, removing `old`'s label set.
    pub fn set_module(&self, old: Option<(&str, &str)>, digest: &str, source: &str) {
        if let Some((d, s)) = old {
            self.module_info.remove(&ModuleLabels {
                digest: d.to_string(),
                source: s.to_string(),
            });
        }
        self.module_info
            .get_or_create(&ModuleLabels {
                digest: digest.to_string(),
                source: source.to_string(),
            })
            .set(1);
    }

    /// Counts a candidate module: `accepted` or `rejected`.
    pub fn module_swap(&self, result: &'static str) {
        self.module_swaps
            .get_or_create(&SwapLabels { result })
            .inc();
    }

    /// Records the time one call into the reconcile module took.
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
