//! The Pod `binding` subresource (`POST .../pods/{name}/binding` with a
//! `v1 Binding`), as a scheduler binds a Pod to a Node: the API server's
//! `BindingREST` sets `spec.nodeName` (and the Binding's annotations) on a
//! Pod that has no node yet and marks it `PodScheduled`.

use std::sync::Arc;

use serde_json::{Value, json};

use crate::errors::{ApiError, ApiResult};
use crate::ops::{Opts, PatchType, State, Target};
use crate::util::now;
use crate::verb::Verb;

/// The node named by a `Binding` body, checked against the URL's Pod.
fn parse(pod: &Target, body: &[u8]) -> ApiResult<(String, Value)> {
    let b: Value =
        serde_json::from_slice(body).map_err(|e| ApiError::bad_request(e.to_string()))?;
    if !b.is_object() {
        return Err(ApiError::bad_request("the request body must be an object"));
    }
    if let Some(av) = b["apiVersion"].as_str()
        && av != "v1"
    {
        return Err(ApiError::bad_request(format!(
            "the API version in the data ({av}) does not match the expected API version (v1)"
        )));
    }
    if let Some(k) = b["kind"].as_str()
        && k != "Binding"
    {
        return Err(ApiError::bad_request(format!(
            "the kind in the data ({k}) does not match the expected kind (Binding)"
        )));
    }
    if b["metadata"]["name"].as_str() != Some(pod.name.as_str()) {
        return Err(ApiError::bad_request(
            "name in URL does not match name in Binding object",
        ));
    }
    if let Some(ns) = b["metadata"]["namespace"].as_str()
        && !ns.is_empty()
        && ns != pod.ns
    {
        return Err(ApiError::namespace_mismatch());
    }
    let target = &b["target"];
    let kind = target["kind"].as_str().unwrap_or_default();
    let node = target["name"].as_str().unwrap_or_default();
    let mut causes = Vec::new();
    if !kind.is_empty() && kind != "Node" {
        causes.push((
            "target.kind".to_string(),
            format!("Unsupported value: {kind:?}: supported values: \"Node\", \"\""),
        ));
    }
    if node.is_empty() {
        causes.push(("target.name".to_string(), "Required value".to_string()));
    }
    if !causes.is_empty() {
        return Err(ApiError::invalid("Binding", &pod.name, &causes));
    }
    Ok((node.to_string(), b["metadata"]["annotations"].clone()))
}

/// Binds `pod` (a Target of the `pods` resource) to the Binding's node;
/// returns the success `Status` (HTTP 201).
pub(crate) fn bind(state: &mut State, pod: &Target, body: &[u8], opts: &Opts) -> ApiResult<Value> {
    let (node, annotations) = parse(pod, body)?;
    let obj = state.get_obj(pod)?;
    if obj["metadata"]["deletionTimestamp"].is_string() {
        return Err(ApiError::new(
            409,
            "Conflict",
            format!(
                "Operation cannot be fulfilled on pods/binding \"{}\": pod {} is being deleted, cannot be assigned to a host",
                pod.name, pod.name
            ),
        ));
    }
    if let Some(current) = obj["spec"]["nodeName"].as_str().filter(|n| !n.is_empty()) {
        return Err(ApiError::new(
            409,
            "Conflict",
            format!(
                "Operation cannot be fulfilled on pods/binding \"{}\": pod {} is already assigned to node \"{current}\"",
                pod.name, pod.name
            ),
        ));
    }
    bind_unchecked(state, pod, &node, annotations, opts.dry_run)?;
    if opts.api && !opts.dry_run {
        state
            .counts
            .record(Verb::Create, &format!("{}/binding", pod.res.plural), true);
    }
    Ok(json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success",
        "code": 201,
    }))
}

/// Sets `spec.nodeName` (and `annotations`) and the `PodScheduled: True`
/// condition, as the binding storage's `assignPod` does.
pub(crate) fn bind_unchecked(
    state: &mut State,
    pod: &Target,
    node: &str,
    annotations: Value,
    dry_run: bool,
) -> ApiResult<Arc<Value>> {
    let opts = Opts {
        dry_run,
        ..Opts::internal("kube-scheduler")
    };
    let mut patch = json!({"spec": {"nodeName": node}});
    if annotations.is_object() {
        patch["metadata"] = json!({"annotations": annotations});
    }
    let main = Target {
        status: false,
        ..pod.clone()
    };
    let bound = state.patch(&main, PatchType::Merge, patch.to_string().as_bytes(), &opts)?;
    if dry_run {
        return Ok(bound);
    }
    let mut conditions: Vec<Value> = bound["status"]["conditions"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    conditions.retain(|c| c["type"] != "PodScheduled");
    conditions.insert(
        0,
        json!({"type": "PodScheduled", "status": "True", "lastProbeTime": null, "lastTransitionTime": now()}),
    );
    let status = Target {
        status: true,
        ..pod.clone()
    };
    state.patch(
        &status,
        PatchType::Merge,
        json!({"status": {"conditions": conditions}})
            .to_string()
            .as_bytes(),
        &opts,
    )
}
