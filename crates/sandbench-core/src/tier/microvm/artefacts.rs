//! What the microVM tier boots, and how `sandbench setup microvm` builds it
//! into `<data dir>/microvm/`: the kernel, the initramfs (busybox-static, the
//! virtio modules this kernel does not have built in, `guest/init`, the
//! agent), the read-only ext4 root disk (Debian + python3) and the agent.
//! Each artefact carries a key of its inputs in `manifest.json`; setup
//! rebuilds only what is missing or whose key changed.

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{anyhow, bail, Context};
use serde::{Deserialize, Serialize};

use crate::config::{self, MicrovmConfig};
use crate::setup::{Progress, Step};

pub(crate) const INIT: &str = include_str!("../../../../../guest/init");
/// The guest agent, after the program's filter, the scratch guard's filter
/// and the egress relay it uses (which define names only).
pub(crate) const AGENT: &str = concat!(
    include_str!("../../../../../guest/program_filter.py"),
    include_str!("../../../../../guest/scratch_guard.py"),
    include_str!("../../../../../guest/egress_relay.py"),
    include_str!("../../../../../guest/agent.py")
);
/// Bump when the initramfs layout changes.
const INITRD_FORMAT: u32 = 1;
/// Bump when the root disk recipe changes.
const ROOTFS_RECIPE: u32 = 1;
/// Bump when the way the agent is installed into the root disk changes.
const IMAGE_FORMAT: u32 = 1;
/// Where the agent lives on the root disk.
pub(crate) const AGENT_IN_ROOT: &str = "usr/lib/sandbench";
/// Drivers the guest needs, in load order; built-in ones are skipped and
/// each module's own dependencies are loaded first.
pub(crate) const MODULES: &[&str] = &["virtio_ring", "virtio", "virtio_mmio", "virtio_blk", "virtio_console", "ext4"];
pub(crate) const BUSYBOX: &[&str] = &["/bin/busybox", "/usr/bin/busybox"];

#[derive(Debug, Clone)]
pub struct Paths {
    pub dir: PathBuf,
    pub kernel: PathBuf,
    pub initrd: PathBuf,
    pub rootfs: PathBuf,
    /// The debootstrapped tree the root disk is made from, kept so that a new
    /// agent only costs a byte-compile and a mkfs, not a debootstrap.
    pub tree: PathBuf,
    pub agent: PathBuf,
    pub manifest: PathBuf,
    pub accel: PathBuf,
    pub snapshots: PathBuf,
    pub runs: PathBuf,
    pub build_log: PathBuf,
}

pub fn paths() -> Paths {
    let dir = config::data_dir().join("microvm");
    Paths {
        kernel: dir.join("vmlinuz"),
        initrd: dir.join("initrd.cpio"),
        rootfs: dir.join("root.ext4"),
        tree: dir.join("rootfs.tree"),
        agent: dir.join("agent.py"),
        manifest: dir.join("manifest.json"),
        accel: dir.join("accel.json"),
        snapshots: dir.join("snapshots"),
        runs: dir.join("runs"),
        build_log: dir.join("build.log"),
        dir,
    }
}

/// The inputs each built artefact was made from.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct Manifest {
    pub kernel: Option<String>,
    pub kernel_version: Option<String>,
    pub initrd: Option<String>,
    pub modules: Vec<String>,
    /// Key of the debootstrapped tree.
    pub rootfs: Option<String>,
    /// Key of the root disk image (tree + agent).
    pub image: Option<String>,
    pub agent: Option<String>,
}

impl Manifest {
    pub(crate) fn load(p: &Paths) -> Manifest {
        std::fs::read(&p.manifest).ok().and_then(|b| serde_json::from_slice(&b).ok()).unwrap_or_default()
    }

    fn save(&self, p: &Paths) -> anyhow::Result<()> {
        write_atomic(&p.manifest, &serde_json::to_vec_pretty(self)?)
    }

    /// One key over everything a booted guest depends on (for snapshots).
    pub(crate) fn fingerprint(&self) -> String {
        fnv(&format!("{:?}|{:?}|{:?}|{:?}", self.kernel, self.initrd, self.image, self.agent))
    }
}

/// 64-bit FNV-1a, hex: stable across Rust versions (unlike `DefaultHasher`).
pub(crate) fn fnv(s: &str) -> String {
    fnv_bytes(s.as_bytes())
}

pub(crate) fn fnv_bytes(b: &[u8]) -> String {
    let mut h: u64 = 0xcbf29ce484222325;
    for &x in b {
        h ^= x as u64;
        h = h.wrapping_mul(0x100000001b3);
    }
    format!("{h:016x}")
}

fn stamp(path: &Path) -> String {
    match std::fs::metadata(path) {
        Ok(m) => {
            let mtime = m
                .modified()
                .ok()
                .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                .map(|d| d.as_secs())
                .unwrap_or(0);
            format!("{}:{}:{}", path.display(), m.len(), mtime)
        }
        Err(_) => format!("{}:missing", path.display()),
    }
}

pub(crate) struct KernelSource {
    pub path: PathBuf,
    pub version: String,
    pub modules: PathBuf,
}

/// The kernel release a bzImage announces in its setup header.
pub(crate) fn bzimage_version(path: &Path) -> Option<String> {
    use std::io::{Read, Seek, SeekFrom};
    let mut f = std::fs::File::open(path).ok()?;
    let mut hdr = [0u8; 0x210];
    f.read_exact(&mut hdr).ok()?;
    if &hdr[0x202..0x206] != b"HdrS" {
        return None;
    }
    let off = u16::from_le_bytes([hdr[0x20e], hdr[0x20f]]) as u64 + 0x200;
    f.seek(SeekFrom::Start(off)).ok()?;
    let mut s = [0u8; 256];
    let n = f.read(&mut s).ok()?;
    let text = String::from_utf8_lossy(&s[..n]);
    let v = text.split([' ', '\0']).next()?.trim().to_string();
    (!v.is_empty()).then_some(v)
}

/// The configured kernel, else the newest `/boot/vmlinuz-*`.
pub(crate) fn kernel_source(cfg: &MicrovmConfig) -> anyhow::Result<KernelSource> {
    let path = match &cfg.kernel {
        Some(p) => p.clone(),
        None => {
            let mut found: Vec<(std::time::SystemTime, PathBuf)> = std::fs::read_dir("/boot")
                .map(|rd| {
                    rd.flatten()
                        .filter(|e| e.file_name().to_string_lossy().starts_with("vmlinuz-"))
                        .filter_map(|e| Some((e.metadata().ok()?.modified().ok()?, e.path())))
                        .collect()
                })
                .unwrap_or_default();
            found.sort();
            found.pop().map(|(_, p)| p).ok_or_else(|| {
                anyhow!("no kernel in /boot: apt-get install linux-image-cloud-amd64, or set [microvm] kernel = \"/path/to/vmlinuz\" in the config")
            })?
        }
    };
    if !path.is_file() {
        bail!("kernel {} does not exist; fix [microvm] kernel in the config", path.display());
    }
    let version = bzimage_version(&path)
        .or_else(|| path.file_name()?.to_str()?.strip_prefix("vmlinuz-").map(String::from))
        .ok_or_else(|| anyhow!("cannot tell the version of kernel {}; set [microvm] modules_dir", path.display()))?;
    let modules = cfg.modules_dir.clone().unwrap_or_else(|| PathBuf::from("/lib/modules").join(&version));
    Ok(KernelSource { path, version, modules })
}

/// One module to put in the initramfs.
#[derive(Debug, Clone)]
pub(crate) struct ModuleFile {
    pub name: String,
    pub path: PathBuf,
}

/// Modules to load, dependencies first; built-in drivers are left out.
pub(crate) fn module_plan(modules_dir: &Path, wanted: &[&str]) -> anyhow::Result<(Vec<ModuleFile>, Vec<String>)> {
    let dep = std::fs::read_to_string(modules_dir.join("modules.dep")).with_context(|| {
        format!("cannot read {}/modules.dep (are the kernel's modules installed?)", modules_dir.display())
    })?;
    let builtin = std::fs::read_to_string(modules_dir.join("modules.builtin")).unwrap_or_default();
    let name_of = |p: &str| -> String {
        let f = p.rsplit('/').next().unwrap_or(p);
        f.split(".ko").next().unwrap_or(f).replace('-', "_")
    };
    let builtins: Vec<String> = builtin.lines().map(name_of).collect();
    let mut deps: std::collections::HashMap<String, (String, Vec<String>)> = Default::default();
    for line in dep.lines() {
        let Some((m, rest)) = line.split_once(':') else { continue };
        deps.insert(name_of(m), (m.to_string(), rest.split_whitespace().map(String::from).collect()));
    }
    let mut out: Vec<ModuleFile> = vec![];
    let mut built_in = vec![];
    fn add(
        name: &str,
        deps: &std::collections::HashMap<String, (String, Vec<String>)>,
        dir: &Path,
        out: &mut Vec<ModuleFile>,
        depth: usize,
    ) -> anyhow::Result<()> {
        if out.iter().any(|m| m.name == name) || depth > 32 {
            return Ok(());
        }
        let (rel, ds) = deps.get(name).ok_or_else(|| anyhow!("module {name} is missing from {}", dir.display()))?;
        for d in ds.iter().rev() {
            let dn = d.rsplit('/').next().unwrap_or(d);
            let dn = dn.split(".ko").next().unwrap_or(dn).replace('-', "_");
            add(&dn, deps, dir, out, depth + 1)?;
        }
        out.push(ModuleFile { name: name.to_string(), path: dir.join(rel) });
        Ok(())
    }
    for w in wanted {
        if builtins.iter().any(|b| b == w) {
            built_in.push(w.to_string());
            continue;
        }
        add(w, &deps, modules_dir, &mut out, 0)?;
    }
    Ok((out, built_in))
}

/// The state of one artefact, for `doctor` and `setup`.
#[derive(Debug, Clone)]
pub(crate) struct ArtefactState {
    pub name: &'static str,
    pub path: PathBuf,
    pub fresh: bool,
    pub detail: String,
}

struct Wanted {
    kernel: String,
    version: String,
    initrd: String,
    rootfs: String,
    image: String,
    agent: String,
    modules: Vec<ModuleFile>,
    built_in: Vec<String>,
    busybox: PathBuf,
    source: KernelSource,
}

fn busybox() -> anyhow::Result<PathBuf> {
    BUSYBOX
        .iter()
        .map(PathBuf::from)
        .find(|p| p.is_file())
        .ok_or_else(|| anyhow!("busybox is not installed: apt-get install busybox-static"))
}

/// The version of each of the guest's packages its root tree holds (dpkg's
/// status file; the tree is sandbench's own, built by `setup`): None where
/// it cannot be read.
pub(crate) fn guest_versions(tree: &Path) -> Vec<(&'static str, Option<String>)> {
    let pkgs: Vec<&'static str> = GUEST_PACKAGES.split(',').collect();
    package_versions(tree, &pkgs)
}

/// The versions of `pkgs` in the guest's root tree (its dpkg status, read
/// bounded): None for a package it lacks.
pub(crate) fn package_versions<'a>(tree: &Path, pkgs: &[&'a str]) -> Vec<(&'a str, Option<String>)> {
    use std::io::Read;
    let mut status = String::new();
    let read = std::fs::File::open(tree.join("var/lib/dpkg/status"))
        .and_then(|f| f.take(16 << 20).read_to_string(&mut status));
    let version = |pkg: &str| {
        status.split("\n\n").find(|s| s.lines().any(|l| l == format!("Package: {pkg}"))).and_then(|s| {
            s.lines().find_map(|l| l.strip_prefix("Version: ")).map(|v| crate::sanitize::inert_line(v, 60))
        })
    };
    pkgs.iter().map(|pkg| (*pkg, read.is_ok().then(|| version(pkg)).flatten())).collect()
}

/// The guest's packages, each with its version when known.
fn guest_packages(tree: &Path) -> String {
    let named =
        guest_versions(tree).into_iter().map(|(pkg, v)| v.map_or_else(|| pkg.to_string(), |v| format!("{pkg} {v}")));
    named.collect::<Vec<_>>().join(", ")
}

/// Debian packages the guest's root tree has besides the essential set:
/// the agent's python3 and the programs' interpreters.
pub(crate) const GUEST_PACKAGES: &str = "python3,nodejs";

fn wanted(cfg: &MicrovmConfig) -> anyhow::Result<Wanted> {
    let source = kernel_source(cfg)?;
    let (modules, built_in) = module_plan(&source.modules, MODULES)?;
    let bb = busybox()?;
    let agent = fnv(AGENT);
    let rootfs = fnv(&format!("{ROOTFS_RECIPE}|{}|{GUEST_PACKAGES}", cfg.suite));
    let mut ik = format!("{INITRD_FORMAT}|{}|{}|{}", source.version, stamp(&bb), fnv(INIT));
    for m in &modules {
        ik.push_str(&format!("|{}", stamp(&m.path)));
    }
    Ok(Wanted {
        kernel: format!("{}|{}", stamp(&source.path), source.version),
        version: source.version.clone(),
        initrd: fnv(&ik),
        rootfs: rootfs.clone(),
        image: fnv(&format!("{IMAGE_FORMAT}|{rootfs}|{agent}")),
        agent,
        modules,
        built_in,
        busybox: bb,
        source,
    })
}

/// Each artefact: present and built from the current inputs, or why not.
pub(crate) fn status(cfg: &MicrovmConfig) -> Vec<ArtefactState> {
    let p = paths();
    let m = Manifest::load(&p);
    let w = wanted(cfg);
    let size = |path: &Path| std::fs::metadata(path).map(|m| crate::units::size(m.len())).unwrap_or_default();
    let state = |name: &'static str, path: &Path, have: &Option<String>, want: Option<&String>, what: String| {
        let exists = path.is_file();
        let fresh = exists && want.is_some() && have.as_ref() == want;
        let detail = if !exists {
            "missing".to_string()
        } else if want.is_none() {
            format!("{what} ({}) — inputs unavailable", size(path))
        } else if fresh {
            format!("{what} ({})", size(path))
        } else {
            format!("stale: {what} inputs changed")
        };
        ArtefactState { name, path: path.to_path_buf(), fresh, detail }
    };
    let w_ok = w.as_ref().ok();
    let mut out = vec![
        state(
            "kernel",
            &p.kernel,
            &m.kernel,
            w_ok.map(|w| &w.kernel),
            format!("Linux {}", m.kernel_version.clone().unwrap_or_default()),
        ),
        state(
            "initramfs",
            &p.initrd,
            &m.initrd,
            w_ok.map(|w| &w.initrd),
            format!("busybox + {} module(s)", m.modules.len()),
        ),
        state(
            "root disk",
            &p.rootfs,
            &m.rootfs,
            w_ok.map(|w| &w.rootfs),
            format!("Debian {} + {}, read-only ext4", cfg.suite, guest_packages(&p.tree)),
        ),
        state("agent", &p.agent, &m.agent, w_ok.map(|w| &w.agent), "guest/agent.py on the guest's python3".into()),
    ];
    if let Err(e) = w {
        for a in &mut out {
            if !a.fresh {
                a.detail = format!("{} ({e:#})", a.detail);
            }
        }
    }
    out
}

/// `sandbench setup microvm`: build what is missing or stale, with progress.
pub(crate) async fn setup(cfg: &MicrovmConfig, force: bool, progress: &dyn Progress) -> anyhow::Result<()> {
    let p = paths();
    std::fs::create_dir_all(&p.dir).with_context(|| format!("cannot create {}", p.dir.display()))?;
    let w = wanted(cfg)?;
    let mut m = Manifest::load(&p);
    let line = |msg: String| progress.line(&msg);
    line(format!("microvm artefacts in {}", p.dir.display()));

    // Kernel.
    if force || m.kernel.as_ref() != Some(&w.kernel) || !p.kernel.is_file() {
        let pb = progress.step(&format!("kernel: copying {} (Linux {})", w.source.path.display(), w.version), None);
        copy_atomic(&w.source.path, &p.kernel)?;
        m.kernel = Some(w.kernel.clone());
        m.kernel_version = Some(w.version.clone());
        m.save(&p)?;
        done(pb, &line, format!("✓ kernel     Linux {} (from {})", w.version, w.source.path.display()));
    } else {
        line(format!("✓ kernel     Linux {} — up to date", w.version));
    }

    // Initramfs.
    if force || m.initrd.as_ref() != Some(&w.initrd) || !p.initrd.is_file() {
        let pb = progress.step("initramfs: busybox, modules, init, agent", None);
        let names = build_initrd(&p, &w)?;
        m.initrd = Some(w.initrd.clone());
        m.modules = names.clone();
        m.save(&p)?;
        done(
            pb,
            &line,
            format!("✓ initramfs  busybox + modules [{}] (built in: [{}])", names.join(", "), w.built_in.join(", ")),
        );
    } else {
        line(format!("✓ initramfs  up to date (modules [{}])", m.modules.join(", ")));
    }

    // The debootstrapped tree (slow: minutes on a slow mirror, so it is kept).
    if force
        || m.rootfs.as_ref() != Some(&w.rootfs)
        || !p.tree.join("usr/bin/python3").is_file()
        || !p.tree.join("usr/bin/node").is_file()
    {
        let pb = progress
            .step(&format!("root tree: mmdebstrap {} + {GUEST_PACKAGES} from {}", cfg.suite, mirror(cfg)), None);
        build_tree(cfg, &p, pb.as_ref()).await?;
        m.rootfs = Some(w.rootfs.clone());
        m.image = None;
        m.save(&p)?;
        done(pb, &line, format!("✓ root tree  Debian {} + {GUEST_PACKAGES} in {}", cfg.suite, p.tree.display()));
    } else {
        line("✓ root tree  up to date".into());
    }

    // The agent, byte-compiled by the guest's python3, and the disk image.
    if force || m.image.as_ref() != Some(&w.image) || m.agent.as_ref() != Some(&w.agent) || !p.rootfs.is_file() {
        let pb = progress.step("root disk: agent + mkfs.ext4", None);
        write_atomic(&p.agent, AGENT.as_bytes())?;
        build_image(&p).await?;
        m.agent = Some(w.agent.clone());
        m.image = Some(w.image.clone());
        m.save(&p)?;
        let size = std::fs::metadata(&p.rootfs).map(|x| crate::units::size(x.len())).unwrap_or_default();
        done(pb, &line, format!("✓ agent      {} → /{AGENT_IN_ROOT}/agent.pyc", p.agent.display()));
        line(format!("✓ root disk  Debian {} + {GUEST_PACKAGES} + agent, read-only ext4 {size}", cfg.suite));
    } else {
        line("✓ agent      up to date".into());
        line("✓ root disk  up to date".into());
    }
    Ok(())
}

fn done(pb: std::sync::Arc<dyn Step>, line: &dyn Fn(String), msg: String) {
    let secs = pb.elapsed_secs();
    pb.finish();
    line(format!("{msg} [{secs:.1} s]"));
}

fn copy_atomic(from: &Path, to: &Path) -> anyhow::Result<()> {
    let bytes = std::fs::read(from).with_context(|| format!("cannot read {}", from.display()))?;
    write_atomic(to, &bytes)
}

fn write_atomic(to: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    let tmp = to.with_extension("tmp");
    std::fs::write(&tmp, bytes).with_context(|| format!("cannot write {}", tmp.display()))?;
    std::fs::rename(&tmp, to).with_context(|| format!("cannot move {} into place", to.display()))?;
    Ok(())
}

/// A `newc` cpio archive, uncompressed: the kernel unpacks it without
/// spending emulated cycles on decompression.
struct Cpio {
    out: Vec<u8>,
    ino: u32,
}

impl Cpio {
    fn new() -> Self {
        Cpio { out: vec![], ino: 1 }
    }

    fn entry(&mut self, name: &str, mode: u32, data: &[u8], rdev: (u32, u32)) {
        let hdr = format!(
            "070701{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}",
            self.ino,
            mode,
            0,
            0,
            1,
            0,
            data.len(),
            0,
            0,
            rdev.0,
            rdev.1,
            name.len() + 1,
            0
        );
        self.ino += 1;
        self.out.extend_from_slice(hdr.as_bytes());
        self.out.extend_from_slice(name.as_bytes());
        self.out.push(0);
        self.pad();
        self.out.extend_from_slice(data);
        self.pad();
    }

    fn pad(&mut self) {
        while !self.out.len().is_multiple_of(4) {
            self.out.push(0);
        }
    }

    fn dir(&mut self, name: &str) {
        self.entry(name, 0o040755, &[], (0, 0));
    }

    fn file(&mut self, name: &str, perm: u32, data: &[u8]) {
        self.entry(name, 0o100000 | perm, data, (0, 0));
    }

    fn finish(mut self) -> Vec<u8> {
        self.entry("TRAILER!!!", 0, &[], (0, 0));
        self.out
    }
}

fn module_bytes(path: &Path) -> anyhow::Result<Vec<u8>> {
    let name = path.to_string_lossy();
    let tool = if name.ends_with(".ko.xz") {
        Some("xz")
    } else if name.ends_with(".ko.zst") {
        Some("zstd")
    } else if name.ends_with(".ko.gz") {
        Some("gzip")
    } else {
        None
    };
    match tool {
        None => std::fs::read(path).with_context(|| format!("cannot read {}", path.display())),
        Some(t) => {
            let out = std::process::Command::new(t)
                .args(["-dc"])
                .arg(path)
                .output()
                .with_context(|| format!("cannot run {t} to unpack {} (apt-get install {t})", path.display()))?;
            if !out.status.success() {
                bail!("{t} -dc {} failed", path.display());
            }
            Ok(out.stdout)
        }
    }
}

fn build_initrd(p: &Paths, w: &Wanted) -> anyhow::Result<Vec<String>> {
    let mut c = Cpio::new();
    for d in ["bin", "dev", "proc", "sys", "newroot", "modules"] {
        c.dir(d);
    }
    // The kernel opens /dev/console for init's stdio before init mounts devtmpfs.
    c.entry("dev/console", 0o020600, &[], (5, 1));
    c.file("init", 0o755, INIT.as_bytes());
    let bb = std::fs::read(&w.busybox).with_context(|| format!("cannot read {}", w.busybox.display()))?;
    c.file("bin/busybox", 0o755, &bb);
    let mut order = String::new();
    let mut names = vec![];
    for m in &w.modules {
        c.file(&format!("modules/{}.ko", m.name), 0o644, &module_bytes(&m.path)?);
        order.push_str(&m.name);
        order.push('\n');
        names.push(m.name.clone());
    }
    c.file("modules.order", 0o644, order.as_bytes());
    write_atomic(&p.initrd, &c.finish())?;
    Ok(names)
}

async fn build_tree(cfg: &MicrovmConfig, p: &Paths, pb: &dyn Step) -> anyhow::Result<()> {
    if !nix::unistd::geteuid().is_root() {
        bail!(
            "building the root disk needs root (mmdebstrap in root mode, then mkfs.ext4 -d): run `sudo -E sandbench setup microvm` \
             with SANDBENCH_DATA_DIR={} so the artefacts land here",
            config::data_dir().display()
        );
    }
    for tool in ["mmdebstrap", "mkfs.ext4"] {
        if which(tool).is_none() {
            bail!("{tool} is not installed: apt-get install mmdebstrap e2fsprogs");
        }
    }
    let build = p.dir.join("rootfs.build");
    let _ = std::fs::remove_dir_all(&build);
    let _ = std::fs::remove_dir_all(&p.tree);
    let log =
        std::fs::File::create(&p.build_log).with_context(|| format!("cannot create {}", p.build_log.display()))?;
    let mut child = tokio::process::Command::new("mmdebstrap")
        .args([
            "--mode=root",
            "--variant=essential",
            &format!("--include={GUEST_PACKAGES}"),
            "--aptopt=Acquire::Check-Valid-Until \"false\"",
            "--dpkgopt=path-exclude=/usr/share/doc/*",
            "--dpkgopt=path-exclude=/usr/share/man/*",
            "--dpkgopt=path-exclude=/usr/share/locale/*",
            "--customize-hook=mkdir -p \"$1/work\" && rm -rf \"$1\"/var/cache/apt/* \"$1\"/var/lib/apt/lists/*",
            &cfg.suite,
        ])
        .arg(&build)
        .arg(mirror(cfg))
        .stdin(std::process::Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .context("cannot start mmdebstrap")?;
    // Show mmdebstrap's progress lines in the spinner, keep them all in the log.
    let mut err = tokio::io::BufReader::new(child.stderr.take().ok_or_else(|| anyhow!("no stderr"))?);
    let mut logw = log;
    let mut last = String::new();
    let mut buf = String::new();
    use tokio::io::AsyncBufReadExt;
    while err.read_line(&mut buf).await.unwrap_or(0) > 0 {
        let _ = logw.write_all(buf.as_bytes());
        let l = buf.trim().to_string();
        if !l.is_empty() {
            pb.message(&format!("root disk: {}", crate::sanitize::inert_line(&l, 70)));
            last = l;
        }
        buf.clear();
    }
    let st = child.wait().await?;
    if !st.success() {
        let _ = std::fs::remove_dir_all(&build);
        bail!(
            "mmdebstrap failed ({last}); full log in {} — is the mirror {} reachable (set [microvm] mirror)?",
            p.build_log.display(),
            mirror(cfg)
        );
    }
    std::fs::rename(&build, &p.tree).with_context(|| format!("cannot move the tree to {}", p.tree.display()))?;
    Ok(())
}

/// Install the agent into the tree, byte-compile it with the tree's own
/// python3 (so the byte code matches the guest's interpreter), and make the
/// read-only ext4 image.
async fn build_image(p: &Paths) -> anyhow::Result<()> {
    let dir = p.tree.join(AGENT_IN_ROOT);
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    std::fs::write(dir.join("agent.py"), AGENT).context("cannot install the agent")?;
    let _ = std::fs::remove_file(dir.join("agent.pyc"));
    let script = format!(
        "import py_compile; py_compile.compile('/{AGENT_IN_ROOT}/agent.py', cfile='/{AGENT_IN_ROOT}/agent.pyc', doraise=True, \
         invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH)"
    );
    let chroot = which("chroot").ok_or_else(|| anyhow!("chroot is not installed (coreutils)"))?;
    let out = tokio::process::Command::new(chroot)
        .arg(&p.tree)
        .args(["/usr/bin/python3", "-I", "-S", "-c", &script])
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .output()
        .await
        .context("cannot run chroot")?;
    if !out.status.success() || !dir.join("agent.pyc").is_file() {
        bail!(
            "byte-compiling the agent with the guest's python3 failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    let mb = dir_size(&p.tree) / (1 << 20);
    let size = mb + mb / 4 + 32;
    let tmp = p.rootfs.with_extension("tmp");
    let out = tokio::process::Command::new("mkfs.ext4")
        .args(["-q", "-F", "-L", "sandbench-root", "-m", "0", "-O", "^has_journal", "-d"])
        .arg(&p.tree)
        .arg(&tmp)
        .arg(format!("{size}M"))
        .output()
        .await
        .context("cannot run mkfs.ext4")?;
    if !out.status.success() {
        let _ = std::fs::remove_file(&tmp);
        bail!("mkfs.ext4 failed: {}", String::from_utf8_lossy(&out.stderr).trim());
    }
    std::fs::rename(&tmp, &p.rootfs)?;
    Ok(())
}

/// The Debian mirror to debootstrap from: the configured one, else the one
/// the host's apt already uses (a local mirror or proxy keeps working), else
/// deb.debian.org.
pub(crate) fn mirror(cfg: &MicrovmConfig) -> String {
    if let Some(m) = &cfg.mirror {
        return m.clone();
    }
    let mut texts = vec![];
    if let Ok(rd) = std::fs::read_dir("/etc/apt/sources.list.d") {
        let mut files: Vec<_> = rd.flatten().map(|e| e.path()).collect();
        files.sort();
        for f in files {
            if f.extension().is_some_and(|x| x == "sources" || x == "list") {
                texts.push((
                    f.extension().is_some_and(|x| x == "sources"),
                    std::fs::read_to_string(&f).unwrap_or_default(),
                ));
            }
        }
    }
    texts.insert(0, (false, std::fs::read_to_string("/etc/apt/sources.list").unwrap_or_default()));
    texts
        .iter()
        .find_map(|(deb822, t)| host_mirror(t, *deb822))
        .unwrap_or_else(|| "http://deb.debian.org/debian".into())
}

/// The first Debian archive (not security, not a third-party repo) in one
/// apt sources file, in one-line or deb822 format.
pub(crate) fn host_mirror(text: &str, deb822: bool) -> Option<String> {
    let debian = |u: &str| {
        let u = u.trim_end_matches('/');
        (u.starts_with("http://") || u.starts_with("https://")) && u.ends_with("/debian")
    };
    if deb822 {
        for block in text.split("\n\n") {
            let field = |name: &str| block.lines().find_map(|l| l.strip_prefix(name).map(|v| v.trim().to_string()));
            if field("Types:").is_some_and(|t| t.split_whitespace().any(|x| x == "deb")) {
                if let Some(u) = field("URIs:").and_then(|u| u.split_whitespace().find(|u| debian(u)).map(String::from))
                {
                    return Some(u.trim_end_matches('/').to_string());
                }
            }
        }
        return None;
    }
    text.lines().find_map(|l| {
        let mut w = l.split_whitespace();
        if w.next()? != "deb" {
            return None;
        }
        let mut u = w.next()?;
        if u.starts_with('[') {
            if !u.ends_with(']') {
                w.find(|x| x.ends_with(']'))?;
            }
            u = w.next()?;
        }
        debian(u).then(|| u.trim_end_matches('/').to_string())
    })
}

fn dir_size(p: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let mut total = 0;
    let mut stack = vec![p.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else { continue };
        for e in rd.flatten() {
            let Ok(m) = e.path().symlink_metadata() else { continue };
            if m.is_dir() {
                stack.push(e.path());
            }
            total += m.blocks() * 512;
        }
    }
    total
}

pub(crate) use crate::host::which;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpio_entries_are_aligned_and_terminated() {
        let mut c = Cpio::new();
        c.file("init", 0o755, b"#!/bin/sh\n");
        let out = c.finish();
        assert!(out.starts_with(b"070701"));
        assert_eq!(out.len() % 4, 0);
        assert!(out.windows(10).any(|w| w == b"TRAILER!!!"));
    }

    #[test]
    fn module_plan_orders_dependencies_first_and_skips_builtins() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("modules.dep"),
            "kernel/drivers/virtio/virtio_ring.ko:\nkernel/drivers/virtio/virtio.ko: kernel/drivers/virtio/virtio_ring.ko\n\
             kernel/drivers/block/virtio_blk.ko: kernel/drivers/virtio/virtio.ko kernel/drivers/virtio/virtio_ring.ko\n",
        )
        .unwrap();
        std::fs::write(dir.path().join("modules.builtin"), "kernel/fs/ext4/ext4.ko\n").unwrap();
        let (mods, builtin) = module_plan(dir.path(), &["virtio_blk", "ext4"]).unwrap();
        let names: Vec<_> = mods.iter().map(|m| m.name.as_str()).collect();
        assert_eq!(names, ["virtio_ring", "virtio", "virtio_blk"]);
        assert_eq!(builtin, ["ext4"]);
        assert!(module_plan(dir.path(), &["nope"]).unwrap_err().to_string().contains("missing"));
    }

    #[test]
    fn host_mirror_from_apt_sources() {
        let deb822 = "Types: deb\nURIs: http://deb.debian.org/debian\nSuites: bookworm\n\n\
                      Types: deb\nURIs: http://deb.debian.org/debian-security\nSuites: bookworm-security\n";
        assert_eq!(host_mirror(deb822, true).as_deref(), Some("http://deb.debian.org/debian"));
        let list = "# comment\ndeb-src http://x/debian bookworm main\ndeb [arch=amd64] http://mirror.local/debian/ bookworm main\n";
        assert_eq!(host_mirror(list, false).as_deref(), Some("http://mirror.local/debian"));
        assert_eq!(host_mirror("deb https://packages.cloud.google.com/apt cloud-sdk main\n", false), None);
    }

    #[test]
    fn fnv_is_stable() {
        assert_eq!(fnv(""), "cbf29ce484222325");
        assert_ne!(fnv("a"), fnv("b"));
    }
}
