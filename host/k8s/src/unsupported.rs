//! Spec fields the guest renders but this host cannot yet carry out safely.
//! A cluster that uses one is refused, naming the field, before anything is
//! applied or deleted: better a clear error than a cluster that looks Ready
//! and is not (or that loses data on a scale-in the host cannot drive).

use shardgate_contract::model::{Severity, Violation};

use crate::crd::ValkeyCluster;

/// What `vc` asks for that this host cannot do yet.
pub fn violations(vc: &ValkeyCluster) -> Vec<Violation> {
    let mut out = Vec::new();
    if vc.spec.tls.is_some() {
        out.push(Violation {
            severity: Severity::Error,
            field: "spec.tls".into(),
            message: "TLS clusters are not supported yet: the operator cannot talk TLS to \
                      Valkey, so it could neither form the cluster nor move slots before a \
                      scale-in; remove spec.tls"
                .into(),
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn cluster(spec: serde_json::Value) -> ValkeyCluster {
        serde_json::from_value(json!({
            "apiVersion": "shardgate.io/v1alpha1", "kind": "ValkeyCluster",
            "metadata": {"name": "c", "namespace": "ns"}, "spec": spec,
        }))
        .unwrap()
    }

    #[test]
    fn tls_is_refused_by_field_and_plain_clusters_pass() {
        assert!(violations(&cluster(json!({}))).is_empty());
        let v = violations(&cluster(json!({"tls": {"secretName": "s"}})));
        assert_eq!(v.len(), 1);
        assert_eq!(v[0].field, "spec.tls");
        assert_eq!(v[0].severity, Severity::Error);
    }
}
