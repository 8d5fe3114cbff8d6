//! Every name shardgate generates, derived from the cluster name and indices.
//!
//! The grammar keeps names of different clusters apart: a shard Service is
//! `valkey-<cluster>-shard-<digits>` and a node object
//! `valkey-<cluster>-<digits>-<digits>`, so no cluster name produces another
//! cluster's name (see the `no_cross_cluster_collisions` property test).

use std::fmt::Write;

/// Prefix of every generated object name.
pub const OBJECT_PREFIX: &str = "valkey-";
/// Default `spec.externalAccess.hostnamePrefix`.
pub const DEFAULT_HOSTNAME_PREFIX: &str = "shard";
/// Default `spec.image`.
pub const DEFAULT_IMAGE: &str = "valkey/valkey:9.0";
/// The client port every node listens on, and the base of LoadBalancer ports.
pub const CLIENT_PORT: u32 = 6379;
/// The cluster bus port.
pub const BUS_PORT: u32 = 16379;

/// Label keys.
pub const LABEL_CLUSTER: &str = "valkey.io/cluster";
pub const LABEL_SHARD: &str = "valkey.io/shard-index";
pub const LABEL_NODE: &str = "valkey.io/node-index";

/// Longest name of a DNS-1035 label, which Service and port names must be.
pub const MAX_LABEL: usize = 63;
/// Longest StatefulSet name: the pods' `controller-revision-hash` label is
/// `<name>-<hash of up to 10 characters>` and must fit a 63-character label.
pub const MAX_STATEFULSET_NAME: usize = 52;
/// Longest IANA service name (a container or Service port name).
pub const MAX_PORT_NAME: usize = 15;
/// Longest DNS name.
pub const MAX_DNS_NAME: usize = 253;

/// `valkey-<cluster>-shard-<shard>`.
pub fn shard_service(cluster: &str, shard: u32) -> String {
    let mut s = String::with_capacity(OBJECT_PREFIX.len() + cluster.len() + 12);
    s.push_str(OBJECT_PREFIX);
    s.push_str(cluster);
    s.push_str("-shard-");
    push_u32(&mut s, shard);
    s
}

/// `valkey-<cluster>-<shard>-<node>`: the node's StatefulSet, ConfigMap and
/// headless Service.
pub fn node_object(cluster: &str, shard: u32, node: u32) -> String {
    let mut s = String::with_capacity(OBJECT_PREFIX.len() + cluster.len() + 12);
    s.push_str(OBJECT_PREFIX);
    s.push_str(&node_name(cluster, shard, node));
    s
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
    s.push_str("vk-n");
    push_u32(&mut s, node);
    s
}

/// The inverse of [`port_name`].
pub fn parse_port_name(name: &str) -> Option<u32> {
    let digits = name.strip_prefix("vk-n")?;
    if digits.is_empty() || (digits.len() > 1 && digits.starts_with('0')) {
        return None;
    }
    if !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
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

/// Number of decimal digits of `n`.
pub fn digits(n: u32) -> usize {
    n.checked_ilog10().unwrap_or(0) as usize + 1
}

fn push_u32(s: &mut String, n: u32) {
    let _ = write!(s, "{n}");
}

/// A DNS-1123 label: `[a-z0-9]([-a-z0-9]*[a-z0-9])?`, at most 63 characters.
pub fn is_dns_label(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= MAX_LABEL
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        && b[0] != b'-'
        && b[b.len() - 1] != b'-'
}

/// A DNS-1123 subdomain: dot-separated labels, at most 253 characters.
pub fn is_dns_subdomain(s: &str) -> bool {
    s.len() <= MAX_DNS_NAME && s.split('.').all(is_dns_label)
}

/// An IANA service name as Kubernetes checks a port name: at most 15
/// characters of `[a-z0-9-]`, at least one letter, no leading, trailing or
/// doubled hyphen.
pub fn is_iana_service_name(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= MAX_PORT_NAME
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        && b.iter().any(|c| c.is_ascii_lowercase())
        && b[0] != b'-'
        && b[b.len() - 1] != b'-'
        && !s.contains("--")
}

/// A Kubernetes qualified name (label or annotation key): an optional
/// DNS-subdomain prefix and `/`, then a name of at most 63 characters of
/// `[A-Za-z0-9._-]` that starts and ends alphanumeric.
pub fn is_qualified_name(s: &str) -> bool {
    let (prefix, name) = match s.split_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, s),
    };
    if let Some(p) = prefix
        && !is_dns_subdomain(p)
    {
        return false;
    }
    let b = name.as_bytes();
    !b.is_empty()
        && b.len() <= MAX_LABEL
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
        && b[0].is_ascii_alphanumeric()
        && b[b.len() - 1].is_ascii_alphanumeric()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_the_grammar() {
        assert_eq!(shard_service("c", 2), "valkey-c-shard-2");
        assert_eq!(node_object("c", 2, 1), "valkey-c-2-1");
        assert_eq!(node_name("c", 2, 1), "c-2-1");
        assert_eq!(port_name(12), "vk-n12");
        assert_eq!(
            announce_hostname("shard", 3, "example.com."),
            "shard-3.example.com"
        );
    }

    #[test]
    fn port_names_round_trip_and_reject_others() {
        for n in [0, 1, 9, 10, 99_999_999] {
            assert_eq!(parse_port_name(&port_name(n)), Some(n));
            assert!(is_iana_service_name(&port_name(n)), "{}", port_name(n));
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

    #[test]
    fn validators() {
        assert!(is_dns_label("a-0"));
        assert!(!is_dns_label("-a") && !is_dns_label("A") && !is_dns_label(""));
        assert!(!is_dns_label(&"a".repeat(64)));
        assert!(is_dns_subdomain("valkey.example.com"));
        assert!(!is_dns_subdomain("valkey..example.com") && !is_dns_subdomain("a_b.com"));
        assert!(is_iana_service_name("cluster-bus"));
        assert!(!is_iana_service_name("123") && !is_iana_service_name("a--b"));
        assert!(!is_iana_service_name("abcdefghijklmnop"));
        assert!(is_qualified_name("example.com/team") && is_qualified_name("team"));
        assert!(!is_qualified_name("Example.com/x") && !is_qualified_name("x/"));
        assert_eq!(digits(0), 1);
        assert_eq!(digits(9), 1);
        assert_eq!(digits(10), 2);
        assert_eq!(digits(u32::MAX), 10);
    }
}
