//! `shardgate render`: what the operator would apply for one cluster, given
//! optional observed objects, computed offline.

use std::path::Path;

use anyhow::{Context, bail};
use k8s_openapi::api::core::v1::{Pod, Service};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::{Resource, ResourceExt};
use serde::Deserialize;
use shardgate_contract::model::{Severity, Violation};

use crate::convert;
use crate::crd::ValkeyCluster;
use crate::reconciler::Reconciler;

/// Objects observed in the cluster, read from files.
#[derive(Debug, Default)]
pub struct Observed {
    pub services: Vec<Service>,
    pub pods: Vec<Pod>,
    pub clusters: Vec<ValkeyCluster>,
}

/// Why render produced nothing.
#[derive(Debug, thiserror::Error)]
pub enum RenderError {
    #[error("{0:#}")]
    Input(anyhow::Error),
    #[error("{}", violations.iter().map(|v| v.to_string()).collect::<Vec<_>>().join("\n"))]
    Invalid { violations: Vec<Violation> },
    #[error(transparent)]
    Call(#[from] crate::runtime::CallError),
}

/// The result of a render: the `v1` `List` to print and the warnings.
pub struct Rendered {
    pub list: serde_json::Value,
    pub warnings: Vec<Violation>,
}

/// Parses a ValkeyCluster manifest (YAML or JSON). Errors name the field.
pub fn parse_cluster(text: &str) -> anyhow::Result<ValkeyCluster> {
    let value: serde_json::Value = serde_yaml::from_str(text).context("not valid YAML")?;
    cluster_from_value(value)
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
        bail!("apiVersion/kind: expected {want}/ValkeyCluster, got {api_version:?}/{kind:?}");
    }
    serde_path_to_error::deserialize(value).map_err(|e| {
        let path = e.path().to_string();
        anyhow::anyhow!("{path}: {}", e.into_inner())
    })
}

/// Reads observed objects: multi-document YAML, or JSON, each document an
/// object or a `List` of objects. Services, Pods and ValkeyClusters are kept;
/// other kinds are ignored.
pub fn parse_observed(text: &str, into: &mut Observed) -> anyhow::Result<()> {
    for (i, doc) in serde_yaml::Deserializer::from_str(text).enumerate() {
        let value = serde_json::Value::deserialize(doc)
            .with_context(|| format!("document {}: not valid YAML", i + 1))?;
        if value.is_null() {
            continue;
        }
        add_object(value, into).with_context(|| format!("document {}", i + 1))?;
    }
    Ok(())
}

fn add_object(value: serde_json::Value, into: &mut Observed) -> anyhow::Result<()> {
    let kind = value
        .get("kind")
        .and_then(|k| k.as_str())
        .unwrap_or("")
        .to_string();
    let name = value
        .pointer("/metadata/name")
        .and_then(|n| n.as_str())
        .unwrap_or("")
        .to_string();
    let at = |e: serde_path_to_error::Error<serde_json::Error>| {
        let path = e.path().to_string();
        anyhow::anyhow!("{kind} {name:?}: {path}: {}", e.into_inner())
    };
    match kind.as_str() {
        "List" | "ServiceList" | "PodList" | "ValkeyClusterList" => {
            let items = value
                .get("items")
                .and_then(|i| i.as_array())
                .cloned()
                .unwrap_or_default();
            for (i, item) in items.into_iter().enumerate() {
                add_object(item, into).with_context(|| format!("items[{i}]"))?;
            }
        }
        "Service" => into
            .services
            .push(serde_path_to_error::deserialize(value).map_err(at)?),
        "Pod" => into
            .pods
            .push(serde_path_to_error::deserialize(value).map_err(at)?),
        "ValkeyCluster" => into
            .clusters
            .push(serde_path_to_error::deserialize(value).map_err(at)?),
        _ => {}
    }
    Ok(())
}

/// Computes the List for `cluster` given `observed`.
pub fn render(
    cluster: &ValkeyCluster,
    observed: &Observed,
    reconciler: &dyn Reconciler,
    now: Time,
) -> Result<Rendered, RenderError> {
    let namespace = cluster.namespace();
    let others = observed
        .clusters
        .iter()
        .filter(|c| c.namespace() == namespace && c.name_any() != cluster.name_any())
        .map(|c| c.name_any())
        .collect();
    let input = convert::input(cluster, &observed.services, &observed.pods, others);
    let desired = match reconciler.reconcile(&input)? {
        Ok(d) => d,
        Err(e) => {
            return Err(RenderError::Invalid {
                violations: e.violations,
            });
        }
    };
    let objects = convert::objects(cluster, &desired);
    let mut items = objects.to_json();
    let mut with_status = cluster.clone();
    with_status.status = Some(convert::status(
        &desired,
        cluster.status.as_ref(),
        cluster.metadata.generation,
        &now,
    ));
    with_status.metadata.managed_fields = None;
    items.push(serde_json::to_value(&with_status).map_err(|e| RenderError::Input(e.into()))?);
    Ok(Rendered {
        list: serde_json::json!({"apiVersion": "v1", "kind": "List", "items": items}),
        warnings: desired
            .warnings
            .into_iter()
            .filter(|w| w.severity == Severity::Warning)
            .collect(),
    })
}

/// Reads a file, naming it in the error.
pub fn read(path: &Path) -> anyhow::Result<String> {
    std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))
}
