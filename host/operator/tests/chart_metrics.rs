//! Every metric the Helm chart's alerts and Grafana dashboard query is one
//! the operator exports: the names are read from the files the chart ships
//! and looked up in the text `/metrics` serves (the operator's registry,
//! encoded as the endpoint encodes it).

use std::collections::BTreeSet;
use std::path::Path;

use shardgate_operator::Metrics;
use shardgate_operator::metrics::ClusterLabels;

/// Every sample name the registry's exposition can carry: counters as
/// `<name>_total`, histograms as `_bucket`, `_sum` and `_count`, gauges and
/// info as named.
fn exported() -> BTreeSet<String> {
    // A family shows in the exposition once it has a series: one of each,
    // as a running operator records them.
    let metrics = Metrics::default();
    let cluster = ClusterLabels {
        namespace: "default".into(),
        cluster: "demo".into(),
    };
    metrics.error("apply");
    metrics.write("apply", "services");
    metrics.set_module(None, "sha256:0", "embedded");
    metrics.module_swap("rejected");
    metrics.cluster_status(&cluster, "Ready", Some(3), Some(3));
    metrics.cluster_steps(&cluster, 1, 1);
    let text = metrics.encode();
    let mut names = BTreeSet::new();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix("# TYPE ") else {
            continue;
        };
        let (name, kind) = rest.split_once(' ').expect("# TYPE name kind");
        match kind {
            "counter" => {
                names.insert(format!("{name}_total"));
            }
            "histogram" => {
                for suffix in ["_bucket", "_sum", "_count"] {
                    names.insert(format!("{name}{suffix}"));
                }
            }
            _ => {
                names.insert(name.to_string());
            }
        }
    }
    names
}

/// The `shardgate_…` identifiers in `text`.
fn used(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut rest = text;
    while let Some(at) = rest.find("shardgate_") {
        let before = rest[..at].chars().next_back();
        let tail = &rest[at..];
        let end = tail
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(tail.len());
        if !before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_') {
            out.insert(tail[..end].to_string());
        }
        rest = &tail[end..];
    }
    out
}

fn chart_file(path: &str) -> String {
    let full = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../deploy/helm/shardgate")
        .join(path);
    std::fs::read_to_string(&full).unwrap_or_else(|e| panic!("{}: {e}", full.display()))
}

#[test]
fn the_registry_is_read_as_expected() {
    let names = exported();
    for name in [
        "shardgate_reconciles_total",
        "shardgate_reconcile_duration_seconds_bucket",
        "shardgate_cluster_state",
    ] {
        assert!(names.contains(name), "{name} not in {names:?}");
    }
    assert_eq!(
        used("x shardgate_a_total{y} (shardgate_b) my_shardgate_c"),
        BTreeSet::from(["shardgate_a_total".to_string(), "shardgate_b".into()])
    );
}

#[test]
fn the_charts_alerts_and_dashboard_use_only_exported_metrics() {
    let exported = exported();
    for file in ["templates/prometheusrule.yaml", "dashboards/shardgate.json"] {
        let names = used(&chart_file(file));
        assert!(!names.is_empty(), "{file} uses no shardgate metric");
        let unknown: Vec<_> = names.difference(&exported).collect();
        assert!(
            unknown.is_empty(),
            "{file} uses metrics the operator does not export: {unknown:?}\nexported: {exported:?}"
        );
    }
}
