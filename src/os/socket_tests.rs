//! Unit tests of `os::socket` (and of the epoll the stream watcher uses, on such sockets).
use super::*;
use crate::os::poll::Epoll;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};

/// The `ClientSocket` of a stream this test holds (and so keeps open).
fn client_socket(stream: &TcpStream) -> ClientSocket {
    ClientSocket::accepted(stream.as_raw_fd())
}

/// A loopback connection: the client's end, the server's end, and the server end's
/// `ClientSocket`.
fn connected() -> (TcpStream, TcpStream, ClientSocket) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
    let (server, _) = listener.accept().unwrap();
    let fd = client_socket(&server);
    (client, server, fd)
}

#[test]
fn counts_consumed_bytes_and_sends_without_blocking() {
    let (mut client, mut server, fd) = connected();
    client.write_all(b"hello world").unwrap();
    let mut buf = [0u8; 5];
    server.read_exact(&mut buf).unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(2);
    while fd.consumed().unwrap() != 5 && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(fd.consumed().unwrap(), 5);
    assert_eq!(fd.send_now(b"hi").unwrap(), 2);
    let mut got = [0u8; 2];
    client.read_exact(&mut got).unwrap();
    assert_eq!(&got, b"hi");
}

/// The kernel facts the stream watcher relies on, on a socket whose read side was shut down
/// as tiny_http does when its read half drops: an edge-triggered wake-up on a pipelined
/// request and on a close, and `peer` telling them apart.
#[test]
fn after_shut_rd_epoll_still_wakes_and_peer_tells_data_from_close() {
    let (mut client, server, fd) = connected();
    server.shutdown(Shutdown::Read).unwrap();
    let ep = Epoll::new().unwrap();
    ep.add(fd.as_fd(), 7).unwrap();
    let mut keys = Vec::new();
    ep.wait(&mut keys, Duration::from_millis(100)).unwrap();
    assert_eq!(keys, [7], "the first look");
    assert_eq!(fd.peer(), Peer::Quiet);
    keys.clear();
    ep.wait(&mut keys, Duration::from_millis(100)).unwrap();
    assert!(keys.is_empty(), "edge-triggered: nothing new");

    client.write_all(b"GET / HTTP/1.1\r\n").unwrap();
    ep.wait(&mut keys, Duration::from_secs(2)).unwrap();
    assert_eq!(keys, [7], "woken by a pipelined request");
    assert_eq!(fd.peer(), Peer::Sent);
    assert_eq!(fd.peer(), Peer::Sent, "looking consumes nothing");

    keys.clear();
    client.shutdown(Shutdown::Write).unwrap();
    ep.wait(&mut keys, Duration::from_secs(2)).unwrap();
    assert_eq!(keys, [7], "woken by the FIN");
    assert_eq!(fd.peer(), Peer::Gone);
    ep.remove(fd.as_fd());
}

#[test]
fn a_reset_wakes_and_reads_as_gone() {
    let (client, server, fd) = connected();
    server.shutdown(Shutdown::Read).unwrap();
    let ep = Epoll::new().unwrap();
    ep.add(fd.as_fd(), 1).unwrap();
    let mut keys = Vec::new();
    ep.wait(&mut keys, Duration::from_millis(100)).unwrap();
    keys.clear();
    socket2::SockRef::from(&client)
        .set_linger(Some(Duration::ZERO))
        .unwrap();
    drop(client);
    ep.wait(&mut keys, Duration::from_secs(2)).unwrap();
    assert_eq!(keys, [1]);
    assert_eq!(fd.peer(), Peer::Gone);
    assert!(fd.send_some(b"x").is_err());
}

#[test]
fn abort_stops_a_reader_that_the_peer_keeps_feeding() {
    let (mut client, server, fd) = connected();
    let flood = std::thread::spawn(move || {
        let chunk = [b'x'; 4096];
        let t = std::time::Instant::now();
        while client.write_all(&chunk).is_ok() && t.elapsed() < Duration::from_secs(10) {}
        t.elapsed()
    });
    let reader = std::thread::spawn(move || {
        let mut server = server;
        let mut buf = [0u8; 1024];
        let t = std::time::Instant::now();
        loop {
            match server.read(&mut buf) {
                Ok(0) | Err(_) => return t.elapsed(),
                Ok(_) if t.elapsed() > Duration::from_secs(10) => return t.elapsed(),
                Ok(_) => {}
            }
        }
    });
    std::thread::sleep(Duration::from_millis(200));
    // shutdown() alone would not stop this reader: data keeps arriving.
    fd.abort().unwrap();
    assert!(reader.join().unwrap() < Duration::from_secs(2));
    assert!(flood.join().unwrap() < Duration::from_secs(2));
}

/// A client that takes nothing while our bytes wait: once the user time-out passes, the kernel
/// gives the connection up, and `peer` says so apart from a close or a reset (a stream ends it as
/// `stalled`, not `client_gone`).
#[test]
fn a_connection_the_kernel_timed_out_reads_as_timed_out() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let client = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    client.set_recv_buffer_size(4096).unwrap();
    client
        .connect(&listener.local_addr().unwrap().into())
        .unwrap();
    let (server, _) = listener.accept().unwrap();
    let fd = client_socket(&server);
    fd.set_send_buffer(4096).unwrap();
    fd.set_user_timeout(Duration::from_millis(300)).unwrap();
    // Fill both buffers: the client's window closes and our last bytes wait.
    let chunk = [b'x'; 1024];
    while fd.send_some(&chunk).unwrap() > 0 {}
    assert_eq!(fd.peer(), Peer::Quiet);
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let mut seen = fd.peer();
    while seen == Peer::Quiet && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
        seen = fd.peer();
    }
    assert_eq!(seen, Peer::TimedOut);
    drop(client);
}

/// `consumed_past` answers as `consumed() > n` does, with the kernel's count alone when it has
/// received no more than `n` (what a stream's request on its own leaves).
#[test]
fn consumed_past_agrees_with_consumed() {
    let (mut client, mut server, fd) = connected();
    client.write_all(b"hello world").unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(2);
    while fd.queued().unwrap() != 11 && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    let mut buf = [0u8; 5];
    server.read_exact(&mut buf).unwrap();
    for n in [0, 4, 5, 6, 11, 12] {
        assert_eq!(
            fd.consumed_past(n).unwrap(),
            fd.consumed().unwrap() > n,
            "{n}"
        );
    }
    assert!(fd.consumed_past(4).unwrap());
    assert!(!fd.consumed_past(5).unwrap());
    assert!(!fd.consumed_past(11).unwrap());
}
