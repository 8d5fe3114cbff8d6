//! The disruption controller's part: every PodDisruptionBudget's `.status`
//! (`currentHealthy`, `desiredHealthy`, `expectedPods`,
//! `disruptionsAllowed`, `disruptedPods`, `observedGeneration` and the
//! `DisruptionAllowed` condition), computed as kube-controller-manager does
//! but synchronously, inside the write that could change it (a Pod, a
//! budget or a StatefulSet's `replicas`), and again before each eviction is
//! decided. The status is written only when it changes.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::{Map, Value, json};

use crate::ops::{Opts, State, Target};
use crate::resources::Res;
use crate::selectors::label_selector_matches;
use crate::store::ObjKey;

const MANAGER: &str = "kube-controller-manager";

/// How long an eviction's `disruptedPods` entry holds a pod out of
/// `currentHealthy` if the pod is not deleted (the controller's
/// `DeletionTimeout`).
const DELETION_TIMEOUT_SECS: i64 = 120;

pub(crate) fn budgets_res(state: &State) -> Option<Res> {
    state.registry.find("policy", "v1", "poddisruptionbudgets")
}

fn pods_res(state: &State) -> Option<Res> {
    state.registry.find("", "v1", "pods")
}

/// The Pod's `Ready` condition is `True` (`podutil.IsPodReady`).
pub(crate) fn is_ready(pod: &Value) -> bool {
    pod["status"]["conditions"].as_array().is_some_and(|cs| {
        cs.iter()
            .any(|c| c["type"] == "Ready" && c["status"] == "True")
    })
}

pub(crate) fn is_deleting(obj: &Value) -> bool {
    obj["metadata"].get("deletionTimestamp").is_some()
}

/// Whether a budget selects a Pod: same namespace and `spec.selector`
/// matches (a missing selector selects nothing, `{}` everything).
pub(crate) fn selects(budget: &Value, pod: &Value) -> bool {
    budget["metadata"]["namespace"] == pod["metadata"]["namespace"]
        && label_selector_matches(&budget["spec"]["selector"], pod)
}

/// The budgets in `ns` that select `pod`.
pub(crate) fn budgets_for(state: &State, ns: &str, pod: &Value) -> Vec<Arc<Value>> {
    let Some(res) = budgets_res(state) else {
        return Vec::new();
    };
    state
        .store
        .list_shared(&res.key(), Some(ns))
        .into_iter()
        .filter(|b| selects(b, pod))
        .collect()
}

fn controller_of(obj: &Value) -> Option<&Value> {
    obj["metadata"]["ownerReferences"]
        .as_array()?
        .iter()
        .find(|r| r["controller"] == true)
}

/// Resyncs the budgets a change may affect: the budget itself; for a Pod,
/// the budgets selecting it before or after; for a StatefulSet whose
/// `replicas` changed, the budgets selecting any of its Pods.
pub(crate) fn after_change(
    state: &mut State,
    res: &Res,
    ns: &str,
    prev: Option<&Value>,
    now: Option<&Value>,
) {
    let Some(budgets) = budgets_res(state) else {
        return;
    };
    let affected: Vec<ObjKey> = if res.key() == budgets.key() {
        let Some(obj) = now else {
            return;
        };
        vec![key_of(&budgets, obj)]
    } else if res.group.is_empty() && res.plural == "pods" {
        state
            .store
            .list_shared(&budgets.key(), Some(ns))
            .iter()
            .filter(|b| [prev, now].into_iter().flatten().any(|p| selects(b, p)))
            .map(|b| key_of(&budgets, b))
            .collect()
    } else if res.group == "apps" && res.plural == "statefulsets" {
        let replicas = |o: Option<&Value>| o.map(|o| o["spec"]["replicas"].clone());
        if replicas(prev) == replicas(now) {
            return;
        }
        let Some(sts) = now.or(prev) else {
            return;
        };
        let uid = &sts["metadata"]["uid"];
        let Some(pods) = pods_res(state) else {
            return;
        };
        let owned: Vec<Arc<Value>> = state
            .store
            .list_shared(&pods.key(), Some(ns))
            .into_iter()
            .filter(|p| controller_of(p).is_some_and(|r| r["uid"] == *uid))
            .collect();
        if owned.is_empty() {
            return;
        }
        state
            .store
            .list_shared(&budgets.key(), Some(ns))
            .iter()
            .filter(|b| owned.iter().any(|p| selects(b, p)))
            .map(|b| key_of(&budgets, b))
            .collect()
    } else {
        return;
    };
    for key in affected {
        sync(state, &key);
    }
}

fn key_of(res: &Res, obj: &Value) -> ObjKey {
    let s = |f: &str| obj["metadata"][f].as_str().unwrap_or_default().to_string();
    (res.key(), s("namespace"), s("name"))
}

/// `intstr.GetScaledValueFromIntOrPercent(v, total, roundUp=true)`.
fn scaled(v: &Value, total: i64) -> Result<i64, String> {
    match v {
        Value::Number(n) => n.as_i64().ok_or_else(|| format!("invalid value {n}")),
        Value::String(s) => {
            let p: i64 = s
                .strip_suffix('%')
                .and_then(|p| p.parse().ok())
                .ok_or_else(|| format!("invalid value for IntOrString: invalid value {s:?}"))?;
            Ok((p * total + 99).div_euclid(100))
        }
        other => Err(format!("invalid value {other}")),
    }
}

/// The sum of the scales of the matching Pods' controllers
/// (`getExpectedScale`); Pods with no controller count nothing. Only
/// StatefulSets are known controllers here: another controller kind is the
/// controller's "found no controllers" error.
fn expected_scale(state: &State, ns: &str, pods: &[Arc<Value>]) -> Result<i64, String> {
    let mut scales: BTreeMap<String, i64> = BTreeMap::new();
    let sts_res = state.registry.find("apps", "v1", "statefulsets");
    for pod in pods {
        let Some(r) = controller_of(pod) else {
            continue;
        };
        let uid = r["uid"].as_str().unwrap_or_default();
        if scales.contains_key(uid) {
            continue;
        }
        let sts = sts_res
            .as_ref()
            .filter(|_| r["kind"] == "StatefulSet" && r["apiVersion"] == "apps/v1")
            .and_then(|res| {
                let name = r["name"].as_str().unwrap_or_default().to_string();
                state.store.get(&(res.key(), ns.to_string(), name))
            })
            .filter(|s| s["metadata"]["uid"].as_str() == Some(uid));
        let Some(sts) = sts else {
            return Err(format!(
                "found no controllers for pod {:?}",
                pod["metadata"]["name"].as_str().unwrap_or_default()
            ));
        };
        scales.insert(
            uid.to_string(),
            sts["spec"]["replicas"].as_i64().unwrap_or(1),
        );
    }
    Ok(scales.values().sum())
}

/// `(expectedPods, desiredHealthy)` (`getExpectedPodCount`).
fn expected_and_desired(
    state: &State,
    ns: &str,
    spec: &Value,
    pods: &[Arc<Value>],
) -> Result<(i64, i64), String> {
    let set = |f: &str| spec.get(f).filter(|v| !v.is_null());
    if let Some(max_unavailable) = set("maxUnavailable") {
        let expected = expected_scale(state, ns, pods)?;
        let desired = expected - scaled(max_unavailable, expected)?;
        Ok((expected, desired.max(0)))
    } else if let Some(min_available) = set("minAvailable") {
        if min_available.is_number() {
            Ok((pods.len() as i64, scaled(min_available, 0)?))
        } else {
            let expected = expected_scale(state, ns, pods)?;
            Ok((expected, scaled(min_available, expected)?))
        }
    } else {
        Ok((0, 0))
    }
}

fn seconds_of(ts: &Value) -> Option<i64> {
    ts.as_str()?
        .parse::<jiff::Timestamp>()
        .ok()
        .map(|t| t.as_second())
}

/// Sets the `DisruptionAllowed` condition as `apimeta.SetStatusCondition`
/// does: `lastTransitionTime` moves only when `status` changes.
pub(crate) fn set_condition(
    status: &mut Map<String, Value>,
    ok: bool,
    reason: &str,
    message: &str,
    observed_generation: &Value,
) {
    let conds = status.entry("conditions").or_insert_with(|| json!([]));
    if !conds.is_array() {
        *conds = json!([]);
    }
    let conds = conds.as_array_mut().expect("an array");
    let flag = if ok { "True" } else { "False" };
    let existing = conds.iter().position(|c| c["type"] == "DisruptionAllowed");
    let since = existing
        .map(|i| &conds[i])
        .filter(|c| c["status"] == flag)
        .map(|c| c["lastTransitionTime"].clone())
        .unwrap_or_else(|| json!(crate::util::now()));
    let cond = json!({
        "type": "DisruptionAllowed",
        "status": flag,
        "observedGeneration": observed_generation,
        "lastTransitionTime": since,
        "reason": reason,
        "message": message,
    });
    match existing {
        Some(i) => conds[i] = cond,
        None => conds.push(cond),
    }
}

/// Recomputes one budget's status and writes it if it changed.
pub(crate) fn sync(state: &mut State, key: &ObjKey) {
    let (Some(budgets), Some(pods_res)) = (budgets_res(state), pods_res(state)) else {
        return;
    };
    let Some(pdb) = state.store.get(key).cloned() else {
        return;
    };
    let ns = key.1.as_str();
    let pods: Vec<Arc<Value>> = state
        .store
        .list_shared(&pods_res.key(), Some(ns))
        .into_iter()
        .filter(|p| selects(&pdb, p))
        .collect();
    let old = pdb["status"].as_object().cloned().unwrap_or_default();
    let mut status = old.clone();
    match expected_and_desired(state, ns, &pdb["spec"], &pods) {
        Ok((expected, desired)) => {
            // Eviction marks stay while their pod exists, is not being
            // deleted and the deletion timeout has not passed.
            let now = jiff::Timestamp::now().as_second();
            let marks = &pdb["status"]["disruptedPods"];
            let disrupted: Map<String, Value> = pods
                .iter()
                .filter(|p| !is_deleting(p))
                .filter_map(|p| {
                    let name = p["metadata"]["name"].as_str()?;
                    let at = marks.get(name)?;
                    let fresh = seconds_of(at).is_some_and(|t| t + DELETION_TIMEOUT_SECS >= now);
                    fresh.then(|| (name.to_string(), at.clone()))
                })
                .collect();
            let healthy = pods
                .iter()
                .filter(|p| !is_deleting(p) && is_ready(p))
                .filter(|p| {
                    p["metadata"]["name"]
                        .as_str()
                        .is_none_or(|n| !disrupted.contains_key(n))
                })
                .count() as i64;
            let mut allowed = healthy - desired;
            if expected <= 0 || allowed <= 0 {
                allowed = 0;
            }
            status.insert(
                "observedGeneration".into(),
                pdb["metadata"]["generation"].clone(),
            );
            status.insert("disruptionsAllowed".into(), json!(allowed));
            status.insert("currentHealthy".into(), json!(healthy));
            status.insert("desiredHealthy".into(), json!(desired));
            status.insert("expectedPods".into(), json!(expected));
            if disrupted.is_empty() {
                status.remove("disruptedPods");
            } else {
                status.insert("disruptedPods".into(), Value::Object(disrupted));
            }
            let (ok, reason) = if allowed > 0 {
                (true, "SufficientPods")
            } else {
                (false, "InsufficientPods")
            };
            let generation = status["observedGeneration"].clone();
            set_condition(&mut status, ok, reason, "", &generation);
        }
        Err(message) => {
            // `failSafe`: no disruptions until the budget can be computed.
            status.insert("disruptionsAllowed".into(), json!(0));
            let generation = old.get("observedGeneration").cloned().unwrap_or(json!(0));
            set_condition(&mut status, false, "SyncFailed", &message, &generation);
        }
    }
    if status == old {
        return;
    }
    write_status(state, &budgets, key, &pdb, status);
}

/// Replaces a budget's `.status` through the status subresource, as the
/// controller's `UpdateStatus`, without re-entering [`after_change`].
pub(crate) fn write_status(
    state: &mut State,
    budgets: &Res,
    key: &ObjKey,
    pdb: &Value,
    status: Map<String, Value>,
) {
    let mut obj = pdb.clone();
    obj["status"] = Value::Object(status);
    let t = Target {
        res: budgets.clone(),
        ns: key.1.clone(),
        name: key.2.clone(),
        status: true,
    };
    let was = std::mem::replace(&mut state.in_disruption, true);
    let _ = state.replace(&t, obj, &Opts::internal(MANAGER));
    state.in_disruption = was;
}

#[cfg(test)]
mod tests {
    use super::scaled;
    use serde_json::json;

    #[test]
    fn percentages_round_up_as_kubernetes_does() {
        assert_eq!(scaled(&json!(2), 10), Ok(2));
        assert_eq!(scaled(&json!("50%"), 3), Ok(2));
        assert_eq!(scaled(&json!("34%"), 3), Ok(2));
        assert_eq!(scaled(&json!("33%"), 3), Ok(1));
        assert_eq!(scaled(&json!("0%"), 3), Ok(0));
        assert_eq!(scaled(&json!("100%"), 0), Ok(0));
        assert!(scaled(&json!("x"), 3).is_err());
    }
}
