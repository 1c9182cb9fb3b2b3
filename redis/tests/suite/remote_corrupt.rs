//! The server is untrusted: a value planted in Redis that is corrupt, cut
//! short, or a valid image of another entry is rejected, the kernel is
//! compiled, and the compile's store replaces the bad value.

use std::sync::atomic::{AtomicUsize, Ordering};

use std::time::Duration;

use crate::remote_support::{RedisServer, WarnCounter, get, key, owner, remote};
use kiln_core::{Cache, Source};
use kiln_image::{Image, ImageMeta, ImageWriter, Verification};
use kiln_redis::{RemoteConfig, RemoteTier};

/// Kernel `i`'s value as a correct remote tier stores it.
fn stored_value(server: &RedisServer, i: u64) -> Vec<u8> {
    let cache = Cache::new();
    cache.add_tier(Box::new(remote(&server.url())));
    get(&cache, i, &AtomicUsize::new(0));
    redis::cmd("GET")
        .arg(name(i))
        .query(&mut server.connection().expect("connects"))
        .expect("GET")
}

fn name(i: u64) -> String {
    format!("kiln:v3:{}:{}", owner().digest(), key(i).digest())
}

/// Plants `value` as kernel `target`'s entry; a fresh cache must reject
/// it, compile, and leave a correct value behind.
fn assert_rejected_and_repaired(server: &RedisServer, target: u64, value: &[u8], what: &str) {
    let mut con = server.connection().expect("connects");
    redis::cmd("SET")
        .arg(name(target))
        .arg(value)
        .query::<()>(&mut con)
        .expect("SET");

    let tier = remote(&server.url());
    let cache = Cache::new();
    cache.add_tier(Box::new(tier.clone()));
    let compiles = AtomicUsize::new(0);
    assert_eq!(get(&cache, target, &compiles), Source::Memory, "{what}");
    assert_eq!(compiles.load(Ordering::SeqCst), 1, "{what}: compiled");
    let stats = tier.stats();
    assert_eq!(
        (stats.rejected, stats.hits, stats.stored),
        (1, 0, 1),
        "{what}"
    );

    let repaired: Vec<u8> = redis::cmd("GET")
        .arg(name(target))
        .query(&mut con)
        .expect("GET");
    let image = Image::from_bytes(&repaired, Verification::Full).expect("valid again");
    assert_eq!(
        image.entry(0).expect("entry").key(),
        *key(target).digest(),
        "{what}"
    );
}

#[test]
fn corrupt_values_are_rejected_and_replaced() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let good = stored_value(&server, 1);

    let mut payload_flip = good.clone();
    let last = payload_flip.len() - 1;
    // The payload (the kernel's code) is at the end of the image.
    let at = good
        .windows(32)
        .position(|w| w == &crate::remote_support::code(1)[..32])
        .expect("the payload is stored verbatim");
    payload_flip[at + 5] ^= 0x01;
    let mut header_flip = good.clone();
    header_flip[9] ^= 0x80;
    let mut tail_flip = good.clone();
    tail_flip[last] ^= 0x40;

    let cases: [(&str, Vec<u8>); 5] = [
        ("payload bit flip", payload_flip),
        ("header bit flip", header_flip),
        ("last byte flipped", tail_flip),
        ("truncated", good[..good.len() - 100].to_vec()),
        (
            "not an image",
            b"\x89PNG\r\n\x1a\n definitely not kiln".to_vec(),
        ),
    ];
    for (what, value) in cases {
        assert_rejected_and_repaired(&server, 1, &value, what);
    }
}

#[test]
fn a_valid_image_of_another_entry_is_rejected() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let other = stored_value(&server, 2);
    assert_rejected_and_repaired(&server, 3, &other, "kernel 2's image under kernel 3's key");

    // Two entries, one of them the right one: still not exactly the entry.
    let both = {
        let image = Image::from_bytes(&stored_value(&server, 4), Verification::Full).expect("ok");
        let other = Image::from_bytes(&other, Verification::Full).expect("ok");
        let mut writer = ImageWriter::new(ImageMeta::new("planted", "1"));
        writer.push(image.entry(0).expect("entry").to_data().expect("data"));
        writer.push(other.entry(0).expect("entry").to_data().expect("data"));
        writer.to_bytes().expect("writes")
    };
    assert_rejected_and_repaired(&server, 4, &both, "a two-entry image");
}

#[test]
fn a_value_of_another_redis_type_is_a_refusal_without_backoff() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let mut con = server.connection().expect("connects");
    redis::cmd("RPUSH")
        .arg(name(5))
        .arg("not a string")
        .query::<()>(&mut con)
        .expect("RPUSH");

    let tier = remote(&server.url());
    let cache = Cache::new();
    cache.add_tier(Box::new(tier.clone()));
    let compiles = AtomicUsize::new(0);
    let warnings = WarnCounter::default();
    tracing::subscriber::with_default(warnings.clone(), || {
        get(&cache, 5, &compiles);
        get(&cache, 6, &compiles);
    });
    assert_eq!(compiles.load(Ordering::SeqCst), 2);
    // GET failed with WRONGTYPE; no back-off: the SET that follows the
    // compile replaces the list, and kernel 6 goes to the server as usual.
    let stats = tier.stats();
    assert_eq!(
        (stats.failures, stats.skipped, stats.misses, stats.stored),
        (1, 0, 1, 2)
    );
    assert_eq!(warnings.count(), 1);
    let again = Cache::new();
    again.add_tier(Box::new(remote(&server.url())));
    assert_eq!(get(&again, 5, &compiles), Source::Tier);
}

#[test]
fn an_oversized_value_is_rejected_and_an_empty_one_is_a_miss() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let mut con = server.connection().expect("connects");
    let mut plant = |i: u64, value: Vec<u8>| {
        redis::cmd("SET")
            .arg(name(i))
            .arg(value)
            .query::<()>(&mut con)
            .expect("SET");
    };
    plant(8, vec![0x6b; 1 << 20]);
    plant(9, Vec::new());

    let tier = RemoteTier::open(
        RemoteConfig::new(server.url())
            .timeout(Duration::from_secs(2))
            .max_entry_bytes(64 << 10)
            .write_unsigned(true),
    )
    .expect("a valid URL");
    let cache = Cache::new();
    cache.add_tier(Box::new(tier.clone()));
    let compiles = AtomicUsize::new(0);
    get(&cache, 8, &compiles);
    get(&cache, 9, &compiles);
    assert_eq!(compiles.load(Ordering::SeqCst), 2);
    let stats = tier.stats();
    assert_eq!((stats.rejected, stats.misses, stats.stored), (1, 1, 2));
}
