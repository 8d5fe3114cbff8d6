//! The wall-clock guard: the host's own watch on a guest call, beside the
//! epoch deadline inside it.
//!
//! The epoch deadline stops guest code, not host code: a host function
//! that blocked would hold the call past any deadline. Every WASI function a
//! module can call returns at once ([`crate::wasi`]), and this guard makes
//! that a promise to the caller as well: the call runs on another thread,
//! and the caller waits at most the module's deadline plus [`MARGIN`]. A
//! call still running then is abandoned: the caller gets
//! [`CallError::Abandoned`] (a module failure), the thread finishes (or
//! not) on its own, and its memory-budget slot stays taken until it does.
//!
//! - [`call`]: for async hosts (the operator's reconciles, the webhook);
//!   takes a slot of the [`CallBudget`] and runs on tokio's blocking pool.
//! - [`blocking`] and [`Guarded`]: for synchronous checks (`check-module`,
//!   the swap manager's self-check); a thread per call.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::time::Duration;

use shardgate_contract::model::{Cluster, Desired, Error as GuestError, Input, Violation};
use tracing::warn;

use crate::budget::CallBudget;
use crate::{CallError, Limits, Reconciler, Tier};

/// How long past its deadline a call may take before it is abandoned:
/// generous, so that a loaded machine never abandons a call the epoch
/// deadline is about to stop.
pub const MARGIN: Duration = Duration::from_secs(1);

static ABANDONED: AtomicU64 = AtomicU64::new(0);

/// How long the guard waits for a call whose module has `deadline`.
pub fn give_up_after(deadline: Duration) -> Duration {
    deadline.saturating_add(MARGIN)
}

/// The deadline the guard holds `module` to: its own, else the default.
pub fn deadline_of(module: &dyn Reconciler) -> Duration {
    module.deadline().unwrap_or(Limits::default().deadline)
}

/// Calls abandoned by this process so far.
pub fn abandoned() -> u64 {
    ABANDONED.load(Ordering::Relaxed)
}

fn abandon(deadline: Duration) -> CallError {
    ABANDONED.fetch_add(1, Ordering::Relaxed);
    warn!(
        deadline_ms = deadline.as_millis() as u64,
        margin_ms = MARGIN.as_millis() as u64,
        "a reconcile module call is stuck past its deadline; abandoned (its thread and memory slot stay taken until it returns)"
    );
    CallError::Abandoned(deadline)
}

/// Runs `f` (one guest call) on tokio's blocking pool holding a slot of
/// `budget`, waiting at most `slot_wait` for the slot (`None`: as long as
/// it takes) and at most [`give_up_after`]`(deadline)` for the call.
pub async fn call<T: Send + 'static>(
    budget: &CallBudget,
    slot_wait: Option<Duration>,
    deadline: Duration,
    f: impl FnOnce() -> T + Send + 'static,
) -> Result<T, CallError> {
    let permit = budget.acquire(slot_wait).await?;
    let running = tokio::task::spawn_blocking(move || {
        let _slot = permit;
        f()
    });
    match tokio::time::timeout(give_up_after(deadline), running).await {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(e)) => Err(CallError::Host(anyhow::anyhow!(
            "the guest call's thread failed: {e}"
        ))),
        Err(_) => Err(abandon(deadline)),
    }
}

/// Runs `f` (one guest call) on a thread of its own and waits at most
/// [`give_up_after`]`(deadline)` for it.
pub fn blocking<T: Send + 'static>(
    deadline: Duration,
    f: impl FnOnce() -> Result<T, CallError> + Send + 'static,
) -> Result<T, CallError> {
    let (tx, rx) = mpsc::sync_channel(1);
    std::thread::Builder::new()
        .name("shardgate-guest-call".into())
        .spawn(move || {
            let _ = tx.send(f());
        })
        .map_err(|e| CallError::Host(anyhow::anyhow!("starting a guest call thread: {e}")))?;
    match rx.recv_timeout(give_up_after(deadline)) {
        Ok(result) => result,
        Err(mpsc::RecvTimeoutError::Timeout) => Err(abandon(deadline)),
        Err(mpsc::RecvTimeoutError::Disconnected) => Err(CallError::Host(anyhow::anyhow!(
            "the guest call's thread panicked"
        ))),
    }
}

/// A reconciler whose every call runs under [`blocking`], for the few calls
/// of a check.
#[derive(Clone)]
pub struct Guarded(pub Arc<dyn Reconciler>);

impl Reconciler for Guarded {
    fn reconcile(&self, input: &Input) -> Result<Result<Desired, GuestError>, CallError> {
        let (module, input) = (self.0.clone(), input.clone());
        blocking(deadline_of(&*self.0), move || module.reconcile(&input))
    }

    fn validate(&self, cluster: &Cluster) -> Result<Vec<Violation>, CallError> {
        let (module, cluster) = (self.0.clone(), cluster.clone());
        blocking(deadline_of(&*self.0), move || module.validate(&cluster))
    }

    fn tier(&self) -> Option<Tier> {
        self.0.tier()
    }

    fn deadline(&self) -> Option<Duration> {
        self.0.deadline()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicBool;
    use std::time::Instant;

    use super::*;

    /// Stands for a host call that blocks: the thread sleeps until released
    /// (or for a minute), outside any epoch deadline.
    struct Stuck {
        release: Arc<AtomicBool>,
    }

    impl Stuck {
        fn wait(&self) {
            let started = Instant::now();
            while !self.release.load(Ordering::Relaxed)
                && started.elapsed() < Duration::from_secs(60)
            {
                std::thread::sleep(Duration::from_millis(5));
            }
        }
    }

    impl Reconciler for Stuck {
        fn reconcile(&self, _: &Input) -> Result<Result<Desired, GuestError>, CallError> {
            self.wait();
            Ok(Ok(Desired::default()))
        }
        fn validate(&self, _: &Cluster) -> Result<Vec<Violation>, CallError> {
            self.wait();
            Ok(Vec::new())
        }
        fn deadline(&self) -> Option<Duration> {
            Some(Duration::from_millis(50))
        }
    }

    #[test]
    fn a_stuck_call_is_abandoned_naming_its_deadline() {
        let release = Arc::new(AtomicBool::new(false));
        let guarded = Guarded(Arc::new(Stuck {
            release: release.clone(),
        }));
        let before = abandoned();
        match guarded.reconcile(&Input::default()) {
            Err(e @ CallError::Abandoned(d)) => {
                assert_eq!(d, Duration::from_millis(50));
                assert!(e.to_string().contains("deadline of 50ms"), "{e}");
                assert!(e.is_module_failure());
            }
            other => panic!("expected an abandoned call, got {other:?}"),
        }
        assert!(abandoned() > before);
        release.store(true, Ordering::Relaxed);
        // A call that returns in time is answered.
        assert!(guarded.validate(&Cluster::default()).unwrap().is_empty());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_abandoned_call_keeps_its_slot_until_it_returns() {
        let budget = CallBudget::new(1, 1);
        let release = Arc::new(AtomicBool::new(false));
        let stuck = Stuck {
            release: release.clone(),
        };
        let deadline = stuck.deadline().unwrap();
        let got = call(&budget, None, deadline, move || {
            stuck.reconcile(&Input::default())
        })
        .await;
        assert!(matches!(got, Err(CallError::Abandoned(_))), "{got:?}");
        assert_eq!(budget.available(), 0, "the stuck call still holds its slot");
        let busy = call(&budget, Some(Duration::from_millis(20)), deadline, || ()).await;
        assert!(matches!(busy, Err(CallError::Busy(_))), "{busy:?}");
        assert!(!busy.unwrap_err().is_module_failure());
        release.store(true, Ordering::Relaxed);
        let answered = call(&budget, Some(Duration::from_secs(30)), deadline, || 7).await;
        assert_eq!(
            answered.unwrap(),
            7,
            "the slot came back once the call returned"
        );
    }
}
