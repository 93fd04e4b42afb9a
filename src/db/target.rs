//! A connection string (`DATABASE_URL`, `CONSOLED_DATABASE_DIRECT_URL`) read once at start into
//! what a connection needs: the `postgres` crate's settings and our TLS connector. Both of
//! libpq's forms are read, the URL (`postgres://u@h1:5432,h2:5432/db?sslmode=verify-full`) and
//! key-value pairs (`host=h1,h2 port=5432,5432 sslmode=verify-full`). The crate knows neither
//! `verify-ca`/`verify-full` nor `sslrootcert`, `sslcert` and `sslkey`, so those are taken out
//! here (`tls::Params`) and the rest is left to it; it reads several hosts and
//! `target_session_attrs=read-write` itself.

use postgres::Config as PgConfig;

use super::tls::{Mode, Params, Roots, Tls};

/// Where and how to connect.
#[derive(Clone)]
pub struct Target {
    pub pg: PgConfig,
    pub tls: Tls,
    pub mode: Mode,
}

/// The parameters taken out of a connection string before the crate reads it.
const OURS: [&str; 4] = ["sslmode", "sslrootcert", "sslcert", "sslkey"];

/// Why a connection string was refused: its form (the `postgres` crate's message), or its TLS
/// parameters and files (ours, naming the parameter).
#[derive(Debug)]
pub enum Refused {
    Form(String),
    Tls(String),
}

impl Target {
    /// Reads `text`; `password` (`CONSOLED_DATABASE_PASSWORD`) is used when the string has none.
    /// Errors never repeat the string (it may hold a password); they name what is wrong.
    pub fn parse(text: &str, password: Option<&str>) -> Result<Target, Refused> {
        let (rest, params) = split(text.trim()).map_err(|e| match text.parse::<PgConfig>() {
            // Not a connection string at all: the crate's own words.
            Err(form) => Refused::Form(form.to_string()),
            Ok(_) => Refused::Tls(e),
        })?;
        let mut pg: PgConfig = rest.parse().map_err(|e| Refused::Form(format!("{e}")))?;
        match (pg.get_password().is_some(), password) {
            (true, Some(_)) => {
                return Err(Refused::Form(
                    "it carries a password and CONSOLED_DATABASE_PASSWORD is set too: give the \
                     password in one place"
                        .into(),
                ))
            }
            (false, Some(p)) => {
                pg.password(p);
            }
            _ => {}
        }
        pg.ssl_mode(params.mode.pg());
        Ok(Target {
            pg,
            tls: Tls::new(&params).map_err(Refused::Tls)?,
            mode: params.mode,
        })
    }
}

/// The string without our parameters, and our parameters.
pub fn split(text: &str) -> Result<(String, Params), String> {
    let (rest, pairs) = if text.starts_with("postgres://") || text.starts_with("postgresql://") {
        split_url(text)?
    } else {
        split_pairs(text)?
    };
    let mut params = Params::default();
    for (key, value) in pairs {
        match key.as_str() {
            "sslmode" => params.mode = Mode::parse(&value)?,
            "sslrootcert" if value == "system" => params.roots = Some(Roots::System),
            "sslrootcert" => params.roots = Some(Roots::File(value.into())),
            "sslcert" => params.cert = Some(value.into()),
            _ => params.key = Some(value.into()),
        }
    }
    Ok((rest, params))
}

type Pairs = Vec<(String, String)>;

/// The URL form: our parameters are in the query, `&`-separated and percent-encoded.
fn split_url(url: &str) -> Result<(String, Pairs), String> {
    let Some((head, query)) = url.split_once('?') else {
        return Ok((url.to_string(), Vec::new()));
    };
    let mut kept = Vec::new();
    let mut ours = Vec::new();
    for part in query.split('&').filter(|p| !p.is_empty()) {
        let (key, value) = part.split_once('=').unwrap_or((part, ""));
        let key = decode(key)?;
        if OURS.contains(&key.as_str()) {
            ours.push((key, decode(value)?));
        } else {
            kept.push(part);
        }
    }
    let rest = if kept.is_empty() {
        head.to_string()
    } else {
        format!("{head}?{}", kept.join("&"))
    };
    Ok((rest, ours))
}

fn decode(s: &str) -> Result<String, String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = s
                .get(i + 1..i + 3)
                .ok_or("a % not followed by two hex digits")?;
            out.push(
                u8::from_str_radix(hex, 16).map_err(|_| "a % not followed by two hex digits")?,
            );
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| "a percent-encoded value that is not UTF-8".to_string())
}

/// The key-value form (`key = value`, a value in single quotes when it has spaces, `\` escaping
/// the next character): the pairs that are not ours are kept as they were written.
fn split_pairs(text: &str) -> Result<(String, Pairs), String> {
    let mut kept = Vec::new();
    let mut ours = Vec::new();
    let mut rest = text.trim_start();
    while !rest.is_empty() {
        let (key, value, len) = pair(rest)?;
        if OURS.contains(&key.as_str()) {
            ours.push((key, value));
        } else {
            kept.push(&rest[..len]);
        }
        rest = rest[len..].trim_start();
    }
    Ok((kept.join(" "), ours))
}

/// One `key=value` at the start of `s`: the key, the value unescaped, and its length in `s`.
fn pair(s: &str) -> Result<(String, String, usize), String> {
    let key_end = s
        .find(|c: char| c == '=' || c.is_whitespace())
        .ok_or_else(|| format!("{:?} has no value (key=value expected)", first_word(s)))?;
    let key = &s[..key_end];
    let after_key = s[key_end..].trim_start();
    let Some(after_eq) = after_key.strip_prefix('=') else {
        return Err(format!("{key:?} has no value (key=value expected)"));
    };
    let value_start = after_eq.trim_start();
    let mut value = String::new();
    let mut chars = value_start.char_indices();
    let quoted = value_start.starts_with('\'');
    if quoted {
        chars.next();
    }
    let mut end = value_start.len();
    let mut closed = !quoted;
    while let Some((i, c)) = chars.next() {
        match c {
            '\\' => {
                if let Some((_, escaped)) = chars.next() {
                    value.push(escaped);
                }
            }
            '\'' if quoted => {
                end = i + 1;
                closed = true;
                break;
            }
            c if !quoted && c.is_whitespace() => {
                end = i;
                break;
            }
            c => value.push(c),
        }
    }
    if !closed {
        return Err(format!("the value of {key:?} has no closing quote"));
    }
    let len = s.len() - value_start.len() + end;
    Ok((key.to_string(), value, len))
}

fn first_word(s: &str) -> &str {
    s.split_whitespace().next().unwrap_or(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn our_parameters_are_taken_out_of_both_forms() {
        let (rest, p) = split(
            "postgres://u:p@h1:5432,h2:5433/db?sslmode=verify-full&target_session_attrs=read-write\
             &sslrootcert=%2Fetc%2Fca.crt&sslcert=/c.crt&sslkey=/c.key",
        )
        .unwrap();
        assert_eq!(
            rest,
            "postgres://u:p@h1:5432,h2:5433/db?target_session_attrs=read-write"
        );
        assert_eq!(p.mode, Mode::VerifyFull);
        assert_eq!(p.roots, Some(Roots::File("/etc/ca.crt".into())));
        assert_eq!(p.cert, Some("/c.crt".into()));
        assert_eq!(p.key, Some("/c.key".into()));

        let (rest, p) = split(
            "host=h1,h2 port=5432,5433 sslmode = 'verify-ca' password='a b\\'c' \
             sslrootcert=system dbname=x",
        )
        .unwrap();
        assert_eq!(
            rest,
            "host=h1,h2 port=5432,5433 password='a b\\'c' dbname=x"
        );
        assert_eq!(p.mode, Mode::VerifyCa);
        assert_eq!(p.roots, Some(Roots::System));
        let pg: PgConfig = rest.parse().unwrap();
        assert_eq!(pg.get_password(), Some(&b"a b'c"[..]));
        assert_eq!(pg.get_hosts().len(), 2);
    }

    #[test]
    fn the_default_is_prefer_as_libpq() {
        let (rest, p) = split("postgres://u@h/db").unwrap();
        assert_eq!((rest.as_str(), p.mode), ("postgres://u@h/db", Mode::Prefer));
        let (_, p) = split("postgres://u@h/db?sslmode=disable").unwrap();
        assert_eq!(p.mode, Mode::Disable);
    }

    #[test]
    fn bad_tls_parameters_are_named() {
        for (text, says) in [
            ("postgres://h/db?sslmode=verify", "not one of disable"),
            ("host=h sslmode=allow", "sslmode=allow is not supported"),
            ("host=h sslmode='require", "no closing quote"),
            ("host=h sslmode", "no value"),
        ] {
            let e = split(text).unwrap_err();
            assert!(e.contains(says), "{text}: {e}");
        }
        for (text, says) in [
            ("postgres://h/db?sslmode=verify-full", "needs sslrootcert"),
            ("host=h sslmode=verify-ca", "needs sslrootcert"),
            (
                "host=h sslrootcert=/nonexistent/ca.crt sslmode=verify-ca",
                "/nonexistent/ca.crt",
            ),
            ("host=h sslcert=/c.crt", "sslcert and sslkey go together"),
        ] {
            let Some(Refused::Tls(e)) = Target::parse(text, None).err() else {
                panic!("{text} was not refused for its TLS parameters");
            };
            assert!(e.contains(says), "{text}: {e}");
        }
    }

    #[test]
    fn the_password_comes_from_one_place() {
        let t = Target::parse("postgres://u@h/db", Some("s3cret")).unwrap();
        assert_eq!(t.pg.get_password(), Some(&b"s3cret"[..]));
        let Some(Refused::Form(e)) = Target::parse("postgres://u:p@h/db", Some("s3cret")).err()
        else {
            panic!("two passwords were taken");
        };
        assert!(e.contains("one place") && !e.contains("s3cret"), "{e}");
    }
}
