//! The client-facing announce settings: the guest computes a value for each,
//! the host sets them live with `CONFIG SET` and never touches any other.

/// Every client-only announce setting, in the order they are reported. A
/// node's `announce` list carries each of them, so that disabling resets what
/// enabling set.
pub const KEYS: [&str; 7] = [
    "cluster-announce-human-nodename",
    "cluster-announce-hostname",
    "cluster-announce-client-ipv4",
    "cluster-announce-client-ipv6",
    "cluster-announce-client-port",
    "cluster-announce-client-tls-port",
    "cluster-preferred-endpoint-type",
];

/// Whether `key` is one of [`KEYS`].
pub fn is_announce_key(key: &str) -> bool {
    KEYS.contains(&key)
}
