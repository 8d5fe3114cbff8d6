//! A ValkeyCluster's status, computed in one pure function: from the guest's
//! part of it (external endpoints, `ExternalAccessReady`), what the reconcile
//! saw and did, and the status as it was. The operator writes it; `shardgate
//! render` prints it. No clock is read: the caller passes `now`, and a
//! condition whose status did not change keeps its `lastTransitionTime`.

use std::collections::BTreeSet;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use shardgate_contract::conditions::{
    DEGRADED, EXTERNAL_ACCESS_READY, GATEWAY_API_UNAVAILABLE, PROGRESSING, READY,
};
use shardgate_contract::model as m;

use crate::crd::{
    ClusterState, ExternalAccessType, GatewayStatus, NodeEndpointStatus, ShardEndpointStatus,
    ValkeyClusterStatus,
};

/// What a reconcile saw and did, beyond the guest's answer.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Progress {
    /// Objects created, changed or deleted.
    pub changed: usize,
    /// Nodes of the spec whose Pod is ready.
    pub ready_nodes: usize,
    /// Nodes the spec wants.
    pub wanted_nodes: usize,
    /// Shards the spec wants.
    pub shards: usize,
    /// Shards of the spec whose every node's Pod is ready.
    pub ready_shards: usize,
    /// The Valkey cluster's formation, when the operator manages Valkey.
    pub formation: Option<Formation>,
    /// A change of announce settings is still spreading by gossip.
    pub announce_spreading: bool,
    /// Nodes that have not loaded the current ACL yet (its Secret is still
    /// reaching their volume).
    pub acl_pending: usize,
    /// `Kind name` of each desired object whose name another owner holds:
    /// nothing was applied to them.
    pub conflicts: Vec<String>,
    /// Nodes still to be restarted onto their current template (an image
    /// or resources change rolling through).
    pub rolling: usize,
    /// How the spec exposes the nodes ([`ExternalAccessType::of`]); `None`
    /// leaves `status.externalAccessType` out.
    pub external_access_type: Option<ExternalAccessType>,
}

/// The Valkey cluster's formation, as the guest's plan reports it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Formation {
    pub formed: bool,
    /// Why it is not formed yet.
    pub waiting: String,
}

impl From<&m::Topology> for Formation {
    fn from(t: &m::Topology) -> Self {
        Formation {
            formed: t.formed,
            waiting: t.waiting.clone(),
        }
    }
}

/// How a reconcile ended.
#[derive(Clone, Debug)]
pub enum Outcome<'a> {
    /// The guest answered with a desired state, and it was acted on.
    Reconciled {
        guest: &'a m::Status,
        progress: Progress,
    },
    /// The guest refused the spec: nothing was applied or deleted.
    Refused { message: String },
    /// The reconcile failed part way (an API or Valkey error): it is
    /// retried with backoff.
    Failed { message: String },
}

/// The status after `outcome`, given the status as it was (`previous`) and
/// the spec's `generation`. Conditions are sorted by type.
pub fn compute(
    outcome: &Outcome<'_>,
    previous: Option<&ValkeyClusterStatus>,
    generation: Option<i64>,
    now: &Time,
) -> ValkeyClusterStatus {
    let previous = previous.cloned().unwrap_or_default();
    let condition = |type_: &str, status: &str, reason: &str, message: &str| Condition {
        type_: type_.into(),
        status: status.into(),
        reason: reason.into(),
        message: message.into(),
        last_transition_time: now.clone(),
        observed_generation: generation,
    };
    let (mut status, wanted) = match outcome {
        Outcome::Failed { message } => (
            // What the last good reconcile computed stays; the cluster is
            // not called ready while its reconcile fails.
            previous.clone(),
            vec![
                condition(DEGRADED, "True", "ReconcileFailed", message),
                condition(
                    READY,
                    "False",
                    "ReconcileFailed",
                    "the last reconcile failed and is retried; see Degraded",
                ),
                condition(PROGRESSING, "True", "Retrying", "retrying with backoff"),
            ],
        ),
        Outcome::Refused { message } => (
            // What was computed for the last good spec stays; only the
            // verdict on this one is added.
            previous.clone(),
            vec![
                condition(DEGRADED, "True", "InvalidSpec", message),
                condition(
                    PROGRESSING,
                    "False",
                    "InvalidSpec",
                    "the spec must be fixed before anything is applied",
                ),
            ],
        ),
        Outcome::Reconciled { guest, progress } => {
            let (ready, progressing) = verdicts(guest, progress);
            let unserved = gateway_unserved(guest);
            let degraded = if !progress.conflicts.is_empty() {
                condition(
                    DEGRADED,
                    "True",
                    "NameConflict",
                    &name_conflict(&progress.conflicts),
                )
            } else if let Some(c) = unserved {
                condition(DEGRADED, "True", GATEWAY_API_UNAVAILABLE, &c.message)
            } else {
                condition(DEGRADED, "False", "AsExpected", "")
            };
            let mut wanted = vec![
                condition(READY, ready.0, ready.1, &ready.2),
                condition(PROGRESSING, progressing.0, progressing.1, &progressing.2),
                degraded,
            ];
            wanted.extend(
                guest
                    .conditions
                    .iter()
                    .map(|c| condition(&c.type_, c.status.as_str(), &c.reason, &c.message)),
            );
            // Exactly these conditions: one the guest no longer reports
            // drops out.
            let status = ValkeyClusterStatus {
                external_endpoints: guest.external_endpoints.as_deref().map(endpoints),
                conditions: Vec::new(),
                observed_generation: generation,
                state: previous.state,
                shards: Some(progress.shards as i32),
                ready_shards: Some(progress.ready_shards as i32),
                shard_readiness: Some(format!("{}/{}", progress.ready_shards, progress.shards)),
                external_access_type: progress.external_access_type,
                gateway: guest.gateway.as_ref().map(|g| GatewayStatus {
                    name: g.name.clone(),
                    missing_listeners: g
                        .missing_listeners
                        .iter()
                        .map(|&p| i32::try_from(p).unwrap_or(i32::MAX))
                        .collect(),
                }),
            };
            (status, wanted)
        }
    };
    for mut c in wanted {
        if let Some(old) = previous.conditions.iter().find(|o| o.type_ == c.type_)
            && old.status == c.status
        {
            c.last_transition_time = old.last_transition_time.clone();
        }
        match status.conditions.iter_mut().find(|o| o.type_ == c.type_) {
            Some(old) => *old = c,
            None => status.conditions.push(c),
        }
    }
    status.conditions.sort_by(|a, b| a.type_.cmp(&b.type_));
    let ready = status
        .conditions
        .iter()
        .any(|c| c.type_ == READY && c.status == "True");
    status.state = Some(state(outcome, previous.state, ready));
    status
}

/// `status.state`: `Failed` for a refused spec, `Degraded` for a failed
/// reconcile or names held by others, `Ready`, and otherwise
/// `Initializing` until the cluster has first been ready, then
/// `Reconciling`.
pub fn state(outcome: &Outcome<'_>, previous: Option<ClusterState>, ready: bool) -> ClusterState {
    match outcome {
        Outcome::Refused { .. } => ClusterState::Failed,
        Outcome::Failed { .. } => ClusterState::Degraded,
        Outcome::Reconciled { guest, progress }
            if !progress.conflicts.is_empty() || gateway_unserved(guest).is_some() =>
        {
            ClusterState::Degraded
        }
        Outcome::Reconciled { .. } if ready => ClusterState::Ready,
        Outcome::Reconciled { .. } => match previous {
            None | Some(ClusterState::Initializing) => ClusterState::Initializing,
            Some(_) => ClusterState::Reconciling,
        },
    }
}

/// The guest's `ExternalAccessReady` when it says the cluster needs Gateway
/// API kinds the API server does not serve: no wait fixes that, so the
/// cluster is degraded.
fn gateway_unserved(guest: &m::Status) -> Option<&m::Condition> {
    guest
        .conditions
        .iter()
        .find(|c| c.type_ == EXTERNAL_ACCESS_READY && c.reason == GATEWAY_API_UNAVAILABLE)
}

/// How many of the spec's `shards` have every node of `wanted` ready.
pub fn ready_shards(
    pods: impl IntoIterator<Item = (m::NodeRef, bool)>,
    wanted: &[m::Node],
    shards: u32,
) -> usize {
    let ready: BTreeSet<(u32, u32)> = pods
        .into_iter()
        .filter(|(_, ready)| *ready)
        .map(|(at, _)| (at.shard, at.node))
        .collect();
    (0..shards)
        .filter(|s| {
            let mut nodes = wanted.iter().filter(|n| n.shard == *s).peekable();
            nodes.peek().is_some() && nodes.all(|n| ready.contains(&(n.shard, n.node)))
        })
        .count()
}

/// What `Degraded` says of objects whose names another owner holds.
pub fn name_conflict(conflicts: &[String]) -> String {
    format!(
        "{} exist{} and {} not controlled by this cluster: nothing is applied to {}; \
         delete or rename {}",
        conflicts.join(", "),
        if conflicts.len() == 1 { "s" } else { "" },
        if conflicts.len() == 1 { "is" } else { "are" },
        if conflicts.len() == 1 { "it" } else { "them" },
        if conflicts.len() == 1 { "it" } else { "them" },
    )
}

/// How many of `wanted`'s nodes are ready, given each observed Pod's node
/// and readiness.
pub fn ready_nodes(
    pods: impl IntoIterator<Item = (m::NodeRef, bool)>,
    wanted: &[m::Node],
) -> usize {
    let wanted: BTreeSet<(u32, u32)> = wanted.iter().map(|n| (n.shard, n.node)).collect();
    pods.into_iter()
        .filter(|(at, ready)| *ready && wanted.contains(&(at.shard, at.node)))
        .count()
}

/// Whether a reconcile that ended so must look again soon: something is
/// still changing or waited for.
/// A name conflict is pending too: the object holding the name carries no
/// label of shardgate's, so no watch event says when it is gone.
pub fn pending(guest: &m::Status, progress: &Progress) -> bool {
    let (ready, progressing) = verdicts(guest, progress);
    ready.0 != "True" || progressing.0 != "False" || !progress.conflicts.is_empty()
}

type Verdict = (&'static str, &'static str, String);

/// `Ready` and `Progressing`: status, reason, message.
fn verdicts(guest: &m::Status, p: &Progress) -> (Verdict, Verdict) {
    let external_pending = guest
        .conditions
        .iter()
        .any(|c| c.type_ == EXTERNAL_ACCESS_READY && c.status != m::ConditionStatus::True);
    let forming = p.formation.as_ref().filter(|f| !f.formed);
    let (ready, expected) = (p.ready_nodes, p.wanted_nodes);
    let ready_verdict = if !p.conflicts.is_empty() {
        (
            "False",
            "NameConflict",
            "objects the cluster needs are held by another owner".to_string(),
        )
    } else if ready != expected {
        (
            "False",
            "NodesNotReady",
            format!("{ready} of {expected} nodes are ready"),
        )
    } else if let Some(f) = forming {
        ("False", "ClusterForming", f.waiting.clone())
    } else if p.announce_spreading {
        (
            "False",
            "AnnouncePending",
            "announce settings are still spreading by gossip".to_string(),
        )
    } else if p.acl_pending > 0 {
        (
            "False",
            "AclPending",
            format!(
                "{} nodes have not loaded the current users yet",
                p.acl_pending
            ),
        )
    } else if external_pending {
        (
            "False",
            "ExternalAccessPending",
            "nodes are ready; external access is not".to_string(),
        )
    } else {
        (
            "True",
            "AllNodesReady",
            format!("all {expected} nodes are ready"),
        )
    };
    let progressing = if !p.conflicts.is_empty() {
        (
            "False",
            "NameConflict",
            "blocked until the conflicting objects are removed".to_string(),
        )
    } else if p.changed > 0 {
        ("True", "Applying", format!("{} objects changed", p.changed))
    } else if ready_verdict.0 != "True" {
        (
            "True",
            "Waiting",
            "waiting for nodes or external endpoints".to_string(),
        )
    } else if p.rolling > 0 {
        (
            "True",
            "Rolling",
            format!(
                "{} node(s) restart one at a time onto the current template",
                p.rolling
            ),
        )
    } else {
        (
            "False",
            "Converged",
            "every object is as desired".to_string(),
        )
    };
    (ready_verdict, progressing)
}

/// `status.externalEndpoints` from the guest's.
fn endpoints(eps: &[m::ShardEndpoint]) -> Vec<ShardEndpointStatus> {
    eps.iter()
        .map(|e| ShardEndpointStatus {
            shard_index: e.shard as i32,
            node_ports: e.node_ports.iter().map(|p| *p as i32).collect(),
            nodes: e
                .nodes
                .iter()
                .map(|n| NodeEndpointStatus {
                    node_index: n.node as i32,
                    host: n.host.clone(),
                    port: n.port as i32,
                    ready: n.ready,
                    in_cluster: n.in_cluster.clone(),
                })
                .collect(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn time(s: &str) -> Time {
        Time(s.parse().unwrap())
    }

    fn guest(external: Option<m::ConditionStatus>) -> m::Status {
        m::Status {
            external_endpoints: external.map(|_| Vec::new()),
            conditions: external
                .map(|status| m::Condition {
                    type_: EXTERNAL_ACCESS_READY.into(),
                    status,
                    reason: "r".into(),
                    message: "m".into(),
                })
                .into_iter()
                .collect(),
            gateway: None,
        }
    }

    fn progress(changed: usize, ready: usize, formed: Option<bool>, spreading: bool) -> Progress {
        Progress {
            changed,
            ready_nodes: ready,
            wanted_nodes: 6,
            formation: formed.map(|formed| Formation {
                formed,
                waiting: "3 of 6 nodes have met".into(),
            }),
            announce_spreading: spreading,
            acl_pending: 0,
            conflicts: Vec::new(),
            rolling: 0,
            shards: 3,
            ready_shards: ready / 2,
            external_access_type: Some(ExternalAccessType::NodePort),
        }
    }

    /// The columns `kubectl get vkc` shows first: shards ready of wanted
    /// as one string, and how the nodes are reached.
    #[test]
    fn the_shards_and_external_access_columns_are_filled() {
        let g = guest(Some(m::ConditionStatus::True));
        let s = compute_reconciled(&g, progress(0, 4, Some(true), false));
        assert_eq!(s.shard_readiness.as_deref(), Some("2/3"));
        assert_eq!(s.external_access_type, Some(ExternalAccessType::NodePort));
        let json = serde_json::to_value(&s).unwrap();
        assert_eq!(json["shardReadiness"], "2/3");
        assert_eq!(json["externalAccessType"], "NodePort");
        let unknown = compute_reconciled(
            &g,
            Progress {
                external_access_type: None,
                ..progress(0, 6, Some(true), false)
            },
        );
        assert_eq!(unknown.shard_readiness.as_deref(), Some("3/3"));
        assert!(serde_json::to_value(&unknown).unwrap()["externalAccessType"].is_null());
    }

    #[test]
    fn the_state_is_one_word_for_the_outcome() {
        use ClusterState::*;
        let g = guest(None);
        let reconciled = |conflicts: bool| Outcome::Reconciled {
            guest: &g,
            progress: Progress {
                conflicts: if conflicts {
                    vec!["Service x".into()]
                } else {
                    vec![]
                },
                ..Progress::default()
            },
        };
        let refused = Outcome::Refused {
            message: "m".into(),
        };
        let failed = Outcome::Failed {
            message: "m".into(),
        };
        // (outcome, previous state, ready) => state
        let cases = [
            (&refused, Some(Ready), false, Failed),
            (&failed, Some(Ready), false, Degraded),
            (&reconciled(true), Some(Ready), false, Degraded),
            (&reconciled(false), None, true, Ready),
            (&reconciled(false), None, false, Initializing),
            (&reconciled(false), Some(Initializing), false, Initializing),
            (&reconciled(false), Some(Ready), false, Reconciling),
            (&reconciled(false), Some(Degraded), false, Reconciling),
        ];
        for (i, (outcome, previous, ready, want)) in cases.into_iter().enumerate() {
            assert_eq!(state(outcome, previous, ready), want, "case {i}");
        }
    }

    #[test]
    fn a_roll_under_way_is_progress_on_a_ready_cluster() {
        let g = guest(Some(m::ConditionStatus::True));
        let rolling = Progress {
            rolling: 2,
            ..progress(0, 6, Some(true), false)
        };
        let s = compute_reconciled(&g, rolling);
        assert_eq!(get(&s, READY), ("True", "AllNodesReady"));
        assert_eq!(get(&s, PROGRESSING), ("True", "Rolling"));
        let s = compute_reconciled(&g, progress(0, 6, Some(true), false));
        assert_eq!(get(&s, PROGRESSING), ("False", "Converged"));
    }

    #[test]
    fn a_gateway_the_api_cannot_serve_degrades_the_cluster_and_missing_listeners_are_told() {
        let mut g = guest(Some(m::ConditionStatus::False));
        g.conditions[0].reason = GATEWAY_API_UNAVAILABLE.into();
        g.conditions[0].message = "install the Gateway API CRDs".into();
        g.gateway = Some(m::GatewayStatus {
            name: "gw".into(),
            missing_listeners: vec![7001, 7003],
        });
        let s = compute_reconciled(&g, progress(0, 6, Some(true), false));
        assert_eq!(get(&s, DEGRADED), ("True", GATEWAY_API_UNAVAILABLE));
        let degraded = s.conditions.iter().find(|c| c.type_ == DEGRADED).unwrap();
        assert_eq!(degraded.message, "install the Gateway API CRDs");
        assert_eq!(s.state, Some(ClusterState::Degraded));
        assert_eq!(
            s.gateway,
            Some(GatewayStatus {
                name: "gw".into(),
                missing_listeners: vec![7001, 7003],
            })
        );
        // Any other reason (a missing listener, say) is waited for.
        g.conditions[0].reason = "GatewayListenersMissing".into();
        let s = compute_reconciled(&g, progress(0, 6, Some(true), false));
        assert_eq!(get(&s, DEGRADED), ("False", "AsExpected"));
        assert_ne!(s.state, Some(ClusterState::Degraded));
    }

    #[test]
    fn a_failed_reconcile_is_never_ready_and_keeps_what_was_computed() {
        let g = guest(Some(m::ConditionStatus::True));
        let ready = compute_reconciled(&g, progress(0, 6, Some(true), false));
        assert_eq!(ready.state, Some(ClusterState::Ready));
        assert_eq!((ready.shards, ready.ready_shards), (Some(3), Some(3)));
        let failed = compute(
            &Outcome::Failed {
                message: "apply services: 500".into(),
            },
            Some(&ready),
            Some(5),
            &time("2026-01-01T00:01:00Z"),
        );
        assert_eq!(get(&failed, READY), ("False", "ReconcileFailed"));
        assert_eq!(get(&failed, DEGRADED), ("True", "ReconcileFailed"));
        assert_eq!(failed.state, Some(ClusterState::Degraded));
        assert_eq!(failed.observed_generation, ready.observed_generation);
        assert_eq!(failed.ready_shards, Some(3));
    }

    #[test]
    fn a_shard_is_ready_when_every_node_of_it_is() {
        let node = |shard, node| m::Node {
            shard,
            node,
            name: String::new(),
            node_name: String::new(),
            port_name: String::new(),
            config: String::new(),
            announce: Vec::new(),
        };
        let wanted = [node(0, 0), node(0, 1), node(1, 0), node(1, 1)];
        let at = |shard, node| m::NodeRef { shard, node };
        let pods = [
            (at(0, 0), true),
            (at(0, 1), true),
            (at(1, 0), true),
            (at(1, 1), false),
        ];
        assert_eq!(ready_shards(pods, &wanted, 2), 1);
        assert_eq!(
            ready_shards(pods, &wanted, 3),
            1,
            "a shard without nodes is not ready"
        );
    }

    fn compute_reconciled(g: &m::Status, p: Progress) -> ValkeyClusterStatus {
        let outcome = Outcome::Reconciled {
            guest: g,
            progress: p,
        };
        compute(&outcome, None, Some(4), &time("2026-01-01T00:00:00Z"))
    }

    fn get<'a>(s: &'a ValkeyClusterStatus, type_: &str) -> (&'a str, &'a str) {
        let c = s.conditions.iter().find(|c| c.type_ == type_).unwrap();
        (&c.status, &c.reason)
    }

    #[test]
    fn ready_and_progressing_say_what_is_missing_first() {
        use m::ConditionStatus::{False, True};
        let cases = [
            // (changed, ready pods, formed, spreading, external) => Ready, Progressing
            (
                (0, 6, Some(true), false, Some(True)),
                ("True", "AllNodesReady"),
                ("False", "Converged"),
            ),
            (
                (0, 6, None, false, None),
                ("True", "AllNodesReady"),
                ("False", "Converged"),
            ),
            (
                (2, 6, Some(true), false, Some(True)),
                ("True", "AllNodesReady"),
                ("True", "Applying"),
            ),
            (
                (0, 5, Some(false), true, Some(False)),
                ("False", "NodesNotReady"),
                ("True", "Waiting"),
            ),
            (
                (0, 6, Some(false), true, Some(False)),
                ("False", "ClusterForming"),
                ("True", "Waiting"),
            ),
            (
                (0, 6, Some(true), true, Some(False)),
                ("False", "AnnouncePending"),
                ("True", "Waiting"),
            ),
            (
                (0, 6, Some(true), false, Some(False)),
                ("False", "ExternalAccessPending"),
                ("True", "Waiting"),
            ),
            (
                (3, 5, Some(true), false, Some(True)),
                ("False", "NodesNotReady"),
                ("True", "Applying"),
            ),
        ];
        for ((changed, ready, formed, spreading, external), want_ready, want_progressing) in cases {
            let g = guest(external);
            let p = progress(changed, ready, formed, spreading);
            let mut acl = p.clone();
            acl.acl_pending = 2;
            let acl_status = compute_reconciled(&g, acl);
            let acl_ready = get(&acl_status, READY);
            if want_ready.0 == "True" || want_ready.1 == "ExternalAccessPending" {
                // A user change not yet on every node is reported first.
                assert_eq!(acl_ready, ("False", "AclPending"), "acl pending");
            } else {
                assert_eq!(acl_ready, want_ready, "acl pending behind {want_ready:?}");
            }
            let outcome = Outcome::Reconciled {
                guest: &g,
                progress: p.clone(),
            };
            let s = compute(&outcome, None, Some(4), &time("2026-01-01T00:00:00Z"));
            let case = format!("{changed} {ready} {formed:?} {spreading} {external:?}");
            assert_eq!(get(&s, READY), want_ready, "{case}");
            assert_eq!(get(&s, PROGRESSING), want_progressing, "{case}");
            assert_eq!(get(&s, DEGRADED), ("False", "AsExpected"), "{case}");
            assert_eq!(
                pending(&g, &p),
                want_ready.0 != "True" || want_progressing.0 != "False",
                "{case}"
            );
            assert_eq!(s.observed_generation, Some(4));
            let types: Vec<_> = s.conditions.iter().map(|c| c.type_.as_str()).collect();
            let mut sorted = types.clone();
            sorted.sort();
            assert_eq!(types, sorted, "sorted by type");
        }
    }

    #[test]
    fn transition_times_are_kept_while_a_status_holds() {
        let g = guest(Some(m::ConditionStatus::False));
        let reconciled = |ready| Outcome::Reconciled {
            guest: &g,
            progress: progress(0, ready, None, false),
        };
        let first = compute(&reconciled(5), None, Some(1), &time("2026-01-01T00:00:00Z"));
        let again = compute(
            &reconciled(5),
            Some(&first),
            Some(1),
            &time("2026-01-01T00:01:00Z"),
        );
        assert_eq!(
            first, again,
            "nothing changed: the same status, old times kept"
        );
        let ready = compute(
            &reconciled(6),
            Some(&again),
            Some(1),
            &time("2026-01-01T00:02:00Z"),
        );
        let at = |s: &ValkeyClusterStatus, t: &str| {
            s.conditions
                .iter()
                .find(|c| c.type_ == t)
                .unwrap()
                .last_transition_time
                .clone()
        };
        assert_eq!(get(&ready, READY).1, "ExternalAccessPending");
        assert_eq!(
            at(&ready, READY),
            time("2026-01-01T00:00:00Z"),
            "still False"
        );
        assert_eq!(
            at(&ready, EXTERNAL_ACCESS_READY),
            time("2026-01-01T00:00:00Z")
        );
        let g2 = guest(Some(m::ConditionStatus::True));
        let done = compute(
            &Outcome::Reconciled {
                guest: &g2,
                progress: progress(0, 6, None, false),
            },
            Some(&ready),
            Some(1),
            &time("2026-01-01T00:03:00Z"),
        );
        assert_eq!(
            at(&done, READY),
            time("2026-01-01T00:03:00Z"),
            "became True"
        );
        assert_eq!(
            at(&done, EXTERNAL_ACCESS_READY),
            time("2026-01-01T00:03:00Z")
        );
        assert_eq!(at(&done, DEGRADED), time("2026-01-01T00:00:00Z"));
    }

    #[test]
    fn a_name_held_by_another_owner_degrades_the_cluster_and_stays_pending() {
        let g = guest(Some(m::ConditionStatus::True));
        for conflicts in [
            vec!["Service shardgate-c-shard-0"],
            vec!["Service a", "StatefulSet b"],
        ] {
            let p = Progress {
                conflicts: conflicts.iter().map(|c| c.to_string()).collect(),
                ..progress(0, 6, Some(true), false)
            };
            let s = compute(
                &Outcome::Reconciled {
                    guest: &g,
                    progress: p.clone(),
                },
                None,
                Some(1),
                &time("2026-01-01T00:00:00Z"),
            );
            assert_eq!(get(&s, DEGRADED), ("True", "NameConflict"));
            assert_eq!(get(&s, READY), ("False", "NameConflict"));
            assert_eq!(get(&s, PROGRESSING), ("False", "NameConflict"));
            let message = &s
                .conditions
                .iter()
                .find(|c| c.type_ == DEGRADED)
                .unwrap()
                .message;
            for c in &conflicts {
                assert!(message.contains(c), "{message}");
            }
            assert!(
                pending(&g, &p),
                "looked at again: the holder has no label to watch"
            );
        }
    }

    #[test]
    fn a_refusal_keeps_what_was_computed_and_adds_its_verdict() {
        let g = guest(Some(m::ConditionStatus::True));
        let good = compute(
            &Outcome::Reconciled {
                guest: &g,
                progress: progress(0, 6, Some(true), false),
            },
            None,
            Some(1),
            &time("2026-01-01T00:00:00Z"),
        );
        let refused = compute(
            &Outcome::Refused {
                message: "spec.shards: must be at least 1".into(),
            },
            Some(&good),
            Some(2),
            &time("2026-01-01T00:05:00Z"),
        );
        assert_eq!(get(&refused, DEGRADED), ("True", "InvalidSpec"));
        assert_eq!(get(&refused, PROGRESSING), ("False", "InvalidSpec"));
        assert_eq!(get(&refused, READY), ("True", "AllNodesReady"), "kept");
        assert_eq!(
            refused.observed_generation,
            Some(1),
            "still the last good one"
        );
        assert_eq!(refused.external_endpoints, good.external_endpoints);
        let degraded = refused
            .conditions
            .iter()
            .find(|c| c.type_ == DEGRADED)
            .unwrap();
        assert_eq!(degraded.message, "spec.shards: must be at least 1");
        assert_eq!(degraded.observed_generation, Some(2));
    }

    #[test]
    fn a_condition_the_guest_no_longer_reports_drops_out() {
        let with = guest(Some(m::ConditionStatus::True));
        let without = guest(None);
        let p = progress(0, 6, None, false);
        let first = compute(
            &Outcome::Reconciled {
                guest: &with,
                progress: p.clone(),
            },
            None,
            Some(1),
            &time("2026-01-01T00:00:00Z"),
        );
        let off = compute(
            &Outcome::Reconciled {
                guest: &without,
                progress: p,
            },
            Some(&first),
            Some(2),
            &time("2026-01-01T00:00:00Z"),
        );
        assert!(
            off.conditions
                .iter()
                .all(|c| c.type_ != EXTERNAL_ACCESS_READY)
        );
        assert!(off.external_endpoints.is_none());
    }
}
