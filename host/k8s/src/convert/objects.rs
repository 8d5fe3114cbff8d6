//! Out of the guest: a [`Desired`] becomes the exact objects to apply, in
//! apply order: the shard Services, then per node a ConfigMap, a headless
//! Service and a StatefulSet ([`super::workload`] builds its pod template).
//! Every field the API server would default is set explicitly, so what is
//! applied equals what the server stores and a re-apply is a no-op.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{ConfigMap, Service, ServicePort, ServiceSpec};
use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, OwnerReference};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::{ApiResource, DynamicObject};
use kube::{Resource, ResourceExt};
use shardgate_contract::model::{self as m, Desired};
use shardgate_contract::{labels, names};

use super::workload::{self, BUS_PORT_NAME};
use crate::crd::{SchedulingSpec, ValkeyCluster};
use crate::gateway_api::{self, GatewayApi};

/// The ConfigMap key holding `valkey.conf`.
pub const CONFIG_KEY: &str = "valkey.conf";

/// Everything to apply for one cluster, in apply order.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Objects {
    pub shard_services: Vec<Service>,
    pub nodes: Vec<NodeObjects>,
    /// The cluster's PodDisruptionBudget.
    pub disruption_budget: Option<PodDisruptionBudget>,
    /// Each node's Gateway API route, applied last (after the Services
    /// they forward to).
    pub routes: Vec<RouteObject>,
}

/// A node's Gateway API route: its metadata and the guest's record. The
/// version of its kind is the API server's, known when it is applied
/// ([`RouteObject::object`]).
#[derive(Clone, Debug, PartialEq)]
pub struct RouteObject {
    pub route: m::Route,
    pub metadata: ObjectMeta,
}

impl RouteObject {
    /// The object to apply, at the version `api` serves its kind; none
    /// when the kind is not served.
    pub fn object(&self, api: &GatewayApi) -> Option<(ApiResource, DynamicObject)> {
        let resource = api.route(self.route.kind)?;
        let object = gateway_api::route_object(&self.route, self.metadata.clone(), resource);
        Some((resource.clone(), object))
    }
}

/// The objects of one node, all named `shardgate-<cluster>-<shard>-<node>`.
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
        if let Some(pdb) = &self.disruption_budget {
            out.push(typed_json(pdb));
        }
        let api = GatewayApi::assumed();
        for r in &self.routes {
            if let Some((_, object)) = r.object(&api) {
                out.push(serde_json::to_value(object).expect("objects serialize"));
            }
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
    Objects {
        shard_services: desired
            .services
            .iter()
            .map(|s| shard_service(&owned, s))
            .collect(),
        nodes: desired
            .nodes
            .iter()
            .map(|n| node_objects(&owned, n, &desired.workload, vc.spec.scheduling.as_ref()))
            .collect(),
        disruption_budget: desired
            .disruption_budget
            .map(|max| disruption_budget(&owned, max)),
        routes: desired
            .routes
            .iter()
            .map(|r| RouteObject {
                route: r.clone(),
                metadata: owned.meta(&r.name, owned.labels(r.shard, Some(r.node))),
            })
            .collect(),
    }
}

/// At most `max_unavailable` of the cluster's pods may be disrupted
/// (evicted by a drain) at a time.
fn disruption_budget(owned: &Owned, max_unavailable: u32) -> PodDisruptionBudget {
    PodDisruptionBudget {
        metadata: owned.meta(
            &names::disruption_budget(&owned.cluster),
            owned.labels.clone(),
        ),
        spec: Some(PodDisruptionBudgetSpec {
            max_unavailable: Some(IntOrString::Int(max_unavailable as i32)),
            selector: Some(LabelSelector {
                match_labels: Some(BTreeMap::from([
                    (labels::CLUSTER.to_string(), owned.cluster.clone()),
                    (
                        labels::COMPONENT.to_string(),
                        labels::COMPONENT_NODE.to_string(),
                    ),
                ])),
                ..LabelSelector::default()
            }),
            ..PodDisruptionBudgetSpec::default()
        }),
        status: None,
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

    /// The common labels plus the shard's index, and the node's if given
    /// (its objects' component is the node; else the shard's endpoint).
    fn labels(&self, shard: u32, node: Option<u32>) -> BTreeMap<String, String> {
        let mut labels = self.labels.clone();
        labels.insert(labels::SHARD.into(), shard.to_string());
        let component = match node {
            Some(node) => {
                labels.insert(labels::NODE.into(), node.to_string());
                labels::COMPONENT_NODE
            }
            None => labels::COMPONENT_ENDPOINT,
        };
        labels.insert(labels::COMPONENT.into(), component.into());
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

fn shard_service(owned: &Owned, s: &m::ShardService) -> Service {
    let mut metadata = owned.meta(&s.name, owned.labels(s.shard, s.node));
    metadata.annotations =
        (!s.annotations.is_empty()).then(|| s.annotations.iter().cloned().collect());
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
                    m::ServiceType::ClusterIp => "ClusterIP",
                }
                .into(),
            ),
            // The API server refuses a traffic policy on a ClusterIP Service.
            external_traffic_policy: (s.service_type != m::ServiceType::ClusterIp).then(|| {
                match s.external_traffic_policy {
                    m::TrafficPolicy::Cluster => "Cluster",
                    m::TrafficPolicy::Local => "Local",
                }
                .into()
            }),
            selector: Some(owned.selector(s.shard, s.node)),
            ports: Some(ports),
            load_balancer_source_ranges: (!s.load_balancer_source_ranges.is_empty())
                .then(|| s.load_balancer_source_ranges.clone()),
            load_balancer_class: s.load_balancer_class.clone(),
            allocate_load_balancer_node_ports: s.allocate_load_balancer_node_ports,
            ..ServiceSpec::default()
        }),
        status: None,
    }
}

fn node_objects(
    owned: &Owned,
    n: &m::Node,
    w: &m::Workload,
    scheduling: Option<&SchedulingSpec>,
) -> NodeObjects {
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
        stateful_set: workload::stateful_set(
            &owned.cluster,
            owned.meta(&n.name, labels.clone()),
            labels,
            selector,
            n,
            w,
            scheduling,
        ),
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

/// The controller reference to `vc` that every object it owns carries.
pub(crate) fn owner_reference(vc: &ValkeyCluster) -> Option<OwnerReference> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use shardgate_contract::auth;

    fn cluster(uid: Option<&str>) -> ValkeyCluster {
        let mut vc: ValkeyCluster = serde_json::from_value(json!({
            "apiVersion": "shardgate.io/v1alpha1", "kind": "ValkeyCluster",
            "metadata": {"name": "c", "namespace": "ns"}, "spec": {},
        }))
        .unwrap();
        vc.metadata.uid = uid.map(String::from);
        vc
    }

    fn desired(annotations: &[(&str, &str)], tls: bool) -> Desired {
        let node = |shard, node| m::Node {
            shard,
            node,
            name: names::node_object("c", shard, node),
            node_name: names::node_name("c", shard, node),
            port_name: names::port_name(node),
            config: format!("# node {shard}/{node}\n"),
            announce: Vec::new(),
        };
        Desired {
            labels: vec![(labels::CLUSTER.into(), "c".into())],
            services: vec![m::ShardService {
                node: None,
                annotations: annotations
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
                load_balancer_source_ranges: vec!["203.0.113.0/24".into()],
                load_balancer_class: Some("example.com/lb".into()),
                allocate_load_balancer_node_ports: Some(false),
                shard: 1,
                name: names::shard_service("c", 1),
                service_type: m::ServiceType::LoadBalancer,
                external_traffic_policy: m::TrafficPolicy::Local,
                ports: vec![
                    m::ServicePort {
                        node: 0,
                        name: "vk-n0".into(),
                        port: 6379,
                        node_port: 0,
                    },
                    m::ServicePort {
                        node: 1,
                        name: "vk-n1".into(),
                        port: 6380,
                        node_port: 31001,
                    },
                ],
            }],
            workload: m::Workload {
                image: "valkey/valkey:9.0".into(),
                command: vec!["valkey-server".into()],
                resources: None,
                tls_secret: tls.then(|| "tls".into()),
                ..m::Workload::default()
            },
            nodes: vec![node(1, 0), node(1, 1)],
            ..Desired::default()
        }
    }

    #[test]
    fn a_shard_service_selects_its_shard_with_a_port_per_node() {
        for (annotations, want_annotations) in
            [(vec![], json!(null)), (vec![("a", "1")], json!({"a": "1"}))]
        {
            let o = objects(&cluster(Some("u")), &desired(&annotations, false));
            let svc = typed_json(&o.shard_services[0]);
            assert_eq!(svc["kind"], "Service");
            assert_eq!(svc["metadata"]["name"], "shardgate-c-shard-1");
            assert_eq!(svc["metadata"]["annotations"], want_annotations);
            assert_eq!(svc["metadata"]["labels"][labels::SHARD], "1");
            assert_eq!(svc["metadata"]["ownerReferences"][0]["uid"], "u");
            assert_eq!(svc["metadata"]["ownerReferences"][0]["controller"], true);
            assert_eq!(svc["spec"]["type"], "LoadBalancer");
            assert_eq!(svc["spec"]["externalTrafficPolicy"], "Local");
            assert_eq!(
                svc["spec"]["loadBalancerSourceRanges"],
                json!(["203.0.113.0/24"])
            );
            assert_eq!(svc["spec"]["loadBalancerClass"], "example.com/lb");
            assert_eq!(svc["spec"]["allocateLoadBalancerNodePorts"], false);
            assert_eq!(
                svc["spec"]["selector"],
                json!({labels::CLUSTER: "c", labels::SHARD: "1"})
            );
            assert_eq!(
                svc["spec"]["ports"],
                json!([
                    {"name": "vk-n0", "port": 6379, "targetPort": "vk-n0", "protocol": "TCP"},
                    {"name": "vk-n1", "port": 6380, "targetPort": "vk-n1", "protocol": "TCP", "nodePort": 31001},
                ])
            );
        }
    }

    #[test]
    fn a_nodes_own_service_selects_and_is_labelled_with_its_node() {
        let mut d = desired(&[], false);
        let svc = &mut d.services[0];
        svc.node = Some(1);
        svc.name = names::node_service("c", 1, 1);
        svc.ports.remove(0);
        svc.ports[0].port = 6379;
        let o = objects(&cluster(Some("u")), &d);
        let svc = typed_json(&o.shard_services[0]);
        assert_eq!(svc["metadata"]["name"], "shardgate-c-shard-1-node-1");
        assert_eq!(svc["metadata"]["labels"][labels::SHARD], "1");
        assert_eq!(svc["metadata"]["labels"][labels::NODE], "1");
        assert_eq!(
            svc["spec"]["selector"],
            json!({labels::CLUSTER: "c", labels::SHARD: "1", labels::NODE: "1"})
        );
        assert_eq!(
            svc["spec"]["ports"],
            json!([{"name": "vk-n1", "port": 6379, "targetPort": "vk-n1", "protocol": "TCP", "nodePort": 31001}])
        );
    }

    #[test]
    fn each_node_gets_its_config_map_headless_service_and_stateful_set() {
        for (uid, tls) in [(Some("u"), false), (None, true)] {
            let o = objects(&cluster(uid), &desired(&[], tls));
            assert_eq!(o.nodes.len(), 2);
            let n = &o.nodes[1];
            let json = o.to_json();
            let kinds: Vec<_> = json.iter().map(|j| j["kind"].as_str().unwrap()).collect();
            assert_eq!(
                kinds,
                [
                    "Service",
                    "ConfigMap",
                    "Service",
                    "StatefulSet",
                    "ConfigMap",
                    "Service",
                    "StatefulSet"
                ]
            );
            assert_eq!(
                n.config_map.data.as_ref().unwrap()[CONFIG_KEY],
                "# node 1/1\n"
            );
            let hs = typed_json(&n.headless_service);
            assert_eq!(hs["spec"]["clusterIP"], "None");
            assert_eq!(hs["spec"]["selector"][labels::NODE], "1");
            assert_eq!(hs["spec"]["ports"][0]["name"], "vk-n1");
            assert_eq!(hs["spec"]["ports"][1]["name"], BUS_PORT_NAME);
            let sts = typed_json(&n.stateful_set);
            assert_eq!(sts["metadata"]["name"], "shardgate-c-1-1");
            assert_eq!(
                sts["metadata"]["ownerReferences"].is_null(),
                uid.is_none(),
                "owned once the cluster has a UID"
            );
            assert_eq!(sts["spec"]["updateStrategy"]["type"], "OnDelete");
            assert_eq!(
                sts["spec"]["template"]["metadata"]["labels"][labels::NODE],
                "1"
            );
            let pod = &sts["spec"]["template"]["spec"];
            let volumes: Vec<_> = pod["volumes"]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v["name"].as_str().unwrap())
                .collect();
            let want: &[&str] = if tls {
                &["config", "data", "acl", "system", "tls"]
            } else {
                &["config", "data", "acl", "system"]
            };
            assert_eq!(volumes, want);
            // The ACL and the replication password come from the cluster's
            // own Secrets, readable by the server's group only.
            let secret = |i: usize| &pod["volumes"][i]["secret"];
            assert_eq!(secret(2)["secretName"], names::acl_secret("c"));
            assert_eq!(secret(3)["secretName"], names::system_secret("c"));
            assert_eq!(secret(3)["items"][0]["key"], auth::REPLICATION_CONF);
            assert_eq!(secret(2)["defaultMode"], 0o440);
            assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
            let server = &pod["containers"][0];
            assert_eq!(server["ports"][0]["name"], "vk-n1");
            assert_eq!(server["securityContext"]["readOnlyRootFilesystem"], true);
            assert_eq!(
                server["env"][0]["valueFrom"]["fieldRef"]["apiVersion"],
                "v1"
            );
        }
    }

    #[test]
    fn persistence_claims_a_volume_per_node_and_keeps_it_by_policy() {
        let mut d = desired(&[], false);
        d.workload.persistence = Some(m::Persistence {
            size: "2Gi".into(),
            storage_class_name: Some("fast".into()),
            reclaim_policy: m::ReclaimPolicy::Delete,
        });
        d.workload.restart_settings = "databases 4\n".into();
        let o = objects(&cluster(Some("u")), &d);
        let sts = typed_json(&o.nodes[0].stateful_set);
        let claim = &sts["spec"]["volumeClaimTemplates"][0];
        assert_eq!(claim["metadata"]["name"], "data");
        assert_eq!(claim["spec"]["resources"]["requests"]["storage"], "2Gi");
        assert_eq!(claim["spec"]["storageClassName"], "fast");
        assert_eq!(claim["spec"]["accessModes"], json!(["ReadWriteOnce"]));
        assert_eq!(
            sts["spec"]["persistentVolumeClaimRetentionPolicy"],
            json!({"whenDeleted": "Delete", "whenScaled": "Delete"})
        );
        let pod = &sts["spec"]["template"]["spec"];
        assert!(
            pod["volumes"]
                .as_array()
                .unwrap()
                .iter()
                .all(|v| v["name"] != "data"),
            "the claim is the data volume, not an emptyDir"
        );
        assert_eq!(pod["containers"][0]["volumeMounts"][1]["name"], "data");
        let digest = &sts["spec"]["template"]["metadata"]["annotations"]
            [workload::RESTART_SETTINGS_ANNOTATION];
        assert_eq!(digest.as_str().map(str::len), Some(16));
        // Without start-only settings there is no annotation at all.
        let plain =
            typed_json(&objects(&cluster(Some("u")), &desired(&[], false)).nodes[0].stateful_set);
        assert!(plain["spec"]["template"]["metadata"]["annotations"].is_null());
        assert!(plain["spec"]["volumeClaimTemplates"].is_null());
    }

    #[test]
    fn one_disruption_budget_covers_the_cluster_s_pods() {
        let mut d = desired(&[], false);
        assert!(objects(&cluster(Some("u")), &d).disruption_budget.is_none());
        d.disruption_budget = Some(1);
        let o = objects(&cluster(Some("u")), &d);
        let pdb = typed_json(o.disruption_budget.as_ref().unwrap());
        assert_eq!(pdb["kind"], "PodDisruptionBudget");
        assert_eq!(pdb["apiVersion"], "policy/v1");
        assert_eq!(pdb["metadata"]["name"], "shardgate-c");
        assert_eq!(pdb["metadata"]["ownerReferences"][0]["uid"], "u");
        assert_eq!(pdb["spec"]["maxUnavailable"], 1);
        assert_eq!(
            pdb["spec"]["selector"]["matchLabels"],
            json!({labels::CLUSTER: "c", labels::COMPONENT: labels::COMPONENT_NODE})
        );
        assert_eq!(o.to_json().last().unwrap()["kind"], "PodDisruptionBudget");
    }
}
