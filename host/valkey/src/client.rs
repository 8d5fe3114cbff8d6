//! A connection to one Valkey node.
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

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, RedisConnectionInfo, Value};
use rustls_pki_types::CertificateDer;
use shardgate_contract::model::SlotRange;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;

use crate::announce;
use crate::cluster_nodes::{self, View};
use crate::tls::Trust;

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
    #[error("valkey node {node}: unexpected {command} reply: {detail}")]
    Reply {
        node: SocketAddr,
        command: &'static str,
        detail: String,
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

/// A result whose error is this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The client port every node listens on.
pub const CLIENT_PORT: u16 = 6379;
/// The cluster bus port every node listens on.
pub const BUS_PORT: u16 = 16379;

/// The user and password a [`NodeClient`] logs in with.
#[derive(Clone, PartialEq, Eq)]
pub struct Login {
    pub username: String,
    pub password: String,
}

impl std::fmt::Debug for Login {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Login")
            .field("username", &self.username)
            .field("password", &"<redacted>")
            .finish()
    }
}

/// What [`NodeClient::facts`] reads.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Facts {
    pub view: View,
    pub migrating: bool,
    pub synced: bool,
    pub cluster_ok: bool,
    /// `valkey_version`; empty if the server did not say.
    pub version: String,
}

fn range_args(slots: &[SlotRange]) -> impl Iterator<Item = String> + '_ {
    slots
        .iter()
        .flat_map(|r| [r.start.to_string(), r.end.to_string()])
}

/// The `state` of every job in a `CLUSTER GETSLOTMIGRATIONS` reply (a list
/// of maps, or of flat key/value arrays under RESP2).
fn migration_states(reply: &Value) -> Vec<String> {
    let Value::Array(jobs) = reply else {
        return Vec::new();
    };
    let text = |v: &Value| match v {
        Value::BulkString(b) => Some(String::from_utf8_lossy(b).into_owned()),
        Value::SimpleString(s) => Some(s.clone()),
        _ => None,
    };
    jobs.iter()
        .filter_map(|job| match job {
            Value::Array(kv) => kv
                .chunks(2)
                .find(|p| p.len() == 2 && text(&p[0]).as_deref() == Some("state"))
                .and_then(|p| text(&p[1])),
            Value::Map(kv) => kv
                .iter()
                .find(|(k, _)| text(k).as_deref() == Some("state"))
                .and_then(|(_, v)| text(v)),
            _ => None,
        })
        .collect()
}

/// A connection to one Valkey node.
#[derive(Clone)]
pub struct NodeClient {
    node: SocketAddr,
    conn: MultiplexedConnection,
    /// The leaf certificate the node served, over TLS.
    served: Option<CertificateDer<'static>>,
}

/// An opened connection, before the Valkey protocol runs over it.
enum Stream {
    Plain(TcpStream),
    Tls(Box<TlsStream<TcpStream>>, Option<CertificateDer<'static>>),
}

/// How to reach a node: who to log in as, whether over TLS, and how long
/// connecting and each command may take.
#[derive(Clone, Debug)]
pub struct Dial {
    pub login: Option<Login>,
    /// TLS trusting these CAs, or plaintext.
    pub tls: Option<Trust>,
    pub timeout: Duration,
}

impl Default for Dial {
    fn default() -> Self {
        Dial {
            login: None,
            tls: None,
            timeout: DEFAULT_TIMEOUT,
        }
    }
}

/// Where a node's TLS files are mounted (the paths in its `valkey.conf`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlsFiles {
    pub cert: String,
    pub key: String,
    pub ca: String,
}

impl std::fmt::Debug for NodeClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeClient")
            .field("node", &self.node)
            .finish_non_exhaustive()
    }
}

impl NodeClient {
    /// Connects to the node at `node` (a pod IP and port 6379) in
    /// plaintext, with [`DEFAULT_TIMEOUT`] for connecting and for each
    /// command.
    pub async fn connect(node: SocketAddr, login: Option<&Login>) -> Result<Self> {
        let dial = Dial {
            login: login.cloned(),
            ..Dial::default()
        };
        Self::dial(node, &dial).await
    }

    /// Connects to the node at `node` as `dial` says: logged in, over TLS,
    /// with its timeout for connecting (TCP and the handshake) and for each
    /// command.
    pub async fn dial(node: SocketAddr, dial: &Dial) -> Result<Self> {
        let connect_error = |source| Error::Connect { node, source };
        // No `CLIENT SETINFO` on connect: the operator's user may run only
        // the commands the operator needs.
        let mut settings = RedisConnectionInfo::default().set_skip_set_lib_name();
        if let Some(login) = &dial.login {
            settings = settings
                .set_username(&login.username)
                .set_password(&login.password);
        }
        let config = AsyncConnectionConfig::new().set_response_timeout(Some(dial.timeout));
        let opened = tokio::time::timeout(dial.timeout, async {
            let tcp = TcpStream::connect(node).await?;
            tcp.set_nodelay(true)?;
            match &dial.tls {
                None => Ok(Stream::Plain(tcp)),
                Some(trust) => trust.handshake(node.ip(), tcp).await.map(|tls| {
                    let served = tls.get_ref().1.peer_certificates().and_then(|c| c.first());
                    let served = served.map(|c| c.clone().into_owned());
                    Stream::Tls(Box::new(tls), served)
                }),
            }
        })
        .await
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, "connect timed out"))
        .and_then(|r| r)
        .map_err(|e| connect_error(e.into()))?;
        let (conn, served) = match opened {
            Stream::Plain(tcp) => (Self::drive(&settings, tcp, config).await, None),
            Stream::Tls(tls, served) => (Self::drive(&settings, *tls, config).await, served),
        };
        Ok(NodeClient {
            node,
            conn: conn.map_err(connect_error)?,
            served,
        })
    }

    /// Logs in on `stream` and runs the connection's driver in its own task.
    async fn drive<S>(
        settings: &RedisConnectionInfo,
        stream: S,
        config: AsyncConnectionConfig,
    ) -> redis::RedisResult<MultiplexedConnection>
    where
        S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let (conn, driver) =
            MultiplexedConnection::new_with_config(settings, stream, config).await?;
        tokio::spawn(driver);
        Ok(conn)
    }

    /// The certificate the node served in the TLS handshake (its leaf);
    /// `None` in plaintext.
    pub fn served_certificate(&self) -> Option<&CertificateDer<'static>> {
        self.served.as_ref()
    }

    /// Makes the node load its TLS certificate, key and CA files again
    /// (`CONFIG SET` of the same paths: Valkey rereads the files even when
    /// a path is unchanged), so a renewed certificate is served with no
    /// restart. Valkey keeps the old ones if the new files do not load.
    pub async fn reload_tls(&mut self, files: &TlsFiles) -> Result<()> {
        let settings = [
            ("tls-cert-file", files.cert.as_str()),
            ("tls-key-file", files.key.as_str()),
            ("tls-ca-cert-file", files.ca.as_str()),
        ];
        let mut cmd = redis::cmd("CONFIG");
        cmd.arg("SET");
        for (key, value) in settings {
            cmd.arg(key).arg(value);
        }
        cmd.query_async::<()>(&mut self.conn)
            .await
            .map_err(|source| Error::Rejected {
                node: self.node,
                setting: settings.map(|(k, _)| k).join(" "),
                value: files.cert.clone(),
                source,
            })
    }

    /// The address this client is connected to.
    pub fn node(&self) -> SocketAddr {
        self.node
    }

    /// Reloads the node's ACL from its aclfile (`ACL LOAD`). Valkey loads
    /// all or nothing: a file with an error leaves the old ACL in place.
    pub async fn acl_load(&mut self) -> Result<()> {
        redis::cmd("ACL")
            .arg("LOAD")
            .query_async::<()>(&mut self.conn)
            .await
            .map_err(|source| self.command_error("ACL LOAD", source))
    }

    /// Whether the node knows ACL user `name` (`ACL GETUSER`).
    pub async fn acl_has_user(&mut self, name: &str) -> Result<bool> {
        let reply: Value = redis::cmd("ACL")
            .arg("GETUSER")
            .arg(name)
            .query_async(&mut self.conn)
            .await
            .map_err(|source| self.command_error("ACL GETUSER", source))?;
        Ok(!matches!(reply, Value::Nil))
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
    /// Returns the keys that changed, in the order given; none (and no write)
    /// when everything is already in place. Only the client-facing announce
    /// settings may be given.
    pub async fn apply_announce(&mut self, settings: &[(String, String)]) -> Result<Vec<String>> {
        let mut keys: Vec<&str> = Vec::with_capacity(settings.len());
        for (key, _) in settings {
            if !announce::is_managed(key) {
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
        let changes = announce::changes(settings, &get);
        if changes.is_empty() {
            return Ok(Vec::new());
        }
        let mut cmd = redis::cmd("CONFIG");
        cmd.arg("SET");
        for (key, value) in &changes {
            cmd.arg(*key).arg(*value);
        }
        cmd.query_async::<()>(&mut self.conn)
            .await
            .map_err(|source| self.rejected(&changes, source))?;
        Ok(changes.into_iter().map(|(k, _)| k.to_string()).collect())
    }

    /// Sets the user's `settings` (`spec.config`, checked by the guest:
    /// never an operator-owned or announce key) in one `CONFIG SET`, which
    /// Valkey applies atomically.
    pub async fn set_config(&mut self, settings: &[(String, String)]) -> Result<()> {
        if settings.is_empty() {
            return Ok(());
        }
        if let Some((key, _)) = settings.iter().find(|(k, _)| announce::is_managed(k)) {
            return Err(Error::Unmanaged {
                node: self.node,
                setting: key.clone(),
            });
        }
        let mut cmd = redis::cmd("CONFIG");
        cmd.arg("SET");
        for (key, value) in settings {
            cmd.arg(key).arg(value);
        }
        let changes: Vec<(&str, &str)> = settings
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        cmd.query_async::<()>(&mut self.conn)
            .await
            .map_err(|source| self.rejected(&changes, source))
    }

    /// What the node reports about itself for the topology plan: its ID,
    /// the primary it follows, its slots, the peers it knows, whether a slot
    /// migration is under way, whether a replica is in sync.
    pub async fn facts(&mut self) -> Result<Facts> {
        let view = self.cluster_nodes().await?;
        let info: String = redis::cmd("INFO")
            .arg("server")
            .arg("replication")
            .query_async(&mut self.conn)
            .await
            .map_err(|source| self.command_error("INFO server replication", source))?;
        let version = cluster_nodes::server_version(&info);
        let synced = view.primary.is_none() || cluster_nodes::replica_synced(&info);
        // Atomic slot migration (and its job list) came with Valkey 9.0;
        // an older server shows a migration only as slot markers.
        let atomic = version
            .split('.')
            .next()
            .and_then(|major| major.parse::<u32>().ok())
            .is_none_or(|major| major >= 9);
        let migrating = if atomic {
            let jobs: Value = self
                .cluster(&["GETSLOTMIGRATIONS"], "CLUSTER GETSLOTMIGRATIONS")
                .await?;
            migration_states(&jobs)
                .iter()
                .any(|s| cluster_nodes::is_running(s))
        } else {
            view.marked_migrating
        };
        let cluster_info: String = self.cluster(&["INFO"], "CLUSTER INFO").await?;
        let cluster_ok = cluster_nodes::cluster_state_ok(&cluster_info);
        Ok(Facts {
            view,
            migrating,
            synced,
            cluster_ok,
            version,
        })
    }

    /// This node's `CLUSTER NODES`, parsed.
    pub async fn cluster_nodes(&mut self) -> Result<View> {
        let text: String = self.cluster(&["NODES"], "CLUSTER NODES").await?;
        cluster_nodes::parse(&text).map_err(|detail| Error::Reply {
            node: self.node,
            command: "CLUSTER NODES",
            detail,
        })
    }

    /// `CLUSTER MEET`: joins the node at `peer` (its pod IP; client port
    /// 6379, bus port 16379) to this node's cluster.
    pub async fn meet(&mut self, peer: IpAddr) -> Result<()> {
        let ip = peer.to_string();
        let client = CLIENT_PORT.to_string();
        let bus = BUS_PORT.to_string();
        self.cluster(&["MEET", &ip, &client, &bus], "CLUSTER MEET")
            .await
    }

    /// `CLUSTER ADDSLOTSRANGE`.
    pub async fn add_slots(&mut self, slots: &[SlotRange]) -> Result<()> {
        let mut args = vec!["ADDSLOTSRANGE".to_string()];
        args.extend(range_args(slots));
        self.cluster(&args, "CLUSTER ADDSLOTSRANGE").await
    }

    /// `CLUSTER REPLICATE <primary>`.
    pub async fn replicate(&mut self, primary: &str) -> Result<()> {
        self.cluster(&["REPLICATE", primary], "CLUSTER REPLICATE")
            .await
    }

    /// `CLUSTER MIGRATESLOTS SLOTSRANGE ... NODE <target>`: Valkey 9's
    /// atomic slot migration, run by this (the source) node.
    pub async fn migrate_slots(&mut self, slots: &[SlotRange], target: &str) -> Result<()> {
        let mut args = vec!["MIGRATESLOTS".to_string(), "SLOTSRANGE".to_string()];
        args.extend(range_args(slots));
        args.push("NODE".into());
        args.push(target.into());
        self.cluster(&args, "CLUSTER MIGRATESLOTS").await
    }

    /// `CLUSTER FAILOVER`, sent to a replica: it takes over from its
    /// primary once it has caught up, so no acknowledged write is lost.
    pub async fn failover(&mut self) -> Result<()> {
        self.cluster(&["FAILOVER"], "CLUSTER FAILOVER").await
    }

    /// `CLUSTER FORGET <id>`.
    pub async fn forget(&mut self, id: &str) -> Result<()> {
        self.cluster(&["FORGET", id], "CLUSTER FORGET").await
    }

    async fn cluster<T: redis::FromRedisValue, A: redis::ToRedisArgs>(
        &mut self,
        args: A,
        command: &'static str,
    ) -> Result<T> {
        redis::cmd("CLUSTER")
            .arg(args)
            .query_async(&mut self.conn)
            .await
            .map_err(|source| self.command_error(command, source))
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
