//! ownerReference garbage collection: when an owner goes away, dependents
//! that have no other existing owner are deleted (recursively); dependents
//! with another live owner (or under `propagationPolicy: Orphan`) just lose
//! the dangling reference. The store keeps the owner graph as an index
//! ([`crate::store::Store::dependents_of`]), so a delete costs its
//! dependents, not a walk of every stored object.

use serde_json::Value;

use crate::ops::{Opts, State, Target};

fn owner_uids(obj: &Value) -> Vec<String> {
    obj["metadata"]["ownerReferences"]
        .as_array()
        .map(|refs| {
            refs.iter()
                .filter_map(|r| r["uid"].as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// Runs after the object with `uid` was removed.
pub(crate) fn collect(state: &mut State, uid: &str, orphan: bool) {
    let dependents = state.store.dependents_of(uid);
    for key in dependents {
        let Some(obj) = state.store.get(&key).cloned() else {
            continue;
        };
        let Some(res) = state
            .registry
            .resources
            .iter()
            .find(|r| r.key() == key.0)
            .cloned()
        else {
            continue;
        };
        let t = Target {
            res,
            ns: key.1.clone(),
            name: key.2.clone(),
            status: false,
        };
        let others_alive = owner_uids(&obj)
            .iter()
            .any(|u| u != uid && state.store.uid_exists(u));
        if orphan || others_alive {
            let mut new = Value::clone(&obj);
            if let Some(refs) = new["metadata"]["ownerReferences"].as_array_mut() {
                refs.retain(|r| r["uid"].as_str() != Some(uid));
            }
            let _ = state.replace(&t, new, &Opts::internal("garbage-collector"));
        } else {
            let _ = state.delete(
                &t,
                &Default::default(),
                &Opts::internal("garbage-collector"),
            );
        }
    }
}
