//! The JSONL store's blobs: one file per blob under `<run>.blobs/`, its name encoded to be
//! file-safe, written whole beside its place and then moved or linked in.

use std::fs::{self, File};
use std::io::{self, Write};

use super::{JsonlStore, remove_if_present, sync_dir};
use crate::store::common;
use crate::store::{Durability, Result, RunId, TranscriptStore};

impl TranscriptStore for JsonlStore {
    fn put_new(&self, blob_ref: &str, blob: &[u8]) -> Result<bool> {
        let parsed = common::parse_blob_ref(blob_ref)?;
        let dir = self.blob_dir(&parsed.run);
        fs::create_dir_all(&dir)?;
        let path = dir.join(encode_blob_name(parsed.name));
        // Written whole beside it, then linked into place: a link never replaces a file, so
        // of two racing writers the file system picks one, and a reader never sees half a blob.
        let temp = dir.join(self.temp_name());
        let written = (|| -> io::Result<bool> {
            let mut file = File::create(&temp)?;
            file.write_all(blob)?;
            if self.durability == Durability::Full {
                file.sync_all()?;
            }
            match fs::hard_link(&temp, &path) {
                Ok(()) => Ok(true),
                Err(err) if err.kind() == io::ErrorKind::AlreadyExists => Ok(false),
                Err(err) => Err(err),
            }
        })();
        let _ = fs::remove_file(&temp);
        let stored = written?;
        if stored && self.durability == Durability::Full {
            sync_dir(&dir)?;
        }
        Ok(stored)
    }

    fn put(&self, blob_ref: &str, blob: &[u8]) -> Result<()> {
        let parsed = common::parse_blob_ref(blob_ref)?;
        let dir = self.blob_dir(&parsed.run);
        fs::create_dir_all(&dir)?;
        let path = dir.join(encode_blob_name(parsed.name));
        self.replace_file(&dir, &path, blob, self.durability == Durability::Full)
    }

    fn get(&self, blob_ref: &str) -> Result<Option<Vec<u8>>> {
        let parsed = common::parse_blob_ref(blob_ref)?;
        match fs::read(self.blob_dir(&parsed.run).join(encode_blob_name(parsed.name))) {
            Ok(bytes) => Ok(Some(bytes)),
            Err(err) if err.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(err) => Err(err.into()),
        }
    }

    fn list(&self, run: &RunId) -> Result<Vec<String>> {
        let items = match fs::read_dir(self.blob_dir(run)) {
            Ok(items) => items,
            Err(err) if err.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(err) => return Err(err.into()),
        };
        let mut refs = Vec::new();
        for item in items {
            let name = item?.file_name();
            // Temp files start with '.', which an encoded name never does.
            if let Some(name) = name.to_str().filter(|name| !name.starts_with('.')).and_then(decode_blob_name)
            {
                refs.push(format!("{run}/{name}"));
            }
        }
        // Sorted by ref, not by file name: the encoding does not preserve order.
        refs.sort_unstable();
        Ok(refs)
    }

    fn delete(&self, blob_ref: &str) -> Result<()> {
        let parsed = common::parse_blob_ref(blob_ref)?;
        remove_if_present(&self.blob_dir(&parsed.run).join(encode_blob_name(parsed.name)))
    }
}

fn encode_blob_name(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for (i, byte) in name.bytes().enumerate() {
        let keep = byte.is_ascii_alphanumeric() || byte == b'_' || byte == b'-' || (byte == b'.' && i > 0);
        if keep {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

/// The inverse of [`encode_blob_name`]; `None` for a file name it cannot have produced.
fn decode_blob_name(file_name: &str) -> Option<String> {
    let bytes = file_name.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = file_name.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blob_names_round_trip_through_file_names() {
        for name in ["a", "x/y.json", ".hidden", "é ü/%41", "a-b_c.d"] {
            let encoded = encode_blob_name(name);
            assert!(!encoded.contains('/') && !encoded.starts_with('.'), "{encoded}");
            assert_eq!(decode_blob_name(&encoded).as_deref(), Some(name));
        }
        assert_eq!(decode_blob_name("%4"), None);
    }
}
