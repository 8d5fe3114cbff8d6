//! Syntax checks on the names and keys a spec carries (Kubernetes' own
//! rules for DNS labels, port names and label keys), and the limits behind
//! them.

/// Longest name of a DNS-1035 label, which Service and port names must be.
pub const MAX_LABEL: usize = 63;
/// Longest StatefulSet name: the pods' `controller-revision-hash` label is
/// `<name>-<hash of up to 10 characters>` and must fit a 63-character label.
pub const MAX_STATEFULSET_NAME: usize = 52;
/// Longest IANA service name (a container or Service port name).
pub const MAX_PORT_NAME: usize = 15;
/// Longest DNS name.
pub const MAX_DNS_NAME: usize = 253;

/// Number of decimal digits of `n`.
pub fn digits(n: u32) -> usize {
    n.checked_ilog10().unwrap_or(0) as usize + 1
}

/// A DNS-1123 label: `[a-z0-9]([-a-z0-9]*[a-z0-9])?`, at most 63 characters.
pub fn is_dns_label(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= MAX_LABEL
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        && b[0] != b'-'
        && b[b.len() - 1] != b'-'
}

/// A DNS-1123 subdomain: dot-separated labels, at most 253 characters.
pub fn is_dns_subdomain(s: &str) -> bool {
    s.len() <= MAX_DNS_NAME && s.split('.').all(is_dns_label)
}

/// An IANA service name as Kubernetes checks a port name: at most 15
/// characters of `[a-z0-9-]`, at least one letter, no leading, trailing or
/// doubled hyphen.
pub fn is_iana_service_name(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= MAX_PORT_NAME
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        && b.iter().any(|c| c.is_ascii_lowercase())
        && b[0] != b'-'
        && b[b.len() - 1] != b'-'
        && !s.contains("--")
}

/// A Kubernetes qualified name (label or annotation key): an optional
/// DNS-subdomain prefix and `/`, then a name of at most 63 characters of
/// `[A-Za-z0-9._-]` that starts and ends alphanumeric.
pub fn is_qualified_name(s: &str) -> bool {
    let (prefix, name) = match s.split_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, s),
    };
    if let Some(p) = prefix
        && !is_dns_subdomain(p)
    {
        return false;
    }
    let b = name.as_bytes();
    !b.is_empty()
        && b.len() <= MAX_LABEL
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
        && b[0].is_ascii_alphanumeric()
        && b[b.len() - 1].is_ascii_alphanumeric()
}

/// A CIDR block as Kubernetes takes it: an IPv4 or IPv6 address and a
/// prefix length that fits it (`203.0.113.0/24`, `2001:db8::/32`).
pub fn is_cidr(s: &str) -> bool {
    let Some((ip, bits)) = s.split_once('/') else {
        return false;
    };
    let Ok(bits) = bits.parse::<u8>() else {
        return false;
    };
    match ip.parse::<std::net::IpAddr>() {
        Ok(std::net::IpAddr::V4(_)) => bits <= 32,
        Ok(std::net::IpAddr::V6(_)) => bits <= 128,
        Err(_) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cidr_blocks() {
        for good in [
            "203.0.113.0/24",
            "0.0.0.0/0",
            "10.1.2.3/32",
            "2001:db8::/32",
        ] {
            assert!(is_cidr(good), "{good}");
        }
        for bad in [
            "203.0.113.0",
            "203.0.113.0/33",
            "2001:db8::/129",
            "x/8",
            "10.0.0.0/a",
            "",
        ] {
            assert!(!is_cidr(bad), "{bad}");
        }
    }
    use shardgate_contract::names::port_name;

    #[test]
    fn port_names_are_iana_service_names() {
        for n in [0, 1, 9, 10, 99_999_999] {
            assert!(is_iana_service_name(&port_name(n)), "{}", port_name(n));
        }
    }

    #[test]
    fn validators() {
        assert!(is_dns_label("a-0"));
        assert!(!is_dns_label("-a") && !is_dns_label("A") && !is_dns_label(""));
        assert!(!is_dns_label(&"a".repeat(64)));
        assert!(is_dns_subdomain("valkey.example.com"));
        assert!(!is_dns_subdomain("valkey..example.com") && !is_dns_subdomain("a_b.com"));
        assert!(is_iana_service_name("cluster-bus"));
        assert!(!is_iana_service_name("123") && !is_iana_service_name("a--b"));
        assert!(!is_iana_service_name("abcdefghijklmnop"));
        assert!(is_qualified_name("example.com/team") && is_qualified_name("team"));
        assert!(!is_qualified_name("Example.com/x") && !is_qualified_name("x/"));
        assert_eq!(digits(0), 1);
        assert_eq!(digits(9), 1);
        assert_eq!(digits(10), 2);
        assert_eq!(digits(u32::MAX), 10);
    }
}
