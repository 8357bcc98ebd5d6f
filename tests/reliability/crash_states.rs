//! Every state a crash could leave, built from a recording of file-system
//! operations (`baton::base::files::record`) and a snapshot of the directory
//! taken before them: the model of the crash-state explorer
//! (`explore.rs`; docs/testing.md describes it).
//!
//! The model, POSIX with Linux ext4/xfs's atomic rename:
//!
//! - The snapshot is durable. A crash happens after any prefix of the
//!   recorded operations.
//! - A file's data written since that file's last fsync (in the prefix)
//!   may be absent, torn (the first half of a write), zero-filled (its
//!   length there, its bytes not), or whole; the writes of one file land
//!   in order (a later write only after the earlier ones whole).
//! - A directory entry change (create, mkdir, rename, unlink) is durable
//!   once a directory it changes has been fsynced after it; until then it
//!   may be applied or not. A rename is one change to both of its
//!   directories (the journal holds it whole), so either directory's
//!   fsync makes it durable. Changes to the same name keep their order: a
//!   change is applied only with every earlier change to a name it shares.
//!   Nothing else orders them: changes in different directories, or to
//!   different names, may land in any combination. An fsync of a file
//!   makes its data durable, not its name; an fsync of a directory makes
//!   its entries durable, not its own entry in its parent (a directory
//!   whose entry is lost takes everything under it along).
//!
//! Bounds: the entry changes still open at a crash point are tried in
//! every combination while there are at most `ALL_SUBSETS` of them; past
//! that, every prefix of them in program order, each with one left out,
//! and each alone. Data: every combination of the files' variants while
//! there are at most `ALL_DATA` combinations; past that, each file's
//! variants with every other file whole, and all files at their oldest.
//! States that come out the same are counted once.

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsString;
use std::fs;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};

pub use baton::base::files::record::Op;

/// Open entry changes tried in every combination up to this many.
pub const ALL_SUBSETS: usize = 10;
/// Data variant combinations tried in full up to this many.
pub const ALL_DATA: usize = 64;

/// A directory's contents: relative paths to directories and files.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Node {
    Dir,
    File(Vec<u8>),
}

pub type Tree = BTreeMap<PathBuf, Node>;

/// Reads the tree under `root` (directories and regular files; anything
/// else is not the spool's and fails the test).
pub fn snapshot(root: &Path) -> Tree {
    let mut tree = Tree::new();
    let mut todo = vec![PathBuf::new()];
    while let Some(rel) = todo.pop() {
        for entry in fs::read_dir(root.join(&rel)).unwrap() {
            let entry = entry.unwrap();
            let path = rel.join(entry.file_name());
            let kind = entry.file_type().unwrap();
            if kind.is_dir() {
                tree.insert(path.clone(), Node::Dir);
                todo.push(path);
            } else {
                assert!(kind.is_file(), "{}: not a file", path.display());
                tree.insert(path, Node::File(fs::read(entry.path()).unwrap()));
            }
        }
    }
    tree
}

/// Writes `tree` under `root`, which is removed first: directories 0700,
/// files 0600.
pub fn materialise(tree: &Tree, root: &Path) {
    materialise_from(None, tree, root);
}

/// Makes what is under `root` `target`: from `current`, what is there
/// now, only what differs is removed or written (a state of ten
/// thousand receipts costs a few files); without it, `root` is removed
/// and written whole.
pub fn materialise_from(current: Option<&Tree>, target: &Tree, root: &Path) {
    let empty = Tree::new();
    let current = current.unwrap_or_else(|| {
        let _ = fs::remove_dir_all(root);
        fs::DirBuilder::new().mode(0o700).create(root).unwrap();
        &empty
    });
    // Deepest first: what a directory holds goes before it.
    for (rel, node) in current.iter().rev() {
        let keep = matches!(
            (node, target.get(rel)),
            (Node::Dir, Some(Node::Dir)) | (Node::File(_), Some(Node::File(_)))
        );
        if !keep {
            match node {
                Node::Dir => fs::remove_dir_all(root.join(rel)).unwrap(),
                Node::File(_) => fs::remove_file(root.join(rel)).unwrap(),
            }
        }
    }
    // Sorted: a directory comes before what it holds.
    for (rel, node) in target {
        let p = root.join(rel);
        match (node, current.get(rel)) {
            (Node::Dir, Some(Node::Dir)) => {}
            (Node::Dir, _) => fs::DirBuilder::new().mode(0o700).create(&p).unwrap(),
            (Node::File(b), Some(Node::File(was))) if was == b => {}
            (Node::File(b), _) => {
                use std::os::unix::fs::OpenOptionsExt;
                let mut f = fs::OpenOptions::new()
                    .write(true)
                    .create(true)
                    .truncate(true)
                    .mode(0o600)
                    .open(&p)
                    .unwrap();
                std::io::Write::write_all(&mut f, b).unwrap();
            }
        }
    }
}

/// A tree's fingerprint, for counting equal states once.
pub fn fingerprint(tree: &Tree) -> u64 {
    let mut h = DefaultHasher::new();
    tree.hash(&mut h);
    h.finish()
}

/// A data change to a file.
#[derive(Clone)]
enum Data {
    Write { offset: u64, bytes: Vec<u8> },
    Truncate(u64),
}

/// How much of a data change landed.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Landed {
    Whole,
    /// The first half of a write's bytes.
    Torn,
    /// A write's length, in zeros.
    Zeroed,
}

/// A directory's entries: names to inodes.
type Entries = BTreeMap<OsString, usize>;

/// A recorded operation resolved to inodes.
#[derive(Clone)]
enum Step {
    /// A name (directory inode, name) made to point at `ino`; a rename
    /// also takes the name `from` away.
    Link {
        at: (usize, OsString),
        ino: usize,
        from: Option<(usize, OsString)>,
    },
    Unlink {
        at: (usize, OsString),
        ino: usize,
    },
    Data(usize, Data),
    Fsync(usize),
    DirFsync(usize),
    Nothing,
}

impl Step {
    /// The names an entry change touches (none for the others).
    fn names(&self) -> Vec<&(usize, OsString)> {
        match self {
            Step::Link { at, from, .. } => std::iter::once(at).chain(from).collect(),
            Step::Unlink { at, .. } => vec![at],
            _ => Vec::new(),
        }
    }
}

/// The inodes of a tree: whether each is a directory, the directories'
/// entries, the files' contents. Inode 0 is the root.
#[derive(Clone, Default)]
struct Inodes {
    is_dir: Vec<bool>,
    dirs: BTreeMap<usize, Entries>,
    files: BTreeMap<usize, Vec<u8>>,
}

impl Inodes {
    fn of(tree: &Tree) -> Inodes {
        let mut i = Inodes::default();
        i.add(true);
        for (rel, node) in tree {
            let dir = i
                .lookup(rel.parent().unwrap())
                .expect("a parent comes first");
            let ino = i.add(matches!(node, Node::Dir));
            if let Node::File(b) = node {
                i.files.insert(ino, b.clone());
            }
            let name = rel.file_name().unwrap().to_os_string();
            i.dirs.get_mut(&dir).unwrap().insert(name, ino);
        }
        i
    }

    fn add(&mut self, dir: bool) -> usize {
        let ino = self.is_dir.len();
        self.is_dir.push(dir);
        if dir {
            self.dirs.insert(ino, Entries::new());
        }
        ino
    }

    fn lookup(&self, rel: &Path) -> Option<usize> {
        let mut at = 0;
        for c in rel.components() {
            at = *self.dirs.get(&at)?.get(c.as_os_str())?;
        }
        Some(at)
    }
}

/// A recording, resolved against its snapshot: the durable base and one
/// step per operation.
pub struct Recording {
    base: Inodes,
    /// Every inode the recording made, too.
    is_dir: Vec<bool>,
    steps: Vec<Step>,
}

/// Resolves each operation's paths in program order, against the tree as
/// the operations before it left it.
struct Resolver<'a> {
    root: &'a Path,
    now: Inodes,
}

impl Resolver<'_> {
    /// The path below the root, if it is below it.
    fn rel<'p>(&self, path: &'p Path) -> Option<&'p Path> {
        path.strip_prefix(self.root)
            .ok()
            .filter(|r| r.parent().is_some())
    }

    /// The directory inode and name of a path below the root, and its
    /// inode if it is there.
    fn name(&self, path: &Path) -> Option<((usize, OsString), Option<usize>)> {
        let rel = self.rel(path)?;
        let dir = self.now.lookup(rel.parent()?)?;
        Some(((dir, rel.file_name()?.to_os_string()), self.now.lookup(rel)))
    }

    fn inode(&self, path: &Path) -> Option<usize> {
        let rel = path.strip_prefix(self.root).ok()?;
        self.now.lookup(rel)
    }

    fn resolve(&mut self, op: &Op) -> Option<Step> {
        Some(match op {
            Op::Create(p) | Op::Mkdir(p) => {
                let (at, None) = self.name(p)? else {
                    return None;
                };
                let ino = self.now.add(matches!(op, Op::Mkdir(_)));
                self.now.dirs.get_mut(&at.0)?.insert(at.1.clone(), ino);
                Step::Link {
                    at,
                    ino,
                    from: None,
                }
            }
            Op::Rename { from, to } => {
                let ((src, Some(ino)), (at, _)) = (self.name(from)?, self.name(to)?) else {
                    panic!("{} renamed, but it is not there", from.display());
                };
                self.now.dirs.get_mut(&src.0)?.remove(&src.1);
                self.now.dirs.get_mut(&at.0)?.insert(at.1.clone(), ino);
                let from = Some(src);
                Step::Link { at, ino, from }
            }
            Op::Unlink(p) => {
                let (at, Some(ino)) = self.name(p)? else {
                    panic!("{} unlinked, but it is not there", p.display());
                };
                self.now.dirs.get_mut(&at.0)?.remove(&at.1);
                Step::Unlink { at, ino }
            }
            Op::Write {
                path,
                offset,
                bytes,
            } => {
                let (offset, bytes) = (*offset, bytes.clone());
                Step::Data(self.inode(path)?, Data::Write { offset, bytes })
            }
            Op::Truncate { path, len } => Step::Data(self.inode(path)?, Data::Truncate(*len)),
            Op::Fsync(p) => Step::Fsync(self.inode(p)?),
            Op::DirFsync(p) => Step::DirFsync(self.inode(p)?),
        })
    }
}

impl Recording {
    /// Resolves `ops`, performed under `root`, against `before`, the tree
    /// under `root` when they started. Operations outside `root`, on
    /// `root` itself, or that change nothing (an `O_CREAT` open of a file
    /// that is there) resolve to nothing.
    pub fn new(root: &Path, before: &Tree, ops: &[Op]) -> Recording {
        let base = Inodes::of(before);
        let mut r = Resolver {
            root,
            now: base.clone(),
        };
        let steps = ops
            .iter()
            .map(|op| r.resolve(op).unwrap_or(Step::Nothing))
            .collect();
        Recording {
            base,
            is_dir: r.now.is_dir,
            steps,
        }
    }

    pub fn len(&self) -> usize {
        self.steps.len()
    }

    /// Every state a crash after the first `k` operations could leave,
    /// `emit`ted one by one (the same tree may come more than once).
    pub fn crash_states(&self, k: usize, emit: &mut dyn FnMut(Tree)) {
        let steps = &self.steps[..k];
        let (required, free) = open_changes(steps);
        let data = self.data_variants(steps);
        for chosen in subsets(steps, &required, &free) {
            let dirs = self.apply_entries(steps, &chosen);
            let files: Vec<usize> = reachable(&dirs)
                .into_iter()
                .filter(|i| data.contains_key(i))
                .collect();
            for pick in data_picks(&files, &data) {
                emit(self.tree(&dirs, &pick));
            }
        }
    }

    /// For each file that `steps` write: its possible contents after a
    /// crash there, oldest first.
    fn data_variants(&self, steps: &[Step]) -> BTreeMap<usize, Vec<Vec<u8>>> {
        let mut per: BTreeMap<usize, (Vec<&Data>, usize)> = BTreeMap::new();
        for s in steps {
            match s {
                Step::Data(ino, d) => per.entry(*ino).or_default().0.push(d),
                Step::Fsync(ino) => {
                    let e = per.entry(*ino).or_default();
                    e.1 = e.0.len();
                }
                _ => {}
            }
        }
        let mut out = BTreeMap::new();
        for (ino, (writes, synced)) in per {
            let mut now = self.base.files.get(&ino).cloned().unwrap_or_default();
            for d in &writes[..synced] {
                apply_data(&mut now, d, Landed::Whole);
            }
            let mut variants = Vec::new();
            for d in &writes[synced..] {
                variants.push(now.clone());
                for part in [Landed::Torn, Landed::Zeroed] {
                    if matches!(d, Data::Write { .. }) {
                        let mut v = now.clone();
                        apply_data(&mut v, d, part);
                        variants.push(v);
                    }
                }
                apply_data(&mut now, d, Landed::Whole);
            }
            variants.push(now);
            variants.dedup();
            out.insert(ino, variants);
        }
        out
    }

    /// The directories' entries after the durable base and the entry
    /// changes `chosen`, applied in program order.
    fn apply_entries(&self, steps: &[Step], chosen: &BTreeSet<usize>) -> BTreeMap<usize, Entries> {
        let mut dirs = self.base.dirs.clone();
        for &i in chosen {
            match &steps[i] {
                Step::Link { at, ino, from } => {
                    if let Some((d, n)) = from {
                        let e = dirs.entry(*d).or_default();
                        if e.get(n) == Some(ino) {
                            e.remove(n);
                        }
                    }
                    dirs.entry(at.0).or_default().insert(at.1.clone(), *ino);
                    if self.is_dir[*ino] {
                        dirs.entry(*ino).or_default();
                    }
                }
                Step::Unlink { at, ino } => {
                    let e = dirs.entry(at.0).or_default();
                    if e.get(&at.1) == Some(ino) {
                        e.remove(&at.1);
                    }
                }
                _ => {}
            }
        }
        dirs
    }

    /// The tree the root's entries lead to.
    fn tree(&self, dirs: &BTreeMap<usize, Entries>, pick: &BTreeMap<usize, Vec<u8>>) -> Tree {
        let mut tree = Tree::new();
        let mut todo = vec![(0usize, PathBuf::new())];
        while let Some((dir, rel)) = todo.pop() {
            for (name, &ino) in dirs.get(&dir).into_iter().flatten() {
                let path = rel.join(name);
                if self.is_dir[ino] {
                    tree.insert(path.clone(), Node::Dir);
                    todo.push((ino, path));
                } else {
                    let bytes = pick.get(&ino).or_else(|| self.base.files.get(&ino));
                    tree.insert(path, Node::File(bytes.cloned().unwrap_or_default()));
                }
            }
        }
        tree
    }
}

/// The entry changes a crash after `steps` must keep (made durable by a
/// later fsync of a directory they change, and the earlier changes to
/// the same names), and those it may keep or lose.
fn open_changes(steps: &[Step]) -> (BTreeSet<usize>, Vec<usize>) {
    let changes: Vec<usize> = (0..steps.len())
        .filter(|&i| !steps[i].names().is_empty())
        .collect();
    let mut required = BTreeSet::new();
    for &i in &changes {
        let dirs: Vec<usize> = steps[i].names().iter().map(|n| n.0).collect();
        let synced = steps[i + 1..]
            .iter()
            .any(|s| matches!(s, Step::DirFsync(d) if dirs.contains(d)));
        if synced {
            required.extend(depends(steps, i));
        }
    }
    let free = changes
        .into_iter()
        .filter(|i| !required.contains(i))
        .collect();
    (required, free)
}

/// Change `i` and every earlier change it depends on: those to a name it
/// touches, and theirs in turn.
fn depends(steps: &[Step], i: usize) -> BTreeSet<usize> {
    let mut out = BTreeSet::from([i]);
    let mut todo = vec![i];
    while let Some(c) = todo.pop() {
        let names = steps[c].names();
        for (j, step) in steps[..c].iter().enumerate() {
            let shared = step.names().iter().any(|n| names.contains(n));
            if shared && out.insert(j) {
                todo.push(j);
            }
        }
    }
    out
}

/// The sets of entry changes to apply: `required` and a choice of `free`
/// that keeps every change's dependencies (all choices, or the bounded
/// ones past `ALL_SUBSETS`).
fn subsets(steps: &[Step], required: &BTreeSet<usize>, free: &[usize]) -> Vec<BTreeSet<usize>> {
    let choices: Vec<Vec<usize>> = if free.len() <= ALL_SUBSETS {
        (0..1u32 << free.len())
            .map(|mask| {
                let picked = free
                    .iter()
                    .enumerate()
                    .filter(|(b, _)| mask & (1 << b) != 0);
                picked.map(|(_, &i)| i).collect()
            })
            .collect()
    } else {
        let mut c: Vec<Vec<usize>> = (0..=free.len()).map(|n| free[..n].to_vec()).collect();
        for skip in 0..free.len() {
            let mut but = free.to_vec();
            but.remove(skip);
            c.push(but);
            c.push(vec![free[skip]]);
        }
        c
    };
    let mut out = Vec::new();
    for choice in choices {
        let set: BTreeSet<usize> = required.iter().copied().chain(choice).collect();
        let closed = set.iter().all(|&i| depends(steps, i).is_subset(&set));
        if closed && !out.contains(&set) {
            out.push(set);
        }
    }
    out
}

/// The inodes the root leads to.
fn reachable(dirs: &BTreeMap<usize, Entries>) -> BTreeSet<usize> {
    let mut seen = BTreeSet::from([0]);
    let mut todo = vec![0];
    while let Some(d) = todo.pop() {
        for &ino in dirs.get(&d).into_iter().flat_map(|e| e.values()) {
            if seen.insert(ino) {
                todo.push(ino);
            }
        }
    }
    seen
}

/// The contents to give `files` together: every combination of their
/// variants, or (past `ALL_DATA`) each file's variants with the others
/// whole, and all at their oldest.
fn data_picks(
    files: &[usize],
    data: &BTreeMap<usize, Vec<Vec<u8>>>,
) -> Vec<BTreeMap<usize, Vec<u8>>> {
    let whole: BTreeMap<usize, Vec<u8>> = files
        .iter()
        .map(|i| (*i, data[i].last().unwrap().clone()))
        .collect();
    let product: usize = files.iter().map(|i| data[i].len()).product();
    if product > ALL_DATA {
        let mut out = vec![files.iter().map(|i| (*i, data[i][0].clone())).collect()];
        for i in files {
            for v in &data[i] {
                let mut p = whole.clone();
                p.insert(*i, v.clone());
                out.push(p);
            }
        }
        return out;
    }
    let mut out = vec![BTreeMap::new()];
    for i in files {
        out = out
            .into_iter()
            .flat_map(|p| {
                data[i].iter().map(move |v| {
                    let mut p = p.clone();
                    p.insert(*i, v.clone());
                    p
                })
            })
            .collect();
    }
    out
}

fn apply_data(buf: &mut Vec<u8>, d: &Data, landed: Landed) {
    match d {
        Data::Truncate(len) => buf.resize(*len as usize, 0),
        Data::Write { offset, bytes } => {
            let at = *offset as usize;
            let bytes: Vec<u8> = match landed {
                Landed::Whole => bytes.clone(),
                Landed::Torn => bytes[..bytes.len() / 2].to_vec(),
                Landed::Zeroed => vec![0; bytes.len()],
            };
            if buf.len() < at + bytes.len() {
                buf.resize(at + bytes.len(), 0);
            }
            buf[at..at + bytes.len()].copy_from_slice(&bytes);
        }
    }
}

/// The states of the spool's store, by hand: create, write, fsync,
/// rename, fsync of the directory.
#[test]
fn the_model_leaves_what_posix_allows_after_each_step_of_a_store() {
    let root = Path::new("/r");
    let before = Tree::from([("inbox".into(), Node::Dir), ("tmp".into(), Node::Dir)]);
    let (tmp, inbox) = (root.join("tmp/x"), root.join("inbox/x"));
    let ops = [
        Op::Create(tmp.clone()),
        Op::Write {
            path: tmp.clone(),
            offset: 0,
            bytes: b"abcd".to_vec(),
        },
        Op::Fsync(tmp.clone()),
        Op::Rename {
            from: tmp,
            to: inbox,
        },
        Op::DirFsync(root.join("inbox")),
    ];
    let rec = Recording::new(root, &before, &ops);
    let files = |k: usize| {
        let mut out = BTreeSet::new();
        rec.crash_states(k, &mut |tree| {
            let f: Vec<String> = (tree.iter())
                .filter_map(|(p, n)| match n {
                    Node::File(b) => {
                        Some(format!("{}={}", p.display(), String::from_utf8_lossy(b)))
                    }
                    Node::Dir => None,
                })
                .collect();
            out.insert(f.join(","));
        });
        out.into_iter().collect::<Vec<_>>()
    };
    assert_eq!(files(0), [""]);
    assert_eq!(files(1), ["", "tmp/x="]);
    // Not yet synced: nothing, half, zeros or all of the write.
    assert_eq!(
        files(2),
        ["", "tmp/x=", "tmp/x=\0\0\0\0", "tmp/x=ab", "tmp/x=abcd"]
    );
    assert_eq!(files(3), ["", "tmp/x=abcd"]);
    // The rename may land or not; it never lands without the create.
    assert_eq!(files(4), ["", "inbox/x=abcd", "tmp/x=abcd"]);
    assert_eq!(files(5), ["inbox/x=abcd"]);
}
