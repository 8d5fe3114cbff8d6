//! Properties of the reconcile logic over random specs and observed states,
//! run natively (the differential test shows the wasm build agrees).

use std::collections::BTreeSet;

use proptest::prelude::*;
use shardgate_contract::model::*;
use shardgate_contract::names;
use shardgate_guest::reconcile;
use shardgate_guest::syntax;
use shardgate_tests::{apply::applied, strategies};

fn config() -> ProptestConfig {
    ProptestConfig {
        cases: 512,
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

proptest! {
    #![proptest_config(config())]

    /// Nothing panics, valid or not; an error lists at least one error.
    #[test]
    fn never_panics(input in strategies::input()) {
        match reconcile(&input) {
            Ok(d) => prop_assert!(d.warnings.iter().all(|w| w.severity == Severity::Warning)),
            Err(e) => {
                prop_assert!(!e.violations.is_empty());
                prop_assert!(e.violations.iter().all(|v| v.severity == Severity::Error && !v.field.is_empty()));
            }
        }
    }

    /// Each Service port reaches exactly one node: the ports of a shard's
    /// Service name each node of the shard once, a node's own Service has
    /// that node's port only, and the name is the one node's container port
    /// name.
    #[test]
    fn each_port_maps_to_exactly_one_node(input in strategies::input()) {
        let Ok(d) = reconcile(&input) else { return Ok(()) };
        let nodes = input.cluster.replicas as u32 + 1;
        for svc in &d.services {
            if let Some(node) = svc.node {
                prop_assert_eq!(svc.ports.len(), 1);
                prop_assert_eq!(svc.ports[0].node, node);
                prop_assert_eq!(svc.ports[0].port, names::CLIENT_PORT);
            } else {
                prop_assert_eq!(svc.ports.len() as u32, nodes);
            }
            let mut seen = BTreeSet::new();
            for p in &svc.ports {
                prop_assert!(seen.insert(p.node));
                if svc.node.is_none() {
                    prop_assert_eq!(p.port, names::CLIENT_PORT + p.node);
                }
                let targets: Vec<_> = d.nodes.iter()
                    .filter(|n| n.shard == svc.shard && n.port_name == p.name)
                    .map(|n| n.node)
                    .collect();
                prop_assert_eq!(targets, vec![p.node]);
            }
        }
    }

    /// Every generated name is valid for its kind.
    #[test]
    fn names_are_valid(input in strategies::input()) {
        let Ok(d) = reconcile(&input) else { return Ok(()) };
        for s in &d.services {
            prop_assert!(syntax::is_dns_label(&s.name) && s.name.starts_with(|c: char| c.is_ascii_lowercase()), "{}", s.name);
            for p in &s.ports {
                prop_assert!(syntax::is_iana_service_name(&p.name), "{}", p.name);
            }
        }
        for n in &d.nodes {
            prop_assert!(syntax::is_dns_label(&n.name) && n.name.len() <= syntax::MAX_STATEFULSET_NAME, "{}", n.name);
            prop_assert!(syntax::is_iana_service_name(&n.port_name), "{}", n.port_name);
            if let Some((_, host)) = n.announce.iter().find(|(k, _)| k == "cluster-announce-hostname")
                && !host.is_empty() {
                prop_assert!(host.len() < 256 && host.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'-'), "{}", host);
            }
        }
        for (k, _) in &d.labels {
            prop_assert!(syntax::is_qualified_name(k));
        }
    }

    /// Same input, same output; and the order of observed objects does not
    /// matter (when no object is listed twice).
    #[test]
    fn output_is_deterministic(input in strategies::input()) {
        let a = reconcile(&input);
        prop_assert_eq!(&a, &reconcile(&input));
        let mut dedup = input.clone();
        let mut seen = BTreeSet::new();
        dedup.observed.services.retain(|s| seen.insert((s.shard, s.node)));
        let mut seen = BTreeSet::new();
        dedup.observed.pods.retain(|p| seen.insert((p.shard, p.node)));
        for s in &mut dedup.observed.services {
            let mut seen = BTreeSet::new();
            s.ports.retain(|p| seen.insert(p.node));
        }
        let mut reversed = dedup.clone();
        reversed.observed.services.reverse();
        reversed.observed.pods.reverse();
        for s in &mut reversed.observed.services {
            s.ports.reverse();
        }
        prop_assert_eq!(reconcile(&dedup), reconcile(&reversed));
    }

    /// The steady state is a fixed point: once what the last output asked for
    /// exists, reconciling again asks for exactly that again. A topology
    /// switch takes one round more (the old Services are wanted until the
    /// new ones exist), so a fixed point is reached within two.
    #[test]
    fn steady_state_is_a_fixed_point(input in strategies::input()) {
        let Ok(first) = reconcile(&input) else { return Ok(()) };
        let mut observed = applied(&first, &input.observed);
        let mut last = reconcile(&Input { observed: observed.clone(), ..input.clone() }).unwrap();
        for _ in 0..2 {
            let next = applied(&last, &observed);
            if next.services == observed.services {
                break;
            }
            observed = next;
            last = reconcile(&Input { observed: observed.clone(), ..input.clone() }).unwrap();
        }
        let again = applied(&last, &observed);
        prop_assert_eq!(&observed.services, &again.services);
        let next = reconcile(&Input { observed: again, ..input.clone() }).unwrap();
        prop_assert_eq!(last, next);
    }

    /// No two different cluster names generate the same object name.
    #[test]
    fn no_cross_cluster_collisions(a in strategies::cluster(), b_name in strategies::name()) {
        prop_assume!(a.name != b_name && a.shards > 0 && a.shards < 50 && a.replicas >= 0);
        let b = Cluster { name: b_name, ..a.clone() };
        let mine: BTreeSet<_> = shardgate_guest::generated_names(&a).into_iter().collect();
        for n in shardgate_guest::generated_names(&b) {
            prop_assert!(!mine.contains(&n), "{} generated by both {} and {}", n, a.name, b.name);
        }
    }
}

/// Prefix-related names are where collisions would appear; check them all.
#[test]
fn prefix_related_cluster_names_do_not_collide() {
    let base = Cluster {
        name: "c".into(),
        shards: 12,
        replicas: 11,
        ..Cluster::default()
    };
    let mine: BTreeSet<_> = shardgate_guest::generated_names(&base)
        .into_iter()
        .collect();
    for other in [
        "c-shard",
        "c-shard-0",
        "c-0",
        "c-0-1",
        "c-1-0",
        "c-11",
        "c-shard-1-0",
        "c-shard-0-node",
        "c-shard-0-node-1",
    ] {
        let o = Cluster {
            name: other.into(),
            ..base.clone()
        };
        for n in shardgate_guest::generated_names(&o) {
            assert!(!mine.contains(&n), "{n} from {other}");
        }
        let input = Input {
            cluster: base.clone(),
            observed: Observed::default(),
            other_clusters: vec![other.into()],
            pinned_elsewhere: Vec::new(),
            credentials: Default::default(),
        };
        assert!(reconcile(&input).is_ok());
    }
}
