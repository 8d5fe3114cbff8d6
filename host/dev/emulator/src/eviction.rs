//! The Pod `eviction` subresource (`POST .../pods/{name}/eviction` with a
//! `policy/v1 Eviction`), as the API server's eviction handler decides: the
//! Pod is deleted unless the one PodDisruptionBudget selecting it has no
//! disruption to spare (429), more than one budget selects it (500), or it
//! does not exist (404).

use serde_json::{Value, json};

use crate::disruption::{self, is_deleting, is_ready};
use crate::errors::{ApiError, ApiResult};
use crate::ops::{DeleteOpts, Opts, State, Target};
use crate::util::now;
use crate::verb::Verb;

const REFUSED: &str = "Cannot evict pod as it would violate the pod's disruption budget.";

/// The `Eviction` body: its identity checked against the URL, its
/// `deleteOptions` (preconditions, propagation, dry run) read.
fn parse(pod: &Target, body: &[u8]) -> ApiResult<(DeleteOpts, bool)> {
    let ev: Value = if body.iter().all(u8::is_ascii_whitespace) {
        json!({})
    } else {
        serde_json::from_slice(body).map_err(|e| ApiError::bad_request(e.to_string()))?
    };
    if !ev.is_object() {
        return Err(ApiError::bad_request("the request body must be an object"));
    }
    if let Some(av) = ev["apiVersion"].as_str()
        && !matches!(av, "policy/v1" | "policy/v1beta1")
    {
        return Err(ApiError::bad_request(format!(
            "the API version in the data ({av}) does not match the expected API version (policy/v1)"
        )));
    }
    if let Some(k) = ev["kind"].as_str()
        && k != "Eviction"
    {
        return Err(ApiError::bad_request(format!(
            "the kind in the data ({k}) does not match the expected kind (Eviction)"
        )));
    }
    if let Some(n) = ev["metadata"]["name"].as_str()
        && !n.is_empty()
        && n != pod.name
    {
        return Err(ApiError::bad_request(
            "name in URL does not match name in Eviction object",
        ));
    }
    if let Some(ns) = ev["metadata"]["namespace"].as_str()
        && !ns.is_empty()
        && ns != pod.ns
    {
        return Err(ApiError::namespace_mismatch());
    }
    let d = &ev["deleteOptions"];
    let s = |v: &Value| v.as_str().map(str::to_string);
    let opts = DeleteOpts {
        uid: s(&d["preconditions"]["uid"]),
        resource_version: s(&d["preconditions"]["resourceVersion"]),
        propagation: s(&d["propagationPolicy"]),
    };
    let dry_run = d["dryRun"]
        .as_array()
        .is_some_and(|a| a.iter().any(|v| v == "All"));
    Ok((opts, dry_run))
}

/// 429 TooManyRequests, as `errors.NewTooManyRequests` with one
/// `DisruptionBudget` cause.
fn too_many_requests(retry_after: u32, cause: String) -> ApiError {
    let mut details = json!({"causes": [{"reason": "DisruptionBudget", "message": cause}]});
    if retry_after > 0 {
        details["retryAfterSeconds"] = json!(retry_after);
    }
    ApiError::new(429, "TooManyRequests", REFUSED).with_details(details)
}

/// Evicts `pod` (a Target of the `pods` resource); returns the success
/// `Status` (HTTP 201).
pub(crate) fn evict(state: &mut State, pod: &Target, body: &[u8], opts: &Opts) -> ApiResult<Value> {
    let (delete, body_dry_run) = parse(pod, body)?;
    let dry_run = opts.dry_run || body_dry_run;
    let obj = state.get_obj(pod)?;
    let phase = obj["status"]["phase"].as_str().unwrap_or_default();
    // `canIgnorePDB`: finished, pending or terminating pods go at once.
    let ignore_budgets = matches!(phase, "Succeeded" | "Failed" | "Pending") || is_deleting(&obj);
    if !ignore_budgets {
        check_budget(state, pod, &obj, dry_run)?;
    }
    let internal = Opts {
        dry_run,
        ..Opts::internal("kube-apiserver")
    };
    state.delete(pod, &delete, &internal)?;
    if opts.api && !dry_run {
        state
            .counts
            .record(Verb::Create, &format!("{}/eviction", pod.res.plural), true);
    }
    Ok(json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success",
        "code": 201,
    }))
}

/// The budget check: Ok if the Pod may go (having taken one disruption
/// from its budget if it was healthy), else the refusal.
fn check_budget(state: &mut State, pod: &Target, obj: &Value, dry_run: bool) -> ApiResult<()> {
    let budgets = disruption::budgets_for(state, &pod.ns, obj);
    let pdb = match budgets.as_slice() {
        [] => return Ok(()),
        [one] => one.clone(),
        _ => {
            return Err(ApiError::new(
                500,
                "",
                "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support.",
            ));
        }
    };
    let Some(budgets_res) = disruption::budgets_res(state) else {
        return Ok(());
    };
    let name = pdb["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let key = (budgets_res.key(), pod.ns.clone(), name.clone());
    // Decide on a current status.
    disruption::sync(state, &key);
    let Some(pdb) = state.store.get(&key).cloned() else {
        return Ok(());
    };
    let status = &pdb["status"];
    let int = |f: &str| status[f].as_i64().unwrap_or(0);
    if !is_ready(obj) {
        // An unhealthy pod costs no budget: always under `AlwaysAllow`,
        // under the default `IfHealthyBudget` while the budget is met.
        if pdb["spec"]["unhealthyPodEvictionPolicy"] == "AlwaysAllow"
            || (int("currentHealthy") >= int("desiredHealthy") && int("desiredHealthy") > 0)
        {
            return Ok(());
        }
    }
    // `checkAndDecrement`.
    if int("observedGeneration") < pdb["metadata"]["generation"].as_i64().unwrap_or(0) {
        return Err(too_many_requests(
            10,
            format!("The disruption budget {name} is still being processed by the server."),
        ));
    }
    let allowed = int("disruptionsAllowed");
    if allowed < 0 {
        return Err(ApiError::new(
            403,
            "Forbidden",
            format!(
                "poddisruptionbudgets.policy \"{name}\" is forbidden: pdb disruptions allowed is negative"
            ),
        ));
    }
    if allowed == 0 {
        return Err(too_many_requests(
            0,
            format!(
                "The disruption budget {name} needs {} healthy pods and has {} currently",
                int("desiredHealthy"),
                int("currentHealthy")
            ),
        ));
    }
    if dry_run {
        return Ok(());
    }
    // Take the disruption and mark the pod, so the budget stays spent until
    // the disruption controller sees the pod gone.
    let mut new = status.as_object().cloned().unwrap_or_default();
    new.insert("disruptionsAllowed".into(), json!(allowed - 1));
    if allowed == 1 {
        let generation = new.get("observedGeneration").cloned().unwrap_or(json!(0));
        disruption::set_condition(&mut new, false, "InsufficientPods", "", &generation);
    }
    let marks = new.entry("disruptedPods").or_insert_with(|| json!({}));
    if !marks.is_object() {
        *marks = json!({});
    }
    marks[pod.name.as_str()] = json!(now());
    disruption::write_status(state, &budgets_res, &key, &pdb, new);
    Ok(())
}
