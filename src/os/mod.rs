//! The operating-system layer: every system call the crate makes itself, and the only module
//! with `unsafe` code or `libc` (a test below holds the rest of the crate to that). What it
//! offers is safe and named for what it does:
//!
//! - `socket`: a client connection's socket (`ClientSocket`, whose validity rule is said once,
//!   on the type) and what we ask of it: bytes taken and queued, a look ahead, non-blocking
//!   sends, the peer's state, the gentle and the abrupt end. socket2 makes the calls it offers.
//! - `accept`: which descriptor an accept returned, told exactly to the accepting thread (the
//!   program's own `accept4`; tiny_http_fork never hands its socket out).
//! - `poll`: waiting for sockets to become readable (`poll`), and an edge-triggered epoll.
//! - `thread`: connection threads started without a signal stack, named, and the scheduling
//!   and stack of each role a thread takes (`Role`).
//! - `process`: the allocator's room ahead and the descriptor table's size, set once at start.
//!
//! Every `unsafe` block states what it relies on in a `SAFETY` line. Linux only (as the
//! interfaces are: `TCP_INFO`, `SYS_accept4`, `SCHED_BATCH`, `MADV_DONTNEED`).

pub(crate) mod accept;
pub mod poll;
pub mod process;
pub mod socket;
pub mod thread;

pub use socket::{ClientSocket, Peer};

use std::io;

/// A libc call's result: `-1` is the error in `errno`, anything else the value.
fn cvt(rc: libc::c_int) -> io::Result<libc::c_int> {
    if rc == -1 {
        Err(io::Error::last_os_error())
    } else {
        Ok(rc)
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    /// Every `.rs` file under `dir`, with its path.
    fn sources(dir: &Path, out: &mut Vec<(String, String)>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                sources(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let text = std::fs::read_to_string(&path).unwrap();
                out.push((path.display().to_string(), text));
            }
        }
    }

    /// The code of a line: what comes before a `//` comment (a string holding `//` ends the
    /// code early, which can only hide a word, never invent one).
    fn code(line: &str) -> &str {
        line.split("//").next().unwrap_or("")
    }

    /// Whether `code` holds the keyword `unsafe` (not a word that contains it).
    fn has_unsafe(code: &str) -> bool {
        let word = |c: char| c.is_alphanumeric() || c == '_' || c == '-';
        code.match_indices("unsafe").any(|(at, _)| {
            !code[..at].ends_with(word) && !code[at + "unsafe".len()..].starts_with(word)
        })
    }

    /// `unsafe` and `libc::` appear only in this layer. The crate denies `unsafe_code`, and
    /// allows it on one item: this module (`lib.rs`), so no other module may allow it either.
    #[test]
    fn only_the_os_layer_uses_unsafe_or_libc() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let mut files = Vec::new();
        sources(&root, &mut files);
        let os = root.join("os").display().to_string();
        let mut found = Vec::new();
        for (path, text) in files.iter().filter(|(p, _)| !p.starts_with(&os)) {
            let lines: Vec<&str> = text.lines().collect();
            for (n, line) in lines.iter().enumerate() {
                let code = code(line);
                // The one allowance: on the item right below it, this module.
                let allowed = path.ends_with("src/lib.rs")
                    && code.trim() == "#[allow(unsafe_code)]"
                    && lines.get(n + 1).is_some_and(|l| l.trim() == "pub mod os;");
                if has_unsafe(code)
                    || (code.contains("allow(unsafe_code)") && !allowed)
                    || code.contains("libc::")
                {
                    found.push(format!("{path}:{}: {}", n + 1, line.trim()));
                }
            }
        }
        assert!(files.len() > 100, "the sources were not found");
        assert!(found.is_empty(), "outside src/os/:\n{}", found.join("\n"));
    }
}
