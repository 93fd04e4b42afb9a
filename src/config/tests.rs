//! Unit tests of the configuration.
use super::*;

fn vars(pairs: &[(&str, &str)]) -> HashMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[test]
fn mailed_links_are_never_logged_with_smtp() {
    let db = ("DATABASE_URL", "postgres://a@b/c");
    let on = ("CONSOLED_MAIL_LOG_LINKS", "true");
    assert!(Config::from_vars(vars(&[db, on])).unwrap().mail_log_links);
    let smtp = ("CONSOLED_SMTP_URL", "smtp://127.0.0.1:2525");
    let err = Config::from_vars(vars(&[db, on, smtp])).unwrap_err();
    assert!(err.0.contains("CONSOLED_MAIL_LOG_LINKS"), "{err}");
    assert!(!Config::from_vars(vars(&[db, smtp])).unwrap().mail_log_links);
}

#[test]
fn missing_database_url_explains_make_run() {
    let err = Config::from_vars(vars(&[])).unwrap_err();
    assert!(err.0.contains("make run"), "{err}");
}

#[test]
fn defaults_match_the_decisions() {
    let c = Config::from_vars(vars(&[("DATABASE_URL", "postgres://a@b/c")])).unwrap();
    assert_eq!(c.listen.to_string(), "127.0.0.1:8080");
    assert_eq!(c.console_url, "http://127.0.0.1:8080");
    assert!(c.cookie_secure);
    assert_eq!(c.ping_interval, Duration::from_secs(20));
    assert_eq!(c.stream_queue, 256);
    assert_eq!(c.stream_history.changes, 20_000);
    assert_eq!(c.stream_history.age, Duration::from_secs(300));
    assert_eq!(c.session_idle, Duration::from_secs(12 * 3600));
    assert_eq!(c.session_max, Duration::from_secs(7 * 24 * 3600));
    assert!(c.github.is_none() && c.google.is_none());
}

#[test]
fn provider_needs_both_id_and_secret() {
    let c = Config::from_vars(vars(&[
        ("DATABASE_URL", "postgres://a@b/c"),
        ("CONSOLED_GITHUB_CLIENT_ID", "id"),
    ]))
    .unwrap();
    assert!(c.github.is_none());
}

#[test]
fn bad_values_are_named() {
    let err = Config::from_vars(vars(&[
        ("DATABASE_URL", "postgres://a@b/c"),
        ("CONSOLED_COOKIE_SECURE", "maybe"),
    ]))
    .unwrap_err();
    assert!(err.0.contains("CONSOLED_COOKIE_SECURE"));
}

#[test]
fn client_address_and_limit_settings() {
    let base = ("DATABASE_URL", "postgres://a@b/c");
    let c = Config::from_vars(vars(&[base])).unwrap();
    assert_eq!(c.client_source.header, "x-forwarded-for");
    assert!(c.client_source.trusted_proxies.is_empty());
    let c = Config::from_vars(vars(&[
        base,
        ("CONSOLED_CLIENT_IP_HEADER", " X-Real-IP "),
        ("CONSOLED_TRUSTED_PROXIES", "10.0.0.1, ::1"),
        ("CONSOLED_LOGIN_FAILURES_PER_CLIENT", "7"),
    ]))
    .unwrap();
    assert_eq!(c.client_source.header, "x-real-ip");
    assert_eq!(c.client_source.trusted_proxies.len(), 2);
    let kind = crate::limits::Kind::LoginFailuresPerClient;
    assert_eq!(c.limits.limit(kind), 7);
    for (name, value) in [
        ("CONSOLED_CLIENT_IP_HEADER", "not a header"),
        ("CONSOLED_LOGIN_FAILURES_PER_CLIENT", "0"),
        ("CONSOLED_DEVICE_COOKIE_FAILURES", "many"),
    ] {
        let err = Config::from_vars(vars(&[base, (name, value)])).unwrap_err();
        assert!(err.0.contains(name), "{err}");
    }
}

/// The per-instance stream cap has a name that says so; the old name still works (with a
/// warning at start: `checks`), and the new one wins when both are set.
#[test]
fn the_stream_cap_per_instance_is_read_by_its_new_and_its_old_name() {
    let base = ("DATABASE_URL", "postgres://a@b/c");
    let read = |pairs: &[(&str, &str)]| {
        let mut all = vec![base];
        all.extend_from_slice(pairs);
        Config::from_vars(vars(&all)).unwrap().max_streams
    };
    assert_eq!(read(&[]), None);
    assert_eq!(read(&[("CONSOLED_MAX_STREAMS_PER_INSTANCE", "7")]), Some(7));
    assert_eq!(read(&[("CONSOLED_MAX_STREAMS", "5")]), Some(5));
    let both = [
        ("CONSOLED_MAX_STREAMS", "5"),
        ("CONSOLED_MAX_STREAMS_PER_INSTANCE", "7"),
    ];
    assert_eq!(read(&both), Some(7));
    let err = Config::from_vars(vars(&[base, ("CONSOLED_MAX_STREAMS", "x")])).unwrap_err();
    assert!(err.0.contains("CONSOLED_MAX_STREAMS"), "{err}");
}

#[test]
fn debug_redacts_secrets() {
    let c = Config::from_vars(vars(&[
        ("DATABASE_URL", "postgres://u:hunter2@h/db"),
        ("CONSOLED_GOOGLE_CLIENT_ID", "id"),
        ("CONSOLED_GOOGLE_CLIENT_SECRET", "s3cret"),
    ]))
    .unwrap();
    let shown = format!("{c:?}");
    assert!(
        !shown.contains("hunter2") && !shown.contains("s3cret"),
        "{shown}"
    );
}

#[test]
fn origin_strips_path() {
    assert_eq!(
        origin_of("https://Console.example.com/app"),
        "https://console.example.com"
    );
    assert_eq!(origin_of("http://127.0.0.1:8080"), "http://127.0.0.1:8080");
}

#[test]
fn keys_are_32_bytes_of_base64_and_errors_never_echo_them() {
    let db = ("DATABASE_URL", "postgres://a@b/c");
    let key = "QUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUE=";
    let c = Config::from_vars(vars(&[db, ("CONSOLED_DATA_KEY", key)])).unwrap();
    assert_eq!(c.keys.data.unwrap().0, [b'A'; 32]);
    // Unpadded and URL-safe forms are the same key.
    let c = Config::from_vars(vars(&[
        db,
        ("CONSOLED_CSRF_KEY", key.trim_end_matches('=')),
    ]));
    assert_eq!(c.unwrap().keys.csrf.unwrap().0, [b'A'; 32]);
    for (name, value) in [
        ("CONSOLED_DATA_KEY", "c2hvcnQ="),
        ("CONSOLED_DATA_KEY", "not base64 at all!"),
        ("CONSOLED_CSRF_KEY", "c2hvcnQ="),
    ] {
        let err = Config::from_vars(vars(&[db, (name, value)])).unwrap_err();
        assert!(
            err.0.contains(name) && err.0.contains("32 random bytes"),
            "{err}"
        );
        assert!(!err.0.contains(value), "{err}");
    }
    let old_only = ("CONSOLED_DATA_KEY_OLD", key);
    let err = Config::from_vars(vars(&[db, old_only])).unwrap_err();
    assert!(err.0.contains("CONSOLED_DATA_KEY is not"), "{err}");
    let both = Config::from_vars(vars(&[db, ("CONSOLED_DATA_KEY", key), old_only])).unwrap();
    assert_eq!(both.keys.data_old.len(), 1);
    assert!(
        !format!("{:?}", both.keys).contains("65"),
        "Debug shows no key bytes"
    );
}

/// Every refusal names the variable, the value as given, and the form expected.
#[test]
fn every_parse_error_names_variable_value_and_form() {
    let base = ("DATABASE_URL", "postgres://a@b/c");
    for (name, value, form) in [
        ("CONSOLED_WORKERS", "many", "a whole number"),
        ("CONSOLED_WORKERS", "0", "at least 1"),
        ("CONSOLED_WORKERS", "-3", "a whole number"),
        ("CONSOLED_MAX_CONNECTIONS", "lots", "a whole number"),
        ("CONSOLED_LISTEN", "8080", "an address and port"),
        ("CONSOLED_CLIENT_SHARE", "half", "a number"),
        ("CONSOLED_CLIENT_SHARE", "1.5", "above 0 and at most 1"),
        ("CONSOLED_PING_SECONDS", "-1", "seconds from 0.01 to 3600"),
        ("CONSOLED_KEEPALIVE_SECONDS", "forever", "a number"),
        ("CONSOLED_COOKIE_SECURE", "maybe", "true or false"),
        (
            "CONSOLED_BASE_URL",
            "console.example.com",
            "an http:// or https:// URL",
        ),
        ("CONSOLED_CLIENT_IP_HEADER", "x real ip", "a header name"),
        ("CONSOLED_SESSION_IDLE_SECONDS", "0", "at least 1"),
        ("CONSOLED_LOGIN_FAILURES_PER_CLIENT", "0", "at least 1"),
        ("CONSOLED_SIGNUPS_PER_CLIENT", "ten", "a whole number"),
        (
            "CONSOLED_TRUSTED_PROXIES",
            "10.0.0.1, 10.0.0.0/33",
            "CIDR ranges",
        ),
        (
            "CONSOLED_TRUSTED_PROXIES",
            "proxy.internal",
            "not an IP address or range",
        ),
        ("CONSOLED_TRUSTED_PROXIES", "10.0.0.1/8", "host bits"),
        ("DATABASE_URL", "not a url", "a PostgreSQL URL"),
    ] {
        let err = Config::from_vars(vars(&[base, (name, value)]))
            .unwrap_err()
            .0;
        assert!(
            err.contains(&format!("{name}={value:?}")),
            "{name}={value}: the variable and value: {err}"
        );
        assert!(
            err.contains("expected") && err.contains(form),
            "{name}={value}: {err}"
        );
    }
}

#[test]
fn a_database_url_refused_never_shows_its_password() {
    for url in [
        "postgres://u:hunter2@h:notaport/db",
        "host=h password=hunter2 bogus",
    ] {
        let err = Config::from_vars(vars(&[("DATABASE_URL", url)]))
            .unwrap_err()
            .0;
        assert!(err.contains("DATABASE_URL"), "{err}");
        assert!(!err.contains("hunter2"), "{err}");
    }
}

/// Proxy fleets are ranges: IPv4 and IPv6 CIDR blocks, mixed with single addresses.
#[test]
fn trusted_proxies_take_ranges() {
    let c = Config::from_vars(vars(&[
        ("DATABASE_URL", "postgres://a@b/c"),
        (
            "CONSOLED_TRUSTED_PROXIES",
            "127.0.0.0/8, 10.1.2.3, fd00::/8, 2001:db8::1",
        ),
    ]))
    .unwrap();
    let source = &c.client_source;
    for proxy in [
        "127.0.0.1",
        "127.9.9.9",
        "10.1.2.3",
        "fd12::7",
        "2001:db8::1",
    ] {
        assert!(source.is_proxy(proxy.parse().unwrap()), "{proxy}");
    }
    for client in ["10.1.2.4", "128.0.0.1", "fe80::1", "2001:db8::2"] {
        assert!(!source.is_proxy(client.parse().unwrap()), "{client}");
    }
    // Behind the range, the client comes from the header, as behind a single proxy.
    let headers = [(
        "x-forwarded-for".to_string(),
        "203.0.113.9, 127.0.0.5".to_string(),
    )];
    let client = source.resolve(Some("127.0.0.1".parse().unwrap()), &headers);
    assert_eq!(client, Some("203.0.113.9".parse().unwrap()));
}

#[test]
fn urls_are_shown_without_their_password() {
    for (url, shown) in [
        ("postgres://u:hunter2@h/db", "postgres://u:<redacted>@h/db"),
        (
            "postgres://u:hun/ter2@h:5432/db",
            "postgres://u:<redacted>@h:5432/db",
        ),
        (
            "smtp://u:hunter2@h?tls=none",
            "smtp://u:<redacted>@h?tls=none",
        ),
        ("postgres://u@h/db", "postgres://u@h/db"),
        ("postgres://h/db", "postgres://h/db"),
    ] {
        assert_eq!(redact_url(url), shown);
    }
}
