//! Into the guest: a [`ValkeyCluster`] and the Services and Pods it owns
//! become an [`Input`] of indices and integers. Each object is read through
//! a view ([`ServiceView`], [`PodView`]) that both a whole `k8s-openapi`
//! object and the operator's cache entry implement, so `render` and the
//! operator project objects with the same code.

use std::collections::BTreeMap;
use std::net::IpAddr;

use k8s_openapi::api::core::v1::{LoadBalancerIngress, Pod, Service};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::ResourceExt;
use shardgate_contract::model::{self as m, Input, Pair};
use shardgate_contract::{labels, names};

use crate::crd::{EndpointType, ServiceType, TrafficPolicy, ValkeyCluster};

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
