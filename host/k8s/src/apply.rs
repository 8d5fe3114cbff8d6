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
//!
//! Two things keep a reconcile that wants what it wanted before cheap:
//! - [`Recent`] keeps, per object, a keyed fingerprint of the desired object
//!   with the hash and digest it led to, so the same desired object is not
//!   turned into JSON, hashed and digested again ([`Known`]);
//! - names missing from the cache are looked up with one metadata list per
//!   kind and namespace ([`Taken`]) when a reconcile is about to create
//!   several, not with a GET each.

use std::cell::RefCell;
use std::collections::HashMap;
use std::hash::{BuildHasher, RandomState};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{Api, ApiResource, DynamicObject, ListParams, Patch, PatchParams};
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

/// What this process applied and its cache has not shown yet, and what it
/// knows of the objects it applies.
///
/// Right after an apply the cache still holds the old object (or
/// none): a reconcile that runs before the watch event arrives would apply
/// the same thing again. Each entry lives until the store shows the applied
/// hash, or for [`Recent::TTL`] at most (so a delete that races the watch is
/// repaired by a later reconcile).
pub struct Recent {
    entries: Mutex<Entries>,
    /// Whether [`Known`] forms are kept and [`Taken`] lists are made.
    shortcuts: bool,
    /// Per object (by its key's hash), what its last desired form led to.
    known: Mutex<HashMap<u64, Known>>,
    /// The key of the fingerprints: random per process, so no spec can be
    /// written to collide with another.
    seed: RandomState,
}

impl Default for Recent {
    fn default() -> Self {
        Recent {
            entries: Mutex::default(),
            shortcuts: true,
            known: Mutex::default(),
            seed: RandomState::new(),
        }
    }
}

/// What one desired form of an object led to: its applied hash and, once
/// it was needed, its owned-fields digest, as bytes (40 bytes in all; with
/// 100,000 objects they are 6 MiB, half of what their hex would take).
#[derive(Clone, Copy)]
struct Known {
    /// The keyed fingerprint of the desired object's JSON (with its kind).
    fingerprint: u64,
    hash: [u8; 12],
    digest: Option<[u8; 16]>,
}

#[derive(Default)]
struct Entries {
    /// Per object (by its key's hash), the hash last applied to it (as
    /// bytes), and when.
    by_key: HashMap<u64, ([u8; 12], Instant)>,
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
    /// At most this many objects' [`Known`] forms are kept: what a table
    /// of 65,536 slots holds, 3.2 MiB (about 570 clusters of 10 x 3; a
    /// 1,000-cluster first start measured 6 MiB more peak RSS without the
    /// bound). Past it they are all dropped, and each object costs one
    /// serialisation to be known again; objects of deleted clusters leave
    /// theirs behind until then.
    pub const KNOWN_MAX: usize = (1 << 16) / 8 * 7;

    /// A `Recent` that keeps no [`Known`] forms and never lists names
    /// ([`Taken::list_if_many`] answers `None`): each apply serialises,
    /// hashes and digests its object, and each missing name is looked up
    /// with a GET. Only to measure what the shortcuts save.
    pub fn without_shortcuts() -> Self {
        Recent {
            shortcuts: false,
            ..Recent::default()
        }
    }

    pub(crate) fn key(resource: &ApiResource, namespace: &str, name: &str) -> String {
        format!("{}/{namespace}/{name}", resource.plural)
    }

    /// True if `hash` was applied to this object within the TTL.
    fn pending(&self, key: &str, hash: &str) -> bool {
        let slot = self.slot(key);
        let entries = &mut self.entries.lock().unwrap().by_key;
        match entries.get(&slot) {
            Some((h, at)) if Some(*h) == from_hex(hash) && at.elapsed() < Self::TTL => true,
            Some(_) => {
                entries.remove(&slot);
                false
            }
            None => false,
        }
    }

    fn record(&self, key: &str, hash: &str) {
        let (slot, hash) = (self.slot(key), from_hex(hash).unwrap_or_default());
        let mut entries = self.entries.lock().unwrap();
        let now = Instant::now();
        if entries
            .pruned
            .is_none_or(|at| now.duration_since(at) >= Self::TTL)
        {
            entries.by_key.retain(|_, (_, at)| at.elapsed() < Self::TTL);
            entries.pruned = Some(now);
        }
        entries.by_key.insert(slot, (hash, now));
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
        let slot = self.slot(key);
        let entries = &self.entries.lock().unwrap().by_key;
        entries
            .get(&slot)
            .is_some_and(|(_, at)| at.elapsed() < Self::TTL)
    }

    fn seen(&self, key: &str) {
        let slot = self.slot(key);
        self.entries.lock().unwrap().by_key.remove(&slot);
    }

    /// Forgets what was applied to and accepted of an object that is gone.
    pub(crate) fn forget(&self, key: &str) {
        let slot = self.slot(key);
        let mut entries = self.entries.lock().unwrap();
        entries.by_key.remove(&slot);
        entries.accepted.remove(key);
        drop(entries);
        self.known.lock().unwrap().remove(&slot);
    }

    fn slot(&self, key: &str) -> u64 {
        self.seed.hash_one(key)
    }

    /// The keyed fingerprint of `desired` as `resource` would apply it:
    /// its JSON is written into a buffer this thread reuses and hashed in
    /// one piece (hashing it piece by piece as it is written cost as much
    /// as the writing).
    fn fingerprint(&self, resource: &ApiResource, desired: &impl Serialize) -> u64 {
        thread_local! {
            static BUFFER: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
        }
        BUFFER.with_borrow_mut(|json| {
            json.clear();
            json.extend_from_slice(resource.api_version.as_bytes());
            json.push(0);
            json.extend_from_slice(resource.kind.as_bytes());
            json.push(0);
            serde_json::to_writer(&mut *json, desired).expect("objects serialize");
            let fingerprint = self.seed.hash_one(&json[..]);
            // A rare large object does not keep its buffer.
            if json.capacity() > 1 << 20 {
                *json = Vec::new();
            }
            fingerprint
        })
    }

    /// What the desired form with `fingerprint` led to, if it is the one
    /// last seen for the object at `slot`.
    fn known(&self, slot: u64, fingerprint: u64) -> Option<Known> {
        let known = self.known.lock().unwrap();
        known
            .get(&slot)
            .filter(|k| k.fingerprint == fingerprint)
            .copied()
    }

    fn remember(&self, slot: u64, known: Known) {
        if !self.shortcuts {
            return;
        }
        let mut all = self.known.lock().unwrap();
        if all.len() >= Self::KNOWN_MAX && !all.contains_key(&slot) {
            all.clear();
        }
        all.insert(slot, known);
    }
}

/// Which names of one kind in one namespace are taken, and by whose
/// controller: read with one metadata list, for a reconcile about to create
/// several objects of that kind ([`Taken::list_if_many`]).
#[derive(Debug, Default)]
pub struct Taken {
    /// Name -> the UID of its controller, if any.
    holders: HashMap<String, Option<String>>,
}

impl Taken {
    /// From this many missing objects of one kind on, one list is cheaper
    /// than a GET each.
    pub const LIST_FROM: usize = 3;
    /// Names per page of the list.
    const PAGE: u32 = 500;

    /// The names of `resource` taken in `namespace`, listed when at least
    /// [`Taken::LIST_FROM`] of `names` are neither in `store` nor applied by
    /// this process lately (each of those would otherwise be looked up
    /// with a GET); `None` otherwise.
    pub async fn list_if_many<C: Entry>(
        client: &kube::Client,
        store: &Cache<C>,
        recent: &Recent,
        resource: &ApiResource,
        namespace: &str,
        names: &[String],
    ) -> kube::Result<Option<Taken>> {
        let missing = names
            .iter()
            .filter(|name| {
                store.get(namespace, name).is_none()
                    && !recent.applied(&Recent::key(resource, namespace, name))
            })
            .take(Self::LIST_FROM)
            .count();
        if missing < Self::LIST_FROM || !recent.shortcuts {
            return Ok(None);
        }
        Self::list(client, resource, namespace).await.map(Some)
    }

    /// Every name of `resource` in `namespace`, page by page.
    pub async fn list(
        client: &kube::Client,
        resource: &ApiResource,
        namespace: &str,
    ) -> kube::Result<Taken> {
        let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), namespace, resource);
        let mut holders = HashMap::new();
        let mut params = ListParams::default().limit(Self::PAGE);
        loop {
            let page = api.list_metadata(&params).await?;
            for item in page.items {
                let uid = controller_uid(item.owner_references());
                holders.insert(item.name_any(), uid);
            }
            match page.metadata.continue_ {
                Some(token) if !token.is_empty() => params = params.continue_token(&token),
                _ => break,
            }
        }
        Ok(Taken { holders })
    }

    /// `None` if `name` is free, else its controller's UID (if any).
    fn holder(&self, name: &str) -> Option<Option<&str>> {
        self.holders.get(name).map(Option::as_deref)
    }
}

/// Applies `desired` unless the live object in `store` already has it (or
/// this process just applied it and the store has not caught up), and never
/// to an object that the desired object's controller does not control: an
/// object of that name that is not in the cache (the cache holds only
/// objects shardgate labelled) is looked up first, in `taken` when given,
/// else with a GET.
pub async fn apply<K, C>(
    client: &kube::Client,
    store: &Cache<C>,
    recent: &Recent,
    desired: &K,
    taken: Option<&Taken>,
) -> kube::Result<Applied>
where
    K: Resource<DynamicType = (), Scope = NamespaceResourceScope> + Serialize,
    C: Entry,
{
    let meta = desired.meta();
    let target = Target {
        resource: &ApiResource::erase::<K>(&()),
        name: meta.name.as_deref().unwrap_or_default(),
        namespace: meta.namespace.as_deref().unwrap_or_default(),
        owner: controller_uid(desired.owner_references()),
    };
    apply_to(client, store, recent, &target, desired, taken).await
}

/// [`apply`] for an object of a kind known only at run time (the Gateway
/// API's routes): `body` is the object as JSON; its `apiVersion` and
/// `kind` are `resource`'s.
pub async fn apply_value<C: Entry>(
    client: &kube::Client,
    store: &Cache<C>,
    recent: &Recent,
    resource: &ApiResource,
    body: &Value,
    taken: Option<&Taken>,
) -> kube::Result<Applied> {
    let meta = &body["metadata"];
    let target = Target {
        resource,
        name: meta["name"].as_str().unwrap_or_default(),
        namespace: meta["namespace"].as_str().unwrap_or_default(),
        owner: controller_uid_of(&meta["ownerReferences"]),
    };
    apply_to(client, store, recent, &target, body, taken).await
}

/// The object an apply is for.
struct Target<'a> {
    resource: &'a ApiResource,
    name: &'a str,
    namespace: &'a str,
    /// The UID of the desired object's controller.
    owner: Option<String>,
}

/// The desired object as it is sent: its JSON with `apiVersion`, `kind`
/// and the [`APPLIED_HASH`] annotation, and that hash (taken before the
/// annotation was added).
fn body_of(resource: &ApiResource, desired: &impl Serialize) -> (Value, String) {
    let mut body = serde_json::to_value(desired).expect("k8s objects serialize");
    body["apiVersion"] = resource.api_version.clone().into();
    body["kind"] = resource.kind.clone().into();
    let hash = hash(&body);
    body["metadata"]["annotations"][APPLIED_HASH] = hash.clone().into();
    (body, hash)
}

async fn apply_to<C: Entry>(
    client: &kube::Client,
    store: &Cache<C>,
    recent: &Recent,
    target: &Target<'_>,
    desired: &impl Serialize,
    taken: Option<&Taken>,
) -> kube::Result<Applied> {
    let Target {
        resource,
        name,
        namespace,
        ..
    } = *target;
    let owner = target.owner.as_deref();
    let key = Recent::key(resource, namespace, name);
    let slot = recent.slot(&key);
    let fingerprint = recent.fingerprint(resource, desired);
    // The JSON is built only when something needs it: a hash or digest not
    // known yet, or a write.
    let mut body = None;
    let known = recent.known(slot, fingerprint).unwrap_or_else(|| {
        let (json, hash) = body_of(resource, desired);
        body = Some(json);
        Known {
            fingerprint,
            hash: from_hex(&hash).unwrap_or_default(),
            digest: None,
        }
    });
    let hash = &to_hex(&known.hash);

    let live = store.get(namespace, name);
    match &live {
        Some(live) if live.controller_uid() != owner => return Ok(Applied::Conflict),
        None if !recent.applied(&key) => {
            let holder = match taken {
                Some(taken) => taken.holder(name).map(|uid| uid.map(String::from)),
                None => {
                    let api: Api<DynamicObject> =
                        Api::namespaced_with(client.clone(), namespace, resource);
                    api.get_metadata_opt(name)
                        .await?
                        .map(|existing| controller_uid(existing.owner_references()))
                }
            };
            if let Some(uid) = holder
                && uid.as_deref() != owner
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
        && live_hash == Some(hash)
    {
        recent.seen(&key);
        let in_place = match live.owned_digest() {
            Some(have) => {
                let want = match known.digest {
                    Some(digest) => digest,
                    None => {
                        let json = body.get_or_insert_with(|| body_of(resource, desired).0);
                        let digest = from_hex(&owned_fields::digest(json)).unwrap_or_default();
                        recent.remember(
                            slot,
                            Known {
                                digest: Some(digest),
                                ..known
                            },
                        );
                        digest
                    }
                };
                let want = to_hex(&want);
                let in_place = have == want || recent.accepted(&key, hash, have);
                repair = Some(want);
                in_place
            }
            // Cached without a digest: compared whole (the cache keeps
            // such objects whole).
            None => {
                let json = body.get_or_insert_with(|| body_of(resource, desired).0);
                live.whole().is_some_and(|have| contains(&have, json))
            }
        };
        if in_place {
            return Ok(Applied::Unchanged);
        }
    } else {
        if known.digest.is_none() {
            recent.remember(slot, known);
        }
        if recent.pending(&key, hash) {
            return Ok(Applied::Unchanged);
        }
    }
    let body = body.unwrap_or_else(|| body_of(resource, desired).0);
    let request = kube::core::Request::new(DynamicObject::url_path(resource, Some(namespace)))
        .patch(
            name,
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
                recent.accept(&key, hash, have);
            }
        }
        // The API server answers with the whole object, managed fields
        // included; nothing else reads it (the watch brings the same object
        // to the store), so it is parsed but not decoded.
        None => {
            client.request::<IgnoredAny>(request).await?;
        }
    }
    recent.record(&key, hash);
    Ok(if live.is_some() {
        Applied::Updated
    } else {
        Applied::Created
    })
}

/// `bytes` in lower-case hex, as hashes and digests are written.
fn to_hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The bytes of a hex string of exactly `N` bytes.
fn from_hex<const N: usize>(hex: &str) -> Option<[u8; N]> {
    if hex.len() != 2 * N {
        return None;
    }
    let mut out = [0; N];
    for (i, byte) in out.iter_mut().enumerate() {
        *byte = u8::from_str_radix(hex.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(out)
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
    use super::{Known, Recent, contains, hash};
    use k8s_openapi::api::core::v1::{ConfigMap, Service};
    use kube::api::ApiResource;
    use serde_json::json;

    #[test]
    fn a_known_form_is_the_one_with_the_same_fingerprint_of_the_same_kind() {
        let recent = Recent::default();
        let (svc, cm) = (
            ApiResource::erase::<Service>(&()),
            ApiResource::erase::<ConfigMap>(&()),
        );
        let v = json!({"metadata": {"name": "a"}, "data": {"k": "v"}});
        let changed = json!({"metadata": {"name": "a"}, "data": {"k": "w"}});
        let fp = recent.fingerprint(&cm, &v);
        assert_eq!(fp, recent.fingerprint(&cm, &v.clone()));
        assert_ne!(fp, recent.fingerprint(&cm, &changed));
        assert_ne!(fp, recent.fingerprint(&svc, &v));

        let slot = recent.slot("configmaps/ns/a");
        let known = Known {
            fingerprint: fp,
            hash: [7; 12],
            digest: None,
        };
        recent.remember(slot, known);
        assert!(recent.known(slot, fp).is_some());
        assert!(recent.known(slot, fp ^ 1).is_none(), "another form");
        recent.forget("configmaps/ns/a");
        assert!(
            recent.known(slot, fp).is_none(),
            "forgotten with its object"
        );

        // Bounded: a full table is emptied, not grown.
        for i in 0..Recent::KNOWN_MAX as u64 + 1 {
            recent.remember(i, known);
        }
        assert_eq!(recent.known.lock().unwrap().len(), 1, "emptied, then one");
        let capacity = recent.known.lock().unwrap().capacity();
        assert!(capacity <= Recent::KNOWN_MAX, "{capacity}");

        let off = Recent::without_shortcuts();
        let slot = off.slot("configmaps/ns/a");
        off.remember(slot, known);
        assert!(
            off.known(slot, fp).is_none(),
            "nothing is kept without shortcuts"
        );
    }

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
    fn hashes_and_digests_keep_their_hex_through_bytes() {
        use super::{from_hex, to_hex};
        let digest = "9e8768946e0e052988fb0997";
        let bytes: [u8; 12] = from_hex(digest).unwrap();
        assert_eq!(to_hex(&bytes), digest);
        assert_eq!(from_hex::<12>("9e87"), None, "too short");
        assert_eq!(from_hex::<2>("9g87"), None, "not hex");
        assert!(size_of::<Known>() <= 40, "kept per object");
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
