//! What the watches decode: only what the cache keeps, or may need.
//!
//! A watch event carries the whole object, and decoding it into a
//! `k8s-openapi` type allocates every field of its spec, status and managed
//! fields (as large as the rest), most of it dropped again a moment later
//! ([`super::entry`] keeps a few marks and a digest).
//! - [`WatchedPod`] names only the fields the cache keeps; serde skips the
//!   rest as it parses, without allocating. Pods are never applied by
//!   shardgate, so nothing of theirs is compared or digested.
//! - [`Watched`] is any kind shardgate applies: its metadata without the
//!   managed fields of other managers, shardgate's own apply entry, and
//!   every other top-level field as its JSON text, unparsed. What the cache
//!   reads of the spec and status is parsed from that text, and the spec is
//!   parsed whole only when the owned-fields digest must be taken again
//!   (not when the status alone changed).

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt;
use std::marker::PhantomData;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
use kube::Resource;
use kube::core::NamespaceResourceScope;
use serde::de::{DeserializeOwned, IgnoredAny, MapAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::value::RawValue;
use serde_json::{Map, Value};

use crate::convert::{Labelled, PodView};
use crate::manager::FIELD_MANAGER;

/// A Pod as the operator's watch decodes it: its metadata without managed
/// fields, `spec.nodeName`, and its IPs and conditions. Serialised, it is a
/// Pod with only these fields.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
pub struct WatchedPod {
    #[serde(deserialize_with = "lean_meta")]
    pub metadata: ObjectMeta,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec: Option<WatchedPodSpec>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<WatchedPodStatus>,
}

/// Of a Pod's spec, the node it is bound to.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct WatchedPodSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_name: Option<String>,
}

/// Of a Pod's status, its IPs and conditions.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct WatchedPodStatus {
    #[serde(default, rename = "hostIP", skip_serializing_if = "Option::is_none")]
    pub host_ip: Option<String>,
    #[serde(default, rename = "podIP", skip_serializing_if = "Option::is_none")]
    pub pod_ip: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conditions: Option<Vec<WatchedCondition>>,
}

/// A condition's type and status.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
pub struct WatchedCondition {
    #[serde(rename = "type")]
    pub type_: String,
    pub status: String,
}

/// The metadata a watch and the cache read: everything but the creation
/// time, the finalizers and, unless `M` keeps them, the managed fields.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct LeanMeta<M = IgnoredAny> {
    name: Option<String>,
    namespace: Option<String>,
    uid: Option<String>,
    resource_version: Option<String>,
    generation: Option<i64>,
    labels: Option<BTreeMap<String, String>>,
    annotations: Option<BTreeMap<String, String>>,
    owner_references: Option<Vec<OwnerReference>>,
    deletion_timestamp: Option<Time>,
    #[serde(default = "none")]
    managed_fields: Option<M>,
}

fn none<M>() -> Option<M> {
    None
}

impl<M> LeanMeta<M> {
    fn into_meta(self) -> ObjectMeta {
        ObjectMeta {
            name: self.name,
            namespace: self.namespace,
            uid: self.uid,
            resource_version: self.resource_version,
            generation: self.generation,
            labels: self.labels,
            annotations: self.annotations,
            owner_references: self.owner_references,
            deletion_timestamp: self.deletion_timestamp,
            ..ObjectMeta::default()
        }
    }
}

fn lean_meta<'de, D: Deserializer<'de>>(d: D) -> Result<ObjectMeta, D::Error> {
    LeanMeta::<IgnoredAny>::deserialize(d).map(LeanMeta::into_meta)
}

/// An object of kind `K` as the operator's watch decodes it.
pub struct Watched<K> {
    /// Without managed fields, creation time or finalizers.
    pub metadata: ObjectMeta,
    /// shardgate's apply entry in its managed fields, if any.
    pub applied: Option<AppliedEntry>,
    /// Every other top-level field (`apiVersion`, `kind`, `spec`, `status`,
    /// `data`, ...) as its JSON text, in the order sent.
    pub fields: Vec<(String, Box<RawValue>)>,
    kind: PhantomData<fn() -> K>,
}

/// shardgate's apply entry: when it was applied, and the fields it owns
/// (`fieldsV1`) as JSON text.
#[derive(Clone, Debug)]
pub struct AppliedEntry {
    pub time: Option<Time>,
    pub fields: Box<RawValue>,
}

impl<K> Clone for Watched<K> {
    fn clone(&self) -> Self {
        Watched {
            metadata: self.metadata.clone(),
            applied: self.applied.clone(),
            fields: self.fields.clone(),
            kind: PhantomData,
        }
    }
}

impl<K> fmt::Debug for Watched<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Watched")
            .field("metadata", &self.metadata)
            .field("applied", &self.applied)
            .field("fields", &self.fields)
            .finish()
    }
}

impl<K: Serialize> Watched<K> {
    /// `object` as a watch would decode it (for tests and callers that hold
    /// the whole object).
    pub fn of(object: &K) -> Self {
        let json = serde_json::to_string(object).expect("objects serialize");
        serde_json::from_str(&json).expect("a serialised object decodes")
    }
}

impl<K> Watched<K> {
    /// The top-level field `name`, parsed as `T`; `None` if it is absent
    /// or does not parse (what the cache reads of it is then absent too).
    pub fn field<T: DeserializeOwned>(&self, name: &str) -> Option<T> {
        let (_, raw) = self.fields.iter().find(|(n, _)| n == name)?;
        serde_json::from_str(raw.get()).ok()
    }

    /// The object as JSON, with its metadata (without managed fields) and
    /// those top-level fields `wanted` names.
    pub fn to_json(&self, wanted: impl Fn(&str) -> bool) -> Value {
        let mut object = Map::new();
        object.insert(
            "metadata".into(),
            serde_json::to_value(&self.metadata).expect("metadata serializes"),
        );
        for (name, raw) in &self.fields {
            if wanted(name)
                && let Ok(value) = serde_json::from_str(raw.get())
            {
                object.insert(name.clone(), value);
            }
        }
        Value::Object(object)
    }
}

impl<K: DeserializeOwned> Watched<K> {
    /// The whole object as `K` (without managed fields).
    pub fn object(&self) -> Option<K> {
        serde_json::from_value(self.to_json(|_| true)).ok()
    }
}

impl<'de, K> Deserialize<'de> for Watched<K> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Fields<K>(PhantomData<fn() -> K>);
        impl<'de, K> Visitor<'de> for Fields<K> {
            type Value = Watched<K>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a Kubernetes object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Watched<K>, A::Error> {
                let mut metadata = None;
                let mut fields = Vec::new();
                while let Some(name) = map.next_key::<String>()? {
                    match name.as_str() {
                        "metadata" => {
                            metadata = Some(map.next_value::<LeanMeta<Vec<EntryText>>>()?)
                        }
                        _ => fields.push((name, map.next_value::<Box<RawValue>>()?)),
                    }
                }
                let (metadata, applied) = metadata.map(LeanMeta::split).unwrap_or_default();
                Ok(Watched {
                    metadata,
                    applied,
                    fields,
                    kind: PhantomData,
                })
            }
        }
        d.deserialize_map(Fields(PhantomData))
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct EntryText {
    manager: Option<String>,
    operation: Option<String>,
    subresource: Option<String>,
    time: Option<Time>,
    #[serde(rename = "fieldsV1")]
    fields: Option<Box<RawValue>>,
}

impl LeanMeta<Vec<EntryText>> {
    /// The metadata, and shardgate's apply entry picked out of the managed
    /// fields (the others' field sets were copied as text and are dropped).
    fn split(self) -> (ObjectMeta, Option<AppliedEntry>) {
        let applied = self.managed_fields.iter().flatten().find_map(|e| {
            let ours = e.manager.as_deref() == Some(FIELD_MANAGER)
                && e.operation.as_deref() == Some("Apply")
                && e.subresource.as_deref().unwrap_or("").is_empty();
            if !ours {
                return None;
            }
            Some(AppliedEntry {
                time: e.time.clone(),
                fields: e.fields.clone()?,
            })
        });
        (self.into_meta(), applied)
    }
}

/// Listed and watched as `K`.
impl<K: Resource> Resource for Watched<K> {
    type DynamicType = K::DynamicType;
    type Scope = K::Scope;

    fn kind(dt: &Self::DynamicType) -> Cow<'_, str> {
        K::kind(dt)
    }
    fn group(dt: &Self::DynamicType) -> Cow<'_, str> {
        K::group(dt)
    }
    fn version(dt: &Self::DynamicType) -> Cow<'_, str> {
        K::version(dt)
    }
    fn api_version(dt: &Self::DynamicType) -> Cow<'_, str> {
        K::api_version(dt)
    }
    fn plural(dt: &Self::DynamicType) -> Cow<'_, str> {
        K::plural(dt)
    }
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

/// Listed and watched as Pods.
impl Resource for WatchedPod {
    type DynamicType = ();
    type Scope = NamespaceResourceScope;

    fn kind(dt: &()) -> Cow<'_, str> {
        Pod::kind(dt)
    }
    fn group(dt: &()) -> Cow<'_, str> {
        Pod::group(dt)
    }
    fn version(dt: &()) -> Cow<'_, str> {
        Pod::version(dt)
    }
    fn plural(dt: &()) -> Cow<'_, str> {
        Pod::plural(dt)
    }
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

impl Labelled for WatchedPod {
    fn label(&self, key: &str) -> Option<&str> {
        self.metadata.labels.as_ref()?.get(key).map(String::as_str)
    }
}

impl PodView for WatchedPod {
    fn host_ip(&self) -> Option<&str> {
        self.status.as_ref()?.host_ip.as_deref()
    }
    fn node_name(&self) -> Option<&str> {
        self.spec.as_ref()?.node_name.as_deref()
    }
    fn pod_ip(&self) -> Option<&str> {
        self.status.as_ref()?.pod_ip.as_deref()
    }
    fn ready(&self) -> bool {
        self.status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .into_iter()
            .flatten()
            .any(|c| c.type_ == "Ready" && c.status == "True")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A Pod as the API server sends it, with the parts a watch skips.
    fn full(ready: &str) -> Value {
        json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {
                "name": "p", "namespace": "ns", "uid": "u", "resourceVersion": "7",
                "generation": 1, "creationTimestamp": "2026-01-01T00:00:00Z",
                "labels": {"a": "b"}, "annotations": {"c": "d"},
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "StatefulSet",
                    "name": "s", "uid": "o", "controller": true}],
                "finalizers": ["f"],
                "managedFields": [{"manager": "kubelet", "operation": "Update",
                    "fieldsType": "FieldsV1", "fieldsV1": {"f:status": {"f:podIP": {}}}}],
            },
            "spec": {"nodeName": "n1", "containers": [{"name": "valkey", "image": "v",
                "ports": [{"containerPort": 6379}], "env": [{"name": "X", "value": "y"}]}]},
            "status": {"phase": "Running", "hostIP": "10.0.0.1", "podIP": "10.1.0.1",
                "conditions": [{"type": "PodScheduled", "status": "True"},
                    {"type": "Ready", "status": ready, "lastTransitionTime": null}],
                "containerStatuses": [{"name": "valkey", "ready": true, "restartCount": 0,
                    "image": "v", "imageID": "", "started": true}]},
        })
    }

    #[test]
    fn a_watched_pod_reads_as_the_whole_pod_does() {
        for ready in ["True", "False"] {
            let pod: Pod = serde_json::from_value(full(ready)).unwrap();
            let watched: WatchedPod = serde_json::from_value(full(ready)).unwrap();
            assert_eq!(watched.host_ip(), pod.host_ip());
            assert_eq!(watched.pod_ip(), pod.pod_ip());
            assert_eq!(watched.node_name(), pod.node_name());
            assert_eq!(watched.ready(), pod.ready(), "{ready}");
            assert_eq!(watched.label("a"), Some("b"));
            let (w, p) = (&watched.metadata, &pod.metadata);
            assert_eq!(
                (&w.name, &w.namespace, &w.uid, &w.resource_version),
                (&p.name, &p.namespace, &p.uid, &p.resource_version)
            );
            assert_eq!(
                (&w.annotations, &w.owner_references, w.generation),
                (&p.annotations, &p.owner_references, p.generation)
            );
            // What the cache never reads is not kept.
            assert!(w.managed_fields.is_none() && w.finalizers.is_none());
        }
    }

    #[test]
    fn a_watched_object_keeps_shardgate_s_entry_and_its_fields_as_sent() {
        use k8s_openapi::api::apps::v1::StatefulSet;
        let sent = json!({
            "apiVersion": "apps/v1", "kind": "StatefulSet",
            "metadata": {
                "name": "s", "namespace": "ns", "uid": "u", "generation": 2,
                "annotations": {"a": "b"},
                "managedFields": [
                    {"manager": "kube-controller-manager", "operation": "Update",
                        "subresource": "status", "fieldsType": "FieldsV1",
                        "fieldsV1": {"f:status": {"f:replicas": {}}}},
                    // Only an apply without a subresource is shardgate's entry.
                    {"manager": FIELD_MANAGER, "operation": "Update",
                        "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {}}},
                    {"fieldsV1": {"f:spec": {"f:replicas": {}}},
                        "manager": FIELD_MANAGER, "operation": "Apply",
                        "time": "2026-12-06T10:00:00Z", "fieldsType": "FieldsV1"},
                ],
            },
            "spec": {"replicas": 1, "serviceName": "h", "selector": {"matchLabels": {"x": "y"}}},
            "status": {"replicas": 1, "updateRevision": "r1", "observedGeneration": 2},
        });
        let watched: Watched<StatefulSet> = serde_json::from_str(&sent.to_string()).unwrap();
        let applied = watched.applied.as_ref().expect("shardgate's entry");
        assert_eq!(applied.fields.get(), r#"{"f:spec":{"f:replicas":{}}}"#);
        assert_eq!(applied.time.as_ref().unwrap().0.as_second(), 1_796_551_200);
        assert!(watched.metadata.managed_fields.is_none());
        assert_eq!(watched.metadata.generation, Some(2));
        // Each top-level field as sent, parsed on demand.
        let names: Vec<&str> = watched.fields.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["apiVersion", "kind", "spec", "status"]);
        let status: Value = watched.field("status").unwrap();
        assert_eq!(status["updateRevision"], "r1");
        assert_eq!(watched.field::<Value>("data"), None);
        // Only the fields asked for are parsed into the JSON.
        let spec_only = watched.to_json(|name| name == "spec");
        assert_eq!(spec_only["spec"], sent["spec"]);
        assert!(spec_only.get("status").is_none());
        assert_eq!(spec_only["metadata"]["annotations"], json!({"a": "b"}));
        // The whole object, as the typed decode reads it but for what a
        // watch drops.
        let mut typed: StatefulSet = serde_json::from_value(sent).unwrap();
        typed.metadata.managed_fields = None;
        assert_eq!(watched.object(), Some(typed));
        // Without shardgate's entry, none is found.
        let bare: Watched<StatefulSet> =
            serde_json::from_str(r#"{"metadata": {"name": "s", "managedFields": null}}"#).unwrap();
        assert!(bare.applied.is_none() && bare.fields.is_empty());
    }

    #[test]
    fn a_pod_without_spec_or_status_decodes() {
        let watched: WatchedPod =
            serde_json::from_value(json!({"metadata": {"name": "p"}})).unwrap();
        assert_eq!(
            (watched.host_ip(), watched.node_name(), watched.ready()),
            (None, None, false)
        );
        assert_eq!(WatchedPod::kind(&()), "Pod");
        assert_eq!(WatchedPod::plural(&()), "pods");
    }
}
