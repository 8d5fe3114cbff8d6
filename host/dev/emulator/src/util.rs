//! Small helpers: timestamps, UIDs, random name suffixes.

/// Current time as an RFC 3339 timestamp with second precision (the form of
/// `metav1.Time`).
pub(crate) fn now() -> String {
    let secs = jiff::Timestamp::now().as_second();
    jiff::Timestamp::from_second(secs)
        .map(|t| t.to_string())
        .unwrap_or_else(|_| "1970-01-01T00:00:00Z".into())
}

/// A random version-4 UUID.
pub(crate) fn new_uid() -> String {
    let mut b = [0u8; 16];
    b.iter_mut().for_each(|x| *x = fastrand::u8(..));
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let h: String = b.iter().map(|x| format!("{x:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &h[0..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..32]
    )
}

/// The 5-character suffix `generateName` appends.
pub(crate) fn name_suffix() -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    (0..5)
        .map(|_| ALPHABET[fastrand::usize(..ALPHABET.len())] as char)
        .collect()
}
