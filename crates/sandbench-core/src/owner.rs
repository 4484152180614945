//! Who owns a leftover, provably across pid namespaces and hosts.
//!
//! Every sandbench process holds an exclusive `flock` on its own owner lock
//! file, `<state>/owners/<token>.lock`, for as long as it lives, and names
//! everything it leaves on the machine (run cgroups, containers, QEMU
//! processes, run folders) with its token: `<host>-<boot>-<pid>-<nonce>`.
//!
//! A reaper removes a leftover only when the token names this host and this
//! boot AND the owner's lock file can be locked: the kernel drops a `flock`
//! when its holder dies, whatever pid namespace either side is in, so a held
//! lock means alive. A pid is not proof of anything here: a sandbench in a
//! pid namespace sees no other sandbench's pid, and a sandbench on another
//! host sharing a Docker engine (`DOCKER_HOST`) sees none of ours. So:
//! another host's or another boot's token, a malformed one, or a token whose
//! lock file is missing, are never touched.
//!
//! The pid is only there for people reading `docker ps`; the random nonce
//! makes tokens unique when two pid namespaces reuse a pid in the same tick
//! (a start time would not).
//!
//! A lock is proof only if nobody else can hold or replace it: `flock` needs
//! no more than a read descriptor, so another local user who could open a
//! dead owner's lock could hold it for ever and keep its leftovers from
//! being reaped. The folder is this user's alone (0700, checked on its
//! descriptor, never through a link), each lock file is 0600 and made with
//! `O_CREAT | O_EXCL | O_NOFOLLOW` below it, and a reaper trusts a lock file
//! only if it is a regular file of this user that nobody else may read.

use std::collections::HashMap;
use std::fs::{self, File};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use anyhow::Context;
use nix::fcntl::{Flock, FlockArg};

const ID_LEN: usize = 12;
const NONCE_LEN: usize = 8;

/// This host and this boot, as they appear in tokens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Machine {
    pub host: String,
    pub boot: String,
}

fn hex_prefix(s: &str) -> Option<String> {
    let h: String = s.chars().filter(|c| *c != '-').map(|c| c.to_ascii_lowercase()).collect();
    (h.len() >= ID_LEN && h.chars().all(|c| c.is_ascii_hexdigit())).then(|| h[..ID_LEN].to_string())
}

/// 64-bit FNV-1a: a stable id from a host name when there is no machine id.
fn fnv(s: &str) -> String {
    let mut h: u64 = 0xcbf29ce484222325;
    for b in s.bytes() {
        h ^= b as u64;
        h = h.wrapping_mul(0x100000001b3);
    }
    format!("{h:016x}")[..ID_LEN].to_string()
}

fn read_machine() -> anyhow::Result<Machine> {
    let host = ["/etc/machine-id", "/var/lib/dbus/machine-id"]
        .iter()
        .find_map(|p| fs::read_to_string(p).ok().and_then(|s| hex_prefix(s.trim())))
        .or_else(|| nix::unistd::gethostname().ok().map(|h| fnv(&h.to_string_lossy())))
        .context("this host has neither a machine id nor a host name")?;
    let boot = fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .ok()
        .and_then(|s| hex_prefix(s.trim()))
        .context("cannot read the boot id (/proc/sys/kernel/random/boot_id)")?;
    Ok(Machine { host, boot })
}

pub fn machine() -> anyhow::Result<&'static Machine> {
    static M: OnceLock<Result<Machine, String>> = OnceLock::new();
    M.get_or_init(|| read_machine().map_err(|e| format!("{e:#}"))).as_ref().map_err(|e| anyhow::anyhow!("{e}"))
}

/// Where owner lock files live: shared by every sandbench of this user on
/// this machine (root's in `/run`, which a reboot empties).
pub fn dir() -> PathBuf {
    if nix::unistd::geteuid().is_root() {
        return PathBuf::from("/run/sandbench/owners");
    }
    match dirs::runtime_dir() {
        Some(d) => d.join("sandbench/owners"),
        None => std::env::temp_dir().join(format!("sandbench-owners-{}", nix::unistd::geteuid())),
    }
}

/// The folder, made if missing, this user's alone (0700): whoever could
/// replace a lock file could make a live run look dead, and whoever could
/// open one could keep a dead one's leftovers for ever.
fn checked_dir(dir: &Path) -> anyhow::Result<crate::fsafe::Dir> {
    if let Some(parent) = dir.parent() {
        fs::create_dir_all(parent).with_context(|| format!("cannot create {}", parent.display()))?;
    }
    crate::fsafe::private_dir(dir, 0o700).map_err(|e| anyhow::anyhow!("owner locks: {e}"))
}

/// Open an existing lock file for `flock` and check it is one a reaper may
/// trust: a regular file of this user that nobody else may open.
fn open_lock(dir: &crate::fsafe::Dir, name: &str) -> Option<File> {
    let f = dir.open_read(Path::new(name)).ok()?;
    let st = nix::sys::stat::fstat(&f).ok()?;
    (st.st_uid == nix::unistd::geteuid().as_raw() && st.st_mode & 0o077 == 0).then_some(f)
}

fn nonce() -> anyhow::Result<String> {
    crate::host::random_hex(NONCE_LEN / 2).context("cannot read /dev/urandom for the owner token")
}

/// A live owner: its lock is held until it is dropped (or the process ends).
pub struct Owner {
    token: String,
    path: PathBuf,
    _lock: Flock<File>,
}

impl Owner {
    /// A new owner in `dir`. Each sandbench process has one ([`this`]); tests
    /// make more to stand in for other (live or, dropped, dead) processes.
    pub fn acquire_in(dir: &Path) -> anyhow::Result<Owner> {
        let m = machine()?;
        let d = checked_dir(dir)?;
        let token = format!("{}-{}-{}-{}", m.host, m.boot, std::process::id(), nonce()?);
        let path = dir.join(format!("{token}.lock"));
        use nix::fcntl::OFlag;
        let f = d
            .open_beneath(
                Path::new(&format!("{token}.lock")),
                OFlag::O_RDWR | OFlag::O_CREAT | OFlag::O_EXCL,
                nix::sys::stat::Mode::from_bits_truncate(0o600),
            )
            .map(File::from)
            .with_context(|| format!("cannot create the owner lock {}", path.display()))?;
        let lock = Flock::lock(f, FlockArg::LockExclusiveNonblock)
            .map_err(|(_, e)| anyhow::anyhow!("cannot lock {}: {e}", path.display()))?;
        Ok(Owner { token, path, _lock: lock })
    }

    pub fn token(&self) -> &str {
        &self.token
    }

    pub fn lock_path(&self) -> &Path {
        &self.path
    }
}

/// This process's owner, made on first use.
pub fn this() -> anyhow::Result<&'static Owner> {
    static O: OnceLock<Result<Owner, String>> = OnceLock::new();
    O.get_or_init(|| Owner::acquire_in(&dir()).map_err(|e| format!("{e:#}")))
        .as_ref()
        .map_err(|e| anyhow::anyhow!("no owner lock, so nothing can be created that a reaper could judge: {e}"))
}

/// This process's token. Without one nothing may be created: a leftover
/// without a provable owner could never be reaped, or would be reaped live.
pub fn token() -> anyhow::Result<&'static str> {
    this().map(Owner::token)
}

/// At a normal exit, after everything the process made is gone: drop the
/// lock file so that the folder does not grow with every run. (A process
/// that dies leaves its file, unlocked: that is what lets its leftovers go.)
pub fn release() {
    if let Ok(o) = this() {
        let _ = fs::remove_file(&o.path);
    }
}

/// The fields of a token.
#[derive(Debug, PartialEq, Eq)]
pub struct Token<'a> {
    pub host: &'a str,
    pub boot: &'a str,
    pub pid: u32,
    pub nonce: &'a str,
}

fn is_hex(s: &str, len: usize) -> bool {
    s.len() == len && s.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// A token, alone.
pub fn parse(s: &str) -> Option<Token<'_>> {
    match split(s)? {
        (t, "") => Some(t),
        _ => None,
    }
}

/// A name that starts with a token (`<token>-<rest>` or the token alone):
/// the token and the rest.
pub fn split(name: &str) -> Option<(Token<'_>, &str)> {
    let mut it = name.splitn(5, '-');
    let (host, boot, pid, tail) = (it.next()?, it.next()?, it.next()?, it.next()?);
    let rest = it.next().unwrap_or("");
    if !is_hex(host, ID_LEN) || !is_hex(boot, ID_LEN) || pid.is_empty() || !pid.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let nonce = tail;
    if !is_hex(nonce, NONCE_LEN) {
        return None;
    }
    Some((Token { host, boot, pid: pid.parse().ok()?, nonce }, rest))
}

impl Token<'_> {
    /// The token text (for the lock file name).
    pub fn text(&self) -> String {
        format!("{}-{}-{}-{}", self.host, self.boot, self.pid, self.nonce)
    }
}

/// Prefix of an [`opaque`] name.
pub const OPAQUE_PREFIX: &str = "sb-";
const OPAQUE_LEN: usize = 16;

/// The token as a name a sandbox may see (a process run's cgroup path):
/// `sb-` and 16 hex digits of its SHA-256, so that a program learns nothing
/// of the host (machine id, sandbench's pid) from it. A reaper maps it back
/// through the owner lock files ([`Sweep::judge_name`]).
pub fn opaque(token: &str) -> String {
    use sha2::{Digest, Sha256};
    let h = Sha256::digest(token.as_bytes());
    let hex: String = h.iter().map(|b| format!("{b:02x}")).collect();
    format!("{OPAQUE_PREFIX}{}", &hex[..OPAQUE_LEN])
}

/// The hash part of an opaque name (`sb-<16 hex>` or `sb-<16 hex>-<rest>`).
fn opaque_part(name: &str) -> Option<&str> {
    let rest = name.strip_prefix(OPAQUE_PREFIX)?;
    let (h, tail) = rest.split_at_checked(OPAQUE_LEN)?;
    (is_hex(h, OPAQUE_LEN) && (tail.is_empty() || tail.starts_with('-'))).then_some(h)
}

/// What a reaper may do with a token's leftovers.
#[derive(Debug, PartialEq, Eq, Clone, Copy)]
pub enum Judgement {
    /// This host, this boot, and the owner's lock could be taken: reap.
    Dead,
    /// The lock is held: a live sandbench, whatever its pid namespace.
    Alive,
    /// Another host or another boot: never ours to judge.
    Foreign,
    /// Not a token, or no lock file to prove anything: leave alone.
    Unknown,
}

/// One pass of a reaper. The locks of dead owners are held until the sweep
/// is dropped, so two reapers never work on the same owner's leftovers, and
/// each owner is judged once however many leftovers carry its token.
pub struct Sweep {
    dir: PathBuf,
    judged: HashMap<String, (Judgement, Option<Flock<File>>)>,
    /// Opaque hash -> token, from the lock files (listed once per sweep).
    opaque: Option<HashMap<String, String>>,
}

impl Default for Sweep {
    fn default() -> Self {
        Sweep::new()
    }
}

impl Sweep {
    pub fn new() -> Sweep {
        Sweep::in_dir(dir())
    }

    pub fn in_dir(dir: PathBuf) -> Sweep {
        Sweep { dir, judged: HashMap::new(), opaque: None }
    }

    /// Judge the owner of a name that starts with a token, or with an
    /// [`opaque`] one (whose token only a lock file in this sweep's folder
    /// can name: none, and nothing is proved).
    pub fn judge_name(&mut self, name: &str) -> Judgement {
        if let Some(h) = opaque_part(name) {
            let dir = &self.dir;
            let map = self.opaque.get_or_insert_with(|| {
                fs::read_dir(dir)
                    .map(|rd| {
                        rd.flatten()
                            .filter_map(|e| e.file_name().to_str()?.strip_suffix(".lock").map(str::to_string))
                            .filter(|t| parse(t).is_some())
                            .map(|t| (opaque(&t)[OPAQUE_PREFIX.len()..].to_string(), t))
                            .collect()
                    })
                    .unwrap_or_default()
            });
            let token = map.get(h).cloned().or_else(|| {
                this().ok().map(|o| o.token().to_string()).filter(|t| opaque(t)[OPAQUE_PREFIX.len()..] == *h)
            });
            return match token {
                Some(t) => self.judge(&t),
                None => Judgement::Unknown,
            };
        }
        match split(name) {
            Some((t, _)) => self.judge_token(&t),
            None => Judgement::Unknown,
        }
    }

    pub fn judge(&mut self, token: &str) -> Judgement {
        match parse(token) {
            Some(t) => self.judge_token(&t),
            None => Judgement::Unknown,
        }
    }

    /// Dead, provably: the only judgement that allows removing anything.
    pub fn dead(&mut self, token: &str) -> bool {
        self.judge(token) == Judgement::Dead
    }

    pub fn name_dead(&mut self, name: &str) -> bool {
        self.judge_name(name) == Judgement::Dead
    }

    fn judge_token(&mut self, t: &Token) -> Judgement {
        let Ok(m) = machine() else { return Judgement::Unknown };
        if t.host != m.host || t.boot != m.boot {
            return Judgement::Foreign;
        }
        let text = t.text();
        if let Some((j, _)) = self.judged.get(&text) {
            return *j;
        }
        let (j, lock) = self.try_lock(&text);
        self.judged.insert(text, (j, lock));
        j
    }

    /// The sweep's folder, if it is this user's alone.
    fn trusted_dir(&self) -> Option<crate::fsafe::Dir> {
        let d = crate::fsafe::Dir::open(&self.dir).ok()?;
        let st = d.stat_self().ok()?;
        (st.uid == nix::unistd::geteuid().as_raw() && st.mode & 0o077 == 0).then_some(d)
    }

    fn try_lock(&self, token: &str) -> (Judgement, Option<Flock<File>>) {
        if this().is_ok_and(|o| o.token == token) {
            return (Judgement::Alive, None);
        }
        // A folder or a lock file anyone else could reach proves nothing.
        let Some(f) = self.trusted_dir().and_then(|d| open_lock(&d, &format!("{token}.lock"))) else {
            return (Judgement::Unknown, None);
        };
        match Flock::lock(f, FlockArg::LockExclusiveNonblock) {
            Ok(l) => (Judgement::Dead, Some(l)),
            Err((_, nix::errno::Errno::EWOULDBLOCK)) => (Judgement::Alive, None),
            Err(_) => (Judgement::Unknown, None),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_parse_and_names_split() {
        let t = "0123456789ab-ba9876543210-42-deadbeef";
        let p = parse(t).unwrap();
        assert_eq!((p.host, p.boot, p.pid, p.nonce), ("0123456789ab", "ba9876543210", 42, "deadbeef"));
        assert_eq!(p.text(), t);
        let name = format!("{t}-7-bwrap");
        let (p2, rest) = split(&name).unwrap();
        assert_eq!((p2, rest), (p, "7-bwrap"));
        for bad in
            ["", "garbage", "machine:1:1", "0123456789ab-ba9876543210-42", "0123456789AB-ba9876543210-1-deadbeef"]
        {
            assert!(parse(bad).is_none(), "{bad}");
        }
        assert!(parse(&format!("{t}-1")).is_none(), "a name is not a token");
    }

    #[test]
    fn live_dead_foreign_and_unknown_owners() {
        let dir = tempfile::tempdir().unwrap();
        let live = Owner::acquire_in(dir.path()).unwrap();
        let dead = Owner::acquire_in(dir.path()).unwrap();
        let dead_token = dead.token().to_string();
        drop(dead);
        let m = machine().unwrap();
        let mut s = Sweep::in_dir(dir.path().to_path_buf());
        // Same process, another open file: the held lock alone says alive.
        assert_eq!(s.judge(live.token()), Judgement::Alive);
        assert_eq!(s.judge(&dead_token), Judgement::Dead);
        // A second sweep at the same time cannot judge it dead again.
        assert_eq!(Sweep::in_dir(dir.path().to_path_buf()).judge(&dead_token), Judgement::Alive);
        assert_eq!(s.judge_name(&format!("{dead_token}-3")), Judgement::Dead, "judged once per sweep");
        let other_host = format!("ffffffffffff-{}-1-00000000", m.boot);
        let other_boot = format!("{}-ffffffffffff-1-00000000", m.host);
        std::fs::write(dir.path().join(format!("{other_host}.lock")), "").unwrap();
        std::fs::write(dir.path().join(format!("{other_boot}.lock")), "").unwrap();
        if m.host != "ffffffffffff" {
            assert_eq!(s.judge(&other_host), Judgement::Foreign);
        }
        if m.boot != "ffffffffffff" {
            assert_eq!(s.judge(&other_boot), Judgement::Foreign);
        }
        let no_file = format!("{}-{}-1-00000000", m.host, m.boot);
        assert_eq!(s.judge(&no_file), Judgement::Unknown);
        assert_eq!(s.judge("machine:1:1"), Judgement::Unknown);
    }

    #[test]
    fn opaque_names_hide_the_token_and_are_judged_through_the_lock_files() {
        let dir = tempfile::tempdir().unwrap();
        let live = Owner::acquire_in(dir.path()).unwrap();
        let dead = Owner::acquire_in(dir.path()).unwrap();
        let (dead_token, dead_name) = (dead.token().to_string(), format!("{}-4", opaque(dead.token())));
        drop(dead);
        let m = machine().unwrap();
        for n in [&dead_name, &opaque(live.token())] {
            assert!(!n.contains(&m.host) && !n.contains(&std::process::id().to_string()), "{n} shows the host");
            assert_eq!(n.len(), OPAQUE_PREFIX.len() + OPAQUE_LEN + if n == &dead_name { 2 } else { 0 });
        }
        let mut s = Sweep::in_dir(dir.path().to_path_buf());
        assert_eq!(s.judge_name(&format!("{}-0", opaque(live.token()))), Judgement::Alive);
        assert_eq!(s.judge_name(&dead_name), Judgement::Dead);
        assert_eq!(s.judge(&dead_token), Judgement::Dead, "the same owner, judged once");
        // No lock file hashes to it: nothing is proved.
        assert_eq!(s.judge_name("sb-0123456789abcdef-1"), Judgement::Unknown);
        assert_eq!(s.judge_name("sb-0123456789abcdeX-1"), Judgement::Unknown);
        assert_eq!(s.judge_name("sb-0123456789abcdef1"), Judgement::Unknown);
    }

    #[test]
    fn the_lock_folder_and_files_are_this_users_alone() {
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        let dir = tempfile::tempdir().unwrap();
        // Ours but open to others (an older sandbench's 0755, or worse): made
        // ours alone, on its descriptor.
        fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o777)).unwrap();
        let o = Owner::acquire_in(dir.path()).unwrap();
        assert_eq!(fs::metadata(dir.path()).unwrap().mode() & 0o7777, 0o700);
        assert_eq!(fs::metadata(o.lock_path()).unwrap().mode() & 0o7777, 0o600);
        // A link in its place is refused.
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(dir.path(), &link).unwrap();
        assert!(Owner::acquire_in(&link).is_err());
        // A lock file others may read proves nothing, dead or alive.
        let dead = Owner::acquire_in(dir.path()).unwrap();
        let (token, path) = (dead.token().to_string(), dead.lock_path().to_path_buf());
        drop(dead);
        fs::set_permissions(&path, fs::Permissions::from_mode(0o644)).unwrap();
        assert_eq!(Sweep::in_dir(dir.path().to_path_buf()).judge(&token), Judgement::Unknown);
        fs::set_permissions(&path, fs::Permissions::from_mode(0o600)).unwrap();
        assert_eq!(Sweep::in_dir(dir.path().to_path_buf()).judge(&token), Judgement::Dead);
    }
}
