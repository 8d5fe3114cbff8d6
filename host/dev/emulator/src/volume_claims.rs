//! PersistentVolumeClaims for StatefulSet pods, as the StatefulSet
//! controller makes them from `spec.volumeClaimTemplates`: claim
//! `<template>-<pod>` is created before its pod (and bound at once, as if a
//! dynamic provisioner had provisioned it), is never deleted with the pod,
//! and carries the ownerReferences `persistentVolumeClaimRetentionPolicy`
//! asks for, so the garbage collector removes it with the StatefulSet
//! (`whenDeleted: Delete`) or with a scaled-down pod (`whenScaled: Delete`).

use serde_json::{Map, Value, json};

use crate::ops::{Opts, PatchType, State, Target};
use crate::resources::Res;

const MANAGER: &str = "kube-controller-manager";

fn claims_res(state: &State) -> Option<Res> {
    state.registry.find("", "v1", "persistentvolumeclaims")
}

fn templates(sts: &Value) -> &[Value] {
    sts["spec"]["volumeClaimTemplates"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
}

fn claim_name(template: &Value, pod_name: &str) -> String {
    let t = template["metadata"]["name"].as_str().unwrap_or_default();
    format!("{t}-{pod_name}")
}

fn target(res: &Res, ns: &str, name: String, status: bool) -> Target {
    Target {
        res: res.clone(),
        ns: ns.to_string(),
        name,
        status,
    }
}

/// `metav1.NewControllerRef`.
fn controller_ref(api_version: &str, kind: &str, owner: &Value) -> Value {
    json!({
        "apiVersion": api_version,
        "kind": kind,
        "name": owner["metadata"]["name"],
        "uid": owner["metadata"]["uid"],
        "controller": true,
        "blockOwnerDeletion": true,
    })
}

/// The ownerReferences a claim should have (`updateClaimOwnerRefForSetAndPod`),
/// or `None` to leave it alone: refs to the StatefulSet or pod of the same
/// name but another uid (a previous incarnation's) are not touched.
/// Otherwise the refs to this set and pod are replaced by: the pod if
/// `whenScaled: Delete` and the pod is scaled down, else the set if
/// `whenDeleted: Delete`. A claim controlled by anything else only loses
/// our refs.
fn wanted_refs(
    claim: &Value,
    sts: &Value,
    pod: Option<&Value>,
    scaled_down: bool,
) -> Option<Vec<Value>> {
    let refs: Vec<Value> = claim["metadata"]["ownerReferences"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let is = |r: &Value, api_version: &str, kind: &str, owner: &Value| {
        r["apiVersion"] == api_version
            && r["kind"] == kind
            && r["name"] == owner["metadata"]["name"]
    };
    let set_ref = |r: &Value| is(r, "apps/v1", "StatefulSet", sts);
    let pod_ref = |r: &Value| pod.is_some_and(|p| is(r, "v1", "Pod", p));
    let stale = refs.iter().any(|r| {
        (set_ref(r) && r["uid"] != sts["metadata"]["uid"])
            || (pod_ref(r) && pod.is_some_and(|p| r["uid"] != p["metadata"]["uid"]))
    });
    if stale {
        return None;
    }
    let foreign_controller = refs
        .iter()
        .any(|r| r["controller"] == true && !set_ref(r) && !pod_ref(r));
    let mut out: Vec<Value> = refs
        .into_iter()
        .filter(|r| !set_ref(r) && !pod_ref(r))
        .collect();
    if foreign_controller {
        return Some(out);
    }
    let policy = &sts["spec"]["persistentVolumeClaimRetentionPolicy"];
    let delete = |f: &str| policy[f] == "Delete";
    match pod {
        Some(p) if scaled_down && delete("whenScaled") => {
            out.push(controller_ref("v1", "Pod", p));
        }
        _ if delete("whenDeleted") => {
            out.push(controller_ref("apps/v1", "StatefulSet", sts));
        }
        _ => {}
    }
    Some(out)
}

/// The claim for one template and pod (`getPersistentVolumeClaims`): the
/// template's labels (plus the set's `matchLabels`), annotations and spec.
fn new_claim(sts: &Value, template: &Value, pod_name: &str) -> Value {
    let mut labels = template["metadata"]["labels"]
        .as_object()
        .cloned()
        .unwrap_or_default();
    if let Some(sel) = sts["spec"]["selector"]["matchLabels"].as_object() {
        labels.extend(sel.iter().map(|(k, v)| (k.clone(), v.clone())));
    }
    let mut meta = Map::new();
    meta.insert("name".into(), json!(claim_name(template, pod_name)));
    meta.insert("labels".into(), Value::Object(labels));
    if let Some(a) = template["metadata"].get("annotations") {
        meta.insert("annotations".into(), a.clone());
    }
    json!({
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": meta,
        "spec": template["spec"],
    })
}

/// Creates the missing claims of pod `pod_name` (in range), each bound at
/// once: `status.phase: Bound`, `accessModes` and `capacity` from the spec.
pub(crate) fn create_missing(state: &mut State, sts: &Value, pod_name: &str) {
    let Some(res) = claims_res(state) else {
        return;
    };
    let ns = sts["metadata"]["namespace"].as_str().unwrap_or_default();
    let opts = Opts::internal(MANAGER);
    for template in templates(sts) {
        let name = claim_name(template, pod_name);
        let t = target(&res, ns, name, false);
        if state.store.get(&t.key()).is_some() {
            continue;
        }
        let mut claim = new_claim(sts, template, pod_name);
        if let Some(refs) = wanted_refs(&claim, sts, None, false).filter(|r| !r.is_empty()) {
            claim["metadata"]["ownerReferences"] = json!(refs);
        }
        let Ok(created) = state.create(&res, ns, claim, &opts) else {
            continue;
        };
        let mut status = json!({"phase": "Bound", "accessModes": created["spec"]["accessModes"]});
        if let Some(storage) = created["spec"]["resources"]["requests"].get("storage") {
            status["capacity"] = json!({"storage": storage});
        }
        let patch = json!({ "status": status }).to_string();
        let st = Target { status: true, ..t };
        let _ = state.patch(&st, PatchType::Merge, patch.as_bytes(), &opts);
    }
}

/// Brings the ownerReferences of `pod`'s claims in line with the set's
/// retention policy (written only when they change). Call with
/// `scaled_down` before deleting a pod whose ordinal is at or above
/// `replicas`.
pub(crate) fn update_owners(state: &mut State, sts: &Value, pod: &Value, scaled_down: bool) {
    let Some(res) = claims_res(state) else {
        return;
    };
    let ns = sts["metadata"]["namespace"].as_str().unwrap_or_default();
    let pod_name = pod["metadata"]["name"].as_str().unwrap_or_default();
    for template in templates(sts) {
        let t = target(&res, ns, claim_name(template, pod_name), false);
        let Some(claim) = state.store.get(&t.key()).cloned() else {
            continue;
        };
        let Some(refs) = wanted_refs(&claim, sts, Some(pod), scaled_down) else {
            continue;
        };
        let have = claim["metadata"]["ownerReferences"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        if refs == have {
            continue;
        }
        let mut new = Value::clone(&claim);
        let meta = new["metadata"].as_object_mut().expect("metadata");
        if refs.is_empty() {
            meta.remove("ownerReferences");
        } else {
            meta.insert("ownerReferences".into(), json!(refs));
        }
        let _ = state.replace(&t, new, &Opts::internal(MANAGER));
    }
}

#[cfg(test)]
mod tests {
    use super::wanted_refs;
    use serde_json::{Value, json};

    fn sts(when_deleted: &str, when_scaled: &str) -> Value {
        json!({"metadata": {"name": "db", "uid": "s1"}, "spec": {
            "persistentVolumeClaimRetentionPolicy": {"whenDeleted": when_deleted, "whenScaled": when_scaled}}})
    }

    fn uids(refs: Option<Vec<Value>>) -> Vec<String> {
        refs.unwrap()
            .iter()
            .map(|r| r["uid"].as_str().unwrap().to_string())
            .collect()
    }

    #[test]
    fn owners_follow_the_retention_policy() {
        let pod = json!({"metadata": {"name": "db-0", "uid": "p1"}});
        let claim = json!({"metadata": {"name": "data-db-0"}});
        let refs = |d, s, down| uids(wanted_refs(&claim, &sts(d, s), Some(&pod), down));
        assert!(refs("Retain", "Retain", false).is_empty());
        assert!(refs("Retain", "Retain", true).is_empty());
        assert_eq!(refs("Delete", "Retain", false), ["s1"]);
        assert_eq!(refs("Delete", "Retain", true), ["s1"]);
        assert!(refs("Retain", "Delete", false).is_empty());
        assert_eq!(refs("Retain", "Delete", true), ["p1"]);
        assert_eq!(refs("Delete", "Delete", false), ["s1"]);
        assert_eq!(refs("Delete", "Delete", true), ["p1"]);
    }

    #[test]
    fn foreign_controllers_and_stale_refs_are_respected() {
        let pod = json!({"metadata": {"name": "db-0", "uid": "p1"}});
        let s = sts("Delete", "Retain");
        let foreign = json!({"metadata": {"ownerReferences": [
            {"apiVersion": "v1", "kind": "ConfigMap", "name": "x", "uid": "c1", "controller": true}]}});
        assert_eq!(uids(wanted_refs(&foreign, &s, Some(&pod), false)), ["c1"]);
        let stale = json!({"metadata": {"ownerReferences": [
            {"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "db", "uid": "old", "controller": true}]}});
        assert!(wanted_refs(&stale, &s, Some(&pod), false).is_none());
    }
}
