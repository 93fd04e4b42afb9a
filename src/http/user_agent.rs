//! A short description of a `User-Agent` header ("Firefox on Linux", "Safari on iOS", "curl")
//! for the list of a user's own sessions. Only the description is stored, never the header: it
//! is what a person recognises their devices by, and it holds nothing a client could use to
//! smuggle text into the page (at most 40 characters of a safe alphabet).
//!
//! A handful of substring rules, in the order that matters (Edge and Opera say "Chrome",
//! Chrome says "Safari", Android says "Linux"); anything else is its first product token.

/// The description of a header's value; "Unknown" without one.
pub fn describe(header: Option<&str>) -> String {
    let Some(ua) = header.map(str::trim).filter(|u| !u.is_empty()) else {
        return "Unknown".into();
    };
    match (browser(ua), os(ua)) {
        (Some(b), Some(o)) => format!("{b} on {o}"),
        (Some(b), None) => b.to_string(),
        (None, _) => product(ua),
    }
}

fn browser(ua: &str) -> Option<&'static str> {
    let has = |s: &str| ua.contains(s);
    Some(if has("Edg/") || has("EdgA/") || has("EdgiOS/") {
        "Edge"
    } else if has("OPR/") || has("Opera") {
        "Opera"
    } else if has("SamsungBrowser/") {
        "Samsung Internet"
    } else if has("Firefox/") || has("FxiOS/") {
        "Firefox"
    } else if has("Chrome/") || has("CriOS/") || has("Chromium/") {
        "Chrome"
    } else if has("Safari/") && has("Version/") {
        "Safari"
    } else {
        return None;
    })
}

fn os(ua: &str) -> Option<&'static str> {
    let has = |s: &str| ua.contains(s);
    Some(if has("iPhone") || has("iPad") || has("iPod") {
        "iOS"
    } else if has("Android") {
        "Android"
    } else if has("Windows") {
        "Windows"
    } else if has("CrOS") {
        "ChromeOS"
    } else if has("Macintosh") || has("Mac OS X") {
        "macOS"
    } else if has("Linux") || has("X11") {
        "Linux"
    } else {
        return None;
    })
}

/// The first product token without its version (`curl/8.5.0` → `curl`), kept to a safe
/// alphabet and 40 characters.
fn product(ua: &str) -> String {
    let token = ua.split([' ', '/']).next().unwrap_or("");
    let clean: String = token
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        .take(40)
        .collect();
    if clean.is_empty() {
        "Unknown".into()
    } else {
        clean
    }
}

#[cfg(test)]
mod tests {
    use super::describe;

    #[test]
    fn browsers_and_systems() {
        let cases = [
            ("Mozilla/5.0 (X11; Linux x86_64; rv:128.0) Gecko/20100101 Firefox/128.0", "Firefox on Linux"),
            ("Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/126.0.0.0 Safari/537.36", "Chrome on Windows"),
            ("Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/126.0.0.0 Safari/537.36 Edg/126.0.0.0", "Edge on Windows"),
            ("Mozilla/5.0 (Macintosh; Intel Mac OS X 14_5) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.5 Safari/605.1.15", "Safari on macOS"),
            ("Mozilla/5.0 (iPhone; CPU iPhone OS 17_5 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.5 Mobile/15E148 Safari/604.1", "Safari on iOS"),
            ("Mozilla/5.0 (iPhone; CPU iPhone OS 17_5 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) CriOS/126.0 Mobile/15E148 Safari/604.1", "Chrome on iOS"),
            ("Mozilla/5.0 (Linux; Android 14; Pixel 8) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/126.0.0.0 Mobile Safari/537.36", "Chrome on Android"),
            ("Mozilla/5.0 (X11; CrOS x86_64 14541.0.0) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/126.0.0.0 Safari/537.36", "Chrome on ChromeOS"),
            ("Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) HeadlessChrome/126.0.0.0 Safari/537.36", "Chrome on Linux"),
            ("curl/8.5.0", "curl"),
            ("python-requests/2.32", "python-requests"),
            ("<script>alert(1)</script>", "scriptalert1"),
            ("", "Unknown"),
            ("   ", "Unknown"),
            ("<>", "Unknown"),
        ];
        for (ua, want) in cases {
            assert_eq!(describe(Some(ua)), want, "{ua}");
        }
        assert_eq!(describe(None), "Unknown");
        assert!(describe(Some(&"a".repeat(10_000))).len() <= 40);
    }
}
