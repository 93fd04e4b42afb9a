//! Debian's nginx in front of the bench's server, as `contrib/nginx.conf` asks consoled (an
//! internal location that sends `GET /auth/check` the original request's headers and method):
//! `/guarded` answers `empty_gif` (from memory) once the check says 200, `/healthz` is proxied
//! as it is, so each costs nginx one request to consoled. (Not `return 204`: `return` answers in
//! nginx's rewrite phase, before `auth_request` would run.) As many workers as cores (Debian's
//! `worker_processes auto`), in the foreground, every file in a directory of its own.

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub struct Nginx {
    child: Child,
    dir: PathBuf,
    pub addr: SocketAddr,
}

impl Nginx {
    /// nginx in front of `upstream`, or `None` (said on stderr) when it is not installed.
    pub fn start(upstream: SocketAddr) -> Option<Nginx> {
        let bin = ["/usr/sbin/nginx", "/usr/local/sbin/nginx"]
            .iter()
            .map(Path::new)
            .find(|p| p.exists())?;
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let dir = std::env::temp_dir().join(format!("consoled-bench-nginx-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let conf = dir.join("nginx.conf");
        std::fs::write(&conf, config(&dir, upstream, port)).unwrap();
        let child = Command::new(bin)
            .arg("-p")
            .arg(&dir)
            .arg("-e")
            .arg(dir.join("error.log"))
            .arg("-c")
            .arg(&conf)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start nginx");
        let nginx = Nginx {
            child,
            dir,
            addr: format!("127.0.0.1:{port}").parse().unwrap(),
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        while TcpStream::connect(nginx.addr).is_err() {
            assert!(Instant::now() < deadline, "nginx did not start");
            std::thread::sleep(Duration::from_millis(50));
        }
        Some(nginx)
    }
}

fn config(dir: &Path, upstream: SocketAddr, port: u16) -> String {
    let d = dir.display();
    format!(
        "daemon off;\nworker_processes auto;\npid {d}/nginx.pid;\n\
         error_log {d}/error.log warn;\nevents {{ worker_connections 1024; }}\n\
         http {{\n  access_log off;\n  keepalive_requests 100000000;\n  client_body_temp_path {d}/body;\n  \
         proxy_temp_path {d}/proxy;\n  fastcgi_temp_path {d}/fastcgi;\n  \
         uwsgi_temp_path {d}/uwsgi;\n  scgi_temp_path {d}/scgi;\n  \
         upstream consoled {{ server {upstream}; keepalive 64; keepalive_timeout 4s; }}\n  \
         server {{\n    listen 127.0.0.1:{port};\n    proxy_http_version 1.1;\n    \
         proxy_set_header Connection \"\";\n    proxy_set_header X-Real-IP $remote_addr;\n    \
         location = /healthz {{ proxy_pass http://consoled; }}\n    \
         location = /_consoled/check {{\n      internal;\n      \
         proxy_pass http://consoled/auth/check;\n      proxy_method HEAD;\n      \
         proxy_pass_request_body off;\n      proxy_set_header Content-Length \"\";\n      \
         proxy_set_header X-Original-Method $request_method;\n      \
         proxy_set_header Connection \"\";\n      proxy_set_header X-Real-IP $remote_addr;\n    }}\n    \
         location = /guarded {{\n      auth_request /_consoled/check;\n      \
         auth_request_set $consoled_user $upstream_http_x_consoled_user;\n      \
         add_header X-Consoled-User $consoled_user;\n      empty_gif;\n    }}\n  }}\n}}\n"
    )
}

impl Drop for Nginx {
    fn drop(&mut self) {
        // The master stops its workers on SIGTERM (SIGKILL would leave them running).
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(self.child.id().to_string())
            .status();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
