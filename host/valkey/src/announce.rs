//! Which announce settings differ from what a node has now.
//!
//! Pure functions, so the "no needless writes" rule is testable without a
//! server.

use shardgate_contract::announce;

/// Keys whose values Valkey parses as integers: `"0"` and `"00"` are equal,
/// but `CONFIG SET` rejects leading zeros, so only the comparison is lenient.
const NUMERIC_KEYS: [&str; 2] = [
    "cluster-announce-client-port",
    "cluster-announce-client-tls-port",
];

/// Keys whose values Valkey parses as enums: `CONFIG GET` returns them in
/// lower case whatever case they were set in.
const ENUM_KEYS: [&str; 1] = ["cluster-preferred-endpoint-type"];

/// The announce settings that other nodes tell clients of (in `CLUSTER
/// SLOTS`, `CLUSTER NODES` and redirects), learnt by gossip. The human node
/// name and the preferred endpoint type are the node's own: a change of
/// them has nothing to spread.
const TOLD_BY_OTHERS: [&str; 5] = [
    "cluster-announce-hostname",
    "cluster-announce-client-ipv4",
    "cluster-announce-client-ipv6",
    "cluster-announce-client-port",
    "cluster-announce-client-tls-port",
];

/// Whether other nodes tell clients what a node has for `key`, so that a
/// change of it must spread to them.
pub fn told_by_others(key: &str) -> bool {
    TOLD_BY_OTHERS.contains(&key)
}

/// Whether `key` is one of the client-facing announce settings shardgate
/// manages. Nothing else may be changed through [`crate::NodeClient`].
pub fn is_managed(key: &str) -> bool {
    announce::is_announce_key(key)
}

/// Whether the value a node reports (`current`) already is `wanted`, in the
/// way Valkey normalizes that setting. Strings (hostnames, IPs, the human
/// node name) are stored verbatim by Valkey, so they compare exactly.
pub fn same_value(key: &str, current: &str, wanted: &str) -> bool {
    if current == wanted {
        return true;
    }
    if NUMERIC_KEYS.contains(&key) {
        return matches!(
            (current.trim().parse::<i64>(), wanted.trim().parse::<i64>()),
            (Ok(a), Ok(b)) if a == b
        );
    }
    if ENUM_KEYS.contains(&key) {
        return current.eq_ignore_ascii_case(wanted);
    }
    false
}

/// The `(key, value)` pairs of `wanted` that differ from `current`, in the
/// order of `wanted`. A key missing from `current` counts as different.
pub fn changes<'a>(
    wanted: &'a [(String, String)],
    current: &impl Fn(&str) -> Option<&'a str>,
) -> Vec<(&'a str, &'a str)> {
    wanted
        .iter()
        .filter(|(k, v)| !current(k).is_some_and(|c| same_value(k, c, v)))
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn pairs(p: &[(&str, &str)]) -> Vec<(String, String)> {
        p.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn only_what_other_nodes_tell_clients_is_spread() {
        for key in announce::KEYS {
            let want = !matches!(
                key,
                "cluster-announce-human-nodename" | "cluster-preferred-endpoint-type"
            );
            assert_eq!(told_by_others(key), want, "{key}");
        }
        assert!(!told_by_others("maxmemory"));
    }

    #[test]
    fn only_differing_keys_change() {
        let now: HashMap<String, String> = pairs(&[
            ("cluster-announce-client-port", "0"),
            ("cluster-announce-client-ipv4", ""),
            ("cluster-preferred-endpoint-type", "ip"),
        ])
        .into_iter()
        .collect();
        let wanted = pairs(&[
            ("cluster-announce-client-port", "31000"),
            ("cluster-announce-client-ipv4", ""),
            ("cluster-preferred-endpoint-type", "IP"),
            ("cluster-announce-hostname", ""),
        ]);
        let get = |k: &str| now.get(k).map(String::as_str);
        let got = changes(&wanted, &get);
        assert_eq!(
            got,
            [
                ("cluster-announce-client-port", "31000"),
                ("cluster-announce-hostname", "")
            ]
        );
    }

    #[test]
    fn normalization_is_per_key() {
        assert!(same_value("cluster-announce-client-port", "0", "00"));
        assert!(!same_value("cluster-announce-client-port", "0", ""));
        assert!(same_value(
            "cluster-preferred-endpoint-type",
            "hostname",
            "HOSTNAME"
        ));
        // Valkey keeps the case of a hostname as set.
        assert!(!same_value(
            "cluster-announce-hostname",
            "shard-0.example.com",
            "Shard-0.example.com"
        ));
        assert!(is_managed("cluster-announce-client-ipv6"));
        assert!(!is_managed("cluster-announce-ip"));
    }
}
