//! The little bit of OpenAPI schema knowledge server-side apply needs: which
//! lists are associative (list-maps, with their key fields) and which maps are
//! atomic. Everything else is a granular map or an atomic list.

/// Key fields of the associative list at `path` (field names from the object
/// root, list items not included) for objects of `kind`, or `None` if the list
/// is atomic.
pub(crate) fn list_keys(kind: &str, path: &[String]) -> Option<&'static [&'static str]> {
    let last = path.last()?.as_str();
    let parent = path.len().checked_sub(2).map(|i| path[i].as_str());
    let is = |p: &[&str]| path.len() == p.len() && path.iter().zip(p).all(|(a, b)| a == b);
    match last {
        "ports" if kind == "Service" && is(&["spec", "ports"]) => Some(&["port", "protocol"]),
        "ports" if matches!(parent, Some("containers" | "initContainers")) => {
            Some(&["containerPort", "protocol"])
        }
        "containers" | "initContainers" | "ephemeralContainers" if in_pod_spec(path) => {
            Some(&["name"])
        }
        "env"
            if matches!(
                parent,
                Some("containers" | "initContainers" | "ephemeralContainers")
            ) =>
        {
            Some(&["name"])
        }
        "volumes" if in_pod_spec(path) => Some(&["name"]),
        "imagePullSecrets" if in_pod_spec(path) => Some(&["name"]),
        "volumeMounts" => Some(&["mountPath"]),
        "ownerReferences" if is(&["metadata", "ownerReferences"]) => Some(&["uid"]),
        "conditions" if path.len() == 2 && path[0] == "status" => Some(&["type"]),
        "externalEndpoints" if path.len() == 2 && path[0] == "status" => Some(&["shardIndex"]),
        _ => None,
    }
}

fn in_pod_spec(path: &[String]) -> bool {
    let n = path.len();
    (n == 2 && path[0] == "spec")
        || (n == 4 && path[0] == "spec" && path[1] == "template" && path[2] == "spec")
}

/// Maps (or structs) that are replaced as a whole by apply.
pub(crate) fn atomic_map(kind: &str, path: &[String]) -> bool {
    let is = |p: &[&str]| path.len() == p.len() && path.iter().zip(p).all(|(a, b)| a == b);
    let n = path.len();
    // An env var's source selectors are `+structType=atomic`.
    if n >= 3
        && path[n - 3] == "env"
        && path[n - 2] == "valueFrom"
        && matches!(
            path[n - 1].as_str(),
            "fieldRef" | "resourceFieldRef" | "configMapKeyRef" | "secretKeyRef"
        )
    {
        return true;
    }
    match kind {
        "Service" => is(&["spec", "selector"]),
        // `metav1.LabelSelector` is an atomic struct.
        "StatefulSet" | "PodDisruptionBudget" | "PersistentVolumeClaim" => {
            is(&["spec", "selector"]) || is(&["spec", "template", "spec", "nodeSelector"])
        }
        // `nodeSelector` is `+mapType=atomic` in PodSpec.
        "Pod" => is(&["spec", "nodeSelector"]),
        _ => false,
    }
}

/// Whether the items of the associative list at `path` are atomic structs
/// (an `OwnerReference` is `+structType=atomic`): an item is owned whole.
pub(crate) fn atomic_items(path: &[String]) -> bool {
    path.len() == 2 && path[0] == "metadata" && path[1] == "ownerReferences"
}

/// Fields of the built-in kinds that every object the API server encodes
/// has, even empty, at `path` (field names from the root, list items not
/// included): Go struct values (not pointers) and a pod spec's
/// `containers` (not omitempty). An update never adds them, so it records
/// no `.` for them, where it does for a map, a pointer struct or a list it
/// adds.
pub(crate) fn always_encoded(kind: &str, path: &[String]) -> bool {
    let p: Vec<&str> = path.iter().map(String::as_str).collect();
    match p.as_slice() {
        ["metadata"] => true,
        ["spec", "containers"] => kind == "Pod",
        ["spec", "template", "spec", "containers"] => kind == "StatefulSet",
        [
            ..,
            "containers" | "initContainers" | "ephemeralContainers",
            "resources",
        ] => true,
        ["spec"] => matches!(
            kind,
            "Service"
                | "Pod"
                | "StatefulSet"
                | "PersistentVolumeClaim"
                | "PodDisruptionBudget"
                | "Namespace"
                | "Node"
                | "Lease"
        ),
        ["status"] => matches!(
            kind,
            "Service"
                | "Pod"
                | "StatefulSet"
                | "PersistentVolumeClaim"
                | "PodDisruptionBudget"
                | "Namespace"
                | "Node"
        ),
        ["status", "loadBalancer"] => kind == "Service",
        ["spec", "template"]
        | ["spec", "template", "metadata"]
        | ["spec", "template", "spec"]
        | ["spec", "updateStrategy"] => kind == "StatefulSet",
        ["spec", "resources"] => kind == "PersistentVolumeClaim",
        _ => false,
    }
}

/// Default for a missing key field (the real schema defaults `protocol`).
pub(crate) fn key_default(field: &str) -> Option<serde_json::Value> {
    match field {
        "protocol" => Some(serde_json::Value::String("TCP".into())),
        _ => None,
    }
}

/// Whether the map at `path` is a Go map of the API server's types (of any
/// object's `metadata`, or of a built-in kind): encoded `omitempty`, so an
/// empty one is not stored. A custom resource's own content is stored as
/// sent.
fn go_map(kind: &str, custom: bool, path: &[String]) -> bool {
    let p: Vec<&str> = path.iter().map(String::as_str).collect();
    match p.as_slice() {
        ["metadata", "labels" | "annotations"] => true,
        _ if custom => false,
        [.., "metadata", "labels" | "annotations"] => true,
        ["data" | "binaryData" | "stringData"] => true,
        // A Service's selector is a map; others are LabelSelector structs.
        ["spec", "selector"] => kind == "Service",
        [.., "spec", "nodeSelector"] => true,
        [.., "matchLabels"] => true,
        [.., "resources", "limits" | "requests"] => true,
        _ => false,
    }
}

/// Leaves out the empty Go maps of `obj` (see [`go_map`]), as decoding a
/// write into the API server's types and encoding it again does: a patch
/// removing the last label stores no `labels: {}`.
pub(crate) fn drop_empty_go_maps(kind: &str, custom: bool, obj: &mut serde_json::Value) {
    fn walk(v: &mut serde_json::Value, kind: &str, custom: bool, names: &mut Vec<String>) {
        match v {
            serde_json::Value::Object(m) => {
                m.retain(|k, c| {
                    names.push(k.clone());
                    let empty = c.as_object().is_some_and(serde_json::Map::is_empty)
                        && go_map(kind, custom, names);
                    names.pop();
                    !empty
                });
                for (k, c) in m.iter_mut() {
                    names.push(k.clone());
                    walk(c, kind, custom, names);
                    names.pop();
                }
            }
            serde_json::Value::Array(items) => {
                for i in items {
                    walk(i, kind, custom, names);
                }
            }
            _ => {}
        }
    }
    walk(obj, kind, custom, &mut Vec::new());
}
