//! Prometheus metrics: reconciles, their duration and errors, API writes by
//! verb and resource, guest call time, and per cluster its state, shards,
//! ready shards, failovers and slot migrations.

use std::collections::BTreeSet;
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

/// The per-cluster metrics' labels.
#[derive(Clone, Debug, Hash, PartialEq, Eq, PartialOrd, Ord, EncodeLabelSet)]
pub struct ClusterLabels {
    pub namespace: String,
    pub cluster: String,
}

/// `shardgate_cluster_state`'s labels: the cluster and one state.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StateLabels {
    pub namespace: String,
    pub cluster: String,
    pub state: &'static str,
}

/// Every value of `status.state`, as `shardgate_cluster_state` labels it.
pub const STATES: [&str; 5] = ["Initializing", "Reconciling", "Ready", "Degraded", "Failed"];

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
    /// 1 for each cluster's current state, 0 for the others.
    pub cluster_state: Family<StateLabels, Gauge>,
    pub cluster_shards: Family<ClusterLabels, Gauge>,
    pub cluster_ready_shards: Family<ClusterLabels, Gauge>,
    /// `CLUSTER FAILOVER`s the operator ran.
    pub cluster_failovers: Family<ClusterLabels, Counter>,
    /// Slot migrations the operator started.
    pub cluster_slot_migrations: Family<ClusterLabels, Counter>,
    /// The clusters that have series, so a deleted one's can go.
    clusters: Mutex<BTreeSet<ClusterLabels>>,
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
        // Every result from the start, at 0: an alert on
        // `increase(...{result="rejected"}[...]) > 0` then sees the first
        // rejection too (a series that appears at 1 shows no increase).
        for result in shardgate_wasm::swap::CHECK_RESULTS {
            module_swaps.get_or_create(&SwapLabels { result }).inc_by(0);
        }
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
        let cluster_state = Family::<StateLabels, Gauge>::default();
        let cluster_shards = Family::<ClusterLabels, Gauge>::default();
        let cluster_ready_shards = Family::<ClusterLabels, Gauge>::default();
        let cluster_failovers = Family::<ClusterLabels, Counter>::default();
        let cluster_slot_migrations = Family::<ClusterLabels, Counter>::default();
        registry.register(
            "cluster_state",
            "Each cluster's status.state: 1 for the current one, 0 for the others",
            cluster_state.clone(),
        );
        registry.register(
            "cluster_shards",
            "Shards in each cluster's spec",
            cluster_shards.clone(),
        );
        registry.register(
            "cluster_ready_shards",
            "Shards of each cluster whose every node is ready",
            cluster_ready_shards.clone(),
        );
        registry.register(
            "cluster_failovers",
            "CLUSTER FAILOVERs the operator ran (a departing or restarting primary handing over)",
            cluster_failovers.clone(),
        );
        registry.register(
            "cluster_slot_migrations",
            "Slot migrations the operator started (shard scale-out and scale-in)",
            cluster_slot_migrations.clone(),
        );
        Metrics {
            registry: Mutex::new(registry),
            cluster_state,
            cluster_shards,
            cluster_ready_shards,
            cluster_failovers,
            cluster_slot_migrations,
            clusters: Mutex::new(BTreeSet::new()),
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

    /// Sets a cluster's state, shards and ready shards from its status.
    pub fn cluster_status(
        &self,
        cluster: &ClusterLabels,
        state: &str,
        shards: Option<i32>,
        ready_shards: Option<i32>,
    ) {
        self.clusters.lock().unwrap().insert(cluster.clone());
        for s in STATES {
            self.cluster_state
                .get_or_create(&state_labels(cluster, s))
                .set(i64::from(s == state));
        }
        if let Some(n) = shards {
            self.cluster_shards.get_or_create(cluster).set(n.into());
        }
        if let Some(n) = ready_shards {
            self.cluster_ready_shards
                .get_or_create(cluster)
                .set(n.into());
        }
        // The cluster's counters from its first status, at 0, so that its
        // first failover or migration shows as an increase.
        self.cluster_failovers.get_or_create(cluster).inc_by(0);
        self.cluster_slot_migrations
            .get_or_create(cluster)
            .inc_by(0);
    }

    /// Counts what a topology plan ran on a cluster.
    pub fn cluster_steps(&self, cluster: &ClusterLabels, failovers: u64, migrations: u64) {
        if failovers + migrations == 0 {
            return;
        }
        self.clusters.lock().unwrap().insert(cluster.clone());
        self.cluster_failovers
            .get_or_create(cluster)
            .inc_by(failovers);
        self.cluster_slot_migrations
            .get_or_create(cluster)
            .inc_by(migrations);
    }

    /// Removes the series of every cluster `exists` denies (deleted ones).
    pub fn retain_clusters(&self, exists: impl Fn(&ClusterLabels) -> bool) {
        let mut clusters = self.clusters.lock().unwrap();
        clusters.retain(|c| {
            if exists(c) {
                return true;
            }
            for s in STATES {
                self.cluster_state.remove(&state_labels(c, s));
            }
            self.cluster_shards.remove(c);
            self.cluster_ready_shards.remove(c);
            self.cluster_failovers.remove(c);
            self.cluster_slot_migrations.remove(c);
            false
        });
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

fn state_labels(c: &ClusterLabels, state: &'static str) -> StateLabels {
    StateLabels {
        namespace: c.namespace.clone(),
        cluster: c.cluster.clone(),
        state,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cluster_s_series_follow_its_status_and_go_with_it() {
        let m = Metrics::default();
        let c = ClusterLabels {
            namespace: "ns".into(),
            cluster: "orders".into(),
        };
        m.cluster_status(&c, "Reconciling", Some(3), Some(1));
        let text = m.encode();
        for line in [
            r#"shardgate_cluster_failovers_total{namespace="ns",cluster="orders"} 0"#,
            r#"shardgate_cluster_slot_migrations_total{namespace="ns",cluster="orders"} 0"#,
            r#"shardgate_module_swaps_total{result="accepted"} 0"#,
            r#"shardgate_module_swaps_total{result="rejected"} 0"#,
        ] {
            assert!(text.contains(line), "{line} missing from\n{text}");
        }
        m.cluster_status(&c, "Ready", Some(3), Some(3));
        m.cluster_steps(&c, 1, 2);
        let text = m.encode();
        for line in [
            r#"shardgate_cluster_state{namespace="ns",cluster="orders",state="Ready"} 1"#,
            r#"shardgate_cluster_state{namespace="ns",cluster="orders",state="Reconciling"} 0"#,
            r#"shardgate_cluster_shards{namespace="ns",cluster="orders"} 3"#,
            r#"shardgate_cluster_ready_shards{namespace="ns",cluster="orders"} 3"#,
            r#"shardgate_cluster_failovers_total{namespace="ns",cluster="orders"} 1"#,
            r#"shardgate_cluster_slot_migrations_total{namespace="ns",cluster="orders"} 2"#,
        ] {
            assert!(text.contains(line), "{line} missing from\n{text}");
        }
        m.retain_clusters(|_| true);
        assert!(m.encode().contains("cluster=\"orders\""));
        m.retain_clusters(|_| false);
        assert!(!m.encode().contains("cluster=\"orders\""), "{}", m.encode());
    }
}
