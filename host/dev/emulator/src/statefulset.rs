//! A minimal StatefulSet controller: keeps Pods `<name>-0..replicas-1` (and
//! their PersistentVolumeClaims, see [`crate::volume_claims`]) in line with
//! each StatefulSet and reports `.status`. Pod status (IPs, readiness) is
//! left to the caller.

use std::sync::Arc;

use serde_json::{Map, Value, json};

use crate::fieldset::canonical_json;
use crate::ops::{DeleteOpts, Opts, PatchType, State, Target};
use crate::volume_claims;

const MANAGER: &str = "kube-controller-manager";

fn revision_hash(template: &Value) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in canonical_json(template).bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{h:016x}")[..10].to_string()
}

fn is_ready(pod: &Value) -> bool {
    pod["status"]["conditions"].as_array().is_some_and(|cs| {
        cs.iter()
            .any(|c| c["type"] == "Ready" && c["status"] == "True")
    })
}

/// Reconciles the StatefulSet a change in `ns` touched: the StatefulSet
/// itself, or the one that controls a Pod (by its controller
/// `ownerReference`). Other StatefulSets are left alone, so a write costs
/// one StatefulSet's work, however many share the namespace. Orphan Pods are
/// not adopted.
pub(crate) fn reconcile_touched(state: &mut State, ns: &str, object: &Value) {
    let Some(sts_res) = state.registry.find("apps", "v1", "statefulsets") else {
        return;
    };
    let name = match object["kind"].as_str() {
        Some("StatefulSet") => object["metadata"]["name"].as_str(),
        _ => object["metadata"]["ownerReferences"]
            .as_array()
            .and_then(|refs| {
                refs.iter()
                    .find(|r| r["controller"] == true && r["kind"] == "StatefulSet")
            })
            .and_then(|r| r["name"].as_str()),
    };
    let Some(name) = name else {
        return;
    };
    let key = (sts_res.key(), ns.to_string(), name.to_string());
    if let Some(sts) = state.store.get(&key).cloned() {
        reconcile(state, &sts);
    }
}

fn pod_for(sts: &Value, ordinal: i64, revision: &str) -> Value {
    let name = sts["metadata"]["name"].as_str().unwrap_or_default();
    let pod_name = format!("{name}-{ordinal}");
    let template = &sts["spec"]["template"];
    let mut labels = template["metadata"]["labels"]
        .as_object()
        .cloned()
        .unwrap_or_default();
    labels.insert("statefulset.kubernetes.io/pod-name".into(), json!(pod_name));
    labels.insert(
        "apps.kubernetes.io/pod-index".into(),
        json!(ordinal.to_string()),
    );
    labels.insert("controller-revision-hash".into(), json!(revision));
    let mut spec = template["spec"].as_object().cloned().unwrap_or_default();
    spec.insert("hostname".into(), json!(pod_name));
    if let Some(svc) = sts["spec"]["serviceName"]
        .as_str()
        .filter(|s| !s.is_empty())
    {
        spec.insert("subdomain".into(), json!(svc));
    }
    if let Some(vcts) = sts["spec"]["volumeClaimTemplates"].as_array() {
        let vols = spec.entry("volumes").or_insert(json!([]));
        if let Some(vols) = vols.as_array_mut() {
            for vct in vcts {
                let vname = vct["metadata"]["name"].as_str().unwrap_or_default();
                vols.retain(|v| v["name"].as_str() != Some(vname));
                vols.push(json!({
                    "name": vname,
                    "persistentVolumeClaim": {"claimName": format!("{vname}-{pod_name}")},
                }));
            }
        }
    }
    let mut meta = Map::new();
    meta.insert("name".into(), json!(pod_name));
    meta.insert("labels".into(), Value::Object(labels));
    if let Some(a) = template["metadata"].get("annotations") {
        meta.insert("annotations".into(), a.clone());
    }
    meta.insert(
        "ownerReferences".into(),
        json!([{
            "apiVersion": "apps/v1",
            "kind": "StatefulSet",
            "name": name,
            "uid": sts["metadata"]["uid"],
            "controller": true,
            "blockOwnerDeletion": true,
        }]),
    );
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec})
}

/// With `instant_pods`, the kubelet's part: a new Pod is at once Running and
/// Ready with the next pod IP (10.244.0.0/16 on). Otherwise nothing.
fn start(state: &mut State, pod: &Target) {
    if !state.instant_pods {
        return;
    }
    let n = state.pod_ips;
    state.pod_ips += 1;
    let ip = format!("10.{}.{}.{}", 244 + (n >> 16), (n >> 8) & 0xff, n & 0xff);
    let now = crate::util::now();
    let cond = |t: &str| json!({"type": t, "status": "True", "lastProbeTime": null, "lastTransitionTime": now});
    let status = json!({"status": {
        "phase": "Running",
        "podIP": ip,
        "podIPs": [{"ip": ip}],
        "hostIP": "192.168.0.1",
        "hostIPs": [{"ip": "192.168.0.1"}],
        "conditions": [cond("PodScheduled"), cond("Initialized"), cond("ContainersReady"), cond("Ready")],
    }});
    let target = Target {
        status: true,
        ..pod.clone()
    };
    let _ = state.patch(
        &target,
        PatchType::Merge,
        status.to_string().as_bytes(),
        &Opts::internal("kubelet"),
    );
}

fn reconcile(state: &mut State, sts: &Value) {
    let Some(pods_res) = state.registry.find("", "v1", "pods") else {
        return;
    };
    let Some(sts_res) = state.registry.find("apps", "v1", "statefulsets") else {
        return;
    };
    let ns = sts["metadata"]["namespace"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let name = sts["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let uid = sts["metadata"]["uid"].clone();
    if sts["metadata"].get("deletionTimestamp").is_some() {
        return;
    }
    let replicas = sts["spec"]["replicas"].as_i64().unwrap_or(1).max(0);
    let parallel = sts["spec"]["podManagementPolicy"] == "Parallel";
    let on_delete = sts["spec"]["updateStrategy"]["type"] == "OnDelete";
    let partition = sts["spec"]["updateStrategy"]["rollingUpdate"]["partition"]
        .as_i64()
        .unwrap_or(0);
    let revision = format!("{name}-{}", revision_hash(&sts["spec"]["template"]));
    let opts = Opts::internal(MANAGER);
    let pod_target = |n: &str| Target {
        res: pods_res.clone(),
        ns: ns.clone(),
        name: n.to_string(),
        status: false,
    };

    let owned = |state: &State| -> Vec<(i64, Arc<Value>)> {
        let mut v: Vec<(i64, Arc<Value>)> = state
            .store
            .list_shared(&pods_res.key(), Some(&ns))
            .into_iter()
            .filter(|p| {
                p["metadata"]["ownerReferences"]
                    .as_array()
                    .is_some_and(|rs| {
                        rs.iter()
                            .any(|r| r["uid"] == uid && r["controller"] == true)
                    })
            })
            .filter_map(|p| {
                let pname = p["metadata"]["name"].as_str()?;
                let ord = pname.strip_prefix(&format!("{name}-"))?.parse().ok()?;
                Some((ord, p.clone()))
            })
            .collect();
        v.sort_by_key(|(o, _)| *o);
        v
    };

    // Scale down, highest ordinal first; the pod's claims first get the
    // owners `whenScaled` asks for.
    for (ord, pod) in owned(state).into_iter().rev() {
        if ord >= replicas {
            volume_claims::update_owners(state, sts, &pod, true);
            let _ = state.delete(
                &pod_target(&format!("{name}-{ord}")),
                &DeleteOpts::default(),
                &opts,
            );
        }
    }
    // Create missing pods and replace outdated ones.
    for ord in 0..replicas {
        let pods = owned(state);
        let current = pods.iter().find(|(o, _)| *o == ord).map(|(_, p)| p.clone());
        match current {
            None => {
                let predecessors_ready = pods.iter().filter(|(o, _)| *o < ord).count() as i64
                    == ord
                    && pods
                        .iter()
                        .filter(|(o, _)| *o < ord)
                        .all(|(_, p)| is_ready(p));
                if !parallel && !predecessors_ready {
                    break;
                }
                volume_claims::create_missing(state, sts, &format!("{name}-{ord}"));
                let _ = state.create(&pods_res, &ns, pod_for(sts, ord, &revision), &opts);
                start(state, &pod_target(&format!("{name}-{ord}")));
            }
            Some(p) => {
                // A pending pod gets any claim it lacks; claims follow the
                // retention policy.
                if p["status"]["phase"] == "Pending" {
                    volume_claims::create_missing(state, sts, &format!("{name}-{ord}"));
                }
                volume_claims::update_owners(state, sts, &p, false);
                let outdated =
                    p["metadata"]["labels"]["controller-revision-hash"] != revision.as_str();
                if outdated && !on_delete && ord >= partition {
                    let pname = format!("{name}-{ord}");
                    let _ = state.delete(&pod_target(&pname), &DeleteOpts::default(), &opts);
                    let _ = state.create(&pods_res, &ns, pod_for(sts, ord, &revision), &opts);
                    start(state, &pod_target(&pname));
                }
            }
        }
    }

    // Status.
    let pods = owned(state);
    let ready = pods.iter().filter(|(_, p)| is_ready(p)).count();
    let updated = pods
        .iter()
        .filter(|(_, p)| p["metadata"]["labels"]["controller-revision-hash"] == revision.as_str())
        .count();
    let status = json!({
        "observedGeneration": sts["metadata"]["generation"],
        "replicas": pods.len(),
        "readyReplicas": ready,
        "availableReplicas": ready,
        "currentReplicas": updated,
        "updatedReplicas": updated,
        "currentRevision": revision,
        "updateRevision": revision,
        "collisionCount": 0,
    });
    let t = Target {
        res: sts_res,
        ns,
        name,
        status: true,
    };
    // As the real controller, write status only when it changes.
    let current = state.store.get(&t.key()).map(|s| &s["status"]);
    let unchanged = status
        .as_object()
        .expect("an object")
        .iter()
        .all(|(k, v)| current.is_some_and(|c| c.get(k) == Some(v)));
    if !unchanged {
        let patch = json!({ "status": status }).to_string();
        let _ = state.patch(&t, PatchType::Merge, patch.as_bytes(), &opts);
    }
}
