//! Into the guest: a [`ValkeyCluster`] and the Services and Pods it owns
//! become an [`Input`] of indices and integers. Each object is read through
//! a view ([`ServiceView`], [`PodView`]) that both a whole `k8s-openapi`
//! object and the operator's cache entry implement, so `render` and the
//! operator project objects with the same code.

use std::collections::BTreeMap;
use std::net::IpAddr;

use k8s_openapi::api::core::v1::{LoadBalancerIngress, Pod, Service};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::ResourceExt;
use shardgate_contract::model::{self as m, Input, Pair};
use shardgate_contract::{labels, names};

use crate::crd::{
    DisruptionBudgetMode, EndpointType, HostnameScope, NodeAddressType, NodePortsSpec,
    ReclaimPolicy, ServiceTopology, ServiceType, SpreadSpec, Strength, TrafficPolicy,
    ValkeyCluster,
};

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
            service_type: match ea.service_type() {
                ServiceType::NodePort => m::ServiceType::NodePort,
                ServiceType::LoadBalancer => m::ServiceType::LoadBalancer,
                ServiceType::ClusterIp => m::ServiceType::ClusterIp,
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
            hostname_scope: match ea.hostname_scope {
                HostnameScope::Shard => m::HostnameScope::Shard,
                HostnameScope::Node => m::HostnameScope::Node,
            },
            topology: match ea.topology {
                ServiceTopology::PerShard => m::ServiceTopology::PerShard,
                ServiceTopology::PerNode => m::ServiceTopology::PerNode,
            },
            node_address_type: match ea.node_address_type {
                NodeAddressType::InternalIp => m::NodeAddressType::InternalIp,
                NodeAddressType::ExternalIp => m::NodeAddressType::ExternalIp,
            },
            node_ports: ea.node_ports.as_ref().map(node_ports),
            load_balancer_source_ranges: ea.load_balancer_source_ranges.clone(),
            load_balancer_class: ea.load_balancer_class.clone(),
            allocate_load_balancer_node_ports: ea.allocate_load_balancer_node_ports,
            external_dns: ea.external_dns,
            // A negative base port crosses as 0, which validation refuses.
            gateway: ea.gateway.as_ref().map(|g| m::Gateway {
                name: g.gateway_ref.name.clone(),
                section_name: g.gateway_ref.section_name.clone(),
                base_port: u32::try_from(g.base_port).unwrap_or(0),
            }),
        }),
        users: spec.users.iter().map(user).collect(),
        config: spec
            .config
            .iter()
            .map(|(k, v)| {
                let v = match v {
                    IntOrString::Int(i) => i.to_string(),
                    IntOrString::String(s) => s.clone(),
                };
                (k.clone(), v)
            })
            .collect(),
        persistence: spec.persistence.as_ref().map(|p| m::Persistence {
            size: p.size.clone(),
            storage_class_name: p.storage_class_name.clone(),
            reclaim_policy: match p.reclaim_policy {
                ReclaimPolicy::Retain => m::ReclaimPolicy::Retain,
                ReclaimPolicy::Delete => m::ReclaimPolicy::Delete,
            },
        }),
        disruption_budget: spec
            .pod_disruption_budget
            .as_ref()
            .is_none_or(|p| p.mode == DisruptionBudgetMode::Cluster),
        scheduling: {
            let s = spec.scheduling.clone().unwrap_or_default();
            m::Scheduling {
                node: spread_set(&s.node),
                zone: spread_set(&s.zone),
            }
        },
    }
}

fn spread_set(s: &SpreadSpec) -> m::SpreadSet {
    let strength = |s: Strength| match s {
        Strength::Disabled => m::Strength::Disabled,
        Strength::Preferred => m::Strength::Preferred,
        Strength::Required => m::Strength::Required,
    };
    m::SpreadSet {
        shard: strength(s.shard),
        primaries: strength(s.primaries),
        pods: strength(s.pods),
    }
}

/// A `spec.users` entry without its password digests (the operator adds
/// them from the Secrets, [`crate::credentials`]).
fn user(u: &crate::crd::UserSpec) -> m::User {
    m::User {
        name: u.name.clone(),
        enabled: u.enabled,
        password_secret: u.password_secret.as_ref().map(|p| m::PasswordSecret {
            name: p.name.clone().unwrap_or_default(),
            keys: p.keys.clone(),
        }),
        password_hashes: Vec::new(),
        nopass: u.nopass,
        resetpass: u.resetpass,
        commands_allow: u.commands.iter().flat_map(|c| c.allow.clone()).collect(),
        commands_deny: u.commands.iter().flat_map(|c| c.deny.clone()).collect(),
        keys: u.keys.as_ref().map(|k| m::KeyPatterns {
            read_write: k.read_write.clone(),
            read_only: k.read_only.clone(),
            write_only: k.write_only.clone(),
        }),
        channels: u.channels.iter().flat_map(|c| c.patterns.clone()).collect(),
        permissions: u.permissions.clone(),
    }
}

fn quantities(q: Option<&BTreeMap<String, Quantity>>) -> Vec<Pair> {
    q.into_iter()
        .flatten()
        .map(|(k, v)| (k.clone(), v.0.clone()))
        .collect()
}

/// `spec.externalAccess.nodePorts` as the guest reads it. A negative port
/// becomes 0, which validation refuses by field.
fn node_ports(p: &NodePortsSpec) -> m::NodePorts {
    m::NodePorts {
        base: p.base.map(|b| u32::try_from(b).unwrap_or(0)),
        ports: p
            .ports
            .iter()
            .map(|row| row.iter().map(|&n| u32::try_from(n).unwrap_or(0)).collect())
            .collect(),
    }
}

/// The NodePorts the clusters other than `namespace/name` pin (in every
/// namespace: NodePorts are shared by the whole Kubernetes cluster). Only
/// clusters with external access on and pins are looked at closely.
pub fn pinned_elsewhere<'a>(
    clusters: impl Iterator<Item = &'a ValkeyCluster>,
    namespace: &str,
    name: &str,
) -> Vec<m::PinnedPort> {
    let mut out = Vec::new();
    for c in clusters {
        let Some(pins) = c
            .spec
            .external_access
            .as_ref()
            .filter(|ea| ea.enabled)
            .and_then(|ea| ea.node_ports.as_ref())
        else {
            continue;
        };
        let (ns, n) = (
            c.metadata.namespace.as_deref().unwrap_or_default(),
            c.name_any(),
        );
        if ns == namespace && n == name {
            continue;
        }
        let shards = c.spec.shards.clamp(0, 1 << 16) as u32;
        let nodes = c.spec.replicas.clamp(0, 1 << 16) as u32 + 1;
        let cluster = format!("{ns}/{n}");
        for (_, _, port) in shardgate_contract::ports::every_pin(&node_ports(pins), shards, nodes) {
            out.push(m::PinnedPort {
                port,
                cluster: cluster.clone(),
            });
        }
    }
    out
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
        credentials: m::Credentials::default(),
        observed: m::Observed {
            services: services
                .into_iter()
                .filter_map(|s| observed_service(&name, s))
                .collect(),
            pods: pods
                .into_iter()
                .filter_map(|p| observed_pod(&name, p))
                .collect(),
            gateway: None,
            valkey: None,
        },
        other_clusters,
        pinned_elsewhere: Vec::new(),
    }
}

/// An object's labels, however it is held: a `k8s-openapi` object's label
/// map, or the few labels the operator's cache keeps (`operator::cached`).
pub trait Labelled {
    /// The value of label `key`, if the object has it.
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
    /// The Service's name.
    fn service_name(&self) -> &str;
    /// Each port's name and NodePort.
    fn ports(&self) -> impl Iterator<Item = (Option<&str>, Option<i32>)>;
    /// `status.loadBalancer.ingress`; empty if none.
    fn ingress(&self) -> &[LoadBalancerIngress];
}

impl ServiceView for Service {
    fn service_name(&self) -> &str {
        self.metadata.name.as_deref().unwrap_or_default()
    }
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
    if !belongs_to(svc, cluster) {
        return None;
    }
    // By name, never by label alone: a relabelled Service must not feed its
    // NodePorts into another shard's. A node's headless Service has the
    // node label but neither name.
    let name = svc.service_name();
    let (shard, node) = match names::parse_node_service(cluster, name) {
        Some((shard, node)) => (shard, Some(node)),
        None => (names::parse_shard_service(cluster, name)?, None),
    };
    if label_index(svc, labels::SHARD) != Some(shard) || label_index(svc, labels::NODE) != node {
        return None;
    }
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
        node,
        ports,
        ingress,
    })
}

/// What the snapshot reads of a Pod: its labels, IPs and readiness. The
/// operator's cache keeps only these (`operator::cached`).
pub trait PodView: Labelled {
    /// `status.hostIP`, once scheduled.
    fn host_ip(&self) -> Option<&str>;
    /// `status.podIP`, once assigned.
    fn pod_ip(&self) -> Option<&str>;
    /// `spec.nodeName`: the Kubernetes node it is bound to.
    fn node_name(&self) -> Option<&str>;
    /// Its `Ready` condition is `True`.
    fn ready(&self) -> bool;
}

impl PodView for Pod {
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

/// A node's Pod: indices from its labels, host IP, readiness.
pub fn observed_pod(cluster: &str, pod: &impl PodView) -> Option<m::ObservedPod> {
    if !belongs_to(pod, cluster) {
        return None;
    }
    Some(m::ObservedPod {
        shard: label_index(pod, labels::SHARD)?,
        node: label_index(pod, labels::NODE)?,
        host_ip: pod.host_ip().and_then(parse_ip),
        // Set by the operator, which knows the Kubernetes nodes.
        node_external_ip: None,
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn service(
        labels: serde_json::Value,
        ports: serde_json::Value,
        ingress: serde_json::Value,
    ) -> Service {
        // Named as the labels say, unless a test renames it.
        let name = labels[labels::SHARD]
            .as_str()
            .and_then(names::parse_index)
            .map_or("s".to_string(), |s| names::shard_service("c", s));
        serde_json::from_value(json!({
            "metadata": {"name": name, "labels": labels},
            "spec": {"ports": ports},
            "status": {"loadBalancer": {"ingress": ingress}},
        }))
        .unwrap()
    }

    #[test]
    fn the_spec_crosses_with_its_enums_and_quantities() {
        let vc: ValkeyCluster = serde_json::from_value(json!({
            "apiVersion": "shardgate.io/v1alpha1", "kind": "ValkeyCluster",
            "metadata": {"name": "c", "namespace": "ns"},
            "spec": {"shards": 2, "replicas": 1, "image": "i",
                "resources": {"requests": {"memory": "1Gi", "cpu": "500m"}},
                "tls": {"secretName": "t"},
                "externalAccess": {"enabled": true, "serviceType": "LoadBalancer",
                    "externalTrafficPolicy": "Local", "preferredEndpointType": "hostname",
                    "domain": "d.example", "serviceAnnotations": {"b": "2", "a": "1"}}},
        }))
        .unwrap();
        let c = cluster(&vc);
        assert_eq!(
            (c.name.as_str(), c.namespace.as_str(), c.shards, c.replicas),
            ("c", "ns", 2, 1)
        );
        assert_eq!(c.image.as_deref(), Some("i"));
        assert_eq!(c.tls.as_deref(), Some("t"));
        let r = c.resources.unwrap();
        assert_eq!(
            r.requests,
            [
                ("cpu".to_string(), "500m".to_string()),
                ("memory".into(), "1Gi".into())
            ]
        );
        assert!(r.limits.is_empty());
        let ea = c.external_access.unwrap();
        assert_eq!(ea.service_type, m::ServiceType::LoadBalancer);
        assert_eq!(ea.external_traffic_policy, m::TrafficPolicy::Local);
        assert_eq!(ea.preferred_endpoint_type, m::EndpointType::Hostname);
        assert_eq!(ea.hostname_prefix, names::DEFAULT_HOSTNAME_PREFIX);
        assert_eq!(
            ea.service_annotations,
            [("a".into(), "1".into()), ("b".into(), "2".into())]
        );
    }

    #[test]
    fn shard_services_are_read_by_name_and_port_name() {
        let shard = |s: &str| json!({labels::CLUSTER: "c", labels::SHARD: s});
        let cases = [
            (
                "ports by name, others ignored; NodePort 0 when none",
                service(
                    shard("1"),
                    json!([{"name": "vk-n1", "port": 6380, "nodePort": 30001},
                           {"name": "vk-n0", "port": 6379},
                           {"name": "metrics", "port": 9121, "nodePort": 30009}]),
                    json!([]),
                ),
                Some((1, vec![(1, 30001), (0, 0)], 0)),
            ),
            (
                "ingress IPs and hostnames; empty ones dropped",
                service(
                    shard("0"),
                    json!([]),
                    json!([{"ip": "192.0.2.7"}, {"hostname": "lb.example"}, {"hostname": ""}, {"ip": "junk"}]),
                ),
                Some((0, vec![], 2)),
            ),
            (
                "another cluster's",
                service(
                    json!({labels::CLUSTER: "d", labels::SHARD: "0"}),
                    json!([]),
                    json!([]),
                ),
                None,
            ),
            (
                "a node's headless Service",
                service(
                    json!({labels::CLUSTER: "c", labels::SHARD: "0", labels::NODE: "0"}),
                    json!([]),
                    json!([]),
                ),
                None,
            ),
            (
                "relabelled: the label names another shard than the name",
                {
                    let mut s = service(shard("1"), json!([]), json!([]));
                    s.metadata.name = Some(names::shard_service("c", 0));
                    s
                },
                None,
            ),
            (
                "not named as a shard Service",
                {
                    let mut s = service(shard("1"), json!([]), json!([]));
                    s.metadata.name = Some("hand-made".into());
                    s
                },
                None,
            ),
            (
                "no shard index",
                service(
                    json!({labels::CLUSTER: "c", labels::SHARD: "x"}),
                    json!([]),
                    json!([]),
                ),
                None,
            ),
        ];
        for (case, svc, want) in cases {
            let got = observed_service("c", &svc).map(|o| {
                let ports: Vec<(u32, u32)> =
                    o.ports.iter().map(|p| (p.node, p.node_port)).collect();
                (o.shard, ports, o.ingress.len())
            });
            assert_eq!(got, want, "{case}");
            if let Some(o) = observed_service("c", &svc) {
                assert_eq!(o.node, None, "{case}: a shard's Service");
            }
        }
    }

    #[test]
    fn pins_elsewhere_are_every_other_clusters_in_any_namespace() {
        let vc = |ns: &str, name: &str, ea: serde_json::Value| -> ValkeyCluster {
            serde_json::from_value(json!({
                "apiVersion": "shardgate.io/v1alpha1", "kind": "ValkeyCluster",
                "metadata": {"name": name, "namespace": ns},
                "spec": {"shards": 1, "replicas": 1, "externalAccess": ea},
            }))
            .unwrap()
        };
        let all = [
            vc(
                "a",
                "me",
                json!({"enabled": true, "nodePorts": {"base": 30000}}),
            ),
            vc(
                "b",
                "me",
                json!({"enabled": true, "nodePorts": {"base": 30010}}),
            ),
            vc(
                "a",
                "list",
                json!({"enabled": true, "nodePorts": {"ports": [[30020]]}}),
            ),
            vc(
                "a",
                "off",
                json!({"enabled": false, "nodePorts": {"base": 30030}}),
            ),
            vc("a", "unpinned", json!({"enabled": true})),
        ];
        let got: Vec<(u32, String)> = pinned_elsewhere(all.iter(), "a", "me")
            .into_iter()
            .map(|p| (p.port, p.cluster))
            .collect();
        assert_eq!(
            got,
            [
                (30010, "b/me".to_string()),
                (30011, "b/me".to_string()),
                (30020, "a/list".to_string()),
            ]
        );
    }

    #[test]
    fn a_nodes_own_service_is_read_by_name_and_both_labels() {
        let named = |name: String, labels: serde_json::Value| -> Service {
            serde_json::from_value(json!({
                "metadata": {"name": name, "labels": labels},
                "spec": {"ports": [{"name": "vk-n1", "port": 6379, "nodePort": 31011}]},
                "status": {"loadBalancer": {"ingress": [{"ip": "192.0.2.9"}]}},
            }))
            .unwrap()
        };
        let labelled =
            |s: &str, n: &str| json!({labels::CLUSTER: "c", labels::SHARD: s, labels::NODE: n});
        let ours = named(names::node_service("c", 2, 1), labelled("2", "1"));
        let o = observed_service("c", &ours).expect("a node's own Service");
        assert_eq!((o.shard, o.node), (2, Some(1)));
        assert_eq!((o.ports[0].node, o.ports[0].node_port), (1, 31011));
        assert_eq!(o.ingress.len(), 1);
        for (case, svc) in [
            (
                "node label names another node",
                named(names::node_service("c", 2, 1), labelled("2", "0")),
            ),
            (
                "no node label",
                named(
                    names::node_service("c", 2, 1),
                    json!({labels::CLUSTER: "c", labels::SHARD: "2"}),
                ),
            ),
            (
                "the headless Service's name",
                named(names::node_object("c", 2, 1), labelled("2", "1")),
            ),
            (
                "another cluster's",
                named(names::node_service("d", 2, 1), labelled("2", "1")),
            ),
        ] {
            assert!(observed_service("c", &svc).is_none(), "{case}");
        }
    }

    #[test]
    fn pods_are_read_by_their_indices() {
        let pod = |labels: serde_json::Value, host: Option<&str>, ready: &str| -> Pod {
            serde_json::from_value(json!({
                "metadata": {"name": "p", "labels": labels},
                "status": {"hostIP": host, "conditions": [{"type": "Ready", "status": ready}]},
            }))
            .unwrap()
        };
        let ours =
            |s: &str, n: &str| json!({labels::CLUSTER: "c", labels::SHARD: s, labels::NODE: n});
        for (case, p, want) in [
            (
                "ready with a host",
                pod(ours("2", "1"), Some("10.0.0.1"), "True"),
                Some((2, 1, true, true)),
            ),
            (
                "not ready, unscheduled",
                pod(ours("0", "0"), None, "False"),
                Some((0, 0, false, false)),
            ),
            (
                "no node index",
                pod(
                    json!({labels::CLUSTER: "c", labels::SHARD: "0"}),
                    None,
                    "True",
                ),
                None,
            ),
            (
                "another cluster's",
                pod(
                    json!({labels::CLUSTER: "x", labels::SHARD: "0", labels::NODE: "0"}),
                    None,
                    "True",
                ),
                None,
            ),
        ] {
            let got =
                observed_pod("c", &p).map(|o| (o.shard, o.node, o.ready, o.host_ip.is_some()));
            assert_eq!(got, want, "{case}");
        }
    }

    #[test]
    fn addresses_cross_as_integers() {
        for (text, want) in [
            ("192.0.2.1", Some(m::IpAddress::V4(0xc000_0201))),
            ("::1", Some(m::IpAddress::V6((0, 1)))),
            (
                "2001:db8::",
                Some(m::IpAddress::V6((0x2001_0db8_0000_0000, 0))),
            ),
            ("", None),
            ("host.example", None),
        ] {
            assert_eq!(parse_ip(text), want, "{text}");
        }
    }
}
