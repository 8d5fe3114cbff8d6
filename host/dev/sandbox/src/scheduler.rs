//! A small scheduler: binds every Pod without `spec.nodeName` (and not
//! being deleted) to one of the Nodes in the API emulator, run on each
//! kubelet tick.
//!
//! **Filters**, in kube-scheduler's order, each with its reason:
//! `spec.unschedulable` nodes ("node(s) were unschedulable");
//! `spec.nodeSelector` must match the node's labels ("node(s) didn't match
//! Pod's node affinity/selector"); required topology spread constraints
//! (`whenUnsatisfiable: DoNotSchedule`): a node without the `topologyKey`
//! label, or whose domain would then exceed `maxSkew` over the least loaded
//! domain among the nodes that pass the node selector, is out ("node(s)
//! didn't match pod topology spread constraints"); required pod
//! anti-affinity terms: a node whose domain of `topologyKey` already has a
//! scheduled, not deleted pod in the term's namespaces (default: the pod's)
//! that the term's `labelSelector` selects is out ("node(s) didn't match
//! pod anti-affinity rules").
//!
//! **Score** (lowest first): the weighted count of matching pods in the
//! node's domain for each preferred anti-affinity term, then the matching
//! pods in the node's domain for each `ScheduleAnyway` spread constraint,
//! then the node's pod count, then its name.
//!
//! No node fits: the pod stays `Pending` with `PodScheduled: False`, reason
//! `Unschedulable`, and a message as kube-scheduler's (`0/3 nodes are
//! available: 3 node(s) didn't match pod anti-affinity rules.`), written
//! only when it changes.
//!
//! **Not modelled:** taints and tolerations, node affinity beyond
//! `nodeSelector`, pod affinity, the symmetry of existing pods'
//! anti-affinity, resources and ports, `minDomains`, `nodeAffinityPolicy`/
//! `nodeTaintsPolicy`, `matchLabelKeys`, preemption, priorities, scheduler
//! names and scheduling gates.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Node, Pod, PodAffinityTerm};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube_emulator::Emulator;
use serde_json::json;
use tracing::{info, warn};

/// The manager of the scheduler's writes.
const MANAGER: &str = "kube-scheduler";

const UNSCHEDULABLE_NODE: &str = "node(s) were unschedulable";
const SELECTOR: &str = "node(s) didn't match Pod's node affinity/selector";
const SPREAD: &str = "node(s) didn't match pod topology spread constraints";
const ANTI_AFFINITY: &str = "node(s) didn't match pod anti-affinity rules";

/// What to do with a pending pod.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Bind it to this node.
    Bind(String),
    /// Leave it pending; the `PodScheduled` condition's message.
    Unschedulable(String),
}

type Labels = BTreeMap<String, String>;

fn labels_of(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> Labels {
    meta.labels.clone().unwrap_or_default()
}

/// Whether `selector` selects `labels` (`matchLabels` and the
/// `matchExpressions` operators In, NotIn, Exists, DoesNotExist).
pub fn selects(selector: &LabelSelector, labels: &Labels) -> bool {
    let by_labels = selector
        .match_labels
        .iter()
        .flatten()
        .all(|(k, v)| labels.get(k) == Some(v));
    let by_expressions = selector.match_expressions.iter().flatten().all(|e| {
        let value = labels.get(&e.key);
        let values = e.values.as_deref().unwrap_or_default();
        match e.operator.as_str() {
            "In" => value.is_some_and(|v| values.contains(v)),
            "NotIn" => value.is_none_or(|v| !values.contains(v)),
            "Exists" => value.is_some(),
            "DoesNotExist" => value.is_none(),
            _ => false,
        }
    });
    by_labels && by_expressions
}

/// A pod already on a node, as the filters see it.
struct Placed<'a> {
    namespace: &'a str,
    labels: Labels,
    node: &'a str,
}

fn is_deleting(pod: &Pod) -> bool {
    pod.metadata.deletion_timestamp.is_some()
}

fn node_name(pod: &Pod) -> Option<&str> {
    pod.spec
        .as_ref()?
        .node_name
        .as_deref()
        .filter(|n| !n.is_empty())
}

/// Chooses a node for `pod` among `nodes`, given every pod in the cluster
/// (`pods`; only those bound to a node and not being deleted count).
pub fn decide(pod: &Pod, nodes: &[Node], pods: &[Pod]) -> Decision {
    let namespace = pod.metadata.namespace.as_deref().unwrap_or("default");
    let own_labels = labels_of(&pod.metadata);
    let spec = pod.spec.clone().unwrap_or_default();
    let node_labels: BTreeMap<&str, Labels> = nodes
        .iter()
        .map(|n| {
            (
                n.metadata.name.as_deref().unwrap_or_default(),
                labels_of(&n.metadata),
            )
        })
        .collect();
    let placed: Vec<Placed<'_>> = pods
        .iter()
        .filter(|p| !is_deleting(p))
        .filter_map(|p| {
            Some(Placed {
                namespace: p.metadata.namespace.as_deref().unwrap_or("default"),
                labels: labels_of(&p.metadata),
                node: node_name(p)?,
            })
        })
        .collect();
    // The topology domain of a node for `key` (None: the node lacks it).
    let domain = |node: &str, key: &str| -> Option<String> {
        node_labels.get(node).and_then(|l| l.get(key)).cloned()
    };
    // Matching pods (in `namespaces`) per domain of `key`.
    let counts = |selector: &LabelSelector, key: &str, namespaces: &[String]| {
        let mut by_domain: BTreeMap<String, usize> = BTreeMap::new();
        for p in &placed {
            if namespaces.iter().any(|n| n == p.namespace)
                && selects(selector, &p.labels)
                && let Some(d) = domain(p.node, key)
            {
                *by_domain.entry(d).or_default() += 1;
            }
        }
        by_domain
    };
    let own_ns = vec![namespace.to_string()];
    let term_namespaces = |t: &PodAffinityTerm| -> Vec<String> {
        t.namespaces
            .clone()
            .filter(|n| !n.is_empty())
            .unwrap_or_else(|| own_ns.clone())
    };

    let selector_ok = |labels: &Labels| {
        spec.node_selector
            .iter()
            .flatten()
            .all(|(k, v)| labels.get(k) == Some(v))
    };
    let constraints = spec.topology_spread_constraints.clone().unwrap_or_default();
    let (required_spread, soft_spread): (Vec<_>, Vec<_>) = constraints
        .iter()
        .partition(|c| c.when_unsatisfiable == "DoNotSchedule");
    let anti = spec
        .affinity
        .as_ref()
        .and_then(|a| a.pod_anti_affinity.clone())
        .unwrap_or_default();
    let required_anti = anti
        .required_during_scheduling_ignored_during_execution
        .unwrap_or_default();
    let preferred_anti = anti
        .preferred_during_scheduling_ignored_during_execution
        .unwrap_or_default();

    // Spread: the domains of the nodes that pass the node selector, with
    // their counts (0 for an empty domain).
    let spread_counts: Vec<BTreeMap<String, usize>> = required_spread
        .iter()
        .map(|c| {
            let selector = c.label_selector.clone().unwrap_or_default();
            let found = counts(&selector, &c.topology_key, &own_ns);
            node_labels
                .values()
                .filter(|l| selector_ok(l))
                .filter_map(|l| l.get(&c.topology_key))
                .map(|d| (d.clone(), found.get(d).copied().unwrap_or(0)))
                .collect()
        })
        .collect();

    let mut reasons: BTreeMap<&str, usize> = BTreeMap::new();
    let mut feasible: Vec<&Node> = Vec::new();
    for node in nodes {
        let name = node.metadata.name.as_deref().unwrap_or_default();
        let labels = &node_labels[name];
        let reason = if node.spec.as_ref().and_then(|s| s.unschedulable) == Some(true) {
            Some(UNSCHEDULABLE_NODE)
        } else if !selector_ok(labels) {
            Some(SELECTOR)
        } else if required_spread
            .iter()
            .zip(&spread_counts)
            .any(|(c, by_domain)| {
                let Some(d) = labels.get(&c.topology_key) else {
                    return true;
                };
                let selector = c.label_selector.clone().unwrap_or_default();
                let own = usize::from(selects(&selector, &own_labels));
                let min = by_domain.values().copied().min().unwrap_or(0);
                let here = by_domain.get(d).copied().unwrap_or(0);
                (here + own).saturating_sub(min) > usize::try_from(c.max_skew).unwrap_or(0)
            })
        {
            Some(SPREAD)
        } else if required_anti.iter().any(|t| {
            let Some(d) = labels.get(&t.topology_key) else {
                return false;
            };
            let selector = t.label_selector.clone().unwrap_or_default();
            counts(&selector, &t.topology_key, &term_namespaces(t))
                .get(d)
                .is_some_and(|&n| n > 0)
        }) {
            Some(ANTI_AFFINITY)
        } else {
            None
        };
        match reason {
            Some(r) => *reasons.entry(r).or_default() += 1,
            None => feasible.push(node),
        }
    }

    let score = |node: &Node| {
        let name = node.metadata.name.as_deref().unwrap_or_default();
        let in_domain = |selector: &LabelSelector, key: &str, namespaces: &[String]| {
            domain(name, key)
                .and_then(|d| counts(selector, key, namespaces).get(&d).copied())
                .unwrap_or(0)
        };
        let anti: i64 = preferred_anti
            .iter()
            .map(|w| {
                let t = &w.pod_affinity_term;
                let selector = t.label_selector.clone().unwrap_or_default();
                i64::from(w.weight)
                    * in_domain(&selector, &t.topology_key, &term_namespaces(t)) as i64
            })
            .sum();
        let spread: usize = soft_spread
            .iter()
            .map(|c| {
                let selector = c.label_selector.clone().unwrap_or_default();
                in_domain(&selector, &c.topology_key, &own_ns)
            })
            .sum();
        let total = placed.iter().filter(|p| p.node == name).count();
        (anti, spread, total, name.to_string())
    };
    match feasible.into_iter().min_by_key(|n| score(n)) {
        Some(node) => Decision::Bind(node.metadata.name.clone().unwrap_or_default()),
        None => Decision::Unschedulable(unschedulable_message(nodes.len(), &reasons)),
    }
}

/// `0/N nodes are available: 2 node(s) ..., 1 node(s) ....` (reasons in
/// alphabetical order, as kube-scheduler's `FitError`).
fn unschedulable_message(nodes: usize, reasons: &BTreeMap<&str, usize>) -> String {
    let mut parts: Vec<String> = reasons.iter().map(|(r, n)| format!("{n} {r}")).collect();
    parts.sort();
    if nodes == 0 {
        return "no nodes available to schedule pods".into();
    }
    format!("0/{nodes} nodes are available: {}.", parts.join(", "))
}

/// Whether the pod's `PodScheduled` condition already says `message`.
fn already_says(pod: &Pod, message: &str) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| {
            cs.iter().any(|c| {
                c.type_ == "PodScheduled"
                    && c.status == "False"
                    && c.reason.as_deref() == Some("Unschedulable")
                    && c.message.as_deref() == Some(message)
            })
        })
}

/// One pass over `namespace`'s pending pods, in name order: binds each that
/// fits (later pods see the earlier bindings), marks the others
/// unschedulable. Errors are logged (the next tick retries).
pub fn schedule(emu: &Emulator, namespace: &str) {
    let nodes: Vec<Node> = parse_all(emu.list("nodes", None));
    let mut pods: Vec<Pod> = parse_all(emu.list("pods", None));
    let pending: Vec<usize> = pods
        .iter()
        .enumerate()
        .filter(|(_, p)| {
            p.metadata.namespace.as_deref() == Some(namespace)
                && node_name(p).is_none()
                && !is_deleting(p)
        })
        .map(|(i, _)| i)
        .collect();
    for i in pending {
        let name = pods[i].metadata.name.clone().unwrap_or_default();
        match decide(&pods[i], &nodes, &pods) {
            Decision::Bind(node) => match emu.bind_pod(namespace, &name, &node) {
                Ok(_) => {
                    info!(pod = %name, %node, "pod bound");
                    pods[i].spec.get_or_insert_with(Default::default).node_name = Some(node);
                }
                Err(e) => warn!(pod = %name, %node, "binding: {e:#}"),
            },
            Decision::Unschedulable(message) => {
                if already_says(&pods[i], &message) {
                    continue;
                }
                info!(pod = %name, %message, "pod unschedulable");
                let condition = json!({
                    "type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                    "message": message, "lastProbeTime": null,
                    "lastTransitionTime": now_rfc3339(),
                });
                if let Err(e) = emu.set_pod_condition(namespace, &name, MANAGER, condition) {
                    warn!(pod = %name, "marking unschedulable: {e:#}");
                }
            }
        }
    }
}

fn parse_all<T: serde::de::DeserializeOwned>(values: Vec<serde_json::Value>) -> Vec<T> {
    values
        .into_iter()
        .filter_map(|v| serde_json::from_value(v).ok())
        .collect()
}

/// Now in RFC 3339 (seconds), for `lastTransitionTime`.
fn now_rfc3339() -> String {
    k8s_openapi::jiff::Timestamp::now()
        .round(k8s_openapi::jiff::Unit::Second)
        .map(|t| t.to_string())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;
    use crate::nodes::sandbox_nodes;

    fn nodes(n: u32) -> Vec<Node> {
        sandbox_nodes(n)
            .iter()
            .map(|n| serde_json::from_value(n.object()).unwrap())
            .collect()
    }

    fn shard_labels(shard: u32, node: u32) -> Value {
        json!({"shardgate.io/cluster": "vc", "shardgate.io/shard": shard.to_string(),
               "shardgate.io/node": node.to_string()})
    }

    /// A pod of shard `shard` with `spec` added, on `on` if given.
    fn pod(name: &str, shard: u32, on: Option<&str>, spec: Value) -> Pod {
        let mut spec = spec;
        spec["containers"] = json!([{"name": "valkey"}]);
        if let Some(node) = on {
            spec["nodeName"] = json!(node);
        }
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "default", "labels": shard_labels(shard, 0)},
            "spec": spec,
        }))
        .unwrap()
    }

    fn shard_selector(shard: u32) -> Value {
        json!({"matchLabels": {"shardgate.io/cluster": "vc", "shardgate.io/shard": shard.to_string()}})
    }

    fn required_anti(shard: u32, key: &str) -> Value {
        json!({"affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": shard_selector(shard), "topologyKey": key}]}}})
    }

    fn preferred_anti(shard: u32) -> Value {
        json!({"affinity": {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": 100, "podAffinityTerm": {"labelSelector": shard_selector(shard),
                                                "topologyKey": "kubernetes.io/hostname"}}]}}})
    }

    fn bind(node: &str) -> Decision {
        Decision::Bind(node.into())
    }

    /// Schedules `pending` one after the other as the loop does; returns
    /// each one's decision.
    fn schedule_all(nodes: &[Node], mut pods: Vec<Pod>, pending: Vec<Pod>) -> Vec<Decision> {
        let mut out = Vec::new();
        for mut p in pending {
            let d = decide(&p, nodes, &pods);
            if let Decision::Bind(n) = &d {
                p.spec.as_mut().unwrap().node_name = Some(n.clone());
                pods.push(p);
            }
            out.push(d);
        }
        out
    }

    #[test]
    fn node_selector_must_match() {
        let nodes = nodes(3);
        let p = pod(
            "p",
            0,
            None,
            json!({"nodeSelector": {"topology.kubernetes.io/zone": "sandbox-zone-2"}}),
        );
        assert_eq!(decide(&p, &nodes, &[]), bind("sandbox-node-2"));
        let p = pod("p", 0, None, json!({"nodeSelector": {"disk": "ssd"}}));
        assert_eq!(
            decide(&p, &nodes, &[]),
            Decision::Unschedulable(
                "0/3 nodes are available: 3 node(s) didn't match Pod's node affinity/selector."
                    .into()
            )
        );
    }

    #[test]
    fn fewest_pods_then_name() {
        let nodes = nodes(3);
        let busy = vec![
            pod("a", 1, Some("sandbox-node-0"), json!({})),
            pod("b", 2, Some("sandbox-node-1"), json!({})),
        ];
        assert_eq!(
            decide(&pod("p", 0, None, json!({})), &nodes, &busy),
            bind("sandbox-node-2")
        );
        assert_eq!(
            decide(&pod("p", 0, None, json!({})), &nodes, &[]),
            bind("sandbox-node-0")
        );
    }

    #[test]
    fn preferred_anti_affinity_spreads_a_shard_but_is_not_required() {
        let nodes = nodes(2);
        let pending: Vec<Pod> = (0..3)
            .map(|i| pod(&format!("s0-{i}"), 0, None, preferred_anti(0)))
            .collect();
        let got = schedule_all(&nodes, vec![], pending);
        assert_eq!(
            got,
            [
                bind("sandbox-node-0"),
                bind("sandbox-node-1"),
                bind("sandbox-node-0")
            ]
        );
        // Preferred beats fewer pods in total.
        let others = vec![
            pod("x", 1, Some("sandbox-node-1"), json!({})),
            pod("y", 1, Some("sandbox-node-1"), json!({})),
            pod("s0-0", 0, Some("sandbox-node-0"), json!({})),
        ];
        assert_eq!(
            decide(&pod("s0-1", 0, None, preferred_anti(0)), &nodes, &others),
            bind("sandbox-node-1")
        );
    }

    #[test]
    fn required_anti_affinity_leaves_the_fourth_pod_of_a_shard_pending() {
        // `scheduling.node.shard: Required`: a shard of 4 nodes on 3 nodes.
        let nodes = nodes(3);
        let other_shard = vec![pod("s1-0", 1, Some("sandbox-node-0"), json!({}))];
        let pending: Vec<Pod> = (0..4)
            .map(|i| {
                pod(
                    &format!("s0-{i}"),
                    0,
                    None,
                    required_anti(0, "kubernetes.io/hostname"),
                )
            })
            .collect();
        let got = schedule_all(&nodes, other_shard, pending);
        assert_eq!(
            got[..3],
            [
                bind("sandbox-node-1"),
                bind("sandbox-node-2"),
                bind("sandbox-node-0")
            ]
        );
        assert_eq!(
            got[3],
            Decision::Unschedulable(
                "0/3 nodes are available: 3 node(s) didn't match pod anti-affinity rules.".into()
            )
        );
    }

    #[test]
    fn required_anti_affinity_ignores_deleted_pods_and_other_namespaces() {
        let nodes = nodes(1);
        let mut deleting = pod("old", 0, Some("sandbox-node-0"), json!({}));
        deleting.metadata.deletion_timestamp =
            Some(serde_json::from_value(json!("2024-01-01T00:00:00Z")).unwrap());
        let mut elsewhere = pod("other", 0, Some("sandbox-node-0"), json!({}));
        elsewhere.metadata.namespace = Some("other".into());
        let p = pod("new", 0, None, required_anti(0, "kubernetes.io/hostname"));
        assert_eq!(
            decide(&p, &nodes, &[deleting, elsewhere]),
            bind("sandbox-node-0")
        );
    }

    #[test]
    fn required_anti_affinity_by_zone() {
        let nodes = nodes(2);
        let placed = vec![pod("a", 0, Some("sandbox-node-0"), json!({}))];
        let p = pod(
            "b",
            0,
            None,
            required_anti(0, "topology.kubernetes.io/zone"),
        );
        assert_eq!(decide(&p, &nodes, &placed), bind("sandbox-node-1"));
    }

    #[test]
    fn topology_spread_constraints() {
        let nodes = nodes(3);
        let spread = |when: &str| {
            json!({"topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone",
                   "whenUnsatisfiable": when, "labelSelector": shard_selector(0)}]})
        };
        // Zones 0 and 1 have one pod each, zone 2 none: only zone 2 keeps
        // the skew at 1, even though node 2 has more pods in total.
        let placed = vec![
            pod("a", 0, Some("sandbox-node-0"), json!({})),
            pod("b", 0, Some("sandbox-node-1"), json!({})),
            pod("x", 1, Some("sandbox-node-2"), json!({})),
            pod("y", 1, Some("sandbox-node-2"), json!({})),
        ];
        let p = pod("c", 0, None, spread("DoNotSchedule"));
        assert_eq!(decide(&p, &nodes, &placed), bind("sandbox-node-2"));
        let p = pod("c", 0, None, spread("ScheduleAnyway"));
        assert_eq!(decide(&p, &nodes, &placed), bind("sandbox-node-2"));
        // Only zones 0 and 1 allowed by the node selector, one of them
        // already ahead: the other one.
        let placed = vec![pod("a", 0, Some("sandbox-node-0"), json!({}))];
        let mut limited = spread("DoNotSchedule");
        limited["nodeSelector"] = json!({"kubernetes.io/os": "linux"});
        let two = nodes[..2].to_vec();
        let p = pod("c", 0, None, limited.clone());
        assert_eq!(decide(&p, &two, &placed), bind("sandbox-node-1"));
        // Both full at skew 1 on a single-zone cluster with maxSkew 1: fine,
        // min is the same domain.
        let one = nodes[..1].to_vec();
        assert_eq!(decide(&p, &one, &placed), bind("sandbox-node-0"));
        // Two zones, zone 1 unusable through a missing label: zone 0 would
        // be 2 vs... its own min, so allowed; a node without the key is out.
        let mut unlabelled: Node = nodes[1].clone();
        unlabelled
            .metadata
            .labels
            .as_mut()
            .unwrap()
            .remove("topology.kubernetes.io/zone");
        let p = pod("c", 0, None, spread("DoNotSchedule"));
        let got = decide(&p, &[unlabelled], &placed);
        assert_eq!(
            got,
            Decision::Unschedulable(
                "0/1 nodes are available: 1 node(s) didn't match pod topology spread constraints."
                    .into()
            )
        );
    }

    #[test]
    fn unschedulable_nodes_and_mixed_reasons() {
        let mut nodes = nodes(3);
        nodes[0]
            .spec
            .get_or_insert_with(Default::default)
            .unschedulable = Some(true);
        let placed = vec![pod("a", 0, Some("sandbox-node-1"), json!({}))];
        let mut spec = required_anti(0, "kubernetes.io/hostname");
        spec["nodeSelector"] = json!({"kubernetes.io/os": "linux"});
        nodes[2]
            .metadata
            .labels
            .as_mut()
            .unwrap()
            .remove("kubernetes.io/os");
        let p = pod("b", 0, None, spec);
        assert_eq!(
            decide(&p, &nodes, &placed),
            Decision::Unschedulable(
                "0/3 nodes are available: 1 node(s) didn't match Pod's node affinity/selector, \
                 1 node(s) didn't match pod anti-affinity rules, 1 node(s) were unschedulable."
                    .into()
            )
        );
        assert_eq!(
            decide(&p, &[], &placed),
            Decision::Unschedulable("no nodes available to schedule pods".into())
        );
    }

    #[test]
    fn selectors_support_expressions() {
        let labels: Labels = [("a".to_string(), "1".to_string())].into();
        let sel = |v: Value| -> LabelSelector { serde_json::from_value(v).unwrap() };
        assert!(selects(&sel(json!({})), &labels));
        assert!(selects(
            &sel(
                json!({"matchExpressions": [{"key": "a", "operator": "In", "values": ["1", "2"]}]})
            ),
            &labels
        ));
        assert!(!selects(
            &sel(json!({"matchExpressions": [{"key": "a", "operator": "NotIn", "values": ["1"]}]})),
            &labels
        ));
        assert!(selects(
            &sel(json!({"matchExpressions": [{"key": "b", "operator": "DoesNotExist"}]})),
            &labels
        ));
        assert!(!selects(&sel(json!({"matchLabels": {"a": "2"}})), &labels));
    }
}
