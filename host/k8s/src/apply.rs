//! Server-side apply that skips what is already in place.
//!
//! Each applied object carries the hash of what shardgate applied in
//! [`APPLIED_HASH`]. An object is re-applied only when that hash differs
//! (shardgate wants something new) or a field shardgate applied was changed
//! or removed by someone else. That is read from the cache's digest of the
//! fields shardgate owns ([`owned_fields`]); an object cached without one
//! (shardgate has no apply entry in its managed fields) is compared whole.
//! Fields other managers add are left alone, so at steady state a reconcile
//! sends no write.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams};
use kube::core::NamespaceResourceScope;
use kube::{Resource, ResourceExt};
use serde::Serialize;
use serde::de::IgnoredAny;
use serde_json::Value;

use crate::cache::{Cache, Entry};
use crate::manager::{APPLIED_HASH, FIELD_MANAGER};
use crate::owned_fields;

/// What an apply did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Applied {
    Created,
    Updated,
    Unchanged,
    /// An object of that name exists and is not controlled by the cluster
    /// that wants it: nothing was applied to it (no takeover).
    Conflict,
}

/// What this process applied and its cache has not shown yet.
///
/// Right after an apply the cache still holds the old object (or
/// none): a reconcile that runs before the watch event arrives would apply
/// the same thing again. Each entry lives until the store shows the applied
/// hash, or for [`Recent::TTL`] at most (so a delete that races the watch is
/// repaired by a later reconcile).
#[derive(Default)]
pub struct Recent {
    entries: Mutex<Entries>,
}

#[derive(Default)]
struct Entries {
    by_key: HashMap<String, (String, Instant)>,
    /// Per object, an owned-fields digest that differs from the desired
    /// one but is what shardgate's own apply of that hash left (the API
    /// server changed a value inside a field shardgate owns whole, such as
    /// a default inside an atomic struct): in place, not drift. Only such
    /// objects have an entry; a prune drops the entries of what it deletes,
    /// and [`Recent::ACCEPTED_MAX`] bounds the rest.
    accepted: HashMap<String, (String, String)>,
    /// When expired entries were last dropped: at most once per TTL, so a
    /// burst of applies (a cold start creates ~100 objects per cluster) does
    /// not scan every entry on every apply.
    pruned: Option<Instant>,
}

impl Recent {
    /// The longest an entry lives when the cache never shows its hash.
    pub const TTL: Duration = Duration::from_secs(10);
    /// At most this many accepted digests are kept. An object deleted by
    /// someone else (or with its cluster) leaves its entry behind; past the
    /// bound an arbitrary entry gives way, and the object it belonged to,
    /// if it still exists, costs one more no-op apply to be accepted again.
    pub const ACCEPTED_MAX: usize = 4096;

    pub(crate) fn key(resource: &ApiResource, namespace: &str, name: &str) -> String {
        format!("{}/{namespace}/{name}", resource.plural)
    }

    /// True if `hash` was applied to this object within the TTL.
    fn pending(&self, key: &str, hash: &str) -> bool {
        let entries = &mut self.entries.lock().unwrap().by_key;
        match entries.get(key) {
            Some((h, at)) if h == hash && at.elapsed() < Self::TTL => true,
            Some(_) => {
                entries.remove(key);
                false
            }
            None => false,
        }
    }

    fn record(&self, key: String, hash: String) {
        let mut entries = self.entries.lock().unwrap();
        let now = Instant::now();
        if entries
            .pruned
            .is_none_or(|at| now.duration_since(at) >= Self::TTL)
        {
            entries.by_key.retain(|_, (_, at)| at.elapsed() < Self::TTL);
            entries.pruned = Some(now);
        }
        entries.by_key.insert(key, (hash, now));
    }

    /// True if `digest` is what shardgate's own apply of `hash` left.
    fn accepted(&self, key: &str, hash: &str, digest: &str) -> bool {
        let entries = &mut self.entries.lock().unwrap().accepted;
        match entries.get(key) {
            Some((h, d)) if h == hash => d == digest,
            Some(_) => {
                entries.remove(key);
                false
            }
            None => false,
        }
    }

    fn accept(&self, key: &str, hash: &str, digest: String) {
        let accepted = &mut self.entries.lock().unwrap().accepted;
        if accepted.len() >= Self::ACCEPTED_MAX
            && !accepted.contains_key(key)
            && let Some(other) = accepted.keys().next().cloned()
        {
            accepted.remove(&other);
        }
        accepted.insert(key.into(), (hash.into(), digest));
    }

    /// True if this process applied anything to the object within the TTL.
    fn applied(&self, key: &str) -> bool {
        let entries = &self.entries.lock().unwrap().by_key;
        entries
            .get(key)
            .is_some_and(|(_, at)| at.elapsed() < Self::TTL)
    }

    fn seen(&self, key: &str) {
        self.entries.lock().unwrap().by_key.remove(key);
    }

    /// Forgets what was applied to and accepted of an object that is gone.
    pub(crate) fn forget(&self, key: &str) {
        let mut entries = self.entries.lock().unwrap();
        entries.by_key.remove(key);
        entries.accepted.remove(key);
    }
}

/// Applies `desired` unless the live object in `store` already has it (or
/// this process just applied it and the store has not caught up), and never
/// to an object that the desired object's controller does not control: an
/// object of that name that is not in the cache (the cache holds only
/// objects shardgate labelled) is looked up first.
pub async fn apply<K, C>(
    client: &kube::Client,
    store: &Cache<C>,
    recent: &Recent,
    desired: &K,
) -> kube::Result<Applied>
where
    K: Resource<DynamicType = (), Scope = NamespaceResourceScope> + Serialize,
    C: Entry,
{
    let body = serde_json::to_value(desired).expect("k8s objects serialize");
    apply_value(client, store, recent, &ApiResource::erase::<K>(&()), body).await
}

/// [`apply`] for an object of a kind known only at run time (the Gateway
/// API's routes): `body` is the object as JSON; its `apiVersion` and
/// `kind` are `resource`'s.
pub async fn apply_value<C: Entry>(
    client: &kube::Client,
    store: &Cache<C>,
    recent: &Recent,
    resource: &ApiResource,
    mut body: Value,
) -> kube::Result<Applied> {
    let meta = &body["metadata"];
    let name = meta["name"].as_str().unwrap_or_default().to_string();
    let namespace = meta["namespace"].as_str().unwrap_or_default().to_string();
    let owner = controller_uid_of(&meta["ownerReferences"]);
    body["apiVersion"] = resource.api_version.clone().into();
    body["kind"] = resource.kind.clone().into();
    let hash = hash(&body);
    body["metadata"]["annotations"][APPLIED_HASH] = hash.clone().into();

    let live = store.get(&namespace, &name);
    let key = Recent::key(resource, &namespace, &name);
    match &live {
        Some(live) if live.controller_uid() != owner.as_deref() => return Ok(Applied::Conflict),
        None if !recent.applied(&key) => {
            let api: Api<DynamicObject> =
                Api::namespaced_with(client.clone(), &namespace, resource);
            if let Some(existing) = api.get_opt(&name).await?
                && controller_uid(existing.owner_references()) != owner
            {
                return Ok(Applied::Conflict);
            }
        }
        _ => {}
    }
    let live_hash = live.as_ref().and_then(|l| l.applied_hash());
    // The desired owned-fields digest, when the live object has the same
    // hash (so it is only drift that would make it differ).
    let mut repair = None;
    if let Some(live) = &live
        && live_hash == Some(hash.as_str())
    {
        recent.seen(&key);
        let in_place = match live.owned_digest() {
            Some(have) => {
                let want = owned_fields::digest(&body);
                let in_place = have == want || recent.accepted(&key, &hash, have);
                repair = Some(want);
                in_place
            }
            // Cached without a digest: compared whole (the cache keeps
            // such objects whole).
            None => live.whole().is_some_and(|have| contains(&have, &body)),
        };
        if in_place {
            return Ok(Applied::Unchanged);
        }
    } else if recent.pending(&key, &hash) {
        return Ok(Applied::Unchanged);
    }
    let request = kube::core::Request::new(DynamicObject::url_path(resource, Some(&namespace)))
        .patch(
            &name,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(&body),
        )
        .map_err(kube::Error::BuildRequest)?;
    match repair {
        // Repairing drift: what this apply left is in place by definition;
        // if its digest still differs from the desired one, the API server
        // changed a value shardgate applied, and that is accepted instead
        // of re-applied on every reconcile.
        Some(want) => {
            let answer: Value = client.request(request).await?;
            if let Some(have) = owned_fields::live_digest_of_json(&answer)
                && have != want
            {
                recent.accept(&key, &hash, have);
            }
        }
        // The API server answers with the whole object, managed fields
        // included; nothing else reads it (the watch brings the same object
        // to the store), so it is parsed but not decoded.
        None => {
            client.request::<IgnoredAny>(request).await?;
        }
    }
    recent.record(key, hash);
    Ok(if live.is_some() {
        Applied::Updated
    } else {
        Applied::Created
    })
}

/// The UID in the JSON owner references marked `controller`.
fn controller_uid_of(refs: &Value) -> Option<String> {
    refs.as_array()?
        .iter()
        .find(|r| r["controller"] == Value::Bool(true))
        .and_then(|r| r["uid"].as_str())
        .map(String::from)
}

/// The UID in the owner reference marked `controller`.
fn controller_uid(refs: &[OwnerReference]) -> Option<String> {
    refs.iter()
        .find(|r| r.controller == Some(true))
        .map(|r| r.uid.clone())
}

/// The first 12 bytes of the SHA-256 of `v`'s compact JSON, in hex.
fn hash(v: &Value) -> String {
    owned_fields::sha256_hex(v, 12)
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
    use super::{Recent, contains, hash};
    use serde_json::json;

    /// The hash is stored in every applied object: an upgraded operator
    /// that hashed differently would re-apply every object once. It must
    /// stay the first 12 bytes of SHA-256 over the compact JSON with sorted
    /// keys (the literal below was computed outside Rust, with Python's
    /// `json.dumps(v, sort_keys=True, separators=(",", ":"),
    /// ensure_ascii=False)` and `hashlib.sha256`).
    #[test]
    fn hash_is_sha256_of_the_compact_json() {
        let v = json!({"kind": "Service", "metadata": {"name": "a\"b", "labels": {"x": "é"}}, "n": [1, 2.5, null]});
        assert_eq!(hash(&v), "9e8768946e0e052988fb0997");
    }

    #[test]
    fn accepted_digests_are_forgotten_with_their_object_and_bounded() {
        let recent = Recent::default();
        recent.accept("services/ns/a", "h1", "d1".into());
        assert!(recent.accepted("services/ns/a", "h1", "d1"));
        assert!(!recent.accepted("services/ns/a", "h1", "d2"));
        recent.forget("services/ns/a");
        assert!(!recent.accepted("services/ns/a", "h1", "d1"));

        for i in 0..Recent::ACCEPTED_MAX + 10 {
            recent.accept(&format!("services/ns/{i}"), "h", "d".into());
        }
        let accepted = recent.entries.lock().unwrap().accepted.len();
        assert_eq!(accepted, Recent::ACCEPTED_MAX);
        let last = format!("services/ns/{}", Recent::ACCEPTED_MAX + 9);
        assert!(recent.accepted(&last, "h", "d"), "the newest is kept");
    }

    #[test]
    fn contains_ignores_extra_fields_but_not_changed_ones() {
        let have = json!({"a": 1, "b": {"c": [1, {"d": 2, "e": 3}]}, "x": "y"});
        assert!(contains(&have, &json!({"b": {"c": [1, {"d": 2}]}})));
        assert!(!contains(&have, &json!({"b": {"c": [1, {"d": 3}]}})));
        assert!(!contains(&have, &json!({"b": {"c": [1]}})));
        assert!(!contains(&have, &json!({"z": 1})));
    }
}
