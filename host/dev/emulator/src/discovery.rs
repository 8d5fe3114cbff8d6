//! Discovery documents: legacy (`/api`, `/api/v1`, `/apis`, `/apis/{g}`,
//! `/apis/{g}/{v}`) and aggregated (`apidiscovery.k8s.io/v2`).

use serde_json::{Value, json};

use crate::resources::{Registry, ResourceInfo};

/// Content type of aggregated discovery responses.
pub(crate) const AGGREGATED: &str =
    "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList";

/// Does the Accept header prefer aggregated discovery?
pub(crate) fn wants_aggregated(accept: &str) -> bool {
    accept
        .split(',')
        .next()
        .is_some_and(|first| first.contains("as=APIGroupDiscoveryList"))
}

const VERBS: [&str; 8] = [
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "update",
    "watch",
];

pub(crate) fn api_versions(server: &str) -> Value {
    json!({
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": server}],
    })
}

fn group_json(group: &str, versions: &[String]) -> Value {
    let vs: Vec<Value> = versions
        .iter()
        .map(|v| json!({"groupVersion": format!("{group}/{v}"), "version": v}))
        .collect();
    json!({
        "name": group,
        "versions": vs,
        "preferredVersion": vs.first().cloned().unwrap_or(Value::Null),
    })
}

/// The versions a group serves, most preferred first as the API server
/// orders a CRD group's: by Kubernetes version priority (`v1` before
/// `v1beta1` before `v1alpha2`), whatever order they were registered in.
fn versions_of(reg: &Registry, group: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for (g, v) in reg.groups() {
        if g == group && !out.contains(&v) {
            out.push(v);
        }
    }
    out.sort_by_cached_key(|v| std::cmp::Reverse(kube::core::Version::parse(v).priority()));
    out
}

pub(crate) fn api_group_list(reg: &Registry) -> Value {
    let mut names: Vec<String> = Vec::new();
    for (g, _) in reg.groups() {
        if !names.contains(&g) {
            names.push(g);
        }
    }
    let groups: Vec<Value> = names
        .iter()
        .map(|g| group_json(g, &versions_of(reg, g)))
        .collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

pub(crate) fn api_group(reg: &Registry, group: &str) -> Option<Value> {
    let versions = versions_of(reg, group);
    if versions.is_empty() {
        return None;
    }
    let mut g = group_json(group, &versions);
    g["kind"] = json!("APIGroup");
    g["apiVersion"] = json!("v1");
    Some(g)
}

fn resources_in<'a>(
    reg: &'a Registry,
    group: &'a str,
    version: &'a str,
) -> impl Iterator<Item = &'a std::sync::Arc<ResourceInfo>> {
    reg.resources
        .iter()
        .filter(move |r| r.group == group && r.version == version)
}

pub(crate) fn resource_list(reg: &Registry, group: &str, version: &str) -> Option<Value> {
    let mut resources = Vec::new();
    for r in resources_in(reg, group, version) {
        resources.push(json!({
            "name": r.plural,
            "singularName": r.singular(),
            "namespaced": r.namespaced,
            "kind": r.kind,
            "verbs": VERBS,
            "shortNames": r.short_names,
        }));
        if r.status {
            resources.push(json!({
                "name": format!("{}/status", r.plural),
                "singularName": "",
                "namespaced": r.namespaced,
                "kind": r.kind,
                "verbs": ["get", "patch", "update"],
            }));
        }
        for sub in r.extra_subresources() {
            resources.push(json!({
                "name": format!("{}/{}", r.plural, sub.name),
                "singularName": "",
                "namespaced": r.namespaced,
                "group": sub.group,
                "version": sub.version,
                "kind": sub.kind,
                "verbs": sub.verbs,
            }));
        }
    }
    if resources.is_empty() {
        return None;
    }
    let gv = if group.is_empty() {
        version.to_string()
    } else {
        format!("{group}/{version}")
    };
    Some(
        json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": resources}),
    )
}

fn aggregated_group(reg: &Registry, group: &str, versions: &[String]) -> Value {
    let vs: Vec<Value> = versions
        .iter()
        .map(|v| {
            let resources: Vec<Value> = resources_in(reg, group, v)
                .map(|r| {
                    let kind = json!({"group": r.group, "version": r.version, "kind": r.kind});
                    let mut subs = Vec::new();
                    if r.status {
                        subs.push(json!({"subresource": "status", "responseKind": kind, "verbs": ["get", "patch", "update"]}));
                    }
                    for sub in r.extra_subresources() {
                        subs.push(json!({
                            "subresource": sub.name,
                            "responseKind": {"group": sub.group, "version": sub.version, "kind": sub.kind},
                            "verbs": sub.verbs,
                        }));
                    }
                    json!({
                        "resource": r.plural,
                        "responseKind": kind,
                        "scope": if r.namespaced { "Namespaced" } else { "Cluster" },
                        "singularResource": r.singular(),
                        "verbs": VERBS,
                        "shortNames": r.short_names,
                        "subresources": subs,
                    })
                })
                .collect();
            json!({"version": v, "resources": resources, "freshness": "Current"})
        })
        .collect();
    json!({"metadata": {"name": group}, "versions": vs})
}

/// Aggregated discovery for `/api` (core) or `/apis` (all named groups).
pub(crate) fn aggregated(reg: &Registry, core: bool) -> Value {
    let items: Vec<Value> = if core {
        vec![aggregated_group(reg, "", &["v1".to_string()])]
    } else {
        let mut names: Vec<String> = Vec::new();
        for (g, _) in reg.groups() {
            if !names.contains(&g) {
                names.push(g);
            }
        }
        names
            .iter()
            .map(|g| aggregated_group(reg, g, &versions_of(reg, g)))
            .collect()
    };
    json!({"kind": "APIGroupDiscoveryList", "apiVersion": "apidiscovery.k8s.io/v2", "metadata": {}, "items": items})
}
