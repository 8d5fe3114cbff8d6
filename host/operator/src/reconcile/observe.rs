//! Stage 1, observe: what the cluster owns, read once from the caches
//! ([`Snapshot`], each Pod projected once), the other clusters' names, and
//! the facts its Valkey nodes report at their pod IPs.

use kube::ResourceExt;
use shardgate_contract::model::Input;
use shardgate_k8s::convert;
use shardgate_k8s::crd::ValkeyCluster;
use shardgate_k8s::snapshot::Snapshot;
use shardgate_valkey::{Dial, Nodes};

use super::Error;
use super::credentials::Access;
use crate::context::Context;

/// The snapshot of what `vc` owns, and the guest's input built from it
/// (without Valkey facts).
pub fn objects(vc: &ValkeyCluster, ctx: &Context) -> Result<(Snapshot, Input), Error> {
    let namespace = vc.namespace().ok_or(Error::Incomplete)?;
    let uid = vc.uid().ok_or(Error::Incomplete)?;
    let name = vc.name_any();
    let spec = convert::cluster(vc);
    let snapshot = Snapshot::of(&ctx.caches, &spec, &uid);
    let state = ctx.clusters.state();
    let others = others(state.iter().map(|c| c.as_ref()), &namespace, &name);
    let mut input = snapshot.input(spec, others);
    input.pinned_elsewhere =
        convert::pinned_elsewhere(state.iter().map(|c| c.as_ref()), &namespace, &name);
    Ok((snapshot, input))
}

/// The cluster's answering Valkey nodes, or `None` when the operator was
/// told not to talk to Valkey. Every node is reached as `access` says: in
/// TLS for a TLS cluster, trusting the cluster's CA.
pub async fn valkey(ctx: &Context, snapshot: &Snapshot, access: &Access) -> Option<Nodes> {
    if !ctx.manage_valkey {
        return None;
    }
    let dial = Dial {
        login: Some(access.login.clone()),
        tls: access.tls.as_ref().map(|m| m.trust.clone()),
        timeout: shardgate_valkey::nodes::TIMEOUT,
    };
    Some(Nodes::observe(snapshot.valkey_targets(), &dial, ctx.spreads.clone()).await)
}

/// The names of the other clusters in `namespace`, for the guest's
/// generated-name collision check. Every cluster is looked at; only the
/// others' names are copied.
fn others<'a>(
    clusters: impl Iterator<Item = &'a ValkeyCluster>,
    namespace: &str,
    name: &str,
) -> Vec<String> {
    clusters
        .filter(|c| c.metadata.namespace.as_deref() == Some(namespace))
        .filter_map(|c| c.metadata.name.as_deref().filter(|n| *n != name))
        .map(String::from)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn cluster(namespace: &str, name: &str) -> ValkeyCluster {
        serde_json::from_value(json!({
            "apiVersion": "shardgate.io/v1alpha1", "kind": "ValkeyCluster",
            "metadata": {"name": name, "namespace": namespace}, "spec": {},
        }))
        .unwrap()
    }

    #[test]
    fn the_other_clusters_are_those_of_the_namespace_but_this_one() {
        let all = [
            cluster("a", "x"),
            cluster("a", "y"),
            cluster("b", "z"),
            cluster("a", "w"),
        ];
        for (namespace, name, want) in [
            ("a", "x", vec!["y", "w"]),
            ("a", "q", vec!["x", "y", "w"]),
            ("b", "z", vec![]),
            ("c", "x", vec![]),
        ] {
            assert_eq!(
                others(all.iter(), namespace, name),
                want,
                "{namespace}/{name}"
            );
        }
    }
}
