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
        }
    }
}
