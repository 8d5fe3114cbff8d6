//! The cluster's ACL as Valkey's aclfile.
//!
//! Every cluster has three kinds of user:
//! - the `default` user, with every permission and the password the host
//!   generated, unless `spec.users` lists `default` itself;
//! - the system users ([`auth::OPERATOR_USER`], [`auth::REPLICATION_USER`]),
//!   each allowed exactly the commands its job needs;
//! - the users of `spec.users`, as written.
//!
//! Passwords appear only as the SHA-256 digests the host computed (`#<hex>`):
//! no password crosses into the guest or lands in the file.

use shardgate_contract::auth;
use shardgate_contract::model::{Cluster, Credentials, User};

use crate::server::Server;

/// The aclfile: one `user` line per user, `default` first, then the system
/// users, then `spec.users` in order. Every node loads the same file, so
/// the system users are granted only what `server` (the oldest the cluster
/// runs) has: a server refuses to start on an aclfile naming a command it
/// lacks.
pub fn render(cluster: &Cluster, credentials: &Credentials, server: &Server) -> String {
    let has = |c: &&str| server.migrates_atomically() || !auth::SINCE_VALKEY_9.contains(c);
    let operator: Vec<&str> = auth::OPERATOR_COMMANDS
        .iter()
        .copied()
        .filter(has)
        .collect();
    let replication: Vec<&str> = auth::REPLICATION_COMMANDS
        .iter()
        .copied()
        .filter(has)
        .collect();
    let mut file = String::with_capacity(512 + 128 * cluster.users.len());
    let default_listed = cluster.users.iter().any(|u| u.name == auth::DEFAULT_USER);
    if !default_listed {
        // Without a password for `default` the operator refuses to apply,
        // so an empty digest here would only ever be a broken host.
        let digest = credentials.default_user.as_deref().unwrap_or_default();
        push_line(
            &mut file,
            auth::DEFAULT_USER,
            &["on", &format!("#{digest}"), "~*", "&*", "+@all"],
        );
    }
    push_system(
        &mut file,
        auth::OPERATOR_USER,
        &credentials.operator,
        auth::OPERATOR_PATTERNS,
        &operator,
    );
    push_system(
        &mut file,
        auth::REPLICATION_USER,
        &credentials.replication,
        auth::REPLICATION_PATTERNS,
        &replication,
    );
    for user in &cluster.users {
        push_line(&mut file, &user.name, &rules(user));
    }
    file
}

/// A system user: its password, its key and channel `patterns`, nothing but
/// `commands`.
fn push_system(file: &mut String, name: &str, digest: &str, patterns: &[&str], commands: &[&str]) {
    let mut r: Vec<String> = vec!["on".into(), format!("#{digest}"), "resetchannels".into()];
    r.extend(patterns.iter().map(|p| p.to_string()));
    r.push("-@all".into());
    r.extend(commands.iter().map(|c| format!("+{c}")));
    push_line(file, name, &r);
}

/// A `spec.users` entry's rules, in the order Valkey applies them: state,
/// passwords, key and channel patterns, commands, then the raw permissions.
fn rules(u: &User) -> Vec<String> {
    let mut r = vec![if u.enabled { "on" } else { "off" }.to_string()];
    if u.resetpass {
        r.push("resetpass".into());
    }
    if u.nopass {
        r.push("nopass".into());
    } else {
        r.extend(u.password_hashes.iter().map(|h| format!("#{h}")));
    }
    if let Some(k) = &u.keys {
        r.extend(k.read_write.iter().map(|p| format!("~{p}")));
        r.extend(k.read_only.iter().map(|p| format!("%R~{p}")));
        r.extend(k.write_only.iter().map(|p| format!("%W~{p}")));
    }
    r.push("resetchannels".into());
    r.extend(u.channels.iter().map(|p| format!("&{p}")));
    r.extend(u.commands_allow.iter().map(|c| format!("+{c}")));
    r.extend(u.commands_deny.iter().map(|c| format!("-{c}")));
    if let Some(p) = u
        .permissions
        .as_deref()
        .map(str::trim)
        .filter(|p| !p.is_empty())
    {
        r.push(p.to_string());
    }
    r
}

fn push_line<S: AsRef<str>>(file: &mut String, name: &str, rules: &[S]) {
    file.push_str("user ");
    file.push_str(name);
    for rule in rules {
        file.push(' ');
        file.push_str(rule.as_ref());
    }
    file.push('\n');
}

#[cfg(test)]
mod tests {
    use super::*;
    use shardgate_contract::model::KeyPatterns;

    fn credentials() -> Credentials {
        Credentials {
            default_user: Some("d0".into()),
            operator: "o0".into(),
            replication: "r0".into(),
        }
    }

    fn user(name: &str) -> User {
        User {
            name: name.into(),
            enabled: true,
            password_hashes: vec!["h1".into(), "h2".into()],
            ..User::default()
        }
    }

    #[test]
    fn an_unlisted_default_user_gets_the_generated_password_and_everything() {
        let file = render(&Cluster::default(), &credentials(), &Server::Assumed);
        let lines: Vec<&str> = file.lines().collect();
        assert_eq!(lines[0], "user default on #d0 ~* &* +@all");
        assert!(lines[1].starts_with("user _operator on #o0 resetchannels -@all +auth "));
        assert!(lines[1].contains(" +cluster|migrateslots "), "{}", lines[1]);
        assert!(lines[1].ends_with(" +acl|getuser"), "{}", lines[1]);
        assert!(lines[2].starts_with("user _replication on #r0 resetchannels ~* &* -@all "));
        assert!(lines[2].contains(" +psync ") && lines[2].contains(" +cluster|syncslots "));
        // A slot migration's importer writes as this user; it reads nothing.
        assert!(lines[2].ends_with(" +@write"), "{}", lines[2]);
        assert!(!lines[2].contains("+@read") && !lines[2].contains("+@all"));
        assert_eq!(lines.len(), 3);
    }

    #[test]
    fn a_listed_default_user_replaces_the_generated_one() {
        let mut c = Cluster::default();
        c.users.push(User {
            commands_allow: vec!["@all".into()],
            ..user("default")
        });
        let file = render(&c, &credentials(), &Server::Assumed);
        assert!(!file.contains("#d0"), "{file}");
        assert_eq!(file.matches("user default ").count(), 1);
        assert!(
            file.ends_with("user default on #h1 #h2 resetchannels +@all\n"),
            "{file}"
        );
    }

    #[test]
    fn user_rules_follow_the_spec_table() {
        let cases: Vec<(User, &str)> = vec![
            (
                User {
                    keys: Some(KeyPatterns {
                        read_write: vec!["app:*".into()],
                        read_only: vec!["cfg:*".into()],
                        write_only: vec!["log:*".into()],
                    }),
                    channels: vec!["events".into()],
                    commands_allow: vec!["@read".into(), "set".into()],
                    commands_deny: vec!["flushall".into()],
                    permissions: Some(" +client|list ".into()),
                    ..user("app")
                },
                "user app on #h1 #h2 ~app:* %R~cfg:* %W~log:* resetchannels &events +@read +set -flushall +client|list",
            ),
            (
                User {
                    enabled: false,
                    ..user("off")
                },
                "user off off #h1 #h2 resetchannels",
            ),
            (
                User {
                    nopass: true,
                    resetpass: true,
                    ..user("open")
                },
                "user open on resetpass nopass resetchannels",
            ),
        ];
        for (u, want) in cases {
            let mut c = Cluster::default();
            c.users.push(u);
            let file = render(&c, &credentials(), &Server::Assumed);
            assert_eq!(file.lines().last().unwrap(), want);
        }
    }

    #[test]
    fn a_server_before_valkey_9_is_granted_only_what_it_has() {
        // (server, has the atomic-migration commands)
        for (server, want) in [
            (Server::parse("9.0.0"), true),
            (Server::Assumed, true),
            (Server::parse("8.1.8"), false),
            (Server::Unknown, false),
        ] {
            let file = render(&Cluster::default(), &credentials(), &server);
            for c in auth::SINCE_VALKEY_9 {
                assert_eq!(file.contains(&format!("+{c}")), want, "{server:?} {c}");
            }
            assert!(file.contains("+cluster|failover") && file.contains("+psync"));
        }
    }
}
