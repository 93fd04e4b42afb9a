//! Cookie header parsing and `Set-Cookie` values.

/// The value of cookie `name` in one `Cookie:` header value, if present.
pub fn find(header: &str, name: &str) -> Option<String> {
    header.split(';').find_map(|pair| {
        let (k, v) = pair.split_once('=')?;
        (k.trim() == name).then(|| v.trim().trim_matches('"').to_string())
    })
}

/// Attributes of a cookie we set.
pub struct SetCookie<'a> {
    pub name: &'a str,
    pub value: &'a str,
    pub http_only: bool,
    pub same_site: &'a str,
    pub secure: bool,
    pub path: &'a str,
    /// `Some(0)` clears the cookie; `None` makes a browser-session cookie.
    pub max_age: Option<u64>,
}

impl SetCookie<'_> {
    pub fn render(&self) -> String {
        let mut s = format!("{}={}; Path={}", self.name, self.value, self.path);
        if let Some(age) = self.max_age {
            s.push_str(&format!("; Max-Age={age}"));
        }
        if self.http_only {
            s.push_str("; HttpOnly");
        }
        if self.secure {
            s.push_str("; Secure");
        }
        s.push_str(&format!("; SameSite={}", self.same_site));
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_cookies_among_others() {
        let h = "a=1; svc_session=abc; svc_csrf=\"q\"";
        assert_eq!(find(h, "svc_session").as_deref(), Some("abc"));
        assert_eq!(find(h, "svc_csrf").as_deref(), Some("q"));
        assert_eq!(find(h, "svc"), None);
        assert_eq!(find("garbage", "a"), None);
        assert_eq!(find("", "a"), None);
    }

    #[test]
    fn renders_attributes() {
        let c = SetCookie {
            name: "svc_session",
            value: "v",
            http_only: true,
            same_site: "Lax",
            secure: true,
            path: "/",
            max_age: Some(60),
        };
        assert_eq!(
            c.render(),
            "svc_session=v; Path=/; Max-Age=60; HttpOnly; Secure; SameSite=Lax"
        );
    }
}
