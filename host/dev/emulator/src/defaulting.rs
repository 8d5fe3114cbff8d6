//! Defaulting and the validation our operator can run into, per kind, as the
//! real API server does it (a subset: see the README).

use std::collections::BTreeSet;
use std::net::Ipv4Addr;

use serde_json::{Map, Value, json};

use crate::cluster_ips::{ClusterIps, in_range};
use crate::nodeports::NodePorts;

pub(crate) type Causes = Vec<(String, String)>;

/// Allocator state and the identity of the object being written.
pub(crate) struct Ctx<'a> {
    pub node_ports: &'a NodePorts,
    pub cluster_ips: &'a ClusterIps,
    /// `namespace/name`.
    pub owner: String,
}

/// Returns `v[key]` as a map, creating it (replacing non-maps) if needed.
pub(crate) fn obj_mut<'a>(v: &'a mut Value, key: &str) -> &'a mut Map<String, Value> {
    if !v.is_object() {
        *v = Value::Object(Map::new());
    }
    let m = v.as_object_mut().expect("object");
    let e = m.entry(key.to_string()).or_insert_with(|| json!({}));
    if !e.is_object() {
        *e = json!({});
    }
    e.as_object_mut().expect("object")
}

fn default(m: &mut Map<String, Value>, key: &str, val: Value) {
    if m.get(key).is_none_or(Value::is_null) {
        m.insert(key.to_string(), val);
    }
}

pub(crate) fn is_dns1123_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

pub(crate) fn is_dns1123_subdomain(s: &str) -> bool {
    !s.is_empty() && s.len() <= 253 && s.split('.').all(is_dns1123_label)
}

fn is_dns1035_label(s: &str) -> bool {
    is_dns1123_label(s) && s.starts_with(|c: char| c.is_ascii_lowercase())
}

/// Validates `metadata.name` for a kind.
pub(crate) fn validate_name(group: &str, kind: &str, name: &str) -> Causes {
    let ok = match (group, kind) {
        ("", "Service") => is_dns1035_label(name),
        ("", "Namespace") => is_dns1123_label(name),
        _ => is_dns1123_subdomain(name),
    };
    if ok {
        Vec::new()
    } else {
        vec![(
            "metadata.name".into(),
            format!(
                "Invalid value: \"{name}\": a lowercase RFC 1123 name must consist of lower case alphanumeric characters, '-' or '.'"
            ),
        )]
    }
}

/// Defaults `obj` in place and validates it. `old` is the stored object on
/// updates.
pub(crate) fn default_and_validate(
    group: &str,
    kind: &str,
    obj: &mut Value,
    old: Option<&Value>,
    ctx: &Ctx<'_>,
) -> Result<(), Causes> {
    let mut errs = Causes::new();
    match (group, kind) {
        ("", "Service") => service(obj, old, ctx, &mut errs),
        ("", "Pod") => {
            pod_spec(obj_mut(obj, "spec"));
            if old.is_none() {
                let status = obj_mut(obj, "status");
                default(status, "phase", json!("Pending"));
                default(status, "qosClass", json!("BestEffort"));
            }
        }
        ("apps", "StatefulSet") => statefulset(obj, old, &mut errs),
        ("policy", "PodDisruptionBudget") => pod_disruption_budget(obj, old, &mut errs),
        ("", "PersistentVolumeClaim") => persistent_volume_claim(obj, old, &mut errs),
        ("", "Secret") => secret(obj, &mut errs),
        ("", "Namespace") => {
            let name = obj["metadata"]["name"].clone();
            let labels = obj_mut(obj, "metadata")
                .entry("labels")
                .or_insert(json!({}));
            if let Some(l) = labels.as_object_mut() {
                l.insert("kubernetes.io/metadata.name".into(), name);
            }
            default(obj_mut(obj, "spec"), "finalizers", json!(["kubernetes"]));
            default(obj_mut(obj, "status"), "phase", json!("Active"));
        }
        _ => {}
    }
    if errs.is_empty() { Ok(()) } else { Err(errs) }
}

/// Secrets: `stringData` is write-only, merged into `data` (base64) over
/// any key of the same name, as the API server does; `type` defaults to
/// `Opaque`.
fn secret(obj: &mut Value, errs: &mut Causes) {
    let Some(m) = obj.as_object_mut() else {
        return;
    };
    default(m, "type", json!("Opaque"));
    let Some(string_data) = m.remove("stringData") else {
        return;
    };
    let Some(entries) = string_data.as_object() else {
        errs.push(("stringData".into(), "must be a map of strings".into()));
        return;
    };
    let data = m.entry("data").or_insert(json!({}));
    if data.is_null() {
        *data = json!({});
    }
    let Some(data) = data.as_object_mut() else {
        errs.push(("data".into(), "must be a map".into()));
        return;
    };
    for (key, value) in entries {
        let Some(text) = value.as_str() else {
            errs.push((format!("stringData[{key}]"), "must be a string".into()));
            continue;
        };
        let encoded = serde_json::to_value(k8s_openapi::ByteString(text.as_bytes().to_vec()))
            .unwrap_or(Value::Null);
        data.insert(key.clone(), encoded);
    }
}

fn service(obj: &mut Value, old: Option<&Value>, ctx: &Ctx<'_>, errs: &mut Causes) {
    let old_spec = old.map(|o| o["spec"].clone()).unwrap_or(Value::Null);
    let spec = obj_mut(obj, "spec");
    default(spec, "type", json!("ClusterIP"));
    default(spec, "sessionAffinity", json!("None"));
    let ty = spec
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    if !matches!(
        ty.as_str(),
        "ClusterIP" | "NodePort" | "LoadBalancer" | "ExternalName"
    ) {
        errs.push((
            "spec.type".into(),
            format!("Unsupported value: \"{ty}\": supported values: \"ClusterIP\", \"ExternalName\", \"LoadBalancer\", \"NodePort\""),
        ));
        return;
    }
    if ty == "ExternalName" {
        if spec
            .get("externalName")
            .and_then(Value::as_str)
            .is_none_or(str::is_empty)
        {
            errs.push(("spec.externalName".into(), "Required value".into()));
        }
        obj_mut(obj, "status");
        return;
    }

    // ClusterIP: preserved on update, allocated on create, immutable.
    let old_ip = old_spec["clusterIP"]
        .as_str()
        .filter(|s| !s.is_empty())
        .map(str::to_string);
    let cur_ip = spec
        .get("clusterIP")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .map(str::to_string);
    let ip = match (cur_ip, old_ip) {
        (None, Some(o)) => {
            spec.insert("clusterIPs".into(), old_spec["clusterIPs"].clone());
            o
        }
        (None, None) => ctx.cluster_ips.pick().to_string(),
        (Some(c), Some(o)) if c != o => {
            errs.push((
                "spec.clusterIPs[0]".into(),
                format!("Invalid value: []string{{\"{c}\"}}: may not change once set"),
            ));
            c
        }
        (Some(c), Some(_)) => c,
        (Some(c), None) => {
            if c != "None" {
                match c.parse::<Ipv4Addr>() {
                    Err(_) => errs.push((
                        "spec.clusterIPs[0]".into(),
                        format!("Invalid value: \"{c}\": must be a valid IP address"),
                    )),
                    Ok(a) if !in_range(a) => errs.push((
                        "spec.clusterIPs[0]".into(),
                        format!("Invalid value: \"{c}\": provided IP is not in the valid range. The range of valid IPs is 10.96.0.0/12"),
                    )),
                    Ok(a) if ctx.cluster_ips.owner(a).is_some_and(|o| o != ctx.owner) => errs.push((
                        "spec.clusterIPs[0]".into(),
                        format!("Invalid value: \"{c}\": provided IP is already allocated"),
                    )),
                    Ok(_) => {}
                }
            }
            c
        }
    };
    spec.insert("clusterIP".into(), json!(ip));
    if spec.get("clusterIPs").is_none_or(|v| !v.is_array()) {
        spec.insert("clusterIPs".into(), json!([ip]));
    }
    default(spec, "ipFamilies", json!(["IPv4"]));
    default(spec, "ipFamilyPolicy", json!("SingleStack"));
    default(spec, "internalTrafficPolicy", json!("Cluster"));

    let lb = ty == "LoadBalancer";
    if ty == "NodePort" || lb {
        default(spec, "externalTrafficPolicy", json!("Cluster"));
    } else {
        spec.remove("externalTrafficPolicy");
    }
    if lb {
        default(spec, "allocateLoadBalancerNodePorts", json!(true));
    } else {
        spec.remove("allocateLoadBalancerNodePorts");
    }
    let needs_node_ports = ty == "NodePort"
        || (lb
            && spec
                .get("allocateLoadBalancerNodePorts")
                .and_then(Value::as_bool)
                != Some(false));

    service_ports(
        spec,
        &old_spec,
        &ty,
        ip == "None",
        needs_node_ports,
        ctx,
        errs,
    );
    // `ports` is omitempty: a headless Service without ports has none.
    if spec
        .get("ports")
        .and_then(Value::as_array)
        .is_some_and(Vec::is_empty)
    {
        spec.remove("ports");
    }
    let status = obj_mut(obj, "status");
    default(status, "loadBalancer", json!({}));
}

fn service_ports(
    spec: &mut Map<String, Value>,
    old_spec: &Value,
    ty: &str,
    headless: bool,
    needs_node_ports: bool,
    ctx: &Ctx<'_>,
    errs: &mut Causes,
) {
    let empty = Vec::new();
    let old_ports = old_spec["ports"].as_array().unwrap_or(&empty).clone();
    let ports = spec.entry("ports").or_insert(json!([]));
    if !ports.is_array() {
        *ports = json!([]);
    }
    let ports = ports.as_array_mut().expect("array");
    if ports.is_empty() && !headless {
        errs.push(("spec.ports".into(), "Required value".into()));
    }
    let many = ports.len() > 1;
    let mut names = BTreeSet::new();
    let mut keys = BTreeSet::new();
    for (i, p) in ports.iter_mut().enumerate() {
        let Some(m) = p.as_object_mut() else {
            errs.push((
                format!("spec.ports[{i}]"),
                "Invalid value: must be an object".into(),
            ));
            continue;
        };
        default(m, "protocol", json!("TCP"));
        let port = m.get("port").and_then(Value::as_i64).unwrap_or(0);
        if !(1..=65535).contains(&port) {
            errs.push((
                format!("spec.ports[{i}].port"),
                format!("Invalid value: {port}: must be between 1 and 65535, inclusive"),
            ));
        }
        default(m, "targetPort", json!(port));
        let proto = m
            .get("protocol")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        if !matches!(proto.as_str(), "TCP" | "UDP" | "SCTP") {
            errs.push((
                format!("spec.ports[{i}].protocol"),
                format!(
                    "Unsupported value: \"{proto}\": supported values: \"SCTP\", \"TCP\", \"UDP\""
                ),
            ));
        }
        let name = m
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        if many && name.is_empty() {
            errs.push((format!("spec.ports[{i}].name"), "Required value".into()));
        }
        if !name.is_empty() && !names.insert(name.clone()) {
            errs.push((
                format!("spec.ports[{i}].name"),
                format!("Duplicate value: \"{name}\""),
            ));
        }
        if !keys.insert((port, proto.clone())) {
            errs.push((
                format!("spec.ports[{i}]"),
                format!("Duplicate value: {{\"port\":{port},\"protocol\":\"{proto}\"}}"),
            ));
        }
    }

    // NodePorts.
    if ty == "ClusterIP" {
        for (i, p) in ports.iter_mut().enumerate() {
            let Some(m) = p.as_object_mut() else { continue };
            let Some(np) = m.get("nodePort").and_then(Value::as_i64) else {
                m.remove("nodePort");
                continue;
            };
            let was_there = old_ports.iter().any(|o| o["nodePort"].as_i64() == Some(np));
            if was_there {
                // Type changed away from NodePort/LoadBalancer: released.
                m.remove("nodePort");
            } else {
                errs.push((
                    format!("spec.ports[{i}].nodePort"),
                    "Forbidden: may not be used when `type` is 'ClusterIP'".into(),
                ));
            }
        }
        return;
    }
    let mut taken = BTreeSet::new();
    for (i, p) in ports.iter().enumerate() {
        let Some(np) = p.get("nodePort").and_then(Value::as_i64) else {
            continue;
        };
        if np == 0 {
            continue;
        }
        let field = format!("spec.ports[{i}].nodePort");
        let range = ctx.node_ports.range();
        if !range.contains(&np) {
            errs.push((
                field,
                format!(
                    "Invalid value: {np}: provided port is not in the valid range. The range of valid ports is {}-{}",
                    range.start(),
                    range.end()
                ),
            ));
        } else if ctx.node_ports.owner(np).is_some_and(|o| o != ctx.owner) {
            errs.push((
                field,
                format!("Invalid value: {np}: provided port is already allocated"),
            ));
        } else if !taken.insert(np) {
            errs.push((field, format!("Duplicate value: {np}")));
        }
    }
    if !needs_node_ports {
        return;
    }
    for p in ports.iter_mut() {
        let Some(m) = p.as_object_mut() else { continue };
        if m.get("nodePort")
            .and_then(Value::as_i64)
            .is_some_and(|n| n != 0)
        {
            continue;
        }
        // Preserve the port this Service already had (matched by name, then
        // by port+protocol), as the real server does on update/apply.
        let name = m.get("name").and_then(Value::as_str).unwrap_or_default();
        let key = (m.get("port").cloned(), m.get("protocol").cloned());
        let prev = old_ports
            .iter()
            .find(|o| !name.is_empty() && o["name"].as_str() == Some(name))
            .or_else(|| {
                old_ports.iter().find(|o| {
                    (
                        o.get("port").cloned(),
                        o.get("protocol").cloned().or(Some(json!("TCP"))),
                    ) == key
                })
            })
            .and_then(|o| o["nodePort"].as_i64())
            .filter(|n| !taken.contains(n));
        let np = match prev.or_else(|| ctx.node_ports.pick(&taken)) {
            Some(n) => n,
            None => {
                errs.push(("spec.ports".into(), "Internal error: range is full".into()));
                return;
            }
        };
        taken.insert(np);
        m.insert("nodePort".into(), json!(np));
    }
}

/// Pod spec defaults (also applied to StatefulSet pod templates).
pub(crate) fn pod_spec(spec: &mut Map<String, Value>) {
    default(spec, "restartPolicy", json!("Always"));
    default(spec, "dnsPolicy", json!("ClusterFirst"));
    default(spec, "schedulerName", json!("default-scheduler"));
    default(spec, "terminationGracePeriodSeconds", json!(30));
    default(spec, "securityContext", json!({}));
    default(spec, "enableServiceLinks", json!(true));
    for list in ["containers", "initContainers"] {
        let Some(cs) = spec.get_mut(list).and_then(Value::as_array_mut) else {
            continue;
        };
        for c in cs.iter_mut().filter_map(Value::as_object_mut) {
            let image = c.get("image").and_then(Value::as_str).unwrap_or_default();
            let tag = image.rsplit('/').next().unwrap_or_default();
            let latest = !tag.contains(':') && !image.contains('@') || tag.ends_with(":latest");
            default(
                c,
                "imagePullPolicy",
                json!(if latest { "Always" } else { "IfNotPresent" }),
            );
            default(c, "terminationMessagePath", json!("/dev/termination-log"));
            default(c, "terminationMessagePolicy", json!("File"));
            default(c, "resources", json!({}));
            if let Some(ports) = c.get_mut("ports").and_then(Value::as_array_mut) {
                for p in ports.iter_mut().filter_map(Value::as_object_mut) {
                    default(p, "protocol", json!("TCP"));
                }
            }
        }
    }
}

fn statefulset(obj: &mut Value, old: Option<&Value>, errs: &mut Causes) {
    let spec = obj_mut(obj, "spec");
    default(spec, "replicas", json!(1));
    default(spec, "podManagementPolicy", json!("OrderedReady"));
    default(spec, "revisionHistoryLimit", json!(10));
    default(
        spec,
        "updateStrategy",
        json!({"type": "RollingUpdate", "rollingUpdate": {"partition": 0}}),
    );
    default(
        spec,
        "persistentVolumeClaimRetentionPolicy",
        json!({"whenDeleted": "Retain", "whenScaled": "Retain"}),
    );
    let template = spec.entry("template").or_insert(json!({}));
    pod_spec(obj_mut(template, "spec"));

    let selector = spec
        .get("selector")
        .and_then(|s| s.get("matchLabels"))
        .cloned();
    let labels = spec
        .get("template")
        .map(|t| t["metadata"]["labels"].clone())
        .unwrap_or_default();
    match selector.as_ref().and_then(Value::as_object) {
        None => errs.push(("spec.selector".into(), "Required value".into())),
        Some(sel) => {
            if !sel.iter().all(|(k, v)| labels.get(k) == Some(v)) {
                errs.push((
                    "spec.template.metadata.labels".into(),
                    "Invalid value: `selector` does not match template `labels`".into(),
                ));
            }
        }
    }
    if let Some(old) = old {
        let strip = |s: &Value| {
            let mut s = s.clone();
            if let Some(m) = s.as_object_mut() {
                for f in [
                    "replicas",
                    "ordinals",
                    "template",
                    "updateStrategy",
                    "persistentVolumeClaimRetentionPolicy",
                    "minReadySeconds",
                ] {
                    m.remove(f);
                }
            }
            s
        };
        if strip(&obj["spec"]) != strip(&old["spec"]) {
            errs.push((
                "spec".into(),
                "Forbidden: updates to statefulset spec for fields other than 'replicas', 'ordinals', 'template', 'updateStrategy', 'persistentVolumeClaimRetentionPolicy' and 'minReadySeconds' are forbidden".into(),
            ));
        }
    }
    if old.is_none() {
        let status = obj_mut(obj, "status");
        default(status, "replicas", json!(0));
        default(status, "availableReplicas", json!(0));
    }
}

/// An `IntOrString` that must be a non-negative integer or a percentage
/// (`[0-9]+%`, at most 100%): the error message, if any.
fn int_or_percent_error(v: &Value) -> Option<String> {
    match v {
        Value::Number(n) => match n.as_i64() {
            Some(i) if i >= 0 => None,
            _ => Some(format!(
                "Invalid value: {n}: must be greater than or equal to 0"
            )),
        },
        Value::String(s) => match s.strip_suffix('%').map(str::parse::<u64>) {
            Some(Ok(p)) if p <= 100 && !s.starts_with('+') => None,
            Some(Ok(_)) => Some(format!(
                "Invalid value: \"{s}\": must not be greater than 100%"
            )),
            _ => Some(format!(
                "Invalid value: \"{s}\": a valid percent string must be a numeric string followed by an ending '%' (e.g. '1%',  or '93%', regex used for validation is '[0-9]+%')"
            )),
        },
        _ => Some(format!(
            "Invalid value: {v}: must be an integer or a percentage"
        )),
    }
}

/// PodDisruptionBudgets (policy/v1): `minAvailable` and `maxUnavailable`
/// exclusive, each an int >= 0 or a percentage; the eviction policy one of
/// the two known. A new budget's status starts at zeros (the disruption
/// controller, [`crate::disruption`], fills it in).
fn pod_disruption_budget(obj: &mut Value, old: Option<&Value>, errs: &mut Causes) {
    let spec = obj_mut(obj, "spec");
    let set = |f: &str| spec.get(f).filter(|v| !v.is_null());
    if set("minAvailable").is_some() && set("maxUnavailable").is_some() {
        errs.push((
            "spec".into(),
            "Invalid value: minAvailable and maxUnavailable cannot be both set".into(),
        ));
    }
    for f in ["minAvailable", "maxUnavailable"] {
        if let Some(e) = set(f).and_then(int_or_percent_error) {
            errs.push((format!("spec.{f}"), e));
        }
    }
    if let Some(p) = set("unhealthyPodEvictionPolicy")
        && !matches!(p.as_str(), Some("IfHealthyBudget" | "AlwaysAllow"))
    {
        errs.push((
            "spec.unhealthyPodEvictionPolicy".into(),
            format!(
                "Unsupported value: {p}: supported values: \"AlwaysAllow\", \"IfHealthyBudget\""
            ),
        ));
    }
    if old.is_none() {
        let status = obj_mut(obj, "status");
        for f in [
            "disruptionsAllowed",
            "currentHealthy",
            "desiredHealthy",
            "expectedPods",
        ] {
            default(status, f, json!(0));
        }
    }
}

/// PersistentVolumeClaims: `volumeMode: Filesystem`; access modes and a
/// storage request required; the spec immutable but for
/// `resources.requests` and `volumeAttributesClassName` (and a first
/// `volumeName`); new claims are `Pending`.
fn persistent_volume_claim(obj: &mut Value, old: Option<&Value>, errs: &mut Causes) {
    let spec = obj_mut(obj, "spec");
    default(spec, "volumeMode", json!("Filesystem"));
    match spec.get("accessModes").and_then(Value::as_array) {
        Some(modes) if !modes.is_empty() => {
            for m in modes {
                if !matches!(
                    m.as_str(),
                    Some("ReadWriteOnce" | "ReadOnlyMany" | "ReadWriteMany" | "ReadWriteOncePod")
                ) {
                    errs.push((
                        "spec.accessModes".into(),
                        format!("Unsupported value: {m}: supported values: \"ReadOnlyMany\", \"ReadWriteMany\", \"ReadWriteOnce\", \"ReadWriteOncePod\""),
                    ));
                }
            }
        }
        _ => errs.push((
            "spec.accessModes".into(),
            "Required value: at least 1 access mode is required".into(),
        )),
    }
    if spec
        .get("resources")
        .and_then(|r| r.get("requests"))
        .and_then(|r| r.get("storage"))
        .is_none_or(Value::is_null)
    {
        errs.push(("spec.resources[storage]".into(), "Required value".into()));
    }
    if let Some(old) = old {
        let first_volume_name = old["spec"]["volumeName"].as_str().is_none_or(str::is_empty);
        let strip = |s: &Value| {
            let mut s = s.clone();
            if let Some(m) = s.as_object_mut() {
                m.remove("volumeAttributesClassName");
                if first_volume_name {
                    m.remove("volumeName");
                }
                if let Some(r) = m.get_mut("resources").and_then(Value::as_object_mut) {
                    r.remove("requests");
                }
            }
            s
        };
        if strip(&obj["spec"]) != strip(&old["spec"]) {
            errs.push((
                "spec".into(),
                "Forbidden: spec is immutable after creation except resources.requests and volumeAttributesClassName for bound claims".into(),
            ));
        }
    } else {
        default(obj_mut(obj, "status"), "phase", json!("Pending"));
    }
}
