//! Bind addresses: a wildcard, IPv6 and a concrete address all serve (a wildcard listener used to
//! close every connection, because the accepted socket's address never equals `0.0.0.0`).

mod common;

use std::io::{BufReader, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use common::*;

/// A server bound to `bind` (port 0) and the port it got.
fn serve_on(bind: &str) -> (consoled::Service, u16, tempdir::TempDir) {
    serve_with(bind, &[])
}

fn serve_with(bind: &str, env: &[(&str, &str)]) -> (consoled::Service, u16, tempdir::TempDir) {
    let mail_dir = tempdir::TempDir::new();
    let config = test_config(&mail_dir.0, env);
    let listener = consoled::server::bind(bind.parse().unwrap(), config.read_timeout).unwrap();
    let service = consoled::serve_on(config, listener).expect("start server");
    let port = service.addr().port();
    (service, port, mail_dir)
}

/// `GET /healthz` over a fresh connection to `addr`: the status, or the failure.
fn health(addr: SocketAddr) -> Result<u16, String> {
    let mut s =
        TcpStream::connect_timeout(&addr, Duration::from_secs(2)).map_err(|e| e.to_string())?;
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .map_err(|e| e.to_string())?;
    let mut reader = BufReader::new(s);
    let mut line = String::new();
    std::io::BufRead::read_line(&mut reader, &mut line).map_err(|e| e.to_string())?;
    line.split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("no status line: {line:?}"))
}

fn at(ip: &str, port: u16) -> SocketAddr {
    SocketAddr::new(ip.parse().unwrap(), port)
}

#[test]
fn a_wildcard_ipv4_bind_serves_every_local_address() {
    let (service, port, _dir) = serve_on("0.0.0.0:0");
    assert_eq!(health(at("127.0.0.1", port)), Ok(200));
    assert_eq!(health(at("127.0.0.2", port)), Ok(200));
    service.shutdown(Duration::from_secs(5));
}

#[test]
fn a_wildcard_ipv6_bind_serves_ipv6_and_ipv4() {
    let (service, port, _dir) = serve_on("[::]:0");
    assert_eq!(health(at("::1", port)), Ok(200));
    assert_eq!(health(at("127.0.0.1", port)), Ok(200));
    service.shutdown(Duration::from_secs(5));
}

#[test]
fn a_concrete_address_serves_only_itself() {
    let (service, port, _dir) = serve_on("127.0.0.3:0");
    assert_eq!(health(at("127.0.0.3", port)), Ok(200));
    assert!(health(at("127.0.0.1", port)).is_err());
    service.shutdown(Duration::from_secs(5));
}

/// Listening sockets on `port` (IPv4), from /proc/net/tcp (state 0A is LISTEN).
fn listening_sockets(port: u16) -> usize {
    let table = std::fs::read_to_string("/proc/net/tcp").unwrap();
    let local = format!(":{port:04X} ");
    table
        .lines()
        .skip(1)
        .filter(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            f.len() > 3 && format!("{} ", f[1]).ends_with(&local) && f[3] == "0A"
        })
        .count()
}

/// A process that can hold more connections than one kernel queue listens on several sockets of
/// its one address (a reconnect storm then fits in their queues), and every one of them is served:
/// connections spread over them by the kernel all get their answer.
#[test]
fn the_queues_of_several_listening_sockets_are_all_served() {
    let (service, port, _dir) = serve_with("127.0.0.1:0", &[("CONSOLED_MAX_CONNECTIONS", "10000")]);
    let queue: usize = std::fs::read_to_string("/proc/sys/net/core/somaxconn")
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    // As many sockets as the capacity's connections need queues (of the smaller of 4,096 and
    // somaxconn), at most 8.
    let connections = service.app.capacity.max_connections;
    let expected = connections.div_ceil(queue.min(4096)).clamp(1, 8);
    assert!(
        expected >= 2,
        "somaxconn {queue}, {connections} connections: one queue holds every connection"
    );
    assert_eq!(listening_sockets(port), expected);
    // 64 connections at once, from ports the kernel spreads over the sockets.
    let all: Vec<_> = (0..64)
        .map(|_| std::thread::spawn(move || health(at("127.0.0.1", port))))
        .collect();
    for h in all {
        assert_eq!(h.join().unwrap(), Ok(200));
    }
    service.shutdown(Duration::from_secs(5));
    assert_eq!(
        listening_sockets(port),
        0,
        "a listening socket outlived the server"
    );
}

/// The port is shared only within the process: a second server asking for a port in use is
/// refused, as without shared sockets.
#[test]
fn a_second_server_on_a_port_in_use_is_refused() {
    let (service, port, _dir) = serve_on("127.0.0.1:0");
    let again = consoled::server::bind(at("127.0.0.1", port), Duration::from_secs(5));
    assert_eq!(
        again.map(|_| ()).map_err(|e| e.kind()),
        Err(std::io::ErrorKind::AddrInUse)
    );
    assert_eq!(health(at("127.0.0.1", port)), Ok(200));
    service.shutdown(Duration::from_secs(5));
}
