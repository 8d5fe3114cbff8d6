//! The meets each node made lately to spread news, kept across looks so
//! that the links those meets broke are not taken for moved nodes.
//!
//! A meet breaks a link for a moment: the met node takes the meet's
//! connection as its inbound link from the meeting node and closes the one
//! it had, which was the meeting node's own link to it. The meeting node
//! then lists the met node as disconnected until its cluster cron connects
//! again: 0.1-0.2 s later for one meet, up to 0.5 s when eight nodes meet
//! each other at once (measured on loopback). The topology plan meets again
//! a known node whose link is down while it answers, as one that moved
//! (a recreated pod has a new IP); a look in that window would do so, and
//! break the link again. Turning external access off took several such
//! rounds.
//!
//! So for [`RELINK_WITHIN`] after a node met another to spread news, its
//! link to that node is reported linked. The met node answered at its pod
//! IP, where it was met, so it has not moved.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use shardgate_contract::model::ValkeyNode;

/// How long a link broken by a spread's meet is reported linked: Valkey
/// redials it within 0.5 s.
pub const RELINK_WITHIN: Duration = Duration::from_secs(1);

/// The IDs each node (by ID) met lately to spread news, and when. Node IDs
/// are random and unique, so one map serves every cluster.
#[derive(Debug, Default)]
pub struct Spreads {
    met: Mutex<HashMap<String, (Instant, Vec<String>)>>,
}

impl Spreads {
    /// Node `node` met the nodes `met` at `now`: added to whom it met
    /// within [`RELINK_WITHIN`] before. Each met node is recorded as having
    /// met `node` too: Valkey 9 frees its own link to a known node that
    /// meets it, and redials it as soon.
    pub fn record(&self, node: &str, met: Vec<String>, now: Instant) {
        let mut all = self.met.lock().unwrap();
        for id in &met {
            add(&mut all, id, node, now);
        }
        for id in &met {
            add(&mut all, node, id, now);
        }
    }

    /// Node `node` is going (its process restarts, and its ID with it):
    /// no link to it is reported linked for a meet any more, so its ghost
    /// can be forgotten as soon as no live link to it is left.
    pub fn gone(&self, node: &str) {
        let mut all = self.met.lock().unwrap();
        all.remove(node);
        for (_, ids) in all.values_mut() {
            ids.retain(|id| id != node);
        }
    }

    /// Reports as linked, in the facts of a node that met others within
    /// [`RELINK_WITHIN`] of `now`, its links to them; forgets older meets.
    pub fn relink(&self, facts: &mut ValkeyNode, now: Instant) {
        let mut met = self.met.lock().unwrap();
        met.retain(|_, (at, _)| now.duration_since(*at) < RELINK_WITHIN);
        if let Some((_, ids)) = met.get(&facts.id) {
            relink(facts, ids);
        }
    }
}

/// Adds `id` to whom `node` met lately, as of `now`.
fn add(all: &mut HashMap<String, (Instant, Vec<String>)>, node: &str, id: &str, now: Instant) {
    let (at, ids) = all.entry(node.to_string()).or_insert((now, Vec::new()));
    if now.duration_since(*at) >= RELINK_WITHIN {
        ids.clear();
    }
    *at = now;
    if !ids.iter().any(|known| known == id) {
        ids.push(id.to_string());
    }
}

/// Reports as linked the links of the node that reported `facts` to the
/// nodes `met`, unless the cluster agrees one failed.
fn relink(facts: &mut ValkeyNode, met: &[String]) {
    for peer in facts
        .peers
        .iter_mut()
        .filter(|p| !p.failed && met.contains(&p.id))
    {
        peer.linked = true;
    }
}

#[cfg(test)]
mod tests {
    use shardgate_contract::model::Peer;

    use super::*;

    fn peer(id: &str, failed: bool, linked: bool) -> Peer {
        Peer {
            id: id.into(),
            failed,
            linked,
        }
    }

    fn node(id: &str, peers: Vec<Peer>) -> ValkeyNode {
        ValkeyNode {
            id: id.into(),
            peers,
            ..ValkeyNode::default()
        }
    }

    #[test]
    fn only_links_to_nodes_met_are_reported_linked() {
        let met = ["b".to_string(), "c".to_string()];
        let mut facts = node(
            "a",
            vec![
                peer("b", false, false),
                peer("c", false, true),
                // Not met: a node that moved, met again by the plan.
                peer("d", false, false),
                // Met, but the cluster agrees it failed.
                peer("e", true, false),
            ],
        );
        let mut more = met.to_vec();
        more.push("e".into());
        relink(&mut facts, &more);
        assert_eq!(
            facts.peers,
            vec![
                peer("b", false, true),
                peer("c", false, true),
                peer("d", false, false),
                peer("e", true, false),
            ]
        );
    }

    #[test]
    fn a_node_gone_is_no_longer_reported_linked_by_anyone() {
        let spreads = Spreads::default();
        let t0 = Instant::now();
        spreads.record("a", vec!["b".into(), "c".into()], t0);
        spreads.gone("b");
        let mut a = node("a", vec![peer("b", false, false), peer("c", false, false)]);
        spreads.relink(&mut a, t0);
        assert_eq!(
            a.peers,
            vec![peer("b", false, false), peer("c", false, true)]
        );
        // b's own record goes too.
        let mut b = node("b", vec![peer("a", false, false)]);
        spreads.relink(&mut b, t0);
        assert_eq!(b.peers, vec![peer("a", false, false)]);
    }

    #[test]
    fn a_second_spread_within_the_while_adds_to_the_first() {
        let spreads = Spreads::default();
        let t0 = Instant::now();
        spreads.record("a", vec!["b".into(), "c".into()], t0);
        spreads.record("a", vec!["c".into()], t0 + RELINK_WITHIN / 2);
        let mut facts = node("a", vec![peer("b", false, false), peer("c", false, false)]);
        // Past the first spread's second, within the second's.
        spreads.relink(&mut facts, t0 + RELINK_WITHIN);
        assert!(facts.peers.iter().all(|p| p.linked), "{:?}", facts.peers);
        // A spread after the while starts afresh.
        let later = t0 + RELINK_WITHIN * 3;
        spreads.record("a", vec!["c".into()], later);
        let mut facts = node("a", vec![peer("b", false, false), peer("c", false, false)]);
        spreads.relink(&mut facts, later);
        assert_eq!(
            facts.peers,
            vec![peer("b", false, false), peer("c", false, true)]
        );
    }

    #[test]
    fn a_meet_is_remembered_for_its_node_and_only_for_a_while() {
        let spreads = Spreads::default();
        let t0 = Instant::now();
        spreads.record("a", vec!["b".into()], t0);
        let broken = || node("a", vec![peer("b", false, false)]);
        // b's link to a, for b
        let met = || node("b", vec![peer("a", false, false)]);
        // (node, when) => b reported linked
        for (id, after, want) in [
            ("a", Duration::ZERO, true),
            ("a", RELINK_WITHIN / 2, true),
            // Another node's link to b is its own.
            ("x", Duration::ZERO, false),
            // b dropped its link to a when a met it.
            ("b", Duration::ZERO, true),
            ("a", RELINK_WITHIN, false),
            // Forgotten once old, even when looked at with an earlier time.
            ("a", Duration::ZERO, false),
        ] {
            let mut facts = if id == "b" { met() } else { broken() };
            facts.id = id.into();
            spreads.relink(&mut facts, t0 + after);
            assert_eq!(facts.peers[0].linked, want, "{id} after {after:?}");
        }
    }
}
