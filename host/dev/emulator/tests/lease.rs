//! Leader election with `kube-lease-manager` (SSA without force, strategic
//! merge patches, conflicts) works against the emulator.

mod common;

use std::time::Duration;

use common::*;
use kube_lease_manager::LeaseManagerBuilder;

#[tokio::test]
async fn lease_manager_leader_election() {
    let (emu, client) = start().await;
    let build = |id: &str| {
        LeaseManagerBuilder::new(client.clone(), "shardgate-leader")
            .with_namespace("default")
            .with_identity(id)
            .with_duration(3)
            .with_grace(1)
            .build()
    };
    let a = build("a").await.unwrap();
    let b = build("b").await.unwrap();
    assert!(
        tokio::time::timeout(Duration::from_secs(5), a.changed())
            .await
            .unwrap()
            .unwrap()
    );
    // b must not become leader while a holds the lease.
    assert!(
        tokio::time::timeout(Duration::from_millis(1500), b.changed())
            .await
            .is_err()
    );
    let lease = emu.get("leases", "default", "shardgate-leader").unwrap();
    assert_eq!(lease["spec"]["holderIdentity"], "a");
    a.release().await.unwrap();
    assert!(
        tokio::time::timeout(Duration::from_secs(10), b.changed())
            .await
            .unwrap()
            .unwrap()
    );
    let lease = emu.get("leases", "default", "shardgate-leader").unwrap();
    assert_eq!(lease["spec"]["holderIdentity"], "b");
    emu.shutdown().await;
}
