//! Shared by the remote tier's tests: a private `redis-server` on a random
//! loopback port (a child process, killed on drop), a deliberately hostile
//! server ([`HostileServer`]: trickles, stalls, resets, oversized and
//! mistyped replies, which no real server produces), a deterministic CPU
//! "compiler", and the caches under test.
//!
//! Without `redis-server` on PATH the tests are skipped with a message,
//! except under `CI` (set and not `false`/`0`), where they fail.
#![allow(dead_code)]

use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use kiln_core::disk::{DiskCache, DiskConfig};
use kiln_core::{Artifact, ArtifactKind, Cache, Compiled, Key, KeyBuilder, Owner};
use kiln_redis::{RemoteConfig, RemoteStats, RemoteTier};
use kiln_test_support::child;

/// A `redis-server` of this test alone.
pub struct RedisServer {
    child: Option<Child>,
    port: u16,
    dir: tempfile::TempDir,
}

impl RedisServer {
    /// Starts a server, or returns `None` (after saying why) when
    /// `redis-server` is missing and this is not CI.
    pub fn start() -> Option<RedisServer> {
        RedisServer::start_with(&[])
    }

    /// [`RedisServer::start`] with extra command-line settings, e.g.
    /// `["--requirepass", "secret"]`.
    pub fn start_with(settings: &[&str]) -> Option<RedisServer> {
        installed(
            "redis-server",
            "scripts/start-redis.sh --install installs it",
        )?;
        Some(RedisServer::spawn(free_port(), settings, None))
    }

    /// Starts a server on `port` (panics if it does not answer).
    pub fn start_on(port: u16) -> RedisServer {
        RedisServer::spawn(port, &[], None)
    }

    /// A server that speaks only TLS, with a fresh certificate for
    /// `localhost` signed by a fresh CA (made with `openssl`), whose
    /// certificate is at [`RedisServer::certificate`].
    pub fn start_tls() -> Option<RedisServer> {
        installed(
            "redis-server",
            "scripts/start-redis.sh --install installs it",
        )?;
        installed("openssl", "install the openssl command-line tool")?;
        let dir = tempfile::tempdir().expect("temp dir");
        let openssl = |args: &[&str]| {
            let status = Command::new("openssl")
                .args(args)
                .current_dir(dir.path())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .expect("openssl runs");
            assert!(status.success(), "openssl {args:?} failed");
        };
        // A CA, and a certificate for localhost that it signs (P-256 keys).
        let ec = "-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes";
        let ca =
            format!("req -x509 {ec} -days 2 -subj /CN=kiln-test-ca -keyout ca.key -out ca.pem");
        let request = format!("req {ec} -subj /CN=localhost -keyout key.pem -out server.csr");
        openssl(&ca.split_whitespace().collect::<Vec<_>>());
        openssl(&request.split_whitespace().collect::<Vec<_>>());
        std::fs::write(
            dir.path().join("server.ext"),
            "subjectAltName=DNS:localhost\nbasicConstraints=CA:FALSE\n",
        )
        .expect("write the extensions");
        let sign = "x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 \
                    -extfile server.ext -out cert.pem";
        openssl(&sign.split_whitespace().collect::<Vec<_>>());
        let path = |name: &str| dir.path().join(name).display().to_string();
        let port = free_port();
        let settings = [
            "--port".to_owned(),
            "0".to_owned(),
            "--tls-port".to_owned(),
            port.to_string(),
            "--tls-cert-file".to_owned(),
            path("cert.pem"),
            "--tls-key-file".to_owned(),
            path("key.pem"),
            "--tls-ca-cert-file".to_owned(),
            path("ca.pem"),
            "--tls-auth-clients".to_owned(),
            "no".to_owned(),
        ];
        let settings: Vec<&str> = settings.iter().map(String::as_str).collect();
        Some(RedisServer::spawn(port, &settings, Some(dir)))
    }

    fn spawn(port: u16, settings: &[&str], dir: Option<tempfile::TempDir>) -> RedisServer {
        let dir = dir.unwrap_or_else(|| tempfile::tempdir().expect("temp dir"));
        let child = Command::new("redis-server")
            .args(["--bind", "127.0.0.1", "--port", &port.to_string()])
            .args(["--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(dir.path())
            .args(settings)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("redis-server starts");
        let mut server = RedisServer {
            child: Some(child),
            port,
            dir,
        };
        server.wait_until_listening();
        server
    }

    fn wait_until_listening(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(20);
        let address = std::net::SocketAddr::from(([127, 0, 0, 1], self.port));
        while std::net::TcpStream::connect_timeout(&address, Duration::from_millis(100)).is_err() {
            if let Some(child) = &mut self.child
                && let Ok(Some(status)) = child.try_wait()
            {
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

    /// The port it listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The certificate of the CA that signed a TLS server's certificate
    /// (see [`RedisServer::start_tls`]).
    pub fn certificate(&self) -> std::path::PathBuf {
        self.dir.path().join("ca.pem")
    }

    /// A plain connection, to look at or plant values.
    pub fn connection(&self) -> redis::RedisResult<redis::Connection> {
        redis::Client::open(self.url())?.get_connection_with_timeout(Duration::from_secs(5))
    }

    /// Kills the server and waits for it to be gone.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.stop();
    }
}

/// `Some(())` if `tool` runs; otherwise `None` after saying the test is
/// skipped, or a panic on CI.
fn installed(tool: &str, hint: &str) -> Option<()> {
    let runs = Command::new(tool)
        .arg("version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok();
    if runs {
        return Some(());
    }
    let why = format!("{tool} is not on PATH ({hint})");
    assert!(
        !kiln_test_support::ci::in_ci(),
        "{why}; on CI the remote tier's tests must run"
    );
    eprintln!("skipped: {why}");
    None
}

/// A port nothing listens on now.
pub fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind a loopback port");
    listener.local_addr().expect("its address").port()
}

/// The owner of every test entry.
pub fn owner() -> Owner {
    Owner::new("remote-test-compiler", "1.0", "cpu", ["-O2"]).expect("owner")
}

/// The key of test kernel `i`.
pub fn key(i: u64) -> Key {
    KeyBuilder::new("remote-test", 1)
        .field("i", &i)
        .expect("encodes")
        .finish()
}

/// The deterministic code of kernel `i`: a few KiB derived from `i`.
pub fn code(i: u64) -> Vec<u8> {
    let mut out = vec![0; 2048 + (i as usize % 7) * 512];
    blake3::Hasher::new()
        .update(&i.to_le_bytes())
        .finalize_xof()
        .fill(&mut out);
    out
}

/// "Compiles" kernel `i` on the CPU, counting compiles.
pub fn compile(i: u64, compiles: &AtomicUsize) -> Result<Compiled, kiln_core::BoxError> {
    compiles.fetch_add(1, Ordering::SeqCst);
    Ok(Compiled::new(format!("kernel{i}")).artifact(Artifact {
        kind: ArtifactKind::Object,
        entry_points: vec![format!("kernel{i}")],
        bytes: code(i),
    }))
}

/// Gets kernel `i` from `cache`, compiling it if needed, and checks its
/// bytes; then waits for the tier stores it queued (the cache runs them on
/// its background writer), since the tests look at the servers next.
pub fn get(cache: &Cache, i: u64, compiles: &AtomicUsize) -> kiln_core::Source {
    let hit = cache
        .get_or_compile(&owner(), &key(i), || compile(i, compiles))
        .expect("compiles");
    cache.flush();
    assert_eq!(
        hit.artifact(&ArtifactKind::Object),
        Some(&code(i)[..]),
        "kernel {i} has the wrong bytes"
    );
    hit.source()
}

/// Counters set by `set`, every other one zero.
pub fn counted(set: impl FnOnce(&mut RemoteStats)) -> RemoteStats {
    let mut stats = RemoteStats::default();
    set(&mut stats);
    stats
}

/// A remote tier on `url` with a long back-off, for tests against a live
/// server: its timeout (5 s) is for a loaded machine, where a reply can take
/// longer than half a second and one late reply would stop the tier
/// for the rest of the test. The tests of a server that stalls set their own.
pub fn remote(url: &str) -> RemoteTier {
    RemoteTier::open(
        RemoteConfig::new(url)
            .timeout(Duration::from_secs(5))
            .backoff(Duration::from_secs(3600))
            .write_unsigned(true),
    )
    .expect("a valid URL")
}

/// A cache with the disk tier in `dir` and the remote tier `remote` writing
/// through to it.
pub fn cache_with(dir: &Path, remote: RemoteTier) -> (Cache, Arc<DiskCache>) {
    let disk = Arc::new(DiskCache::open(DiskConfig::new(dir)).expect("disk cache opens"));
    let cache = Cache::new();
    cache.add_tier(Box::new(Arc::clone(&disk)));
    cache.add_tier(Box::new(remote.write_through(disk.clone())));
    (cache, disk)
}

/// A `tracing` subscriber that keeps the warnings (and prints them).
#[derive(Clone, Default)]
pub struct WarnCounter(pub Arc<std::sync::Mutex<Vec<String>>>);

impl WarnCounter {
    /// Warnings seen so far.
    pub fn count(&self) -> usize {
        self.warnings().len()
    }

    /// The warnings seen so far, as text (message and fields).
    pub fn warnings(&self) -> Vec<String> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }
}

impl tracing::Subscriber for WarnCounter {
    fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }
    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, event: &tracing::Event<'_>) {
        if *event.metadata().level() == tracing::Level::WARN {
            let text = format!("{event:?}");
            eprintln!("warning: {text}");
            self.0
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .push(text);
        }
    }
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}

/// The variable that names a child process's role.
const ROLE: &str = "KILN_REMOTE_TEST_ROLE";

/// This test binary, run again to execute its ignored test `child` in the
/// role `role` (see [`run_child_role`]).
pub fn child_process(role: &str) -> Command {
    let mut command = child::command(ROLE, role);
    // An unsigned writer: no trusted keys, stores allowed.
    command
        .env("KILN_REMOTE_TIMEOUT_MS", "2000")
        .env("KILN_REMOTE_WRITE", "1")
        .env_remove("KILN_TRUSTED_KEYS")
        .env_remove("KILN_SIGNING_KEY");
    command
}

/// Runs `command` and returns the text after `RESULT ` on its last line.
pub fn run_child(command: &mut Command) -> String {
    let stdout = child::run(command);
    child::result_line(&stdout)
        .map(|result| result.trim().to_owned())
        .unwrap_or_else(|| panic!("no RESULT line in:\n{stdout}"))
}

/// The child's work, by role:
///
/// - `compile`: a cache with the disk tier of `KILN_CACHE_DIR` and the
///   remote tier of `KILN_REMOTE_CACHE` (writing through to the disk) gets
///   kernels `0..KILN_REMOTE_TEST_KEYS`, checking each, and prints what
///   happened on a `RESULT` line.
/// - `oversized`: a remote tier reading values of at most
///   `KILN_REMOTE_TEST_CAP` bytes asks a [`HostileServer`] that announces a
///   1 GiB value and sends it; prints how much the process's peak resident
///   memory grew meanwhile (`peak_growth_kib`), and what the tier counted.
pub fn run_child_role() {
    let role = std::env::var(ROLE);
    match role.as_deref() {
        Ok("compile") => compile_role(),
        Ok("oversized") => oversized_role(),
        // Another module's child, or a plain `--ignored` run.
        Err(_) => {}
        Ok(other) => panic!("unknown {ROLE}={other}"),
    }
}

fn compile_role() {
    tracing::subscriber::set_global_default(WarnCounter::default()).expect("first subscriber");
    let cache = Cache::new();
    let settings = kiln_core::settings::Settings::process();
    let disk = Arc::new(DiskCache::from_settings(settings).expect("KILN_CACHE_DIR is usable"));
    cache.add_tier(Box::new(Arc::clone(&disk)));
    let tier =
        RemoteTier::from_settings(settings, &settings.trust).expect("KILN_REMOTE_CACHE is set");
    cache.add_tier(Box::new(tier.clone().write_through(disk)));
    let keys: u64 = std::env::var("KILN_REMOTE_TEST_KEYS")
        .expect("KILN_REMOTE_TEST_KEYS")
        .parse()
        .expect("a number");
    let compiles = AtomicUsize::new(0);
    for i in 0..keys {
        get(&cache, i, &compiles);
    }
    let stats = tier.stats();
    println!(
        "RESULT compiles={} tier_hits={} remote_hits={} remote_stored={} remote_failures={}",
        compiles.load(Ordering::SeqCst),
        cache.stats().hits_tier,
        stats.hits,
        stats.stored,
        stats.failures,
    );
}

fn oversized_role() {
    const ANNOUNCED: u64 = 1 << 30;
    let cap: usize = std::env::var("KILN_REMOTE_TEST_CAP")
        .expect("KILN_REMOTE_TEST_CAP")
        .parse()
        .expect("a number");
    let server = HostileServer::start(Answer::Ok, Answer::Oversized(ANNOUNCED));
    // A deadline far beyond what reading the cap takes: the cap ends the
    // read, not the deadline.
    let tier = RemoteTier::open(
        RemoteConfig::new(server.url())
            .timeout(Duration::from_secs(60))
            .backoff(Duration::from_secs(3600))
            .max_entry_bytes(cap)
            .write_unsigned(true),
    )
    .expect("a valid URL");
    let cache = Cache::new();
    cache.add_tier(Box::new(tier.clone()));
    let compiles = AtomicUsize::new(0);
    // Linux: writing 5 to clear_refs resets the peak to the current size.
    std::fs::write("/proc/self/clear_refs", "5").expect("reset the peak RSS");
    let before = peak_rss_kib();
    let source = get(&cache, 0, &compiles);
    let growth = peak_rss_kib().saturating_sub(before);
    let stats = tier.stats();
    println!(
        "RESULT peak_growth_kib={growth} source={source:?} compiles={} failures={}",
        compiles.load(Ordering::SeqCst),
        stats.failures
    );
}

/// The process's peak resident memory (`VmHWM`), in KiB.
fn peak_rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmHWM:"))
        .and_then(|kib| kib.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("a VmHWM line")
}

/// What a [`HostileServer`] answers a command with.
#[derive(Clone, Debug)]
pub enum Answer {
    /// `+OK`.
    Ok,
    /// These bytes, as they are (any RESP, or none).
    Raw(Vec<u8>),
    /// Nothing, ever: the connection stays open until the client closes it.
    Silence,
    /// A bulk string header announcing 100 bytes, then one byte every
    /// given interval, forever.
    Trickle(Duration),
    /// A bulk string header announcing this many bytes, then zeros as fast
    /// as the client takes them.
    Oversized(u64),
    /// A reset (RST): the connection is closed with the command unread.
    Reset,
    /// The answer, after a delay.
    After(Duration, Box<Answer>),
}

/// A deliberately hostile Redis server on a loopback port: it speaks just
/// enough RESP to read commands, answers the handshake (`AUTH`, `SELECT`)
/// with one [`Answer`] and every other command with another. Stops on drop.
pub struct HostileServer {
    port: u16,
    stop: Arc<std::sync::atomic::AtomicBool>,
    connections: Arc<AtomicUsize>,
}

impl HostileServer {
    /// Starts a server answering `AUTH` and `SELECT` with `handshake` and
    /// every other command with `command`.
    pub fn start(handshake: Answer, command: Answer) -> HostileServer {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind a loopback port");
        let port = listener.local_addr().expect("its address").port();
        listener.set_nonblocking(true).expect("non-blocking accept");
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let connections = Arc::new(AtomicUsize::new(0));
        let (stopped, accepted) = (Arc::clone(&stop), Arc::clone(&connections));
        std::thread::spawn(move || {
            while !stopped.load(Ordering::SeqCst) {
                match listener.accept() {
                    Ok((stream, _)) => {
                        accepted.fetch_add(1, Ordering::SeqCst);
                        let (handshake, command) = (handshake.clone(), command.clone());
                        let stopped = Arc::clone(&stopped);
                        std::thread::spawn(move || {
                            serve(stream, &handshake, &command, &stopped);
                        });
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(5)),
                }
            }
        });
        HostileServer {
            port,
            stop,
            connections,
        }
    }

    /// `redis://127.0.0.1:<port>/0`: no handshake, the first command is
    /// `GETRANGE`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/0", self.port)
    }

    /// A URL with a password and database 1: `AUTH` and `SELECT` first.
    pub fn url_with_handshake(&self) -> String {
        format!("redis://:pw@127.0.0.1:{}/1", self.port)
    }

    /// Connections accepted so far.
    pub fn connections(&self) -> usize {
        self.connections.load(Ordering::SeqCst)
    }
}

impl Drop for HostileServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

/// Serves one connection until the client leaves or the server stops.
fn serve(
    stream: std::net::TcpStream,
    handshake: &Answer,
    command: &Answer,
    stop: &std::sync::atomic::AtomicBool,
) {
    let _ = stream.set_read_timeout(Some(Duration::from_millis(50)));
    let mut reader = std::io::BufReader::new(stream);
    while let Some(name) = read_command(&mut reader, stop) {
        let answer = if name.eq_ignore_ascii_case("AUTH") || name.eq_ignore_ascii_case("SELECT") {
            handshake
        } else {
            command
        };
        if !answer_with(answer, reader.get_mut(), stop) {
            return;
        }
    }
}

/// Whether a read failed only because its timeout (the server's, to check
/// for the stop) passed.
fn timed_out(error: &std::io::Error) -> bool {
    matches!(
        error.kind(),
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
    )
}

/// Reads one RESP command (an array of bulk strings) and returns its name;
/// `None` when the client left, sent something else, or the server stops.
fn read_command(
    reader: &mut std::io::BufReader<std::net::TcpStream>,
    stop: &std::sync::atomic::AtomicBool,
) -> Option<String> {
    use std::io::{BufRead, Read};
    let line = |reader: &mut std::io::BufReader<std::net::TcpStream>| {
        let mut line = Vec::new();
        while !line.ends_with(b"\r\n") {
            match reader.read_until(b'\n', &mut line) {
                Ok(0) => return None,
                Ok(_) => {}
                Err(e) if timed_out(&e) && !stop.load(Ordering::SeqCst) => {}
                Err(_) => return None,
            }
        }
        Some(String::from_utf8_lossy(&line).trim_end().to_owned())
    };
    let count: usize = line(reader)?.strip_prefix('*')?.parse().ok()?;
    let mut name = None;
    for _ in 0..count {
        let len: usize = line(reader)?.strip_prefix('$')?.parse().ok()?;
        let mut arg = vec![0; len + 2];
        let mut got = 0;
        while got < arg.len() {
            match reader.read(&mut arg[got..]) {
                Ok(0) => return None,
                Ok(n) => got += n,
                Err(e) if timed_out(&e) && !stop.load(Ordering::SeqCst) => {}
                Err(_) => return None,
            }
        }
        name.get_or_insert_with(|| String::from_utf8_lossy(&arg[..len]).into_owned());
    }
    name
}

/// Answers one command on `stream`; `false` when the connection is over
/// (the client left, the answer ends it, or the server stops).
fn answer_with(
    answer: &Answer,
    stream: &mut std::net::TcpStream,
    stop: &std::sync::atomic::AtomicBool,
) -> bool {
    use std::io::{Read, Write};
    let stopped = || stop.load(Ordering::SeqCst);
    match answer {
        Answer::Ok => stream.write_all(b"+OK\r\n").is_ok(),
        Answer::Raw(bytes) => stream.write_all(bytes).is_ok(),
        Answer::Silence => {
            // Until the client closes (or the server stops).
            let mut sink = [0; 1024];
            loop {
                match stream.read(&mut sink) {
                    Ok(0) => return false,
                    Ok(_) => {}
                    Err(e) if timed_out(&e) && !stopped() => {}
                    Err(_) => return false,
                }
            }
        }
        Answer::Trickle(every) => {
            if stream.write_all(b"$100\r\n").is_err() {
                return false;
            }
            // Past the announced 100 bytes too: forever, until the client
            // closes (a write to a closed connection fails).
            while !stopped() {
                if stream.write_all(b"x").is_err() {
                    return false;
                }
                std::thread::sleep(*every);
            }
            false
        }
        Answer::Oversized(announced) => {
            if write!(stream, "${announced}\r\n").is_err() {
                return false;
            }
            let chunk = vec![0u8; 64 << 10];
            let mut sent = 0u64;
            while sent < *announced && !stopped() {
                let n = chunk
                    .len()
                    .min(usize::try_from(announced - sent).unwrap_or(usize::MAX));
                if stream.write_all(&chunk[..n]).is_err() {
                    return false;
                }
                sent += n as u64;
            }
            stream.write_all(b"\r\n").is_ok()
        }
        Answer::Reset => {
            reset(stream);
            false
        }
        Answer::After(delay, answer) => {
            std::thread::sleep(*delay);
            answer_with(answer, stream, stop)
        }
    }
}

/// Closes `stream` with a reset (RST) instead of an orderly close: linger
/// on, with a zero timeout. The stream is shut down when dropped.
fn reset(stream: &std::net::TcpStream) {
    use std::os::fd::AsRawFd;
    let linger = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    // SAFETY: `setsockopt` reads `size_of::<linger>()` bytes at a pointer
    // to a live `linger` value, on a file descriptor `stream` owns and
    // keeps open for the call.
    let set = unsafe {
        libc::setsockopt(
            stream.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            std::ptr::from_ref(&linger).cast(),
            std::mem::size_of::<libc::linger>() as libc::socklen_t,
        )
    };
    assert_eq!(set, 0, "SO_LINGER");
}
