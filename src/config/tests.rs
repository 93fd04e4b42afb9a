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
