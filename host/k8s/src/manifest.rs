//! Reading manifests: ValkeyCluster documents and the objects `render` is
//! given as observed, from YAML or JSON. Every error names the document and
//! the field.

use std::path::Path;

use anyhow::{Context, bail};
use kube::Resource;

use crate::crd::ValkeyCluster;

/// Parses a ValkeyCluster manifest (YAML or JSON). Errors name the field.
pub fn parse_cluster(text: &str) -> anyhow::Result<ValkeyCluster> {
    let value: serde_json::Value = serde_saphyr::from_str(text).context("not valid YAML")?;
    cluster_from_value(value)
}

/// The one ValkeyCluster of a manifest's documents, and every other
/// document, in order (a Gateway the cluster names, say). Errors name the
/// document.
pub fn one_cluster(text: &str) -> anyhow::Result<(ValkeyCluster, Vec<serde_json::Value>)> {
    let mut cluster = None;
    let mut others = Vec::new();
    for (i, document) in documents(text).into_iter().enumerate() {
        let document = document.with_context(|| format!("document {}", i + 1))?;
        if document.is_null() {
            continue;
        }
        if document["kind"] != ValkeyCluster::kind(&()).as_ref() {
            others.push(document);
            continue;
        }
        if cluster.is_some() {
            bail!(
                "document {}: a second ValkeyCluster; one per manifest",
                i + 1
            );
        }
        cluster =
            Some(cluster_from_value(document).with_context(|| format!("document {}", i + 1))?);
    }
    let Some(cluster) = cluster else {
        let found: Vec<String> = others
            .iter()
            .map(|d| {
                let field = |f: &str| d[f].as_str().unwrap_or("").to_string();
                format!("{}/{}", field("apiVersion"), field("kind"))
            })
            .collect();
        bail!(
            "no ValkeyCluster in the manifest: apiVersion/kind: expected {}/{} in one document, found [{}]",
            ValkeyCluster::api_version(&()),
            ValkeyCluster::kind(&()),
            found.join(", ")
        );
    };
    Ok((cluster, others))
}

/// A ValkeyCluster from a parsed document. Errors name the field.
pub fn cluster_from_value(value: serde_json::Value) -> anyhow::Result<ValkeyCluster> {
    let api_version = value
        .get("apiVersion")
        .and_then(|v| v.as_str())
        .unwrap_or("");
    let kind = value.get("kind").and_then(|v| v.as_str()).unwrap_or("");
    let want = ValkeyCluster::api_version(&());
    if api_version != want || kind != ValkeyCluster::kind(&()) {
        let hint = if api_version.starts_with("valkey.io/") {
            " (a valkey-operator cluster: shardgate's API group is shardgate.io; \
             see docs/migrating.md)"
        } else {
            ""
        };
        bail!("apiVersion/kind: expected {want}/ValkeyCluster, got {api_version:?}/{kind:?}{hint}");
    }
    from_value(value)
}

/// Any object from a parsed document, every error naming the field.
pub fn from_value<T: serde::de::DeserializeOwned>(value: serde_json::Value) -> anyhow::Result<T> {
    serde_path_to_error::deserialize(value).map_err(|e| {
        let path = e.path().to_string();
        anyhow::anyhow!("{path}: {}", e.into_inner())
    })
}

/// Every non-empty document of a multi-document YAML (or JSON) text, in
/// order. Text that is not valid YAML is one `Err` naming where and why.
pub fn documents(text: &str) -> Vec<anyhow::Result<serde_json::Value>> {
    match serde_saphyr::from_multiple::<serde_json::Value>(text) {
        Ok(docs) => docs.into_iter().map(Ok).collect(),
        Err(e) => vec![Err(anyhow::anyhow!("not valid YAML: {e}"))],
    }
}

/// Reads a file, naming it in the error.
pub fn read(path: &Path) -> anyhow::Result<String> {
    std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    const CLUSTER: &str = "apiVersion: shardgate.io/v1alpha1
kind: ValkeyCluster
metadata: {name: demo}
spec: {shards: 3}
";
    const GATEWAY: &str = "apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: valkey}
spec: {gatewayClassName: sandbox, listeners: [{name: tcp-7000, port: 7000, protocol: TCP}]}
";

    #[test]
    fn one_cluster_and_the_documents_beside_it() {
        let (cluster, others) = one_cluster(&format!("{GATEWAY}---\n{CLUSTER}")).unwrap();
        assert_eq!(cluster.metadata.name.as_deref(), Some("demo"));
        assert_eq!(others.len(), 1);
        assert_eq!(others[0]["kind"], "Gateway");
        let (_, others) = one_cluster(CLUSTER).unwrap();
        assert!(others.is_empty());
        let err = one_cluster(GATEWAY).unwrap_err().to_string();
        assert!(err.contains("no ValkeyCluster"), "{err}");
        let err = format!(
            "{:#}",
            one_cluster(&format!("{CLUSTER}---\n{CLUSTER}")).unwrap_err()
        );
        assert!(err.contains("document 2: a second ValkeyCluster"), "{err}");
        let bad = CLUSTER.replace("shards: 3", "shards: many");
        let err = format!("{:#}", one_cluster(&bad).unwrap_err());
        assert!(
            err.contains("document 1") && err.contains("spec.shards"),
            "{err}"
        );
    }

    #[test]
    fn only_shardgate_clusters_are_read_and_the_upstream_group_gets_a_hint() {
        let doc = |api: &str, kind: &str| serde_json::json!({"apiVersion": api, "kind": kind, "metadata": {"name": "c"}, "spec": {}});
        assert!(cluster_from_value(doc("shardgate.io/v1alpha1", "ValkeyCluster")).is_ok());
        for (api, kind, hint) in [
            ("valkey.io/v1alpha1", "ValkeyCluster", true),
            ("shardgate.io/v1", "ValkeyCluster", false),
            ("shardgate.io/v1alpha1", "Service", false),
        ] {
            let e = cluster_from_value(doc(api, kind)).unwrap_err().to_string();
            assert!(
                e.starts_with("apiVersion/kind: expected shardgate.io/v1alpha1/ValkeyCluster"),
                "{e}"
            );
            assert_eq!(e.contains("docs/migrating.md"), hint, "{e}");
        }
    }

    #[test]
    fn every_document_is_read_and_bad_yaml_is_one_error() {
        let docs = documents("a: 1\n---\nb: 2\n");
        assert_eq!(docs.len(), 2);
        assert_eq!(docs[1].as_ref().unwrap()["b"], 2);
        let bad = documents("{not yaml");
        assert_eq!(bad.len(), 1);
        assert!(
            bad[0]
                .as_ref()
                .unwrap_err()
                .to_string()
                .contains("not valid YAML")
        );
    }
}
