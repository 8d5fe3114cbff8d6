//! Server-side apply that skips what is already in place, and pruning that
//! only ever deletes what this cluster owns.
//!
//! Each applied object carries the hash of what shardgate applied in
//! [`APPLIED_HASH`]. An object is re-applied only when that hash differs
//! (shardgate wants something new) or the live object no longer contains
//! every applied field (someone changed a field shardgate owns). Fields other
//! managers add are left alone, so at steady state a reconcile sends no write.

use std::sync::Arc;

use kube::api::{Api, DeleteParams, Patch, PatchParams};
use kube::core::NamespaceResourceScope;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use sha2::{Digest, Sha256};

/// The annotation holding the hash of what shardgate last applied.
pub const APPLIED_HASH: &str = "shardgate.io/applied-hash";
/// shardgate's field manager.
pub const FIELD_MANAGER: &str = "shardgate";

/// What an apply did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Applied {
    Created,
    Updated,
    Unchanged,
}

/// Applies `desired` unless the live object in `store` already has it.
pub async fn apply<K>(client: &kube::Client, store: &Store<K>, desired: &K) -> kube::Result<Applied>
where
    K: Resource<DynamicType = (), Scope = NamespaceResourceScope>
        + Clone
        + Serialize
        + DeserializeOwned
        + std::fmt::Debug,
{
    let name = desired.name_any();
    let namespace = desired.namespace().unwrap_or_default();
    let mut body = serde_json::to_value(desired).expect("k8s objects serialize");
    body["apiVersion"] = K::api_version(&()).into();
    body["kind"] = K::kind(&()).into();
    let hash = hash(&body);
    body["metadata"]["annotations"][APPLIED_HASH] = hash.clone().into();

    let live = store.get(&ObjectRef::new(&name).within(&namespace));
    if let Some(live) = &live {
        let live_hash = live.annotations().get(APPLIED_HASH);
        if live_hash == Some(&hash) {
            let live_json = serde_json::to_value(live.as_ref()).expect("k8s objects serialize");
            if contains(&live_json, &body) {
                return Ok(Applied::Unchanged);
            }
        }
    }
    let api: Api<K> = Api::namespaced(client.clone(), &namespace);
    api.patch(
        &name,
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(&body),
    )
    .await?;
    Ok(if live.is_some() {
        Applied::Updated
    } else {
        Applied::Created
    })
}

/// Deletes every object in `store` that belongs to the cluster with `uid`
/// (labelled with its name and controlled by it) and is not in `keep`.
/// Returns the names deleted.
pub async fn prune<K>(
    client: &kube::Client,
    store: &Store<K>,
    namespace: &str,
    cluster: &str,
    uid: &str,
    keep: &std::collections::BTreeSet<String>,
) -> kube::Result<Vec<String>>
where
    K: Resource<DynamicType = (), Scope = NamespaceResourceScope>
        + Clone
        + DeserializeOwned
        + std::fmt::Debug,
{
    let doomed: Vec<Arc<K>> = store
        .state()
        .into_iter()
        .filter(|o| o.namespace().as_deref() == Some(namespace))
        .filter(|o| owned_by(o.as_ref(), cluster, uid))
        .filter(|o| !keep.contains(&o.name_any()))
        .collect();
    let api: Api<K> = Api::namespaced(client.clone(), namespace);
    let mut deleted = Vec::new();
    for o in doomed {
        let name = o.name_any();
        let params = DeleteParams {
            preconditions: o.uid().map(|uid| kube::api::Preconditions {
                uid: Some(uid),
                resource_version: None,
            }),
            ..DeleteParams::default()
        };
        match api.delete(&name, &params).await {
            Ok(_) => deleted.push(name),
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(e) => return Err(e),
        }
    }
    Ok(deleted)
}

/// Labelled as the cluster's AND controlled by the cluster's UID: anything
/// else is never touched (upstream W16).
pub fn owned_by<K: Resource>(o: &K, cluster: &str, uid: &str) -> bool {
    let labelled = o
        .meta()
        .labels
        .as_ref()
        .and_then(|l| l.get(shardgate_guest::names::LABEL_CLUSTER))
        .is_some_and(|c| c == cluster);
    let controlled = o
        .meta()
        .owner_references
        .iter()
        .flatten()
        .any(|r| r.controller == Some(true) && r.uid == uid);
    labelled && controlled
}

fn hash(v: &Value) -> String {
    let digest = Sha256::digest(serde_json::to_vec(v).expect("JSON serializes"));
    digest.iter().take(12).map(|b| format!("{b:02x}")).collect()
}

/// True if every field of `want` is in `have` with the same value. Objects
/// may have extra keys (defaults, other managers' fields); arrays must have
/// the same length, element by element.
pub fn contains(have: &Value, want: &Value) -> bool {
    match (have, want) {
        (Value::Object(h), Value::Object(w)) => w
            .iter()
            .all(|(k, wv)| h.get(k).is_some_and(|hv| contains(hv, wv))),
        (Value::Array(h), Value::Array(w)) => {
            h.len() == w.len() && h.iter().zip(w).all(|(hv, wv)| contains(hv, wv))
        }
        _ => have == want,
    }
}

#[cfg(test)]
mod tests {
    use super::contains;
    use serde_json::json;

    #[test]
    fn contains_ignores_extra_fields_but_not_changed_ones() {
        let have = json!({"a": 1, "b": {"c": [1, {"d": 2, "e": 3}]}, "x": "y"});
        assert!(contains(&have, &json!({"b": {"c": [1, {"d": 2}]}})));
        assert!(!contains(&have, &json!({"b": {"c": [1, {"d": 3}]}})));
        assert!(!contains(&have, &json!({"b": {"c": [1]}})));
        assert!(!contains(&have, &json!({"z": 1})));
    }
}
