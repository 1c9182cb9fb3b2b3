//! Key and owner derivation from arbitrary fields: `KeyBuilder` with any
//! labels and values (strings, bytes, serde values, nested keys) and
//! `Owner::new` with any strings must never panic; the same inputs give
//! the same key; one more field, or a field moved across a label
//! boundary, gives another key (the encoding is length-prefixed).
#![no_main]

use kiln_core::{Key, KeyBuilder, Owner};

/// One field, decoded from the input.
#[derive(Clone, Debug)]
enum Field {
    Str(String, String),
    Bytes(String, Vec<u8>),
    Number(String, u64),
    List(String, Vec<u32>),
    Optional(String, Option<String>),
    Nested(String, Vec<u8>),
}

/// Splits `data` into a schema, a version and fields.
fn decode(data: &[u8]) -> (String, u32, Vec<Field>) {
    let mut rest = data;
    let mut take = |n: usize| {
        let (head, tail) = rest.split_at(n.min(rest.len()));
        rest = tail;
        head.to_vec()
    };
    let text = |bytes: Vec<u8>| String::from_utf8_lossy(&bytes).into_owned();
    let schema_len = take(1).first().copied().unwrap_or(0) as usize % 32;
    let schema = text(take(schema_len));
    let version = take(4).iter().fold(0u32, |v, b| v << 8 | u32::from(*b));
    let mut fields = Vec::new();
    loop {
        let head = take(3);
        let [tag, label_len, value_len] = head[..] else {
            break;
        };
        let label = text(take(label_len as usize % 24));
        let value = take(value_len as usize);
        fields.push(match tag % 6 {
            0 => Field::Str(label, text(value)),
            1 => Field::Bytes(label, value),
            2 => Field::Number(
                label,
                value
                    .iter()
                    .take(8)
                    .fold(0u64, |v, b| v << 8 | u64::from(*b)),
            ),
            3 => Field::List(label, value.iter().map(|&b| u32::from(b) * 7919).collect()),
            4 => Field::Optional(label, (value.len() % 2 == 1).then(|| text(value))),
            _ => Field::Nested(label, value),
        });
    }
    (schema, version, fields)
}

fn key(schema: &str, version: u32, fields: &[Field]) -> Key {
    let mut builder = KeyBuilder::new(schema, version);
    for field in fields {
        builder = match field {
            Field::Str(label, value) => builder.str(label, value),
            Field::Bytes(label, value) => builder.bytes(label, value),
            Field::Number(label, value) => builder.field(label, value).expect("a u64 encodes"),
            Field::List(label, value) => builder.field(label, value).expect("a Vec<u32> encodes"),
            Field::Optional(label, value) => builder
                .field(label, value)
                .expect("an Option<String> encodes"),
            Field::Nested(label, value) => {
                let inner = KeyBuilder::new("nested", 1).bytes("value", value).finish();
                builder.key(label, &inner)
            }
        };
    }
    builder.finish()
}

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let (schema, version, fields) = decode(data);
    let first = key(&schema, version, &fields);
    assert_eq!(
        first,
        key(&schema, version, &fields),
        "same inputs, another key"
    );
    assert_eq!(first.to_hex().len(), 64);

    let mut more = fields.clone();
    more.push(Field::Bytes(String::new(), Vec::new()));
    assert_ne!(
        first,
        key(&schema, version, &more),
        "an added field was not seen"
    );

    // Moving the first byte of a label into the value before it must change
    // the key: fields are length-prefixed, not concatenated.
    if let [Field::Str(l0, v0), Field::Str(l1, v1), ..] = &fields[..]
        && let Some(c) = l1.chars().next()
    {
        let mut moved = fields.clone();
        moved[0] = Field::Str(l0.clone(), format!("{v0}{c}"));
        moved[1] = Field::Str(l1[c.len_utf8()..].to_owned(), v1.clone());
        assert_ne!(
            first,
            key(&schema, version, &moved),
            "a label boundary moved unseen"
        );
    }

    // Owners from arbitrary strings: an error or a stable digest.
    let strings: Vec<String> = fields
        .iter()
        .filter_map(|f| match f {
            Field::Str(_, s) | Field::Optional(_, Some(s)) => Some(s.clone()),
            _ => None,
        })
        .collect();
    if let [compiler, version, target, options @ ..] = &strings[..] {
        let made = Owner::new(compiler, version, target, options.iter());
        let again = Owner::new(compiler, version, target, options.iter());
        match (made, again) {
            (Ok(a), Ok(b)) => {
                assert_eq!(a.digest(), b.digest());
                let _ = (a.label(), a.options());
            }
            (Err(_), Err(_)) => {}
            _ => panic!("Owner::new is not deterministic"),
        }
    }
});
