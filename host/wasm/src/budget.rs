//! The total memory budget of guest calls: at most `budget / per-call cap`
//! calls run at once (at least one, at most [`Engine::MAX_INSTANCES`]), so
//! the guests' linear memories together stay within the budget
//! (`--module-memory-budget`).
//!
//! A call takes a slot before it instantiates the module and gives it back
//! only when the guest has really returned: a call the wall-clock guard
//! abandoned ([`crate::guard`]) keeps its slot, and its memory, until then.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::{CallError, Engine, Limits};

/// The default `--module-memory-budget` of `shardgate run`: two calls at
/// the default 64 MiB cap, within the operator's 256 MiB memory limit.
pub const DEFAULT_OPERATOR_BUDGET: usize = 128 << 20;
/// The default `--module-memory-budget` of `shardgate webhook`: one call at
/// the default 64 MiB cap, within the webhook's 128 MiB memory limit.
pub const DEFAULT_WEBHOOK_BUDGET: usize = 64 << 20;

/// How many calls capped at `per_call` bytes fit in `budget` bytes: at
/// least one (a budget below one cap still lets calls run one at a time),
/// at most the engine's instance pool.
pub fn slots(budget: usize, per_call: usize) -> usize {
    (budget / per_call.max(1)).clamp(1, Engine::MAX_INSTANCES as usize)
}

/// Reads a byte count: a plain number of bytes, or one with a binary
/// (`Ki`, `Mi`, `Gi`) or decimal (`k`, `M`, `G`) suffix, as Kubernetes
/// writes quantities (`128Mi`).
pub fn parse_bytes(text: &str) -> Result<usize, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (digits, suffix) = text.split_at(split);
    let unit: usize = match suffix {
        "" => 1,
        "k" => 1_000,
        "M" => 1_000_000,
        "G" => 1_000_000_000,
        "Ki" => 1 << 10,
        "Mi" => 1 << 20,
        "Gi" => 1 << 30,
        other => {
            return Err(format!(
                "unknown unit {other:?} in {text:?} (use bytes, Ki, Mi, Gi, k, M or G)"
            ));
        }
    };
    let n: usize = digits
        .parse()
        .map_err(|_| format!("{text:?} is not a byte count such as 128Mi"))?;
    n.checked_mul(unit)
        .filter(|b| *b > 0)
        .ok_or_else(|| format!("{text:?} is not a positive byte count that fits in memory"))
}

/// The slots of a memory budget, shared by every clone.
#[derive(Clone, Debug)]
pub struct CallBudget {
    semaphore: Arc<Semaphore>,
    slots: usize,
    bytes: usize,
}

impl CallBudget {
    /// A budget of `bytes` for calls capped at `per_call` bytes each.
    pub fn new(bytes: usize, per_call: usize) -> Self {
        let slots = slots(bytes, per_call);
        CallBudget {
            semaphore: Arc::new(Semaphore::new(slots)),
            slots,
            bytes,
        }
    }

    /// The operator's default budget for calls with the default limits.
    pub fn operator_default() -> Self {
        Self::new(DEFAULT_OPERATOR_BUDGET, Limits::default().memory_bytes)
    }

    /// How many calls may run at once.
    pub fn slots(&self) -> usize {
        self.slots
    }

    /// The budget in bytes.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Slots free now.
    pub fn available(&self) -> usize {
        self.semaphore.available_permits()
    }

    /// Takes a slot, waiting at most `wait` (`None`: as long as it takes).
    /// The slot is free again when the permit is dropped.
    pub async fn acquire(&self, wait: Option<Duration>) -> Result<OwnedSemaphorePermit, CallError> {
        let acquire = self.semaphore.clone().acquire_owned();
        let permit = match wait {
            None => acquire.await,
            Some(wait) => tokio::time::timeout(wait, acquire)
                .await
                .map_err(|_| CallError::Busy(wait))?,
        };
        // The semaphore is never closed.
        permit.map_err(|e| CallError::Host(anyhow::anyhow!("{e}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_fit_the_budget_with_at_least_one() {
        let mib = 1 << 20;
        for (budget, cap, want) in [
            (128 * mib, 64 * mib, 2),
            (64 * mib, 64 * mib, 1),
            (100 * mib, 64 * mib, 1),
            (10 * mib, 64 * mib, 1),
            (0, 64 * mib, 1),
            (1 << 40, 64 * mib, Engine::MAX_INSTANCES as usize),
            (5, 0, 5),
        ] {
            assert_eq!(slots(budget, cap), want, "{budget} / {cap}");
        }
    }

    #[test]
    fn byte_counts_read_like_kubernetes_quantities() {
        for (text, want) in [
            ("1024", Ok(1024)),
            ("128Mi", Ok(128 << 20)),
            ("1Gi", Ok(1 << 30)),
            ("64Ki", Ok(64 << 10)),
            ("2M", Ok(2_000_000)),
            (" 3k ", Ok(3_000)),
            ("0", Err(())),
            ("Mi", Err(())),
            ("12MB", Err(())),
            ("-1", Err(())),
            ("99999999999999999999Gi", Err(())),
        ] {
            assert_eq!(parse_bytes(text).map_err(|_| ()), want, "{text:?}");
        }
    }

    #[tokio::test]
    async fn a_full_budget_makes_callers_wait_then_time_out() {
        let budget = CallBudget::new(2 << 20, 1 << 20);
        assert_eq!(budget.slots(), 2);
        let a = budget.acquire(None).await.unwrap();
        let _b = budget.acquire(None).await.unwrap();
        assert_eq!(budget.available(), 0);
        let wait = Duration::from_millis(20);
        assert!(matches!(
            budget.acquire(Some(wait)).await,
            Err(CallError::Busy(w)) if w == wait
        ));
        // A slot given back is taken by the next caller.
        let next = tokio::spawn({
            let budget = budget.clone();
            async move { budget.acquire(Some(Duration::from_secs(30))).await.is_ok() }
        });
        drop(a);
        assert!(next.await.unwrap());
    }
}
