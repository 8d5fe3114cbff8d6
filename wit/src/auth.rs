//! Authentication: the users every cluster has and the files that carry
//! their passwords. The guest renders the ACL from these names; the host
//! generates the passwords, mounts the files and logs in as
//! [`OPERATOR_USER`].

/// Valkey's built-in user, the one a client without a user name logs in as.
pub const DEFAULT_USER: &str = "default";
/// The system user the operator logs in as: only the commands it runs.
pub const OPERATOR_USER: &str = "_operator";
/// The system user replicas log in to their primary as (`masteruser`).
pub const REPLICATION_USER: &str = "_replication";
/// The prefix reserved for system users: `spec.users` may not use it.
pub const SYSTEM_PREFIX: char = '_';

/// The aclfile's key in the ACL Secret, and its name under
/// [`crate::paths::ACL_DIR`].
pub const ACL_FILE: &str = "users.acl";
/// The key of the replicas' include file (`masterauth <password>`) in the
/// system Secret, and its name under [`crate::paths::SYSTEM_DIR`].
pub const REPLICATION_CONF: &str = "replication.conf";
/// The key of [`OPERATOR_USER`]'s password in the system Secret.
pub const OPERATOR_KEY: &str = "operator";
/// The key of [`REPLICATION_USER`]'s password in the system Secret.
pub const REPLICATION_KEY: &str = "replication";

/// The commands [`OPERATOR_USER`] may run: exactly those the operator
/// sends, plus logging in.
pub const OPERATOR_COMMANDS: &[&str] = &[
    "auth",
    "hello",
    "ping",
    "info",
    "cluster|myid",
    "cluster|info",
    "cluster|nodes",
    "cluster|meet",
    "cluster|addslotsrange",
    "cluster|replicate",
    "cluster|forget",
    "cluster|failover",
    "cluster|getslotmigrations",
    "cluster|migrateslots",
    "config|get",
    "config|set",
    "acl|load",
    "acl|getuser",
];

/// The commands [`REPLICATION_USER`] may run: a replica's sync, and both
/// sides of an atomic slot migration. The importing node connects to the
/// exporting one as `masteruser` (`CLUSTER SYNCSLOTS`) and then runs the
/// slots' snapshot and the writes that follow *as that user*, so the user may
/// write every key: `@write`, with `SELECT` and `MULTI`/`EXEC` around it.
/// It may read nothing and administer nothing.
pub const REPLICATION_COMMANDS: &[&str] = &[
    "auth",
    "hello",
    "ping",
    "psync",
    "sync",
    "replconf",
    "cluster|syncslots",
    "select",
    "multi",
    "exec",
    "@write",
];

/// Commands of [`OPERATOR_COMMANDS`] and [`REPLICATION_COMMANDS`] that
/// servers before Valkey 9.0 do not have (atomic slot migration). Such a
/// server refuses an aclfile that names them and does not start, so they
/// are granted only where the server is known to have them.
pub const SINCE_VALKEY_9: &[&str] = &[
    "cluster|getslotmigrations",
    "cluster|migrateslots",
    "cluster|syncslots",
];

/// The key and channel patterns of each system user: the operator touches
/// no key; replication writes every key a slot migration carries.
pub const OPERATOR_PATTERNS: &[&str] = &[];
/// See [`OPERATOR_PATTERNS`].
pub const REPLICATION_PATTERNS: &[&str] = &["~*", "&*"];

/// The name of the disabled, permissionless user that marks an aclfile's
/// revision: `_acl-` and the first 16 characters of `digest` (a hex digest
/// of the rest of the file). A node knows the marker exactly when it has
/// loaded that revision, which `ACL GETUSER` tells without reading users.
pub fn acl_marker(digest: &str) -> String {
    let short: String = digest.chars().take(16).collect();
    format!("_acl-{short}")
}
