//! A Kubernetes client from a kubeconfig, or inferred.

use std::path::Path;

use anyhow::Context as _;
use kube::config::{KubeConfigOptions, Kubeconfig};

/// Builds a client from a kubeconfig file (or a list of them, separated as
/// in `$KUBECONFIG`), or infers one (in-cluster service account, then
/// `$KUBECONFIG`/`~/.kube/config`).
pub async fn client(
    kubeconfig: Option<&Path>,
    context: Option<&str>,
) -> anyhow::Result<kube::Client> {
    let options = KubeConfigOptions {
        context: context.map(String::from),
        ..KubeConfigOptions::default()
    };
    let config = match kubeconfig {
        Some(paths) => kube::Config::from_custom_kubeconfig(read_list(paths)?, &options).await?,
        None if context.is_some() => kube::Config::from_kubeconfig(&options).await?,
        None => kube::Config::infer().await?,
    };
    Ok(kube::Client::try_from(config)?)
}

/// Reads a kubeconfig path list (`a:b` on Unix, as `$KUBECONFIG` holds it)
/// and merges the files as kubectl does: the first file to set a value (the
/// current context, a named cluster, user or context) wins. Empty entries
/// are skipped.
pub fn read_list(paths: &Path) -> anyhow::Result<Kubeconfig> {
    let files: Vec<_> = std::env::split_paths(paths)
        .filter(|p| !p.as_os_str().is_empty())
        .collect();
    anyhow::ensure!(!files.is_empty(), "the kubeconfig path list is empty");
    files
        .iter()
        .try_fold(Kubeconfig::default(), |merged, file| {
            let next = Kubeconfig::read_from(file)
                .with_context(|| format!("reading kubeconfig {}", file.display()))?;
            merged
                .merge(next)
                .with_context(|| format!("merging kubeconfig {}", file.display()))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kubeconfig(dir: &Path, file: &str, name: &str, current: Option<&str>) -> std::path::PathBuf {
        let path = dir.join(file);
        let current = current
            .map(|c| format!("current-context: {c}\n"))
            .unwrap_or_default();
        std::fs::write(
            &path,
            format!(
                "apiVersion: v1\nkind: Config\n{current}clusters:\n- name: {name}\n  cluster:\n    server: https://{name}.example:6443\ncontexts:\n- name: {name}\n  context:\n    cluster: {name}\n    user: {name}\nusers:\n- name: {name}\n  user:\n    token: t-{name}\n"
            ),
        )
        .unwrap();
        path
    }

    #[test]
    fn a_path_list_is_merged_like_kubectl_does() {
        let dir = std::env::temp_dir().join(format!("shardgate-kubeconfig-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let a = kubeconfig(&dir, "a.yaml", "east", Some("east"));
        let b = kubeconfig(&dir, "b.yaml", "west", Some("west"));
        let list = std::env::join_paths([&a, &b]).unwrap();
        let merged = read_list(Path::new(&list)).unwrap();
        // The first file's current context wins; both files' entries are there.
        assert_eq!(merged.current_context.as_deref(), Some("east"));
        let contexts: Vec<_> = merged.contexts.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(contexts, ["east", "west"]);
        let clusters: Vec<_> = merged.clusters.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(clusters, ["east", "west"]);
        // One file alone still reads, and an empty entry is skipped.
        let one = read_list(Path::new(&format!("{}:", b.display()))).unwrap();
        assert_eq!(one.current_context.as_deref(), Some("west"));
        // A missing file is named in the error.
        let missing = dir.join("missing.yaml");
        let list = std::env::join_paths([&a, &missing]).unwrap();
        let err = format!("{:#}", read_list(Path::new(&list)).unwrap_err());
        assert!(err.contains("missing.yaml"), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
