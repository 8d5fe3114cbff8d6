//! shardgate's side of the Valkey protocol.
//!
//! - [`NodeClient`]: one connection to one node, at its pod address. It
//!   reads the node's facts and sets the client-facing announce settings
//!   with `CONFIG SET`, and nothing else ([`announce`] decides what differs).
//! - [`cluster_nodes`]: parsing a node's `CLUSTER NODES` and `INFO`.
//! - [`Nodes`]: one cluster's answering nodes, the facts the guest plans
//!   from, and the steps of its plan run against them.
//! - [`tls`]: whom a TLS connection to a node trusts (the cluster's CA).
//!
//! Nothing here knows Kubernetes: the caller says which nodes to reach, by
//! index and pod IP.

pub mod announce;
pub mod client;
pub mod cluster_nodes;
pub mod nodes;
pub mod spreads;
pub mod tls;

pub use client::{
    BUS_PORT, CLIENT_PORT, DEFAULT_TIMEOUT, Dial, Error, Facts, Login, NodeClient, Result, TlsFiles,
};
pub use nodes::{AclSync, Announced, Nodes, SETTLE_WITHIN, StepError, TlsSync, describe};
pub use spreads::Spreads;
pub use tls::{Trust, TrustError};
