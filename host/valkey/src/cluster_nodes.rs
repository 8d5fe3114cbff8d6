//! Parsing what a node says about the cluster: `CLUSTER NODES` lines and
//! `CLUSTER GETSLOTMIGRATIONS` states. Pure, so it is tested without a
//! server.
//!
//! Only IDs, flags, the primary's ID and slots are read. Addresses are
//! ignored on purpose: with client-only announce settings they are the
//! external endpoints, not where the operator can reach a node.

use std::collections::BTreeMap;

use shardgate_contract::model::{Peer, SlotRange};

/// What a node's `CLUSTER NODES` says about itself and the others.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct View {
    pub id: String,
    /// The primary this node replicates.
    pub primary: Option<String>,
    pub slots: Vec<SlotRange>,
    /// The other nodes, handshakes excluded.
    pub peers: Vec<Peer>,
    /// What each node (itself included) announces to clients, as this node
    /// sees it: the `ip:port@cport[,hostname]` field, by node ID. Used only
    /// to tell when a change of announce settings has spread by gossip.
    pub announced: BTreeMap<String, String>,
    /// Meets this node made that are not answered yet (`handshake` lines).
    /// A meet carries no announce fields: a met node that knew this one
    /// forgets what it announces when the meet arrives, and hands clients
    /// its bus address (its pod IP) until it hears from it again, about
    /// 0.1 s later.
    pub handshakes: usize,
    /// This node's line shows a slot it is importing or migrating the
    /// classic way (`[slot->-id]`, `[slot-<-id]`).
    pub marked_migrating: bool,
}

/// Parses `CLUSTER NODES` output. Fails if there is no `myself` line.
pub fn parse(text: &str) -> Result<View, String> {
    let mut me: Option<View> = None;
    let mut peers = Vec::new();
    let mut announced = BTreeMap::new();
    let mut handshakes = 0;
    for line in text.lines().map(str::trim).filter(|l| !l.is_empty()) {
        let fields: Vec<&str> = line.split_ascii_whitespace().collect();
        if fields.len() < 8 {
            return Err(format!("short CLUSTER NODES line: {line:?}"));
        }
        let (id, flags, primary) = (fields[0], fields[2], fields[3]);
        let flag = |f: &str| flags.split(',').any(|x| x == f);
        if flag("handshake") {
            handshakes += 1;
        }
        if !flag("handshake") && !flag("noaddr") {
            announced.insert(id.to_string(), fields[1].to_string());
        }
        if flag("myself") {
            me = Some(View {
                id: id.to_string(),
                primary: (primary != "-").then(|| primary.to_string()),
                slots: fields[8..].iter().filter_map(|s| parse_slots(s)).collect(),
                peers: Vec::new(),
                announced: BTreeMap::new(),
                handshakes: 0,
                marked_migrating: fields[8..].iter().any(|s| s.starts_with('[')),
            });
        } else if !flag("handshake") && !flag("noaddr") {
            peers.push(Peer {
                id: id.to_string(),
                failed: flag("fail"),
                linked: fields[7] == "connected" && !flag("fail") && !flag("fail?"),
            });
        }
    }
    let mut me = me.ok_or("CLUSTER NODES has no `myself` line")?;
    me.peers = peers;
    me.announced = announced;
    me.handshakes = handshakes;
    Ok(me)
}

/// `5461`, `0-5460`; `[slot->-id]` / `[slot-<-id]` migration markers are
/// not served slots and give `None`.
fn parse_slots(s: &str) -> Option<SlotRange> {
    if s.starts_with('[') {
        return None;
    }
    let (start, end) = match s.split_once('-') {
        Some((a, b)) => (a.parse().ok()?, b.parse().ok()?),
        None => {
            let v = s.parse().ok()?;
            (v, v)
        }
    };
    Some(SlotRange { start, end })
}

/// Whether a `CLUSTER GETSLOTMIGRATIONS` job state means the job is still
/// running (anything but a final state).
pub fn is_running(state: &str) -> bool {
    !matches!(
        state.to_ascii_lowercase().as_str(),
        "success" | "failed" | "cancelled" | "canceled"
    )
}

/// `master_link_status` from `INFO replication`: true once a replica's link
/// is up and its initial sync is done; a primary has no such line.
pub fn replica_synced(info: &str) -> bool {
    let field = |name: &str| {
        info.lines()
            .find_map(|l| l.trim().strip_prefix(name)?.strip_prefix(':'))
            .map(str::trim)
    };
    match field("master_link_status") {
        None => true,
        Some(status) => status == "up" && field("master_sync_in_progress") != Some("1"),
    }
}

/// The server's version from `INFO server`: `valkey_version`, else
/// `redis_version` (servers before Valkey 8 report only that); empty if
/// neither is there.
pub fn server_version(info: &str) -> String {
    let field = |name: &str| {
        info.lines()
            .find_map(|l| l.trim().strip_prefix(name)?.strip_prefix(':'))
            .map(|v| v.trim().to_string())
    };
    field("valkey_version")
        .or_else(|| field("redis_version"))
        .unwrap_or_default()
}

/// `cluster_state:ok` in `CLUSTER INFO`.
pub fn cluster_state_ok(info: &str) -> bool {
    info.lines().any(|l| l.trim() == "cluster_state:ok")
}

#[cfg(test)]
mod tests {
    use super::*;

    const NODES: &str = "\
82ad9d3c 127.0.0.1:30001@16379,shard-1.example.com master - 0 1796 2 connected 0-99 200-300 [301->-aa]
2075c8a9 127.0.5.1:6379@16379 myself,slave 82ad9d3c 0 0 1 connected
ffff0000 :0@0 master,fail,noaddr - 0 0 0 disconnected
deadbeef 127.0.0.9:6379@16379 master,fail - 0 0 3 disconnected
c0ffee00 127.0.0.8:6379@16379 handshake - 0 0 0 connected
";

    #[test]
    fn reads_ids_and_flags_not_addresses() {
        let v = parse(NODES).unwrap();
        assert_eq!(v.id, "2075c8a9");
        assert_eq!(v.primary.as_deref(), Some("82ad9d3c"));
        assert!(v.slots.is_empty());
        assert_eq!(v.announced["2075c8a9"], "127.0.5.1:6379@16379");
        assert_eq!(
            v.announced["82ad9d3c"],
            "127.0.0.1:30001@16379,shard-1.example.com"
        );
        assert!(!v.announced.contains_key("c0ffee00"));
        assert_eq!(v.handshakes, 1);
        let settled: String = NODES
            .lines()
            .filter(|l| !l.contains("handshake"))
            .collect::<Vec<_>>()
            .join("\n");
        assert_eq!(parse(&settled).unwrap().handshakes, 0);
        assert_eq!(
            v.peers,
            vec![
                Peer {
                    id: "82ad9d3c".into(),
                    failed: false,
                    linked: true,
                },
                Peer {
                    id: "deadbeef".into(),
                    failed: true,
                    linked: false,
                },
            ]
        );
    }

    #[test]
    fn reads_slot_ranges_and_skips_migration_markers() {
        let text = "aa 1.2.3.4:6379@16379 myself,master - 0 0 1 connected 0-99 150 [151->-bb]\n";
        let v = parse(text).unwrap();
        assert_eq!(
            v.slots,
            vec![
                SlotRange { start: 0, end: 99 },
                SlotRange {
                    start: 150,
                    end: 150
                }
            ]
        );
        assert_eq!(v.primary, None);
        assert!(v.marked_migrating);
        assert!(!parse(NODES).unwrap().marked_migrating);
    }

    #[test]
    fn versions_come_from_info_server() {
        let info =
            "# Server\r\nredis_version:7.2.4\r\nserver_name:valkey\r\nvalkey_version:8.1.8\r\n";
        assert_eq!(server_version(info), "8.1.8");
        assert_eq!(server_version("redis_version:7.2.4\r\n"), "7.2.4");
        assert_eq!(server_version("# Server\r\n"), "");
    }

    #[test]
    fn no_myself_line_is_an_error() {
        assert!(parse("aa 1.2.3.4:6379@16379 master - 0 0 1 connected\n").is_err());
        assert!(parse("aa b c\n").is_err());
    }

    #[test]
    fn migration_and_sync_states() {
        assert!(!is_running("success") && !is_running("failed"));
        assert!(is_running("snapshotting") && is_running("connecting"));
        assert!(replica_synced("role:master\r\nconnected_slaves:0\r\n"));
        assert!(replica_synced(
            "role:slave\r\nmaster_link_status:up\r\nmaster_sync_in_progress:0\r\n"
        ));
        assert!(!replica_synced("role:slave\r\nmaster_link_status:down\r\n"));
        assert!(cluster_state_ok(
            "cluster_state:ok\r\ncluster_slots_assigned:16384\r\n"
        ));
        assert!(!cluster_state_ok("cluster_state:fail\r\n"));
    }
}
