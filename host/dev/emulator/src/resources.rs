//! The registry of resource types the emulator serves (built-ins plus
//! registered custom resources) and how to look them up.

use std::sync::Arc;

/// A custom resource type to serve, as a CustomResourceDefinition would
/// declare it (one version only).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CustomResource {
    /// API group, e.g. `shardgate.io`.
    pub group: String,
    /// Served version, e.g. `v1alpha1`.
    pub version: String,
    /// Kind, e.g. `ValkeyCluster`.
    pub kind: String,
    /// Plural resource name, e.g. `valkeyclusters`.
    pub plural: String,
    /// Whether objects live in namespaces (`scope: Namespaced`).
    pub namespaced: bool,
    /// Whether the `/status` subresource is enabled.
    pub status_subresource: bool,
    /// The served version's `additionalPrinterColumns` (server-side
    /// `kubectl get` columns). Empty: NAME and AGE, as for a CRD without
    /// any.
    pub printer_columns: Vec<PrinterColumn>,
    /// `spec.names.shortNames` (`kubectl get vkc`).
    pub short_names: Vec<String>,
}

/// One `additionalPrinterColumns` entry of a CRD version.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PrinterColumn {
    /// Column header, e.g. `Ready Shards`.
    pub name: String,
    /// `string`, `integer`, `number`, `boolean` or `date`.
    pub column_type: String,
    /// Where the value is, e.g. `.status.conditions[?(@.type=="Ready")].status`.
    pub json_path: String,
    /// Optional OpenAPI format hint (`int32`, `byte`, ...).
    pub format: String,
    /// Optional description; the API server's default when empty.
    pub description: String,
    /// 0: always shown; above 0: only with `kubectl get -o wide`.
    pub priority: i32,
}

impl PrinterColumn {
    /// A column shown by default.
    pub fn new(name: &str, column_type: &str, json_path: &str) -> Self {
        Self {
            name: name.into(),
            column_type: column_type.into(),
            json_path: json_path.into(),
            format: String::new(),
            description: String::new(),
            priority: 0,
        }
    }

    fn from_crd(col: &serde_json::Value) -> anyhow::Result<Self> {
        let field = |k: &str| col[k].as_str().unwrap_or_default().to_string();
        let (name, json_path) = (field("name"), field("jsonPath"));
        if name.is_empty() || json_path.is_empty() {
            anyhow::bail!("a printer column needs a name and a jsonPath: {col}");
        }
        Ok(Self {
            name,
            column_type: field("type"),
            json_path,
            format: field("format"),
            description: field("description"),
            priority: col["priority"]
                .as_i64()
                .and_then(|p| i32::try_from(p).ok())
                .unwrap_or(0),
        })
    }
}

impl CustomResource {
    /// A namespaced custom resource with the `/status` subresource enabled.
    pub fn namespaced(group: &str, version: &str, kind: &str, plural: &str) -> Self {
        Self {
            group: group.into(),
            version: version.into(),
            kind: kind.into(),
            plural: plural.into(),
            namespaced: true,
            status_subresource: true,
            printer_columns: Vec::new(),
            short_names: Vec::new(),
        }
    }

    /// Adds an `additionalPrinterColumns` entry.
    pub fn printer_column(mut self, column: PrinterColumn) -> Self {
        self.printer_columns.push(column);
        self
    }

    /// Parses the first served version of a `CustomResourceDefinition`
    /// manifest (YAML or JSON), with its `additionalPrinterColumns`.
    pub fn from_crd_yaml(text: &str) -> anyhow::Result<Self> {
        let crd: serde_json::Value = serde_saphyr::from_str(text)?;
        let spec = &crd["spec"];
        let s = |v: &serde_json::Value, what: &str| -> anyhow::Result<String> {
            v.as_str()
                .map(str::to_string)
                .ok_or_else(|| anyhow::anyhow!("CRD has no {what}"))
        };
        let versions = spec["versions"]
            .as_array()
            .ok_or_else(|| anyhow::anyhow!("CRD has no spec.versions"))?;
        let version = versions
            .iter()
            .find(|v| v["served"].as_bool().unwrap_or(true))
            .ok_or_else(|| anyhow::anyhow!("CRD serves no version"))?;
        Ok(Self {
            group: s(&spec["group"], "spec.group")?,
            version: s(&version["name"], "version name")?,
            kind: s(&spec["names"]["kind"], "spec.names.kind")?,
            plural: s(&spec["names"]["plural"], "spec.names.plural")?,
            namespaced: spec["scope"].as_str() != Some("Cluster"),
            status_subresource: version["subresources"]["status"].is_object(),
            printer_columns: version["additionalPrinterColumns"]
                .as_array()
                .map(|cols| cols.iter().map(PrinterColumn::from_crd).collect())
                .transpose()?
                .unwrap_or_default(),
            short_names: spec["names"]["shortNames"]
                .as_array()
                .map(|names| {
                    names
                        .iter()
                        .filter_map(|n| n.as_str().map(str::to_string))
                        .collect()
                })
                .unwrap_or_default(),
        })
    }
}

/// Everything the emulator knows about one served resource type.
#[derive(Debug)]
pub(crate) struct ResourceInfo {
    pub group: String,
    pub version: String,
    pub kind: String,
    pub plural: String,
    pub namespaced: bool,
    /// Has a `/status` subresource: main-resource writes ignore `.status`.
    pub status: bool,
    /// `metadata.generation` is maintained (bumped on spec changes).
    pub generation: bool,
    pub short_names: Vec<String>,
    /// Custom resources: their printer columns (empty: the default Age).
    /// Built-ins (`None`) print with the API server's built-in printers.
    pub printer_columns: Option<Vec<PrinterColumn>>,
}

impl ResourceInfo {
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// Storage key: the plural, qualified by group for non-core groups.
    pub fn key(&self) -> String {
        if self.group.is_empty() {
            self.plural.clone()
        } else {
            format!("{}.{}", self.plural, self.group)
        }
    }

    pub fn singular(&self) -> String {
        self.kind.to_lowercase()
    }

    /// Subresources besides `/status`, each served by its own handler.
    /// Whether a DELETE answers with the deleted object (as the API server's
    /// pod and custom resource stores do) rather than a success `Status`.
    pub fn returns_deleted_object(&self) -> bool {
        self.printer_columns.is_some() || (self.group.is_empty() && self.plural == "pods")
    }

    pub fn extra_subresources(&self) -> &'static [Subresource] {
        if self.group.is_empty() && self.plural == "pods" {
            &[
                Subresource {
                    name: "eviction",
                    group: "policy",
                    version: "v1",
                    kind: "Eviction",
                    verbs: &["create"],
                },
                Subresource {
                    name: "binding",
                    group: "",
                    version: "v1",
                    kind: "Binding",
                    verbs: &["create"],
                },
            ]
        } else {
            &[]
        }
    }
}

/// A subresource with its own request kind, e.g. `pods/eviction`
/// (`policy/v1 Eviction`, create only) or `pods/binding` (`v1 Binding`).
#[derive(Debug)]
pub(crate) struct Subresource {
    pub name: &'static str,
    pub group: &'static str,
    pub version: &'static str,
    pub kind: &'static str,
    pub verbs: &'static [&'static str],
}

pub(crate) type Res = Arc<ResourceInfo>;

/// The set of served resources.
#[derive(Debug, Default)]
pub(crate) struct Registry {
    pub resources: Vec<Res>,
}

#[allow(clippy::too_many_arguments)]
fn builtin(
    group: &str,
    version: &str,
    kind: &str,
    plural: &str,
    namespaced: bool,
    status: bool,
    generation: bool,
    short_names: &'static [&'static str],
) -> Res {
    Arc::new(ResourceInfo {
        group: group.into(),
        version: version.into(),
        kind: kind.into(),
        plural: plural.into(),
        namespaced,
        status,
        generation,
        short_names: short_names.iter().map(|s| s.to_string()).collect(),
        printer_columns: None,
    })
}

impl Registry {
    pub fn with_builtins() -> Self {
        let resources = vec![
            builtin(
                "",
                "v1",
                "Namespace",
                "namespaces",
                false,
                true,
                false,
                &["ns"],
            ),
            builtin("", "v1", "Node", "nodes", false, true, false, &["no"]),
            builtin("", "v1", "Service", "services", true, true, false, &["svc"]),
            builtin("", "v1", "Pod", "pods", true, true, false, &["po"]),
            builtin(
                "",
                "v1",
                "ConfigMap",
                "configmaps",
                true,
                false,
                false,
                &["cm"],
            ),
            builtin("", "v1", "Secret", "secrets", true, false, false, &[]),
            builtin("", "v1", "Event", "events", true, false, false, &["ev"]),
            builtin(
                "",
                "v1",
                "PersistentVolumeClaim",
                "persistentvolumeclaims",
                true,
                true,
                false,
                &["pvc"],
            ),
            builtin(
                "apps",
                "v1",
                "StatefulSet",
                "statefulsets",
                true,
                true,
                true,
                &["sts"],
            ),
            builtin(
                "policy",
                "v1",
                "PodDisruptionBudget",
                "poddisruptionbudgets",
                true,
                true,
                true,
                &["pdb"],
            ),
            builtin(
                "coordination.k8s.io",
                "v1",
                "Lease",
                "leases",
                true,
                false,
                false,
                &[],
            ),
            builtin(
                "events.k8s.io",
                "v1",
                "Event",
                "events",
                true,
                false,
                false,
                &["ev"],
            ),
        ];
        Self { resources }
    }

    pub fn add_custom(&mut self, cr: &CustomResource) {
        self.resources
            .retain(|r| !(r.group == cr.group && r.plural == cr.plural));
        self.resources.push(Arc::new(ResourceInfo {
            group: cr.group.clone(),
            version: cr.version.clone(),
            kind: cr.kind.clone(),
            plural: cr.plural.clone(),
            namespaced: cr.namespaced,
            status: cr.status_subresource,
            generation: true,
            short_names: cr.short_names.clone(),
            printer_columns: Some(cr.printer_columns.clone()),
        }));
    }

    pub fn find(&self, group: &str, version: &str, plural: &str) -> Option<Res> {
        self.resources
            .iter()
            .find(|r| r.group == group && r.version == version && r.plural == plural)
            .cloned()
    }

    /// Finds a resource by `apiVersion` + `kind`, or by plural name
    /// (optionally `plural.group`).
    pub fn lookup(&self, type_name: &str) -> Option<Res> {
        if let Some((api_version, kind)) = type_name
            .rsplit_once('/')
            .filter(|(_, k)| k.chars().next().is_some_and(|c| c.is_ascii_uppercase()))
        {
            let (g, v) = split_api_version(api_version);
            return self
                .resources
                .iter()
                .find(|r| r.group == g && r.version == v && r.kind == kind)
                .cloned();
        }
        if let Some(kind_match) = self.resources.iter().find(|r| r.kind == type_name) {
            return Some(kind_match.clone());
        }
        self.resources
            .iter()
            .find(|r| r.key() == type_name || r.plural == type_name)
            .cloned()
    }

    pub fn groups(&self) -> Vec<(String, String)> {
        let mut out: Vec<(String, String)> = Vec::new();
        for r in &self.resources {
            let gv = (r.group.clone(), r.version.clone());
            if !r.group.is_empty() && !out.contains(&gv) {
                out.push(gv);
            }
        }
        out
    }
}

pub(crate) fn split_api_version(api_version: &str) -> (&str, &str) {
    match api_version.split_once('/') {
        Some((g, v)) => (g, v),
        None => ("", api_version),
    }
}
