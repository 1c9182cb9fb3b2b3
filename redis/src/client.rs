//! The connection to the server: a small pool of sync connections, each
//! operation bounded by the timeout, failures turned into back-off.

use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use redis::{Client, Connection, ConnectionAddr, ErrorKind, RedisError};

use super::config::RemoteConfig;
use super::health::Health;
use crate::Error;

/// Idle connections kept for reuse; more are opened under load and closed
/// after use.
const MAX_IDLE: usize = 8;

/// Why an operation did not reach an answer.
#[derive(Debug)]
pub(super) enum Unanswered {
    /// The tier is backing off after a failure: the server was not asked.
    BackingOff,
    /// The server failed (already reported through [`Health`]).
    Failed,
}

/// Where an operation failed.
enum Failure {
    /// Connecting (TCP, TLS, AUTH, `SELECT`).
    Connect(RedisError),
    /// The command, on a connected connection.
    Command(RedisError),
}

/// A Redis server, asked through short-lived or pooled connections.
pub(super) struct Remote {
    client: Client,
    server: String,
    timeout: Duration,
    idle: Mutex<Vec<Connection>>,
    health: Health,
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
        })
    }

    /// The server's URL, password removed.
    pub(super) fn server(&self) -> &str {
        &self.server
    }

    /// The value of `name`, or `None` when there is none (or it is empty),
    /// reading at most `limit + 1` bytes of it (`GETRANGE name 0 limit`):
    /// a longer answer means the value is larger than `limit`.
    pub(super) fn get(&self, name: &str, limit: usize) -> Result<Option<Vec<u8>>, Unanswered> {
        let value = self.run(
            || format!("GETRANGE {name}"),
            |con| {
                redis::cmd("GETRANGE")
                    .arg(name)
                    .arg(0)
                    .arg(limit)
                    .query::<Vec<u8>>(con)
            },
        )?;
        Ok(Some(value).filter(|value| !value.is_empty()))
    }

    /// `SET name value`.
    pub(super) fn set(&self, name: &str, value: &[u8]) -> Result<(), Unanswered> {
        self.run(
            || format!("SET {name}"),
            |con| redis::cmd("SET").arg(name).arg(value).query::<()>(con),
        )
    }

    /// Runs `op` on a connection, within the timeout. On failure the
    /// connection is dropped (a timed-out reply could arrive later and answer
    /// the next command) and, unless the server merely refused the command
    /// (e.g. `WRONGTYPE` for one key, `OOM` for one write), the tier backs
    /// off.
    fn run<T>(
        &self,
        action: impl FnOnce() -> String,
        op: impl Fn(&mut Connection) -> Result<T, RedisError>,
    ) -> Result<T, Unanswered> {
        if !self.health.may_try() {
            return Err(Unanswered::BackingOff);
        }
        let result = match self.idle_connection() {
            // A pooled connection may have been closed by the server since
            // (restart, idle timeout): then once more on a new connection.
            // Not after a timeout, which would double the cost.
            Some(mut con) => match op(&mut con) {
                Err(error) if error.is_connection_dropped() && !error.is_timeout() => {
                    self.on_new_connection(&op)
                }
                Ok(answer) => {
                    self.put_back(con);
                    Ok(answer)
                }
                Err(error) => Err(Failure::Command(error)),
            },
            None => self.on_new_connection(&op),
        };
        match result {
            Ok(answer) => {
                self.health.succeeded(&self.server);
                Ok(answer)
            }
            Err(failure) => {
                let (source, back_off) = match failure {
                    Failure::Connect(source) => (source, true),
                    Failure::Command(source) => {
                        // An error reply (a known code, or another such
                        // as WRONGTYPE or OOM), or a reply of another type.
                        let refused = matches!(
                            source.kind(),
                            ErrorKind::Server(_)
                                | ErrorKind::Extension
                                | ErrorKind::UnexpectedReturnType
                        );
                        (source, !refused)
                    }
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
                Err(Unanswered::Failed)
            }
        }
    }

    fn idle_connection(&self) -> Option<Connection> {
        self.idle
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .pop()
    }

    /// Runs `op` on a new connection (connect, TLS, AUTH and `SELECT` within
    /// the timeout; then read and write timeouts set), kept for reuse if it
    /// succeeds.
    fn on_new_connection<T>(
        &self,
        op: impl FnOnce(&mut Connection) -> Result<T, RedisError>,
    ) -> Result<T, Failure> {
        let connect = || {
            let con = self.client.get_connection_with_timeout(self.timeout)?;
            con.set_read_timeout(Some(self.timeout))?;
            con.set_write_timeout(Some(self.timeout))?;
            Ok(con)
        };
        let mut con = connect().map_err(Failure::Connect)?;
        let answer = op(&mut con).map_err(Failure::Command)?;
        self.put_back(con);
        Ok(answer)
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
