//! `shardgate endpoints`: a live ValkeyCluster's external endpoints, its
//! `Ready` condition and a ready-to-paste `valkey-cli` command that logs in.
//!
//! What to print is decided by pure functions of the cluster as read
//! ([`report`], [`text`], [`json`]); [`EndpointsArgs::run`] only reads the
//! cluster and prints.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use kube::{Api, ResourceExt};
use serde::Serialize;
use shardgate_contract::{conditions, names};
use shardgate_k8s::crd::ValkeyCluster;

#[derive(clap::Args)]
pub struct EndpointsArgs {
    /// The ValkeyCluster's name.
    name: String,
    /// The cluster's namespace (default: the kubeconfig context's, else
    /// `default`).
    #[arg(short = 'n', long)]
    namespace: Option<String>,
    /// Kubeconfig file, or a list of them separated by `:` (merged as
    /// kubectl merges $KUBECONFIG: the first to set a value wins). Without
    /// it: $KUBECONFIG, else the in-cluster service account, else
    /// ~/.kube/config.
    #[arg(long, env = "KUBECONFIG")]
    kubeconfig: Option<PathBuf>,
    /// Kubeconfig context to use.
    #[arg(long)]
    context: Option<String>,
    /// Output format.
    #[arg(short = 'o', long, value_enum, default_value_t = Format::Text)]
    output: Format,
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum Format {
    Text,
    Json,
}

impl EndpointsArgs {
    pub fn run(self) -> anyhow::Result<ExitCode> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let (namespace, cluster) = runtime.block_on(self.read())?;
        // Absolute, so the printed commands work from any directory.
        let kubeconfig = self.kubeconfig.as_deref().map(absolute_list).transpose()?;
        let kubectl = Kubectl {
            namespace: &namespace,
            kubeconfig: kubeconfig.as_deref(),
            context: self.context.as_deref(),
        };
        let report = report(&kubectl, &cluster)?;
        match self.output {
            Format::Text => print!("{}", text(&namespace, &cluster.name_any(), &report)),
            Format::Json => println!("{}", json(&report)?),
        }
        match report.waiting(&namespace, &cluster.name_any()) {
            Some(waiting) => Err(anyhow::anyhow!(waiting)),
            None => Ok(ExitCode::SUCCESS),
        }
    }

    /// The namespace asked for (or the kubeconfig's) and the cluster in it.
    async fn read(&self) -> anyhow::Result<(String, ValkeyCluster)> {
        let client =
            shardgate_k8s::client(self.kubeconfig.as_deref(), self.context.as_deref()).await?;
        let namespace = self
            .namespace
            .clone()
            .unwrap_or_else(|| client.default_namespace().to_string());
        let who = format!("ValkeyCluster {namespace}/{}", self.name);
        let cluster = Api::<ValkeyCluster>::namespaced(client, &namespace)
            .get_opt(&self.name)
            .await
            .with_context(|| format!("reading {who}"))?
            .with_context(|| format!("{who} not found"))?;
        Ok((namespace, cluster))
    }
}

/// How the printed `kubectl` commands reach the cluster: the namespace and,
/// when given to `shardgate`, the same kubeconfig and context.
struct Kubectl<'a> {
    namespace: &'a str,
    kubeconfig: Option<&'a Path>,
    context: Option<&'a str>,
}

impl Kubectl<'_> {
    /// `kubectl [--kubeconfig F] [--context C] get secret -n NS SECRET -o
    /// jsonpath='{.data.KEY}' | base64 -d`: one key of a Secret, decoded.
    fn secret_key(&self, secret: &str, key: &str) -> String {
        let mut words = vec![];
        match self.kubeconfig {
            // kubectl's --kubeconfig takes one file; a list goes in $KUBECONFIG.
            Some(list) if std::env::split_paths(list).nth(1).is_some() => words.extend([
                format!("KUBECONFIG={}", shell_word(&list.to_string_lossy())),
                "kubectl".into(),
            ]),
            Some(path) => words.extend([
                "kubectl".into(),
                "--kubeconfig".into(),
                shell_word(&path.to_string_lossy()),
            ]),
            None => words.push("kubectl".into()),
        }
        if let Some(context) = self.context {
            words.extend(["--context".into(), shell_word(context)]);
        }
        let jsonpath = format!("{{.data.{}}}", key.replace('.', r"\."));
        words.extend([
            "get secret -n".into(),
            shell_word(self.namespace),
            shell_word(secret),
            "-o".into(),
            format!("jsonpath={}", shell_word_quoted(&jsonpath)),
            "| base64 -d".into(),
        ]);
        words.join(" ")
    }
}

/// Each file of a kubeconfig path list made absolute, the list kept.
fn absolute_list(list: &Path) -> anyhow::Result<PathBuf> {
    let files = std::env::split_paths(list)
        .filter(|p| !p.as_os_str().is_empty())
        .map(|p| std::path::absolute(&p))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(PathBuf::from(std::env::join_paths(files)?))
}

/// What `shardgate endpoints` prints.
#[derive(Serialize, Debug, PartialEq)]
struct Report {
    /// Every node's endpoint, in shard then node order.
    endpoints: Vec<Endpoint>,
    /// The `Ready` condition.
    ready: ReadyCondition,
    /// Where the password of user `default` is: Secret and key.
    #[serde(skip)]
    password: (String, String),
    /// Where the CA of `spec.tls` is: Secret and key.
    #[serde(skip)]
    ca: Option<(String, String)>,
    /// The command that connects to the first ready endpoint; `None` while
    /// no endpoint is ready.
    connect: Option<String>,
}

/// One node's external endpoint.
#[derive(Serialize, Debug, PartialEq)]
struct Endpoint {
    shard: i32,
    node: i32,
    /// Empty while unknown.
    host: String,
    /// 0 while unknown.
    port: i32,
    ready: bool,
}

/// `status.conditions[type=Ready]`; `Unknown` while there is none.
#[derive(Serialize, Debug, PartialEq)]
struct ReadyCondition {
    status: String,
    reason: String,
    message: String,
}

/// Why a cluster has no endpoints to print.
#[derive(Debug, PartialEq, thiserror::Error)]
enum NoEndpoints {
    #[error(
        "ValkeyCluster {0} has external access disabled (spec.externalAccess.enabled is not true), so it has no external endpoints"
    )]
    Disabled(String),
    #[error(
        "ValkeyCluster {0} has external access enabled but reports no external endpoints yet (status.externalEndpoints is empty): has the operator reconciled it?"
    )]
    NotReported(String),
}

/// The report on `cluster`, or why it has no endpoints. The status
/// decides: endpoints it still reports (external access being turned off)
/// are printed; the spec only says why there are none.
fn report(kubectl: &Kubectl<'_>, cluster: &ValkeyCluster) -> Result<Report, NoEndpoints> {
    let who = format!("{}/{}", kubectl.namespace, cluster.name_any());
    let endpoints = endpoints(cluster);
    if endpoints.is_empty() {
        let enabled = cluster
            .spec
            .external_access
            .as_ref()
            .is_some_and(|e| e.enabled);
        return Err(if enabled {
            NoEndpoints::NotReported(who)
        } else {
            NoEndpoints::Disabled(who)
        });
    }
    let password = password_secret(cluster);
    let ca = cluster
        .spec
        .tls
        .as_ref()
        .map(|tls| (tls.secret_name.clone(), "ca.crt".to_string()));
    let connect = endpoints
        .iter()
        .find(|e| e.connectable())
        .map(|first| connect(kubectl, first, &password, ca.as_ref()));
    Ok(Report {
        endpoints,
        ready: ready_condition(cluster),
        password,
        ca,
        connect,
    })
}

/// `status.externalEndpoints`, one entry per node.
fn endpoints(cluster: &ValkeyCluster) -> Vec<Endpoint> {
    let shards = cluster
        .status
        .as_ref()
        .and_then(|s| s.external_endpoints.as_deref())
        .unwrap_or_default();
    shards
        .iter()
        .flat_map(|shard| {
            shard.nodes.iter().map(|n| Endpoint {
                shard: shard.shard_index,
                node: n.node_index,
                host: n.host.clone(),
                port: n.port,
                ready: n.ready,
            })
        })
        .collect()
}

/// The Secret and key holding user `default`'s password: `<cluster>-users`,
/// key `default`, unless `spec.users` lists `default` with a
/// `passwordSecret` (its name, and its first key).
fn password_secret(cluster: &ValkeyCluster) -> (String, String) {
    let name = cluster.name_any();
    let listed = cluster
        .spec
        .users
        .iter()
        .find(|u| u.name == "default")
        .and_then(|u| u.password_secret.as_ref());
    let secret = listed
        .and_then(|p| p.name.clone())
        .unwrap_or_else(|| names::users_secret(&name));
    let key = listed
        .and_then(|p| p.keys.first().cloned())
        .unwrap_or_else(|| "default".to_string());
    (secret, key)
}

/// The `Ready` condition, or `Unknown` when the status has none.
fn ready_condition(cluster: &ValkeyCluster) -> ReadyCondition {
    let found = cluster
        .status
        .as_ref()
        .and_then(|s| s.conditions.iter().find(|c| c.type_ == conditions::READY));
    match found {
        Some(c) => ReadyCondition {
            status: c.status.clone(),
            reason: c.reason.clone(),
            message: c.message.clone(),
        },
        None => ReadyCondition {
            status: "Unknown".into(),
            reason: String::new(),
            message: "no Ready condition reported yet".into(),
        },
    }
}

/// `valkey-cli` logged in as `default` at `first`, its password read from
/// its Secret (never printed), trusting the CA of `spec.tls` when set.
fn connect(
    kubectl: &Kubectl<'_>,
    first: &Endpoint,
    (secret, key): &(String, String),
    ca: Option<&(String, String)>,
) -> String {
    let cli = format!(
        "VALKEYCLI_AUTH=\"$({})\" valkey-cli -c -h {} -p {} --user default",
        kubectl.secret_key(secret, key),
        shell_word(&first.host),
        first.port
    );
    match ca {
        None => cli,
        Some((ca_secret, ca_key)) => {
            let file = shell_word(&format!("{ca_secret}-ca.crt"));
            format!(
                "{} > {file} && {cli} --tls --cacert {file}",
                kubectl.secret_key(ca_secret, ca_key)
            )
        }
    }
}

impl Endpoint {
    /// Ready, with its host and port known.
    fn connectable(&self) -> bool {
        self.ready && !self.host.is_empty() && self.port > 0
    }

    /// `host:port` (`[host]:port` for IPv6), or `-` while unknown.
    fn address(&self) -> String {
        match (self.host.as_str(), self.port) {
            ("", _) | (_, ..=0) => "-".into(),
            (host, port) if host.contains(':') => format!("[{host}]:{port}"),
            (host, port) => format!("{host}:{port}"),
        }
    }
}

impl Report {
    /// While no endpoint can be connected to: the error naming the nodes
    /// still waited for.
    fn waiting(&self, namespace: &str, name: &str) -> Option<String> {
        if self.connect.is_some() {
            return None;
        }
        let nodes: Vec<String> = self
            .endpoints
            .iter()
            .filter(|e| !e.connectable())
            .map(|e| format!("shard {} node {}", e.shard, e.node))
            .collect();
        Some(format!(
            "no external endpoint of ValkeyCluster {namespace}/{name} is ready yet; waiting for {}",
            nodes.join(", ")
        ))
    }
}

/// The report for a terminal: a table of the endpoints, the `Ready`
/// condition, where the password is, and the connect command.
fn text(namespace: &str, name: &str, report: &Report) -> String {
    let mut out = format!("ValkeyCluster {namespace}/{name} external endpoints:\n");
    out.push_str(&table(&report.endpoints));
    let r = &report.ready;
    out.push_str(&format!("Ready: {}", r.status));
    if !r.reason.is_empty() {
        out.push_str(&format!(" ({})", r.reason));
    }
    if !r.message.is_empty() {
        out.push_str(&format!(": {}", r.message));
    }
    out.push('\n');
    let (secret, key) = &report.password;
    out.push_str(&format!(
        "Password of user default: Secret {namespace}/{secret} key {key}\n"
    ));
    if let Some((secret, key)) = &report.ca {
        out.push_str(&format!("TLS CA: Secret {namespace}/{secret} key {key}\n"));
    }
    if let Some(connect) = &report.connect {
        out.push_str(&format!("Connect: {connect}\n"));
    }
    out
}

/// One line per node under a header, columns aligned.
fn table(endpoints: &[Endpoint]) -> String {
    let rows: Vec<[String; 4]> = endpoints
        .iter()
        .map(|e| {
            [
                e.shard.to_string(),
                e.node.to_string(),
                e.address(),
                if e.ready { "yes" } else { "no" }.to_string(),
            ]
        })
        .collect();
    let header = ["SHARD", "NODE", "ENDPOINT", "READY"].map(String::from);
    let widths: Vec<usize> = (0..4)
        .map(|i| {
            std::iter::once(&header)
                .chain(&rows)
                .map(|r| r[i].len())
                .max()
                .unwrap_or(0)
        })
        .collect();
    std::iter::once(&header)
        .chain(&rows)
        .map(|row| {
            let cells: Vec<String> = row
                .iter()
                .zip(&widths)
                .map(|(cell, w)| format!("{cell:<w$}"))
                .collect();
            format!("  {}\n", cells.join("  ").trim_end())
        })
        .collect()
}

/// The report for machines.
fn json(report: &Report) -> serde_json::Result<String> {
    serde_json::to_string_pretty(report)
}

/// `word` as one shell word: as it is when the shell would read nothing
/// into it, else single-quoted. Hosts and names come from the API, so a
/// pasted command must not run what they might hold.
fn shell_word(word: &str) -> String {
    let plain = !word.is_empty()
        && word
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-._/:=@%+,".contains(c));
    if plain {
        word.to_string()
    } else {
        shell_word_quoted(word)
    }
}

/// `word` single-quoted for the shell, whatever it holds.
fn shell_word_quoted(word: &str) -> String {
    format!("'{}'", word.replace('\'', r"'\''"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const KUBECTL: Kubectl<'static> = Kubectl {
        namespace: "prod",
        kubeconfig: None,
        context: None,
    };

    /// A cluster named `demo` with `spec` and `status`.
    fn cluster(spec: serde_json::Value, status: serde_json::Value) -> ValkeyCluster {
        serde_json::from_value(json!({
            "apiVersion": "shardgate.io/v1alpha1",
            "kind": "ValkeyCluster",
            "metadata": {"name": "demo", "namespace": "prod"},
            "spec": spec,
            "status": status,
        }))
        .unwrap()
    }

    fn external() -> serde_json::Value {
        json!({"shards": 2, "externalAccess": {"enabled": true}})
    }

    /// Two shards of two nodes; `ready[i]` is node `i`'s readiness, in
    /// shard then node order.
    fn status(ready: [bool; 4]) -> serde_json::Value {
        let node = |shard: usize, node: usize| {
            json!({"nodeIndex": node, "host": format!("10.0.0.{}", shard + 1),
                   "port": 30000 + shard * 2 + node, "ready": ready[shard * 2 + node]})
        };
        json!({
            "externalEndpoints": [
                {"shardIndex": 0, "nodePorts": [30000, 30001], "nodes": [node(0, 0), node(0, 1)]},
                {"shardIndex": 1, "nodePorts": [30002, 30003], "nodes": [node(1, 0), node(1, 1)]},
            ],
            "conditions": [{"type": "Ready", "status": "True", "reason": "Ready",
                            "message": "every node is ready", "lastTransitionTime": "2025-01-01T00:00:00Z"}],
        })
    }

    const AUTH: &str = "VALKEYCLI_AUTH=\"$(kubectl get secret -n prod demo-users -o jsonpath='{.data.default}' | base64 -d)\"";

    #[test]
    fn the_connect_command_picks_the_first_ready_endpoint() {
        let cases = [
            ([true, true, true, true], "-h 10.0.0.1 -p 30000"),
            ([false, true, true, true], "-h 10.0.0.1 -p 30001"),
            ([false, false, false, true], "-h 10.0.0.2 -p 30003"),
        ];
        for (ready, at) in cases {
            let r = report(&KUBECTL, &cluster(external(), status(ready))).unwrap();
            assert_eq!(
                r.connect.as_deref(),
                Some(format!("{AUTH} valkey-cli -c {at} --user default").as_str()),
                "{ready:?}"
            );
            assert_eq!(r.waiting("prod", "demo"), None);
        }
    }

    #[test]
    fn prints_the_table_the_ready_condition_and_the_connect_command() {
        let r = report(
            &KUBECTL,
            &cluster(external(), status([true, false, true, true])),
        )
        .unwrap();
        let expected = format!(
            "ValkeyCluster prod/demo external endpoints:
  SHARD  NODE  ENDPOINT        READY
  0      0     10.0.0.1:30000  yes
  0      1     10.0.0.1:30001  no
  1      0     10.0.0.2:30002  yes
  1      1     10.0.0.2:30003  yes
Ready: True (Ready): every node is ready
Password of user default: Secret prod/demo-users key default
Connect: {AUTH} valkey-cli -c -h 10.0.0.1 -p 30000 --user default
"
        );
        assert_eq!(text("prod", "demo", &r), expected);
    }

    #[test]
    fn no_ready_endpoint_keeps_the_table_and_names_the_waiting_nodes() {
        let r = report(
            &KUBECTL,
            &cluster(external(), status([false, false, false, false])),
        )
        .unwrap();
        assert_eq!(r.connect, None);
        let printed = text("prod", "demo", &r);
        assert!(
            printed.contains("  1      1     10.0.0.2:30003  no\n"),
            "{printed}"
        );
        assert!(!printed.contains("Connect:"), "{printed}");
        assert_eq!(
            r.waiting("prod", "demo").unwrap(),
            "no external endpoint of ValkeyCluster prod/demo is ready yet; waiting for \
             shard 0 node 0, shard 0 node 1, shard 1 node 0, shard 1 node 1"
        );
    }

    #[test]
    fn a_ready_node_without_an_address_is_not_connectable() {
        let status = json!({"externalEndpoints": [{"shardIndex": 0, "nodePorts": [0, 30001], "nodes": [
            {"nodeIndex": 0, "host": "", "port": 0, "ready": true},
            {"nodeIndex": 1, "host": "10.0.0.1", "port": 30001, "ready": false},
        ]}]});
        let r = report(&KUBECTL, &cluster(external(), status)).unwrap();
        assert_eq!(r.endpoints[0].address(), "-");
        assert_eq!(
            r.waiting("prod", "demo").unwrap(),
            "no external endpoint of ValkeyCluster prod/demo is ready yet; waiting for \
             shard 0 node 0, shard 0 node 1"
        );
    }

    #[test]
    fn without_endpoints_says_whether_external_access_is_off() {
        let cases = [
            (json!({}), json!({}), "has external access disabled"),
            (
                json!({"externalAccess": {"enabled": false}}),
                json!({"conditions": []}),
                "has external access disabled",
            ),
            (external(), json!({}), "reports no external endpoints yet"),
            (
                external(),
                json!({"externalEndpoints": []}),
                "reports no external endpoints yet",
            ),
        ];
        for (spec, status, says) in cases {
            let err = report(&KUBECTL, &cluster(spec.clone(), status)).unwrap_err();
            let message = err.to_string();
            assert!(message.starts_with("ValkeyCluster prod/demo "), "{message}");
            assert!(message.contains(says), "{spec}: {message}");
        }
    }

    #[test]
    fn the_ready_condition_is_unknown_until_reported() {
        let mut s = status([true; 4]);
        s["conditions"] = json!([]);
        let r = report(&KUBECTL, &cluster(external(), s)).unwrap();
        assert_eq!(r.ready.status, "Unknown");
        assert!(
            text("prod", "demo", &r).contains("Ready: Unknown: no Ready condition reported yet\n")
        );
    }

    #[test]
    fn tls_fetches_the_ca_and_trusts_it() {
        let mut spec = external();
        spec["tls"] = json!({"secretName": "demo-tls"});
        let r = report(&KUBECTL, &cluster(spec, status([true; 4]))).unwrap();
        assert_eq!(
            r.connect.unwrap(),
            format!(
                "kubectl get secret -n prod demo-tls -o jsonpath='{{.data.ca\\.crt}}' | base64 -d \
                 > demo-tls-ca.crt && {AUTH} valkey-cli -c -h 10.0.0.1 -p 30000 --user default \
                 --tls --cacert demo-tls-ca.crt"
            )
        );
    }

    #[test]
    fn a_listed_default_user_reads_its_own_secret_and_key() {
        let mut spec = external();
        spec["users"] =
            json!([{"name": "default", "passwordSecret": {"name": "pw", "keys": ["new", "old"]}}]);
        let r = report(&KUBECTL, &cluster(spec, status([true; 4]))).unwrap();
        assert!(r.connect.unwrap().starts_with(
            "VALKEYCLI_AUTH=\"$(kubectl get secret -n prod pw -o jsonpath='{.data.new}'"
        ),);
    }

    #[test]
    fn kubectl_is_told_the_same_kubeconfig_and_context() {
        let kubectl = Kubectl {
            namespace: "prod",
            kubeconfig: Some(Path::new("/home/me/my kube.yaml")),
            context: Some("east"),
        };
        assert_eq!(
            kubectl.secret_key("demo-users", "default"),
            "kubectl --kubeconfig '/home/me/my kube.yaml' --context east get secret -n prod \
             demo-users -o jsonpath='{.data.default}' | base64 -d"
        );
    }

    #[test]
    fn a_kubeconfig_list_reaches_kubectl_as_kubeconfig() {
        let list = absolute_list(Path::new("a.yaml::/etc/kube/b.yaml")).unwrap();
        let cwd = std::env::current_dir().unwrap();
        assert_eq!(
            list,
            PathBuf::from(format!("{}/a.yaml:/etc/kube/b.yaml", cwd.display()))
        );
        let kubectl = Kubectl {
            namespace: "prod",
            kubeconfig: Some(Path::new("/k/a.yaml:/k/b.yaml")),
            context: None,
        };
        assert_eq!(
            kubectl.secret_key("demo-users", "default"),
            "KUBECONFIG=/k/a.yaml:/k/b.yaml kubectl get secret -n prod demo-users -o \
             jsonpath='{.data.default}' | base64 -d"
        );
    }

    #[test]
    fn hosts_from_the_api_cannot_run_commands() {
        for (host, word) in [
            ("10.0.0.1", "10.0.0.1"),
            ("shard-0.valkey.example.com", "shard-0.valkey.example.com"),
            ("fd00::1", "fd00::1"),
            ("$(reboot)", "'$(reboot)'"),
            ("a'b; c", r"'a'\''b; c'"),
        ] {
            assert_eq!(shell_word(host), word);
        }
    }

    #[test]
    fn ipv6_endpoints_are_bracketed() {
        let e = Endpoint {
            shard: 0,
            node: 0,
            host: "fd00::1".into(),
            port: 30000,
            ready: true,
        };
        assert_eq!(e.address(), "[fd00::1]:30000");
    }

    #[test]
    fn json_has_endpoints_ready_and_connect() {
        let r = report(
            &KUBECTL,
            &cluster(external(), status([true, false, true, true])),
        )
        .unwrap();
        let v: serde_json::Value = serde_json::from_str(&json(&r).unwrap()).unwrap();
        assert_eq!(
            v["endpoints"][1],
            json!({"shard": 0, "node": 1, "host": "10.0.0.1", "port": 30001, "ready": false})
        );
        assert_eq!(
            v["ready"],
            json!({"status": "True", "reason": "Ready", "message": "every node is ready"})
        );
        assert_eq!(v["connect"], json!(r.connect.unwrap()));
        let mut keys: Vec<&String> = v.as_object().unwrap().keys().collect();
        keys.sort();
        assert_eq!(keys, ["connect", "endpoints", "ready"]);
    }
}
