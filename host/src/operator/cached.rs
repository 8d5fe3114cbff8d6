//! What the operator's caches keep of each owned object: only what a
//! reconcile reads. At 1,000 clusters of 10 shards x 3 nodes the caches hold
//! 130,000 objects, so every field kept costs.
//!
//! - Drift is found through the digest of the fields shardgate applied
//!   ([`super::owned_fields`]), so an object with shardgate's apply entry
//!   is cached without the fields that only drift detection would read
//!   (a StatefulSet's spec, a ConfigMap's data, a Service's selector) and
//!   with its metadata trimmed to what is read ([`compact_meta`]). An
//!   object without that entry is kept whole and compared whole.
//! - A `Pod` is 2.4 KB and a `StatefulSet` 2.6 KB before any of their heap
//!   data, almost all of it the inline `PodSpec` (1.5 KB). Both are cached
//!   as a [`Slim`]: metadata and status.

use std::borrow::Cow;

use k8s_openapi::api::apps::v1::{StatefulSet, StatefulSetStatus};
use k8s_openapi::api::core::v1::{ConfigMap, Pod, PodStatus, Service, ServicePort, ServiceSpec};
use kube::Resource;
use kube::api::ObjectMeta;
use serde_json::Value;
use shardgate_guest::names::{LABEL_CLUSTER, LABEL_NODE, LABEL_SHARD};

use super::apply::{APPLIED_HASH, Live};
use super::owned_fields::{self, CACHED_DIGEST};
use crate::convert::PodView;

/// The labels a reconcile reads: the cluster (ownership and the index),
/// the node's indices, and a Pod's template revision.
const LABELS_READ: [&str; 4] = [
    LABEL_CLUSTER,
    LABEL_SHARD,
    LABEL_NODE,
    "controller-revision-hash",
];
/// The annotations a reconcile reads.
const ANNOTATIONS_READ: [&str; 2] = [APPLIED_HASH, CACHED_DIGEST];

/// A cached object of kind `K`: its metadata and status, and the whole
/// object only when it has no owned-fields digest (shardgate never applied
/// it, so drift can only be found by comparing it whole).
///
/// `Deserialize` only because kube's `Controller::watches_stream` asks for
/// it; a cache entry is always built from the decoded object ([`pod`],
/// [`stateful_set`]).
#[derive(Clone, Debug, serde::Deserialize)]
pub struct Slim<K, S> {
    pub metadata: ObjectMeta,
    pub status: Option<S>,
    #[serde(skip)]
    pub whole: Option<Box<K>>,
}

/// A cached Pod: labels, owner, IPs and readiness.
pub type CachedPod = Slim<Pod, PodStatus>;
/// A cached StatefulSet: metadata (with the digest) and status.
pub type CachedStatefulSet = Slim<StatefulSet, StatefulSetStatus>;

impl<K, S> Resource for Slim<K, S>
where
    K: Resource<DynamicType = ()>,
{
    type DynamicType = ();
    type Scope = K::Scope;

    fn kind(_: &()) -> Cow<'_, str> {
        K::kind(&())
    }
    fn group(_: &()) -> Cow<'_, str> {
        K::group(&())
    }
    fn version(_: &()) -> Cow<'_, str> {
        K::version(&())
    }
    fn api_version(_: &()) -> Cow<'_, str> {
        K::api_version(&())
    }
    fn plural(_: &()) -> Cow<'_, str> {
        K::plural(&())
    }
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

impl<K, S> Live for Slim<K, S>
where
    K: Resource<DynamicType = ()> + serde::Serialize + Clone + Send + Sync + 'static,
    S: Clone + Send + Sync + 'static,
{
    fn whole(&self) -> Option<Value> {
        self.whole
            .as_ref()
            .map(|k| serde_json::to_value(k).expect("k8s objects serialize"))
    }
}

impl PodView for CachedPod {
    fn pod_meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn pod_status(&self) -> Option<&PodStatus> {
        self.status.as_ref()
    }
}

/// Replaces the managed fields with the digest of what shardgate applied,
/// which is all drift detection needs, and trims the metadata to what is
/// read. False if shardgate has no apply entry on `o`: then only the
/// managed fields go, and the rest is kept to be compared whole.
fn with_owned_digest<K: Resource + serde::Serialize>(o: &mut K) -> bool {
    let digest = owned_fields::take_live_digest(o);
    let meta = o.meta_mut();
    meta.managed_fields = None;
    let Some(digest) = digest else {
        return false;
    };
    compact_meta(meta);
    meta.annotations
        .get_or_insert_default()
        .insert(CACHED_DIGEST.into(), digest);
    true
}

/// Keeps the metadata a reconcile, the reflector and kube's owner triggers
/// read: name, namespace, UID, resourceVersion, owner references, and only
/// the labels and annotations in [`LABELS_READ`] and [`ANNOTATIONS_READ`].
fn compact_meta(meta: &mut ObjectMeta) {
    let ObjectMeta {
        name,
        namespace,
        uid,
        resource_version,
        owner_references,
        labels,
        annotations,
        ..
    } = std::mem::take(meta);
    let keep = |map: Option<std::collections::BTreeMap<String, String>>, read: &[&str]| {
        let kept: std::collections::BTreeMap<_, _> = map
            .into_iter()
            .flatten()
            .filter(|(k, _)| read.contains(&k.as_str()))
            .collect();
        (!kept.is_empty()).then_some(kept)
    };
    *meta = ObjectMeta {
        name,
        namespace,
        uid,
        resource_version,
        owner_references,
        labels: keep(labels, &LABELS_READ),
        annotations: keep(annotations, &ANNOTATIONS_READ),
        ..ObjectMeta::default()
    };
}

/// A Service as the cache keeps it. Its ports' names and NodePorts and its
/// load-balancer status are read for the guest's snapshot; with a digest,
/// nothing else of its spec is.
pub fn service(mut svc: Service) -> Service {
    if with_owned_digest(&mut svc) {
        svc.spec = svc.spec.map(|spec| ServiceSpec {
            ports: spec.ports.map(|ports| {
                ports
                    .into_iter()
                    .map(|p| ServicePort {
                        name: p.name,
                        port: p.port,
                        node_port: p.node_port,
                        ..ServicePort::default()
                    })
                    .collect()
            }),
            ..ServiceSpec::default()
        });
    }
    svc
}

/// A ConfigMap as the cache keeps it: with a digest, its data is never read
/// back, only compared.
pub fn config_map(mut cm: ConfigMap) -> ConfigMap {
    if with_owned_digest(&mut cm) {
        cm.data = None;
        cm.binary_data = None;
    }
    cm
}

/// A Pod as the cache keeps it: compact metadata, and of its status the
/// host IP, the pod IP and the `Ready` condition. A Pod is never applied,
/// so it is never compared.
pub fn pod(pod: Pod) -> CachedPod {
    let Pod {
        mut metadata,
        status,
        ..
    } = pod;
    compact_meta(&mut metadata);
    Slim {
        metadata,
        status: status.map(|s| PodStatus {
            host_ip: s.host_ip,
            pod_ip: s.pod_ip,
            conditions: s
                .conditions
                .map(|c| c.into_iter().filter(|c| c.type_ == "Ready").collect()),
            ..PodStatus::default()
        }),
        whole: None,
    }
}

/// A StatefulSet as the cache keeps it: with shardgate's owned-fields
/// digest, its metadata and status; without one, whole as well.
pub fn stateful_set(mut sts: StatefulSet) -> CachedStatefulSet {
    if with_owned_digest(&mut sts) {
        Slim {
            metadata: sts.metadata,
            status: sts.status,
            whole: None,
        }
    } else {
        Slim {
            metadata: sts.metadata.clone(),
            status: sts.status.clone(),
            whole: Some(Box::new(sts)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::apps::v1::StatefulSetSpec;

    #[test]
    fn slim_entries_are_a_fraction_of_the_k8s_structs() {
        use std::mem::size_of;
        assert!(size_of::<CachedPod>() * 2 < size_of::<Pod>());
        assert!(size_of::<CachedStatefulSet>() * 4 < size_of::<StatefulSet>());
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
        let cached = stateful_set(sts.clone());
        assert_eq!(cached.whole.as_deref(), Some(&sts));
        assert_eq!(
            cached.whole().unwrap()["spec"]["serviceName"],
            serde_json::json!("s")
        );
        assert_eq!(CachedStatefulSet::kind(&()), "StatefulSet");
        assert_eq!(CachedStatefulSet::plural(&()), "statefulsets");
    }

    #[test]
    fn a_stateful_set_shardgate_applied_keeps_metadata_status_and_digest() {
        let sts: StatefulSet = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "n", "namespace": "ns", "uid": "u1", "generation": 3,
                "labels": {"a": "b", "valkey.io/cluster": "c"},
                "annotations": {"shardgate.io/applied-hash": "h", "note": "x"},
                "ownerReferences": [{"apiVersion": "valkey.io/v1alpha1", "kind": "ValkeyCluster",
                    "name": "c", "uid": "u0", "controller": true}],
                "managedFields": [{"manager": "shardgate", "operation": "Apply",
                    "fieldsV1": {"f:metadata": {"f:labels": {"f:a": {}}},
                                 "f:spec": {"f:serviceName": {}}}}]},
            "spec": {"serviceName": "s", "selector": {}, "template": {}},
            "status": {"replicas": 1, "updateRevision": "r1"}
        }))
        .unwrap();
        let cached = stateful_set(sts);
        assert!(cached.whole.is_none(), "the spec is not kept");
        assert!(cached.whole().is_none());
        assert_eq!(cached.metadata.name.as_deref(), Some("n"));
        assert!(cached.metadata.managed_fields.is_none());
        assert_eq!(cached.metadata.uid.as_deref(), Some("u1"));
        assert_eq!(cached.metadata.generation, None, "not read");
        assert_eq!(
            cached.metadata.owner_references.as_ref().unwrap()[0].uid,
            "u0"
        );
        let labels = cached.metadata.labels.as_ref().unwrap();
        assert_eq!(labels.keys().collect::<Vec<_>>(), ["valkey.io/cluster"]);
        let annotations = cached.metadata.annotations.as_ref().unwrap();
        assert_eq!(
            annotations.keys().collect::<Vec<_>>(),
            [APPLIED_HASH, CACHED_DIGEST]
        );
        assert_eq!(
            cached.status.and_then(|s| s.update_revision).as_deref(),
            Some("r1")
        );
    }

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
            "metadata": {"name": "c-s0", "namespace": "ns", "managedFields": managed,
                "labels": {"valkey.io/cluster": "c", "valkey.io/shard-index": "0", "x": "y"}},
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
        let cached = service(svc.clone());
        let spec = cached.spec.as_ref().unwrap();
        assert!(spec.selector.is_none() && spec.cluster_ip.is_none());
        let port = &spec.ports.as_ref().unwrap()[0];
        assert_eq!(
            (port.name.as_deref(), port.port, port.node_port),
            (Some("vk-n0"), 6379, Some(30001))
        );
        assert!(port.target_port.is_none());
        assert_eq!(cached.status, svc.status);
        assert_eq!(
            crate::convert::observed_service("c", &cached),
            crate::convert::observed_service("c", &svc)
        );
        assert!(crate::convert::observed_service("c", &svc).is_some());
    }

    #[test]
    fn a_service_shardgate_never_applied_is_kept_whole() {
        let svc = live_service(false);
        let cached = service(svc.clone());
        assert_eq!(
            cached,
            Service {
                metadata: ObjectMeta {
                    managed_fields: None,
                    ..svc.metadata
                },
                ..svc
            }
        );
    }

    #[test]
    fn a_cached_pod_keeps_what_the_snapshot_reads() {
        let p: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "labels": {"valkey.io/cluster": "c",
                "valkey.io/shard-index": "1", "valkey.io/node-index": "2"},
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
        let cached = pod(p.clone());
        assert!(cached.metadata.managed_fields.is_none());
        let status = cached.pod_status().unwrap();
        assert!(status.container_statuses.is_none() && status.pod_ips.is_none());
        assert!(status.phase.is_none());
        assert_eq!(status.pod_ip.as_deref(), Some("10.1.0.1"));
        assert_eq!(status.host_ip.as_deref(), Some("10.0.0.1"));
        let conditions = status.conditions.as_ref().unwrap();
        assert_eq!(conditions.len(), 1);
        assert_eq!(conditions[0].type_, "Ready");
        let observed = crate::convert::observed_pod("c", &cached).unwrap();
        assert_eq!(
            (observed.shard, observed.node, observed.ready),
            (1, 2, true)
        );
        assert_eq!(Some(observed), crate::convert::observed_pod("c", &p));
    }
}
