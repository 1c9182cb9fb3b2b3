//! AUTH and TLS settings pass from the URL to the client; a wrong password
//! or an untrusted certificate is a failure (compile, warn once), and the
//! password never appears in a warning.

use std::sync::atomic::{AtomicUsize, Ordering};

use crate::remote_support::{
    RedisServer, WarnCounter, child_process, get, key, owner, remote, run_child,
};
use kiln_core::{Cache, Source};

#[test]
fn password_user_and_database_pass_through() {
    let Some(server) = RedisServer::start_with(&[
        "--requirepass",
        "s3cret-pw",
        "--user",
        "alice",
        "on",
        ">alice-pw",
        "~*",
        "+@all",
    ]) else {
        return;
    };
    let port = server.port();
    let compiles = AtomicUsize::new(0);

    // A password (requirepass) and database 2: stored there.
    let with_password = format!("redis://:s3cret-pw@127.0.0.1:{port}/2");
    let writer = Cache::new();
    writer.add_tier(Box::new(remote(&with_password)));
    get(&writer, 7, &compiles);
    let name = format!("kiln:v3:{}:{}", owner().digest(), key(7).digest());
    let mut con = redis::Client::open(with_password.as_str())
        .and_then(|client| client.get_connection())
        .expect("connects with the password");
    let in_db2: bool = redis::cmd("EXISTS")
        .arg(&name)
        .query(&mut con)
        .expect("EXISTS");
    redis::cmd("SELECT")
        .arg(0)
        .query::<()>(&mut con)
        .expect("SELECT 0");
    let in_db0: bool = redis::cmd("EXISTS")
        .arg(&name)
        .query(&mut con)
        .expect("EXISTS");
    assert_eq!((in_db2, in_db0), (true, false));

    // An ACL user reads it.
    let reader = Cache::new();
    let tier = remote(&format!("redis://alice:alice-pw@127.0.0.1:{port}/2"));
    reader.add_tier(Box::new(tier.clone()));
    assert_eq!(get(&reader, 7, &compiles), Source::Tier);
    assert_eq!((tier.stats().hits, compiles.load(Ordering::SeqCst)), (1, 1));

    // A wrong password, or none: compile, one warning, no password shown.
    for url in [
        format!("redis://:wrong-pw@127.0.0.1:{port}/2"),
        format!("redis://alice:wrong-pw@127.0.0.1:{port}/2"),
        format!("redis://127.0.0.1:{port}/2"),
    ] {
        let tier = remote(&url);
        let cache = Cache::new();
        cache.add_tier(Box::new(tier.clone()));
        let warnings = WarnCounter::default();
        let before = compiles.load(Ordering::SeqCst);
        tracing::subscriber::with_default(warnings.clone(), || get(&cache, 7, &compiles));
        assert_eq!(compiles.load(Ordering::SeqCst), before + 1, "{url}");
        assert_eq!((tier.stats().failures, tier.stats().hits), (1, 0), "{url}");
        let warnings = warnings.warnings();
        assert_eq!(warnings.len(), 1, "{url}: {warnings:?}");
        assert!(!warnings[0].contains("wrong-pw"), "{}", warnings[0]);
    }
}

#[test]
fn tls_with_a_trusted_certificate_shares_entries_and_an_untrusted_one_fails() {
    let Some(server) = RedisServer::start_tls() else {
        return;
    };
    let url = format!("rediss://localhost:{}/0", server.port());
    let (dir_a, dir_b, dir_c) = (tempdir(), tempdir(), tempdir());
    let run = |dir: &std::path::Path, trusted: bool| {
        let mut child = child_process("compile");
        child
            .env("KILN_CACHE_DIR", dir)
            .env("KILN_REMOTE_CACHE", &url)
            .env("KILN_REMOTE_TEST_KEYS", "4");
        // The client trusts the roots of SSL_CERT_FILE (rustls-native-certs).
        if trusted {
            child.env("SSL_CERT_FILE", server.certificate());
        } else {
            child
                .env("SSL_CERT_FILE", "/dev/null")
                .env_remove("SSL_CERT_DIR");
        }
        run_child(&mut child)
    };
    assert_eq!(
        run(dir_a.path(), true),
        "compiles=4 tier_hits=0 remote_hits=0 remote_stored=4 remote_failures=0"
    );
    assert_eq!(
        run(dir_b.path(), true),
        "compiles=0 tier_hits=4 remote_hits=4 remote_stored=0 remote_failures=0"
    );
    // A server whose certificate is not trusted is never used.
    assert_eq!(
        run(dir_c.path(), false),
        "compiles=4 tier_hits=0 remote_hits=0 remote_stored=0 remote_failures=1"
    );
}

fn tempdir() -> tempfile::TempDir {
    tempfile::tempdir().expect("temp dir")
}
