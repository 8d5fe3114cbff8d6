//! Stage 4, reshape: the running Valkey nodes load the cluster's ACL
//! revision (`ACL LOAD`, only where it is not loaded yet) and announce what
//! the guest computed (`CONFIG SET`, no restart), then every step of its topology plan
//! runs in order, `Restart` (a Pod deleted, recreated from the current template)
//! included. It runs before the prune, so external endpoints stop being
//! announced before their Services go, and departing shards are drained
//! first (the guest keeps their objects in `desired` until then).

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams};
use kube::runtime::events::EventType;
use shardgate_contract::model::{Desired, NodeRef, Step};
use shardgate_contract::paths;
use shardgate_k8s::crd::ValkeyCluster;
use shardgate_k8s::snapshot::Snapshot;
use shardgate_valkey::tls::CertificateDer;
use shardgate_valkey::{Nodes, SETTLE_WITHIN, TlsFiles, TlsSync, describe};
use tracing::info;

use super::{Error, events};
use crate::context::Context;

/// What the reshape stage did and found.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Reshaped {
    /// Steps of the plan run.
    pub steps: usize,
    /// Some node does not yet see another's new announcement: a client may
    /// still be redirected to an old endpoint, so nothing may be pruned.
    pub announce_spreading: bool,
    /// Nodes whose mounted aclfile is not the new revision yet.
    pub acl_waiting: usize,
    /// Nodes that served an older certificate than the TLS Secret's and
    /// were told to reload their files (which the kubelet may not have
    /// refreshed yet).
    pub tls_reloaded: usize,
}

/// Runs the stage on the answering `nodes`; nothing without them (the
/// operator does not manage this cluster's Valkey).
pub async fn run(
    ctx: &Context,
    vc: &ValkeyCluster,
    snapshot: &Snapshot,
    nodes: Option<&mut Nodes>,
    desired: &Desired,
    acl_marker: &str,
    certificate: Option<&CertificateDer<'static>>,
) -> Result<Reshaped, Error> {
    let Some(nodes) = nodes else {
        return Ok(Reshaped::default());
    };
    let acl = nodes.sync_acl(acl_marker).await?;
    if acl.loaded > 0 {
        info!(nodes = acl.loaded, "ACL reloaded live");
    }
    let tls = match certificate {
        Some(wanted) => nodes.sync_tls(wanted, &tls_files()).await?,
        None => TlsSync::default(),
    };
    if tls.reloaded > 0 {
        info!(nodes = tls.reloaded, "TLS certificate reloaded live");
    }
    let announced = nodes.announce(desired).await?;
    if announced.settings > 0 {
        info!(
            settings = announced.settings,
            "announce settings changed live"
        );
    }
    set_config(ctx, nodes, &desired.live_settings).await?;
    // A change spread by meets reaches every node in about 0.1 s: waited
    // for here, so the prune need not wait for another look. A cluster
    // still forming agrees only as gossip goes, and is not waited for.
    let within = if announced.meets > 0 {
        SETTLE_WITHIN
    } else {
        Duration::ZERO
    };
    let announce_spreading = !nodes
        .announce_settled(within, &desired.topology.departing)
        .await?;
    let steps = &desired.topology.steps;
    for (i, step) in steps.iter().enumerate() {
        match step {
            Step::Restart(at) => {
                if nodes.serves(*at) {
                    // Only a persistent cluster's plan restarts a primary
                    // that has no replica to hand over to.
                    let note = format!(
                        "shard {} is briefly unavailable: its primary (node {}) restarts to \
                         change, with no replica to take over; its data is on its volume",
                        at.shard, at.node
                    );
                    events::publish(
                        ctx,
                        vc,
                        EventType::Warning,
                        "ShardUnavailable",
                        "Restart",
                        note,
                    )
                    .await;
                }
                nodes.restarting(*at);
                restart(ctx, vc, snapshot, *at).await?
            }
            _ => nodes.run_step(i, step).await?,
        }
    }
    // Primaries given slots tell every node at once.
    nodes.spread_news().await?;
    let count = |f: fn(&Step) -> bool| steps.iter().filter(|s| f(s)).count() as u64;
    ctx.metrics.cluster_steps(
        &super::status::labels(vc),
        count(|s| matches!(s, Step::Failover(_))),
        count(|s| matches!(s, Step::Migrate(_))),
    );
    if let Some(note) = note(steps) {
        events::publish(ctx, vc, EventType::Normal, "Topology", "Topology", note).await;
    }
    Ok(Reshaped {
        steps: steps.len(),
        announce_spreading,
        acl_waiting: acl.waiting,
        tls_reloaded: tls.reloaded,
    })
}

/// Where the guest mounts the TLS Secret in every node (its `valkey.conf`
/// names the same files).
fn tls_files() -> TlsFiles {
    let file = |name: &str| format!("{}/{name}", paths::TLS_DIR);
    TlsFiles {
        cert: file("tls.crt"),
        key: file("tls.key"),
        ca: file("ca.crt"),
    }
}

/// Sets the live `spec.config` settings on every node not yet given them
/// (by node ID: a restarted node read them from its config file).
async fn set_config(
    ctx: &Context,
    nodes: &mut Nodes,
    settings: &[(String, String)],
) -> Result<(), Error> {
    if settings.is_empty() {
        return Ok(());
    }
    let wanted = canonical(settings);
    let done: std::collections::HashSet<String> = {
        let given = ctx.settings_set.lock().unwrap();
        nodes
            .ids()
            .filter(|id| given.get(*id) == Some(&wanted))
            .map(String::from)
            .collect()
    };
    let set = nodes.set_config(settings, |id| done.contains(id)).await?;
    if !set.is_empty() {
        info!(nodes = set.len(), "config settings changed live");
        let mut given = ctx.settings_set.lock().unwrap();
        for id in set {
            given.insert(id, wanted.clone());
        }
    }
    Ok(())
}

/// Settings as one comparable text.
fn canonical(settings: &[(String, String)]) -> String {
    settings.iter().map(|(k, v)| format!("{k} {v}\n")).collect()
}

/// Deletes node `at`'s Pod so its StatefulSet recreates it from the
/// current template.
async fn restart(
    ctx: &Context,
    vc: &ValkeyCluster,
    snapshot: &Snapshot,
    at: NodeRef,
) -> Result<(), Error> {
    let api: Api<Pod> = Api::namespaced(ctx.client.clone(), &vc.namespace().unwrap_or_default());
    for node in snapshot.pods_of(at) {
        api.delete(&node.pod, &DeleteParams::default()).await?;
        ctx.metrics.write("delete", "pods");
        info!(pod = %node.pod, "restarted (deleted) to apply a new template");
    }
    Ok(())
}

/// The Event's note for a plan: its steps in words; none for an empty plan.
fn note(steps: &[Step]) -> Option<String> {
    (!steps.is_empty()).then(|| steps.iter().map(describe).collect::<Vec<_>>().join("; "))
}

#[cfg(test)]
mod tests {
    use super::*;
    use shardgate_contract::model::{AddSlots, SlotRange};

    #[test]
    fn a_plan_is_told_in_one_note() {
        let at = |shard, node| NodeRef { shard, node };
        for (steps, want) in [
            (vec![], None),
            (vec![Step::Restart(at(0, 1))], Some("restart 0/1")),
            (
                vec![
                    Step::AddSlots(AddSlots {
                        node: at(1, 0),
                        slots: vec![SlotRange {
                            start: 0,
                            end: 5460,
                        }],
                    }),
                    Step::Failover(at(2, 1)),
                    Step::Forget("abc".into()),
                ],
                Some("addslots 1/0 0-5460; failover to 2/1; forget abc"),
            ),
        ] {
            assert_eq!(note(&steps).as_deref(), want);
        }
    }
}
