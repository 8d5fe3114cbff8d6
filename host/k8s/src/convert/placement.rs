//! Where a node's pod may run: `spec.scheduling` as written (tolerations,
//! node selector, affinity, topology spread constraints, priority class),
//! with the guest's spreads added, rendered for one node.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Affinity, PodAffinityTerm, PodAntiAffinity, Toleration, TopologySpreadConstraint,
    WeightedPodAffinityTerm,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use shardgate_contract::labels;
use shardgate_contract::model::{self as m, Axis, Scope};

use crate::crd::SchedulingSpec;

/// The topology key of a Kubernetes node.
pub const NODE_KEY: &str = "kubernetes.io/hostname";
/// The topology key of a zone.
pub const ZONE_KEY: &str = "topology.kubernetes.io/zone";

/// The scheduling fields of one node's pod.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Placed {
    pub affinity: Option<Affinity>,
    pub topology_spread_constraints: Option<Vec<TopologySpreadConstraint>>,
    pub tolerations: Option<Vec<Toleration>>,
    pub node_selector: Option<BTreeMap<String, String>>,
    pub priority_class_name: Option<String>,
}

/// Node `node` of `cluster`'s placement: `scheduling` as written, plus
/// each of `spreads` that applies to it. A spread of a shard's pods on the
/// node axis is pod anti-affinity; every other spread is a topology spread
/// constraint with `maxSkew: 1`. The primaries' spread applies to the
/// node-index-0 pods only.
pub fn place(
    cluster: &str,
    node: &m::Node,
    spreads: &[m::Spread],
    scheduling: Option<&SchedulingSpec>,
) -> Placed {
    let mut affinity = scheduling.and_then(|s| s.affinity.clone());
    let mut constraints: Vec<TopologySpreadConstraint> = scheduling
        .map(|s| s.topology_spread_constraints.clone())
        .unwrap_or_default();
    for spread in spreads {
        let mut selects = BTreeMap::from([(labels::CLUSTER.to_string(), cluster.to_string())]);
        match spread.scope {
            Scope::Shard => {
                selects.insert(labels::SHARD.into(), node.shard.to_string());
            }
            Scope::Primaries if node.node != 0 => continue,
            Scope::Primaries => {
                selects.insert(labels::NODE.into(), "0".into());
            }
            Scope::Pods => {
                selects.insert(labels::COMPONENT.into(), labels::COMPONENT_NODE.into());
            }
        }
        let selector = LabelSelector {
            match_labels: Some(selects),
            ..LabelSelector::default()
        };
        let key = match spread.axis {
            Axis::Node => NODE_KEY,
            Axis::Zone => ZONE_KEY,
        };
        if spread.axis == Axis::Node && spread.scope == Scope::Shard {
            let term = PodAffinityTerm {
                label_selector: Some(selector),
                topology_key: key.into(),
                ..PodAffinityTerm::default()
            };
            let anti = affinity
                .get_or_insert_with(Affinity::default)
                .pod_anti_affinity
                .get_or_insert_with(PodAntiAffinity::default);
            if spread.required {
                anti.required_during_scheduling_ignored_during_execution
                    .get_or_insert_with(Vec::new)
                    .push(term);
            } else {
                anti.preferred_during_scheduling_ignored_during_execution
                    .get_or_insert_with(Vec::new)
                    .push(WeightedPodAffinityTerm {
                        pod_affinity_term: term,
                        weight: 100,
                    });
            }
        } else {
            constraints.push(TopologySpreadConstraint {
                label_selector: Some(selector),
                max_skew: 1,
                topology_key: key.into(),
                when_unsatisfiable: if spread.required {
                    "DoNotSchedule"
                } else {
                    "ScheduleAnyway"
                }
                .into(),
                ..TopologySpreadConstraint::default()
            });
        }
    }
    Placed {
        affinity,
        topology_spread_constraints: (!constraints.is_empty()).then_some(constraints),
        tolerations: scheduling
            .map(|s| s.tolerations.clone())
            .filter(|t| !t.is_empty()),
        node_selector: scheduling
            .map(|s| s.node_selector.clone())
            .filter(|n| !n.is_empty()),
        priority_class_name: scheduling.and_then(|s| s.priority_class_name.clone()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn node(shard: u32, node: u32) -> m::Node {
        m::Node {
            shard,
            node,
            name: String::new(),
            node_name: String::new(),
            port_name: String::new(),
            config: String::new(),
            announce: Vec::new(),
        }
    }

    fn spread(axis: Axis, scope: Scope, required: bool) -> m::Spread {
        m::Spread {
            axis,
            scope,
            required,
        }
    }

    #[test]
    fn the_default_keeps_a_shard_s_pods_on_different_nodes_where_possible() {
        let placed = place(
            "c",
            &node(2, 1),
            &[spread(Axis::Node, Scope::Shard, false)],
            None,
        );
        assert_eq!(
            serde_json::to_value(&placed.affinity).unwrap(),
            json!({"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{
                "weight": 100,
                "podAffinityTerm": {
                    "labelSelector": {"matchLabels": {labels::CLUSTER: "c", labels::SHARD: "2"}},
                    "topologyKey": NODE_KEY,
                },
            }]}})
        );
        assert_eq!(placed.topology_spread_constraints, None);
        assert_eq!(
            placed,
            Placed {
                affinity: placed.affinity.clone(),
                ..Placed::default()
            }
        );
    }

    #[test]
    fn spreads_add_to_what_the_user_wrote() {
        let user: SchedulingSpec = serde_json::from_value(json!({
            "nodeSelector": {"pool": "valkey"},
            "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "valkey", "effect": "NoSchedule"}],
            "priorityClassName": "high",
            "affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": {"app": "other"}}, "topologyKey": NODE_KEY}]}},
            "topologySpreadConstraints": [{"maxSkew": 2, "topologyKey": "rack", "whenUnsatisfiable": "ScheduleAnyway"}],
        }))
        .unwrap();
        let spreads = [
            spread(Axis::Node, Scope::Shard, true),
            spread(Axis::Zone, Scope::Primaries, true),
            spread(Axis::Zone, Scope::Pods, false),
        ];
        // Node 0: the user's, the shard anti-affinity, both constraints.
        let p0 = place("c", &node(1, 0), &spreads, Some(&user));
        let anti = p0.affinity.unwrap().pod_anti_affinity.unwrap();
        let required = anti
            .required_during_scheduling_ignored_during_execution
            .unwrap();
        assert_eq!(required.len(), 2, "the user's term, then the shard's");
        assert_eq!(
            required[1]
                .label_selector
                .as_ref()
                .unwrap()
                .match_labels
                .as_ref()
                .unwrap()[labels::SHARD],
            "1"
        );
        let c = p0.topology_spread_constraints.unwrap();
        let keys: Vec<(&str, &str)> = c
            .iter()
            .map(|c| (c.topology_key.as_str(), c.when_unsatisfiable.as_str()))
            .collect();
        assert_eq!(
            keys,
            [
                ("rack", "ScheduleAnyway"),
                (ZONE_KEY, "DoNotSchedule"),
                (ZONE_KEY, "ScheduleAnyway")
            ]
        );
        assert_eq!(p0.node_selector.unwrap()["pool"], "valkey");
        assert_eq!(p0.tolerations.unwrap().len(), 1);
        assert_eq!(p0.priority_class_name.as_deref(), Some("high"));
        // Node 1 is not a primary of the spec: no primaries' spread.
        let p1 = place("c", &node(1, 1), &spreads, Some(&user));
        assert_eq!(p1.topology_spread_constraints.unwrap().len(), 2);
    }
}
