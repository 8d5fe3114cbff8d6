//! A process kubelet: runs each Pod of one namespace of the API emulator as
//! a local `valkey-server` process, and reports pod status back.
//!
//! At start it registers its nodes (`KubeletOptions::nodes`) as `v1 Node`
//! objects. Every ~100 ms it first runs the [`scheduler`](crate::scheduler)
//! over the namespace's pending Pods, then lists the namespace's Pods bound
//! to one of its nodes (`spec.nodeName`; others are left alone) and, for
//! each:
//!
//! - **Pod IP.** Allocates an address from `pod_network` (a loopback /24:
//!   the first pod gets `.1`, the next `.2`, ...). A pod keeps its IP across
//!   container restarts. When a pod is deleted its IP is released; a pod
//!   recreated under the same name (a new uid) gets the next free address in
//!   round-robin order, so usually a new IP, and the same one only once the
//!   /24 has wrapped around. An address on which another process already
//!   listens at one of the pod's container ports (say a server left over
//!   from an earlier run) is skipped, and not offered again.
//! - **Volumes.** Under `work_dir/<pod>/volumes/<volume>/`: a configMap
//!   volume holds one file per key of the ConfigMap's `data`/`binaryData`
//!   (or its `items`), a secret volume the Secret's decoded `data` and
//!   `stringData`, an emptyDir is a plain directory. configMap and secret
//!   files are rewritten from the emulator at each container start (not
//!   while the container runs); an emptyDir keeps its contents across
//!   container restarts (so `nodes.conf` survives) and goes with the pod.
//!   A persistentVolumeClaim volume is the claim's directory,
//!   `work_dir/.claims/<claim>/`: it outlives the pod (a recreated pod finds
//!   its data) and is removed once the claim object is gone (the
//!   StatefulSet's `persistentVolumeClaimRetentionPolicy`, applied by the
//!   emulator, decides when). Sizes, storage classes and access modes are
//!   not enforced.
//! - **Command line.** The container's `command` + `args` with `$(VAR)`
//!   expanded from its `env` (literal values and the `fieldRef`s
//!   `status.podIP`, `status.hostIP`, `metadata.name`, `metadata.namespace`,
//!   `metadata.uid`). The image's `valkey-server` is replaced by the
//!   configured binary. There are no mount namespaces, so every mount path
//!   (`/etc/valkey`, `/data`, ...) is replaced by its host directory, both in
//!   the arguments and inside the configMap files (secret files are copied
//!   byte for byte). There are no network namespaces either, so the process
//!   is pinned to its pod IP with `--bind <podIP> --bind-source-addr
//!   <podIP>`; it listens on the pod's ports (6379, bus 16379) on that IP.
//!   The process runs with a clean environment (the container's `env` plus
//!   `HOSTNAME`), its cwd the container's `workingDir` if set, else its first
//!   emptyDir mount (the data directory); stdout and stderr are appended to
//!   `work_dir/<pod>/server.log`.
//! - **Status.** Once the container has started, the Pod gets `podIP`,
//!   `hostIP` (its node's InternalIP) and `Ready` (through [`Emulator::set_pod_status`], which also
//!   sets `phase: Running`). Ready turns true when a TCP connect to
//!   `podIP:<readiness probe port>` succeeds (probed every tick until then,
//!   then every `periodSeconds`; `failureThreshold` consecutive failures turn
//!   it false), and false as soon as the process has exited. A container
//!   without a TCP readiness probe is Ready while its process runs.
//! - **Restarts.** An exited process is restarted after a backoff (200 ms,
//!   doubling to at most 5 s; reset once a process ran 10 s), keeping its IP
//!   and emptyDir, as `restartPolicy: Always` does (`OnFailure` and `Never`
//!   are honoured too).
//! - **Deletion.** When the Pod is deleted (or marked for deletion), or
//!   replaced by a new Pod of the same name (another uid, e.g. the
//!   StatefulSet controller recreating it from a new template), the process
//!   is killed (SIGKILL, no grace period), `work_dir/<pod>` is removed and
//!   the IP released.
//!
//! Errors (an unsupported pod spec, a missing ConfigMap, a binary that does
//! not start, a process that exits unasked) are logged with `tracing` and
//! kept in [`Kubelet::errors`], each naming its pod; the kubelet retries
//! with the same backoff and never panics.
//!
//! **Not modelled:** separate machines (every node's pods run here, on
//! this machine; a node is a name and its addresses), images and image pulls (every image runs the given
//! `valkey-server`; a command that is not `valkey-server` is refused),
//! cgroups and resource requests/limits, security contexts, users, mount and
//! network namespaces (see above: paths are rewritten, processes are pinned
//! to an IP), liveness and startup probes and non-TCP readiness probes,
//! graceful termination (`terminationGracePeriodSeconds`, preStop hooks),
//! init and sidecar containers (single-container pods only), `envFrom` and
//! `valueFrom` other than the `fieldRef`s above, volumes other than
//! configMap, secret and emptyDir, file modes, `restartCount` and container
//! statuses in the Pod status.

mod spec;
pub mod tls_front;
mod volumes;

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write as _;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use k8s_openapi::api::core::v1::Pod;
use kube_emulator::Emulator;
use tokio::process::{Child, Command};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tracing::{info, warn};

use crate::ip_pool::IpPool;
use crate::nodes::{self, SandboxNode};
use crate::scheduler;
use spec::{Launch, PodFacts, SERVER, TcpProbe};

/// How often the kubelet looks at the emulator's Pods.
const TICK: Duration = Duration::from_millis(100);
/// How often running pods' configMap and secret volumes are refreshed.
const VOLUME_REFRESH: Duration = Duration::from_secs(1);
/// Restart backoff: the first delay, doubled per consecutive failure.
const BACKOFF_BASE: Duration = Duration::from_millis(200);
const BACKOFF_MAX: Duration = Duration::from_secs(5);
/// A process that ran this long resets the backoff.
const BACKOFF_RESET: Duration = Duration::from_secs(10);
/// How long a readiness connect may take.
const PROBE_TIMEOUT: Duration = Duration::from_millis(500);
/// How long to wait for a killed process to be reaped.
const STOP_TIMEOUT: Duration = Duration::from_secs(5);
/// Errors kept by [`Kubelet::errors`]; older ones are dropped.
const MAX_ERRORS: usize = 1000;
/// Each pod's log file, in `work_dir/<pod>/`.
pub const LOG_FILE: &str = "server.log";

/// How the kubelet runs pods.
#[derive(Clone, Debug)]
pub struct KubeletOptions {
    /// The binary every container runs.
    pub valkey_server: PathBuf,
    /// Where pods' volumes and logs go (`work_dir/<pod>/`). Made absolute;
    /// must not contain whitespace or quotes (paths end up in valkey.conf).
    pub work_dir: PathBuf,
    /// A loopback /24 (e.g. 127.0.1.0): pods get `.1`, `.2`, ...
    pub pod_network: Ipv4Addr,
    /// The nodes this kubelet runs pods for (registered as `Node`s at
    /// start); a pod reports its node's InternalIP as `hostIP`.
    pub nodes: Vec<SandboxNode>,
    /// The namespace whose Pods this kubelet runs.
    pub namespace: String,
}

/// A running process kubelet; see the module docs. Dropping it kills every
/// process it started; [`Kubelet::shutdown`] also waits for them.
pub struct Kubelet {
    shared: Arc<Shared>,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<()>>,
}

struct Shared {
    emu: Arc<Emulator>,
    options: KubeletOptions,
    state: Mutex<State>,
    /// Sync passes completed, for tests that wait for the kubelet to have
    /// looked again rather than for a while.
    syncs: AtomicU64,
}

struct State {
    pods: BTreeMap<String, PodRuntime>,
    ips: IpPool,
    held: BTreeSet<String>,
    errors: ErrorLog,
    /// Set on shutdown/drop: no process is started any more.
    closed: bool,
    /// When running pods' volumes are next refreshed.
    next_refresh: Instant,
}

/// One pod as run here: survives its container's restarts.
struct PodRuntime {
    uid: String,
    ip: Ipv4Addr,
    /// Its node's InternalIP.
    host_ip: Ipv4Addr,
    dir: PathBuf,
    process: Option<Process>,
    /// Processes started so far (restarts = starts - 1).
    starts: u32,
    /// Consecutive failures, for the backoff.
    failures: u32,
    next_start: Instant,
    /// The restart policy said not to start again.
    finished: bool,
}

/// One container process.
struct Process {
    child: Child,
    pid: u32,
    started: Instant,
    probe: Option<TcpProbe>,
    ready: bool,
    last_probe: Option<Instant>,
    probe_failures: u32,
    /// Killed through [`Kubelet::kill`]: its exit is not an error.
    killed: bool,
    /// The TLS front of a server whose conf asks for TLS; it goes with
    /// the process.
    front: Option<tls_front::Front>,
}

/// Errors by pod: a pod's error is recorded once until it changes or the
/// pod becomes Ready (so a crash loop is one entry, not one per crash).
#[derive(Default)]
struct ErrorLog {
    all: Vec<String>,
    last: BTreeMap<String, String>,
}

impl Kubelet {
    /// Starts the kubelet on the current tokio runtime.
    pub fn start(emu: Arc<Emulator>, options: KubeletOptions) -> anyhow::Result<Kubelet> {
        let runtime = tokio::runtime::Handle::try_current()
            .context("the sandbox kubelet must be started inside a tokio runtime")?;
        let options = checked(options)?;
        nodes::register(&emu, &options.nodes)?;
        let shared = Arc::new(Shared {
            emu,
            state: Mutex::new(State {
                pods: BTreeMap::new(),
                ips: IpPool::new(options.pod_network),
                held: BTreeSet::new(),
                errors: ErrorLog::default(),
                closed: false,
                next_refresh: Instant::now(),
            }),
            options,
            syncs: AtomicU64::new(0),
        });
        let (stop, stopped) = oneshot::channel();
        let task = runtime.spawn(run(shared.clone(), stopped));
        Ok(Kubelet {
            shared,
            stop: Some(stop),
            task: Some(task),
        })
    }

    /// The PID of each pod's running process.
    pub fn pids(&self) -> BTreeMap<String, u32> {
        let st = self.shared.state();
        st.pods
            .iter()
            .filter_map(|(name, rt)| Some((name.clone(), rt.process.as_ref()?.pid)))
            .collect()
    }

    /// The IP the pod was given (while the kubelet knows the pod).
    pub fn pod_ip(&self, pod: &str) -> Option<Ipv4Addr> {
        self.shared.state().pods.get(pod).map(|rt| rt.ip)
    }

    /// The pod's log file (while the kubelet knows the pod).
    pub fn log_path(&self, pod: &str) -> Option<PathBuf> {
        self.shared
            .state()
            .pods
            .get(pod)
            .map(|rt| rt.dir.join(LOG_FILE))
    }

    /// SIGKILLs the pod's process, as a crash. It is restarted after the
    /// backoff unless [`Kubelet::hold`] keeps it down. False if the pod has
    /// no running process.
    pub fn kill(&self, pod: &str) -> bool {
        let mut st = self.shared.state();
        let Some(process) = st.pods.get_mut(pod).and_then(|rt| rt.process.as_mut()) else {
            return false;
        };
        process.killed = true;
        info!(
            pod,
            pid = process.pid,
            "killing the container process on request"
        );
        process.child.start_kill().is_ok()
    }

    /// Freezes (SIGSTOP) or thaws (SIGCONT) the pod's process: a node that
    /// hangs rather than dies. A frozen process keeps its sockets and
    /// answers nothing, so its readiness probe fails. False if the pod has
    /// no running process or the signal could not be sent.
    pub fn freeze(&self, pod: &str, frozen: bool) -> bool {
        use nix::sys::signal::{Signal, kill};
        use nix::unistd::Pid;
        let st = self.shared.state();
        let Some(process) = st.pods.get(pod).and_then(|rt| rt.process.as_ref()) else {
            return false;
        };
        let (signal, what) = if frozen {
            (Signal::SIGSTOP, "freezing")
        } else {
            (Signal::SIGCONT, "thawing")
        };
        info!(
            pod,
            pid = process.pid,
            "{what} the container process on request"
        );
        i32::try_from(process.pid).is_ok_and(|pid| kill(Pid::from_raw(pid), signal).is_ok())
    }

    /// While held, the pod's process is not (re)started; a running process
    /// is left alone (kill it with [`Kubelet::kill`]). By pod name, so it
    /// also applies to a pod recreated under that name.
    pub fn hold(&self, pod: &str, hold: bool) {
        let mut st = self.shared.state();
        if hold {
            st.held.insert(pod.to_string());
        } else {
            st.held.remove(pod);
        }
    }

    /// How many times the pod's container was restarted.
    pub fn restarts(&self, pod: &str) -> u32 {
        let st = self.shared.state();
        st.pods.get(pod).map_or(0, |rt| rt.starts.saturating_sub(1))
    }

    /// Sync passes completed so far. A test that asserts something did
    /// *not* happen waits for a few more passes, not for a fixed time.
    pub fn syncs(&self) -> u64 {
        self.shared.syncs.load(Ordering::Relaxed)
    }

    /// Errors so far, oldest first, each starting with `pod <name>:`.
    pub fn errors(&self) -> Vec<String> {
        self.shared.state().errors.all.clone()
    }

    /// Stops the kubelet, kills every process it started and waits for them
    /// to be gone. Pod files under `work_dir` are kept (logs for a
    /// post-mortem); pod statuses in the emulator are left as they are.
    pub async fn shutdown(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            let abort = task.abort_handle();
            if tokio::time::timeout(STOP_TIMEOUT, task).await.is_err() {
                abort.abort();
            }
        }
        let pods = {
            let mut st = self.shared.state();
            st.closed = true;
            std::mem::take(&mut st.pods)
        };
        let stops = pods
            .into_iter()
            .filter_map(|(name, rt)| Some(stop_process(name, rt.process?)));
        futures::future::join_all(stops).await;
    }
}

impl Drop for Kubelet {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
        let mut st = self.shared.state();
        st.closed = true;
        for rt in st.pods.values_mut() {
            if let Some(process) = &mut rt.process {
                let _ = process.child.start_kill();
            }
        }
        // Dropping the children (kill_on_drop) hands them to tokio's reaper.
        st.pods.clear();
    }
}

/// `options` with an absolute work dir that exists and a binary that is a
/// file.
fn checked(mut options: KubeletOptions) -> anyhow::Result<KubeletOptions> {
    if !options.valkey_server.is_file() {
        bail!(
            "valkey-server {}: not a file",
            options.valkey_server.display()
        );
    }
    options.work_dir = std::path::absolute(&options.work_dir)
        .with_context(|| format!("work dir {}", options.work_dir.display()))?;
    let text = options
        .work_dir
        .to_str()
        .with_context(|| format!("work dir {}: not UTF-8", options.work_dir.display()))?;
    if text.contains(|c: char| c.is_whitespace() || c == '"' || c == '\'') {
        bail!(
            "work dir {text:?}: must not contain whitespace or quotes (it ends up in valkey.conf)"
        );
    }
    std::fs::create_dir_all(&options.work_dir)
        .with_context(|| format!("creating work dir {text}"))?;
    Ok(options)
}

/// The kubelet loop: one sync per tick until told to stop.
async fn run(shared: Arc<Shared>, mut stop: oneshot::Receiver<()>) {
    let mut tick = tokio::time::interval(TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = &mut stop => return,
            _ = tick.tick() => shared.sync().await,
        }
    }
}

/// SIGKILLs a process and waits until it is reaped.
async fn stop_process(pod: String, mut process: Process) {
    let _ = process.child.start_kill();
    match tokio::time::timeout(STOP_TIMEOUT, process.child.wait()).await {
        Ok(Ok(status)) => info!(pod, pid = process.pid, %status, "container process stopped"),
        Ok(Err(e)) => warn!(
            pod,
            pid = process.pid,
            "waiting for the container process: {e}"
        ),
        Err(_) => warn!(
            pod,
            pid = process.pid,
            "the container process did not exit after SIGKILL"
        ),
    }
}

/// Whether a Pod's `Ready` condition is `True`.
pub fn is_ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

fn uid(pod: &Pod) -> &str {
    pod.metadata.uid.as_deref().unwrap_or_default()
}

/// The delay before the `failures`-th consecutive restart.
fn backoff(failures: u32) -> Duration {
    let doublings = failures.saturating_sub(1).min(16);
    (BACKOFF_BASE * 2u32.pow(doublings)).min(BACKOFF_MAX)
}

impl Shared {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// One pass: forget deleted pods, notice exits, start what is due, probe,
    /// then publish pod statuses.
    async fn sync(&self) {
        scheduler::schedule(&self.emu, &self.options.namespace);
        let pods = self.observe();
        let gone = self.forget_gone(&pods);
        for (name, rt) in gone {
            self.terminate(name, rt).await;
        }
        self.reap_exited(&pods);
        for claim in
            volumes::prune_claims(&self.emu, &self.options.namespace, &self.options.work_dir)
        {
            info!(claim, "claim gone: its directory is removed");
        }
        self.refresh_volumes(&pods);
        self.start_due(&pods);
        self.probe().await;
        self.publish(&pods);
        self.syncs.fetch_add(1, Ordering::Relaxed);
    }

    /// The namespace's Pods bound to one of this kubelet's nodes that are
    /// not being deleted, by name. Forgets
    /// the latest error of pods that no longer exist.
    fn observe(&self) -> BTreeMap<String, Pod> {
        let listed = self.emu.list("pods", Some(&self.options.namespace));
        let names: BTreeSet<&str> = listed
            .iter()
            .filter_map(|p| p["metadata"]["name"].as_str())
            .collect();
        self.state()
            .errors
            .last
            .retain(|name, _| names.contains(name.as_str()));
        let mut pods = BTreeMap::new();
        for value in listed {
            let name = value["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            match serde_json::from_value::<Pod>(value) {
                Ok(pod)
                    if pod.metadata.deletion_timestamp.is_none()
                        && self.host_ip(&pod).is_some() =>
                {
                    pods.insert(name, pod);
                }
                Ok(_) => {}
                Err(e) => self
                    .state()
                    .errors
                    .record(&name, format!("not a valid Pod: {e}")),
            }
        }
        pods
    }

    /// The InternalIP of the pod's node, if it is bound to one of ours.
    fn host_ip(&self, pod: &Pod) -> Option<Ipv4Addr> {
        let node = pod.spec.as_ref()?.node_name.as_deref()?;
        self.options
            .nodes
            .iter()
            .find(|n| n.name == node)
            .map(|n| n.internal_ip)
    }

    /// Takes out the runtimes of pods that are gone or were replaced.
    fn forget_gone(&self, pods: &BTreeMap<String, Pod>) -> Vec<(String, PodRuntime)> {
        let mut st = self.state();
        let gone: Vec<String> = st
            .pods
            .iter()
            .filter(|(name, rt)| pods.get(*name).map(uid) != Some(rt.uid.as_str()))
            .map(|(name, _)| name.clone())
            .collect();
        gone.into_iter()
            .filter_map(|name| st.pods.remove(&name).map(|rt| (name, rt)))
            .collect()
    }

    /// Kills a gone pod's process, removes its files and releases its IP.
    async fn terminate(&self, name: String, rt: PodRuntime) {
        info!(pod = %name, ip = %rt.ip, "pod gone: stopping its container and removing its files");
        if let Some(process) = rt.process {
            stop_process(name.clone(), process).await;
        }
        if let Err(e) = std::fs::remove_dir_all(&rt.dir)
            && e.kind() != std::io::ErrorKind::NotFound
        {
            warn!(pod = %name, "removing {}: {e}", rt.dir.display());
        }
        self.state().ips.release(rt.ip);
    }

    /// Notices processes that exited and schedules their restart.
    fn reap_exited(&self, pods: &BTreeMap<String, Pod>) {
        let mut guard = self.state();
        let State {
            pods: runtimes,
            errors,
            ..
        } = &mut *guard;
        for (name, rt) in runtimes.iter_mut() {
            let Some((status, ran, killed)) = rt.try_reap() else {
                continue;
            };
            let policy = pods
                .get(name)
                .and_then(|p| p.spec.as_ref()?.restart_policy.as_deref())
                .unwrap_or("Always");
            rt.exited(status, ran, policy);
            info!(pod = %name, %status, ?ran, restart = !rt.finished, "container process exited");
            if !killed {
                let log = rt.dir.join(LOG_FILE);
                errors.record(
                    name,
                    format!("{SERVER} exited unasked ({status}); see {}", log.display()),
                );
            }
        }
    }

    /// Admits new pods and starts every container that is due.
    fn start_due(&self, pods: &BTreeMap<String, Pod>) {
        let now = Instant::now();
        let mut guard = self.state();
        if guard.closed {
            return;
        }
        let State {
            pods: runtimes,
            ips,
            held,
            errors,
            ..
        } = &mut *guard;
        for (name, pod) in pods {
            if !runtimes.contains_key(name) {
                match self.admit(name, pod, ips) {
                    Ok(rt) => {
                        runtimes.insert(name.clone(), rt);
                    }
                    Err(e) => {
                        errors.record(name, e);
                        continue;
                    }
                }
            }
            let Some(rt) = runtimes.get_mut(name) else {
                continue;
            };
            if rt.process.is_some() || rt.finished || held.contains(name) || now < rt.next_start {
                continue;
            }
            match self.launch(name, pod, rt) {
                Ok(process) => {
                    info!(pod = %name, pid = process.pid, ip = %rt.ip, start = rt.starts + 1, "container process started");
                    if process.ready {
                        errors.clear(name);
                    }
                    rt.process = Some(process);
                    rt.starts += 1;
                }
                Err(e) => {
                    rt.failures += 1;
                    rt.next_start = now + backoff(rt.failures);
                    errors.record(name, e);
                }
            }
        }
    }

    /// A new pod: an IP and a fresh directory (whatever an earlier pod of
    /// that name left is removed).
    fn admit(&self, name: &str, pod: &Pod, ips: &mut IpPool) -> Result<PodRuntime, String> {
        let host_ip = self
            .host_ip(pod)
            .ok_or_else(|| "not bound to one of the sandbox's nodes".to_string())?;
        let dir = self.options.work_dir.join(name);
        fresh_dir(&dir).map_err(|e| format!("preparing {}: {e}", dir.display()))?;
        let ports = container_ports(pod);
        let ip = loop {
            let ip = ips
                .allocate()
                .ok_or_else(|| format!("no free pod IP in {}/24", self.options.pod_network))?;
            if ports_free(ip, &ports) {
                break ip;
            }
            // Left allocated, so it is not tried again.
            warn!(pod = name, %ip, "another process listens on this pod IP; skipping it");
        };
        info!(pod = name, %ip, %host_ip, "pod admitted");
        Ok(PodRuntime {
            uid: uid(pod).to_string(),
            ip,
            host_ip,
            dir,
            process: None,
            starts: 0,
            failures: 0,
            next_start: Instant::now(),
            finished: false,
        })
    }

    /// Brings the configMap and secret volumes of running pods up to date
    /// with their objects, as a kubelet's periodic sync does (here every
    /// [`VOLUME_REFRESH`]): a rotated password reaches the files without a
    /// restart.
    fn refresh_volumes(&self, pods: &BTreeMap<String, Pod>) {
        let now = Instant::now();
        let dirs: Vec<(String, PathBuf)> = {
            let mut st = self.state();
            if now < st.next_refresh {
                return;
            }
            st.next_refresh = now + VOLUME_REFRESH;
            st.pods
                .iter()
                .filter(|(_, rt)| rt.process.is_some())
                .map(|(name, rt)| (name.clone(), rt.dir.clone()))
                .collect()
        };
        for (name, dir) in dirs {
            let Some(pod) = pods.get(&name) else { continue };
            let refreshed = spec::container(pod)
                .and_then(|c| volumes::mounts(pod, c, &dir))
                .and_then(|mounts| {
                    volumes::materialize(&self.emu, &self.options.namespace, pod, &dir, &mounts)
                });
            if let Err(e) = refreshed {
                warn!(pod = %name, "refreshing volumes: {e}");
            }
        }
    }

    /// Checks the pod spec, materializes the pod's volumes and starts its
    /// container.
    fn launch(&self, name: &str, pod: &Pod, rt: &PodRuntime) -> Result<Process, String> {
        let container = spec::container(pod)?;
        let mounts = volumes::mounts(pod, container, &rt.dir)?;
        let hostname = pod
            .spec
            .as_ref()
            .and_then(|s| s.hostname.as_deref())
            .unwrap_or(name);
        let facts = PodFacts {
            name,
            namespace: &self.options.namespace,
            uid: &rt.uid,
            hostname,
            pod_ip: rt.ip,
            host_ip: rt.host_ip,
        };
        let mut launch = spec::launch(
            container,
            &facts,
            &self.options.valkey_server,
            &mounts,
            &rt.dir,
        )?;
        volumes::materialize(&self.emu, &self.options.namespace, pod, &rt.dir, &mounts)?;
        let tls = tls_plan(&launch)?;
        if tls.is_some() {
            launch.args.extend(tls_front::plaintext_args());
        }
        let mut process = spawn(&launch, &rt.dir.join(LOG_FILE))
            .map_err(|e| format!("starting {}: {e}", launch.program.display()))?;
        process.front = tls.map(|plan| tls_front::Front::start(rt.ip, plan));
        Ok(process)
    }

    /// Runs the readiness probes that are due, concurrently.
    async fn probe(&self) {
        let now = Instant::now();
        let due: Vec<(String, u32, SocketAddr)> = {
            let st = self.state();
            st.pods
                .iter()
                .filter_map(|(name, rt)| {
                    let p = rt.process.as_ref()?;
                    let port = p.probe?.port;
                    p.probe_due(now)
                        .then(|| (name.clone(), p.pid, SocketAddr::from((rt.ip, port))))
                })
                .collect()
        };
        let results =
            futures::future::join_all(due.iter().map(|(_, _, addr)| tcp_open(*addr))).await;
        let mut guard = self.state();
        let State { pods, errors, .. } = &mut *guard;
        for ((name, pid, _), ok) in due.into_iter().zip(results) {
            let process = pods.get_mut(&name).and_then(|rt| rt.process.as_mut());
            let Some(p) = process.filter(|p| p.pid == pid) else {
                continue;
            };
            let was_ready = p.ready;
            p.probed(ok, now);
            if p.ready && !was_ready {
                errors.clear(&name);
            }
        }
    }

    /// Sets podIP, hostIP and Ready on every started pod whose status in the
    /// emulator differs.
    fn publish(&self, pods: &BTreeMap<String, Pod>) {
        let wanted: Vec<(String, Ipv4Addr, Ipv4Addr, bool)> = {
            let st = self.state();
            st.pods
                .iter()
                .filter(|(_, rt)| rt.starts > 0)
                .map(|(name, rt)| (name.clone(), rt.ip, rt.host_ip, rt.ready()))
                .collect()
        };
        let ns = &self.options.namespace;
        for (name, ip, host_ip, ready) in wanted {
            let Some(pod) = pods.get(&name) else { continue };
            if status_is(pod, ip, host_ip, ready) {
                continue;
            }
            let result =
                self.emu
                    .set_pod_status(ns, &name, &ip.to_string(), &host_ip.to_string(), ready);
            // A pod deleted since it was listed is not an error.
            if let Err(e) = result
                && self.emu.get("Pod", ns, &name).is_some()
            {
                self.state()
                    .errors
                    .record(&name, format!("setting the pod status: {e:#}"));
            }
        }
    }
}

/// Whether the Pod's status already says `ip`, `host_ip`, Running and
/// `ready`.
fn status_is(pod: &Pod, ip: Ipv4Addr, host_ip: Ipv4Addr, ready: bool) -> bool {
    let Some(status) = &pod.status else {
        return false;
    };
    status.pod_ip.as_deref() == Some(ip.to_string().as_str())
        && status.host_ip.as_deref() == Some(host_ip.to_string().as_str())
        && status.phase.as_deref() == Some("Running")
        && is_ready(pod) == ready
}

/// The TCP ports the pod's containers declare.
fn container_ports(pod: &Pod) -> Vec<u16> {
    pod.spec
        .iter()
        .flat_map(|s| &s.containers)
        .flat_map(|c| c.ports.iter().flatten())
        .filter(|p| p.protocol.as_deref().unwrap_or("TCP") == "TCP")
        .filter_map(|p| u16::try_from(p.container_port).ok())
        .collect()
}

/// Whether no other process listens on `ip` at any of `ports` (a leftover
/// server from an earlier run would otherwise answer for the pod).
fn ports_free(ip: Ipv4Addr, ports: &[u16]) -> bool {
    ports.iter().all(|&port| {
        !matches!(
            std::net::TcpListener::bind((ip, port)),
            Err(e) if e.kind() == std::io::ErrorKind::AddrInUse
        )
    })
}

/// Removes `dir` if it exists, then creates it empty.
fn fresh_dir(dir: &Path) -> std::io::Result<()> {
    match std::fs::remove_dir_all(dir) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
        _ => {}
    }
    std::fs::create_dir_all(dir)
}

/// What TLS the server's config file (its first argument that is not an
/// option) asks for; see [`tls_front`].
fn tls_plan(launch: &Launch) -> Result<Option<tls_front::Plan>, String> {
    let Some(conf) = launch.args.first().filter(|a| !a.starts_with("--")) else {
        return Ok(None);
    };
    let text = std::fs::read_to_string(conf).map_err(|e| format!("reading {conf}: {e}"))?;
    tls_front::plan(&text).map_err(|e| format!("{conf}: {e}"))
}

/// Starts the process, its output appended to `log`. It is SIGKILLed if its
/// handle is dropped.
fn spawn(launch: &Launch, log: &Path) -> std::io::Result<Process> {
    std::fs::create_dir_all(&launch.cwd)?;
    let mut out = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)?;
    writeln!(
        out,
        "--- sandbox kubelet: {} {}",
        launch.program.display(),
        launch.args.join(" ")
    )?;
    let child = Command::new(&launch.program)
        .args(&launch.args)
        .env_clear()
        .envs(launch.env.iter().map(|(k, v)| (k, v)))
        .current_dir(&launch.cwd)
        .stdin(Stdio::null())
        .stdout(out.try_clone()?)
        .stderr(out)
        .kill_on_drop(true)
        .spawn()?;
    Ok(Process {
        pid: child.id().unwrap_or_default(),
        child,
        started: Instant::now(),
        probe: launch.probe,
        ready: launch.probe.is_none(),
        last_probe: None,
        probe_failures: 0,
        killed: false,
        front: None,
    })
}

/// Whether a TCP connection to `addr` opens in time.
async fn tcp_open(addr: SocketAddr) -> bool {
    matches!(
        tokio::time::timeout(PROBE_TIMEOUT, tokio::net::TcpStream::connect(addr)).await,
        Ok(Ok(_))
    )
}

impl PodRuntime {
    fn ready(&self) -> bool {
        self.process.as_ref().is_some_and(|p| p.ready)
    }

    /// If the process exited: drops it and returns its status, how long it
    /// ran and whether it was killed on request.
    fn try_reap(&mut self) -> Option<(ExitStatus, Duration, bool)> {
        let process = self.process.as_mut()?;
        let status = match process.child.try_wait() {
            Ok(Some(status)) => status,
            Ok(None) => return None,
            Err(e) => {
                warn!(pid = process.pid, "checking the container process: {e}");
                return None;
            }
        };
        let process = self.process.take()?;
        Some((status, process.started.elapsed(), process.killed))
    }

    /// Schedules the restart the policy asks for.
    fn exited(&mut self, status: ExitStatus, ran: Duration, policy: &str) {
        self.failures = if ran >= BACKOFF_RESET {
            1
        } else {
            self.failures + 1
        };
        self.next_start = Instant::now() + backoff(self.failures);
        self.finished = match policy {
            "Never" => true,
            "OnFailure" => status.success(),
            _ => false,
        };
    }
}

impl Process {
    /// Not yet ready: every tick; ready: every probe period.
    fn probe_due(&self, now: Instant) -> bool {
        match (self.probe, self.last_probe) {
            (Some(probe), Some(last)) if self.ready => now >= last + probe.period,
            (Some(_), _) => true,
            (None, _) => false,
        }
    }

    fn probed(&mut self, ok: bool, now: Instant) {
        self.last_probe = Some(now);
        if ok {
            self.ready = true;
            self.probe_failures = 0;
            return;
        }
        self.probe_failures += 1;
        let threshold = self.probe.map_or(1, |p| p.failure_threshold);
        if self.probe_failures >= threshold {
            self.ready = false;
        }
    }
}

impl ErrorLog {
    /// Records `message` for `pod` unless it is the pod's latest error.
    fn record(&mut self, pod: &str, message: String) {
        if self.last.get(pod) == Some(&message) {
            return;
        }
        let line = format!("pod {pod}: {message}");
        warn!("sandbox kubelet: {line}");
        self.last.insert(pod.to_string(), message);
        self.all.push(line);
        if self.all.len() > MAX_ERRORS {
            self.all.remove(0);
        }
    }

    /// The pod is fine (Ready) again: its next error is recorded even if it
    /// repeats an earlier one.
    fn clear(&mut self, pod: &str) {
        self.last.remove(pod);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_up_to_the_cap() {
        assert_eq!(backoff(1), Duration::from_millis(200));
        assert_eq!(backoff(2), Duration::from_millis(400));
        assert_eq!(backoff(5), Duration::from_millis(3200));
        assert_eq!(backoff(6), BACKOFF_MAX);
        assert_eq!(backoff(1000), BACKOFF_MAX);
    }

    #[test]
    fn errors_are_recorded_once_until_they_change() {
        let mut log = ErrorLog::default();
        log.record("a", "x".into());
        log.record("a", "x".into());
        log.record("b", "x".into());
        log.record("a", "y".into());
        log.clear("a");
        log.record("a", "y".into());
        assert_eq!(log.all, ["pod a: x", "pod b: x", "pod a: y", "pod a: y"]);
    }

    #[test]
    fn unusable_work_dirs_are_refused() {
        let bin = std::env::current_exe().unwrap();
        let options = |work_dir: &str| KubeletOptions {
            valkey_server: bin.clone(),
            work_dir: work_dir.into(),
            pod_network: Ipv4Addr::new(127, 0, 1, 0),
            nodes: nodes::sandbox_nodes(1),
            namespace: "default".into(),
        };
        let err = checked(options("/tmp/with space")).unwrap_err().to_string();
        assert!(err.contains("whitespace"), "{err}");
        let mut missing = options("/tmp");
        missing.valkey_server = "/nonexistent/valkey-server".into();
        assert!(
            checked(missing)
                .unwrap_err()
                .to_string()
                .contains("not a file")
        );
    }
}
