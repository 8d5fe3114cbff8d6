//! What a Valkey server version can do: which announce settings it has and
//! whether it migrates slots atomically. Versions come from the nodes
//! themselves (`INFO server`), never from the image name.

use shardgate_contract::announce::KEYS;
use shardgate_contract::model::ValkeyNode;

/// `cluster-announce-client-port` and `-client-tls-port`, and atomic slot
/// migration (`CLUSTER MIGRATESLOTS`), came with Valkey 9.0.
pub const CLIENT_PORT_SINCE: (u32, u32) = (9, 0);
/// `cluster-announce-client-ipv4`/`-ipv6` came with Valkey 8.0.
pub const CLIENT_IP_SINCE: (u32, u32) = (8, 0);

/// A server version, as far as it matters here. `Unknown` when no node
/// that could tell answered.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub enum Server {
    /// Nothing is known: only what every supported version has is asked of
    /// it, so a node never fails to start on a setting it lacks.
    #[default]
    Unknown,
    /// `(major, minor)` and the text the node reported.
    Known((u32, u32), String),
    /// The operator does not manage Valkey, so it never asks: every setting
    /// is written as for the newest server.
    Assumed,
}

impl Server {
    /// Parses `valkey_version` (`9.0.1`, `8.1.8`); anything unparseable is
    /// unknown.
    pub fn parse(version: &str) -> Self {
        let mut parts = version.trim().split('.').map(|p| p.parse::<u32>());
        match (parts.next(), parts.next()) {
            (Some(Ok(major)), Some(Ok(minor))) => {
                Server::Known((major, minor), version.trim().to_string())
            }
            _ => Server::Unknown,
        }
    }

    fn at_least(&self, since: (u32, u32)) -> bool {
        match self {
            Server::Known(v, _) => *v >= since,
            Server::Assumed => true,
            Server::Unknown => false,
        }
    }

    /// Known to lack something the newest server has.
    pub fn is_old(&self) -> bool {
        matches!(self, Server::Known(..)) && !self.announces_client_port()
    }

    /// The server has `cluster-announce-client-port`: it can announce an
    /// external port to clients only, so external access works.
    pub fn announces_client_port(&self) -> bool {
        self.at_least(CLIENT_PORT_SINCE)
    }

    /// The server migrates slots with `CLUSTER MIGRATESLOTS`.
    pub fn migrates_atomically(&self) -> bool {
        self.at_least(CLIENT_PORT_SINCE)
    }

    /// The version an image's tag names (`valkey/valkey:8.1`,
    /// `registry:5000/valkey:9.0.1-alpine`), as a hint until a node says:
    /// unknown for a digest, `latest` or any other tag.
    pub fn from_image(image: &str) -> Self {
        let image = image.split('@').next().unwrap_or_default();
        let last = image.rsplit('/').next().unwrap_or_default();
        let Some((_, tag)) = last.split_once(':') else {
            return Server::Unknown;
        };
        let end = tag
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(tag.len());
        Server::parse(&tag[..end])
    }

    /// Whether the server has announce setting `key`.
    pub fn has_key(&self, key: &str) -> bool {
        match key {
            "cluster-announce-client-port" | "cluster-announce-client-tls-port" => {
                self.announces_client_port()
            }
            "cluster-announce-client-ipv4" | "cluster-announce-client-ipv6" => {
                self.at_least(CLIENT_IP_SINCE)
            }
            _ => KEYS.contains(&key),
        }
    }

    /// The version as the node reported it; `unknown` if none.
    pub fn text(&self) -> &str {
        match self {
            Server::Unknown => "unknown",
            Server::Known(_, text) => text,
            Server::Assumed => "not observed",
        }
    }
}

/// The server each node runs: its own reported version if it answered,
/// else the oldest any answering node reports (a restarting node most
/// likely runs what its peers run; when they differ, the oldest is the one
/// that must not be asked for too much), else the image tag's, else
/// unknown.
pub struct Servers {
    known: Vec<((u32, u32), Server)>,
    oldest: Server,
}

impl Servers {
    /// `facts` none: Valkey is not managed, every server is
    /// [`Server::Assumed`]. `hint` is what the image tag says.
    pub fn new(facts: Option<&[ValkeyNode]>, hint: Server) -> Self {
        let Some(facts) = facts else {
            return Servers {
                known: Vec::new(),
                oldest: Server::Assumed,
            };
        };
        let known: Vec<((u32, u32), Server)> = facts
            .iter()
            .map(|f| ((f.shard, f.node), Server::parse(&f.version)))
            .filter(|(_, s)| *s != Server::Unknown)
            .collect();
        let oldest = known.iter().map(|(_, s)| s.clone()).min().unwrap_or(hint);
        Servers { known, oldest }
    }

    /// The oldest server the cluster runs, as far as is known: what every
    /// node must cope with (the one aclfile they all load, say).
    pub fn oldest(&self) -> &Server {
        &self.oldest
    }

    pub fn of(&self, shard: u32, node: u32) -> &Server {
        self.known
            .iter()
            .find(|(at, _)| *at == (shard, node))
            .map_or(&self.oldest, |(_, s)| s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_parse_and_order() {
        for (text, want) in [
            ("9.0.1", Some((9, 0))),
            ("8.1.8", Some((8, 1))),
            (" 10.2 ", Some((10, 2))),
            ("", None),
            ("nine", None),
            ("9", None),
        ] {
            let got = match Server::parse(text) {
                Server::Known(v, _) => Some(v),
                Server::Unknown | Server::Assumed => None,
            };
            assert_eq!(got, want, "{text:?}");
        }
        assert!(Server::parse("8.1.8") < Server::parse("9.0.0"));
        assert!(Server::Unknown < Server::parse("7.2.4"));
    }

    #[test]
    fn keys_follow_the_version() {
        // (version, client port, client ip, hostname)
        for (v, port, ip, host) in [
            ("9.0.0", true, true, true),
            ("9.1.2", true, true, true),
            ("8.1.8", false, true, true),
            ("8.0.0", false, true, true),
            ("7.2.4", false, false, true),
            ("", false, false, true),
        ] {
            let s = Server::parse(v);
            assert_eq!(s.has_key("cluster-announce-client-port"), port, "{v}");
            assert_eq!(s.has_key("cluster-announce-client-tls-port"), port, "{v}");
            assert_eq!(s.has_key("cluster-announce-client-ipv4"), ip, "{v}");
            assert_eq!(s.has_key("cluster-announce-hostname"), host, "{v}");
            assert_eq!(s.migrates_atomically(), port, "{v}");
        }
        assert!(!Server::parse("9.0.0").has_key("cluster-announce-ip"));
    }

    #[test]
    fn an_image_tag_hints_at_the_version() {
        for (image, want) in [
            ("valkey/valkey:9.0", Some((9, 0))),
            ("valkey/valkey:8.1.8-alpine", Some((8, 1))),
            ("registry.example.com:5000/team/valkey:9.1.2", Some((9, 1))),
            ("registry.example.com:5000/valkey", None),
            ("valkey/valkey:latest", None),
            ("valkey/valkey@sha256:abcd", None),
            ("valkey/valkey:9.0@sha256:abcd", Some((9, 0))),
        ] {
            let got = match Server::from_image(image) {
                Server::Known(v, _) => Some(v),
                _ => None,
            };
            assert_eq!(got, want, "{image}");
        }
    }

    #[test]
    fn a_silent_node_is_taken_to_run_the_oldest_version_seen() {
        let fact = |shard, node, version: &str| ValkeyNode {
            shard,
            node,
            version: version.into(),
            ..ValkeyNode::default()
        };
        let facts = [fact(0, 0, "9.0.1"), fact(0, 1, "8.1.8"), fact(1, 0, "")];
        let servers = Servers::new(Some(&facts), Server::parse("9.9"));
        assert_eq!(servers.of(0, 0).text(), "9.0.1");
        assert_eq!(servers.of(0, 1).text(), "8.1.8");
        assert_eq!(servers.of(1, 0).text(), "8.1.8", "unreported: the oldest");
        assert_eq!(servers.of(2, 0).text(), "8.1.8", "silent: the oldest");
        assert_eq!(servers.oldest().text(), "8.1.8");
        let hint = Server::from_image("valkey/valkey:8.1");
        assert_eq!(Servers::new(Some(&[]), hint).of(0, 0).text(), "8.1");
        assert_eq!(
            Servers::new(Some(&[]), Server::Unknown).of(0, 0),
            &Server::Unknown
        );
        assert_eq!(
            Servers::new(None, Server::Unknown).of(0, 0),
            &Server::Assumed
        );
        assert!(Server::Assumed.has_key("cluster-announce-client-port"));
        assert!(Server::parse("8.1.8").is_old() && !Server::Unknown.is_old());
    }
}
