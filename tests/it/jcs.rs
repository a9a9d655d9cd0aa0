//! RFC 8785 canonicalization against the cyberphone vectors in `shared/fixtures/jcs`: every
//! input/output pair, and all 100,000 lines of the ES6 number-serialization file.

use std::path::PathBuf;

use cairn::journal::{canonical_json, content_key};

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../shared/fixtures/jcs")
}

#[test]
fn every_testdata_vector_canonicalizes_byte_exactly() {
    let dir = fixtures().join("testdata");
    let mut checked = 0;
    for item in std::fs::read_dir(dir.join("input")).unwrap() {
        let path = item.unwrap().path();
        let name = path.file_name().unwrap().to_owned();
        let input: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        let expected = std::fs::read(dir.join("output").join(&name)).unwrap();
        let actual = canonical_json(&input).unwrap();
        assert_eq!(actual.as_bytes(), &expected[..], "vector {name:?}");
        // The hex rendering is the same bytes, spelled out.
        let hex_name = PathBuf::from(&name).with_extension("txt");
        let outhex = std::fs::read_to_string(dir.join("outhex").join(hex_name)).unwrap();
        let hex_bytes: Vec<u8> =
            outhex.split_whitespace().map(|h| u8::from_str_radix(h, 16).unwrap()).collect();
        assert_eq!(actual.as_bytes(), &hex_bytes[..], "outhex {name:?}");
        checked += 1;
    }
    assert_eq!(checked, 6);
}

#[test]
fn es6_number_file_serializes_all_100k_lines() {
    let text = std::fs::read_to_string(fixtures().join("es6testfile100k.txt")).unwrap();
    let mut lines = 0;
    for line in text.lines() {
        let (bits, expected) = line.split_once(',').unwrap();
        let value = f64::from_bits(u64::from_str_radix(bits, 16).unwrap());
        let json = serde_json::Value::from(value);
        assert_eq!(canonical_json(&json).unwrap(), expected, "bits {bits}");
        lines += 1;
    }
    assert_eq!(lines, 100_000);
}

#[test]
fn content_key_is_sha256_of_canonical_form() {
    let a: serde_json::Value = serde_json::from_str(r#"{"b":1,"a":[1.0,"x"]}"#).unwrap();
    let b: serde_json::Value = serde_json::from_str(r#"{ "a": [1, "x"], "b": 1.00 }"#).unwrap();
    assert_eq!(content_key(&a).unwrap(), content_key(&b).unwrap());
    // sha256("{}")
    assert_eq!(
        content_key(&serde_json::json!({})).unwrap().to_hex(),
        "44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a"
    );
}
