//! `shardgate endpoints`, run as a user runs it, against the in-repo API
//! emulator through a written kubeconfig: a ValkeyCluster is created and its
//! status written through the status subresource, as the operator writes
//! it, then the binary reads it back.

use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::Duration;

use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use kube_emulator::{CustomResource, Emulator};
use serde_json::{Value, json};
use shardgate_k8s::crd::ValkeyCluster;
use shardgate_tests::harness::CRD;
use shardgate_tests::scratch::ScratchDir;
use shardgate_tests::wait;

/// The namespace the clusters live in: not the kubeconfig's, so `-n` counts.
const NS: &str = "prod";
/// How long the API and the binary may take.
const WAIT: Duration = Duration::from_secs(30);

/// A running emulator serving the committed CRD, and a kubeconfig for it.
struct Server {
    emu: Emulator,
    /// Keeps the kubeconfig until the test is done.
    dir: ScratchDir,
}

impl Server {
    async fn start() -> Server {
        let emu = Emulator::builder()
            .custom_resource(CustomResource::from_crd_yaml(CRD).unwrap())
            .namespace(NS)
            .start()
            .await
            .unwrap();
        let dir = ScratchDir::new("cli-endpoints");
        emu.write_kubeconfig(dir.join("kubeconfig.yaml")).unwrap();
        Server { emu, dir }
    }

    fn kubeconfig(&self) -> PathBuf {
        self.dir.join("kubeconfig.yaml")
    }

    async fn clusters(&self) -> Api<ValkeyCluster> {
        Api::namespaced(self.emu.client().await.unwrap(), NS)
    }

    /// Creates ValkeyCluster `name` with `spec`, writes `status` through the
    /// status subresource, and waits until the API serves it.
    async fn cluster(&self, name: &str, spec: Value, status: Value) {
        let api = self.clusters().await;
        let cluster: ValkeyCluster = serde_json::from_value(json!({
            "apiVersion": "shardgate.io/v1alpha1",
            "kind": "ValkeyCluster",
            "metadata": {"name": name, "namespace": NS},
            "spec": spec,
        }))
        .unwrap();
        api.create(&PostParams::default(), &cluster).await.unwrap();
        api.patch_status(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({ "status": status })),
        )
        .await
        .unwrap();
        let want: shardgate_k8s::crd::ValkeyClusterStatus = serde_json::from_value(status).unwrap();
        wait::until_async("the status to read back", WAIT, || async {
            api.get(name).await.unwrap().status.as_ref() == Some(&want)
        })
        .await;
    }

    /// `shardgate endpoints ARGS --kubeconfig <ours>`, with no $KUBECONFIG.
    async fn endpoints(&self, args: &[&str]) -> Output {
        run(&self.kubeconfig(), args).await
    }
}

/// Runs the binary, failing the test if it has not exited within [`WAIT`].
async fn run(kubeconfig: &Path, args: &[&str]) -> Output {
    let child = tokio::process::Command::new(env!("CARGO_BIN_EXE_shardgate"))
        .arg("endpoints")
        .args(args)
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .env_remove("KUBECONFIG")
        .kill_on_drop(true)
        .output();
    tokio::time::timeout(WAIT, child)
        .await
        .expect("shardgate endpoints exits")
        .expect("running shardgate")
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn external() -> Value {
    json!({"shards": 2, "externalAccess": {"enabled": true}})
}

/// Two shards of two nodes on NodePorts 30000-30003, node `i` (shard then
/// node order) ready as `ready[i]`, and a Ready condition to match.
fn status(ready: [bool; 4]) -> Value {
    let node = |shard: usize, node: usize| {
        json!({"nodeIndex": node, "host": format!("127.0.3.{}", shard + 1),
               "port": 30000 + shard * 2 + node, "ready": ready[shard * 2 + node]})
    };
    let all = ready.iter().all(|r| *r);
    json!({
        "externalEndpoints": [
            {"shardIndex": 0, "nodePorts": [30000, 30001], "nodes": [node(0, 0), node(0, 1)]},
            {"shardIndex": 1, "nodePorts": [30002, 30003], "nodes": [node(1, 0), node(1, 1)]},
        ],
        "conditions": [{
            "type": "Ready",
            "status": if all { "True" } else { "False" },
            "reason": if all { "Ready" } else { "NodesNotReady" },
            "message": if all { "every node is ready" } else { "waiting for nodes" },
            "lastTransitionTime": "2025-01-01T00:00:00Z",
        }],
    })
}

/// The start of every connect command for cluster `demo` with our kubeconfig.
fn auth(kubeconfig: &Path) -> String {
    format!(
        "VALKEYCLI_AUTH=\"$(kubectl --kubeconfig {} get secret -n prod demo-users -o jsonpath='{{.data.default}}' | base64 -d)\"",
        kubeconfig.display()
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prints_the_table_ready_condition_and_a_connect_command() {
    let api = Server::start().await;
    // Shard 0 node 0 is not ready: the first ready endpoint is node 1.
    api.cluster("demo", external(), status([false, true, true, true]))
        .await;
    let out = api.endpoints(&["-n", NS, "demo"]).await;
    assert!(out.status.success(), "stderr: {}", stderr(&out));
    let expected = format!(
        "ValkeyCluster prod/demo external endpoints:
  SHARD  NODE  ENDPOINT         READY
  0      0     127.0.3.1:30000  no
  0      1     127.0.3.1:30001  yes
  1      0     127.0.3.2:30002  yes
  1      1     127.0.3.2:30003  yes
Ready: False (NodesNotReady): waiting for nodes
Password of user default: Secret prod/demo-users key default
Connect: {} valkey-cli -c -h 127.0.3.1 -p 30001 --user default
",
        auth(&api.kubeconfig())
    );
    assert_eq!(stdout(&out), expected);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_output_has_endpoints_ready_and_connect() {
    let api = Server::start().await;
    api.cluster("demo", external(), status([true; 4])).await;
    let out = api.endpoints(&["-n", NS, "demo", "-o", "json"]).await;
    assert!(out.status.success(), "stderr: {}", stderr(&out));
    let v: Value = serde_json::from_slice(&out.stdout).expect("endpoints prints JSON");
    let endpoints = v["endpoints"].as_array().unwrap();
    assert_eq!(endpoints.len(), 4);
    assert_eq!(
        endpoints[3],
        json!({"shard": 1, "node": 1, "host": "127.0.3.2", "port": 30003, "ready": true})
    );
    assert_eq!(
        v["ready"],
        json!({"status": "True", "reason": "Ready", "message": "every node is ready"})
    );
    let connect = v["connect"].as_str().unwrap();
    assert_eq!(
        connect,
        format!(
            "{} valkey-cli -c -h 127.0.3.1 -p 30000 --user default",
            auth(&api.kubeconfig())
        )
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_adds_the_ca_from_its_secret() {
    let api = Server::start().await;
    let mut spec = external();
    spec["tls"] = json!({"secretName": "demo-tls"});
    api.cluster("demo", spec, status([true; 4])).await;
    let out = api.endpoints(&["-n", NS, "demo"]).await;
    assert!(out.status.success(), "stderr: {}", stderr(&out));
    let printed = stdout(&out);
    assert!(
        printed.contains("TLS CA: Secret prod/demo-tls key ca.crt\n"),
        "{printed}"
    );
    let connect = printed
        .lines()
        .find_map(|l| l.strip_prefix("Connect: "))
        .expect("a connect command");
    assert!(
        connect.contains("get secret -n prod demo-tls -o jsonpath='{.data.ca\\.crt}' | base64 -d > demo-tls-ca.crt && "),
        "{connect}"
    );
    assert!(
        connect.ends_with(" -h 127.0.3.1 -p 30000 --user default --tls --cacert demo-tls-ca.crt"),
        "{connect}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_namespace_defaults_to_the_kubeconfig_contexts() {
    let api = Server::start().await;
    api.cluster("demo", external(), status([true; 4])).await;
    let kubeconfig = api.dir.join("prod.yaml");
    let text = std::fs::read_to_string(api.kubeconfig()).unwrap();
    assert!(text.contains("namespace: default"), "{text}");
    std::fs::write(
        &kubeconfig,
        text.replace("namespace: default", "namespace: prod"),
    )
    .unwrap();
    let out = run(&kubeconfig, &["demo"]).await;
    assert!(out.status.success(), "stderr: {}", stderr(&out));
    assert!(
        stdout(&out).starts_with("ValkeyCluster prod/demo external endpoints:\n"),
        "{}",
        stdout(&out)
    );
    // The kubeconfig's own namespace (default) has no such cluster.
    let out = api.endpoints(&["demo"]).await;
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("ValkeyCluster default/demo not found"),
        "{}",
        stderr(&out)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_name_fails_naming_namespace_and_name() {
    let api = Server::start().await;
    api.cluster("demo", external(), status([true; 4])).await;
    let out = api.endpoints(&["-n", NS, "nosuch"]).await;
    assert_eq!(out.status.code(), Some(1), "stderr: {}", stderr(&out));
    assert_eq!(stdout(&out), "");
    assert_eq!(stderr(&out), "error: ValkeyCluster prod/nosuch not found\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_ready_endpoint_prints_the_table_and_exits_1_naming_the_waiting_nodes() {
    let api = Server::start().await;
    // Shard 1 node 0 reports ready but has no address yet.
    let mut s = status([false, false, true, false]);
    s["externalEndpoints"][1]["nodes"][0]["host"] = json!("");
    api.cluster("demo", external(), s).await;
    let out = api.endpoints(&["-n", NS, "demo"]).await;
    assert_eq!(out.status.code(), Some(1), "stderr: {}", stderr(&out));
    let printed = stdout(&out);
    assert!(
        printed.contains("  0      0     127.0.3.1:30000  no\n"),
        "{printed}"
    );
    assert!(
        printed.contains("  1      0     -                yes\n"),
        "{printed}"
    );
    assert!(!printed.contains("Connect:"), "{printed}");
    assert_eq!(
        stderr(&out),
        "error: no external endpoint of ValkeyCluster prod/demo is ready yet; waiting for \
         shard 0 node 0, shard 0 node 1, shard 1 node 0, shard 1 node 1\n"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn external_access_disabled_says_so() {
    let api = Server::start().await;
    api.cluster(
        "inside",
        json!({"shards": 1}),
        json!({"conditions": [{"type": "Ready", "status": "True", "reason": "Ready",
            "message": "every node is ready", "lastTransitionTime": "2025-01-01T00:00:00Z"}]}),
    )
    .await;
    let out = api.endpoints(&["-n", NS, "inside"]).await;
    assert_eq!(out.status.code(), Some(1), "stderr: {}", stderr(&out));
    assert_eq!(stdout(&out), "");
    assert!(
        stderr(&out).starts_with("error: ValkeyCluster prod/inside has external access disabled"),
        "{}",
        stderr(&out)
    );
}
