//! `printService`: Type, Cluster-IP, External-IP, Port(s), Age; wide Selector.

use std::collections::BTreeSet;

use serde_json::{Value, json};

use super::{Row, age_cell, age_col, items, name, name_col, or_none, s, string_col};

pub(super) fn columns() -> Vec<Value> {
    vec![
        name_col(),
        string_col("Type", 0, "type determines how the Service is exposed."),
        string_col(
            "Cluster-IP",
            0,
            "clusterIP is the IP address of the service and is usually assigned randomly.",
        ),
        string_col(
            "External-IP",
            0,
            "externalIPs is a list of IP addresses for which nodes in the cluster will also accept traffic for this service.",
        ),
        string_col(
            "Port(s)",
            0,
            "The list of ports that are exposed by this service.",
        ),
        age_col(),
        string_col(
            "Selector",
            1,
            "Route service traffic to pods with label keys and values matching this selector.",
        ),
    ]
}

/// `labels.FormatLabels`: `k=v` pairs in key order, `<none>` when empty.
fn format_labels(m: &Value) -> String {
    let pairs: Vec<String> = m
        .as_object()
        .map(|m| {
            m.iter()
                .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or_default()))
                .collect()
        })
        .unwrap_or_default();
    if pairs.is_empty() {
        "<none>".into()
    } else {
        pairs.join(",")
    }
}

fn external_ip(svc: &Value) -> String {
    let external: Vec<&str> = items(&svc["spec"]["externalIPs"])
        .iter()
        .filter_map(Value::as_str)
        .collect();
    match s(svc, &["spec", "type"]) {
        "ClusterIP" | "NodePort" if !external.is_empty() => external.join(","),
        "ClusterIP" | "NodePort" => "<none>".into(),
        "LoadBalancer" => {
            let lb: BTreeSet<&str> = items(&svc["status"]["loadBalancer"]["ingress"])
                .iter()
                .filter_map(|i| {
                    [s(i, &["ip"]), s(i, &["hostname"])]
                        .into_iter()
                        .find(|x| !x.is_empty())
                })
                .collect();
            let all: Vec<&str> = lb.into_iter().chain(external).collect();
            if all.is_empty() {
                "<pending>".into()
            } else {
                all.join(",")
            }
        }
        "ExternalName" => s(svc, &["spec", "externalName"]).into(),
        _ => "<unknown>".into(),
    }
}

pub(super) fn row(svc: &Value, now: i64) -> Row {
    let spec = &svc["spec"];
    let ports: Vec<String> = items(&spec["ports"])
        .iter()
        .map(|p| {
            let port = p["port"].as_i64().unwrap_or(0);
            let proto = p["protocol"].as_str().unwrap_or("TCP");
            match p["nodePort"].as_i64().filter(|n| *n > 0) {
                Some(np) => format!("{port}:{np}/{proto}"),
                None => format!("{port}/{proto}"),
            }
        })
        .collect();
    vec![
        name(svc),
        json!(s(spec, &["type"])),
        json!(or_none(spec["clusterIPs"][0].as_str().unwrap_or_default())),
        json!(external_ip(svc)),
        json!(or_none(&ports.join(","))),
        age_cell(svc, now),
        json!(format_labels(&spec["selector"])),
    ]
    .into()
}

#[cfg(test)]
mod tests {
    use super::*;

    const T0: &str = "2024-01-01T00:00:00Z";

    fn t0() -> i64 {
        T0.parse::<jiff::Timestamp>().unwrap().as_second()
    }

    #[test]
    fn service_columns_as_kubectl_shows_them() {
        let svc = json!({
            "metadata": {"name": "vc", "creationTimestamp": T0},
            "spec": {
                "type": "LoadBalancer",
                "clusterIPs": ["10.96.0.10"],
                "selector": {"app": "vc", "tier": "db"},
                "ports": [{"port": 6379, "protocol": "TCP", "nodePort": 31000}, {"port": 16379, "protocol": "TCP"}],
            },
            "status": {"loadBalancer": {}},
        });
        let first = row(&svc, t0() + 5);
        assert_eq!(
            first.cells,
            vec![
                json!("vc"),
                json!("LoadBalancer"),
                json!("10.96.0.10"),
                json!("<pending>"),
                json!("6379:31000/TCP,16379/TCP"),
                json!("5s"),
                json!("app=vc,tier=db"),
            ]
        );
        let mut with_lb = svc.clone();
        with_lb["status"]["loadBalancer"]["ingress"] =
            json!([{"ip": "203.0.113.7"}, {"hostname": "lb.example"}]);
        assert_eq!(external_ip(&with_lb), "203.0.113.7,lb.example");
        let headless = json!({"spec": {"type": "ClusterIP", "clusterIPs": ["None"]}});
        assert_eq!(row(&headless, 0).cells[2], json!("None"));
        assert_eq!(row(&headless, 0).cells[3], json!("<none>"));
        assert_eq!(row(&headless, 0).cells[4], json!("<none>"));
    }
}
