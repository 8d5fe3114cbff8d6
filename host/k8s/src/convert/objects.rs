//! Out of the guest: a [`Desired`] becomes the exact objects to apply, in
//! apply order: the shard Services, then per node a ConfigMap, a headless
//! Service and a StatefulSet ([`super::workload`] builds its pod template).
//! Every field the API server would default is set explicitly, so what is
//! applied equals what the server stores and a re-apply is a no-op.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{ConfigMap, Service, ServicePort, ServiceSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::{Resource, ResourceExt};
use shardgate_contract::model::{self as m, Desired};
use shardgate_contract::{labels, names};

use super::workload;
use crate::crd::ValkeyCluster;

/// The ConfigMap key holding `valkey.conf`.
pub const CONFIG_KEY: &str = "valkey.conf";
/// The server container's cluster bus port name.
pub const BUS_PORT_NAME: &str = "cluster-bus";

/// Everything to apply for one cluster, in apply order.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Objects {
    pub shard_services: Vec<Service>,
    pub nodes: Vec<NodeObjects>,
}

/// The objects of one node, all named `valkey-<cluster>-<shard>-<node>`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct NodeObjects {
    pub config_map: ConfigMap,
    pub headless_service: Service,
    pub stateful_set: StatefulSet,
}

impl Objects {
    /// Every object as JSON, shard Services first, then each node's
    /// ConfigMap, headless Service and StatefulSet.
    pub fn to_json(&self) -> Vec<serde_json::Value> {
        let mut out = Vec::with_capacity(self.shard_services.len() + 3 * self.nodes.len());
        for s in &self.shard_services {
            out.push(typed_json(s));
        }
        for n in &self.nodes {
            out.push(typed_json(&n.config_map));
            out.push(typed_json(&n.headless_service));
            out.push(typed_json(&n.stateful_set));
        }
        out
    }
}

/// A k8s-openapi object as JSON with its `apiVersion` and `kind`.
pub fn typed_json<K: Resource<DynamicType = ()> + serde::Serialize>(obj: &K) -> serde_json::Value {
    let mut v = serde_json::to_value(obj).expect("k8s objects serialize");
    if let Some(map) = v.as_object_mut() {
        map.insert("apiVersion".into(), K::api_version(&()).into());
        map.insert("kind".into(), K::kind(&()).into());
    }
    v
}

/// The objects `desired` describes for `vc`.
pub fn objects(vc: &ValkeyCluster, desired: &Desired) -> Objects {
    let owned = Owned::by(vc, desired);
    let annotations: Option<BTreeMap<String, String>> = (!desired.service_annotations.is_empty())
        .then(|| desired.service_annotations.iter().cloned().collect());
    Objects {
        shard_services: desired
            .services
            .iter()
            .map(|s| shard_service(&owned, s, annotations.clone()))
            .collect(),
        nodes: desired
            .nodes
            .iter()
            .map(|n| node_objects(&owned, n, &desired.workload))
            .collect(),
    }
}

/// What every object of one cluster shares: its namespace, its owner
/// reference to the cluster, and the labels the guest put on everything.
struct Owned {
    cluster: String,
    namespace: Option<String>,
    owner: Option<OwnerReference>,
    labels: BTreeMap<String, String>,
}

impl Owned {
    fn by(vc: &ValkeyCluster, desired: &Desired) -> Self {
        Owned {
            cluster: vc.name_any(),
            namespace: vc.namespace(),
            owner: owner_reference(vc),
            labels: desired.labels.iter().cloned().collect(),
        }
    }

    /// The common labels plus the shard's index, and the node's if given.
    fn labels(&self, shard: u32, node: Option<u32>) -> BTreeMap<String, String> {
        let mut labels = self.labels.clone();
        labels.insert(labels::SHARD.into(), shard.to_string());
        if let Some(node) = node {
            labels.insert(labels::NODE.into(), node.to_string());
        }
        labels
    }

    fn meta(&self, name: &str, labels: BTreeMap<String, String>) -> ObjectMeta {
        ObjectMeta {
            name: Some(name.to_string()),
            namespace: self.namespace.clone(),
            labels: Some(labels),
            owner_references: self.owner.clone().map(|o| vec![o]),
            ..ObjectMeta::default()
        }
    }

    /// Selects the shard's pods, or one node's.
    fn selector(&self, shard: u32, node: Option<u32>) -> BTreeMap<String, String> {
        let mut s = BTreeMap::from([
            (labels::CLUSTER.to_string(), self.cluster.clone()),
            (labels::SHARD.to_string(), shard.to_string()),
        ]);
        if let Some(node) = node {
            s.insert(labels::NODE.to_string(), node.to_string());
        }
        s
    }
}

fn shard_service(
    owned: &Owned,
    s: &m::ShardService,
    annotations: Option<BTreeMap<String, String>>,
) -> Service {
    let mut metadata = owned.meta(&s.name, owned.labels(s.shard, None));
    metadata.annotations = annotations;
    let ports = s
        .ports
        .iter()
        .map(|p| ServicePort {
            name: Some(p.name.clone()),
            port: p.port as i32,
            target_port: Some(IntOrString::String(p.name.clone())),
            protocol: Some("TCP".into()),
            node_port: (p.node_port != 0).then_some(p.node_port as i32),
            ..ServicePort::default()
        })
        .collect();
    Service {
        metadata,
        spec: Some(ServiceSpec {
            type_: Some(
                match s.service_type {
                    m::ServiceType::NodePort => "NodePort",
                    m::ServiceType::LoadBalancer => "LoadBalancer",
                }
                .into(),
            ),
            external_traffic_policy: Some(
                match s.external_traffic_policy {
                    m::TrafficPolicy::Cluster => "Cluster",
                    m::TrafficPolicy::Local => "Local",
                }
                .into(),
            ),
            selector: Some(owned.selector(s.shard, None)),
            ports: Some(ports),
            ..ServiceSpec::default()
        }),
        status: None,
    }
}

fn node_objects(owned: &Owned, n: &m::Node, w: &m::Workload) -> NodeObjects {
    let labels = owned.labels(n.shard, Some(n.node));
    let selector = owned.selector(n.shard, Some(n.node));
    NodeObjects {
        config_map: ConfigMap {
            metadata: owned.meta(&n.name, labels.clone()),
            data: Some(BTreeMap::from([(CONFIG_KEY.to_string(), n.config.clone())])),
            ..ConfigMap::default()
        },
        headless_service: Service {
            metadata: owned.meta(&n.name, labels.clone()),
            spec: Some(ServiceSpec {
                cluster_ip: Some("None".into()),
                publish_not_ready_addresses: Some(true),
                selector: Some(selector.clone()),
                ports: Some(vec![
                    service_port(&n.port_name, names::CLIENT_PORT),
                    service_port(BUS_PORT_NAME, names::BUS_PORT),
                ]),
                ..ServiceSpec::default()
            }),
            status: None,
        },
        stateful_set: workload::stateful_set(owned.meta(&n.name, labels.clone()), labels, selector, n, w),
    }
}

fn service_port(name: &str, port: u32) -> ServicePort {
    ServicePort {
        name: Some(name.to_string()),
        port: port as i32,
        target_port: Some(IntOrString::Int(port as i32)),
        protocol: Some("TCP".into()),
        ..ServicePort::default()
    }
}

fn owner_reference(vc: &ValkeyCluster) -> Option<OwnerReference> {
    let uid = vc.uid()?;
    Some(OwnerReference {
        api_version: ValkeyCluster::api_version(&()).into_owned(),
        kind: ValkeyCluster::kind(&()).into_owned(),
        name: vc.name_any(),
        uid,
        controller: Some(true),
        block_owner_deletion: Some(true),
    })
}
