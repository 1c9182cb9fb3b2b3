//! The connection to the server: a small pool of connections, every
//! operation bounded by one deadline and every reply by a byte cap,
//! failures turned into back-off.
//!
//! The server is untrusted, so the connection is this module's own: a
//! socket (TCP, TLS over TCP through rustls, or a Unix socket) whose every
//! read and write is given the time left until the operation's deadline
//! ([`Bounded`]), and a reader that hands the reply parser at most the
//! bytes the answer may take ([`Capped`]). The redis crate does the
//! protocol: it parses the URL, encodes each command
//! ([`redis::Cmd::get_packed_command`]) and decodes each reply
//! ([`redis::Parser`]), reading through those two bounds. So, whatever the
//! server sends or withholds:
//!
//! - an operation (resolving the host, connecting, TLS, `AUTH`, `SELECT`,
//!   the command and its reply, and one retry on a new connection) ends by
//!   one deadline, [`RemoteConfig::timeout`] after it started: a server
//!   that trickles bytes, or answers the handshake late, cannot stretch it;
//! - a reply is read up to its cap and no further ([`Remote::get`]: the
//!   value limit plus the framing; other replies: [`SHORT_REPLY`]), and an
//!   aggregate (array, map, set, ...), which no command sent here is
//!   answered with, is refused at its first byte, before the parser
//!   allocates anything for it. The parser buffers at most the cap (in
//!   8 KiB reads, doubling its buffer), then copies the value once: a
//!   reply costs a small multiple of the cap, never of what the server
//!   announced.
//!
//! Host names are resolved on a helper thread that is waited for until the
//! deadline (the system resolver has no timeout of its own); loading the
//! system's TLS roots (once, on the first TLS connection) is local I/O and
//! not bounded. The client speaks RESP2 (`AUTH`, `SELECT`, `GETRANGE`,
//! `SET`): the URL's `protocol` setting is not used.

use std::io::{self, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream, ToSocketAddrs};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::{Duration, Instant};

use redis::{Client, ConnectionAddr, ErrorKind, RedisError, Value};

use super::config::RemoteConfig;
use super::health::Health;
use crate::Error;

/// Idle connections kept for reuse; more are opened under load and closed
/// after use.
const MAX_IDLE: usize = 8;

/// The most bytes read of a reply other than a value (`+OK`, an error, an
/// integer): error messages are short.
pub(super) const SHORT_REPLY: usize = 4 << 10;

/// The bytes a bulk-string reply adds to its value: `$`, up to 20 digits,
/// and two line ends.
const BULK_FRAMING: usize = 32;

/// Why an operation did not reach an answer.
#[derive(Debug)]
pub(super) enum Unanswered {
    /// The tier is backing off after a failure: the server was not asked.
    BackingOff,
    /// The server failed (already reported through [`Health`]): why.
    Failed(Box<Error>),
}

/// How an operation failed.
enum Failure {
    /// The server is not usable now: it could not be reached, the
    /// handshake failed, the deadline passed, the connection broke, or the
    /// reply was not a possible answer (wrong type, over its cap, not
    /// RESP). The tier backs off.
    Outage(RedisError),
    /// The server answered the command with an error reply (`WRONGTYPE`
    /// for one key, `OOM` for one write): a fast answer about one
    /// command, not an outage. No back-off.
    Refused(RedisError),
}

impl From<RedisError> for Failure {
    fn from(error: RedisError) -> Failure {
        Failure::Outage(error)
    }
}

impl From<io::Error> for Failure {
    fn from(error: io::Error) -> Failure {
        Failure::Outage(error.into())
    }
}

/// A Redis server, asked through short-lived or pooled connections.
pub(super) struct Remote {
    client: Client,
    server: String,
    timeout: Duration,
    idle: Mutex<Vec<Connection>>,
    health: Health,
    /// The TLS client configuration, made on the first TLS connection (or
    /// why it could not be).
    tls: OnceLock<Result<Arc<rustls::ClientConfig>, String>>,
}

impl Remote {
    /// A client for the server of `config`. Opens no connection.
    ///
    /// # Errors
    /// [`Error::RemoteUrl`] when the URL is not one the client accepts.
    pub(super) fn new(config: &RemoteConfig) -> Result<Remote, Error> {
        let server = config.server();
        if config.url().starts_with("rediss:") || config.url().starts_with("valkeys:") {
            // rustls needs a process-wide crypto provider; it cannot pick one
            // itself when another crate enables a second. Installs ring's
            // unless the program installed one: an error means it did.
            let _ = rustls::crypto::ring::default_provider().install_default();
        }
        let url_error = |source| Error::RemoteUrl {
            url: server.clone(),
            source: Box::new(source),
        };
        let client = Client::open(config.url()).map_err(url_error)?;
        if let ConnectionAddr::TcpTls { insecure: true, .. } = client.get_connection_info().addr() {
            return Err(url_error(RedisError::from((
                ErrorKind::InvalidClientConfig,
                "TLS without certificate checks (#insecure) is not supported",
            ))));
        }
        Ok(Remote {
            client,
            server,
            timeout: config.timeout,
            idle: Mutex::new(Vec::new()),
            health: Health::new(config.backoff),
            tls: OnceLock::new(),
        })
    }

    /// The server's URL, password removed.
    pub(super) fn server(&self) -> &str {
        &self.server
    }

    /// The value of `name`, or `None` when there is none (or it is empty),
    /// reading at most `limit + 1` bytes of it (`GETRANGE name 0 limit`):
    /// a longer answer means the value is larger than `limit`. The reply
    /// is read up to that size plus its framing and no further, whatever
    /// the server sends: more is an outage.
    pub(super) fn get(&self, name: &str, limit: usize) -> Result<Option<Vec<u8>>, Unanswered> {
        let mut command = redis::cmd("GETRANGE");
        command.arg(name).arg(0).arg(limit);
        let cap = limit.saturating_add(1 + BULK_FRAMING);
        let value = self.run(
            || format!("GETRANGE {name}"),
            |con| match con.request(&command, cap)? {
                Value::BulkString(bytes) => Ok(bytes),
                Value::ServerError(error) => Err(Failure::Refused(error.into())),
                other => Err(unexpected("GETRANGE", &other)),
            },
        )?;
        Ok(Some(value).filter(|value| !value.is_empty()))
    }

    /// `SET name value`.
    pub(super) fn set(&self, name: &str, value: &[u8]) -> Result<(), Unanswered> {
        let mut command = redis::cmd("SET");
        command.arg(name).arg(value);
        self.run(
            || format!("SET {name}"),
            |con| match con.request(&command, SHORT_REPLY)? {
                Value::Okay => Ok(()),
                Value::ServerError(error) => Err(Failure::Refused(error.into())),
                other => Err(unexpected("SET", &other)),
            },
        )
    }

    /// Runs `op` on a connection, all of it (connecting included) by one
    /// deadline, [`RemoteConfig::timeout`] from now. On failure the
    /// connection is dropped (a late reply could otherwise answer the next
    /// command) and, unless the server merely refused the command, the
    /// tier backs off.
    fn run<T>(
        &self,
        action: impl FnOnce() -> String,
        op: impl Fn(&mut Connection) -> Result<T, Failure>,
    ) -> Result<T, Unanswered> {
        if !self.health.may_try() {
            return Err(Unanswered::BackingOff);
        }
        let deadline = Instant::now() + self.timeout;
        let result = match self.idle_connection() {
            // A pooled connection may have been closed by the server since
            // (restart, idle timeout): then once more on a new connection,
            // by the same deadline.
            Some(mut con) => {
                con.stream.set_deadline(deadline);
                match op(&mut con) {
                    Err(Failure::Outage(error))
                        if error.is_connection_dropped() && !error.is_timeout() =>
                    {
                        self.on_new_connection(deadline, &op)
                    }
                    Ok(answer) => {
                        self.put_back(con);
                        Ok(answer)
                    }
                    Err(failure) => Err(failure),
                }
            }
            None => self.on_new_connection(deadline, &op),
        };
        match result {
            Ok(answer) => {
                self.health.succeeded(&self.server);
                Ok(answer)
            }
            Err(failure) => {
                let (source, back_off) = match failure {
                    Failure::Outage(source) => (source, true),
                    Failure::Refused(source) => (source, false),
                };
                let error = Error::RemoteUnavailable {
                    server: self.server.clone(),
                    action: action(),
                    source: Box::new(source),
                };
                if back_off {
                    self.health.failed(&error);
                } else {
                    self.health.refused(&error);
                }
                Err(Unanswered::Failed(Box::new(error)))
            }
        }
    }

    fn idle_connection(&self) -> Option<Connection> {
        self.idle
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .pop()
    }

    /// Runs `op` on a new connection (connect, TLS, `AUTH` and `SELECT`,
    /// then `op`, all by `deadline`), kept for reuse if it succeeds.
    fn on_new_connection<T>(
        &self,
        deadline: Instant,
        op: impl FnOnce(&mut Connection) -> Result<T, Failure>,
    ) -> Result<T, Failure> {
        let mut con = self.connect(deadline)?;
        let answer = op(&mut con)?;
        self.put_back(con);
        Ok(answer)
    }

    /// A new connection, handshake done, by `deadline`.
    fn connect(&self, deadline: Instant) -> Result<Connection, Failure> {
        let info = self.client.get_connection_info();
        let stream = match info.addr() {
            ConnectionAddr::Tcp(host, port) => {
                Stream::Tcp(Bounded::new(connect_tcp(host, *port, deadline)?, deadline))
            }
            ConnectionAddr::TcpTls { host, port, .. } => {
                let config = self.tls_config()?;
                let name = rustls::pki_types::ServerName::try_from(host.clone())
                    .map_err(RedisError::from)?;
                let tls = rustls::ClientConnection::new(config, name).map_err(|error| {
                    RedisError::from((ErrorKind::Io, "TLS setup failed", error.to_string()))
                })?;
                let tcp = Bounded::new(connect_tcp(host, *port, deadline)?, deadline);
                Stream::Tls(Box::new(rustls::StreamOwned::new(tls, tcp)))
            }
            #[cfg(unix)]
            ConnectionAddr::Unix(path) => Stream::Unix(Bounded::new(
                std::os::unix::net::UnixStream::connect(path)?,
                deadline,
            )),
            _ => {
                return Err(Failure::Outage(RedisError::from((
                    ErrorKind::InvalidClientConfig,
                    "this kind of server address is not supported",
                ))));
            }
        };
        let mut con = Connection { stream };
        let settings = info.redis_settings();
        if let Some(password) = settings.password() {
            let mut auth = redis::cmd("AUTH");
            if let Some(user) = settings.username() {
                auth.arg(user);
            }
            auth.arg(password);
            match con.request(&auth, SHORT_REPLY)? {
                Value::Okay => {}
                // The server's message names no password.
                Value::ServerError(error) => {
                    return Err(Failure::Outage(RedisError::from((
                        ErrorKind::AuthenticationFailed,
                        "password authentication failed",
                        error.to_string(),
                    ))));
                }
                other => return Err(unexpected("AUTH", &other)),
            }
        }
        if settings.db() != 0 {
            let mut select = redis::cmd("SELECT");
            select.arg(settings.db());
            match con.request(&select, SHORT_REPLY)? {
                Value::Okay => {}
                Value::ServerError(error) => {
                    return Err(Failure::Outage(RedisError::from((
                        ErrorKind::Io,
                        "the server refused to switch database",
                        error.to_string(),
                    ))));
                }
                other => return Err(unexpected("SELECT", &other)),
            }
        }
        Ok(con)
    }

    /// The TLS client configuration: the process's crypto provider (ring
    /// unless the program installed another), the system's roots or those
    /// of `SSL_CERT_FILE` / `SSL_CERT_DIR`, no client certificate. Made on
    /// first use; an error (no roots could be loaded) is kept.
    fn tls_config(&self) -> Result<Arc<rustls::ClientConfig>, Failure> {
        let made = self.tls.get_or_init(|| {
            let loaded = rustls_native_certs::load_native_certs();
            if let Some(error) = loaded.errors.first() {
                return Err(format!("cannot load the trusted TLS roots: {error}"));
            }
            let mut roots = rustls::RootCertStore::empty();
            roots.add_parsable_certificates(loaded.certs);
            let provider = rustls::crypto::CryptoProvider::get_default()
                .cloned()
                .unwrap_or_else(|| Arc::new(rustls::crypto::ring::default_provider()));
            rustls::ClientConfig::builder_with_provider(provider)
                .with_safe_default_protocol_versions()
                .map(|builder| {
                    Arc::new(builder.with_root_certificates(roots).with_no_client_auth())
                })
                .map_err(|error| format!("TLS setup failed: {error}"))
        });
        made.clone().map_err(|why| {
            Failure::Outage(RedisError::from((
                ErrorKind::InvalidClientConfig,
                "TLS is not usable",
                why,
            )))
        })
    }

    fn put_back(&self, con: Connection) {
        let mut idle = self.idle.lock().unwrap_or_else(PoisonError::into_inner);
        if idle.len() < MAX_IDLE {
            idle.push(con);
        }
    }
}

impl std::fmt::Debug for Remote {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Remote")
            .field("server", &self.server)
            .field("timeout", &self.timeout)
            .field("health", &self.health)
            .finish_non_exhaustive()
    }
}

/// A reply of a type that the command is never answered with: the server
/// is not a usable Redis.
fn unexpected(command: &str, reply: &Value) -> Failure {
    let kind = match reply {
        Value::Nil => "nil",
        Value::Int(_) => "an integer",
        Value::Okay | Value::SimpleString(_) => "a simple string",
        Value::BulkString(_) => "a bulk string",
        _ => "another type",
    };
    Failure::Outage(RedisError::from((
        ErrorKind::UnexpectedReturnType,
        "the server answered with a reply of the wrong type",
        format!("{command} answered with {kind}"),
    )))
}

/// A TCP connection to `host:port`, made by `deadline`: the host name is
/// resolved on a helper thread waited for until the deadline, then each
/// address is tried with the time left.
fn connect_tcp(host: &str, port: u16, deadline: Instant) -> Result<TcpStream, Failure> {
    let addresses: Vec<SocketAddr> = match host.trim_matches(['[', ']']).parse::<IpAddr>() {
        Ok(ip) => vec![SocketAddr::new(ip, port)],
        Err(_) => {
            let (sender, receiver) = std::sync::mpsc::channel();
            let name = (host.to_owned(), port);
            std::thread::Builder::new()
                .name("kiln-remote-resolve".into())
                .spawn(move || {
                    let _ = sender.send(name.to_socket_addrs().map(Vec::from_iter));
                })?;
            receiver.recv_timeout(time_left(deadline)?).map_err(|_| {
                io::Error::new(
                    io::ErrorKind::TimedOut,
                    "resolving the host name took longer than the timeout",
                )
            })??
        }
    };
    let mut last_error = io::Error::new(
        io::ErrorKind::NotFound,
        "the host name resolves to no address",
    );
    for address in addresses {
        match TcpStream::connect_timeout(&address, time_left(deadline)?) {
            Ok(tcp) => {
                tcp.set_nodelay(true)?;
                return Ok(tcp);
            }
            Err(error) => last_error = error,
        }
    }
    Err(last_error.into())
}

/// The time left until `deadline`; an error once it has passed.
fn time_left(deadline: Instant) -> io::Result<Duration> {
    deadline
        .checked_duration_since(Instant::now())
        .filter(|left| !left.is_zero())
        .ok_or_else(deadline_passed)
}

/// The error of an operation whose deadline passed.
fn deadline_passed() -> io::Error {
    io::Error::new(
        io::ErrorKind::TimedOut,
        "the operation did not end within the timeout",
    )
}

/// One connection to the server.
struct Connection {
    stream: Stream,
}

impl Connection {
    /// Sends `command` and reads its reply, handing the parser at most
    /// `cap` bytes of it (a reply that needs more is an error) and refusing
    /// an aggregate reply at its first byte.
    fn request(&mut self, command: &redis::Cmd, cap: usize) -> Result<Value, Failure> {
        self.stream.write_all(&command.get_packed_command())?;
        self.stream.flush()?;
        // A parser of this reply alone: it can hold nothing read before.
        let mut reply = Capped {
            stream: &mut self.stream,
            cap,
            left: cap,
            first: true,
        };
        Ok(redis::Parser::new().parse_value(&mut reply)?)
    }
}

/// The reply of one command, as the parser may read it: at most `cap`
/// bytes, and only a reply that is not an aggregate.
struct Capped<'a> {
    stream: &'a mut Stream,
    cap: usize,
    left: usize,
    first: bool,
}

impl Read for Capped<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.left == 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "the reply is longer than {} bytes: not read further",
                    self.cap
                ),
            ));
        }
        let at_most = buf.len().min(self.left);
        let read = self.stream.read(&mut buf[..at_most])?;
        if self.first && read > 0 {
            self.first = false;
            // Bulk string, simple string, error, integer: RESP2's scalar
            // replies, the only ones the commands sent here get.
            if !matches!(buf[0], b'$' | b'+' | b'-' | b':') {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!(
                        "the reply starts with {:?}, not a string, error or integer reply",
                        char::from(buf[0])
                    ),
                ));
            }
        }
        self.left -= read;
        Ok(read)
    }
}

/// The socket of a connection.
enum Stream {
    Tcp(Bounded<TcpStream>),
    Tls(Box<rustls::StreamOwned<rustls::ClientConnection, Bounded<TcpStream>>>),
    #[cfg(unix)]
    Unix(Bounded<std::os::unix::net::UnixStream>),
}

impl Stream {
    /// Bounds every later read and write (TLS records included) by
    /// `deadline`.
    fn set_deadline(&mut self, deadline: Instant) {
        match self {
            Stream::Tcp(tcp) => tcp.deadline = deadline,
            Stream::Tls(tls) => tls.sock.deadline = deadline,
            #[cfg(unix)]
            Stream::Unix(unix) => unix.deadline = deadline,
        }
    }
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(tcp) => tcp.read(buf),
            Stream::Tls(tls) => tls.read(buf),
            #[cfg(unix)]
            Stream::Unix(unix) => unix.read(buf),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(tcp) => tcp.write(buf),
            Stream::Tls(tls) => tls.write(buf),
            #[cfg(unix)]
            Stream::Unix(unix) => unix.write(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            Stream::Tcp(tcp) => tcp.flush(),
            Stream::Tls(tls) => tls.flush(),
            #[cfg(unix)]
            Stream::Unix(unix) => unix.flush(),
        }
    }
}

/// A socket with per-call timeouts (TCP or Unix).
trait Socket: Read + Write {
    fn set_read_timeout(&self, timeout: Option<Duration>) -> io::Result<()>;
    fn set_write_timeout(&self, timeout: Option<Duration>) -> io::Result<()>;
}

impl Socket for TcpStream {
    fn set_read_timeout(&self, timeout: Option<Duration>) -> io::Result<()> {
        TcpStream::set_read_timeout(self, timeout)
    }
    fn set_write_timeout(&self, timeout: Option<Duration>) -> io::Result<()> {
        TcpStream::set_write_timeout(self, timeout)
    }
}

#[cfg(unix)]
impl Socket for std::os::unix::net::UnixStream {
    fn set_read_timeout(&self, timeout: Option<Duration>) -> io::Result<()> {
        std::os::unix::net::UnixStream::set_read_timeout(self, timeout)
    }
    fn set_write_timeout(&self, timeout: Option<Duration>) -> io::Result<()> {
        std::os::unix::net::UnixStream::set_write_timeout(self, timeout)
    }
}

/// A socket whose every read and write ends by `deadline`: each is given
/// the time left (`SO_RCVTIMEO` / `SO_SNDTIMEO`), and none starts once it
/// has passed. However the server spreads its bytes, the calls of one
/// operation together end by the deadline.
struct Bounded<S> {
    socket: S,
    deadline: Instant,
}

impl<S: Socket> Bounded<S> {
    fn new(socket: S, deadline: Instant) -> Bounded<S> {
        Bounded { socket, deadline }
    }
}

/// A timeout of a socket call, as the deadline's error.
fn deadline_error(error: io::Error) -> io::Error {
    match error.kind() {
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => deadline_passed(),
        _ => error,
    }
}

impl<S: Socket> Read for Bounded<S> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.socket
            .set_read_timeout(Some(time_left(self.deadline)?))?;
        self.socket.read(buf).map_err(deadline_error)
    }
}

impl<S: Socket> Write for Bounded<S> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.socket
            .set_write_timeout(Some(time_left(self.deadline)?))?;
        self.socket.write(buf).map_err(deadline_error)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.socket.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_the_client_refuses_are_errors_without_the_password() {
        for url in [
            "http://:hunter2@h:1/0",
            "redis://:hunter2@h:1/notadb",
            "rediss://:hunter2@h:1/0#insecure",
        ] {
            let error = Remote::new(&RemoteConfig::new(url)).expect_err(url);
            assert!(matches!(error, Error::RemoteUrl { .. }), "{url}: {error}");
            assert!(!error.to_string().contains("hunter2"), "{error}");
        }
    }

    #[test]
    fn tls_and_auth_urls_are_accepted_without_connecting() {
        for url in [
            "rediss://alice:pw@cache.invalid:6380/1",
            "redis://:pw@cache.invalid/0",
        ] {
            assert!(Remote::new(&RemoteConfig::new(url)).is_ok(), "{url}");
        }
    }
}
