//! Paths inside a node's server container: the guest's `valkey.conf` names
//! them and the host's pod template mounts them.

/// Where `valkey.conf` is mounted (from the node's ConfigMap).
pub const CONFIG_DIR: &str = "/etc/valkey";
/// The data volume: the server's working directory.
pub const DATA_DIR: &str = "/data";
/// The TLS Secret's mount (`tls.crt`, `tls.key`, `ca.crt`).
pub const TLS_DIR: &str = "/etc/valkey/tls";
/// The ACL Secret's mount: the aclfile, [`crate::auth::ACL_FILE`].
pub const ACL_DIR: &str = "/etc/valkey/acl";
/// The system Secret's mount: only [`crate::auth::REPLICATION_CONF`].
pub const SYSTEM_DIR: &str = "/etc/valkey/system";
