//! Why a reconcile failed. The controller requeues it with backoff; each
//! variant is a metric label (`shardgate_reconcile_errors_total{reason}`).

use shardgate_wasm::CallError;

/// Why a reconcile failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    #[error("{0}")]
    Module(#[from] CallError),
    #[error("the guest task failed: {0}")]
    Join(#[from] tokio::task::JoinError),
    #[error("cluster has no uid or namespace")]
    Incomplete,
    /// An object at a name the cluster needs is not the cluster's: nothing
    /// was applied to it.
    #[error("{0} exists and is not owned by this cluster: it is left alone")]
    Conflict(String),
    // Boxed: a Valkey error carries the client's error and the step, and
    // would make every `Result` of a reconcile that large.
    #[error("{0}")]
    Valkey(Box<shardgate_valkey::Error>),
    #[error("{0}")]
    Topology(Box<shardgate_valkey::StepError>),
    /// The API server refused a pinned NodePort that something outside
    /// shardgate's view holds (a Service of no ValkeyCluster).
    #[error(
        "{field}: NodePort {port} is already allocated to a Service outside this operator's \
         view, so Service {service} was not applied; pin another port or free it"
    )]
    NodePortTaken {
        field: String,
        port: u32,
        service: String,
    },
}

impl From<shardgate_valkey::Error> for Error {
    fn from(e: shardgate_valkey::Error) -> Self {
        Error::Valkey(Box::new(e))
    }
}

impl From<shardgate_valkey::StepError> for Error {
    fn from(e: shardgate_valkey::StepError) -> Self {
        Error::Topology(Box::new(e))
    }
}

impl Error {
    /// The `reason` label and the Event's reason detail.
    pub fn reason(&self) -> &'static str {
        match self {
            Error::Kube(_) => "ApiError",
            Error::Module(_) | Error::Join(_) => "ModuleFailed",
            Error::Incomplete => "Incomplete",
            Error::Conflict(_) => "NameConflict",
            Error::Valkey(_) | Error::Topology(_) => "ValkeyFailed",
            Error::NodePortTaken { .. } => "NodePortTaken",
        }
    }
}

/// The NodePort an API server's refusal says is already allocated
/// (`spec.ports[i].nodePort: Invalid value: 30300: provided port is
/// already allocated`), if that is what it says.
pub fn node_port_taken(e: &kube::Error) -> Option<u32> {
    let kube::Error::Api(status) = e else {
        return None;
    };
    if status.code != 422 {
        return None;
    }
    let (before, _) = status
        .message
        .split_once(": provided port is already allocated")?;
    before.rsplit_once("Invalid value: ")?.1.trim().parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn api(code: u16, message: &str) -> kube::Error {
        kube::Error::Api(Box::new(
            kube::core::Status::failure(message, "Invalid").with_code(code),
        ))
    }

    #[test]
    fn a_taken_node_port_is_read_from_the_refusal() {
        // (code, message) => the port
        for (code, message, want) in [
            (
                422,
                "Service \"x\" is invalid: spec.ports[1].nodePort: Invalid value: 30300: provided port is already allocated",
                Some(30300),
            ),
            (
                422,
                "spec.ports[0].nodePort: Invalid value: 70000: provided port is not in the valid range",
                None,
            ),
            (
                409,
                "Invalid value: 30300: provided port is already allocated",
                None,
            ),
            (422, "provided port is already allocated", None),
        ] {
            assert_eq!(
                node_port_taken(&api(code, message)),
                want,
                "{code} {message}"
            );
        }
    }
}
