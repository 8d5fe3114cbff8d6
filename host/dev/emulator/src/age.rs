//! Ages as the API server's table printers write them: `duration.HumanDuration`
//! of the time since a timestamp ("45s", "3m20s", "5h", "12d", ...).

/// Seconds since the Unix epoch, now.
pub(crate) fn now() -> i64 {
    jiff::Timestamp::now().as_second()
}

/// The age of an RFC 3339 timestamp at `now` (seconds since the epoch), as
/// `translateTimestampSince` renders it: `<unknown>` for a missing (zero)
/// timestamp, `<invalid>` for one that does not parse.
pub(crate) fn since(timestamp: Option<&str>, now: i64) -> String {
    match timestamp.filter(|t| !t.is_empty()) {
        None => "<unknown>".into(),
        Some(t) => match t.parse::<jiff::Timestamp>() {
            Ok(ts) => human_duration(now - ts.as_second()),
            Err(_) => "<invalid>".into(),
        },
    }
}

/// `k8s.io/apimachinery/pkg/util/duration.HumanDuration`: a succinct
/// duration with about two significant units.
pub(crate) fn human_duration(seconds: i64) -> String {
    if seconds < -1 {
        return "<invalid>".into();
    }
    if seconds < 0 {
        return "0s".into();
    }
    if seconds < 60 * 2 {
        return format!("{seconds}s");
    }
    let minutes = seconds / 60;
    if minutes < 10 {
        let s = seconds % 60;
        return if s == 0 {
            format!("{minutes}m")
        } else {
            format!("{minutes}m{s}s")
        };
    }
    if minutes < 60 * 3 {
        return format!("{minutes}m");
    }
    let hours = seconds / 3600;
    if hours < 8 {
        let m = minutes % 60;
        return if m == 0 {
            format!("{hours}h")
        } else {
            format!("{hours}h{m}m")
        };
    }
    if hours < 48 {
        return format!("{hours}h");
    }
    let days = hours / 24;
    if hours < 24 * 8 {
        let h = hours % 24;
        return if h == 0 {
            format!("{days}d")
        } else {
            format!("{days}d{h}h")
        };
    }
    if hours < 24 * 365 * 2 {
        return format!("{days}d");
    }
    let years = days / 365;
    if hours < 24 * 365 * 8 {
        let dy = days % 365;
        return if dy == 0 {
            format!("{years}y")
        } else {
            format!("{years}y{dy}d")
        };
    }
    format!("{years}y")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn human_durations_match_apimachinery() {
        let cases = [
            (-5, "<invalid>"),
            (-1, "0s"),
            (0, "0s"),
            (119, "119s"),
            (120, "2m"),
            (200, "3m20s"),
            (600, "10m"),
            (179 * 60 + 59, "179m"),
            (3 * 3600, "3h"),
            (3 * 3600 + 25 * 60, "3h25m"),
            (8 * 3600, "8h"),
            (47 * 3600, "47h"),
            (2 * 86400, "2d"),
            (2 * 86400 + 5 * 3600, "2d5h"),
            (30 * 86400, "30d"),
            (2 * 365 * 86400, "2y"),
            (3 * 365 * 86400 + 10 * 86400, "3y10d"),
            (9 * 365 * 86400 + 10 * 86400, "9y"),
        ];
        for (secs, want) in cases {
            assert_eq!(human_duration(secs), want, "{secs}s");
        }
    }

    #[test]
    fn ages_of_timestamps() {
        let t0 = "2024-01-01T00:00:00Z"
            .parse::<jiff::Timestamp>()
            .unwrap()
            .as_second();
        assert_eq!(since(Some("2024-01-01T00:00:00Z"), t0 + 75), "75s");
        assert_eq!(since(Some("2024-01-01T00:00:00Z"), t0 + 3600), "60m");
        assert_eq!(since(None, t0), "<unknown>");
        assert_eq!(since(Some(""), t0), "<unknown>");
        assert_eq!(since(Some("yesterday"), t0), "<invalid>");
    }
}
