//! Talking to Valkey nodes: the operator's side of the Valkey protocol.
//!
//! [`NodeClient`] connects to exactly one node by its pod address (never by an
//! announced address: once client-only announce settings are in place,
//! `CLUSTER NODES`/`SHARDS` show the external endpoints to the operator too) and
//! applies the announce settings the guest computed for that node
//! (`Node.announce`) with `CONFIG SET`, without a restart.
//!
//! Reset values accepted by Valkey 9.1.2 with `CONFIG SET` (checked against a
//! live server): `""` for `cluster-announce-human-nodename`, `-hostname`,
//! `-client-ipv4` and `-client-ipv6`; `"0"` for `-client-port` and
//! `-client-tls-port`; `"ip"` for `cluster-preferred-endpoint-type`. These are
//! also the values `CONFIG GET` reports on a node that never set them.

mod diff;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::Duration;

use redis::AsyncConnectionConfig;
use redis::aio::MultiplexedConnection;

pub use diff::{is_managed, same_value};

/// How long connecting to a node, and each command, may take.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(5);

/// A failure talking to one node. Every variant names the node's address.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("valkey node {node}: cannot connect: {source}")]
    Connect {
        node: SocketAddr,
        #[source]
        source: redis::RedisError,
    },
    #[error("valkey node {node}: {command} failed: {source}")]
    Command {
        node: SocketAddr,
        command: &'static str,
        #[source]
        source: redis::RedisError,
    },
    #[error("valkey node {node}: CONFIG GET did not return setting {setting:?}")]
    Missing { node: SocketAddr, setting: String },
    #[error("valkey node {node}: setting {setting:?} is not an announce setting shardgate manages")]
    Unmanaged { node: SocketAddr, setting: String },
    #[error("valkey node {node}: setting {setting:?} is given more than once")]
    Duplicate { node: SocketAddr, setting: String },
    #[error("valkey node {node}: CONFIG SET {setting} {value:?} was rejected: {source}")]
    Rejected {
        node: SocketAddr,
        /// The setting Valkey blamed, or every setting of the atomic change
        /// when it named none.
        setting: String,
        value: String,
        #[source]
        source: redis::RedisError,
    },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A connection to one Valkey node.
#[derive(Clone)]
pub struct NodeClient {
    node: SocketAddr,
    conn: MultiplexedConnection,
}

impl std::fmt::Debug for NodeClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeClient")
            .field("node", &self.node)
            .finish_non_exhaustive()
    }
}

impl NodeClient {
    /// Connects to the node at `node` (a pod IP and port 6379), with
    /// [`DEFAULT_TIMEOUT`] for connecting and for each command.
    pub async fn connect(node: SocketAddr) -> Result<Self> {
        Self::connect_with_timeout(node, DEFAULT_TIMEOUT).await
    }

    /// Connects to the node at `node`, with `timeout` for connecting and for
    /// each command.
    pub async fn connect_with_timeout(node: SocketAddr, timeout: Duration) -> Result<Self> {
        let client = redis::Client::open((node.ip().to_string(), node.port()))
            .map_err(|source| Error::Connect { node, source })?;
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(timeout))
            .set_response_timeout(Some(timeout));
        let conn = client
            .get_multiplexed_async_connection_with_config(&config)
            .await
            .map_err(|source| Error::Connect { node, source })?;
        Ok(NodeClient { node, conn })
    }

    /// The address this client is connected to.
    pub fn node(&self) -> SocketAddr {
        self.node
    }

    /// The node's ID (`CLUSTER MYID`), which identifies it across restarts
    /// and address changes.
    pub async fn my_id(&mut self) -> Result<String> {
        redis::cmd("CLUSTER")
            .arg("MYID")
            .query_async(&mut self.conn)
            .await
            .map_err(|source| self.command_error("CLUSTER MYID", source))
    }

    /// The current values of `keys`, with one `CONFIG GET`.
    pub async fn config_get(&mut self, keys: &[&str]) -> Result<HashMap<String, String>> {
        if keys.is_empty() {
            return Ok(HashMap::new());
        }
        let values: HashMap<String, String> = redis::cmd("CONFIG")
            .arg("GET")
            .arg(keys)
            .query_async(&mut self.conn)
            .await
            .map_err(|source| self.command_error("CONFIG GET", source))?;
        if let Some(missing) = keys.iter().find(|k| !values.contains_key(**k)) {
            return Err(Error::Missing {
                node: self.node,
                setting: missing.to_string(),
            });
        }
        Ok(values)
    }

    /// Makes the node announce `settings` (the guest's `Node.announce`: every
    /// managed key with the value it should have now, resets included).
    ///
    /// Reads the current values with one `CONFIG GET` and sets only those that
    /// differ, all in one `CONFIG SET`, which Valkey applies atomically: a
    /// client never sees, say, the new client port with the old client IP.
    /// Returns how many settings changed; 0 (and no write) when everything is
    /// already in place. Only the client-facing announce settings may be given.
    pub async fn apply_announce(&mut self, settings: &[(String, String)]) -> Result<usize> {
        let mut keys: Vec<&str> = Vec::with_capacity(settings.len());
        for (key, _) in settings {
            if !is_managed(key) {
                return Err(Error::Unmanaged {
                    node: self.node,
                    setting: key.clone(),
                });
            }
            if keys.contains(&key.as_str()) {
                return Err(Error::Duplicate {
                    node: self.node,
                    setting: key.clone(),
                });
            }
            keys.push(key);
        }
        let current = self.config_get(&keys).await?;
        let get = |k: &str| current.get(k).map(String::as_str);
        let changes = diff::changes(settings, &get);
        if changes.is_empty() {
            return Ok(0);
        }
        let mut cmd = redis::cmd("CONFIG");
        cmd.arg("SET");
        for (key, value) in &changes {
            cmd.arg(*key).arg(*value);
        }
        cmd.query_async::<()>(&mut self.conn)
            .await
            .map_err(|source| self.rejected(&changes, source))?;
        Ok(changes.len())
    }

    fn command_error(&self, command: &'static str, source: redis::RedisError) -> Error {
        Error::Command {
            node: self.node,
            command,
            source,
        }
    }

    /// A `CONFIG SET` failure, naming the setting Valkey blamed ("possibly
    /// related to argument 'x'") when it did.
    fn rejected(&self, changes: &[(&str, &str)], source: redis::RedisError) -> Error {
        if source.code().is_none() {
            // Not a reply from the server (I/O, timeout): no setting to blame.
            return self.command_error("CONFIG SET", source);
        }
        let text = source.to_string();
        let blamed = changes
            .iter()
            .find(|(k, _)| text.contains(&format!("'{k}'")));
        let (setting, value) = match blamed {
            Some((k, v)) => (k.to_string(), v.to_string()),
            None => (
                changes
                    .iter()
                    .map(|(k, _)| *k)
                    .collect::<Vec<_>>()
                    .join(","),
                changes
                    .iter()
                    .map(|(_, v)| *v)
                    .collect::<Vec<_>>()
                    .join(","),
            ),
        };
        Error::Rejected {
            node: self.node,
            setting,
            value,
            source,
        }
    }
}
