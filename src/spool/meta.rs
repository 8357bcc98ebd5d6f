//! `meta.json` is replaced whole, never edited in place: it tells senders
//! and `list --offline` whose spool this is (name and workspace), whether
//! it takes offline delivery, and the agent's sender rules, which offline
//! senders apply.

use super::taskfile::read_bounded;
use crate::base::error::{Error, Result};
use crate::base::files;
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;
use std::path::Path;

/// A spool's `meta.json`. The fields are in the order the file spells
/// them (alphabetical: `serde_json::json!` wrote it that way first), so
/// what `write` writes is what earlier versions wrote. Reading is as
/// lenient as the first readers were: only `name` and `workspace` must be
/// strings; a list keeps its strings, a missing or odd `offline` is true.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Meta {
    /// The agent's `--accept-from`.
    #[serde(default, deserialize_with = "strings")]
    pub accept_from: Vec<String>,
    /// When the spool was first opened (epoch seconds); `None` when the
    /// file does not say. Baton always writes it.
    #[serde(
        default,
        deserialize_with = "number",
        skip_serializing_if = "Option::is_none"
    )]
    pub created_at: Option<u64>,
    /// The agent's `--deny-from`.
    #[serde(default, deserialize_with = "strings")]
    pub deny_from: Vec<String>,
    pub name: String,
    /// Whether senders may store tasks while the name is not running
    /// (`false` under `--no-offline`).
    #[serde(default = "yes", deserialize_with = "flag")]
    pub offline: bool,
    /// The canonical workspace, as `Path::display` shows it.
    pub workspace: String,
}

impl Meta {
    /// Reads `<dir>/meta.json` (bounded, not through a symlink, never
    /// waiting on a FIFO or a device in its place).
    pub fn read(dir: &Path) -> Result<Meta> {
        let path = dir.join("meta.json");
        let bytes = read_bounded(&path).map_err(|e| Error::io("read", &path, e))?;
        serde_json::from_slice(&bytes).map_err(|e| Error::io("parse", &path, e.into()))
    }

    /// Replaces `<dir>/meta.json` through `<dir>/tmp/` (mode 0600, not
    /// synced: it is rewritten at every start).
    pub fn write(&self, dir: &Path) -> Result<()> {
        let path = dir.join("meta.json");
        let bytes = serde_json::to_vec(self).expect("meta serializes");
        crate::base::failpoint::hit("meta-write")
            .and_then(|()| {
                files::write_private(&dir.join("tmp").join("meta.json"), &path, &bytes, false)
            })
            .map_err(|e| Error::io("write", &path, e))
    }
}

fn yes() -> bool {
    true
}

/// The strings of a list; anything else is no strings.
fn strings<'de, D: Deserializer<'de>>(d: D) -> std::result::Result<Vec<String>, D::Error> {
    let v = Value::deserialize(d)?;
    Ok(v.as_array()
        .into_iter()
        .flatten()
        .filter_map(|x| x.as_str().map(str::to_string))
        .collect())
}

fn number<'de, D: Deserializer<'de>>(d: D) -> std::result::Result<Option<u64>, D::Error> {
    Ok(Value::deserialize(d)?.as_u64())
}

fn flag<'de, D: Deserializer<'de>>(d: D) -> std::result::Result<bool, D::Error> {
    Ok(Value::deserialize(d)?.as_bool().unwrap_or(true))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::fs;
    use std::os::unix::fs::MetadataExt;

    fn meta() -> Meta {
        Meta {
            accept_from: vec!["ops-*".into(), "été \"q\"".into()],
            created_at: Some(1_788_012_102),
            deny_from: vec![],
            name: "weekly_digest".into(),
            offline: false,
            workspace: "/work/weekly digest".into(),
        }
    }

    #[test]
    fn meta_is_written_byte_for_byte_as_the_json_object_it_replaces() {
        let m = meta();
        // What `instance::write_meta` builds.
        let old = json!({
            "name": m.name,
            "workspace": m.workspace,
            "created_at": m.created_at.unwrap(),
            "offline": m.offline,
            "accept_from": m.accept_from,
            "deny_from": m.deny_from,
        });
        assert_eq!(
            serde_json::to_vec(&m).unwrap(),
            serde_json::to_vec(&old).unwrap()
        );
    }

    #[test]
    fn meta_round_trips_through_its_file_and_reads_leniently() {
        let dir = crate::base::files::scratch("meta");
        fs::create_dir_all(dir.join("tmp")).unwrap();
        meta().write(&dir).unwrap();
        assert_eq!(Meta::read(&dir).unwrap(), meta());
        let file = dir.join("meta.json");
        assert_eq!(fs::metadata(&file).unwrap().mode() & 0o777, 0o600);

        fs::write(
            &file,
            br#"{"name":"n","workspace":"/w","offline":"no","accept_from":["a",3,null],"deny_from":null,"created_at":-1,"extra":1}"#,
        )
        .unwrap();
        let m = Meta::read(&dir).unwrap();
        assert_eq!(
            (m.offline, m.accept_from, m.deny_from, m.created_at),
            (true, vec!["a".to_string()], vec![], None)
        );
        fs::write(&file, br#"{"workspace":"/w"}"#).unwrap();
        assert!(Meta::read(&dir).is_err(), "a meta.json names its spool");
        fs::remove_dir_all(&dir).unwrap();
    }
}
