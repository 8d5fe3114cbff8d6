//! One cluster's Valkey nodes that answered: their facts for the guest's
//! topology plan, and what the guest decided done to them — announce
//! settings with `CONFIG SET` (no restart) and the plan's steps.
//!
//! Nodes are reached at their pod IP, which the caller found from the Pod
//! (never from `CLUSTER NODES`, whose addresses are the announced external
//! ones), and identified by `CLUSTER MYID`.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use shardgate_contract::model::{Desired, NodeRef, Step, ValkeyNode};
use tracing::{debug, info};

use crate::announce;
use crate::client::{self as valkey, BUS_PORT, CLIENT_PORT, Dial, NodeClient, TlsFiles};
use crate::spreads::Spreads;
use rustls_pki_types::CertificateDer;

/// How long connecting to a node and each command may take in a reconcile.
pub const TIMEOUT: Duration = Duration::from_secs(2);
/// The longest [`Nodes::announce_settled`] waits for a changed announcement
/// to spread.
pub const SETTLE_WITHIN: Duration = Duration::from_secs(1);
/// How often it looks.
const WAIT_POLL: Duration = Duration::from_millis(10);

/// The nodes that answered, by (shard, node).
#[derive(Default)]
pub struct Nodes {
    nodes: BTreeMap<(u32, u32), Answered>,
    /// Nodes with news to spread (new slots, a changed announcement), and
    /// to whom.
    news: Vec<(NodeRef, Known)>,
    /// The meets made lately to spread news, across looks.
    spreads: Arc<Spreads>,
}

struct Answered {
    ip: IpAddr,
    client: NodeClient,
    facts: ValkeyNode,
    heard: Heard,
}

/// What one node says of the cluster's announcements.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Heard {
    /// What each node (itself included) announces, as this node sees it,
    /// by node ID.
    announced: BTreeMap<String, String>,
    /// Its meets not answered yet ([`crate::cluster_nodes::View::handshakes`]).
    handshakes: usize,
}

impl Heard {
    /// What `view` says of the announcements; the rest of it is dropped.
    fn of(view: crate::cluster_nodes::View) -> Self {
        Heard {
            announced: view.announced,
            handshakes: view.handshakes,
        }
    }

    /// Whether `later` tells something new to plan from: another
    /// announcement, or the end of its meets. Meets just made show as
    /// handshakes at once, and are no news (a look that took them for news
    /// would see the nodes still unmet and meet them again).
    fn news(&self, later: &Heard) -> bool {
        later.announced != self.announced || (self.handshakes > 0 && later.handshakes == 0)
    }
}

impl Nodes {
    /// Connects to every target (a node and its pod IP) and reads its
    /// facts, all at once. A node that does not answer is left out (the
    /// guest then plans around it) and logged.
    /// Each node is reached as `dial` says. `spreads` are the meets made
    /// lately to spread news, which [`Nodes::spread_news`] adds to.
    pub async fn observe(
        targets: impl IntoIterator<Item = (NodeRef, IpAddr)>,
        dial: &Dial,
        spreads: Arc<Spreads>,
    ) -> Self {
        let answers = futures::future::join_all(targets.into_iter().map(|(at, ip)| async move {
            let at = (at.shard, at.node);
            let addr = SocketAddr::new(ip, CLIENT_PORT);
            let mut client = NodeClient::dial(addr, dial).await?;
            let f = client.facts().await?;
            Ok::<_, valkey::Error>((at, ip, client, f))
        }))
        .await;
        let mut nodes = BTreeMap::new();
        for answer in answers {
            match answer {
                Ok((at, ip, client, f)) => {
                    let (mut facts, heard) = split(at, f);
                    spreads.relink(&mut facts, Instant::now());
                    nodes.insert(
                        at,
                        Answered {
                            ip,
                            client,
                            facts,
                            heard,
                        },
                    );
                }
                Err(e) => debug!(error = %e, "node did not answer"),
            }
        }
        Nodes {
            nodes,
            news: Vec::new(),
            spreads,
        }
    }

    /// Reads every answering node's facts again, over the connection the
    /// look opened (no new connection, no login), and says whether any
    /// differ from the last read: the facts the plan was made from, at
    /// first. A node that no longer answers is a change too (the next look
    /// plans around it).
    pub async fn refresh(&mut self) -> bool {
        let spreads = &self.spreads;
        let changes = futures::future::join_all(self.nodes.iter_mut().map(|(&at, a)| async move {
            match a.client.facts().await {
                Ok(f) => {
                    let (mut facts, heard) = split(at, f);
                    spreads.relink(&mut facts, Instant::now());
                    let changed = facts != a.facts || a.heard.news(&heard);
                    a.facts = facts;
                    a.heard = heard;
                    changed
                }
                Err(e) => {
                    debug!(error = %e, "node did not answer a poll");
                    true
                }
            }
        }))
        .await;
        changes.contains(&true)
    }

    /// Whether node `at` answered and serves slots (a primary).
    pub fn serves(&self, at: NodeRef) -> bool {
        self.nodes
            .get(&(at.shard, at.node))
            .is_some_and(|a| !a.facts.slots.is_empty())
    }

    /// Node `at` is about to restart (its pod deleted): its ID goes, and
    /// links to it are no longer taken as broken only by recent meets.
    pub fn restarting(&self, at: NodeRef) {
        if let Some(a) = self.nodes.get(&(at.shard, at.node)) {
            self.spreads.gone(&a.facts.id);
        }
    }

    /// The IDs of the nodes that answered.
    pub fn ids(&self) -> impl Iterator<Item = &str> {
        self.nodes.values().map(|a| a.facts.id.as_str())
    }

    /// The facts for the guest, in index order.
    pub fn facts(&self) -> Vec<ValkeyNode> {
        self.nodes.values().map(|a| a.facts.clone()).collect()
    }

    /// Makes every answering node of `desired` announce what the guest
    /// computed; a node whose settings that other nodes tell clients of
    /// changed tells the nodes it knows at once ([`Nodes::spread_news`]).
    pub async fn announce(&mut self, desired: &Desired) -> Result<Announced, valkey::Error> {
        let wanted: BTreeMap<(u32, u32), &[(String, String)]> = desired
            .nodes
            .iter()
            .map(|n| ((n.shard, n.node), n.announce.as_slice()))
            .collect();
        // Every node at once: each has its own connection.
        let sets = futures::future::join_all(self.nodes.iter_mut().filter_map(|(at, a)| {
            let settings = *wanted.get(at)?;
            Some(async move {
                let set = a.client.apply_announce(settings).await?;
                Ok::<_, valkey::Error>((*at, set))
            })
        }))
        .await;
        let mut changed = 0;
        let mut moved = Vec::new();
        for answer in sets {
            let ((shard, node), set) = answer?;
            if set.iter().any(|k| announce::told_by_others(k)) {
                moved.push(NodeRef { shard, node });
            }
            changed += set.len();
        }
        self.news
            .extend(moved.into_iter().map(|at| (at, Known::Only)));
        let meets = self.spread_news().await?;
        Ok(Announced {
            settings: changed,
            meets,
        })
    }

    /// Sets `settings` live on every answering node for which `done` (by
    /// node ID) is false, and returns the IDs of the nodes set. Valkey
    /// reports many settings normalized (`100mb` as `104857600`), so the
    /// caller remembers what it set rather than comparing.
    pub async fn set_config(
        &mut self,
        settings: &[(String, String)],
        done: impl Fn(&str) -> bool,
    ) -> Result<Vec<String>, valkey::Error> {
        let mut set = Vec::new();
        for a in self.nodes.values_mut().filter(|a| !done(&a.facts.id)) {
            a.client.set_config(settings).await?;
            set.push(a.facts.id.clone());
        }
        Ok(set)
    }

    /// Whether every answering node sees every other answering node
    /// announce what that node announces itself, with no meet of theirs
    /// unanswered: a change of announce settings has spread, so no client
    /// can still be redirected to an old endpoint. Nodes at `departing`
    /// places are asked only while another node still lists them.
    ///
    /// Agreement counts only when two rounds of reads in a row find it
    /// ([`agreed_twice`]): a meet that is answered between the reads of its
    /// two nodes makes the met node forget the other's announcement after
    /// it was read, and only a later read shows that. Re-reads every 10 ms
    /// until then or until `within` has passed (two rounds at most with
    /// zero).
    pub async fn announce_settled(
        &mut self,
        within: Duration,
        departing: &[NodeRef],
    ) -> Result<bool, valkey::Error> {
        let started = tokio::time::Instant::now();
        let mut before = false;
        loop {
            // One round: every node read at about the same time.
            let reads = futures::future::join_all(self.nodes.values_mut().map(|a| async move {
                a.heard = Heard::of(a.client.cluster_nodes().await?);
                Ok::<_, valkey::Error>(())
            }))
            .await;
            reads.into_iter().collect::<Result<(), _>>()?;
            let bare: Vec<String> = self
                .nodes
                .values()
                .map(|a| format!("{}:{CLIENT_PORT}@{BUS_PORT}", a.ip))
                .collect();
            let voices: Vec<Voice<'_>> = self
                .nodes
                .iter()
                .zip(&bare)
                .map(|((&(shard, node), a), bare)| Voice {
                    id: &a.facts.id,
                    heard: &a.heard,
                    staying: !departing.contains(&NodeRef { shard, node }),
                    bare,
                })
                .collect();
            let now = announce_agreed(&voices);
            match agreed_twice(before, now, started.elapsed() >= within) {
                Some(settled) => return Ok(settled),
                None if now => {}
                None => tokio::time::sleep(WAIT_POLL).await,
            }
            before = now;
        }
    }

    /// Brings every answering node's ACL to the revision whose marker user
    /// is `marker` (`shardgate_contract::auth::acl_marker`): a node that does not know the
    /// marker reloads its aclfile (`ACL LOAD`) and is checked again
    /// (`ACL GETUSER`). Nodes already in place are not touched, so clients
    /// are not disturbed by a reload that changes nothing.
    pub async fn sync_acl(&mut self, marker: &str) -> Result<AclSync, valkey::Error> {
        let mut sync = AclSync::default();
        for a in self.nodes.values_mut() {
            if a.client.acl_has_user(marker).await? {
                continue;
            }
            a.client.acl_load().await?;
            if a.client.acl_has_user(marker).await? {
                sync.loaded += 1;
            } else {
                // The node's mounted aclfile is not the new revision yet
                // (the kubelet refreshes Secret volumes periodically).
                sync.waiting += 1;
            }
        }
        Ok(sync)
    }

    /// Makes every node serve `wanted` (the leaf of the cluster Secret's
    /// `tls.crt`): a node that served another certificate in this
    /// reconcile's handshake reloads its TLS files. The files are the
    /// kubelet's copy of the Secret, which may lag; such a node is counted
    /// as waiting and looked at again.
    pub async fn sync_tls(
        &mut self,
        wanted: &CertificateDer<'_>,
        files: &TlsFiles,
    ) -> Result<TlsSync, valkey::Error> {
        let mut sync = TlsSync::default();
        for a in self.nodes.values_mut() {
            if a.client.served_certificate().is_none_or(|c| c == wanted) {
                continue;
            }
            a.client.reload_tls(files).await?;
            sync.reloaded += 1;
        }
        Ok(sync)
    }

    /// Runs step `index` of a plan over the Valkey protocol. `Restart` is
    /// the caller's (it deletes a Pod).
    pub async fn run_step(&mut self, index: usize, step: &Step) -> Result<(), StepError> {
        self.run(step).await.map_err(|source| StepError {
            step: describe(step),
            index,
            source,
        })?;
        info!(step = %describe(step), "topology step done");
        Ok(())
    }

    async fn run(&mut self, step: &Step) -> Result<(), valkey::Error> {
        match step {
            Step::Meet(m) => {
                let (peer, peer_id) = {
                    let p = self.get(m.peer)?;
                    (p.ip, p.facts.id.clone())
                };
                let node = self.get(m.node)?;
                node.client.meet(peer).await?;
                // The links this meet breaks for a moment are not moves to
                // meet again for.
                let id = node.facts.id.clone();
                self.spreads.record(&id, vec![peer_id], Instant::now());
                Ok(())
            }
            Step::AddSlots(a) => {
                self.get(a.node)?.client.add_slots(&a.slots).await?;
                // Spread with the plan's other news, by the caller.
                self.news.push((a.node, Known::Any));
                Ok(())
            }
            Step::Replicate(r) => {
                let primary = self.get(r.primary)?.facts.id.clone();
                self.get(r.node)?.client.replicate(&primary).await
            }
            Step::Migrate(m) => {
                let target = self.get(m.target)?.facts.id.clone();
                self.get(m.source)?
                    .client
                    .migrate_slots(&m.slots, &target)
                    .await
            }
            Step::Forget(id) => {
                for a in self.nodes.values_mut().filter(|a| forgets(&a.facts, id)) {
                    a.client.forget(id).await?;
                }
                Ok(())
            }
            Step::Failover(r) => self.get(*r)?.client.failover().await,
            Step::Restart(_) => Ok(()),
        }
    }

    /// Makes the other answering nodes learn now what each node with news
    /// says of itself (the slots it was given, what it announces). The
    /// links these meets break are reported linked for a while
    /// ([`Spreads`]). Returns how many meets were made.
    ///
    /// A node with news meets each of the others again. The meet carries
    /// its slot map. It carries no announce fields: a met node that knew
    /// the meeting one forgets what it announces, frees its own link to it,
    /// redials within about 0.1 s and learns the new fields from the
    /// answer ([`Nodes::announce_settled`] waits that out). Gossip alone
    /// tells a node only when the other next pings it, up to
    /// `cluster-node-timeout / 2` later. A meet of a node already known is
    /// dropped once its ID shows. Two nodes that both have news each meet
    /// the other: the answer to a meet, on the handshake's link, is dropped
    /// with the handshake before its news is read.
    ///
    /// Measured with a client on 3x1 and 10x2 clusters whose slots were
    /// added after every node knew the anchor: every node reported
    /// `cluster_state:ok` 2.1-2.2 s after the servers started with these
    /// meets (Valkey's own 2 s writable delay), 3.0-5.6 s without.
    pub async fn spread_news(&mut self) -> Result<usize, valkey::Error> {
        // Whom each node with news meets, each other node once.
        let mut plans: BTreeMap<(u32, u32), Vec<(String, IpAddr)>> = BTreeMap::new();
        for (at, to) in std::mem::take(&mut self.news) {
            let me = self.get(at)?.facts.clone();
            let others = spread_to(
                &me,
                to,
                self.nodes.values().map(|a| (a.facts.id.as_str(), a.ip)),
            );
            let plan = plans.entry((at.shard, at.node)).or_default();
            for other in others {
                if !plan.contains(&other) {
                    plan.push(other);
                }
            }
        }
        // The nodes meet at once, each over its own connection.
        let met = futures::future::join_all(self.nodes.iter_mut().filter_map(|(at, a)| {
            let others = plans.remove(at)?;
            Some(async move {
                for (_, ip) in &others {
                    a.client.meet(*ip).await?;
                }
                Ok::<_, valkey::Error>((a.facts.id.clone(), others))
            })
        }))
        .await;
        let mut meets = 0;
        let mut failed = None;
        for answer in met {
            match answer {
                Ok((id, others)) => {
                    meets += others.len();
                    let met = others.into_iter().map(|(other, _)| other).collect();
                    self.spreads.record(&id, met, Instant::now());
                }
                Err(e) => failed = failed.or(Some(e)),
            }
        }
        failed.map_or(Ok(meets), Err)
    }

    fn get(&mut self, at: NodeRef) -> Result<&mut Answered, valkey::Error> {
        self.nodes
            .get_mut(&(at.shard, at.node))
            .ok_or_else(|| valkey::Error::Reply {
                node: SocketAddr::from(([0, 0, 0, 0], CLIENT_PORT)),
                command: "plan",
                detail: format!(
                    "shard {} node {} is in the plan but did not answer",
                    at.shard, at.node
                ),
            })
    }
}

/// Which other nodes a node with news meets ([`Nodes::spread_news`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Known {
    /// Every answering node: a primary given slots is meant to be in one
    /// cluster with them all.
    Any,
    /// Only the nodes it already knows: a changed announcement must not
    /// bring a node into the cluster that the plan keeps out (one not met
    /// yet, a restarted node's new ID before its old one is forgotten).
    Only,
}

/// Whom the node that reported `me` meets to spread what it says of
/// itself, of the answering nodes `others` (by ID and address): every one
/// but itself, or with [`Known::Only`] the ones it lists as peers.
fn spread_to<'a>(
    me: &ValkeyNode,
    to: Known,
    others: impl Iterator<Item = (&'a str, IpAddr)>,
) -> Vec<(String, IpAddr)> {
    others
        .filter(|(id, _)| *id != me.id)
        .filter(|(id, _)| to == Known::Any || me.peers.iter().any(|p| p.id == *id))
        .map(|(id, ip)| (id.to_string(), ip))
        .collect()
}

/// The guest's facts of the node at `(shard, node)` from what it said, and
/// what it sees each node announce.
fn split((shard, node): (u32, u32), f: valkey::Facts) -> (ValkeyNode, Heard) {
    let view = f.view;
    let heard = Heard {
        announced: view.announced,
        handshakes: view.handshakes,
    };
    let facts = ValkeyNode {
        shard,
        node,
        id: view.id,
        primary: view.primary,
        slots: view.slots,
        peers: view.peers,
        migrating: f.migrating,
        synced: f.synced,
        cluster_ok: f.cluster_ok,
        version: f.version,
    };
    (facts, heard)
}

/// What [`Nodes::announce`] did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Announced {
    /// Settings changed.
    pub settings: usize,
    /// Meets made to spread the changes: none when no node that changed
    /// knew another yet.
    pub meets: usize,
}

/// What [`Nodes::sync_acl`] did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AclSync {
    /// Nodes that loaded the new revision.
    pub loaded: usize,
    /// Nodes whose aclfile is not the new revision yet.
    pub waiting: usize,
}

/// What [`Nodes::sync_tls`] did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TlsSync {
    /// Nodes that served an older certificate and were told to reload;
    /// whether they serve the new one shows at the next handshake.
    pub reloaded: usize,
}

/// A plan step that failed.
#[derive(Debug, thiserror::Error)]
#[error("topology step {index} ({step}): {source}")]
pub struct StepError {
    pub step: String,
    pub index: usize,
    #[source]
    pub source: valkey::Error,
}

/// A step in words, for logs, Events and errors.
pub fn describe(step: &Step) -> String {
    let at = |r: &NodeRef| format!("{}/{}", r.shard, r.node);
    let slots = |s: &[shardgate_contract::model::SlotRange]| {
        s.iter()
            .map(|r| format!("{}-{}", r.start, r.end))
            .collect::<Vec<_>>()
            .join(",")
    };
    match step {
        Step::Meet(m) => format!("meet {} -> {}", at(&m.node), at(&m.peer)),
        Step::AddSlots(a) => format!("addslots {} {}", at(&a.node), slots(&a.slots)),
        Step::Replicate(r) => format!("replicate {} -> {}", at(&r.node), at(&r.primary)),
        Step::Migrate(m) => format!(
            "migrate {} {} -> {}",
            slots(&m.slots),
            at(&m.source),
            at(&m.target)
        ),
        Step::Forget(id) => format!("forget {id}"),
        Step::Failover(r) => format!("failover to {}", at(r)),
        Step::Restart(r) => format!("restart {}", at(r)),
    }
}

/// What [`Nodes::announce_settled`] makes of a round of reads: whether
/// the one `before` and this one (`now`) agreed. Settled after two agreeing
/// rounds in a row; not settled once `late` (its time is up) unless this
/// round agreed after a round that did not, which earns one more round at
/// once; `None` to read again.
fn agreed_twice(before: bool, now: bool, late: bool) -> Option<bool> {
    match (before, now) {
        (true, true) => Some(true),
        (false, true) => None,
        (_, false) if late => Some(false),
        (_, false) => None,
    }
}

/// One answering node, as [`announce_agreed`] weighs it.
#[derive(Clone, Copy)]
struct Voice<'a> {
    id: &'a str,
    heard: &'a Heard,
    /// Not at a departing place.
    staying: bool,
    /// How a node that forgot its announcement shows it: its pod IP,
    /// client port and bus port.
    bare: &'a str,
}

/// Whether every member of the cluster among `voices` lists every other
/// member at the address that member gives itself, and so does every node
/// that stays, with none of their meets unanswered. A member is a node some
/// other node lists; only members' own addresses are compared. A departing
/// node every other one has forgotten is neither asked nor asked about. A
/// node that does not list a member yet is not agreed: it learns the peer
/// later by gossip, first with the peer's bus address only (its pod IP),
/// and would hand that to clients. That holds for a node that stays but no
/// other node lists yet, too (a new replica whose handshakes are not done):
/// clients may already reach it at its endpoint (both found by the chaos
/// suite, seeds 529481012 and 529481011: a replica added while the
/// operator was killed).
///
/// A meet not answered yet is not agreed either: a meet carries no announce
/// fields, so the met node, if it knew the meeting one, forgets its
/// announcement when the meet arrives and hands clients its pod IP for
/// about 0.1 s (found by the chaos suite, seeds 849845696 and 501606029: a
/// meet sent right after a frozen node woke, and meets the plan sent to
/// links it saw down). Unless the meeting node announces nothing but its
/// bare address (external access turned off): forgetting that changes
/// nothing.
fn announce_agreed(voices: &[Voice<'_>]) -> bool {
    let listed_by_another = |id: &str| {
        voices
            .iter()
            .any(|v| v.id != id && v.heard.announced.contains_key(id))
    };
    let own: Vec<(&str, &str)> = voices
        .iter()
        .filter(|v| listed_by_another(v.id))
        .filter_map(|v| Some((v.id, v.heard.announced.get(v.id)?.as_str())))
        .collect();
    voices
        .iter()
        .filter(|v| v.staying || listed_by_another(v.id))
        .all(|v| {
            let forgotten_alike = v.heard.announced.get(v.id).is_some_and(|a| a == v.bare);
            (v.heard.handshakes == 0 || forgotten_alike)
                && own
                    .iter()
                    .all(|(id, addr)| v.heard.announced.get(*id).is_some_and(|s| s == addr))
        })
}

/// Whether the node that reported `facts` should be told to forget `id`:
/// it knows `id`, and `id` is not its own primary (Valkey refuses to forget
/// a node's primary, so that would only fail the step).
fn forgets(facts: &ValkeyNode, id: &str) -> bool {
    facts.peers.iter().any(|p| p.id == id) && facts.primary.as_deref() != Some(id)
}

#[cfg(test)]
mod tests {
    use shardgate_contract::model::Peer;

    use super::*;

    #[test]
    fn announce_is_agreed_only_when_every_node_lists_every_other_as_it_announces_itself() {
        let view = |entries: &[(&str, &str)]| Heard {
            announced: entries
                .iter()
                .map(|(id, addr)| ((*id).to_string(), (*addr).to_string()))
                .collect(),
            handshakes: 0,
        };
        // A node with a meet not answered yet.
        let meeting = |entries: &[(&str, &str)]| Heard {
            handshakes: 1,
            ..view(entries)
        };
        let a_self = ("a", "10.0.0.1:30001@16379");
        let b_self = ("b", "10.0.0.1:30002@16379");
        let b_pod = ("b", "127.0.1.9:6379@16379");
        // a with external access off: its pod IP and client port
        let a_bare = ("a", "127.0.1.1:6379@16379");
        let c_self = ("c", "10.0.0.1:30003@16379");
        // (a's view, b's view, c's view, b stays) => agreed
        let cases = [
            (
                view(&[a_self, b_self, c_self]),
                view(&[a_self, b_self, c_self]),
                view(&[a_self, b_self, c_self]),
                true,
                true,
            ),
            // a still lists b at its pod address: b's announce has not reached a
            (
                view(&[a_self, b_pod, c_self]),
                view(&[a_self, b_self, c_self]),
                view(&[a_self, b_self, c_self]),
                true,
                false,
            ),
            // a does not list b yet (c does): a learns b later by gossip, at
            // first by its bus address
            (
                view(&[a_self, c_self]),
                view(&[a_self, b_self, c_self]),
                view(&[a_self, b_self, c_self]),
                true,
                false,
            ),
            // b forgotten by every other node (departing, reset or not): not
            // a member, neither asked nor asked about
            (
                view(&[a_self, c_self]),
                view(&[a_self, b_self, c_self]),
                view(&[a_self, c_self]),
                false,
                true,
            ),
            (
                view(&[a_self, c_self]),
                view(&[b_self]),
                view(&[a_self, c_self]),
                false,
                true,
            ),
            // b stays but no other node lists it yet (a new replica whose
            // handshakes are not done): its own view is asked all the same
            (
                view(&[a_self, c_self]),
                view(&[a_self, b_self, c_self]),
                view(&[a_self, c_self]),
                true,
                true,
            ),
            (
                view(&[a_self, c_self]),
                view(&[("a", "127.0.1.1:6379@16379"), b_self, c_self]),
                view(&[a_self, c_self]),
                true,
                false,
            ),
            (
                view(&[a_self, c_self]),
                view(&[b_self]),
                view(&[a_self, c_self]),
                true,
                false,
            ),
            // Every view agrees, but a meet of a node that stays is not
            // answered yet: the met node may forget its announcement.
            (
                meeting(&[a_self, b_self, c_self]),
                view(&[a_self, b_self, c_self]),
                view(&[a_self, b_self, c_self]),
                true,
                false,
            ),
            (
                view(&[a_self, b_self, c_self]),
                view(&[a_self, b_self, c_self]),
                meeting(&[a_self, b_self, c_self]),
                true,
                false,
            ),
            // A node that announces only its bare address may meet: the
            // met node forgets nothing it would show.
            (
                meeting(&[a_bare, b_self, c_self]),
                view(&[a_bare, b_self, c_self]),
                view(&[a_bare, b_self, c_self]),
                true,
                true,
            ),
            (
                meeting(&[a_bare, b_self, c_self]),
                meeting(&[a_bare, b_self, c_self]),
                view(&[a_bare, b_self, c_self]),
                true,
                false,
            ),
            // A departing node every other one has forgotten is not asked,
            // meets and all.
            (
                view(&[a_self, c_self]),
                meeting(&[a_self, b_self, c_self]),
                view(&[a_self, c_self]),
                false,
                true,
            ),
        ];
        for (i, (a, b, c, b_stays, agreed)) in cases.iter().enumerate() {
            let voice = |id, heard, staying, bare| Voice {
                id,
                heard,
                staying,
                bare,
            };
            let voices = [
                voice("a", a, true, a_bare.1),
                voice("b", b, *b_stays, b_pod.1),
                voice("c", c, true, "127.0.1.3:6379@16379"),
            ];
            assert_eq!(announce_agreed(&voices), *agreed, "case {i}");
        }
    }

    #[test]
    fn a_poll_takes_the_end_of_meets_for_news_but_not_their_start() {
        let heard = |addr: &str, handshakes| Heard {
            announced: [("a".to_string(), addr.to_string())].into(),
            handshakes,
        };
        let (old, new) = ("127.0.1.1:6379@16379", "10.0.0.1:30001@16379");
        // (before, later) => news
        for (before, later, want) in [
            (heard(old, 0), heard(old, 0), false),
            (heard(old, 0), heard(old, 3), false),
            (heard(old, 3), heard(old, 1), false),
            (heard(old, 3), heard(old, 0), true),
            (heard(old, 0), heard(new, 0), true),
            (heard(old, 0), heard(new, 2), true),
        ] {
            assert_eq!(before.news(&later), want, "{before:?} -> {later:?}");
        }
    }

    #[test]
    fn agreement_settles_after_two_agreeing_rounds_in_a_row() {
        // (the round before agreed, this one agreed, time is up) => settled,
        // or read again
        for (before, now, late, want) in [
            (true, true, false, Some(true)),
            (true, true, true, Some(true)),
            // The first agreeing round earns one more at once, even late.
            (false, true, false, None),
            (false, true, true, None),
            (false, false, false, None),
            (true, false, false, None),
            (false, false, true, Some(false)),
            (true, false, true, Some(false)),
        ] {
            assert_eq!(
                agreed_twice(before, now, late),
                want,
                "{before} {now} {late}"
            );
        }
    }

    #[test]
    fn a_node_spreads_its_news_to_every_other_node_or_only_to_those_it_knows() {
        let me = ValkeyNode {
            id: "a".into(),
            peers: vec![Peer {
                id: "b".into(),
                failed: false,
                linked: true,
            }],
            ..ValkeyNode::default()
        };
        let ip = |i: u8| IpAddr::from([127, 0, 1, i]);
        let answering = [("a", ip(1)), ("b", ip(2)), ("c", ip(3))];
        let at = |id: &str, i| (id.to_string(), ip(i));
        for (to, want) in [
            // A primary given slots: all of them, never itself.
            (Known::Any, vec![at("b", 2), at("c", 3)]),
            // A changed announcement: not `c`, which the plan keeps out.
            (Known::Only, vec![at("b", 2)]),
        ] {
            assert_eq!(spread_to(&me, to, answering.into_iter()), want, "{to:?}");
        }
    }

    #[test]
    fn forget_goes_to_every_node_that_knows_the_id_but_its_replicas() {
        let node = |primary: Option<&str>, peers: &[&str]| ValkeyNode {
            id: "me".into(),
            primary: primary.map(String::from),
            peers: peers
                .iter()
                .map(|id| Peer {
                    id: (*id).into(),
                    ..Peer::default()
                })
                .collect(),
            ..ValkeyNode::default()
        };
        // (primary, peers) => told to forget "gone"
        let cases = [
            (None, vec!["gone", "x"], true),
            (Some("x"), vec!["gone", "x"], true),
            (Some("gone"), vec!["gone"], false),
            (None, vec!["x"], false),
        ];
        for (primary, peers, want) in cases {
            assert_eq!(
                forgets(&node(primary, &peers), "gone"),
                want,
                "{primary:?} {peers:?}"
            );
        }
    }
}
