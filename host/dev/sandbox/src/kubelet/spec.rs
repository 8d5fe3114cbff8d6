//! From a Pod spec to a process: the container, its environment, its command
//! line and its readiness probe. Pure functions; errors are messages for the
//! kubelet to record against the pod.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use k8s_openapi::api::core::v1::{Container, EnvVar, Pod};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::volumes::Mount;

/// The program every image is assumed to run.
pub(super) const SERVER: &str = "valkey-server";

/// What the kubelet knows about a pod that `fieldRef`s can read.
pub(super) struct PodFacts<'a> {
    pub name: &'a str,
    pub namespace: &'a str,
    pub uid: &'a str,
    pub hostname: &'a str,
    pub pod_ip: Ipv4Addr,
    pub host_ip: Ipv4Addr,
}

/// A container's process, ready to spawn.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct Launch {
    pub program: PathBuf,
    pub args: Vec<String>,
    pub env: Vec<(String, String)>,
    pub cwd: PathBuf,
    pub probe: Option<TcpProbe>,
}

/// A TCP readiness probe on the pod IP.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct TcpProbe {
    pub port: u16,
    pub period: Duration,
    pub failure_threshold: u32,
}

/// The pod's only container. Init containers, sidecars and ephemeral
/// containers are not run, so a pod that has them is refused.
pub(super) fn container(pod: &Pod) -> Result<&Container, String> {
    let spec = pod.spec.as_ref().ok_or("no spec")?;
    if spec.init_containers.as_ref().is_some_and(|c| !c.is_empty()) {
        return Err("init containers are not supported by the sandbox kubelet".into());
    }
    match spec.containers.as_slice() {
        [one] => Ok(one),
        other => Err(format!(
            "{} containers; the sandbox kubelet runs single-container pods only",
            other.len()
        )),
    }
}

/// Everything needed to start `container` of the pod described by `facts`,
/// running `binary` instead of the image's `valkey-server`, with every mount
/// path replaced by its host directory and the process pinned to the pod IP.
pub(super) fn launch(
    container: &Container,
    facts: &PodFacts<'_>,
    binary: &Path,
    mounts: &[Mount],
    pod_dir: &Path,
) -> Result<Launch, String> {
    let env = environment(container, facts)?;
    let vars: BTreeMap<&str, &str> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let mut args = server_args(container, &vars)?;
    for arg in &mut args {
        *arg = rewrite_paths(arg, mounts);
    }
    let ip = facts.pod_ip.to_string();
    args.extend(["--bind".into(), ip.clone(), "--bind-source-addr".into(), ip]);
    let mut env = env;
    env.push(("HOSTNAME".into(), facts.hostname.into()));
    Ok(Launch {
        program: binary.to_path_buf(),
        args,
        env,
        cwd: working_dir(container, mounts, pod_dir),
        probe: readiness_probe(container)?,
    })
}

/// The container's environment in order: literal values (which may refer to
/// earlier variables as `$(VAR)`) and the supported `fieldRef`s.
fn environment(
    container: &Container,
    facts: &PodFacts<'_>,
) -> Result<Vec<(String, String)>, String> {
    if container.env_from.as_ref().is_some_and(|e| !e.is_empty()) {
        return Err("envFrom is not supported by the sandbox kubelet".into());
    }
    let mut env: Vec<(String, String)> = Vec::new();
    for var in container.env.iter().flatten() {
        let value = env_value(var, &env, facts)?;
        env.retain(|(k, _)| *k != var.name);
        env.push((var.name.clone(), value));
    }
    Ok(env)
}

/// One variable's value, given the variables defined before it.
fn env_value(
    var: &EnvVar,
    earlier: &[(String, String)],
    facts: &PodFacts<'_>,
) -> Result<String, String> {
    let Some(from) = &var.value_from else {
        let vars: BTreeMap<&str, &str> = earlier
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        return Ok(expand(var.value.as_deref().unwrap_or(""), &vars));
    };
    match &from.field_ref {
        Some(field) => field_value(&field.field_path, facts),
        None => Err(format!(
            "env {}: only `value` and `valueFrom.fieldRef` are supported by the sandbox kubelet",
            var.name
        )),
    }
}

/// The value of a downward-API field.
fn field_value(path: &str, facts: &PodFacts<'_>) -> Result<String, String> {
    Ok(match path {
        "status.podIP" => facts.pod_ip.to_string(),
        "status.hostIP" => facts.host_ip.to_string(),
        "metadata.name" => facts.name.to_string(),
        "metadata.namespace" => facts.namespace.to_string(),
        "metadata.uid" => facts.uid.to_string(),
        other => {
            return Err(format!(
                "fieldRef {other} is not supported by the sandbox kubelet"
            ));
        }
    })
}

/// Expands `$(VAR)` as Kubernetes does for `command`, `args` and `env`:
/// defined variables are substituted, `$$` is a literal `$`, and anything
/// else (an undefined variable, a `$` not followed by `(`) is kept as is.
pub(super) fn expand(text: &str, vars: &BTreeMap<&str, &str>) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        let after = &rest[at + 1..];
        if let Some(tail) = after.strip_prefix('$') {
            out.push('$');
            rest = tail;
        } else if let Some((name, tail)) = after.strip_prefix('(').and_then(|a| a.split_once(')')) {
            match vars.get(name) {
                Some(value) => out.push_str(value),
                None => {
                    out.push_str("$(");
                    out.push_str(name);
                    out.push(')');
                }
            }
            rest = tail;
        } else {
            out.push('$');
            rest = after;
        }
    }
    out.push_str(rest);
    out
}

/// The server's arguments (program name excluded), expanded. The command
/// must run `valkey-server` (any directory); without a `command` the image's
/// entrypoint is taken to be `valkey-server` and `args` its arguments.
fn server_args(container: &Container, vars: &BTreeMap<&str, &str>) -> Result<Vec<String>, String> {
    let command = container.command.clone().unwrap_or_default();
    let args = container.args.clone().unwrap_or_default();
    let mut argv: Vec<String> = command
        .iter()
        .chain(&args)
        .map(|a| expand(a, vars))
        .collect();
    let runs_server = argv
        .first()
        .is_some_and(|program| Path::new(program).file_name() == Some(SERVER.as_ref()));
    if runs_server {
        argv.remove(0);
    } else if !command.is_empty() {
        return Err(format!(
            "command {:?}: the sandbox kubelet runs only {SERVER}",
            command[0]
        ));
    }
    Ok(argv)
}

/// `workingDir` on the host if set, else the first emptyDir mount (the data
/// directory), else the pod directory.
fn working_dir(container: &Container, mounts: &[Mount], pod_dir: &Path) -> PathBuf {
    if let Some(dir) = container.working_dir.as_deref().filter(|d| !d.is_empty()) {
        return PathBuf::from(rewrite_paths(dir, mounts));
    }
    mounts
        .iter()
        .find(|m| m.empty_dir)
        .map_or_else(|| pod_dir.to_path_buf(), |m| m.host.clone())
}

/// The container's TCP readiness probe, its named port resolved. Other probe
/// kinds (exec, httpGet, grpc) are ignored: the container is then Ready
/// while its process runs.
fn readiness_probe(container: &Container) -> Result<Option<TcpProbe>, String> {
    let Some(probe) = &container.readiness_probe else {
        return Ok(None);
    };
    let Some(tcp) = &probe.tcp_socket else {
        return Ok(None);
    };
    let port = match &tcp.port {
        IntOrString::Int(n) => *n,
        IntOrString::String(name) => container
            .ports
            .iter()
            .flatten()
            .find(|p| p.name.as_deref() == Some(name))
            .map(|p| p.container_port)
            .ok_or_else(|| {
                format!("readiness probe port {name:?}: no container port has that name")
            })?,
    };
    let port =
        u16::try_from(port).map_err(|_| format!("readiness probe port {port}: out of range"))?;
    Ok(Some(TcpProbe {
        port,
        period: Duration::from_secs(probe.period_seconds.unwrap_or(10).max(1) as u64),
        failure_threshold: probe.failure_threshold.unwrap_or(3).max(1) as u32,
    }))
}

/// Replaces every container mount path in `text` by its host path, in one
/// pass so a replacement is never rewritten again. A mount path matches only
/// as a whole path prefix: not preceded by a path character (so `/x/data`
/// is kept) and followed by `/`, a non-path character or the end (so
/// `/database` is kept). The longest matching mount wins, as nested mounts
/// do in a real container.
pub(super) fn rewrite_paths(text: &str, mounts: &[Mount]) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    let mut previous: Option<char> = None;
    while let Some(c) = rest.chars().next() {
        if c == '/'
            && !previous.is_some_and(is_path_char)
            && let Some(mount) = longest_mount_at(rest, mounts)
        {
            out.push_str(&mount.host.to_string_lossy());
            rest = &rest[mount.container.len()..];
            previous = mount.container.chars().last();
            continue;
        }
        out.push(c);
        rest = &rest[c.len_utf8()..];
        previous = Some(c);
    }
    out
}

/// The longest mount whose container path starts `text` as a whole path.
fn longest_mount_at<'m>(text: &str, mounts: &'m [Mount]) -> Option<&'m Mount> {
    mounts
        .iter()
        .filter(|m| {
            text.strip_prefix(m.container.as_str())
                .is_some_and(|after| {
                    after
                        .chars()
                        .next()
                        .is_none_or(|c| c == '/' || !is_path_char(c))
                })
        })
        .max_by_key(|m| m.container.len())
}

fn is_path_char(c: char) -> bool {
    c.is_alphanumeric() || matches!(c, '/' | '.' | '-' | '_' | '~' | '+' | '@')
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{
        ContainerPort, EnvVarSource, ObjectFieldSelector, Probe, TCPSocketAction,
    };

    fn mount(container: &str, host: &str, empty_dir: bool) -> Mount {
        Mount {
            container: container.into(),
            host: host.into(),
            empty_dir,
        }
    }

    fn mounts() -> Vec<Mount> {
        vec![
            mount("/etc/valkey", "/w/p/volumes/config", false),
            mount("/etc/valkey/tls", "/w/p/volumes/tls", false),
            // A host path that itself contains another mount path.
            mount("/data", "/tmp/data/p/volumes/data", true),
        ]
    }

    fn facts() -> PodFacts<'static> {
        PodFacts {
            name: "vc-0",
            namespace: "ns",
            uid: "u-1",
            hostname: "vc-0",
            pod_ip: Ipv4Addr::new(127, 0, 1, 3),
            host_ip: Ipv4Addr::LOCALHOST,
        }
    }

    fn field_env(name: &str, path: &str) -> EnvVar {
        EnvVar {
            name: name.into(),
            value_from: Some(EnvVarSource {
                field_ref: Some(ObjectFieldSelector {
                    field_path: path.into(),
                    ..ObjectFieldSelector::default()
                }),
                ..EnvVarSource::default()
            }),
            ..EnvVar::default()
        }
    }

    fn server_container() -> Container {
        Container {
            name: "server".into(),
            command: Some(
                [
                    "valkey-server",
                    "/etc/valkey/valkey.conf",
                    "--cluster-announce-ip",
                    "$(POD_IP)",
                ]
                .map(String::from)
                .to_vec(),
            ),
            env: Some(vec![
                field_env("POD_IP", "status.podIP"),
                field_env("HOST_IP", "status.hostIP"),
            ]),
            ports: Some(vec![ContainerPort {
                name: Some("vk-n0".into()),
                container_port: 6379,
                ..ContainerPort::default()
            }]),
            readiness_probe: Some(Probe {
                tcp_socket: Some(TCPSocketAction {
                    port: IntOrString::String("vk-n0".into()),
                    ..TCPSocketAction::default()
                }),
                period_seconds: Some(5),
                ..Probe::default()
            }),
            ..Container::default()
        }
    }

    #[test]
    fn expand_follows_kubernetes_rules() {
        let vars = BTreeMap::from([("A", "1"), ("B", "two")]);
        assert_eq!(expand("$(A)-$(B)", &vars), "1-two");
        assert_eq!(expand("$$(A) $(C) $ x$", &vars), "$(A) $(C) $ x$");
        assert_eq!(expand("$(A", &vars), "$(A");
        assert_eq!(expand("é$(B)é", &vars), "étwoé");
    }

    #[test]
    fn rewrite_replaces_whole_mount_paths_once() {
        let m = mounts();
        assert_eq!(
            rewrite_paths("dir /data\ncluster-config-file /data/nodes.conf\n", &m),
            "dir /tmp/data/p/volumes/data\ncluster-config-file /tmp/data/p/volumes/data/nodes.conf\n"
        );
        assert_eq!(
            rewrite_paths("tls-cert-file /etc/valkey/tls/tls.crt", &m),
            "tls-cert-file /w/p/volumes/tls/tls.crt"
        );
        assert_eq!(
            rewrite_paths("/etc/valkey/valkey.conf", &m),
            "/w/p/volumes/config/valkey.conf"
        );
        assert_eq!(
            rewrite_paths("--dir=/data", &m),
            "--dir=/tmp/data/p/volumes/data"
        );
        assert_eq!(
            rewrite_paths("\"/data\"", &m),
            "\"/tmp/data/p/volumes/data\""
        );
        // Not whole paths: kept.
        assert_eq!(
            rewrite_paths("/database /x/data /etc/valkeys", &m),
            "/database /x/data /etc/valkeys"
        );
    }

    #[test]
    fn launch_runs_the_given_binary_pinned_to_the_pod_ip() {
        let l = launch(
            &server_container(),
            &facts(),
            Path::new("/bin/vs"),
            &mounts(),
            Path::new("/w/p"),
        )
        .unwrap();
        assert_eq!(l.program, PathBuf::from("/bin/vs"));
        assert_eq!(
            l.args,
            [
                "/w/p/volumes/config/valkey.conf",
                "--cluster-announce-ip",
                "127.0.1.3",
                "--bind",
                "127.0.1.3",
                "--bind-source-addr",
                "127.0.1.3"
            ]
        );
        assert_eq!(l.cwd, PathBuf::from("/tmp/data/p/volumes/data"));
        assert!(l.env.contains(&("HOST_IP".into(), "127.0.0.1".into())));
        assert!(l.env.contains(&("HOSTNAME".into(), "vc-0".into())));
        assert_eq!(
            l.probe,
            Some(TcpProbe {
                port: 6379,
                period: Duration::from_secs(5),
                failure_threshold: 3
            })
        );
    }

    #[test]
    fn env_values_may_refer_to_earlier_variables() {
        let mut c = server_container();
        c.env.as_mut().unwrap().push(EnvVar {
            name: "ADDR".into(),
            value: Some("$(POD_IP):6379 $(LATER)".into()),
            ..EnvVar::default()
        });
        let env = environment(&c, &facts()).unwrap();
        assert_eq!(
            env.last().unwrap(),
            &("ADDR".into(), "127.0.1.3:6379 $(LATER)".into())
        );
    }

    #[test]
    fn other_programs_and_fields_are_refused() {
        let mut c = server_container();
        c.command = Some(vec!["sh".into(), "-c".into(), "true".into()]);
        let err = launch(&c, &facts(), Path::new("/bin/vs"), &[], Path::new("/w")).unwrap_err();
        assert!(err.contains("\"sh\"") && err.contains(SERVER), "{err}");

        let mut c = server_container();
        c.env = Some(vec![field_env("NODE", "spec.nodeName")]);
        let err = launch(&c, &facts(), Path::new("/bin/vs"), &[], Path::new("/w")).unwrap_err();
        assert!(err.contains("spec.nodeName"), "{err}");
    }

    #[test]
    fn without_a_command_args_go_to_the_server() {
        let mut c = server_container();
        c.command = None;
        c.args = Some(vec!["--port".into(), "7000".into()]);
        c.readiness_probe = None;
        let l = launch(&c, &facts(), Path::new("/bin/vs"), &[], Path::new("/w")).unwrap();
        assert_eq!(&l.args[..2], ["--port", "7000"]);
        assert_eq!(l.cwd, PathBuf::from("/w"));
        assert_eq!(l.probe, None);
    }
}
