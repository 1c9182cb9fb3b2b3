//! A private `redis-server` on a free loopback port, for tests of the
//! remote tier's users (the `kiln` tool's `bake --remote`): a child
//! process, killed when dropped. Without `redis-server` on PATH,
//! [`RedisServer::start`] skips (or fails in CI, by [`crate::ci::required`]).

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A `redis-server` of one test: no persistence, loopback only.
pub struct RedisServer {
    child: Child,
    port: u16,
}

impl RedisServer {
    /// Starts a server and waits until it listens; `None` (after saying the
    /// test checked nothing) when `redis-server` cannot run here and this
    /// is not CI. `scripts/start-redis.sh --install` installs it.
    ///
    /// # Panics
    /// In CI when `redis-server` cannot run, and when a started server
    /// exits or does not listen within 20 s.
    pub fn start() -> Option<RedisServer> {
        let port = crate::ci::required(free_port(), "a free loopback port")?;
        let child = Command::new("redis-server")
            .args(["--bind", "127.0.0.1", "--port", &port.to_string()])
            .args(["--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(std::env::temp_dir())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn();
        let child = crate::ci::required(
            child,
            "redis-server (scripts/start-redis.sh --install installs it)",
        )?;
        let mut server = RedisServer { child, port };
        server.wait_until_listening();
        Some(server)
    }

    fn wait_until_listening(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(20);
        let address = SocketAddr::from(([127, 0, 0, 1], self.port));
        while TcpStream::connect_timeout(&address, Duration::from_millis(100)).is_err() {
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!("redis-server on port {} exited: {status}", self.port);
            }
            assert!(Instant::now() < deadline, "redis-server did not listen");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// `redis://127.0.0.1:<port>/0`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/0", self.port)
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A loopback port nothing listens on now.
fn free_port() -> std::io::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}
