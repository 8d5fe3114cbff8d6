//! The check a module's bytes go through before they may serve: digest,
//! compile and type check, then the self-check on the golden inputs. Blocking
//! (compiling takes a while): run it off the async threads.

use std::sync::Arc;
use std::time::{Duration, Instant};

use shardgate_contract::model::Severity;

use super::golden::{self, Golden};
use crate::guard::Guarded;
use crate::precompiled::{Precompiled, sha256_hex};
use crate::{CallError, Engine, Reconciler};

/// Why a candidate may not serve.
#[derive(Debug, thiserror::Error)]
pub enum Rejection {
    /// The source could not be read (missing file, ConfigMap without the key).
    #[error("cannot read the module: {0}")]
    Read(String),
    /// The bytes are not the pinned ones.
    #[error("digest mismatch: expected {expected}, got {got}")]
    DigestMismatch { expected: String, got: String },
    /// Not a component, or not one exporting `shardgate:reconcile@0.7.0`
    /// with the right types (the message says which).
    #[error("not a reconcile module: {0}")]
    Load(String),
    /// The module trapped, ran out of time or memory on a golden input.
    #[error("self-check on golden input {case:?}: {error}")]
    SelfCheckCall { case: String, error: CallError },
    /// The module answered, but wrongly.
    #[error("self-check failed: golden input {case:?}: {reason}")]
    SelfCheckFailed { case: String, reason: String },
    /// This digest was rolled back after failing at reconcile time.
    #[error("digest {0} was rolled back after failing at reconcile time; not taken again")]
    RolledBack(String),
}

impl Rejection {
    /// A short machine-readable reason: `read`, `digest`, `load`,
    /// `deadline`, `memory`, `trap`, `exit`, `call`, `self-check`,
    /// `rolled-back`.
    pub fn kind(&self) -> &'static str {
        match self {
            Rejection::Read(_) => "read",
            Rejection::DigestMismatch { .. } => "digest",
            Rejection::Load(_) => "load",
            Rejection::SelfCheckCall { error, .. } => match error {
                CallError::Deadline(_) | CallError::Abandoned(_) => "deadline",
                CallError::MemoryCap(_) => "memory",
                CallError::Trap(_) => "trap",
                CallError::Exit(_) => "exit",
                CallError::Busy(_) | CallError::Host(_) => "call",
            },
            Rejection::SelfCheckFailed { .. } => "self-check",
            Rejection::RolledBack(_) => "rolled-back",
        }
    }
}

/// Where a check spent its time.
#[derive(Clone, Copy, Debug, Default)]
pub struct CheckTimings {
    pub digest: Duration,
    /// `Runtime::load`: compile, link, type check.
    pub compile: Duration,
    pub self_check: Duration,
}

impl CheckTimings {
    /// The whole check's time: digest, compile and self-check.
    pub fn total(&self) -> Duration {
        self.digest + self.compile + self.self_check
    }
}

/// A module that passed every check, ready to serve.
pub struct Accepted {
    pub module: Arc<dyn Reconciler>,
    pub digest: String,
    pub timings: CheckTimings,
}

/// Bytes that want to become the serving module.
pub struct Candidate<'a> {
    pub bytes: &'a [u8],
    /// The pinned digest (hex, any case), if any.
    pub sha256: Option<&'a str>,
}

impl Candidate<'_> {
    /// Digest, compile + type check, self-check. Every call of the
    /// self-check runs under the wall-clock guard ([`Guarded`]), so a module
    /// stuck in host code cannot hold the check (or `check-module`) up.
    /// With `precompiled`, a verified precompiled copy is loaded instead of
    /// compiling (see [`crate::precompiled`]).
    pub fn check(
        &self,
        engine: &Engine,
        golden: &Golden,
        precompiled: Option<&Precompiled>,
    ) -> Result<Accepted, Rejection> {
        let started = Instant::now();
        let digest = sha256_hex(self.bytes);
        if let Some(expected) = self.sha256 {
            let expected = expected.trim().to_ascii_lowercase();
            if expected != digest {
                return Err(Rejection::DigestMismatch {
                    expected,
                    got: digest,
                });
            }
        }
        let digest_time = started.elapsed();
        let compiling = Instant::now();
        let module = match precompiled {
            Some(precompiled) => engine.load_cached(self.bytes, precompiled).map(|(m, _)| m),
            None => engine.load(self.bytes),
        }
        .map_err(|e| Rejection::Load(format!("{e:#}")))?;
        let compile = compiling.elapsed();
        let checking = Instant::now();
        let module: Arc<dyn Reconciler> = Arc::new(module);
        self_check(&Guarded(module.clone()), golden)?;
        Ok(Accepted {
            module,
            digest,
            timings: CheckTimings {
                digest: digest_time,
                compile,
                self_check: checking.elapsed(),
            },
        })
    }
}

/// Runs `module` on every golden input and checks the invariants on the
/// answers (see [`golden`]).
pub fn self_check(module: &dyn Reconciler, golden: &Golden) -> Result<(), Rejection> {
    let call = |case: &str, error: CallError| Rejection::SelfCheckCall {
        case: case.to_string(),
        error,
    };
    let failed = |case: &str, reason: String| Rejection::SelfCheckFailed {
        case: case.to_string(),
        reason,
    };
    for case in &golden.cases {
        let name = case.name();
        let violations = module
            .validate(&case.input.cluster)
            .map_err(|e| call(name, e))?;
        if let Some(v) = violations.iter().find(|v| v.severity == Severity::Error) {
            return Err(failed(name, format!("validate refused a valid spec: {v}")));
        }
        let desired = match module.reconcile(&case.input).map_err(|e| call(name, e))? {
            Ok(d) => d,
            Err(e) => {
                return Err(failed(
                    name,
                    format!(
                        "reconcile refused a valid spec: {}",
                        e.to_string().replace('\n', "; ")
                    ),
                ));
            }
        };
        golden::check_desired(case, &desired).map_err(|r| failed(name, r))?;
    }
    let name = golden.invalid.name.as_str();
    let violations = module
        .validate(&golden.invalid)
        .map_err(|e| call(name, e))?;
    golden::check_refusal(&violations).map_err(|r| failed(name, r))?;
    Ok(())
}
