//! A hit reads the same whether it is served from memory or from an image.

use crate::cache_support::{fp, image_bytes, key, open, owner};
use kiln_core::{Artifact, ArtifactKind, Cache, Compiled, Source, World};

fn entry() -> Compiled {
    Compiled::new("saxpy<f32>")
        .dep("saxpy.cu", fp("saxpy.cu", 1))
        .dep("common.cuh", fp("common.cuh", 3))
        .artifact(Artifact {
            kind: ArtifactKind::Cubin,
            entry_points: vec!["saxpy_f32".into(), "saxpy_f32_tail".into()],
            bytes: vec![0x7f, b'E', b'L', b'F'],
        })
        .artifact(Artifact {
            kind: ArtifactKind::Custom("sass-listing".into()),
            entry_points: vec![],
            bytes: b"SASS".to_vec(),
        })
}

#[test]
fn memory_and_image_hits_agree() {
    let o = owner();
    let producer = Cache::new();
    let start = producer.snapshot();
    let memory = producer.insert(&o, &key(1), entry());
    let consumer = Cache::new();
    consumer.merge_image(open(&image_bytes(&producer, &start)));
    let image = consumer.lookup(&o.digest(), &key(1)).unwrap();

    assert_eq!(
        (memory.source(), image.source()),
        (Source::Memory, Source::Image)
    );
    for hit in [&memory, &image] {
        assert_eq!(hit.name(), "saxpy<f32>");
        assert_eq!(hit.owner(), o.digest());
        assert_eq!(hit.owner_label(), o.label());
        assert_eq!(hit.key(), key(1));
        assert_eq!(hit.max_world(), World::MAX);
        assert!(hit.is_valid_in(World::FIRST));
        assert_eq!(
            hit.artifact(&ArtifactKind::Cubin),
            Some(&[0x7f, b'E', b'L', b'F'][..])
        );
        assert_eq!(
            hit.artifact(&ArtifactKind::Custom("sass-listing".into())),
            Some(&b"SASS"[..])
        );
        assert_eq!(hit.artifact(&ArtifactKind::Ptx), None);
        let views = hit.artifacts();
        assert_eq!(views.len(), 2);
        assert_eq!(views[0].entry_points, ["saxpy_f32", "saxpy_f32_tail"]);
    }
    let mut deps = memory.deps().into_owned();
    deps.sort();
    assert_eq!(deps, image.deps().into_owned());
    assert_eq!(memory.to_entry_data(), image.to_entry_data());
    assert!(image.to_entry_data().is_some());
}

#[test]
fn stats_count_where_lookups_were_answered() {
    let o = owner();
    let producer = Cache::new();
    let start = producer.snapshot();
    producer.insert(&o, &key(1), entry());
    let cache = Cache::new();
    cache.merge_image(open(&image_bytes(&producer, &start)));
    cache.insert(&o, &key(2), entry());
    for _ in 0..3 {
        assert!(cache.lookup(&o.digest(), &key(1)).is_some()); // image
    }
    assert!(cache.lookup(&o.digest(), &key(2)).is_some()); // memory
    assert!(cache.lookup(&o.digest(), &key(3)).is_none()); // miss
    let stats = cache.stats();
    assert_eq!(
        (stats.hits_image, stats.hits_memory, stats.misses),
        (3, 1, 1)
    );
    assert_eq!(stats.hits(), 4);
    assert_eq!((stats.inserts, stats.memory_entries), (1, 1));
    assert_eq!((stats.images_merged, stats.merge_inserted), (1, 1));
}
