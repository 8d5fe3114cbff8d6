//! Leader election with a `coordination.k8s.io` Lease (kube-lease-manager):
//! only the holder runs the controller. A replica that loses the lease stops
//! its controller at once and waits to win it again.

use std::time::Duration;

use kube_lease_manager::LeaseManagerBuilder;
use tracing::{info, warn};

use super::LeaseOptions;

/// Runs `work` whenever this replica holds the lease, until `shutdown`. The
/// future `work` gets resolves when leadership is lost or on shutdown.
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
    let manager = LeaseManagerBuilder::new(client, &lease.name)
        .with_namespace(&lease.namespace)
        .with_identity(identity)
        .with_duration(lease.duration_seconds)
        .with_grace(lease.grace_seconds)
        .build()
        .await?;
    let (mut leading, task) = manager.watch().await;
    let until_shutdown = |mut rx: tokio::sync::watch::Receiver<bool>| async move {
        let _ = rx.wait_for(|s| *s).await;
    };
    let mut shutdown_fut = Box::pin(until_shutdown(shutdown.clone()));
    loop {
        // Wait to become leader (or shut down).
        tokio::select! {
            _ = &mut shutdown_fut => break,
            changed = leading.wait_for(|l| *l) => {
                if changed.is_err() {
                    anyhow::bail!("the lease manager stopped");
                }
            }
        }
        info!(identity, lease = %lease.name, "acquired the lease; leading");
        let mut watch = leading.clone();
        let shutdown2 = until_shutdown(shutdown.clone());
        let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
        let stopper = tokio::spawn(async move {
            tokio::select! {
                _ = watch.wait_for(|l| !*l) => {},
                _ = shutdown2 => {},
            }
            let _ = stop_tx.send(true);
        });
        let result = work(stop_rx).await;
        stopper.abort();
        result?;
        if !*leading.borrow() {
            warn!(identity, "lost the lease; standing by");
            tokio::time::sleep(Duration::from_millis(100)).await;
        } else {
            break; // shutdown
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
