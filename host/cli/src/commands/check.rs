//! `shardgate check`: validates ValkeyCluster manifests offline with the same
//! reconcile module the operator runs, for CI pipelines and GitOps.

use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use kube::ResourceExt;
use serde::Serialize;
use shardgate_contract::model::{Severity, Violation};
use shardgate_k8s::convert;
use shardgate_k8s::manifest;
use shardgate_wasm::{Engine, Limits, Reconciler};

use super::load_module;

#[derive(clap::Args)]
pub struct CheckArgs {
    /// Manifest files or directories (YAML or JSON, multi-document); `-`
    /// reads standard input.
    #[arg(short = 'f', long = "filename", num_args = 1.., required_unless_present = "paths")]
    files: Vec<PathBuf>,
    /// The same as -f: manifest files or directories, `-` for standard input.
    #[arg(value_name = "FILE")]
    paths: Vec<PathBuf>,
    /// Output format.
    #[arg(short = 'o', long, value_enum, default_value_t = CheckFormat::Text)]
    output: CheckFormat,
    /// Run this reconcile component instead of the embedded one.
    #[arg(long)]
    module: Option<PathBuf>,
}

/// The path that stands for standard input.
const STDIN: &str = "-";

#[derive(Clone, Copy, clap::ValueEnum)]
enum CheckFormat {
    Text,
    Json,
}

impl CheckArgs {
    pub fn run(self) -> anyhow::Result<ExitCode> {
        let engine = Engine::new(Limits::default())?;
        let module = load_module(&engine, self.module.as_ref())?;
        let paths: Vec<PathBuf> = self.files.into_iter().chain(self.paths).collect();
        if paths.iter().filter(|p| p.as_os_str() == STDIN).count() > 1 {
            anyhow::bail!("`-` (standard input) can be given only once");
        }
        let mut reports = Vec::new();
        for file in expand(&paths)? {
            reports.extend(if file.as_os_str() == STDIN {
                let mut text = String::new();
                std::io::stdin()
                    .read_to_string(&mut text)
                    .context("reading standard input")?;
                check_text(Path::new("<stdin>"), &text, &module)?
            } else {
                check_file(&file, &module)?
            });
        }
        let failed = reports.iter().any(|r| r.has_errors());
        match self.output {
            CheckFormat::Json => println!("{}", serde_json::to_string_pretty(&reports)?),
            CheckFormat::Text => print_text(&reports),
        }
        Ok(if failed {
            ExitCode::FAILURE
        } else {
            ExitCode::SUCCESS
        })
    }
}

fn print_text(reports: &[Report]) {
    for r in reports {
        let who = format!(
            "{}/{}",
            r.namespace.as_deref().unwrap_or("-"),
            r.name.as_deref().unwrap_or("-")
        );
        if r.violations.is_empty() {
            println!("{} (document {}, {who}): ok", r.file.display(), r.document);
        }
        for v in &r.violations {
            println!(
                "{} (document {}, {who}): {}: {}: {}",
                r.file.display(),
                r.document,
                v.severity,
                v.field,
                v.message
            );
        }
    }
    let errors = reports.iter().filter(|r| r.has_errors()).count();
    println!("{} clusters checked, {errors} with errors", reports.len());
}

/// The findings for one ValkeyCluster document.
#[derive(Debug, Serialize)]
pub struct Report {
    pub file: PathBuf,
    /// 1-based document index within the file.
    pub document: usize,
    pub namespace: Option<String>,
    pub name: Option<String>,
    pub violations: Vec<Finding>,
}

#[derive(Debug, Serialize)]
pub struct Finding {
    pub severity: &'static str,
    pub field: String,
    pub message: String,
}

impl From<Violation> for Finding {
    fn from(v: Violation) -> Self {
        Finding {
            severity: match v.severity {
                Severity::Error => "error",
                Severity::Warning => "warning",
            },
            field: v.field,
            message: v.message,
        }
    }
}

impl Report {
    pub fn has_errors(&self) -> bool {
        self.violations.iter().any(|v| v.severity == "error")
    }
}

/// Every `.yaml`, `.yml` and `.json` file under `paths` (files are taken as
/// given; directories are walked), sorted.
pub fn expand(paths: &[PathBuf]) -> anyhow::Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    for p in paths {
        if p.is_dir() {
            walk(p, &mut out)?;
        } else {
            out.push(p.clone());
        }
    }
    Ok(out)
}

fn walk(dir: &Path, out: &mut Vec<PathBuf>) -> anyhow::Result<()> {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .with_context(|| format!("reading {}", dir.display()))?
        .collect::<Result<_, _>>()?;
    entries.sort_by_key(|e| e.path());
    for e in entries {
        let p = e.path();
        if p.is_dir() {
            walk(&p, out)?;
        } else if matches!(
            p.extension().and_then(|x| x.to_str()),
            Some("yaml" | "yml" | "json")
        ) {
            out.push(p);
        }
    }
    Ok(())
}

/// Checks every ValkeyCluster document in `file`. Documents of other kinds
/// are skipped; a document that does not parse is reported as an error.
pub fn check_file(file: &Path, module: &dyn Reconciler) -> anyhow::Result<Vec<Report>> {
    let text =
        std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?;
    check_text(file, &text, module)
}

/// Checks every ValkeyCluster document in `text`, reported as read from
/// `file`.
pub fn check_text(file: &Path, text: &str, module: &dyn Reconciler) -> anyhow::Result<Vec<Report>> {
    let mut reports = Vec::new();
    for (i, doc) in manifest::documents(text).into_iter().enumerate() {
        let report = |violations: Vec<Finding>, ns: Option<String>, name: Option<String>| Report {
            file: file.to_path_buf(),
            document: i + 1,
            namespace: ns,
            name,
            violations,
        };
        let value = match doc {
            Ok(v) => v,
            Err(e) => {
                reports.push(report(vec![parse_error("", format!("{e}"))], None, None));
                continue;
            }
        };
        if value.get("kind").and_then(|k| k.as_str()) != Some("ValkeyCluster") {
            continue;
        }
        let name = value
            .pointer("/metadata/name")
            .and_then(|n| n.as_str())
            .map(String::from);
        let ns = value
            .pointer("/metadata/namespace")
            .and_then(|n| n.as_str())
            .map(String::from);
        let cluster = match manifest::cluster_from_value(value) {
            Ok(c) => c,
            Err(e) => {
                let msg = format!("{e:#}");
                let (field, message) = msg.split_once(": ").unwrap_or(("", msg.as_str()));
                reports.push(report(
                    vec![parse_error(field, message.to_string())],
                    ns,
                    name,
                ));
                continue;
            }
        };
        let violations = module.validate(&convert::cluster(&cluster))?;
        reports.push(report(
            violations.into_iter().map(Finding::from).collect(),
            cluster.namespace(),
            Some(cluster.name_any()),
        ));
    }
    Ok(reports)
}

fn parse_error(field: &str, message: String) -> Finding {
    Finding {
        severity: "error",
        field: field.to_string(),
        message,
    }
}
