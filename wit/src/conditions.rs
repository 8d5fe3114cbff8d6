//! The condition types of a ValkeyCluster's status. The guest reports
//! [`EXTERNAL_ACCESS_READY`]; the host adds the others.

/// Every node is ready, the Valkey cluster is formed and external access
/// (when enabled) is in place.
pub const READY: &str = "Ready";
/// Something is being changed or waited for.
pub const PROGRESSING: &str = "Progressing";
/// The spec cannot be reconciled as it stands.
pub const DEGRADED: &str = "Degraded";
/// Every node's external endpoint is known and announced.
pub const EXTERNAL_ACCESS_READY: &str = "ExternalAccessReady";

/// The reason `ExternalAccessReady` gives when the cluster asks for a
/// gateway and the API server does not serve the Gateway API kinds it
/// needs; the host then reports the cluster `Degraded` with it too, since
/// no wait will fix it.
pub const GATEWAY_API_UNAVAILABLE: &str = "GatewayAPIUnavailable";
