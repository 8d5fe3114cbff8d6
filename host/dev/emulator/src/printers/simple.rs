//! Printers that read a few fields: StatefulSets, PodDisruptionBudgets,
//! PersistentVolumeClaims, Namespaces, Nodes, ConfigMaps, Secrets, Leases.

use serde_json::{Value, json};

use super::{Row, age_cell, age_col, column, items, name, name_col, s, string_col};

pub(super) fn statefulset_columns() -> Vec<Value> {
    vec![
        name_col(),
        string_col("Ready", 0, "Number of the pod with ready state"),
        age_col(),
        string_col("Containers", 1, "Names of each container in the template."),
        string_col(
            "Images",
            1,
            "Images referenced by each container in the template.",
        ),
    ]
}

/// Container names and images of a pod template, comma-separated.
fn containers(template: &Value) -> (String, String) {
    let cs = items(&template["spec"]["containers"]);
    let join = |field: &str| {
        cs.iter()
            .map(|c| s(c, &[field]))
            .collect::<Vec<_>>()
            .join(",")
    };
    (join("name"), join("image"))
}

pub(super) fn statefulset_row(sts: &Value, now: i64) -> Row {
    let desired = sts["spec"]["replicas"].as_i64().unwrap_or(1);
    let ready = sts["status"]["readyReplicas"].as_i64().unwrap_or(0);
    let (names, images) = containers(&sts["spec"]["template"]);
    vec![
        name(sts),
        json!(format!("{ready}/{desired}")),
        age_cell(sts, now),
        json!(names),
        json!(images),
    ]
    .into()
}

pub(super) fn pdb_columns() -> Vec<Value> {
    vec![
        name_col(),
        string_col(
            "Min Available",
            0,
            "The minimum number of pods that must be available.",
        ),
        string_col(
            "Max Unavailable",
            0,
            "The maximum number of pods that may be unavailable.",
        ),
        column(
            "Allowed Disruptions",
            "integer",
            "",
            0,
            "Calculated number of pods that may be disrupted at this time.",
        ),
        age_col(),
    ]
}

/// An IntOrString as `String()` writes it; `N/A` when unset.
fn int_or_string(v: &Value) -> String {
    match v {
        Value::Number(n) => n.to_string(),
        Value::String(x) => x.clone(),
        _ => "N/A".into(),
    }
}

pub(super) fn pdb_row(pdb: &Value, now: i64) -> Row {
    vec![
        name(pdb),
        json!(int_or_string(&pdb["spec"]["minAvailable"])),
        json!(int_or_string(&pdb["spec"]["maxUnavailable"])),
        json!(pdb["status"]["disruptionsAllowed"].as_i64().unwrap_or(0)),
        age_cell(pdb, now),
    ]
    .into()
}

pub(super) fn pvc_columns() -> Vec<Value> {
    vec![
        name_col(),
        string_col(
            "Status",
            0,
            "phase represents the current phase of PersistentVolumeClaim.",
        ),
        string_col(
            "Volume",
            0,
            "volumeName is the binding reference to the PersistentVolume backing this claim.",
        ),
        string_col(
            "Capacity",
            0,
            "capacity represents the actual resources of the underlying volume.",
        ),
        string_col(
            "Access Modes",
            0,
            "accessModes contains the actual access modes the volume backing the PVC has.",
        ),
        string_col("StorageClass", 0, "StorageClass of the pvc"),
        string_col(
            "VolumeAttributesClass",
            0,
            "VolumeAttributesClass of the pvc",
        ),
        age_col(),
        string_col(
            "VolumeMode",
            1,
            "volumeMode defines what type of volume is required by the claim.",
        ),
    ]
}

/// `GetAccessModesAsString`: RWO, ROX, RWX, RWOP in that order.
fn access_modes(modes: &Value) -> String {
    let has = |m: &str| items(modes).iter().any(|x| x == m);
    [
        ("ReadWriteOnce", "RWO"),
        ("ReadOnlyMany", "ROX"),
        ("ReadWriteMany", "RWX"),
        ("ReadWriteOncePod", "RWOP"),
    ]
    .iter()
    .filter(|(m, _)| has(m))
    .map(|(_, short)| *short)
    .collect::<Vec<_>>()
    .join(",")
}

pub(super) fn pvc_row(pvc: &Value, now: i64) -> Row {
    let spec = &pvc["spec"];
    let phase = if pvc["metadata"]["deletionTimestamp"].is_null() {
        s(pvc, &["status", "phase"])
    } else {
        "Terminating"
    };
    let volume = s(spec, &["volumeName"]);
    let (capacity, modes) = if volume.is_empty() {
        (String::new(), String::new())
    } else {
        (
            s(pvc, &["status", "capacity", "storage"]).to_string(),
            access_modes(&pvc["status"]["accessModes"]),
        )
    };
    let class = match s(
        pvc,
        &[
            "metadata",
            "annotations",
            "volume.beta.kubernetes.io/storage-class",
        ],
    ) {
        "" => s(spec, &["storageClassName"]),
        c => c,
    };
    let unset = |x: &str| if x.is_empty() { "<unset>" } else { x }.to_string();
    vec![
        name(pvc),
        json!(phase),
        json!(volume),
        json!(capacity),
        json!(modes),
        json!(class),
        json!(unset(s(spec, &["volumeAttributesClassName"]))),
        age_cell(pvc, now),
        json!(unset(s(spec, &["volumeMode"]))),
    ]
    .into()
}

pub(super) fn namespace_columns() -> Vec<Value> {
    vec![
        name_col(),
        string_col("Status", 0, "The status of the namespace"),
        age_col(),
    ]
}

pub(super) fn namespace_row(ns: &Value, now: i64) -> Row {
    vec![
        name(ns),
        json!(s(ns, &["status", "phase"])),
        age_cell(ns, now),
    ]
    .into()
}

pub(super) fn node_columns() -> Vec<Value> {
    vec![
        name_col(),
        string_col("Status", 0, "The status of the node"),
        string_col("Roles", 0, "The roles of the node"),
        age_col(),
        string_col("Version", 0, "Kubelet Version reported by the node."),
        string_col("Internal-IP", 1, "List of internal IPs for the node."),
        string_col("External-IP", 1, "List of external IPs for any node."),
        string_col(
            "OS-Image",
            1,
            "OS Image reported by the node from /etc/os-release (e.g. Debian GNU/Linux 7 (wheezy)).",
        ),
        string_col(
            "Kernel-Version",
            1,
            "Kernel Version reported by the node from 'uname -r' (e.g. 3.16.0-0.bpo.4-amd64).",
        ),
        string_col(
            "Container-Runtime",
            1,
            "Container Runtime Version reported by the node through runtime remote API (e.g. containerd://1.4.2).",
        ),
    ]
}

/// As the API server's node printer: `Ready`/`NotReady`/`Unknown` from the
/// Ready condition (plus `,SchedulingDisabled` when `spec.unschedulable`),
/// roles from `node-role.kubernetes.io/<role>` and `kubernetes.io/role`
/// labels, the first InternalIP and ExternalIP addresses.
pub(super) fn node_row(node: &Value, now: i64) -> Row {
    let ready = items(&node["status"]["conditions"])
        .iter()
        .find(|c| c["type"] == "Ready")
        .map(|c| match s(c, &["status"]) {
            "True" => "Ready",
            "False" => "NotReady",
            _ => "Unknown",
        })
        .unwrap_or("Unknown");
    let mut status = ready.to_string();
    if node["spec"]["unschedulable"].as_bool() == Some(true) {
        status.push_str(",SchedulingDisabled");
    }
    let mut roles: Vec<String> = node["metadata"]["labels"]
        .as_object()
        .map(|labels| {
            labels
                .iter()
                .filter_map(|(k, v)| {
                    if let Some(role) = k.strip_prefix("node-role.kubernetes.io/") {
                        (!role.is_empty()).then(|| role.to_string())
                    } else if k == "kubernetes.io/role" {
                        v.as_str().filter(|r| !r.is_empty()).map(str::to_string)
                    } else {
                        None
                    }
                })
                .collect()
        })
        .unwrap_or_default();
    roles.sort();
    roles.dedup();
    let roles = if roles.is_empty() {
        "<none>".to_string()
    } else {
        roles.join(",")
    };
    let address = |kind: &str| {
        items(&node["status"]["addresses"])
            .iter()
            .find(|a| a["type"] == kind)
            .map_or("<none>".to_string(), |a| s(a, &["address"]).to_string())
    };
    let info = &node["status"]["nodeInfo"];
    let or_unknown = |x: &str| if x.is_empty() { "<unknown>" } else { x }.to_string();
    vec![
        name(node),
        json!(status),
        json!(roles),
        age_cell(node, now),
        json!(s(info, &["kubeletVersion"])),
        json!(address("InternalIP")),
        json!(address("ExternalIP")),
        json!(or_unknown(s(info, &["osImage"]))),
        json!(or_unknown(s(info, &["kernelVersion"]))),
        json!(or_unknown(s(info, &["containerRuntimeVersion"]))),
    ]
    .into()
}

fn object_len(v: &Value) -> usize {
    v.as_object().map_or(0, |m| m.len())
}

pub(super) fn configmap_columns() -> Vec<Value> {
    vec![
        name_col(),
        string_col(
            "Data",
            0,
            "Data contains the configuration data. Each key must consist of alphanumeric characters, '-', '_' or '.'.",
        ),
        age_col(),
    ]
}

pub(super) fn configmap_row(cm: &Value, now: i64) -> Row {
    let n = object_len(&cm["data"]) + object_len(&cm["binaryData"]);
    vec![name(cm), json!(n), age_cell(cm, now)].into()
}

pub(super) fn secret_columns() -> Vec<Value> {
    vec![
        name_col(),
        string_col(
            "Type",
            0,
            "Used to facilitate programmatic handling of secret data.",
        ),
        string_col("Data", 0, "Data contains the secret data."),
        age_col(),
    ]
}

pub(super) fn secret_row(secret: &Value, now: i64) -> Row {
    vec![
        name(secret),
        json!(s(secret, &["type"])),
        json!(object_len(&secret["data"])),
        age_cell(secret, now),
    ]
    .into()
}

pub(super) fn lease_columns() -> Vec<Value> {
    vec![
        name_col(),
        string_col(
            "Holder",
            0,
            "holderIdentity contains the identity of the holder of a current lease.",
        ),
        age_col(),
    ]
}

pub(super) fn lease_row(lease: &Value, now: i64) -> Row {
    vec![
        name(lease),
        json!(s(lease, &["spec", "holderIdentity"])),
        age_cell(lease, now),
    ]
    .into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn simple_kinds() {
        let sts = json!({"metadata": {"name": "vc"}, "spec": {"replicas": 3, "template": {"spec": {"containers": [{"name": "valkey", "image": "valkey:8"}]}}}, "status": {"readyReplicas": 2}});
        assert_eq!(
            statefulset_row(&sts, 0).cells[1..],
            [
                json!("2/3"),
                json!("<unknown>"),
                json!("valkey"),
                json!("valkey:8")
            ]
        );
        let pdb = json!({"metadata": {"name": "p"}, "spec": {"maxUnavailable": 1}, "status": {"disruptionsAllowed": 1}});
        assert_eq!(
            pdb_row(&pdb, 0).cells[1..4],
            [json!("N/A"), json!("1"), json!(1)]
        );
        let pvc = json!({"metadata": {"name": "data-vc-0"}, "spec": {"volumeName": "pv1", "storageClassName": "standard", "volumeMode": "Filesystem"}, "status": {"phase": "Bound", "capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"]}});
        assert_eq!(
            pvc_row(&pvc, 0).cells[1..7],
            [
                json!("Bound"),
                json!("pv1"),
                json!("1Gi"),
                json!("RWO"),
                json!("standard"),
                json!("<unset>")
            ]
        );
        let cm = json!({"metadata": {"name": "c"}, "data": {"a": "1", "b": "2"}, "binaryData": {"c": ""}});
        assert_eq!(configmap_row(&cm, 0).cells[1], json!(3));
    }
}
