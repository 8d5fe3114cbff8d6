//! Leader election with a `coordination.k8s.io` Lease (kube-lease-manager):
//! only the holder runs the controller. A replica that loses the lease stops
//! its controller at once and waits to win it again.
//!
//! **The fence.** kube-lease-manager goes on reporting leadership while its
//! renewals fail (it retries them with backoff), so a leader cut off from
//! the API server, or whose renewals alone are refused, would keep writing
//! after its lease expired and another replica took over. So the leader
//! also reads the Lease about once a second and stops its controller (drops
//! it, in-flight reconciles included) once the last renewal it can see is
//! older than the lease duration less a margin ([`fence`]): it stops
//! writing before anyone else may start. The renewal time is written by
//! this replica's own clock, so no clock skew enters the comparison.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::Api;
use kube_lease_manager::LeaseManagerBuilder;
use tracing::{info, warn};

use super::LeaseOptions;

/// How often the leader reads its Lease for the fence.
const FENCE_CHECK: Duration = Duration::from_secs(1);

/// Why the controller stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stop {
    Shutdown,
    /// The lease manager says another replica holds the lease.
    Lost,
    /// The last renewal seen is too old ([`fence`]).
    Fenced,
}

/// The instant after which a leader whose last renewal was `renewed` must
/// not write: `duration - margin` later, the margin being half the grace
/// period (at least a second), in which the lease manager keeps retrying
/// its renewal while the lease is still valid.
pub fn fence(renewed: Timestamp, lease: &LeaseOptions) -> Timestamp {
    let duration = SignedDuration::from_secs(lease.duration_seconds as i64);
    let margin = SignedDuration::from_millis((lease.grace_seconds as i64 * 500).max(1000));
    renewed + (duration - margin)
}

/// What the leader knows of its lease: the last renewal it saw of its own.
struct Watch {
    api: Api<Lease>,
    name: String,
    identity: String,
    /// The last `renewTime` seen while this replica held the lease.
    renewed: Option<Timestamp>,
}

impl Watch {
    /// Reads the Lease; a failed read keeps what was seen before. Returns
    /// false if it shows another holder.
    async fn look(&mut self) -> bool {
        match self.api.get_opt(&self.name).await {
            Ok(Some(lease)) => {
                let spec = lease.spec.unwrap_or_default();
                if spec.holder_identity.as_deref() != Some(self.identity.as_str()) {
                    return false;
                }
                if let Some(t) = spec.renew_time.or(spec.acquire_time) {
                    self.renewed = Some(t.0);
                }
                true
            }
            Ok(None) => false,
            Err(e) => {
                warn!(error = %e, "reading the lease for the fence failed; the last renewal seen stands");
                true
            }
        }
    }

    /// The renewal seen is recent enough to write now.
    fn fresh(&self, lease: &LeaseOptions) -> bool {
        self.renewed
            .is_some_and(|t| Timestamp::now() < fence(t, lease))
    }
}

/// Runs `work` whenever this replica holds the lease, until `shutdown`. The
/// future `work` gets resolves when leadership is lost or on shutdown; the
/// fence drops `work` outright.
pub async fn while_leader<F, Fut>(
    client: kube::Client,
    lease: &LeaseOptions,
    identity: &str,
    shutdown: tokio::sync::watch::Receiver<bool>,
    mut work: F,
) -> anyhow::Result<()>
where
    F: FnMut(tokio::sync::watch::Receiver<bool>) -> Fut,
    Fut: Future<Output = anyhow::Result<()>>,
{
    let manager = LeaseManagerBuilder::new(client.clone(), &lease.name)
        .with_namespace(&lease.namespace)
        .with_identity(identity)
        .with_duration(lease.duration_seconds)
        .with_grace(lease.grace_seconds)
        .build()
        .await?;
    let mut seen = Watch {
        api: Api::namespaced(client, &lease.namespace),
        name: lease.name.clone(),
        identity: identity.to_string(),
        renewed: None,
    };
    let (mut leading, task) = manager.watch().await;
    let until_shutdown = |mut rx: tokio::sync::watch::Receiver<bool>| async move {
        let _ = rx.wait_for(|s| *s).await;
    };
    let mut shutdown_fut = Box::pin(until_shutdown(shutdown.clone()));
    'leading: loop {
        // Wait to become leader, with a renewal fresh enough to write (or
        // shut down).
        loop {
            tokio::select! {
                _ = &mut shutdown_fut => break 'leading,
                changed = async { leading.wait_for(|l| *l).await.map(|_| ()) } => {
                    if changed.is_err() {
                        anyhow::bail!("the lease manager stopped");
                    }
                }
            }
            if seen.look().await && seen.fresh(lease) {
                break;
            }
            tokio::select! {
                _ = &mut shutdown_fut => break 'leading,
                _ = tokio::time::sleep(FENCE_CHECK) => {}
            }
        }
        info!(identity, lease = %lease.name, "acquired the lease; leading");
        let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
        let controller = work(stop_rx);
        tokio::pin!(controller);
        let mut lost = leading.clone();
        let mut check = tokio::time::interval(FENCE_CHECK);
        let why = loop {
            tokio::select! {
                result = &mut controller => {
                    result?;
                    let stopping = *shutdown.borrow();
                    break if stopping { Stop::Shutdown } else { Stop::Lost };
                }
                _ = async { lost.wait_for(|l| !*l).await.map(|_| ()) } => {
                    // Stop gracefully: the lease says so.
                    let _ = stop_tx.send(true);
                    (&mut controller).await?;
                    break Stop::Lost;
                }
                _ = &mut shutdown_fut => {
                    let _ = stop_tx.send(true);
                    (&mut controller).await?;
                    break Stop::Shutdown;
                }
                _ = check.tick() => {
                    if !seen.look().await {
                        let _ = stop_tx.send(true);
                        (&mut controller).await?;
                        break Stop::Lost;
                    }
                    if !seen.fresh(lease) {
                        // No waiting for reconciles in flight: the lease
                        // may be someone else's soon.
                        break Stop::Fenced;
                    }
                }
            }
        };
        match why {
            Stop::Shutdown => break,
            Stop::Lost => warn!(identity, "lost the lease; standing by"),
            Stop::Fenced => warn!(
                identity,
                renewed = ?seen.renewed,
                "the lease was not renewed in time: stopped writing before it could expire"
            ),
        }
    }
    drop(leading);
    match task.await {
        Ok(Ok(manager)) => {
            let _ = manager.release().await;
        }
        Ok(Err(e)) => warn!(error = %e, "lease manager"),
        Err(e) => warn!(error = %e, "lease manager task"),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fence_falls_before_the_lease_expires() {
        let at = |s: i64| Timestamp::from_second(s).unwrap();
        // (duration, grace) => seconds after the renewal
        for (duration, grace, want_ms) in [
            (15, 5, 12_500),
            (15, 1, 14_000),
            (4, 2, 3_000),
            (4, 0, 3_000),
        ] {
            let lease = LeaseOptions {
                name: "l".into(),
                namespace: "ns".into(),
                duration_seconds: duration,
                grace_seconds: grace,
            };
            let f = fence(at(1000), &lease);
            assert_eq!(
                f,
                at(1000) + SignedDuration::from_millis(want_ms),
                "{duration}/{grace}"
            );
            assert!(f < at(1000) + SignedDuration::from_secs(duration as i64));
        }
    }
}
