//! Unit tests of `sock`.
use super::*;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::fd::AsRawFd;

#[test]
fn counts_consumed_bytes_and_sends_without_blocking() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let mut client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
    let (mut server, _) = listener.accept().unwrap();
    let fd = server.as_raw_fd();
    client.write_all(b"hello world").unwrap();
    let mut buf = [0u8; 5];
    server.read_exact(&mut buf).unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(2);
    while consumed(fd).unwrap() != 5 && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(consumed(fd).unwrap(), 5);
    assert_eq!(send_now(fd, b"hi").unwrap(), 2);
    let mut got = [0u8; 2];
    client.read_exact(&mut got).unwrap();
    assert_eq!(&got, b"hi");
}

/// The kernel facts the stream watcher relies on, on a socket whose read side was shut down
/// as tiny_http does when its read half drops: an edge-triggered wake-up on a pipelined
/// request and on a close, and `peer` telling them apart.
#[test]
fn after_shut_rd_epoll_still_wakes_and_peer_tells_data_from_close() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let mut client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
    let (server, _) = listener.accept().unwrap();
    let fd = server.as_raw_fd();
    server.shutdown(Shutdown::Read).unwrap();
    let ep = Epoll::new().unwrap();
    ep.add(fd, 7).unwrap();
    let mut keys = Vec::new();
    ep.wait(&mut keys, Duration::from_millis(100)).unwrap();
    assert_eq!(keys, [7], "the first look");
    assert_eq!(peer(fd), Peer::Quiet);
    keys.clear();
    ep.wait(&mut keys, Duration::from_millis(100)).unwrap();
    assert!(keys.is_empty(), "edge-triggered: nothing new");

    client.write_all(b"GET / HTTP/1.1\r\n").unwrap();
    ep.wait(&mut keys, Duration::from_secs(2)).unwrap();
    assert_eq!(keys, [7], "woken by a pipelined request");
    assert_eq!(peer(fd), Peer::Sent);
    assert_eq!(peer(fd), Peer::Sent, "looking consumes nothing");

    keys.clear();
    client.shutdown(Shutdown::Write).unwrap();
    ep.wait(&mut keys, Duration::from_secs(2)).unwrap();
    assert_eq!(keys, [7], "woken by the FIN");
    assert_eq!(peer(fd), Peer::Gone);
    ep.remove(fd);
}

#[test]
fn a_reset_wakes_and_reads_as_gone() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
    let (server, _) = listener.accept().unwrap();
    let fd = server.as_raw_fd();
    server.shutdown(Shutdown::Read).unwrap();
    let ep = Epoll::new().unwrap();
    ep.add(fd, 1).unwrap();
    let mut keys = Vec::new();
    ep.wait(&mut keys, Duration::from_millis(100)).unwrap();
    keys.clear();
    socket2::SockRef::from(&client)
        .set_linger(Some(Duration::ZERO))
        .unwrap();
    drop(client);
    ep.wait(&mut keys, Duration::from_secs(2)).unwrap();
    assert_eq!(keys, [1]);
    assert_eq!(peer(fd), Peer::Gone);
    assert!(send_some(fd, b"x").is_err());
}

#[test]
fn abort_stops_a_reader_that_the_peer_keeps_feeding() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let mut client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
    let (server, _) = listener.accept().unwrap();
    let fd = server.as_raw_fd();
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
    abort(fd).unwrap();
    assert!(reader.join().unwrap() < Duration::from_secs(2));
    assert!(flood.join().unwrap() < Duration::from_secs(2));
}

/// The descriptor table holds the slots asked for (`FDSize` in /proc), the reservation leaves
/// no descriptor open, and more than the open-file limit is refused.
#[test]
fn reserving_descriptors_grows_the_table_once() {
    let fd_size = || {
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        let line = status.lines().find(|l| l.starts_with("FDSize:")).unwrap();
        line["FDSize:".len()..].trim().parse::<usize>().unwrap()
    };
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: a valid, writable rlimit.
    assert_eq!(
        unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) },
        0
    );
    let want = (limit.rlim_cur as usize).min(4096);
    reserve_descriptors(listener.as_raw_fd(), want).unwrap();
    assert!(fd_size() >= want, "FDSize {} < {want}", fd_size());
    // SAFETY: F_GETFD takes no pointers; it fails on a descriptor that is not open.
    let left = unsafe { libc::fcntl(want as libc::c_int - 1, libc::F_GETFD) };
    assert_eq!(left, -1, "the reservation left its descriptor open");
    assert!(reserve_descriptors(listener.as_raw_fd(), limit.rlim_cur as usize + 1).is_err());
}
