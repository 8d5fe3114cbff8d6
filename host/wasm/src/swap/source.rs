//! Following a module source and offering each new version to the manager.
//!
//! [`Offers`] remembers the digest last offered, so a re-list, a touch or a
//! rewrite with the same bytes offers nothing. [`follow_file`] follows a
//! file; a host follows its other sources (a ConfigMap) through [`Offers`]
//! too.

use std::path::{Path, PathBuf};
use std::time::Duration;

use notify::{EventKind, RecursiveMode, Watcher};
use tokio::sync::mpsc;
use tracing::{debug, info};

use super::{Checker, ModuleManager, ModuleSource, Rejection};
use crate::precompiled::sha256_hex;

/// After a change, wait this long without further changes before reading
/// (a file written in place fires several events), unless an event says the
/// file is complete: renamed into place, or closed after writing.
pub const SETTLE: Duration = Duration::from_millis(25);
/// Files are also re-read this often, in case an event was missed.
pub const FILE_RECHECK: Duration = Duration::from_secs(10);

/// What one source offered last: a digest, or why it could not be read.
#[derive(Debug, Default)]
pub struct Offers {
    last: Option<String>,
}

impl Offers {
    /// Starts from `initial`, the digest already serving from this source.
    pub fn new(initial: Option<String>) -> Self {
        Offers { last: initial }
    }

    /// Offers `bytes` from `source` unless they are the ones last offered.
    pub async fn offer(
        &mut self,
        manager: &ModuleManager,
        checker: &Checker,
        source: &ModuleSource,
        bytes: Vec<u8>,
    ) {
        let digest = sha256_hex(&bytes);
        if self.last.as_deref() == Some(digest.as_str()) {
            return;
        }
        self.last = Some(digest);
        let _ = manager.offer(checker, bytes, source).await;
    }

    /// Reports that `source` could not be read, once per distinct reason.
    pub fn unreadable(&mut self, manager: &ModuleManager, source: &ModuleSource, why: String) {
        let marker = format!("unreadable: {why}");
        if self.last.as_deref() == Some(marker.as_str()) {
            return;
        }
        self.last = Some(marker);
        manager.reject(&source.label(), &Rejection::Read(why));
    }
}

/// Follows the module file of `source` (at `path`) until the task is
/// aborted: its directory is watched, so an atomic rename and a Kubernetes
/// volume update are seen too, and the file is re-read every
/// [`FILE_RECHECK`] in case an event was missed. `initial` is the digest
/// already serving from it.
pub async fn follow_file(
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

    let mut offers = Offers::new(initial);
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
            Ok(bytes) => offers.offer(manager, checker, source, bytes).await,
            // Between an unlink and a rename, or a volume's symlink swap:
            // the next event brings the file back.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                debug!(path = %path.display(), "module file missing for now");
            }
            Err(e) => {
                offers.unreadable(manager, source, format!("reading {}: {e}", path.display()))
            }
        }
    }
}
