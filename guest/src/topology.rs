//! The Valkey cluster's formation and upkeep, as a pure plan.
//!
//! The host reads facts from every node that answers (`CLUSTER MYID`, its
//! view of `CLUSTER NODES`, migration and replication state), always at the
//! node's pod IP, and passes them here by shard and node index. This module
//! decides what to do next; the host does it and asks again with fresh
//! facts. Each plan holds the steps of one phase only, so a step never rests
//! on a fact an earlier step of the same plan changed:
//!
//! 1. **meet**: every answering node joins the first node of the spec;
//! 2. **assign**: a cluster with no slots gets all 16384, evenly across the
//!    shard primaries (`ADDSLOTSRANGE`); slots that lost their owner go to
//!    the shard whose even share holds them;
//! 3. **replicate**: every other node of a shard replicates the node that
//!    serves the shard's slots (or node 0 of a new shard);
//! 4. **hand over**: a node past `spec.replicas` that serves its shard's
//!    slots (after a failover, say) hands them to a staying replica in sync
//!    (`CLUSTER FAILOVER`), so no departing node is removed while it serves;
//! 5. **balance**: slots move with Valkey 9's atomic slot migration, off
//!    departing shards and off shards above their share, onto shards below
//!    it (scale-in and scale-out), the fewest slots possible;
//! 6. **forget**: departing nodes that serve nothing, and node IDs nothing
//!    owns any more (a pod that came back with a new ID), are forgotten;
//! 7. **roll**: pods that run an old template restart, one at a time.
//!
//! A departing node's objects are kept ([`Topology::departing`]) until it
//! serves nothing and no node of the spec knows it.
//!
//! Nodes are identified by ID, never by address: with client-only announce
//! settings, `CLUSTER NODES` shows every client (the operator included) the
//! external endpoints.

use std::collections::btree_map::Entry;
use std::collections::{BTreeMap, BTreeSet};

use shardgate_contract::model::{
    AddSlots, Meet, Migrate, NodeRef, ObservedPod, Replicate, SlotRange, Step, Topology, ValkeyNode,
};

use crate::server::Server;

/// Hash slots in a Valkey cluster.
pub const SLOTS: u32 = 16384;

/// Slots per shard when `shards` share them evenly: the first
/// `16384 % shards` shards take one more.
pub fn quotas(shards: u32) -> Vec<u32> {
    (0..shards)
        .map(|s| SLOTS / shards + u32::from(s < SLOTS % shards))
        .collect()
}

/// The contiguous even share of each shard, in shard order.
pub fn even_ranges(shards: u32) -> Vec<SlotRange> {
    let mut start = 0;
    quotas(shards)
        .into_iter()
        .map(|q| {
            let r = SlotRange {
                start,
                end: start + q - 1,
            };
            start += q;
            r
        })
        .collect()
}

/// Contiguous ranges of a sorted list of slots.
pub fn ranges(slots: &[u32]) -> Vec<SlotRange> {
    let mut out: Vec<SlotRange> = Vec::new();
    for &s in slots {
        match out.last_mut() {
            Some(r) if r.end + 1 == s => r.end = s,
            _ => out.push(SlotRange { start: s, end: s }),
        }
    }
    out
}

fn node_ref(n: &ValkeyNode) -> NodeRef {
    NodeRef {
        shard: n.shard,
        node: n.node,
    }
}

fn owns_slots(n: &ValkeyNode) -> bool {
    !n.slots.is_empty()
}

/// `n` knows `id` but its link to it is down or suspected.
fn unlinked(n: &ValkeyNode, id: &str) -> bool {
    n.peers.iter().any(|p| p.id == id && !p.linked)
}

fn knows(n: &ValkeyNode, id: &str) -> bool {
    n.id == id || n.peers.iter().any(|p| p.id == id)
}

/// The facts, indexed.
struct View<'a> {
    shards: u32,
    nodes: u32,
    /// One fact per (shard, node), in index order.
    facts: Vec<&'a ValkeyNode>,
    /// Index into `facts` of the node serving each slot.
    owner: Vec<Option<usize>>,
    /// How many slots each fact serves, counted slot by slot: a range that
    /// is inverted or past 16383 serves none.
    served: Vec<u32>,
    /// Some slot is claimed by two answering nodes.
    contested: bool,
    /// Answers at a place that had answered already (two nodes at one
    /// place, which the host never sends): nothing is planned with them.
    again: Vec<&'a ValkeyNode>,
}

impl<'a> View<'a> {
    fn new(shards: u32, nodes: u32, all: &'a [ValkeyNode]) -> Self {
        let mut by_ref: BTreeMap<(u32, u32), &ValkeyNode> = BTreeMap::new();
        let mut again = Vec::new();
        for f in all {
            match by_ref.entry((f.shard, f.node)) {
                Entry::Vacant(e) => {
                    e.insert(f);
                }
                Entry::Occupied(_) => again.push(f),
            }
        }
        let facts: Vec<&ValkeyNode> = by_ref.into_values().collect();
        let mut owner = vec![None; SLOTS as usize];
        let mut contested = false;
        for (i, f) in facts.iter().enumerate() {
            for r in &f.slots {
                for slot in r.start..=r.end.min(SLOTS - 1) {
                    let was = owner[slot as usize].replace(i);
                    contested |= was.is_some_and(|j| j != i);
                }
            }
        }
        let mut served = vec![0; facts.len()];
        for &i in owner.iter().flatten() {
            served[i] += 1;
        }
        View {
            shards,
            nodes,
            facts,
            owner,
            served,
            contested,
            again,
        }
    }

    /// How many slots `f` (one of `facts`) serves.
    fn served_by(&self, f: &ValkeyNode) -> u32 {
        self.facts
            .iter()
            .position(|g| std::ptr::eq(*g, f))
            .map_or(0, |i| self.served[i])
    }

    fn is_desired(&self, n: &ValkeyNode) -> bool {
        n.shard < self.shards && n.node < self.nodes
    }

    fn desired(&self) -> impl Iterator<Item = &'a ValkeyNode> + '_ {
        self.facts.iter().copied().filter(|f| self.is_desired(f))
    }

    fn get(&self, shard: u32, node: u32) -> Option<&'a ValkeyNode> {
        self.facts
            .iter()
            .copied()
            .find(|f| f.shard == shard && f.node == node)
    }

    fn by_id(&self, id: &str) -> Option<&'a ValkeyNode> {
        self.facts.iter().copied().find(|f| f.id == id)
    }

    /// Desired nodes that did not answer.
    fn missing(&self) -> Vec<NodeRef> {
        (0..self.shards)
            .flat_map(|shard| (0..self.nodes).map(move |node| NodeRef { shard, node }))
            .filter(|r| self.get(r.shard, r.node).is_none())
            .collect()
    }

    fn owned_slots(&self) -> usize {
        self.owner.iter().filter(|o| o.is_some()).count()
    }

    /// The node that serves shard `shard`'s slots (a departing node of the
    /// shard included, until it hands over); for a shard without slots, the
    /// node its members already follow, else node 0.
    fn primary(&self, shard: u32) -> Result<Option<&'a ValkeyNode>, String> {
        let serving: Vec<&ValkeyNode> = self
            .facts
            .iter()
            .copied()
            .filter(|f| f.shard == shard && owns_slots(f))
            .collect();
        let members: Vec<&ValkeyNode> = self
            .facts
            .iter()
            .copied()
            .filter(|f| f.shard == shard && f.node < self.nodes)
            .collect();
        match serving.as_slice() {
            [one] => return Ok(Some(*one)),
            [] => {}
            _ => {
                return Err(format!(
                    "shard {shard} has more than one node serving slots"
                ));
            }
        }
        let followed = members
            .iter()
            .filter_map(|f| f.primary.as_deref())
            .filter_map(|id| self.by_id(id))
            .find(|p| p.shard == shard && p.node < self.nodes && p.primary.is_none());
        if let Some(p) = followed {
            return Ok(Some(p));
        }
        Ok(members
            .iter()
            .copied()
            .find(|f| f.node == 0 && f.primary.is_none())
            .or_else(|| members.iter().copied().find(|f| f.primary.is_none())))
    }
}

fn describe(r: NodeRef) -> String {
    format!("shard {} node {}", r.shard, r.node)
}

/// What the plan needs to know of the spec.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shape {
    pub shards: u32,
    /// Nodes per shard.
    pub nodes: u32,
    /// Each node keeps its data on a volume, so a primary without a replica
    /// may restart (its shard is briefly unavailable, nothing is lost).
    pub persistent: bool,
}

/// The next steps for a cluster of `shape`. `pods` are the observed pods,
/// `facts` what their Valkey nodes report; `None` means Valkey is not
/// managed: no plan and nothing drains.
pub fn plan(shape: Shape, pods: &[ObservedPod], facts: Option<&[ValkeyNode]>) -> Topology {
    let Shape {
        shards,
        nodes,
        persistent,
    } = shape;
    let Some(facts) = facts else {
        return Topology {
            waiting: "the operator does not manage Valkey".into(),
            ..Topology::default()
        };
    };
    let view = View::new(shards, nodes, facts);
    let departing = departing(&view, pods);
    let (steps, waiting) = next_steps(&view, pods, persistent);
    let formed = steps.is_empty() && waiting.is_none() && is_formed(&view);
    let waiting = match (formed, waiting) {
        (true, _) => String::new(),
        (false, Some(w)) => w,
        (false, None) if !steps.is_empty() => format!("{} step(s) to run", steps.len()),
        (false, None) => not_formed_reason(&view),
    };
    Topology {
        steps,
        formed,
        waiting,
        departing,
    }
}

/// Whether some spec makes a node at `at` (a shard below
/// [`MAX_SHARDS`](crate::validate::MAX_SHARDS), a node index at most
/// [`MAX_REPLICAS`](crate::validate::MAX_REPLICAS)): only such a node can
/// have objects of the cluster to keep. A pod or an answer at any other
/// place is not the cluster's own (a label edited by hand, a corrupt read).
pub fn placeable(at: NodeRef) -> bool {
    at.shard < crate::validate::MAX_SHARDS as u32 && at.node <= crate::validate::MAX_REPLICAS as u32
}

/// Nodes past the spec that must stay: a pod that did not answer (it cannot
/// be checked), or a node that serves slots or is still known by a node of
/// the spec. Everything else past the spec may go, and nothing at a place
/// no spec makes ([`placeable`]) is kept.
fn departing(view: &View<'_>, pods: &[ObservedPod]) -> Vec<NodeRef> {
    let holds = |f: &ValkeyNode| owns_slots(f) || view.desired().any(|d| knows(d, &f.id));
    let mut out = BTreeSet::new();
    for p in pods {
        let at = NodeRef {
            shard: p.shard,
            node: p.node,
        };
        if at.shard < view.shards && at.node < view.nodes {
            continue;
        }
        if view.get(p.shard, p.node).is_none_or(holds) {
            out.insert(at);
        }
    }
    let every_answer = view.facts.iter().chain(&view.again);
    for f in every_answer.filter(|f| !view.is_desired(f)) {
        if holds(f) {
            out.insert(node_ref(f));
        }
    }
    out.into_iter().filter(|at| placeable(*at)).collect()
}

/// The first phase with work: its steps, or why nothing can be done yet.
fn next_steps(
    view: &View<'_>,
    pods: &[ObservedPod],
    persistent: bool,
) -> (Vec<Step>, Option<String>) {
    if let Some(f) = view.again.first() {
        return (
            Vec::new(),
            Some(format!(
                "{} answered more than once (two node IDs at one place); nothing is planned \
                 until one node answers there",
                describe(node_ref(f))
            )),
        );
    }
    let Some(anchor) = view.desired().next() else {
        return (Vec::new(), Some("no node of the spec answered yet".into()));
    };
    let phases: [&dyn Fn() -> Phase; 7] = [
        &|| meet(view, anchor),
        &|| assign(view),
        &|| replicate(view),
        &|| hand_over(view),
        &|| balance(view),
        &|| forget(view, pods),
        &|| roll(view, pods, persistent),
    ];
    for phase in phases {
        match phase() {
            Phase::Done => continue,
            Phase::Steps(steps) => return (steps, None),
            Phase::Wait(why) => return (Vec::new(), Some(why)),
        }
    }
    (Vec::new(), None)
}

enum Phase {
    /// Nothing to do in this phase.
    Done,
    Steps(Vec<Step>),
    /// Work remains but cannot be done yet.
    Wait(String),
}

fn steps_or_done(steps: Vec<Step>) -> Phase {
    if steps.is_empty() {
        Phase::Done
    } else {
        Phase::Steps(steps)
    }
}

/// Every answering node that does not know the anchor (and is not known by
/// it) meets it. While some do, every two other nodes that do not know each
/// other meet directly too: gossip would spread them, but takes about a
/// second per round on a cluster bus (measured: 10x2 replicas knew their
/// primaries after 0.47 s meshed, 1.2-2.2 s through the anchor alone), and
/// a primary given its slots after Valkey's 2 s writable delay waits a
/// rejoin delay (up to 5 s) more before it serves. The phase is done once
/// every node knows the anchor; gossip finishes the rest. A node that
/// serves slots of its own is never merged into a cluster that serves
/// slots.
fn meet(view: &View<'_>, anchor: &ValkeyNode) -> Phase {
    let cluster_serves = view
        .owner
        .iter()
        .flatten()
        .any(|&i| knows(anchor, &view.facts[i].id));
    let mut steps = Vec::new();
    for f in view.desired() {
        if f.id == anchor.id {
            continue;
        }
        if knows(anchor, &f.id) || knows(f, &anchor.id) {
            // Known, but the link is down although both answer: one of
            // them moved (a recreated pod has a new IP; when every pod of
            // a cluster is recreated at once, no node can find another).
            // Meeting again at the pod IP tells the other where it is.
            if unlinked(anchor, &f.id) {
                steps.push(Step::Meet(Meet {
                    node: node_ref(anchor),
                    peer: node_ref(f),
                }));
            }
            if unlinked(f, &anchor.id) {
                steps.push(Step::Meet(Meet {
                    node: node_ref(f),
                    peer: node_ref(anchor),
                }));
            }
            continue;
        }
        if owns_slots(f) && cluster_serves {
            return Phase::Wait(format!(
                "{} serves slots but is not part of the cluster; two clusters are never merged",
                describe(node_ref(f))
            ));
        }
        steps.push(Step::Meet(Meet {
            node: node_ref(f),
            peer: node_ref(anchor),
        }));
    }
    if steps.is_empty() {
        return Phase::Done;
    }
    let others: Vec<&ValkeyNode> = view.desired().filter(|f| f.id != anchor.id).collect();
    for (i, f) in others.iter().enumerate() {
        for g in &others[i + 1..] {
            if !knows(f, &g.id) && !knows(g, &f.id) {
                steps.push(Step::Meet(Meet {
                    node: node_ref(f),
                    peer: node_ref(g),
                }));
            }
        }
    }
    steps_or_done(steps)
}

/// Slots nobody serves: all of them on a new cluster, once every primary
/// answers; otherwise the ones that lost their owner.
fn assign(view: &View<'_>) -> Phase {
    let owned = view.owned_slots();
    if owned == SLOTS as usize {
        return Phase::Done;
    }
    if view.facts.iter().any(|f| f.migrating) {
        return Phase::Wait("a slot migration is under way".into());
    }
    let mut primaries = Vec::new();
    for shard in 0..view.shards {
        match view.primary(shard) {
            Ok(Some(p)) if owned > 0 || p.node == 0 => primaries.push(p),
            Ok(_) => {
                return Phase::Wait(format!(
                    "shard {shard} has no primary that answers yet; slots are assigned once \
                     every primary answers"
                ));
            }
            Err(e) => return Phase::Wait(e),
        }
    }
    let mut steps = Vec::new();
    for (p, share) in primaries.iter().zip(even_ranges(view.shards)) {
        let free: Vec<u32> = (share.start..=share.end)
            .filter(|&s| view.owner[s as usize].is_none())
            .collect();
        if !free.is_empty() {
            steps.push(Step::AddSlots(AddSlots {
                node: node_ref(p),
                slots: ranges(&free),
            }));
        }
    }
    steps_or_done(steps)
}

/// Every other node of a shard replicates the shard's primary.
fn replicate(view: &View<'_>) -> Phase {
    let mut steps = Vec::new();
    for shard in 0..view.shards {
        let primary = match view.primary(shard) {
            Ok(Some(p)) => p,
            Ok(None) => continue,
            Err(e) => return Phase::Wait(e),
        };
        for f in view
            .desired()
            .filter(|f| f.shard == shard && f.id != primary.id)
        {
            if f.primary.as_deref() == Some(primary.id.as_str()) {
                continue;
            }
            if owns_slots(f) {
                return Phase::Wait(format!(
                    "{} serves slots but should replicate {}",
                    describe(node_ref(f)),
                    describe(node_ref(primary))
                ));
            }
            if !knows(f, &primary.id) {
                return Phase::Wait(format!(
                    "{} does not know {} yet (gossip)",
                    describe(node_ref(f)),
                    describe(node_ref(primary))
                ));
            }
            steps.push(Step::Replicate(Replicate {
                node: node_ref(f),
                primary: node_ref(primary),
            }));
        }
    }
    steps_or_done(steps)
}

/// A node past `spec.replicas` that serves its shard's slots makes way: a
/// staying replica of it that is in sync takes over with `CLUSTER FAILOVER`
/// (no acknowledged write is lost), and the departing node becomes a
/// replica that serves nothing, to be forgotten and removed.
fn hand_over(view: &View<'_>) -> Phase {
    let mut steps = Vec::new();
    for f in view
        .facts
        .iter()
        .filter(|f| f.shard < view.shards && f.node >= view.nodes && owns_slots(f))
    {
        if f.migrating {
            return Phase::Wait(format!(
                "{} leaves the spec but a slot migration to or from it is under way",
                describe(node_ref(f))
            ));
        }
        let heir = view
            .desired()
            .filter(|r| r.shard == f.shard && r.primary.as_deref() == Some(f.id.as_str()))
            .filter(|r| r.synced)
            .min_by_key(|r| r.node);
        match heir {
            Some(r) => steps.push(Step::Failover(node_ref(r))),
            None => {
                return Phase::Wait(format!(
                    "{} leaves the spec but serves shard {}'s slots: it hands them over once \
                     a staying replica of it is in sync",
                    describe(node_ref(f)),
                    f.shard
                ));
            }
        }
    }
    steps_or_done(steps)
}

/// Moves the fewest slots that bring every shard of the spec to its even
/// share, emptying departing shards.
fn balance(view: &View<'_>) -> Phase {
    if view.facts.iter().any(|f| f.migrating) {
        return Phase::Wait("a slot migration is under way".into());
    }
    let quotas = quotas(view.shards);
    let mut primaries = Vec::with_capacity(view.shards as usize);
    for shard in 0..view.shards {
        match view.primary(shard) {
            Ok(Some(p)) => primaries.push(p),
            Ok(None) => return Phase::Wait(format!("shard {shard} has no primary that answers")),
            Err(e) => return Phase::Wait(e),
        }
    }
    // Slots per serving node, ascending.
    let mut held: BTreeMap<usize, Vec<u32>> = BTreeMap::new();
    for (slot, owner) in view.owner.iter().enumerate() {
        if let Some(i) = owner {
            held.entry(*i).or_default().push(slot as u32);
        }
    }
    // Surplus: everything a departing node serves; a spec shard's slots
    // beyond its share (its highest ones).
    let mut surplus: Vec<(usize, u32)> = Vec::new();
    let mut count = vec![0u32; view.shards as usize];
    for (&i, slots) in &held {
        let f = view.facts[i];
        if !view.is_desired(f) {
            surplus.extend(slots.iter().map(|&s| (i, s)));
            continue;
        }
        let q = quotas[f.shard as usize] as usize;
        if slots.len() > q {
            surplus.extend(slots[q..].iter().map(|&s| (i, s)));
        }
        count[f.shard as usize] += slots.len().min(q) as u32;
    }
    // Hand the surplus, in order, to the shards below their share.
    let mut moves: BTreeMap<(usize, u32), Vec<u32>> = BTreeMap::new();
    let mut next = surplus.into_iter();
    'shards: for shard in 0..view.shards as usize {
        while count[shard] < quotas[shard] {
            let Some((from, slot)) = next.next() else {
                break 'shards;
            };
            // A shard with surplus is at its share, so never receives.
            debug_assert_ne!(view.facts[from].shard as usize, shard);
            moves.entry((from, shard as u32)).or_default().push(slot);
            count[shard] += 1;
        }
    }
    let mut steps = Vec::new();
    for ((from, shard), mut slots) in moves {
        slots.sort_unstable();
        let source = view.facts[from];
        let target = primaries[shard as usize];
        let server = Server::parse(&source.version);
        if server != Server::Unknown && !server.migrates_atomically() {
            return Phase::Wait(format!(
                "{} runs Valkey {}: moving slots needs atomic slot migration (Valkey 9.0 or \
                 newer), so the shards keep their slots",
                describe(node_ref(source)),
                server.text()
            ));
        }
        if !knows(source, &target.id) {
            return Phase::Wait(format!(
                "{} does not know {} yet (gossip)",
                describe(node_ref(source)),
                describe(node_ref(target))
            ));
        }
        steps.push(Step::Migrate(Migrate {
            source: node_ref(source),
            target: node_ref(target),
            slots: ranges(&slots),
        }));
    }
    steps_or_done(steps)
}

/// Departing nodes that serve nothing and nobody follows; IDs that no node
/// of ours holds any more. An ID that a node of the spec, or any node that
/// serves slots, reports as its own is never forgotten, whoever else
/// reports it too: `CLUSTER FORGET` goes by ID (two nodes with one ID: a
/// copied `nodes.conf`), and an empty ID names nobody.
fn forget(view: &View<'_>, pods: &[ObservedPod]) -> Phase {
    let mut ids: BTreeSet<&str> = BTreeSet::new();
    for f in view.facts.iter().filter(|f| !view.is_desired(f)) {
        let followed = view
            .desired()
            .any(|d| d.primary.as_deref() == Some(f.id.as_str()));
        let claimed = view
            .facts
            .iter()
            .any(|g| g.id == f.id && (view.is_desired(g) || owns_slots(g)));
        if !owns_slots(f)
            && !followed
            && !claimed
            && !f.id.is_empty()
            && view.desired().any(|d| knows(d, &f.id))
        {
            ids.insert(&f.id);
        }
    }
    // An ID held by no node of ours is a ghost (a pod that came back with a
    // new ID, a removed replica) once Valkey flags it failed. A restarted
    // pod's old ID is flagged failed only `cluster-node-timeout` later, and
    // a rolling restart would wait that long per pod; so it goes sooner
    // when it cannot be a primary whose replica Valkey must still promote
    // (which needs the failed flag): no node of ours has a live link to
    // it, none follows it, and nodes of ours serve every slot. Only when
    // every pod answered: an unanswering node may be the one holding it.
    let every_pod_answered = pods.iter().all(|p| view.get(p.shard, p.node).is_some());
    let served_by_us = view.owned_slots() == SLOTS as usize;
    let gone_quietly = |id: &str| {
        served_by_us
            && !view.facts.iter().any(|f| f.primary.as_deref() == Some(id))
            && !view
                .desired()
                .any(|d| d.peers.iter().any(|q| q.id == id && q.linked))
    };
    if view.missing().is_empty() && every_pod_answered {
        // Every peer of every node is looked up: by set, not by scan (a
        // 400-node cluster has 160,000 of them).
        let ours: BTreeSet<&str> = view.facts.iter().map(|f| f.id.as_str()).collect();
        for d in view.desired() {
            for p in &d.peers {
                if !ours.contains(p.id.as_str()) && (p.failed || gone_quietly(&p.id)) {
                    ids.insert(&p.id);
                }
            }
        }
    }
    steps_or_done(ids.into_iter().map(|id| Step::Forget(id.into())).collect())
}

/// Pods that must restart to change (image, resources), one at a time and
/// only on a healthy cluster: replicas first; a primary first hands over to
/// an in-sync replica (`CLUSTER FAILOVER`), then restarts as a replica. A
/// primary without a replica restarts only when its data is on a volume
/// (`persistent`); otherwise its data lives in the pod and it never does.
fn roll(view: &View<'_>, pods: &[ObservedPod], persistent: bool) -> Phase {
    let outdated: Vec<&ValkeyNode> = pods
        .iter()
        .filter(|p| p.outdated)
        .filter_map(|p| view.get(p.shard, p.node))
        .filter(|f| view.is_desired(f))
        .collect();
    if outdated.is_empty() {
        return Phase::Done;
    }
    let unhealthy = if !is_formed(view) {
        Some(not_formed_reason(view))
    } else {
        pods.iter().find(|p| !p.ready).map(|p| {
            format!(
                "{} is not ready",
                describe(NodeRef {
                    shard: p.shard,
                    node: p.node
                })
            )
        })
    };
    if let Some(why) = unhealthy {
        return Phase::Wait(format!(
            "{} pod(s) wait to be restarted until the cluster is healthy: {why}",
            outdated.len()
        ));
    }
    // A replica serves nothing: a node that names a primary but still
    // serves slots (a failover half seen) is restarted only as a primary.
    if let Some(replica) = outdated
        .iter()
        .find(|f| f.primary.is_some() && view.served_by(f) == 0)
    {
        return Phase::Steps(vec![Step::Restart(node_ref(replica))]);
    }
    let primary = outdated
        .iter()
        .find(|f| view.served_by(f) > 0)
        .copied()
        .unwrap_or(outdated[0]);
    let is_outdated = |f: &ValkeyNode| outdated.iter().any(|o| o.id == f.id);
    let heir = view
        .desired()
        .filter(|r| r.primary.as_deref() == Some(primary.id.as_str()) && r.synced)
        .min_by_key(|r| (is_outdated(r), r.node));
    match heir {
        Some(r) => Phase::Steps(vec![Step::Failover(node_ref(r))]),
        None if persistent
            && !view
                .desired()
                .any(|r| r.primary.as_deref() == Some(&primary.id)) =>
        {
            Phase::Steps(vec![Step::Restart(node_ref(primary))])
        }
        None => Phase::Wait(format!(
            "{} must restart to change but has no in-sync replica: restarting it would lose \
             its shard's data, so shardgate will not; delete its pod to accept that",
            describe(node_ref(primary))
        )),
    }
}

/// Every spec node answered, the spec's shards serve every slot at their
/// share, each has its replicas in sync, nothing is migrating or departing,
/// and no node of ours still knows a node that is gone (a ghost: a pod
/// that came back with a new ID). A ghost not yet flagged `fail` is shown
/// to clients as online at its last address (`CLUSTER SHARDS`), often a
/// pod IP no outside client can reach, so the cluster is not formed until
/// it has failed and been forgotten.
fn is_formed(view: &View<'_>) -> bool {
    if !view.again.is_empty() {
        return false;
    }
    if !view.missing().is_empty() || view.facts.iter().any(|f| !view.is_desired(f)) {
        return false;
    }
    if ghosts(view) > 0 {
        return false;
    }
    if view
        .facts
        .iter()
        .any(|f| f.migrating || !f.synced || !f.cluster_ok)
    {
        return false;
    }
    if view.contested {
        return false;
    }
    let quotas = quotas(view.shards);
    (0..view.shards).all(|shard| {
        let Ok(Some(p)) = view.primary(shard) else {
            return false;
        };
        view.served_by(p) == quotas[shard as usize]
            && view
                .desired()
                .filter(|f| f.shard == shard && f.id != p.id)
                .all(|f| f.primary.as_deref() == Some(p.id.as_str()))
    })
}

/// How many IDs the spec's nodes know that belong to no node that answered.
fn ghosts(view: &View<'_>) -> usize {
    let mut gone: BTreeSet<&str> = BTreeSet::new();
    for d in view.desired() {
        for p in &d.peers {
            if view.by_id(&p.id).is_none() {
                gone.insert(&p.id);
            }
        }
    }
    gone.len()
}

fn not_formed_reason(view: &View<'_>) -> String {
    let missing = view.missing();
    if let Some(first) = missing.first() {
        return format!(
            "{} of {} nodes answer; {} does not",
            view.shards * view.nodes - missing.len() as u32,
            view.shards * view.nodes,
            describe(*first)
        );
    }
    if let Some(f) = view.facts.iter().find(|f| !f.synced) {
        return format!(
            "{} has not finished its initial sync",
            describe(node_ref(f))
        );
    }
    if let Some(f) = view.facts.iter().find(|f| !f.cluster_ok) {
        return format!(
            "{} does not see every slot served yet (gossip)",
            describe(node_ref(f))
        );
    }
    if view.facts.iter().any(|f| !view.is_desired(f)) {
        return "departing nodes are not removed yet".into();
    }
    let gone = ghosts(view);
    if gone > 0 {
        return format!(
            "the nodes still know {gone} node(s) that are gone (a pod came back with a new \
             ID): they are forgotten once the cluster has marked them failed"
        );
    }
    "the cluster is converging".into()
}

#[cfg(test)]
mod tests {
    use super::*;
    use shardgate_contract::model::Peer;

    fn id(shard: u32, node: u32) -> String {
        format!("id-{shard}-{node}")
    }

    fn fact(shard: u32, node: u32) -> ValkeyNode {
        ValkeyNode {
            shard,
            node,
            id: id(shard, node),
            primary: None,
            slots: Vec::new(),
            peers: Vec::new(),
            migrating: false,
            synced: true,
            cluster_ok: true,
            version: "9.0.1".into(),
        }
    }

    fn at(shard: u32, node: u32) -> NodeRef {
        NodeRef { shard, node }
    }

    fn shape(shards: u32, nodes: u32) -> Shape {
        Shape {
            shards,
            nodes,
            persistent: false,
        }
    }

    fn pods(facts: &[ValkeyNode]) -> Vec<ObservedPod> {
        facts
            .iter()
            .map(|f| ObservedPod {
                shard: f.shard,
                node: f.node,
                host_ip: None,
                node_external_ip: None,
                ready: true,
                outdated: false,
            })
            .collect()
    }

    /// Every node knows every other node.
    fn mesh(facts: &mut [ValkeyNode]) {
        let ids: Vec<String> = facts.iter().map(|f| f.id.clone()).collect();
        for f in facts.iter_mut() {
            f.peers = ids
                .iter()
                .filter(|i| **i != f.id)
                .map(|i| Peer {
                    id: i.clone(),
                    failed: false,
                    linked: true,
                })
                .collect();
        }
    }

    /// Applies a plan the way Valkey would, instantly.
    fn apply(facts: &mut Vec<ValkeyNode>, steps: &[Step]) {
        let idx = |facts: &Vec<ValkeyNode>, r: NodeRef| {
            facts
                .iter()
                .position(|f| f.shard == r.shard && f.node == r.node)
                .unwrap()
        };
        let mut met = false;
        for step in steps {
            match step {
                Step::Meet(_) => met = true,
                Step::AddSlots(a) => {
                    let i = idx(facts, a.node);
                    facts[i].slots.extend(a.slots.iter().copied());
                }
                Step::Replicate(r) => {
                    let p = facts[idx(facts, r.primary)].id.clone();
                    let i = idx(facts, r.node);
                    facts[i].primary = Some(p);
                }
                Step::Migrate(m) => {
                    let s = idx(facts, m.source);
                    let t = idx(facts, m.target);
                    let moving: BTreeSet<u32> =
                        m.slots.iter().flat_map(|r| r.start..=r.end).collect();
                    let keep: Vec<u32> = facts[s]
                        .slots
                        .iter()
                        .flat_map(|r| r.start..=r.end)
                        .filter(|x| !moving.contains(x))
                        .collect();
                    facts[s].slots = ranges(&keep);
                    let mut got: Vec<u32> = facts[t]
                        .slots
                        .iter()
                        .flat_map(|r| r.start..=r.end)
                        .chain(moving)
                        .collect();
                    got.sort_unstable();
                    facts[t].slots = ranges(&got);
                }
                Step::Forget(gone) => {
                    for f in facts.iter_mut() {
                        f.peers.retain(|p| &p.id != gone);
                    }
                    facts.retain(|f| &f.id != gone);
                }
                Step::Failover(r) => {
                    let i = idx(facts, *r);
                    let old = facts[i].primary.take().unwrap();
                    let o = facts.iter().position(|f| f.id == old).unwrap();
                    facts[i].slots = std::mem::take(&mut facts[o].slots);
                    let new = facts[i].id.clone();
                    for f in facts.iter_mut() {
                        if f.primary.as_deref() == Some(old.as_str()) || f.id == old {
                            f.primary = Some(new.clone());
                        }
                    }
                }
                Step::Restart(_) => {}
            }
        }
        if met {
            mesh(facts);
        }
    }

    /// Runs plans until the cluster is formed; returns every plan.
    fn converge(shards: u32, nodes: u32, facts: &mut Vec<ValkeyNode>) -> Vec<Vec<Step>> {
        let mut plans = Vec::new();
        for _ in 0..20 {
            let t = plan(shape(shards, nodes), &pods(facts), Some(facts));
            if t.formed {
                return plans;
            }
            assert!(!t.steps.is_empty(), "stuck: {}", t.waiting);
            apply(facts, &t.steps);
            plans.push(t.steps);
        }
        panic!("did not converge");
    }

    fn served(facts: &[ValkeyNode], shard: u32) -> u32 {
        facts
            .iter()
            .filter(|f| f.shard == shard)
            .flat_map(|f| &f.slots)
            .map(|r| r.end - r.start + 1)
            .sum()
    }

    #[test]
    fn quotas_cover_every_slot() {
        for shards in 1..=40 {
            assert_eq!(quotas(shards).iter().sum::<u32>(), SLOTS);
            let r = even_ranges(shards);
            assert_eq!(r[0].start, 0);
            assert_eq!(r.last().unwrap().end, SLOTS - 1);
        }
        assert_eq!(quotas(3), vec![5462, 5461, 5461]);
    }

    #[test]
    fn unmanaged_plans_nothing() {
        let t = plan(shape(3, 1), &[], None);
        assert!(t.steps.is_empty() && !t.formed && t.departing.is_empty());
    }

    #[test]
    fn a_new_cluster_forms_in_meet_assign_replicate_order() {
        let mut facts: Vec<ValkeyNode> = (0..3)
            .flat_map(|s| (0..2).map(move |n| fact(s, n)))
            .collect();
        let plans = converge(3, 2, &mut facts);
        assert_eq!(plans.len(), 3);
        assert!(plans[0].iter().all(|s| matches!(s, Step::Meet(_))));
        // Five nodes meet the anchor, and the ten pairs of them each other.
        assert_eq!(plans[0].len(), 5 + 10);
        assert!(plans[1].iter().all(|s| matches!(s, Step::AddSlots(_))));
        assert!(plans[2].iter().all(|s| matches!(s, Step::Replicate(_))));
        for shard in 0..3 {
            assert_eq!(served(&facts, shard), quotas(3)[shard as usize]);
            let p = facts
                .iter()
                .find(|f| f.shard == shard && f.node == 0)
                .unwrap();
            let r = facts
                .iter()
                .find(|f| f.shard == shard && f.node == 1)
                .unwrap();
            assert_eq!(r.primary.as_deref(), Some(p.id.as_str()));
        }
    }

    #[test]
    fn slots_wait_for_every_primary() {
        let mut facts = vec![fact(0, 0), fact(1, 0)];
        mesh(&mut facts);
        let t = plan(shape(3, 1), &pods(&facts), Some(&facts));
        assert!(t.steps.is_empty() && !t.formed);
        assert!(t.waiting.contains("shard 2"), "{}", t.waiting);
    }

    #[test]
    fn scale_in_drains_then_forgets_then_lets_go() {
        let mut facts: Vec<ValkeyNode> = (0..3).map(|s| fact(s, 0)).collect();
        converge(3, 1, &mut facts);
        // Spec drops to 2 shards: shard 2 drains first.
        let t = plan(shape(2, 1), &pods(&facts), Some(&facts));
        assert_eq!(t.departing, vec![at(2, 0)]);
        assert!(t.steps.iter().all(|s| matches!(s, Step::Migrate(_))));
        let moved: u32 = t
            .steps
            .iter()
            .map(|s| match s {
                Step::Migrate(m) => m.slots.iter().map(|r| r.end - r.start + 1).sum::<u32>(),
                _ => 0,
            })
            .sum();
        assert_eq!(moved, quotas(3)[2], "only the departing shard's slots move");
        apply(&mut facts, &t.steps);
        let t = plan(shape(2, 1), &pods(&facts), Some(&facts));
        assert_eq!(
            t.departing,
            vec![at(2, 0)],
            "still known: kept until forgotten"
        );
        assert_eq!(t.steps, vec![Step::Forget(id(2, 0))]);
        let all_pods = pods(&facts);
        apply(&mut facts, &t.steps);
        // Forgotten: no longer known, so its objects may go.
        let still: Vec<ValkeyNode> = facts.iter().filter(|f| f.shard < 2).cloned().collect();
        let t = plan(shape(2, 1), &all_pods[..2], Some(&still));
        assert!(t.formed, "{}", t.waiting);
        assert!(t.departing.is_empty());
        assert_eq!(served(&facts, 0) + served(&facts, 1), SLOTS);
    }

    #[test]
    fn a_draining_shard_that_does_not_answer_is_kept() {
        let mut facts: Vec<ValkeyNode> = (0..3).map(|s| fact(s, 0)).collect();
        converge(3, 1, &mut facts);
        let all_pods = pods(&facts);
        facts.pop();
        let t = plan(shape(2, 1), &all_pods, Some(&facts));
        assert_eq!(t.departing, vec![at(2, 0)]);
        assert!(!t.formed);
    }

    /// Shard 0's primary is node `primary`; the others replicate it.
    fn failed_over(shards: u32, nodes: u32, primary: u32) -> Vec<ValkeyNode> {
        let mut facts: Vec<ValkeyNode> = (0..shards)
            .flat_map(|s| (0..nodes).map(move |n| fact(s, n)))
            .collect();
        converge(shards, nodes, &mut facts);
        apply(&mut facts, &[Step::Failover(at(0, primary))]);
        facts
    }

    /// Runs plans for the new spec until formed, checking before each plan
    /// that every slot is served and that nothing serving is let go.
    fn scale_replicas_in(
        shards: u32,
        nodes: u32,
        facts: &mut Vec<ValkeyNode>,
    ) -> (Vec<Step>, Vec<Vec<NodeRef>>) {
        let (mut steps, mut kept) = (Vec::new(), Vec::new());
        for _ in 0..20 {
            let all = pods(facts);
            let t = plan(shape(shards, nodes), &all, Some(facts));
            assert_eq!(
                (0..shards).map(|s| served(facts, s)).sum::<u32>(),
                SLOTS,
                "every slot served"
            );
            for f in facts.iter().filter(|f| f.node >= nodes) {
                let held = t.departing.contains(&node_ref(f));
                assert!(held || !owns_slots(f), "{f:?} let go while serving");
            }
            kept.push(t.departing.clone());
            if t.formed {
                return (steps, kept);
            }
            assert!(!t.steps.is_empty(), "stuck: {}", t.waiting);
            apply(facts, &t.steps);
            steps.extend(t.steps);
        }
        panic!("did not converge");
    }

    #[test]
    fn a_departing_primary_hands_over_before_it_is_let_go() {
        // 3x1 -> 3x0 after shard 0 failed over to node 1.
        let mut facts = failed_over(3, 2, 1);
        let (steps, kept) = scale_replicas_in(3, 1, &mut facts);
        assert_eq!(steps[0], Step::Failover(at(0, 0)), "{steps:?}");
        assert!(steps.contains(&Step::Forget(id(0, 1))));
        assert!(kept[0].contains(&at(0, 1)) && kept[0].contains(&at(1, 1)));
        assert!(kept.last().unwrap().is_empty());
        assert!(!steps.iter().any(|s| matches!(s, Step::Migrate(_))));
        assert_eq!(served(&facts, 0), quotas(3)[0]);
    }

    #[test]
    fn three_by_two_to_three_by_one_keeps_a_serving_third_node() {
        let mut facts = failed_over(3, 3, 2);
        let (steps, _) = scale_replicas_in(3, 2, &mut facts);
        assert_eq!(steps[0], Step::Failover(at(0, 0)));
        let forgotten: BTreeSet<String> = steps
            .iter()
            .filter_map(|s| match s {
                Step::Forget(id) => Some(id.clone()),
                _ => None,
            })
            .collect();
        assert_eq!(forgotten, (0..3).map(|s| id(s, 2)).collect());
        // Node 1 follows the new primary.
        let n1 = facts.iter().find(|f| f.shard == 0 && f.node == 1).unwrap();
        assert_eq!(n1.primary.as_deref(), Some(id(0, 0).as_str()));
    }

    #[test]
    fn a_departing_primary_waits_for_a_replica_in_sync() {
        let mut facts = failed_over(2, 2, 1);
        facts[0].synced = false;
        let t = plan(shape(2, 1), &pods(&facts), Some(&facts));
        assert!(t.steps.is_empty(), "{:?}", t.steps);
        assert!(t.waiting.contains("in sync"), "{}", t.waiting);
        assert!(t.departing.contains(&at(0, 1)));
    }

    #[test]
    fn an_old_server_forms_but_never_migrates() {
        let mut facts: Vec<ValkeyNode> = (0..2).map(|s| fact(s, 0)).collect();
        for f in &mut facts {
            f.version = "8.1.8".into();
        }
        converge(2, 1, &mut facts);
        let mut new = fact(2, 0);
        new.version = "8.1.8".into();
        facts.push(new);
        mesh(&mut facts);
        let t = plan(shape(3, 1), &pods(&facts), Some(&facts));
        assert!(t.steps.is_empty(), "{:?}", t.steps);
        assert!(t.waiting.contains("8.1.8"), "{}", t.waiting);
    }

    #[test]
    fn scale_out_moves_the_fewest_slots() {
        let mut facts: Vec<ValkeyNode> = (0..2).map(|s| fact(s, 0)).collect();
        converge(2, 1, &mut facts);
        facts.push(fact(2, 0));
        let plans = converge(3, 1, &mut facts);
        let moved: u32 = plans
            .iter()
            .flatten()
            .map(|s| match s {
                Step::Migrate(m) => m.slots.iter().map(|r| r.end - r.start + 1).sum::<u32>(),
                _ => 0,
            })
            .sum();
        assert_eq!(moved, quotas(3)[2]);
        for shard in 0..3 {
            assert_eq!(served(&facts, shard), quotas(3)[shard as usize]);
        }
    }

    #[test]
    fn a_failed_over_shard_keeps_its_new_primary() {
        let mut facts: Vec<ValkeyNode> = (0..2)
            .flat_map(|s| (0..2).map(move |n| fact(s, n)))
            .collect();
        converge(2, 2, &mut facts);
        // Node 1 of shard 0 took over; node 0 came back as its replica.
        let slots = std::mem::take(&mut facts[0].slots);
        facts[1].slots = slots;
        facts[1].primary = None;
        facts[0].primary = Some(id(0, 1));
        let t = plan(shape(2, 2), &pods(&facts), Some(&facts));
        assert!(t.formed, "{}", t.waiting);
        assert!(t.steps.is_empty());
    }

    #[test]
    fn ghosts_are_forgotten_only_when_every_pod_answers() {
        let mut facts: Vec<ValkeyNode> = (0..2).map(|s| fact(s, 0)).collect();
        converge(2, 1, &mut facts);
        facts[0].peers.push(Peer {
            id: "ghost".into(),
            failed: true,
            linked: false,
        });
        let t = plan(shape(2, 1), &pods(&facts), Some(&facts));
        assert_eq!(t.steps, vec![Step::Forget("ghost".into())]);
        let mut with_silent = pods(&facts);
        with_silent.push(ObservedPod {
            shard: 1,
            node: 1,
            host_ip: None,
            node_external_ip: None,
            ready: false,
            outdated: false,
        });
        let t = plan(shape(2, 1), &with_silent, Some(&facts));
        assert!(t.steps.is_empty());
    }

    #[test]
    fn a_cluster_that_still_knows_a_gone_node_is_not_formed_until_it_is_forgotten() {
        let mut facts: Vec<ValkeyNode> = (0..2).map(|s| fact(s, 0)).collect();
        converge(2, 1, &mut facts);
        assert!(plan(shape(2, 1), &pods(&facts), Some(&facts)).formed);
        // A pod came back with a new ID, and a node of ours still has a
        // live link to the old one: nothing to forget yet, and not formed.
        let gone = |linked| Peer {
            id: "gone".into(),
            failed: false,
            linked,
        };
        facts[1].peers.push(gone(false));
        facts[0].peers.push(gone(true));
        let t = plan(shape(2, 1), &pods(&facts), Some(&facts));
        assert!(t.steps.is_empty(), "{:?}", t.steps);
        assert!(!t.formed);
        assert!(
            t.waiting.contains("know 1 node(s) that are gone"),
            "{}",
            t.waiting
        );
        // No live link to it left: forgotten at once, before Valkey flags
        // it failed (`cluster-node-timeout` later).
        facts[0].peers.last_mut().unwrap().linked = false;
        let t = plan(shape(2, 1), &pods(&facts), Some(&facts));
        assert_eq!(t.steps, vec![Step::Forget("gone".into())]);
        // But not while it may be a primary Valkey must still fail over:
        // a node of ours follows it, or some slots have no owner of ours.
        let forgets = |facts: &[ValkeyNode]| {
            plan(shape(2, 1), &pods(facts), Some(facts))
                .steps
                .contains(&Step::Forget("gone".into()))
        };
        facts[1].primary = Some("gone".into());
        assert!(!forgets(&facts), "followed");
        facts[1].primary = None;
        let held = std::mem::take(&mut facts[1].slots);
        assert!(!forgets(&facts), "slots without an owner of ours");
        facts[1].slots = held;
        // Flagged failed, though still linked somewhere: forgotten too.
        facts[0].peers.last_mut().unwrap().linked = true;
        facts[1].peers.last_mut().unwrap().failed = true;
        let t = plan(shape(2, 1), &pods(&facts), Some(&facts));
        assert_eq!(t.steps, vec![Step::Forget("gone".into())]);
        facts[0].peers.pop();
        facts[1].peers.pop();
        assert!(plan(shape(2, 1), &pods(&facts), Some(&facts)).formed);
    }

    /// Rolls every outdated pod, restarting the ones the plan names (they
    /// come back up to date, same ID: a restart keeping `nodes.conf`).
    fn roll_all(
        shards: u32,
        nodes: u32,
        facts: &mut Vec<ValkeyNode>,
        mut pods: Vec<ObservedPod>,
    ) -> Vec<Step> {
        let mut done = Vec::new();
        for _ in 0..40 {
            let t = plan(shape(shards, nodes), &pods, Some(facts));
            if t.steps.is_empty() {
                assert!(t.formed, "stuck: {}", t.waiting);
                return done;
            }
            assert_eq!(t.steps.len(), 1, "one at a time: {:?}", t.steps);
            if let Step::Restart(r) = t.steps[0] {
                let f = facts
                    .iter()
                    .find(|f| f.shard == r.shard && f.node == r.node)
                    .unwrap();
                assert!(f.primary.is_some(), "only a replica is restarted");
                let p = pods
                    .iter_mut()
                    .find(|p| p.shard == r.shard && p.node == r.node)
                    .unwrap();
                p.outdated = false;
            }
            apply(facts, &t.steps);
            done.extend(t.steps);
        }
        panic!("rolling did not finish");
    }

    #[test]
    fn outdated_pods_restart_one_at_a_time_replicas_first() {
        let mut facts: Vec<ValkeyNode> = (0..2)
            .flat_map(|s| (0..2).map(move |n| fact(s, n)))
            .collect();
        converge(2, 2, &mut facts);
        let mut all = pods(&facts);
        for p in &mut all {
            p.outdated = true;
        }
        let steps = roll_all(2, 2, &mut facts, all);
        let restarts = steps
            .iter()
            .filter(|s| matches!(s, Step::Restart(_)))
            .count();
        let failovers = steps
            .iter()
            .filter(|s| matches!(s, Step::Failover(_)))
            .count();
        assert_eq!(restarts, 4);
        assert_eq!(failovers, 2, "each primary hands over before it restarts");
        assert!(matches!(steps[0], Step::Restart(NodeRef { node: 1, .. })));
    }

    #[test]
    fn nothing_restarts_while_the_cluster_is_unhealthy_or_without_a_replica() {
        let mut facts: Vec<ValkeyNode> = (0..2)
            .flat_map(|s| (0..2).map(move |n| fact(s, n)))
            .collect();
        converge(2, 2, &mut facts);
        let mut all = pods(&facts);
        all[0].outdated = true;
        facts[3].synced = false;
        let t = plan(shape(2, 2), &all, Some(&facts));
        assert!(t.steps.is_empty(), "{:?}", t.steps);
        let mut single: Vec<ValkeyNode> = (0..2).map(|s| fact(s, 0)).collect();
        converge(2, 1, &mut single);
        let mut p = pods(&single);
        p[0].outdated = true;
        let t = plan(shape(2, 1), &p, Some(&single));
        assert!(t.steps.is_empty());
        assert!(t.waiting.contains("no in-sync replica"), "{}", t.waiting);
        // With its data on a volume, it restarts (briefly unavailable).
        let persistent = Shape {
            persistent: true,
            ..shape(2, 1)
        };
        let t = plan(persistent, &p, Some(&single));
        assert_eq!(t.steps, vec![Step::Restart(at(0, 0))]);
        // But a primary whose replica is out of sync waits even then.
        let t = plan(
            Shape {
                persistent: true,
                ..shape(2, 2)
            },
            &all,
            Some(&facts),
        );
        assert!(t.steps.is_empty(), "{:?}", t.steps);
    }

    #[test]
    fn nodes_that_do_not_know_each_other_meet_directly() {
        let meets = |facts: &[ValkeyNode]| -> Vec<(NodeRef, NodeRef)> {
            plan(shape(4, 1), &pods(facts), Some(facts))
                .steps
                .iter()
                .filter_map(|s| match s {
                    Step::Meet(m) => Some((m.node, m.peer)),
                    _ => None,
                })
                .collect()
        };
        let known = |id: String| Peer {
            id,
            failed: false,
            linked: true,
        };
        let mut facts: Vec<ValkeyNode> = (0..4).map(|s| fact(s, 0)).collect();
        // Nobody knows anybody: each meets the anchor, then each pair.
        let all = vec![
            (at(1, 0), at(0, 0)),
            (at(2, 0), at(0, 0)),
            (at(3, 0), at(0, 0)),
            (at(1, 0), at(2, 0)),
            (at(1, 0), at(3, 0)),
            (at(2, 0), at(3, 0)),
        ];
        assert_eq!(meets(&facts), all);
        // Known on one side is enough: gossip finishes the handshake.
        facts[3].peers.push(known(id(1, 0)));
        facts[2].peers.push(known(id(3, 0)));
        let want: Vec<_> = all
            .iter()
            .copied()
            .filter(|p| ![(at(1, 0), at(3, 0)), (at(2, 0), at(3, 0))].contains(p))
            .collect();
        assert_eq!(meets(&facts), want);
        // Every node knows the anchor: the phase is done, gossip finishes
        // the rest (nothing holds the slots back).
        let anchor = facts[0].id.clone();
        for f in &mut facts[1..] {
            f.peers.push(known(anchor.clone()));
        }
        assert_eq!(meets(&facts), vec![]);
        let t = plan(shape(4, 1), &pods(&facts), Some(&facts));
        assert!(
            t.steps.iter().all(|s| matches!(s, Step::AddSlots(_))),
            "{:?}",
            t.steps
        );
    }

    #[test]
    fn nodes_that_lost_each_other_are_met_again() {
        let mut facts: Vec<ValkeyNode> = (0..2).map(|s| fact(s, 0)).collect();
        converge(2, 1, &mut facts);
        // Every pod was recreated with a new IP: they know each other's
        // IDs, but every link is down.
        for f in &mut facts {
            for p in &mut f.peers {
                p.linked = false;
            }
        }
        let t = plan(shape(2, 1), &pods(&facts), Some(&facts));
        assert_eq!(
            t.steps,
            vec![
                Step::Meet(Meet {
                    node: at(0, 0),
                    peer: at(1, 0)
                }),
                Step::Meet(Meet {
                    node: at(1, 0),
                    peer: at(0, 0)
                }),
            ]
        );
        assert!(!t.formed);
        // A link down on one side only: that side meets.
        facts[0].peers[0].linked = true;
        let t = plan(shape(2, 1), &pods(&facts), Some(&facts));
        assert_eq!(t.steps.len(), 1);
        assert!(matches!(&t.steps[0], Step::Meet(m) if m.node == at(1, 0)));
    }

    #[test]
    fn two_clusters_are_never_merged() {
        let mut a = vec![fact(0, 0), fact(1, 0)];
        converge(2, 1, &mut a);
        let mut stray = fact(1, 1);
        stray.slots = vec![SlotRange { start: 0, end: 10 }];
        a.push(stray);
        let t = plan(shape(2, 2), &pods(&a), Some(&a));
        assert!(t.steps.is_empty());
        assert!(t.waiting.contains("never merged"), "{}", t.waiting);
    }

    #[test]
    fn lost_slots_return_to_their_even_share() {
        let mut facts: Vec<ValkeyNode> = (0..2).map(|s| fact(s, 0)).collect();
        converge(2, 1, &mut facts);
        facts[1].slots = vec![SlotRange {
            start: 8192,
            end: 9000,
        }];
        let t = plan(shape(2, 1), &pods(&facts), Some(&facts));
        assert_eq!(
            t.steps,
            vec![Step::AddSlots(AddSlots {
                node: NodeRef { shard: 1, node: 0 },
                slots: vec![SlotRange {
                    start: 9001,
                    end: 16383
                }],
            })]
        );
    }
}
