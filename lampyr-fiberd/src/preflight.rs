//! The grant Pod's init step (`fiberd-helper`): checks, before fiberd starts,
//! that the node can run fibers and that the Pod's volumes are usable.
//!
//! [`check`] runs, in order:
//! 1. the KVM device (`/dev/kvm`): it exists, is a character device, opens
//!    read-write, answers KVM's `KVM_GET_API_VERSION` with the stable version
//!    12, has `KVM_CAP_USER_MEMORY`, and creates a VM; for `/dev/kvm` itself,
//!    Hyperlight (`hyperlight_host::is_hypervisor_present`) must agree, since
//!    that is the device fiberd's sandboxes open;
//! 2. the artifact cache directory, when given: a directory a file can be
//!    created in;
//! 3. the fleet key file, when given: absent (the first `ly deploy` creates
//!    the Secret; the grant Pod mounts it optionally), or a readable, valid key.
//!
//! The first check that fails is a [`PreflightError`] whose text is one line
//! saying what failed and what to do; `fiberd-helper` writes it to the
//! container's termination-message file ([`write_termination_message`]), which
//! `kubectl describe pod` shows.

use std::ffi::CString;
use std::fs::{File, OpenOptions};
use std::io::{ErrorKind, Write as _};
use std::os::unix::ffi::OsStrExt as _;
use std::os::unix::fs::FileTypeExt as _;
use std::path::{Path, PathBuf};

use kvm_ioctls::{Cap, Kvm};
use lampyr_artifact::seal::FleetKey;

use crate::config::FleetKeySource;
use crate::error::FleetKeyError;

/// The KVM device Hyperlight opens.
pub const KVM_DEVICE: &str = "/dev/kvm";
/// Where Kubernetes reads a container's termination message by default.
pub const TERMINATION_LOG: &str = "/dev/termination-log";
/// KVM's stable API version: the only one the kernel has answered since 2007, and Hyperlight's requirement.
pub const KVM_API_VERSION: i32 = 12;

/// How the grant Pod gets its KVM device: what a failed check advises.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KvmSource {
    /// The node's `/dev/kvm`, a hostPath mount into a privileged container (the grant controller's default).
    HostPath,
    /// One unit of a device plugin's resource (the grant controller's `--kvm-device-plugin`).
    DevicePlugin(String),
}

impl KvmSource {
    /// What to do when the device is missing or cannot be opened.
    fn advice(&self) -> String {
        match self {
            KvmSource::HostPath => "the grant Pod must run privileged with the node's /dev/kvm mounted (fiberd-k8s-controller's \
                 default: check that the node has /dev/kvm and that no admission policy drops `privileged`), or get \
                 /dev/kvm from a device plugin (fiberd-k8s-controller --kvm-device-plugin RESOURCE)"
                .to_string(),
            KvmSource::DevicePlugin(resource) => format!(
                "the device plugin resource {resource} must give the container /dev/kvm (check that the plugin runs on \
                 the node: `kubectl describe node` lists {resource} under Allocatable), or run fiberd-k8s-controller \
                 without --kvm-device-plugin to mount the node's /dev/kvm into a privileged grant Pod"
            ),
        }
    }
}

/// What to check.
#[derive(Clone, Debug)]
pub struct PreflightConfig {
    /// The KVM device (default [`KVM_DEVICE`]).
    pub kvm_device: PathBuf,
    /// How the grant Pod gets it.
    pub kvm_source: KvmSource,
    /// fiberd's artifact cache directory, when it is to be checked.
    pub cache_dir: Option<PathBuf>,
    /// The mounted fleet key file, when it is to be checked.
    pub fleet_key_file: Option<PathBuf>,
}

impl Default for PreflightConfig {
    fn default() -> Self {
        PreflightConfig { kvm_device: PathBuf::from(KVM_DEVICE), kvm_source: KvmSource::HostPath, cache_dir: None, fleet_key_file: None }
    }
}

/// What the checks found, when every one passed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Preflight {
    /// The KVM API version the device answered.
    pub kvm_api_version: i32,
    /// The cache directory checked writable, if any.
    pub cache_dir: Option<PathBuf>,
    /// Whether the fleet key file is there (and valid); `None` when not checked.
    pub fleet_key_present: Option<bool>,
}

/// The first check that failed. Its text is one line: what failed, and what to do.
#[derive(Debug, thiserror::Error)]
pub enum PreflightError {
    /// The device does not exist.
    #[error("{}: does not exist in the container: {advice}", device.display())]
    KvmMissing {
        /// The device path.
        device: PathBuf,
        /// What to do.
        advice: String,
    },
    /// The path is something other than a character device.
    #[error("{}: not a character device (it is {kind}): {advice}", device.display())]
    KvmNotCharDevice {
        /// The device path.
        device: PathBuf,
        /// What it is instead.
        kind: &'static str,
        /// What to do.
        advice: String,
    },
    /// Opening the device read-write was refused.
    #[error("{}: permission denied opening it read-write: {advice}", device.display())]
    KvmPermissionDenied {
        /// The device path.
        device: PathBuf,
        /// What to do.
        advice: String,
    },
    /// The device could not be opened or examined for another reason.
    #[error("{}: cannot {what}: {source}", device.display())]
    KvmIo {
        /// The device path.
        device: PathBuf,
        /// What was being done.
        what: &'static str,
        /// Why it failed.
        source: std::io::Error,
    },
    /// The device does not answer KVM's ioctls.
    #[error(
        "{}: not a KVM device: KVM_GET_API_VERSION failed ({source}); fibers need the node's KVM device, /dev/kvm",
        device.display()
    )]
    NotKvm {
        /// The device path.
        device: PathBuf,
        /// The ioctl's error.
        source: std::io::Error,
    },
    /// KVM answers with an API version Hyperlight does not speak.
    #[error(
        "{}: KVM API version {version}, but Hyperlight needs version {KVM_API_VERSION}: the node's kernel KVM cannot run fibers",
        device.display()
    )]
    KvmApiVersion {
        /// The device path.
        device: PathBuf,
        /// The version it answered.
        version: i32,
    },
    /// KVM lacks the capability Hyperlight maps guest memory with.
    #[error(
        "{}: KVM lacks KVM_CAP_USER_MEMORY, which Hyperlight needs to map guest memory: the node's kernel KVM cannot run fibers",
        device.display()
    )]
    KvmNoUserMemory {
        /// The device path.
        device: PathBuf,
    },
    /// KVM refused to create a virtual machine.
    #[error(
        "{}: the hypervisor refused to create a VM ({source}): enable KVM on the node (the kvm_intel or kvm_amd module; \
         nested virtualization when the node is itself a VM)",
        device.display()
    )]
    KvmCreateVm {
        /// The device path.
        device: PathBuf,
        /// The ioctl's error.
        source: std::io::Error,
    },
    /// Hyperlight finds no hypervisor although the device answers KVM.
    #[error(
        "{}: answers KVM, but Hyperlight finds no usable hypervisor (hyperlight_host::is_hypervisor_present is false); \
         fiberd's sandboxes would fail: check the node's KVM (Hyperlight's log line above says why)",
        device.display()
    )]
    HyperlightFindsNoHypervisor {
        /// The device path.
        device: PathBuf,
    },
    /// The artifact cache directory is unusable.
    #[error("cache directory {}: {why}: fiberd keeps pulled artifacts there (the grant Pod's `cache` emptyDir volume)", dir.display())]
    Cache {
        /// The directory.
        dir: PathBuf,
        /// What is wrong.
        why: String,
    },
    /// The mounted fleet key is there but unreadable or invalid.
    #[error("fleet key: {0} (the grant Pod mounts the Secret default/lampyr-fiberd-seal-key; `ly cluster health` checks it)")]
    FleetKey(#[from] FleetKeyError),
}

/// Runs every check of `config`, in order; the first failure is returned.
pub fn check(config: &PreflightConfig) -> Result<Preflight, PreflightError> {
    let kvm_api_version = check_kvm(&config.kvm_device, &config.kvm_source)?;
    if let Some(dir) = &config.cache_dir {
        check_cache_dir(dir)?;
    }
    let fleet_key_present = match &config.fleet_key_file {
        Some(path) => Some(check_fleet_key(path)?),
        None => None,
    };
    Ok(Preflight { kvm_api_version, cache_dir: config.cache_dir.clone(), fleet_key_present })
}

/// Checks that `device` is a KVM device fibers can run on; returns its API version.
pub fn check_kvm(device: &Path, source: &KvmSource) -> Result<i32, PreflightError> {
    let device_path = || device.to_path_buf();
    let metadata = match std::fs::metadata(device) {
        Ok(metadata) => metadata,
        Err(e) if e.kind() == ErrorKind::NotFound => {
            return Err(PreflightError::KvmMissing { device: device_path(), advice: source.advice() });
        }
        Err(source) => return Err(PreflightError::KvmIo { device: device_path(), what: "examine it", source }),
    };
    if !metadata.file_type().is_char_device() {
        let kind = file_kind(&metadata.file_type());
        return Err(PreflightError::KvmNotCharDevice { device: device_path(), kind, advice: source.advice() });
    }
    match OpenOptions::new().read(true).write(true).open(device) {
        Ok(_) => {}
        Err(e) if e.kind() == ErrorKind::PermissionDenied => {
            return Err(PreflightError::KvmPermissionDenied { device: device_path(), advice: source.advice() });
        }
        Err(source) => return Err(PreflightError::KvmIo { device: device_path(), what: "open it read-write", source }),
    }
    let path = CString::new(device.as_os_str().as_bytes()).map_err(|_| PreflightError::KvmIo {
        device: device_path(),
        what: "name it to the kernel",
        source: std::io::Error::new(ErrorKind::InvalidInput, "the path contains a NUL byte"),
    })?;
    let kvm = Kvm::new_with_path(&path).map_err(|e| PreflightError::KvmIo {
        device: device_path(),
        what: "open it read-write",
        source: e.into(),
    })?;
    let version = kvm.get_api_version();
    if version < 0 {
        // kvm-ioctls returns the ioctl's -1 as is; errno still holds the reason.
        return Err(PreflightError::NotKvm { device: device_path(), source: std::io::Error::last_os_error() });
    }
    if version != KVM_API_VERSION {
        return Err(PreflightError::KvmApiVersion { device: device_path(), version });
    }
    if !kvm.check_extension(Cap::UserMemory) {
        return Err(PreflightError::KvmNoUserMemory { device: device_path() });
    }
    kvm.create_vm().map_err(|e| PreflightError::KvmCreateVm { device: device_path(), source: e.into() })?;
    if device == Path::new(KVM_DEVICE) && !hyperlight_host::is_hypervisor_present() {
        return Err(PreflightError::HyperlightFindsNoHypervisor { device: device_path() });
    }
    Ok(version)
}

/// What kind of file `kind` is, for a message.
fn file_kind(kind: &std::fs::FileType) -> &'static str {
    if kind.is_dir() {
        "a directory"
    } else if kind.is_file() {
        "a regular file"
    } else if kind.is_block_device() {
        "a block device"
    } else if kind.is_fifo() {
        "a FIFO"
    } else if kind.is_socket() {
        "a socket"
    } else {
        "not a device"
    }
}

/// Checks that `dir` is a directory a file can be created in (and removes the probe).
pub fn check_cache_dir(dir: &Path) -> Result<(), PreflightError> {
    let fail = |why: String| PreflightError::Cache { dir: dir.to_path_buf(), why };
    let metadata = std::fs::metadata(dir).map_err(|e| match e.kind() {
        ErrorKind::NotFound => fail("does not exist".into()),
        _ => fail(format!("cannot be examined ({e})")),
    })?;
    if !metadata.is_dir() {
        return Err(fail(format!("is {}, not a directory", file_kind(&metadata.file_type()))));
    }
    let probe = dir.join(format!(".fiberd-helper-probe-{}", std::process::id()));
    let written = File::create(&probe).and_then(|mut file| file.write_all(b"fiberd-helper\n"));
    let removed = std::fs::remove_file(&probe);
    written.map_err(|e| fail(format!("a file cannot be written in it ({e})")))?;
    removed.map_err(|e| fail(format!("a file written in it cannot be removed ({e})")))
}

/// Checks the mounted fleet key: `Ok(false)` when it is absent, `Ok(true)` when it is a valid key.
pub fn check_fleet_key(path: &Path) -> Result<bool, PreflightError> {
    let from = FleetKeySource::File(path.to_path_buf());
    let bytes = match std::fs::read(path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(false),
        Err(source) => return Err(FleetKeyError::Io { path: path.to_path_buf(), source }.into()),
    };
    let _: FleetKey = crate::load::parse_fleet_key(bytes, from)?;
    Ok(true)
}

/// Writes `message` (one line) to `path`, the container's termination-message file.
pub fn write_termination_message(path: &Path, message: &str) -> std::io::Result<()> {
    std::fs::write(path, format!("{}\n", message.replace('\n', " ")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn advice_names_how_the_pod_gets_kvm() {
        assert!(KvmSource::HostPath.advice().contains("privileged"));
        let plugin = KvmSource::DevicePlugin("devices.kubevirt.io/kvm".into()).advice();
        assert!(plugin.contains("devices.kubevirt.io/kvm") && plugin.contains("Allocatable"), "{plugin}");
    }

    #[test]
    fn every_message_is_one_line() {
        let error = PreflightError::KvmPermissionDenied { device: KVM_DEVICE.into(), advice: KvmSource::HostPath.advice() };
        let text = error.to_string();
        assert!(!text.contains('\n'), "{text}");
        assert!(text.starts_with("/dev/kvm: permission denied opening it read-write: the grant Pod must run privileged"), "{text}");
    }

    #[test]
    fn a_cache_dir_must_be_a_writable_directory() {
        let dir = tempfile::tempdir().expect("tempdir");
        check_cache_dir(dir.path()).expect("a fresh directory is usable");
        assert_eq!(std::fs::read_dir(dir.path()).expect("list").count(), 0, "the probe is removed");
        let missing = check_cache_dir(&dir.path().join("nope")).expect_err("missing");
        assert!(missing.to_string().contains("nope: does not exist"), "{missing}");
        let file = dir.path().join("file");
        std::fs::write(&file, "x").expect("write");
        let not_dir = check_cache_dir(&file).expect_err("a file");
        assert!(not_dir.to_string().contains("is a regular file, not a directory"), "{not_dir}");
    }

    #[test]
    fn an_absent_fleet_key_passes_and_a_damaged_one_fails() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("key");
        assert!(!check_fleet_key(&path).expect("absent is fine"));
        std::fs::write(&path, FleetKey::generate().to_secret_string()).expect("write");
        assert!(check_fleet_key(&path).expect("a valid key"));
        std::fs::write(&path, "not a key").expect("write");
        let damaged = check_fleet_key(&path).expect_err("damaged");
        assert!(damaged.to_string().starts_with(&format!("fleet key: file {}", path.display())), "{damaged}");
    }

    #[test]
    fn the_termination_message_is_one_line() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("termination-log");
        write_termination_message(&path, "a\nb").expect("write");
        assert_eq!(std::fs::read_to_string(&path).expect("read"), "a b\n");
    }
}
