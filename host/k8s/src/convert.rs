//! Conversion between Kubernetes objects and the guest's records: the only
//! place that knows both shapes.
//!
//! Into the guest: a [`ValkeyCluster`] and the Services and Pods it owns
//! become an [`Input`] of indices and integers. Out of the guest: a
//! [`Desired`] becomes the exact objects to apply (shard Services, and per
//! node a ConfigMap, a headless Service and a StatefulSet); its status part
//! becomes the cluster's status in [`crate::status`].
//! Every field the API server would default is set explicitly, so what we
//! apply equals what the server stores and a re-apply is a no-op.

use std::collections::BTreeMap;
use std::net::IpAddr;

use k8s_openapi::api::apps::v1::{StatefulSet, StatefulSetSpec, StatefulSetUpdateStrategy};
use k8s_openapi::api::core::v1::{
    Capabilities, ConfigMap, ConfigMapVolumeSource, Container, ContainerPort, EmptyDirVolumeSource,
    EnvVar, EnvVarSource, LoadBalancerIngress, ObjectFieldSelector, Pod, PodSecurityContext,
    PodSpec, PodTemplateSpec, Probe, ResourceRequirements, SeccompProfile, SecretVolumeSource,
    SecurityContext, Service, ServicePort, ServiceSpec, TCPSocketAction, Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, OwnerReference};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::{Resource, ResourceExt};
use shardgate_contract::model::{self as m, Desired, Input, Pair};
use shardgate_contract::{labels, names};

use crate::crd::{EndpointType, ServiceType, TrafficPolicy, ValkeyCluster};

// ---- into the guest -------------------------------------------------------

/// The guest's view of a cluster's spec.
pub fn cluster(vc: &ValkeyCluster) -> m::Cluster {
    let spec = &vc.spec;
    m::Cluster {
        name: vc.name_any(),
        namespace: vc.namespace().unwrap_or_default(),
        shards: spec.shards,
        replicas: spec.replicas,
        image: spec.image.clone(),
        resources: spec.resources.as_ref().map(|r| m::Resources {
            requests: quantities(r.requests.as_ref()),
            limits: quantities(r.limits.as_ref()),
        }),
        tls: spec.tls.as_ref().map(|t| t.secret_name.clone()),
        external_access: spec.external_access.as_ref().map(|ea| m::ExternalAccess {
            enabled: ea.enabled,
            service_type: match ea.service_type {
                ServiceType::NodePort => m::ServiceType::NodePort,
                ServiceType::LoadBalancer => m::ServiceType::LoadBalancer,
            },
            external_traffic_policy: match ea.external_traffic_policy {
                TrafficPolicy::Cluster => m::TrafficPolicy::Cluster,
                TrafficPolicy::Local => m::TrafficPolicy::Local,
            },
            service_annotations: ea
                .service_annotations
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
            hostname_prefix: ea.hostname_prefix.clone(),
            domain: ea.domain.clone(),
            preferred_endpoint_type: match ea.preferred_endpoint_type {
                EndpointType::Ip => m::EndpointType::Ip,
                EndpointType::Hostname => m::EndpointType::Hostname,
            },
        }),
    }
}

fn quantities(q: Option<&BTreeMap<String, Quantity>>) -> Vec<Pair> {
    q.into_iter()
        .flatten()
        .map(|(k, v)| (k.clone(), v.0.clone()))
        .collect()
}

/// The guest's input: the cluster, the objects it owns, and the names of the
/// other clusters in its namespace.
pub fn input<'a, S: ServiceView + 'a, P: PodView + 'a>(
    vc: &ValkeyCluster,
    services: impl IntoIterator<Item = &'a S>,
    pods: impl IntoIterator<Item = &'a P>,
    other_clusters: Vec<String>,
) -> Input {
    let name = vc.name_any();
    Input {
        cluster: cluster(vc),
        observed: m::Observed {
            services: services
                .into_iter()
                .filter_map(|s| observed_service(&name, s))
                .collect(),
            pods: pods
                .into_iter()
                .filter_map(|p| observed_pod(&name, p))
                .collect(),
            valkey: None,
        },
        other_clusters,
    }
}

/// An object's labels, however it is held: a `k8s-openapi` object's label
/// map, or the few labels the operator's cache keeps (`operator::cached`).
pub trait Labelled {
    fn label(&self, key: &str) -> Option<&str>;
}

macro_rules! labelled_by_metadata {
    ($($k:ty),*) => {$(
        impl Labelled for $k {
            fn label(&self, key: &str) -> Option<&str> {
                self.metadata.labels.as_ref()?.get(key).map(String::as_str)
            }
        }
    )*};
}
labelled_by_metadata!(Pod, Service);

fn label_index(o: &impl Labelled, key: &str) -> Option<u32> {
    o.label(key)?.parse().ok()
}

fn belongs_to(o: &impl Labelled, cluster: &str) -> bool {
    o.label(labels::CLUSTER) == Some(cluster)
}

/// What the snapshot reads of a Service: its labels, its ports and its
/// load balancer's ingress.
pub trait ServiceView: Labelled {
    /// Each port's name and NodePort.
    fn ports(&self) -> impl Iterator<Item = (Option<&str>, Option<i32>)>;
    fn ingress(&self) -> &[LoadBalancerIngress];
}

impl ServiceView for Service {
    fn ports(&self) -> impl Iterator<Item = (Option<&str>, Option<i32>)> {
        self.spec
            .as_ref()
            .and_then(|s| s.ports.as_deref())
            .unwrap_or_default()
            .iter()
            .map(|p| (p.name.as_deref(), p.node_port))
    }
    fn ingress(&self) -> &[LoadBalancerIngress] {
        self.status
            .as_ref()
            .and_then(|s| s.load_balancer.as_ref())
            .and_then(|lb| lb.ingress.as_deref())
            .unwrap_or_default()
    }
}

/// A shard Service of `cluster`: it carries the cluster and shard labels and
/// no node label (node headless Services carry one). Its ports are matched
/// by name (`vk-n<i>`); others are ignored.
pub fn observed_service(cluster: &str, svc: &impl ServiceView) -> Option<m::ObservedService> {
    if !belongs_to(svc, cluster) || label_index(svc, labels::NODE).is_some() {
        return None;
    }
    let shard = label_index(svc, labels::SHARD)?;
    let ports = svc
        .ports()
        .filter_map(|(name, node_port)| {
            Some(m::ObservedPort {
                node: names::parse_port_name(name?)?,
                node_port: node_port.and_then(|n| u32::try_from(n).ok()).unwrap_or(0),
            })
        })
        .collect();
    let ingress = svc
        .ingress()
        .iter()
        .filter_map(|i| {
            if let Some(ip) = i.ip.as_deref().and_then(parse_ip) {
                Some(m::Ingress::Ip(ip))
            } else {
                i.hostname
                    .clone()
                    .filter(|h| !h.is_empty())
                    .map(m::Ingress::Hostname)
            }
        })
        .collect();
    Some(m::ObservedService {
        shard,
        ports,
        ingress,
    })
}

/// What the snapshot reads of a Pod: its labels, IPs and readiness. The
/// operator's cache keeps only these (`operator::cached`).
pub trait PodView: Labelled {
    fn host_ip(&self) -> Option<&str>;
    fn pod_ip(&self) -> Option<&str>;
    /// Its `Ready` condition is `True`.
    fn ready(&self) -> bool;
}

impl PodView for Pod {
    fn host_ip(&self) -> Option<&str> {
        self.status.as_ref()?.host_ip.as_deref()
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

/// A node's Pod: indices from its labels, host IP, readiness.
pub fn observed_pod(cluster: &str, pod: &impl PodView) -> Option<m::ObservedPod> {
    if !belongs_to(pod, cluster) {
        return None;
    }
    Some(m::ObservedPod {
        shard: label_index(pod, labels::SHARD)?,
        node: label_index(pod, labels::NODE)?,
        host_ip: pod.host_ip().and_then(parse_ip),
        ready: pod.ready(),
        // Set by the operator, which knows the StatefulSet's revision.
        outdated: false,
    })
}

/// An IP address as the guest takes it.
pub fn parse_ip(s: &str) -> Option<m::IpAddress> {
    match s.parse::<IpAddr>().ok()? {
        IpAddr::V4(v4) => Some(m::IpAddress::V4(u32::from(v4))),
        IpAddr::V6(v6) => {
            let bits = u128::from(v6);
            Some(m::IpAddress::V6(((bits >> 64) as u64, bits as u64)))
        }
    }
}

// ---- out of the guest -----------------------------------------------------

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
    let namespace = vc.namespace();
    let owner = owner_reference(vc);
    let base_labels: BTreeMap<String, String> = desired.labels.iter().cloned().collect();
    let cluster_name = vc.name_any();
    let meta = |name: &str, labels: BTreeMap<String, String>| ObjectMeta {
        name: Some(name.to_string()),
        namespace: namespace.clone(),
        labels: Some(labels),
        owner_references: owner.clone().map(|o| vec![o]),
        ..ObjectMeta::default()
    };
    let annotations: Option<BTreeMap<String, String>> = (!desired.service_annotations.is_empty())
        .then(|| desired.service_annotations.iter().cloned().collect());

    let shard_services = desired
        .services
        .iter()
        .map(|s| {
            let mut labels = base_labels.clone();
            labels.insert(labels::SHARD.into(), s.shard.to_string());
            let mut metadata = meta(&s.name, labels);
            metadata.annotations = annotations.clone();
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
                    selector: Some(selector(&cluster_name, s.shard, None)),
                    ports: Some(
                        s.ports
                            .iter()
                            .map(|p| ServicePort {
                                name: Some(p.name.clone()),
                                port: p.port as i32,
                                target_port: Some(IntOrString::String(p.name.clone())),
                                protocol: Some("TCP".into()),
                                node_port: (p.node_port != 0).then_some(p.node_port as i32),
                                ..ServicePort::default()
                            })
                            .collect(),
                    ),
                    ..ServiceSpec::default()
                }),
                status: None,
            }
        })
        .collect();

    let nodes = desired
        .nodes
        .iter()
        .map(|n| {
            let mut labels = base_labels.clone();
            labels.insert(labels::SHARD.into(), n.shard.to_string());
            labels.insert(labels::NODE.into(), n.node.to_string());
            let selector = selector(&cluster_name, n.shard, Some(n.node));
            NodeObjects {
                config_map: ConfigMap {
                    metadata: meta(&n.name, labels.clone()),
                    data: Some(BTreeMap::from([(CONFIG_KEY.to_string(), n.config.clone())])),
                    ..ConfigMap::default()
                },
                headless_service: Service {
                    metadata: meta(&n.name, labels.clone()),
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
                stateful_set: stateful_set(
                    meta(&n.name, labels.clone()),
                    labels,
                    selector,
                    n,
                    desired,
                ),
            }
        })
        .collect();

    Objects {
        shard_services,
        nodes,
    }
}

/// The ConfigMap key holding `valkey.conf`.
pub const CONFIG_KEY: &str = "valkey.conf";
/// The server container's cluster bus port name.
pub const BUS_PORT_NAME: &str = "cluster-bus";
/// The server container's name.
pub const SERVER_CONTAINER: &str = "server";
/// The uid and gid of the `valkey` user in the official image.
const VALKEY_UID: i64 = 999;

fn service_port(name: &str, port: u32) -> ServicePort {
    ServicePort {
        name: Some(name.to_string()),
        port: port as i32,
        target_port: Some(IntOrString::Int(port as i32)),
        protocol: Some("TCP".into()),
        ..ServicePort::default()
    }
}

fn selector(cluster: &str, shard: u32, node: Option<u32>) -> BTreeMap<String, String> {
    let mut s = BTreeMap::from([
        (labels::CLUSTER.to_string(), cluster.to_string()),
        (labels::SHARD.to_string(), shard.to_string()),
    ]);
    if let Some(node) = node {
        s.insert(labels::NODE.to_string(), node.to_string());
    }
    s
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

fn stateful_set(
    metadata: ObjectMeta,
    pod_labels: BTreeMap<String, String>,
    selector: BTreeMap<String, String>,
    node: &m::Node,
    desired: &Desired,
) -> StatefulSet {
    let w = &desired.workload;
    let field_env = |name: &str, path: &str| EnvVar {
        name: name.into(),
        value_from: Some(EnvVarSource {
            // The API server defaults `apiVersion` inside this atomic
            // struct; set, it stays what shardgate applied (see
            // `operator::owned_fields`).
            field_ref: Some(ObjectFieldSelector {
                api_version: Some("v1".into()),
                field_path: path.into(),
            }),
            ..EnvVarSource::default()
        }),
        ..EnvVar::default()
    };
    let mut mounts = vec![
        VolumeMount {
            name: "config".into(),
            mount_path: "/etc/valkey".into(),
            read_only: Some(true),
            ..VolumeMount::default()
        },
        VolumeMount {
            name: "data".into(),
            mount_path: shardgate_contract::paths::DATA_DIR.into(),
            ..VolumeMount::default()
        },
    ];
    let mut volumes = vec![
        Volume {
            name: "config".into(),
            config_map: Some(ConfigMapVolumeSource {
                name: node.name.clone(),
                ..ConfigMapVolumeSource::default()
            }),
            ..Volume::default()
        },
        Volume {
            name: "data".into(),
            empty_dir: Some(EmptyDirVolumeSource::default()),
            ..Volume::default()
        },
    ];
    if let Some(secret) = &w.tls_secret {
        mounts.push(VolumeMount {
            name: "tls".into(),
            mount_path: shardgate_contract::paths::TLS_DIR.into(),
            read_only: Some(true),
            ..VolumeMount::default()
        });
        volumes.push(Volume {
            name: "tls".into(),
            secret: Some(SecretVolumeSource {
                secret_name: Some(secret.clone()),
                ..SecretVolumeSource::default()
            }),
            ..Volume::default()
        });
    }
    let container = Container {
        name: SERVER_CONTAINER.into(),
        image: Some(w.image.clone()),
        command: Some(w.command.clone()),
        env: Some(vec![
            field_env("POD_IP", "status.podIP"),
            field_env("HOST_IP", "status.hostIP"),
        ]),
        ports: Some(vec![
            ContainerPort {
                name: Some(node.port_name.clone()),
                container_port: names::CLIENT_PORT as i32,
                protocol: Some("TCP".into()),
                ..ContainerPort::default()
            },
            ContainerPort {
                name: Some(BUS_PORT_NAME.into()),
                container_port: names::BUS_PORT as i32,
                protocol: Some("TCP".into()),
                ..ContainerPort::default()
            },
        ]),
        resources: w.resources.as_ref().map(|r| ResourceRequirements {
            requests: quantity_map(&r.requests),
            limits: quantity_map(&r.limits),
            ..ResourceRequirements::default()
        }),
        readiness_probe: Some(Probe {
            tcp_socket: Some(TCPSocketAction {
                port: IntOrString::Int(names::CLIENT_PORT as i32),
                ..TCPSocketAction::default()
            }),
            period_seconds: Some(5),
            ..Probe::default()
        }),
        security_context: Some(SecurityContext {
            allow_privilege_escalation: Some(false),
            read_only_root_filesystem: Some(true),
            run_as_non_root: Some(true),
            capabilities: Some(Capabilities {
                drop: Some(vec!["ALL".into()]),
                ..Capabilities::default()
            }),
            ..SecurityContext::default()
        }),
        volume_mounts: Some(mounts),
        ..Container::default()
    };
    StatefulSet {
        metadata,
        spec: StatefulSetSpec {
            replicas: Some(1),
            service_name: Some(node.name.clone()),
            selector: LabelSelector {
                match_labels: Some(selector),
                ..LabelSelector::default()
            },
            update_strategy: Some(StatefulSetUpdateStrategy {
                type_: Some("OnDelete".into()),
                ..StatefulSetUpdateStrategy::default()
            }),
            pod_management_policy: Some("Parallel".into()),
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(pod_labels),
                    ..ObjectMeta::default()
                }),
                spec: Some(PodSpec {
                    containers: vec![container],
                    volumes: Some(volumes),
                    security_context: Some(PodSecurityContext {
                        run_as_user: Some(VALKEY_UID),
                        run_as_group: Some(VALKEY_UID),
                        fs_group: Some(VALKEY_UID),
                        run_as_non_root: Some(true),
                        seccomp_profile: Some(SeccompProfile {
                            type_: "RuntimeDefault".into(),
                            ..SeccompProfile::default()
                        }),
                        ..PodSecurityContext::default()
                    }),
                    ..PodSpec::default()
                }),
            },
            ..StatefulSetSpec::default()
        },
        status: None,
    }
}

fn quantity_map(pairs: &[Pair]) -> Option<BTreeMap<String, Quantity>> {
    (!pairs.is_empty()).then(|| {
        pairs
            .iter()
            .map(|(k, v)| (k.clone(), Quantity(v.clone())))
            .collect()
    })
}
