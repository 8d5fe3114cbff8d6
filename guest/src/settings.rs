//! `spec.config`: the user's valkey.conf settings. Settings the operator
//! owns are refused; the rest are written into every node's config (so a
//! restarted node keeps them) and either set live with `CONFIG SET` (the
//! vetted [`LIVE`] list, as upstream does) or rolled out by restarting the
//! pods one at a time.

use shardgate_contract::announce;
use shardgate_contract::model::Pair;

/// Settings the operator owns, as prefixes (`tls-` covers every TLS key).
/// Each is refused in `spec.config`: they are what makes the node reachable,
/// a cluster member, authenticated and persistent in the operator's way.
const OWNED_PREFIXES: [&str; 2] = ["tls-", "cluster-"];

/// Settings the operator owns, exactly.
const OWNED: [&str; 16] = [
    "port",
    "bind",
    "aclfile",
    "dir",
    "protected-mode",
    "requirepass",
    "masteruser",
    "masterauth",
    "primaryuser",
    "primaryauth",
    "replicaof",
    "slaveof",
    "include",
    "daemonize",
    "loadmodule",
    "rename-command",
];

/// Settings known to change at runtime with `CONFIG SET` without
/// disturbing clients; they are set live. Any other setting rolls the pods
/// one at a time (a setting `CONFIG SET` refuses, or one whose runtime change
/// shardgate has not vetted, is never tried live).
pub const LIVE: [&str; 38] = [
    "active-defrag-cycle-max",
    "active-defrag-cycle-min",
    "active-defrag-ignore-bytes",
    "active-defrag-threshold-lower",
    "active-defrag-threshold-upper",
    "activedefrag",
    "appendfsync",
    "auto-aof-rewrite-min-size",
    "auto-aof-rewrite-percentage",
    "busy-reply-threshold",
    "client-output-buffer-limit",
    "hash-max-listpack-entries",
    "hash-max-listpack-value",
    "hz",
    "latency-monitor-threshold",
    "lazyfree-lazy-eviction",
    "lazyfree-lazy-expire",
    "lazyfree-lazy-server-del",
    "lazyfree-lazy-user-del",
    "lazyfree-lazy-user-flush",
    "list-max-listpack-size",
    "lua-time-limit",
    "maxclients",
    "maxmemory",
    "maxmemory-policy",
    "maxmemory-samples",
    "min-replicas-max-lag",
    "min-replicas-to-write",
    "notify-keyspace-events",
    "save",
    "set-max-intset-entries",
    "slowlog-log-slower-than",
    "slowlog-max-len",
    "tcp-keepalive",
    "timeout",
    "zset-max-listpack-entries",
    "zset-max-listpack-value",
    "stream-node-max-entries",
];

/// Why a setting is refused, if it is. `key` is as written.
pub fn refusal(key: &str, value: &str) -> Option<String> {
    let lower = key.to_ascii_lowercase();
    if lower.is_empty()
        || !lower
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
    {
        return Some(format!(
            "{key:?} is not a valkey.conf setting name (letters, digits and '-')"
        ));
    }
    if value.contains(['\n', '\r']) || value.contains('\0') {
        return Some(format!("the value of {key} must be one line"));
    }
    if OWNED.contains(&lower.as_str())
        || OWNED_PREFIXES.iter().any(|p| lower.starts_with(p))
        || announce::is_announce_key(&lower)
    {
        return Some(format!(
            "{key} is set by the operator (clustering, ports, TLS, authentication, \
             replication and announce settings are its own) and cannot be changed here"
        ));
    }
    None
}

/// The settings, lower-cased and sorted by key (the last of duplicate keys
/// wins), as they go into every node's config.
pub fn normalized(config: &[Pair]) -> Vec<Pair> {
    let mut out: Vec<Pair> = Vec::with_capacity(config.len());
    for (k, v) in config {
        let k = k.to_ascii_lowercase();
        match out.iter_mut().find(|(have, _)| *have == k) {
            Some(slot) => slot.1 = v.clone(),
            None => out.push((k, v.clone())),
        }
    }
    out.sort();
    out
}

/// Splits normalized settings into those set live and the ones that roll
/// the pods, as canonical lines (empty when none).
pub fn split(settings: &[Pair]) -> (Vec<Pair>, String) {
    let mut live = Vec::new();
    let mut rolled = String::new();
    for (k, v) in settings {
        if LIVE.contains(&k.as_str()) {
            live.push((k.clone(), v.clone()));
        } else {
            rolled.push_str(k);
            rolled.push(' ');
            rolled.push_str(v);
            rolled.push('\n');
        }
    }
    (live, rolled)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pairs(p: &[(&str, &str)]) -> Vec<Pair> {
        p.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn owned_settings_are_refused() {
        for key in [
            "port",
            "tls-port",
            "tls-cert-file",
            "cluster-enabled",
            "cluster-announce-client-port",
            "cluster-node-timeout",
            "aclfile",
            "dir",
            "protected-mode",
            "masterauth",
            "primaryuser",
            "Port",
            "include",
            "loadmodule",
        ] {
            assert!(refusal(key, "x").is_some(), "{key}");
        }
        for key in [
            "maxmemory",
            "maxmemory-policy",
            "appendfsync",
            "databases",
            "save",
        ] {
            assert_eq!(refusal(key, "1"), None, "{key}");
        }
        assert!(refusal("max memory", "1").is_some());
        assert!(refusal("", "1").is_some());
        assert!(refusal("maxmemory", "1\nport 7000").is_some());
    }

    #[test]
    fn the_live_list_is_sorted_free_of_owned_keys_and_unique() {
        let mut sorted = LIVE.to_vec();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted.len(), LIVE.len());
        assert!(LIVE.iter().all(|k| refusal(k, "1").is_none()), "{LIVE:?}");
    }

    #[test]
    fn settings_split_into_live_and_rolled() {
        let n = normalized(&pairs(&[
            ("maxmemory", "100mb"),
            ("Databases", "4"),
            ("maxmemory", "200mb"),
            ("save", "3600 1"),
        ]));
        assert_eq!(
            n,
            pairs(&[
                ("databases", "4"),
                ("maxmemory", "200mb"),
                ("save", "3600 1")
            ])
        );
        let (live, start) = split(&n);
        assert_eq!(live, pairs(&[("maxmemory", "200mb"), ("save", "3600 1")]));
        assert_eq!(start, "databases 4\n");
        assert_eq!(split(&[]), (Vec::new(), String::new()));
    }
}
