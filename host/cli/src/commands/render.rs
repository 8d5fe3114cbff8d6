//! `shardgate render`: what the operator would apply for one cluster, given
//! optional observed objects, computed offline.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use k8s_openapi::api::core::v1::{Pod, Service};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::ResourceExt;
use shardgate_contract::model::{self as m, NodeRef, Severity, Violation};
use shardgate_k8s::crd::{ExternalAccessType, ValkeyCluster};
use shardgate_k8s::manifest;
use shardgate_k8s::status::{self, Outcome, Progress};
use shardgate_k8s::{convert, gateway_api};
use shardgate_wasm::{Engine, Limits, Reconciler};

use super::load_module;

#[derive(clap::Args)]
pub struct RenderArgs {
    /// The ValkeyCluster manifest (YAML or JSON).
    #[arg(short = 'f', long = "filename")]
    file: PathBuf,
    /// Objects as they exist in the cluster (Services, Pods, other
    /// ValkeyClusters): multi-document YAML or a JSON List. Repeatable.
    #[arg(long)]
    observed: Vec<PathBuf>,
    /// Output format.
    #[arg(short = 'o', long, value_enum, default_value_t = Format::Yaml)]
    output: Format,
    /// Run this reconcile component instead of the embedded one.
    #[arg(long)]
    module: Option<PathBuf>,
    /// The time a condition that changes is stamped with (RFC 3339).
    /// Default: the cluster's creationTimestamp, else the Unix epoch, so the
    /// same input always renders the same bytes.
    #[arg(long, value_name = "RFC3339")]
    now: Option<k8s_openapi::jiff::Timestamp>,
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum Format {
    Json,
    Yaml,
}

impl RenderArgs {
    pub fn run(self) -> anyhow::Result<ExitCode> {
        let (cluster, beside) = manifest::one_cluster(&manifest::read(&self.file)?)
            .with_context(|| format!("{}", self.file.display()))?;
        let mut observed = Observed::default();
        // A Gateway given beside the cluster is read as it would be live.
        for object in beside {
            add_object(object, &mut observed)
                .with_context(|| format!("{}", self.file.display()))?;
        }
        for path in &self.observed {
            parse_observed(&manifest::read(path)?, &mut observed)
                .with_context(|| format!("{}", path.display()))?;
        }
        let engine = Engine::new(Limits::default())?;
        let module = load_module(&engine, self.module.as_ref())?;
        let now = match self.now {
            Some(t) => Time(t),
            None => cluster
                .metadata
                .creation_timestamp
                .clone()
                .unwrap_or(Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH)),
        };
        match render(&cluster, &observed, &module, now) {
            Ok(rendered) => {
                for w in &rendered.warnings {
                    eprintln!("{w}");
                }
                let text = match self.output {
                    Format::Json => serde_json::to_string_pretty(&rendered.list)? + "\n",
                    Format::Yaml => serde_saphyr::to_string(&rendered.list)?,
                };
                print!("{text}");
                Ok(ExitCode::SUCCESS)
            }
            Err(RenderError::Invalid { violations }) => {
                eprintln!("error: {} is invalid:", self.file.display());
                for v in violations {
                    eprintln!("  {v}");
                }
                Ok(ExitCode::FAILURE)
            }
            Err(e) => Err(e.into()),
        }
    }
}

/// Objects observed in the cluster, read from files.
#[derive(Debug, Default)]
pub struct Observed {
    pub services: Vec<Service>,
    pub pods: Vec<Pod>,
    pub clusters: Vec<ValkeyCluster>,
    /// Gateway API Gateways, as given.
    pub gateways: Vec<serde_json::Value>,
    /// `kind/name` of every object given, Services and Pods included: an
    /// object the cluster wants that is not among them would be applied.
    pub present: BTreeSet<String>,
}

/// Why render produced nothing.
#[derive(Debug, thiserror::Error)]
pub enum RenderError {
    #[error("{0:#}")]
    Input(anyhow::Error),
    #[error("{}", violations.iter().map(|v| v.to_string()).collect::<Vec<_>>().join("\n"))]
    Invalid { violations: Vec<Violation> },
    #[error(transparent)]
    Call(#[from] shardgate_wasm::CallError),
}

/// The result of a render: the `v1` `List` to print and the warnings.
pub struct Rendered {
    pub list: serde_json::Value,
    pub warnings: Vec<Violation>,
}

/// Reads observed objects: multi-document YAML, or JSON, each document an
/// object or a `List` of objects. Services, Pods and ValkeyClusters are
/// read; of other kinds only the names are kept.
pub fn parse_observed(text: &str, into: &mut Observed) -> anyhow::Result<()> {
    for (i, doc) in manifest::documents(text).into_iter().enumerate() {
        let value = doc.with_context(|| format!("document {}", i + 1))?;
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
    let at = |e: anyhow::Error| anyhow::anyhow!("{kind} {name:?}: {e}");
    if !kind.ends_with("List") {
        into.present.insert(format!("{kind}/{name}"));
    }
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
        "Service" => into.services.push(manifest::from_value(value).map_err(at)?),
        "Pod" => into.pods.push(manifest::from_value(value).map_err(at)?),
        "ValkeyCluster" => into.clusters.push(manifest::from_value(value).map_err(at)?),
        "Gateway"
            if value["apiVersion"]
                .as_str()
                .is_some_and(|v| v.starts_with(gateway_api::GROUP)) =>
        {
            into.gateways.push(value)
        }
        _ => {}
    }
    Ok(())
}

/// The Gateway the cluster names, as render sees it: the Gateway API is
/// assumed served, and the Gateway is the one given (in the manifest or
/// as observed), else missing.
fn gateway(cluster: &m::Cluster, gateways: &[serde_json::Value]) -> Option<m::GatewayFound> {
    let name = &cluster.external_access.as_ref()?.gateway.as_ref()?.name;
    let given = gateways.iter().find(|g| {
        g["metadata"]["name"].as_str() == Some(name)
            && g["metadata"]["namespace"]
                .as_str()
                .is_none_or(|ns| ns == cluster.namespace)
    });
    Some(match given {
        Some(g) => m::GatewayFound::Found(gateway_api::observed_gateway(g)),
        None => m::GatewayFound::Missing,
    })
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
    let mut input = convert::input(cluster, &observed.services, &observed.pods, others);
    input.observed.gateway = gateway(&input.cluster, &observed.gateways);
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
    // As the operator would report it after applying, with the Valkey
    // stage off: what is not among the observed objects would be written.
    let changed = items
        .iter()
        .filter(|o| {
            !observed.present.contains(&format!(
                "{}/{}",
                o["kind"].as_str().unwrap_or(""),
                o["metadata"]["name"].as_str().unwrap_or("")
            ))
        })
        .count();
    let pods = input.observed.pods.iter().map(|p| {
        let at = NodeRef {
            shard: p.shard,
            node: p.node,
        };
        (at, p.ready)
    });
    let shards = input.cluster.shards.max(0) as u32;
    let progress = Progress {
        changed,
        ready_nodes: status::ready_nodes(pods.clone(), &desired.nodes),
        wanted_nodes: desired.nodes.len(),
        shards: shards as usize,
        ready_shards: status::ready_shards(pods, &desired.nodes, shards),
        formation: None,
        announce_spreading: false,
        acl_pending: 0,
        conflicts: Vec::new(),
        rolling: 0,
        external_access_type: Some(ExternalAccessType::of(
            cluster.spec.external_access.as_ref(),
        )),
    };
    let outcome = Outcome::Reconciled {
        guest: &desired.status,
        progress,
    };
    let mut with_status = cluster.clone();
    with_status.status = Some(status::compute(
        &outcome,
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
