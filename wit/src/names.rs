//! The names both sides derive from a cluster's name and a node's indices.
//!
//! The guest names every object it wants; the host finds those objects
//! again by the same grammar (a node's client port by its name, say), so a
//! hot-swapped module that named things otherwise would break the host. The
//! grammar keeps names of different clusters apart: a shard Service is
//! `shardgate-<cluster>-shard-<digits>` and a node object
//! `shardgate-<cluster>-<digits>-<digits>`, so no cluster name produces another
//! cluster's name (the `prefix_related_cluster_names_do_not_collide`
//! property test).

use std::fmt::Write;

/// Prefix of every generated object name.
pub const OBJECT_PREFIX: &str = "shardgate-";
/// Default `spec.externalAccess.hostnamePrefix`.
pub const DEFAULT_HOSTNAME_PREFIX: &str = "shard";
/// Default `spec.image`.
pub const DEFAULT_IMAGE: &str = "valkey/valkey:9.0";
/// The client port every node listens on, and the base of LoadBalancer ports.
pub const CLIENT_PORT: u32 = 6379;
/// The cluster bus port.
pub const BUS_PORT: u32 = 16379;
/// The prefix of a node's client port name (`vk-n<node>`).
pub const PORT_NAME_PREFIX: &str = "vk-n";

/// The shard whose Service of `cluster` is named `name`
/// ([`shard_service`]), if it is one.
pub fn parse_shard_service(cluster: &str, name: &str) -> Option<u32> {
    let rest = name.strip_prefix(OBJECT_PREFIX)?.strip_prefix(cluster)?;
    parse_index(rest.strip_prefix("-shard-")?)
}

/// `shardgate-<cluster>-shard-<shard>`.
pub fn shard_service(cluster: &str, shard: u32) -> String {
    let mut s = String::with_capacity(OBJECT_PREFIX.len() + cluster.len() + 12);
    s.push_str(OBJECT_PREFIX);
    s.push_str(cluster);
    s.push_str("-shard-");
    push_u32(&mut s, shard);
    s
}

/// The shard and node whose own external Service of `cluster` is named
/// `name` ([`node_service`]), if it is one.
pub fn parse_node_service(cluster: &str, name: &str) -> Option<(u32, u32)> {
    let rest = name
        .strip_prefix(OBJECT_PREFIX)?
        .strip_prefix(cluster)?
        .strip_prefix("-shard-")?;
    let (shard, node) = rest.split_once("-node-")?;
    Some((parse_index(shard)?, parse_index(node)?))
}

/// `shardgate-<cluster>-shard-<shard>-node-<node>`: a node's own external
/// Service (`topology: PerNode`).
pub fn node_service(cluster: &str, shard: u32, node: u32) -> String {
    let mut s = shard_service(cluster, shard);
    s.push_str("-node-");
    push_u32(&mut s, node);
    s
}

/// `shardgate-<cluster>-<shard>-<node>`: the node's StatefulSet, ConfigMap and
/// headless Service.
pub fn node_object(cluster: &str, shard: u32, node: u32) -> String {
    let mut s = String::with_capacity(OBJECT_PREFIX.len() + cluster.len() + 12);
    s.push_str(OBJECT_PREFIX);
    s.push_str(&node_name(cluster, shard, node));
    s
}

/// `<cluster>-users`: the user-facing Secret of passwords, where the
/// operator generates the `default` user's (upstream's name for it).
pub fn users_secret(cluster: &str) -> String {
    format!("{cluster}-users")
}

/// `shardgate-<cluster>-acl`: the operator-owned Secret holding the aclfile.
pub fn acl_secret(cluster: &str) -> String {
    format!("{OBJECT_PREFIX}{cluster}-acl")
}

/// `shardgate-<cluster>`: the cluster's PodDisruptionBudget.
pub fn disruption_budget(cluster: &str) -> String {
    format!("{OBJECT_PREFIX}{cluster}")
}

/// `shardgate-<cluster>-system`: the operator-owned Secret holding the system
/// users' passwords and the replicas' `masterauth` include file.
pub fn system_secret(cluster: &str) -> String {
    format!("{OBJECT_PREFIX}{cluster}-system")
}

/// `<cluster>-<shard>-<node>`: the human node name.
pub fn node_name(cluster: &str, shard: u32, node: u32) -> String {
    let mut s = String::with_capacity(cluster.len() + 12);
    s.push_str(cluster);
    s.push('-');
    push_u32(&mut s, shard);
    s.push('-');
    push_u32(&mut s, node);
    s
}

/// `vk-n<node>`: the name of node `node`'s client port, on its container and
/// on its shard Service.
pub fn port_name(node: u32) -> String {
    let mut s = String::with_capacity(8);
    s.push_str(PORT_NAME_PREFIX);
    push_u32(&mut s, node);
    s
}

/// The inverse of [`port_name`]: `None` for any other name.
pub fn parse_port_name(name: &str) -> Option<u32> {
    parse_index(name.strip_prefix(PORT_NAME_PREFIX)?)
}

/// `<prefix>-<shard>.<domain>`.
pub fn announce_hostname(prefix: &str, shard: u32, domain: &str) -> String {
    let mut s = String::with_capacity(prefix.len() + domain.len() + 12);
    s.push_str(prefix);
    s.push('-');
    push_u32(&mut s, shard);
    s.push('.');
    s.push_str(domain.trim_end_matches('.'));
    s
}

/// `<prefix>-<shard>-<node>.<domain>`: a node's own announced hostname
/// (`hostnameScope: Node`).
pub fn node_hostname(prefix: &str, shard: u32, node: u32, domain: &str) -> String {
    let mut s = String::with_capacity(prefix.len() + domain.len() + 24);
    s.push_str(prefix);
    s.push('-');
    push_u32(&mut s, shard);
    s.push('-');
    push_u32(&mut s, node);
    s.push('.');
    s.push_str(domain.trim_end_matches('.'));
    s
}

/// The annotation external-dns reads a Service's hostnames from.
pub const EXTERNAL_DNS_HOSTNAME: &str = "external-dns.alpha.kubernetes.io/hostname";

/// A decimal index as the names write it: digits only, no leading zero.
pub fn parse_index(digits: &str) -> Option<u32> {
    if digits.is_empty() || (digits.len() > 1 && digits.starts_with('0')) {
        return None;
    }
    if !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

fn push_u32(s: &mut String, n: u32) {
    let _ = write!(s, "{n}");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_the_grammar() {
        assert_eq!(shard_service("c", 2), "shardgate-c-shard-2");
        assert_eq!(node_object("c", 2, 1), "shardgate-c-2-1");
        assert_eq!(node_service("c", 2, 1), "shardgate-c-shard-2-node-1");
        assert_eq!(node_name("c", 2, 1), "c-2-1");
        assert_eq!(port_name(12), "vk-n12");
        assert_eq!(users_secret("c"), "c-users");
        assert_eq!(acl_secret("c"), "shardgate-c-acl");
        assert_eq!(system_secret("c"), "shardgate-c-system");
        assert_eq!(
            announce_hostname("shard", 3, "example.com."),
            "shard-3.example.com"
        );
        assert_eq!(
            node_hostname("shard", 3, 1, "example.com."),
            "shard-3-1.example.com"
        );
    }

    #[test]
    fn service_names_parse_back_to_their_indices_and_no_other() {
        for (s, n) in [(0, 0), (2, 1), (12, 11)] {
            assert_eq!(parse_shard_service("c", &shard_service("c", s)), Some(s));
            assert_eq!(
                parse_node_service("c", &node_service("c", s, n)),
                Some((s, n))
            );
            // One grammar never reads as the other.
            assert_eq!(parse_node_service("c", &shard_service("c", s)), None);
            assert_eq!(parse_shard_service("c", &node_service("c", s, n)), None);
        }
        for bad in [
            "shardgate-c-shard-0-node-",
            "shardgate-c-shard-0-node-01",
            "shardgate-c-shard--node-1",
            "shardgate-c-0-1",
            "shardgate-d-shard-0-node-1",
        ] {
            assert_eq!(parse_node_service("c", bad), None, "{bad}");
        }
    }

    #[test]
    fn port_names_round_trip_and_reject_others() {
        for n in [0, 1, 9, 10, 99_999_999] {
            assert_eq!(parse_port_name(&port_name(n)), Some(n));
        }
        for bad in [
            "vk-n",
            "vk-n01",
            "vk-nx",
            "client",
            "vk-n-1",
            "vk-n4294967296",
        ] {
            assert_eq!(parse_port_name(bad), None, "{bad}");
        }
    }
}
