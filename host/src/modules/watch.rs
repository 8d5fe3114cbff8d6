//! Watching a module source and offering each new version to the manager.
//!
//! Each watcher remembers the digest it last offered, so a re-list, a
//! touch or a rewrite with the same bytes offers nothing.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::Api;
use kube::runtime::{WatchStreamExt, watcher};
use notify::{EventKind, RecursiveMode, Watcher};
use tokio::sync::mpsc;
use tracing::{debug, info, warn};

use super::{Checker, ModuleManager, ModuleSource, Rejection, sha256_hex};

/// After a change, wait this long without further changes before reading
/// (a file written in place fires several events), unless an event says the
/// file is complete: renamed into place, or closed after writing.
pub const SETTLE: Duration = Duration::from_millis(25);
/// Files are also re-read this often, in case an event was missed.
pub const FILE_RECHECK: Duration = Duration::from_secs(10);

/// Watches `source` until the task is aborted, offering every new version
/// to `manager`. `Embedded` returns at once; `ConfigMap` needs `client`.
/// `initial` is the digest already serving from this source, if any.
pub fn spawn(
    manager: Arc<ModuleManager>,
    checker: Checker,
    source: ModuleSource,
    client: Option<kube::Client>,
    initial: Option<String>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let result = match &source {
            ModuleSource::Embedded => Ok(()),
            ModuleSource::File { path, .. } => {
                watch_file(&manager, &checker, &source, path, initial).await
            }
            ModuleSource::ConfigMap {
                namespace, name, ..
            } => match client {
                Some(client) => {
                    watch_config_map(
                        &manager, &checker, &source, client, namespace, name, initial,
                    )
                    .await
                }
                None => Err(anyhow::anyhow!(
                    "a ConfigMap source needs a Kubernetes client"
                )),
            },
        };
        if let Err(e) = result {
            warn!(source = %source.label(), error = %e, "module source watch stopped");
        }
    })
}

/// Offers `bytes` unless they are the ones last offered.
async fn offer(
    manager: &ModuleManager,
    checker: &Checker,
    source: &ModuleSource,
    last: &mut Option<String>,
    bytes: Vec<u8>,
) {
    let digest = sha256_hex(&bytes);
    if last.as_deref() == Some(digest.as_str()) {
        return;
    }
    *last = Some(digest);
    let _ = manager.offer(checker, bytes, source).await;
}

/// Reports a read failure once per distinct message.
fn read_failed(
    manager: &ModuleManager,
    source: &ModuleSource,
    last: &mut Option<String>,
    why: String,
) {
    let marker = format!("unreadable: {why}");
    if last.as_deref() == Some(marker.as_str()) {
        return;
    }
    *last = Some(marker);
    manager.reject(&source.label(), &Rejection::Read(why));
}

async fn watch_file(
    manager: &ModuleManager,
    checker: &Checker,
    source: &ModuleSource,
    path: &Path,
    initial: Option<String>,
) -> anyhow::Result<()> {
    let dir: PathBuf = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    // Each event says whether it completes the watched file.
    let (tx, mut rx) = mpsc::unbounded_channel::<bool>();
    let file_name = path.file_name().map(|n| n.to_os_string());
    let mut watcher = notify::recommended_watcher(move |res: notify::Result<notify::Event>| {
        let completes = match &res {
            Ok(ev) => {
                matches!(
                    ev.kind,
                    EventKind::Access(notify::event::AccessKind::Close(
                        notify::event::AccessMode::Write
                    )) | EventKind::Modify(notify::event::ModifyKind::Name(
                        notify::event::RenameMode::To | notify::event::RenameMode::Both
                    ))
                ) && ev
                    .paths
                    .last()
                    .is_some_and(|p| p.file_name() == file_name.as_deref())
            }
            Err(_) => false,
        };
        let relevant = match &res {
            Ok(ev) => !matches!(
                ev.kind,
                EventKind::Access(notify::event::AccessKind::Open(_))
                    | EventKind::Access(notify::event::AccessKind::Read)
                    | EventKind::Access(notify::event::AccessKind::Close(
                        notify::event::AccessMode::Read
                    ))
            ),
            Err(_) => true,
        };
        if relevant {
            let _ = tx.send(completes);
        }
    })?;
    watcher.watch(&dir, RecursiveMode::NonRecursive)?;
    info!(path = %path.display(), "watching the reconcile module file");

    let mut last = initial;
    let mut recheck = tokio::time::interval(FILE_RECHECK);
    recheck.tick().await;
    loop {
        tokio::select! {
            ev = rx.recv() => {
                let Some(mut complete) = ev else {
                    return Ok(());
                };
                // Let the writer finish, unless it said it has.
                while !complete {
                    match tokio::time::timeout(SETTLE, rx.recv()).await {
                        Ok(Some(c)) => complete = c,
                        _ => break,
                    }
                }
            }
            _ = recheck.tick() => {}
        }
        let read = {
            let path = path.to_path_buf();
            tokio::task::spawn_blocking(move || std::fs::read(path)).await?
        };
        match read {
            Ok(bytes) => offer(manager, checker, source, &mut last, bytes).await,
            // Between an unlink and a rename, or a volume's symlink swap:
            // the next event brings the file back.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                debug!(path = %path.display(), "module file missing for now");
            }
            Err(e) => read_failed(
                manager,
                source,
                &mut last,
                format!("reading {}: {e}", path.display()),
            ),
        }
    }
}

async fn watch_config_map(
    manager: &ModuleManager,
    checker: &Checker,
    source: &ModuleSource,
    client: kube::Client,
    namespace: &str,
    name: &str,
    initial: Option<String>,
) -> anyhow::Result<()> {
    let ModuleSource::ConfigMap { key, .. } = source else {
        unreachable!("watch_config_map takes a ConfigMap source");
    };
    let api: Api<ConfigMap> = Api::namespaced(client, namespace);
    let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let mut stream = watcher(api, config)
        .default_backoff()
        .applied_objects()
        .boxed();
    info!(configmap = %format!("{namespace}/{name}"), %key, "watching the reconcile module ConfigMap");
    let mut last = initial;
    while let Some(event) = stream.next().await {
        match event {
            Ok(cm) => match cm.binary_data.as_ref().and_then(|d| d.get(key.as_str())) {
                Some(bytes) => offer(manager, checker, source, &mut last, bytes.0.clone()).await,
                None => read_failed(
                    manager,
                    source,
                    &mut last,
                    format!("ConfigMap {namespace}/{name} has no binaryData key {key:?}"),
                ),
            },
            Err(e) => warn!(error = %e, "watching the module ConfigMap"),
        }
    }
    Ok(())
}
