//! What the operator's caches keep of each owned object: only what a
//! reconcile reads. At 1,000 clusters of 10 shards x 3 nodes the caches hold
//! 130,000 objects, so every field kept costs.
//!
//! - Every owned kind is cached as a [`Slim`]: its name and namespace,
//!   its UID and the few labels, annotations and owner a reconcile reads in
//!   fixed slots of one allocation ([`Marks`]), and what is read of the
//!   spec and status. A `Pod` is 2.4 KB and a
//!   `StatefulSet` 2.6 KB before any of their heap data (almost all of it
//!   the inline `PodSpec`), and a label or annotation map costs a ~540-byte
//!   B-tree node however few entries it has.
//! - Drift is found through the digest of the fields shardgate applied
//!   ([`crate::owned_fields`]), so an object with shardgate's apply entry
//!   is cached without the fields only drift detection would read (a
//!   StatefulSet's spec, a ConfigMap's data, a Service's selector). An
//!   object without that entry also keeps its whole self, to be compared
//!   whole ([`Slim::whole`]).

use std::sync::Arc;

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{ConfigMap, LoadBalancerIngress, Service};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::Resource;
use kube::api::{DynamicObject, ObjectMeta};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use shardgate_contract::labels;

use super::watched::{Watched, WatchedPod};
use crate::convert::{Labelled, PodView, ServiceView};
use crate::crd::ValkeyCluster;
use crate::manager::APPLIED_HASH;
use crate::owned_fields;

/// A Pod's template revision, set by the StatefulSet controller.
pub const LABEL_REVISION: &str = "controller-revision-hash";

/// A cached object as reconciles and [`crate::apply`] read it. Two equal
/// entries read the same to every reconcile.
pub trait Entry: Labelled + PartialEq + Send + Sync + 'static {
    /// The object's name.
    fn name(&self) -> &str;
    /// The object's namespace.
    fn namespace(&self) -> &str;
    /// The object's UID (a cached Pod has none: it is never read).
    fn uid(&self) -> Option<&str>;
    /// Its name and namespace as the shared strings the cache keys it by
    /// (the cache replaces the namespace with the one string it keeps per
    /// namespace).
    fn shared_names(&mut self) -> (&Arc<str>, &mut Arc<str>);
    /// The UID of the object's controller (its owner reference marked
    /// `controller`).
    fn controller_uid(&self) -> Option<&str>;
    /// The name of the object's controller, if that is a ValkeyCluster.
    fn controller_cluster(&self) -> Option<&str>;
    /// The hash of what shardgate last applied ([`APPLIED_HASH`]).
    fn applied_hash(&self) -> Option<&str>;
    /// The digest of the fields shardgate owns, as they are live; `None`
    /// when shardgate has no apply entry on the object.
    fn owned_digest(&self) -> Option<&str>;
    /// The key of shardgate's apply entry that digest was taken from
    /// ([`owned_fields::digest_of_entry_reusing`]).
    fn owned_key(&self) -> Option<&str>;
    /// The whole object as JSON, if the cache kept it whole: the only way
    /// to find drift on an object that has no owned-fields digest.
    fn whole(&self) -> Option<Value>;
}

/// The slots of [`Marks`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Slot {
    /// The object's own UID.
    Uid,
    Cluster,
    Shard,
    Node,
    Revision,
    /// The UID in the owner reference marked `controller`.
    Controller,
    /// That controller's name, if it is a ValkeyCluster.
    ControllerCluster,
    AppliedHash,
    OwnedDigest,
    /// The key of shardgate's apply entry the digest was taken from.
    OwnedKey,
}

const SLOTS: usize = Slot::OwnedKey as usize + 1;

/// The UID, labels, annotations and owner a reconcile reads, each in its
/// own slot, all in one allocation: the object's UID, the cluster
/// (ownership, the index and what to reconcile when the object changes),
/// the node's indices, a Pod's template revision, the controller's UID and
/// name, the applied hash, and the owned-fields digest computed when the
/// object was cached with the key of the apply entry it was taken from.
///
/// Ten short strings of their own would cost 160 bytes inline and ten
/// allocations per object; these cost 42 bytes and one. A value that does
/// not fit the 64 KiB of text (only an annotation someone else wrote could
/// be that long) is kept as absent: an applied hash that long is not one
/// shardgate wrote, so either way the object is re-applied.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Marks {
    /// Every present slot's text, one after another.
    text: Box<str>,
    /// Where each slot's text ends in `text` (it starts where the previous
    /// slot's ends).
    ends: [u16; SLOTS],
    /// Bit `slot` set: that slot holds a value (which may be empty).
    present: u16,
}

impl Marks {
    /// Takes the marks out of `meta`'s UID, label and annotation maps and
    /// owner references; the UID only if `keep_uid`.
    fn take(meta: &mut ObjectMeta, keep_uid: bool, owned: Option<(String, String)>) -> Self {
        let (owned_digest, owned_key) = owned.unzip();
        let mut labels = meta.labels.take().unwrap_or_default();
        let mut annotations = meta.annotations.take().unwrap_or_default();
        let controller = meta
            .owner_references
            .take()
            .into_iter()
            .flatten()
            .find(|r| r.controller == Some(true));
        let uid = meta.uid.take().filter(|_| keep_uid);
        let controller_cluster = controller
            .as_ref()
            .filter(|r| r.kind == ValkeyCluster::kind(&()))
            .map(|r| r.name.as_str());
        let mut label = |key| labels.remove(key);
        let (cluster, shard, node, revision) = (
            label(labels::CLUSTER),
            label(labels::SHARD),
            label(labels::NODE),
            label(LABEL_REVISION),
        );
        let applied_hash = annotations.remove(APPLIED_HASH);
        // In `Slot` order.
        let values = [
            uid.as_deref(),
            cluster.as_deref(),
            shard.as_deref(),
            node.as_deref(),
            revision.as_deref(),
            controller.as_ref().map(|r| r.uid.as_str()),
            controller_cluster,
            applied_hash.as_deref(),
            owned_digest.as_deref(),
            owned_key.as_deref(),
        ];
        Self::pack(values)
    }

    fn pack(values: [Option<&str>; SLOTS]) -> Self {
        let mut text = String::with_capacity(values.iter().flatten().map(|v| v.len()).sum());
        let mut ends = [0; SLOTS];
        let mut present = 0;
        for (slot, value) in values.into_iter().enumerate() {
            if let Some(value) = value
                && text.len() + value.len() <= usize::from(u16::MAX)
            {
                text.push_str(value);
                present |= 1 << slot;
            }
            ends[slot] = u16::try_from(text.len()).expect("kept within u16");
        }
        Marks {
            text: text.into_boxed_str(),
            ends,
            present,
        }
    }

    fn get(&self, slot: Slot) -> Option<&str> {
        let i = slot as usize;
        if self.present & (1 << i) == 0 {
            return None;
        }
        let start = if i == 0 { 0 } else { self.ends[i - 1] };
        Some(&self.text[usize::from(start)..usize::from(self.ends[i])])
    }

    fn label(&self, key: &str) -> Option<&str> {
        match key {
            labels::CLUSTER => self.get(Slot::Cluster),
            labels::SHARD => self.get(Slot::Shard),
            labels::NODE => self.get(Slot::Node),
            LABEL_REVISION => self.get(Slot::Revision),
            _ => None,
        }
    }
}

/// A cached object of kind `K`: its name and namespace, its [`Marks`]
/// (UID included), what is read of its spec and status (`S`), and the whole
/// object only when it has no owned-fields digest (shardgate never applied
/// it, so drift can only be found by comparing it whole). Built from the
/// decoded object ([`pod`], [`stateful_set`], [`service`], [`config_map`])
/// and held by [`super::Cache`].
#[derive(Clone, Debug, PartialEq)]
pub struct Slim<K, S> {
    /// Shared with the cache's keys.
    pub name: Arc<str>,
    pub namespace: Arc<str>,
    pub marks: Marks,
    pub state: Option<S>,
    pub whole: Option<Box<K>>,
}

/// A cached Pod: its marks, owner, IPs and readiness.
pub type CachedPod = Slim<WatchedPod, PodState>;
/// A cached StatefulSet: its marks and update revision.
pub type CachedStatefulSet = Slim<StatefulSet, StatefulSetState>;
/// A cached Service: its marks, ports and load-balancer ingress.
pub type CachedService = Slim<Service, ServiceState>;
/// A cached ConfigMap: its marks.
pub type CachedConfigMap = Slim<ConfigMap, ()>;
/// A cached PodDisruptionBudget: its marks.
pub type CachedDisruptionBudget = Slim<PodDisruptionBudget, ()>;
/// A cached Gateway API route (TCPRoute or TLSRoute): its marks.
pub type CachedRoute = Slim<DynamicObject, ()>;

/// What a reconcile reads of a Pod's status. (A `PodStatus` is 616 bytes
/// before any of its heap data.)
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PodState {
    pub host_ip: Option<Box<str>>,
    /// `spec.nodeName`.
    pub node_name: Option<Box<str>>,
    pub pod_ip: Option<Box<str>>,
    /// Its `Ready` condition is `True`.
    pub ready: bool,
}

/// What a reconcile reads of a StatefulSet's status: the revision its Pods
/// should have.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct StatefulSetState {
    pub update_revision: Option<Box<str>>,
    /// The StatefulSet controller has seen its latest spec
    /// (`status.observedGeneration` is `metadata.generation`): until then
    /// its Pods' revisions say nothing of the new template.
    pub observed: bool,
}

/// What a reconcile reads of a Service's spec and status.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ServiceState {
    /// Each port's name and NodePort (a `ServicePort` is 112 bytes before
    /// its heap data).
    pub ports: Box<[CachedPort]>,
    pub ingress: Vec<LoadBalancerIngress>,
}

/// What the snapshot reads of a Service port.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CachedPort {
    pub name: Option<Box<str>>,
    pub node_port: Option<i32>,
}

impl<K, S> Labelled for Slim<K, S> {
    fn label(&self, key: &str) -> Option<&str> {
        self.marks.label(key)
    }
}

impl<K, S> Entry for Slim<K, S>
where
    K: Serialize + PartialEq + Send + Sync + 'static,
    S: PartialEq + Send + Sync + 'static,
{
    fn name(&self) -> &str {
        &self.name
    }
    fn namespace(&self) -> &str {
        &self.namespace
    }
    fn uid(&self) -> Option<&str> {
        self.marks.get(Slot::Uid)
    }
    fn shared_names(&mut self) -> (&Arc<str>, &mut Arc<str>) {
        (&self.name, &mut self.namespace)
    }
    fn controller_uid(&self) -> Option<&str> {
        self.marks.get(Slot::Controller)
    }
    fn controller_cluster(&self) -> Option<&str> {
        self.marks.get(Slot::ControllerCluster)
    }
    fn applied_hash(&self) -> Option<&str> {
        self.marks.get(Slot::AppliedHash)
    }
    fn owned_digest(&self) -> Option<&str> {
        self.marks.get(Slot::OwnedDigest)
    }
    fn owned_key(&self) -> Option<&str> {
        self.marks.get(Slot::OwnedKey)
    }
    fn whole(&self) -> Option<Value> {
        self.whole
            .as_ref()
            .map(|k| serde_json::to_value(k).expect("k8s objects serialize"))
    }
}

impl PodView for CachedPod {
    fn host_ip(&self) -> Option<&str> {
        self.state.as_ref()?.host_ip.as_deref()
    }
    fn pod_ip(&self) -> Option<&str> {
        self.state.as_ref()?.pod_ip.as_deref()
    }
    fn node_name(&self) -> Option<&str> {
        self.state.as_ref()?.node_name.as_deref()
    }
    fn ready(&self) -> bool {
        self.state.as_ref().is_some_and(|s| s.ready)
    }
}

impl ServiceView for CachedService {
    fn service_name(&self) -> &str {
        self.name()
    }
    fn ports(&self) -> impl Iterator<Item = (Option<&str>, Option<i32>)> {
        let ports = self.state.as_ref().map_or(&[][..], |s| &s.ports);
        ports.iter().map(|p| (p.name.as_deref(), p.node_port))
    }
    fn ingress(&self) -> &[LoadBalancerIngress] {
        self.state.as_ref().map_or(&[], |s| &s.ingress)
    }
}

/// `o`, decoded as a watch decodes it, as the cache keeps it: `state`
/// picks what is read of its spec and status. shardgate's apply entry gives
/// way to the digest of what shardgate applied; without that entry, the
/// whole object is kept beside the entry (shardgate applies every kind
/// decoded so). The digest of `prior` (the entry `o` replaces) is taken
/// over when the applied hash and shardgate's apply entry are the same: a
/// change of status alone is not digested again, and its spec is not even
/// parsed ([`owned_fields::digest_of_entry_reusing`]).
fn slim<K, S>(
    o: Watched<K>,
    prior: Option<&Slim<K, S>>,
    state: impl FnOnce(&Watched<K>) -> Option<S>,
) -> Slim<K, S>
where
    K: DeserializeOwned,
{
    let hash = o
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(APPLIED_HASH));
    let prior =
        prior.filter(|p| hash.is_some_and(|h| p.marks.get(Slot::AppliedHash) == Some(h.as_str())));
    let owned = o.applied.as_ref().and_then(|entry| {
        owned_fields::digest_of_entry_reusing(
            entry.time.as_ref().map(|t| t.0.as_second()),
            entry.fields.get(),
            |wanted| o.to_json(wanted),
            |key| {
                let marks = &prior?.marks;
                (marks.get(Slot::OwnedKey) == Some(key))
                    .then(|| marks.get(Slot::OwnedDigest).map(String::from))
                    .flatten()
            },
        )
    });
    let state = state(&o);
    let whole = match owned {
        Some(_) => None,
        None => o.object().map(Box::new),
    };
    let mut meta = o.metadata;
    let marks = Marks::take(&mut meta, true, owned);
    Slim {
        name: meta.name.unwrap_or_default().into(),
        namespace: meta.namespace.unwrap_or_default().into(),
        marks,
        state,
        whole,
    }
}

/// What the cache reads of a Service's spec: its ports.
#[derive(Deserialize)]
struct ServiceSpecSeen {
    #[serde(default)]
    ports: Option<Vec<PortSeen>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct PortSeen {
    name: Option<String>,
    node_port: Option<i32>,
}

/// What the cache reads of a Service's status: its load-balancer ingress.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ServiceStatusSeen {
    load_balancer: Option<LoadBalancerSeen>,
}

#[derive(Deserialize)]
struct LoadBalancerSeen {
    ingress: Option<Vec<LoadBalancerIngress>>,
}

/// What the cache reads of a StatefulSet's status.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct StatefulSetStatusSeen {
    update_revision: Option<String>,
    observed_generation: Option<i64>,
}

/// Each of these turns an object, decoded as its watch decodes it
/// ([`Watched`]), into what the cache keeps, reusing `prior`'s digest where
/// it still holds (see [`slim`]).
///
/// A Service as the cache keeps it: its ports' names and NodePorts and its
/// load-balancer ingress are read for the guest's snapshot.
pub fn service(svc: Watched<Service>, prior: Option<&CachedService>) -> CachedService {
    slim(svc, prior, |svc| {
        let ports = svc
            .field::<ServiceSpecSeen>("spec")
            .and_then(|s| s.ports)
            .unwrap_or_default();
        let ingress = svc
            .field::<ServiceStatusSeen>("status")
            .and_then(|s| s.load_balancer?.ingress)
            .unwrap_or_default();
        Some(ServiceState {
            ports: ports
                .into_iter()
                .map(|p| CachedPort {
                    name: p.name.map(Box::from),
                    node_port: p.node_port,
                })
                .collect(),
            ingress,
        })
    })
}

/// A ConfigMap as the cache keeps it: with a digest, its data is never
/// read back, only compared.
pub fn config_map(cm: Watched<ConfigMap>, prior: Option<&CachedConfigMap>) -> CachedConfigMap {
    slim(cm, prior, |_| None)
}

/// A PodDisruptionBudget as the cache keeps it: like a ConfigMap, compared
/// by digest only.
pub fn disruption_budget(
    pdb: Watched<PodDisruptionBudget>,
    prior: Option<&CachedDisruptionBudget>,
) -> CachedDisruptionBudget {
    slim(pdb, prior, |_| None)
}

/// A Gateway API route as the cache keeps it: like a ConfigMap, compared
/// by digest only.
pub fn route(route: Watched<DynamicObject>, prior: Option<&CachedRoute>) -> CachedRoute {
    slim(route, prior, |_| None)
}

/// A Pod as the cache keeps it: of its status the host IP, the pod IP and
/// readiness. A Pod is never applied, so never compared.
pub fn pod(pod: WatchedPod) -> CachedPod {
    let state = PodState {
        host_ip: pod.host_ip().map(Box::from),
        node_name: pod.node_name().map(Box::from),
        pod_ip: pod.pod_ip().map(Box::from),
        ready: pod.ready(),
    };
    let mut meta = pod.metadata;
    let marks = Marks::take(&mut meta, false, None);
    Slim {
        name: meta.name.unwrap_or_default().into(),
        namespace: meta.namespace.unwrap_or_default().into(),
        marks,
        state: Some(state),
        whole: None,
    }
}

/// A StatefulSet as the cache keeps it: its update revision.
pub fn stateful_set(
    sts: Watched<StatefulSet>,
    prior: Option<&CachedStatefulSet>,
) -> CachedStatefulSet {
    slim(sts, prior, |sts| {
        let status = sts.field::<StatefulSetStatusSeen>("status")?;
        Some(StatefulSetState {
            update_revision: status.update_revision.map(Box::from),
            observed: status.observed_generation.is_some()
                && status.observed_generation >= sts.metadata.generation,
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::apps::v1::StatefulSetSpec;
    use k8s_openapi::api::core::v1::Pod;

    // The builders, given whole objects: each decoded as its watch decodes
    // it first.
    fn stateful_set(sts: StatefulSet, prior: Option<&CachedStatefulSet>) -> CachedStatefulSet {
        super::stateful_set(Watched::of(&sts), prior)
    }
    fn service(svc: Service, prior: Option<&CachedService>) -> CachedService {
        super::service(Watched::of(&svc), prior)
    }
    fn config_map(cm: ConfigMap, prior: Option<&CachedConfigMap>) -> CachedConfigMap {
        super::config_map(Watched::of(&cm), prior)
    }
    fn pod(p: Pod, _prior: Option<&CachedPod>) -> CachedPod {
        let json = serde_json::to_string(&p).unwrap();
        super::pod(serde_json::from_str(&json).unwrap())
    }

    #[test]
    fn slim_entries_are_a_fraction_of_the_k8s_structs() {
        use std::mem::size_of;
        assert!(size_of::<CachedPod>() * 2 < size_of::<Pod>());
        assert!(size_of::<CachedStatefulSet>() * 4 < size_of::<StatefulSet>());
        // Smaller than the metadata alone that kube's `Resource` requires.
        let meta = size_of::<ObjectMeta>();
        assert!(size_of::<CachedPod>() < meta);
        assert!(size_of::<CachedService>() < meta);
        assert!(size_of::<CachedStatefulSet>() < meta);
        assert!(size_of::<CachedConfigMap>() < meta);
    }

    #[test]
    fn marks_keep_every_slot_apart_and_tell_empty_from_absent() {
        let values = [
            Some("u1"),
            Some("c"),
            None,
            Some(""),
            Some("rev"),
            None,
            Some("c"),
            Some("h"),
            Some("d"),
            Some("k"),
        ];
        let marks = Marks::pack(values);
        for (slot, want) in ALL_SLOTS.into_iter().zip(values) {
            assert_eq!(marks.get(slot), want, "{slot:?}");
        }
        assert_eq!(&*marks.text, "u1crevchdk", "one allocation");
        assert_eq!(Marks::default().get(Slot::Uid), None);
        assert!(size_of::<Marks>() <= 40);
    }

    #[test]
    fn a_value_too_long_for_the_marks_is_absent_and_the_rest_kept() {
        let long = "h".repeat(usize::from(u16::MAX));
        let marks = Marks::pack([
            Some("u1"),
            Some("c"),
            None,
            None,
            None,
            None,
            None,
            Some(&long),
            Some("d"),
            None,
        ]);
        assert_eq!(marks.get(Slot::AppliedHash), None);
        assert_eq!(marks.get(Slot::Uid), Some("u1"));
        assert_eq!(marks.get(Slot::Cluster), Some("c"));
        assert_eq!(marks.get(Slot::OwnedDigest), Some("d"));
    }

    #[test]
    fn a_stateful_set_shardgate_never_applied_is_kept_whole() {
        let sts = StatefulSet {
            metadata: ObjectMeta {
                name: Some("n".into()),
                ..ObjectMeta::default()
            },
            spec: StatefulSetSpec {
                service_name: Some("s".into()),
                ..StatefulSetSpec::default()
            },
            ..StatefulSet::default()
        };
        let cached = stateful_set(sts.clone(), None);
        assert_eq!(cached.whole.as_deref(), Some(&sts));
        assert_eq!(
            cached.whole().unwrap()["spec"]["serviceName"],
            serde_json::json!("s")
        );
    }

    #[test]
    fn a_stateful_set_shardgate_applied_keeps_metadata_status_and_digest() {
        let sts: StatefulSet = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "n", "namespace": "ns", "uid": "u1", "generation": 3,
                "labels": {"a": "b", "shardgate.io/cluster": "c"},
                "annotations": {"shardgate.io/applied-hash": "h", "note": "x"},
                "ownerReferences": [{"apiVersion": "shardgate.io/v1alpha1", "kind": "ValkeyCluster",
                    "name": "c", "uid": "u0", "controller": true}],
                "managedFields": [{"manager": "shardgate", "operation": "Apply",
                    "fieldsV1": {"f:metadata": {"f:labels": {"f:a": {}}},
                                 "f:spec": {"f:serviceName": {}}}}]},
            "spec": {"serviceName": "s", "selector": {}, "template": {}},
            "status": {"replicas": 1, "updateRevision": "r1"}
        }))
        .unwrap();
        let cached = stateful_set(sts, None);
        assert!(cached.whole.is_none(), "the spec is not kept");
        assert!(cached.whole().is_none());
        assert_eq!((cached.name(), cached.namespace()), ("n", "ns"));
        assert_eq!(cached.uid(), Some("u1"));
        assert_eq!(cached.controller_uid(), Some("u0"));
        assert_eq!(cached.controller_cluster(), Some("c"));
        assert_eq!(cached.label(labels::CLUSTER), Some("c"));
        assert_eq!(cached.label("a"), None, "not read");
        assert_eq!(cached.applied_hash(), Some("h"));
        assert!(cached.owned_digest().is_some());
        assert_eq!(
            cached.state.and_then(|s| s.update_revision).as_deref(),
            Some("r1")
        );
    }

    /// A status change keeps the digest of the entry it replaces; a new
    /// applied hash, or shardgate's apply entry changed (a field taken or
    /// removed by someone else, or applied again), is digested again.
    #[test]
    fn a_digest_is_taken_over_only_while_the_hash_and_the_apply_entry_hold() {
        let sts = |hash: &str, fields: Value, time: &str, replicas: i32| {
            serde_json::from_value::<StatefulSet>(serde_json::json!({
                "metadata": {"name": "n", "namespace": "ns",
                    "annotations": {"shardgate.io/applied-hash": hash},
                    "managedFields": [{"manager": "shardgate", "operation": "Apply",
                        "time": time, "fieldsV1": fields}]},
                "spec": {"serviceName": "s", "replicas": 1, "selector": {}, "template": {}},
                "status": {"replicas": replicas}
            }))
            .unwrap()
        };
        let owned = serde_json::json!({"f:spec": {"f:serviceName": {}, "f:replicas": {}}});
        let fewer = serde_json::json!({"f:spec": {"f:serviceName": {}}});
        let t0 = "2026-12-06T10:00:00Z";
        let first = stateful_set(sts("h", owned.clone(), t0, 0), None);
        let digest = first.owned_digest().unwrap().to_string();
        // The prior's digest stands out, so a taken-over digest shows.
        let mut prior = first.clone();
        let mut values: [Option<&str>; SLOTS] = [None; SLOTS];
        for (v, slot) in values.iter_mut().zip(ALL_SLOTS) {
            *v = first.marks.get(slot);
        }
        values[Slot::OwnedDigest as usize] = Some("taken-over");
        prior.marks = Marks::pack(values);

        // (applied hash, apply entry fields, its time) => taken over?
        for (hash, fields, time, taken_over) in [
            ("h", owned.clone(), t0, true),
            ("h2", owned.clone(), t0, false),
            ("h", fewer.clone(), t0, false),
            ("h", owned, "2026-12-06T10:00:01Z", false),
        ] {
            let next = stateful_set(sts(hash, fields, time, 1), Some(&prior));
            let got = next.owned_digest().unwrap();
            assert_eq!(got == "taken-over", taken_over, "{hash} {time}");
        }
        assert_eq!(
            stateful_set(
                sts(
                    "h",
                    serde_json::json!({"f:spec": {"f:serviceName": {}, "f:replicas": {}}}),
                    t0,
                    1
                ),
                None
            )
            .owned_digest(),
            Some(digest.as_str()),
            "a status change leaves the digest as it was"
        );
        let taken = stateful_set(sts("h", fewer, t0, 1), Some(&prior));
        assert_ne!(
            taken.owned_digest(),
            Some(digest.as_str()),
            "fewer fields owned"
        );
    }

    /// Every slot, in order (as many as the marks have).
    const ALL_SLOTS: [Slot; SLOTS] = [
        Slot::Uid,
        Slot::Cluster,
        Slot::Shard,
        Slot::Node,
        Slot::Revision,
        Slot::Controller,
        Slot::ControllerCluster,
        Slot::AppliedHash,
        Slot::OwnedDigest,
        Slot::OwnedKey,
    ];

    /// A NodePort Service as the API server holds it after shardgate
    /// applied it.
    fn live_service(shardgate_applied: bool) -> Service {
        let managed = if shardgate_applied {
            serde_json::json!([{"manager": "shardgate", "operation": "Apply",
                "fieldsV1": {"f:spec": {"f:ports": {}, "f:selector": {}}}}])
        } else {
            serde_json::json!([{"manager": "kubectl", "operation": "Update",
                "fieldsV1": {"f:spec": {"f:ports": {}}}}])
        };
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "shardgate-c-shard-0", "namespace": "ns", "managedFields": managed,
                "labels": {"shardgate.io/cluster": "c", "shardgate.io/shard": "0", "x": "y"}},
            "spec": {"type": "NodePort", "clusterIP": "10.0.0.9", "selector": {"a": "b"},
                "ports": [{"name": "vk-n0", "port": 6379, "nodePort": 30001,
                           "protocol": "TCP", "targetPort": 6379}]},
            "status": {"loadBalancer": {"ingress": [{"ip": "192.0.2.1"}]}}
        }))
        .unwrap()
    }

    #[test]
    fn a_cached_service_keeps_what_the_snapshot_reads() {
        let svc = live_service(true);
        let cached = service(svc.clone(), None);
        assert!(cached.whole.is_none());
        assert!(cached.owned_digest().is_some());
        assert_eq!(
            cached.ports().collect::<Vec<_>>(),
            [(Some("vk-n0"), Some(30001))]
        );
        assert_eq!(cached.ingress(), svc.ingress());
        assert_eq!(cached.label(labels::SHARD), Some("0"));
        assert_eq!(
            crate::convert::observed_service("c", &cached),
            crate::convert::observed_service("c", &svc)
        );
        assert!(crate::convert::observed_service("c", &svc).is_some());
    }

    #[test]
    fn a_service_shardgate_never_applied_is_kept_whole() {
        let svc = live_service(false);
        let cached = service(svc.clone(), None);
        assert!(cached.owned_digest().is_none());
        let whole = Service {
            metadata: ObjectMeta {
                managed_fields: None,
                ..svc.metadata
            },
            ..svc
        };
        assert_eq!(cached.whole.as_deref(), Some(&whole));
        assert_eq!(cached.whole(), Some(serde_json::to_value(&whole).unwrap()));
        assert_eq!(
            crate::convert::observed_service("c", &cached),
            crate::convert::observed_service("c", &whole)
        );
    }

    #[test]
    fn a_config_map_keeps_only_its_marks() {
        let cm: ConfigMap = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "c-0-0", "namespace": "ns",
                "labels": {"shardgate.io/cluster": "c", "shardgate.io/node": "0"},
                "annotations": {"shardgate.io/applied-hash": "h"},
                "managedFields": [{"manager": "shardgate", "operation": "Apply",
                    "fieldsV1": {"f:data": {"f:valkey.conf": {}}}}]},
            "data": {"valkey.conf": "port 6379"}
        }))
        .unwrap();
        let cached = config_map(cm, None);
        assert!(cached.whole.is_none() && cached.state.is_none());
        assert_eq!(cached.label(labels::NODE), Some("0"));
        assert_eq!(cached.label(labels::SHARD), None);
        assert_eq!(cached.applied_hash(), Some("h"));
        assert!(cached.owned_digest().is_some());
    }

    #[test]
    fn a_cached_pod_keeps_what_the_snapshot_reads() {
        let p: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "labels": {"shardgate.io/cluster": "c",
                "shardgate.io/shard": "1", "shardgate.io/node": "2"},
                "managedFields": [{"manager": "kubelet", "operation": "Update"}]},
            "spec": {"containers": [{"name": "valkey"}]},
            "status": {"hostIP": "10.0.0.1", "podIP": "10.1.0.1", "phase": "Running",
                "podIPs": [{"ip": "10.1.0.1"}],
                "conditions": [{"type": "PodScheduled", "status": "True"},
                               {"type": "Ready", "status": "True"}],
                "containerStatuses": [{"name": "valkey", "image": "i", "imageID": "",
                    "ready": true, "restartCount": 0}]}
        }))
        .unwrap();
        let cached = pod(p.clone(), None);
        assert!(cached.whole.is_none(), "a Pod is never compared");
        assert_eq!(cached.uid(), None, "not read");
        assert_eq!(
            cached.state,
            Some(PodState {
                host_ip: Some("10.0.0.1".into()),
                node_name: None,
                pod_ip: Some("10.1.0.1".into()),
                ready: true,
            })
        );
        let observed = crate::convert::observed_pod("c", &cached).unwrap();
        assert_eq!(
            (observed.shard, observed.node, observed.ready),
            (1, 2, true)
        );
        assert_eq!(Some(observed), crate::convert::observed_pod("c", &p));
    }

    #[test]
    fn a_pod_is_ready_only_with_a_true_ready_condition() {
        let with = |conditions: Value| {
            let p: Pod = serde_json::from_value(serde_json::json!({
                "metadata": {"name": "p"},
                "status": {"podIP": "10.1.0.1", "conditions": conditions}
            }))
            .unwrap();
            pod(p, None).ready()
        };
        assert!(!with(
            serde_json::json!([{"type": "Ready", "status": "False"}])
        ));
        assert!(!with(
            serde_json::json!([{"type": "ContainersReady", "status": "True"}])
        ));
        assert!(!with(serde_json::json!([])));
        assert!(with(
            serde_json::json!([{"type": "Ready", "status": "True"}])
        ));
    }
}
