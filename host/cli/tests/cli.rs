//! `shardgate render` and `shardgate crd`, run as a user runs them, and the
//! binary's allocator settings.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::{Value, json};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn shardgate(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_shardgate"))
        .args(args)
        .current_dir(repo())
        .output()
        .expect("running shardgate")
}

fn sample(name: &str) -> String {
    repo()
        .join("deploy/samples")
        .join(name)
        .display()
        .to_string()
}

fn render_json(args: &[&str]) -> Value {
    let mut all = vec!["render", "-o", "json"];
    all.extend_from_slice(args);
    let out = shardgate(&all);
    assert!(
        out.status.success(),
        "stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("render prints JSON")
}

fn items<'a>(list: &'a Value, kind: &str) -> Vec<&'a Value> {
    list["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|i| i["kind"] == kind)
        .collect()
}

fn tmp(name: &str, contents: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("shardgate-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join(name);
    std::fs::write(&p, contents).unwrap();
    p
}

#[test]
fn render_sample_prints_services_node_objects_and_status() {
    let list = render_json(&["-f", &sample("valkeycluster-external.yaml")]);
    assert_eq!(list["kind"], "List");
    let services = items(&list, "Service");
    let shard_services: Vec<_> = services
        .iter()
        .filter(|s| s["spec"]["type"] == "NodePort")
        .collect();
    let names: Vec<_> = shard_services
        .iter()
        .map(|s| s["metadata"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "shardgate-demo-shard-0",
            "shardgate-demo-shard-1",
            "shardgate-demo-shard-2"
        ]
    );
    let s0 = shard_services[0];
    assert_eq!(s0["spec"]["externalTrafficPolicy"], "Cluster");
    assert_eq!(
        s0["spec"]["ports"],
        json!([
            {"name": "vk-n0", "port": 6379, "protocol": "TCP", "targetPort": "vk-n0"},
            {"name": "vk-n1", "port": 6380, "protocol": "TCP", "targetPort": "vk-n1"}
        ])
    );
    assert_eq!(
        s0["spec"]["selector"],
        json!({"shardgate.io/cluster": "demo", "shardgate.io/shard": "0"})
    );
    assert_eq!(
        s0["metadata"]["labels"]["app.kubernetes.io/managed-by"],
        "shardgate"
    );
    // 6 nodes: a headless Service, a ConfigMap and a StatefulSet each.
    assert_eq!(services.len(), 3 + 6);
    assert_eq!(items(&list, "ConfigMap").len(), 6);
    let sets = items(&list, "StatefulSet");
    assert_eq!(sets.len(), 6);
    let sts = sets[3];
    assert_eq!(sts["metadata"]["name"], "shardgate-demo-1-1");
    assert_eq!(sts["spec"]["updateStrategy"]["type"], "OnDelete");
    assert_eq!(sts["spec"]["replicas"], 1);
    let container = &sts["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(container["name"], "server");
    assert_eq!(container["image"], "valkey/valkey:9.0");
    assert_eq!(
        container["ports"],
        json!([
            {"name": "vk-n1", "containerPort": 6379, "protocol": "TCP"},
            {"name": "cluster-bus", "containerPort": 16379, "protocol": "TCP"}
        ])
    );
    let labels = &sts["spec"]["template"]["metadata"]["labels"];
    assert_eq!(labels["shardgate.io/shard"], "1");
    assert_eq!(labels["shardgate.io/node"], "1");
    let cm = items(&list, "ConfigMap")[3];
    let conf = cm["data"]["valkey.conf"].as_str().unwrap();
    assert!(conf.contains("cluster-enabled yes\n"));
    assert!(conf.contains("cluster-announce-human-nodename demo-1-1\n"));
    // No NodePorts allocated yet: no client port is announced.
    assert!(!conf.contains("client-port"));

    let cluster = items(&list, "ValkeyCluster")[0];
    let eps = &cluster["status"]["externalEndpoints"];
    assert_eq!(eps.as_array().unwrap().len(), 3);
    assert_eq!(eps[2]["shardIndex"], 2);
    assert_eq!(eps[2]["nodePorts"], json!([0, 0]));
    // The status the operator would write after this first apply, every
    // condition included (computed by the same function).
    let reasons: Vec<(&str, &str, &str)> = cluster["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["type"].as_str().unwrap(),
                c["status"].as_str().unwrap(),
                c["reason"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        reasons,
        [
            ("Degraded", "False", "AsExpected"),
            ("ExternalAccessReady", "False", "AwaitingNodePorts"),
            ("Progressing", "True", "Applying"),
            ("Ready", "False", "NodesNotReady"),
        ]
    );
}

/// The same input renders the same bytes, whenever it runs: no wall clock
/// (a changed condition is stamped with `--now`, by default the cluster's
/// creationTimestamp or the Unix epoch).
#[test]
fn render_is_deterministic_and_takes_its_time_from_now() {
    let run = |extra: &[&str]| {
        let mut args = vec!["render", "-f", "deploy/samples/valkeycluster-external.yaml"];
        args.extend_from_slice(extra);
        let out = shardgate(&args);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        out.stdout
    };
    let first = run(&[]);
    assert_eq!(first, run(&[]), "two runs give identical bytes");
    let times = |bytes: Vec<u8>| -> Vec<String> {
        let list: Value = serde_saphyr::from_slice(&bytes).unwrap();
        items(&list, "ValkeyCluster")[0]["status"]["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["lastTransitionTime"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(times(first), ["1970-01-01T00:00:00Z"; 4]);
    let at = run(&["--now", "2026-12-03T10:00:00Z"]);
    assert_eq!(times(at), ["2026-12-03T10:00:00Z"; 4]);
}

#[test]
fn render_with_observed_node_ports_keeps_and_announces_them() {
    let first = render_json(&["-f", &sample("valkeycluster-external.yaml")]);
    // Turn the rendered shard Services into what the API server stores:
    // NodePorts allocated.
    let mut observed = Vec::new();
    for (s, svc) in items(&first, "Service")
        .into_iter()
        .filter(|s| s["spec"]["type"] == "NodePort")
        .enumerate()
    {
        let mut svc = svc.clone();
        for (n, port) in svc["spec"]["ports"]
            .as_array_mut()
            .unwrap()
            .iter_mut()
            .enumerate()
        {
            port["nodePort"] = json!(31000 + 10 * s + n);
        }
        observed.push(svc);
    }
    let file = tmp(
        "observed.json",
        &json!({"apiVersion": "v1", "kind": "List", "items": observed}).to_string(),
    );
    let list = render_json(&[
        "-f",
        &sample("valkeycluster-external.yaml"),
        "--observed",
        file.to_str().unwrap(),
    ]);
    let shard2 = items(&list, "Service")
        .into_iter()
        .find(|s| s["metadata"]["name"] == "shardgate-demo-shard-2")
        .unwrap();
    assert_eq!(shard2["spec"]["ports"][1]["nodePort"], 31021);
    let cm = items(&list, "ConfigMap")
        .into_iter()
        .find(|c| c["metadata"]["name"] == "shardgate-demo-2-1")
        .unwrap();
    let conf = cm["data"]["valkey.conf"].as_str().unwrap();
    assert!(
        conf.contains("cluster-announce-client-port 31021\n"),
        "{conf}"
    );
    assert!(
        conf.contains("cluster-announce-hostname shard-2.valkey.example.com\n"),
        "{conf}"
    );
    assert!(
        conf.contains("cluster-preferred-endpoint-type hostname\n"),
        "{conf}"
    );
    let cluster = items(&list, "ValkeyCluster")[0];
    assert_eq!(
        cluster["status"]["externalEndpoints"][2]["nodePorts"],
        json!([31020, 31021])
    );
    assert_eq!(
        cluster["status"]["externalEndpoints"][2]["nodes"][1]["host"],
        "shard-2.valkey.example.com"
    );
}

#[test]
fn yaml_output_parses_too() {
    let out = shardgate(&["render", "-f", &sample("valkeycluster-external.yaml")]);
    assert!(out.status.success());
    let v: Value = serde_saphyr::from_slice(&out.stdout).unwrap();
    assert_eq!(v["kind"], "List");
}

fn assert_refused(manifest: &str, expect_in_stderr: &str) {
    let file = tmp(&format!("bad-{}.yaml", expect_in_stderr.len()), manifest);
    let out = shardgate(&["render", "-f", file.to_str().unwrap()]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "accepted: {manifest}");
    assert!(
        out.stdout.is_empty(),
        "printed to stdout on error: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(
        stderr.contains(expect_in_stderr),
        "stderr lacks {expect_in_stderr:?}: {stderr}"
    );
}

#[test]
fn invalid_input_prints_nothing_and_names_the_field() {
    let head = "apiVersion: shardgate.io/v1alpha1\nkind: ValkeyCluster\nmetadata: {name: demo, namespace: default}\n";
    assert_refused(
        &format!(
            "{head}spec: {{shards: 3, externalAccess: {{enabled: true, domain: 'Not_A_Domain'}}}}\n"
        ),
        "spec.externalAccess.domain",
    );
    assert_refused(
        &format!(
            "{head}spec: {{shards: 3, externalAccess: {{enabled: true, preferredEndpointType: hostname}}}}\n"
        ),
        "spec.externalAccess.domain: is required when preferredEndpointType is hostname",
    );
    assert_refused(&format!("{head}spec: {{shards: 0}}\n"), "spec.shards");
    assert_refused(&format!("{head}spec: {{shards: three}}\n"), "spec.shards");
    assert_refused(
        &format!("{head}spec: {{externalAccess: {{enabled: true, serviceType: ClusterIP}}}}\n"),
        "spec.externalAccess.serviceType",
    );
    assert_refused(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n",
        "expected shardgate.io/v1alpha1/ValkeyCluster",
    );
    assert_refused("{not yaml", "not valid YAML");
}

#[test]
fn committed_crd_is_current() {
    let out = shardgate(&["crd"]);
    assert!(out.status.success());
    let committed =
        std::fs::read_to_string(repo().join("deploy/crds/valkeyclusters.shardgate.io.yaml"))
            .unwrap();
    assert!(
        committed == String::from_utf8(out.stdout).unwrap(),
        "deploy/crds/valkeyclusters.shardgate.io.yaml is stale: run `cargo run -p shardgate -- crd > deploy/crds/valkeyclusters.shardgate.io.yaml`"
    );
}

/// The YAML `shardgate crd` prints reads back as exactly the CRD the types
/// generate: the emitter loses nothing (quoting, folded descriptions).
#[test]
fn the_printed_crd_reads_back_as_the_generated_one() {
    use kube::CustomResourceExt;
    let out = shardgate(&["crd"]);
    assert!(out.status.success());
    let printed: Value = serde_saphyr::from_slice(&out.stdout).unwrap();
    let generated = serde_json::to_value(shardgate_k8s::crd::ValkeyCluster::crd()).unwrap();
    assert_eq!(printed, generated);
}

#[test]
fn every_subcommand_has_help() {
    for args in [
        vec!["--help"],
        vec!["render", "--help"],
        vec!["crd", "--help"],
        vec!["rbac", "--help"],
        vec!["check", "--help"],
        vec!["completions", "--help"],
    ] {
        let out = shardgate(&args);
        assert!(out.status.success(), "{args:?}");
        assert!(
            String::from_utf8_lossy(&out.stdout).contains("Usage"),
            "{args:?}"
        );
    }
}

#[test]
fn completions_are_generated_for_each_shell() {
    for (shell, expect) in [
        ("bash", "complete -F _shardgate"),
        ("zsh", "#compdef shardgate"),
        ("fish", "complete -c shardgate"),
    ] {
        let out = shardgate(&["completions", shell]);
        assert!(
            out.status.success(),
            "{shell}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let script = String::from_utf8_lossy(&out.stdout);
        assert!(script.contains(expect), "{shell}: no {expect:?}");
        // Subcommands and their flags are completed.
        for word in ["check-module", "endpoints", "kubeconfig"] {
            assert!(script.contains(word), "{shell}: no {word:?}");
        }
    }
    let out = shardgate(&["completions", "tcsh"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("possible values: bash"));
}

/// Runs `shardgate args...` with `stdin` as its standard input.
fn shardgate_with_stdin(args: &[&str], stdin: &str) -> Output {
    use std::io::Write as _;
    let mut child = Command::new(env!("CARGO_BIN_EXE_shardgate"))
        .args(args)
        .current_dir(repo())
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("running shardgate");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

#[test]
fn check_reads_standard_input() {
    let bad =
        std::fs::read_to_string(repo().join("tests/fixtures/invalid/bad-fields.yaml")).unwrap();
    for args in [vec!["check", "-f", "-"], vec!["check", "-"]] {
        let out = shardgate_with_stdin(&args, &bad);
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(!out.status.success(), "{args:?}: {stdout}");
        assert!(
            stdout.contains("<stdin> (document 1, default/badfields): error: spec.shards: must be at least 1, got 0"),
            "{args:?}: {stdout}"
        );
    }
    let good = std::fs::read_to_string(sample("valkeycluster-external.yaml")).unwrap();
    let out = shardgate_with_stdin(
        &["check", "-f", "-", "deploy/samples/valkeycluster-tls.yaml"],
        &good,
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    assert!(
        stdout.contains("2 clusters checked, 0 with errors"),
        "{stdout}"
    );
    let out = shardgate_with_stdin(&["check", "-", "-"], &good);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("only once"));
}

#[test]
fn every_sample_renders() {
    for entry in std::fs::read_dir(repo().join("deploy/samples")).unwrap() {
        let path = entry.unwrap().path();
        let out = shardgate(&["render", "-f", path.to_str().unwrap()]);
        assert!(
            out.status.success(),
            "{}: {}",
            path.display(),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[test]
fn check_passes_every_sample() {
    let out = shardgate(&["check", "-f", "deploy/samples"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("6 clusters checked, 0 with errors"),
        "{stdout}"
    );
}

#[test]
fn check_fails_bad_manifests_with_field_paths() {
    let out = shardgate(&["check", "-f", "tests/fixtures/invalid"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(!out.status.success(), "{stdout}");
    for expected in [
        "bad-fields.yaml (document 1, default/badfields): error: spec.shards: must be at least 1, got 0",
        "bad-fields.yaml (document 1, default/badfields): error: spec.externalAccess.domain: \"Not_A_Domain\" is not a valid DNS name",
        "bad-fields.yaml (document 1, default/badfields): error: spec.externalAccess.hostnamePrefix: \"-x\" is not a DNS label",
        "bad-fields.yaml (document 2, default/badtype): error: spec.shards: invalid type",
        "hostname-without-domain.yaml (document 1, default/nodomain): error: spec.externalAccess.domain: is required when preferredEndpointType is hostname",
        "3 clusters checked, 3 with errors",
    ] {
        assert!(
            stdout.contains(expected),
            "missing {expected:?} in:\n{stdout}"
        );
    }
    let out = shardgate(&[
        "check",
        "-o",
        "json",
        "-f",
        "tests/fixtures/invalid/hostname-without-domain.yaml",
    ]);
    assert!(!out.status.success());
    let reports: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        reports[0]["violations"][0]["field"],
        "spec.externalAccess.domain"
    );
    assert_eq!(reports[0]["violations"][0]["severity"], "error");
}

/// The binary's jemalloc options are in effect: jemalloc reads them from a
/// prefixed symbol, and an export under the wrong name is silently ignored.
/// (`stats_print` makes jemalloc print its options at exit.)
#[test]
fn the_allocator_returns_freed_memory_within_a_second() {
    let out = Command::new(env!("CARGO_BIN_EXE_shardgate"))
        .arg("--version")
        .env("_RJEM_MALLOC_CONF", "stats_print:true")
        .output()
        .expect("running shardgate");
    assert!(out.status.success());
    let stats = String::from_utf8_lossy(&out.stderr);
    for option in [
        "opt.background_thread: true",
        "opt.dirty_decay_ms: 1000",
        "opt.muzzy_decay_ms: 0",
    ] {
        assert!(stats.contains(option), "{option} not in:\n{stats}");
    }
}

/// Installed as `kubectl-shardgate` on PATH, the binary is a kubectl plugin:
/// `kubectl shardgate ...` runs it with the arguments after the plugin name.
#[test]
fn works_as_a_kubectl_plugin() {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let dir = std::env::temp_dir().join(format!("shardgate-plugin-{}-{nanos}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::os::unix::fs::symlink(
        env!("CARGO_BIN_EXE_shardgate"),
        dir.join("kubectl-shardgate"),
    )
    .unwrap();
    let path = format!(
        "{}:{}",
        dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let out = Command::new("kubectl")
        .args(["shardgate", "endpoints", "--help"])
        .env("PATH", &path)
        .output()
        .expect("kubectl on PATH (.ci/run installs it)");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("endpoints"), "{stdout}");
    let listed = Command::new("kubectl")
        .args(["plugin", "list"])
        .env("PATH", &path)
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&listed.stdout).contains("kubectl-shardgate"),
        "{}",
        String::from_utf8_lossy(&listed.stdout)
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
