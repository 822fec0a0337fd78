//! The host platform a snapshot must fit: CPU architecture, hypervisor, CPU vendor.

use std::fmt;

/// Where a snapshot was taken, or where it is about to run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Platform {
    /// CPU architecture, Hyperlight spelling (`x86_64`).
    pub arch: String,
    /// Hypervisor, Hyperlight spelling (`kvm`, `mshv`, …).
    pub hypervisor: String,
    /// CPUID vendor string, e.g. `GenuineIntel`.
    pub cpu_vendor: String,
}

impl Platform {
    /// This host, as Hyperlight would record it in a snapshot taken here.
    pub fn host() -> Self {
        Platform { arch: std::env::consts::ARCH.to_string(), hypervisor: host_hypervisor().to_string(), cpu_vendor: host_cpu_vendor() }
    }

    /// The first field that differs from `other`, as `(field, ours, theirs)`.
    pub fn mismatch(&self, other: &Platform) -> Option<(&'static str, String, String)> {
        [
            ("arch", &self.arch, &other.arch),
            ("hypervisor", &self.hypervisor, &other.hypervisor),
            ("cpu_vendor", &self.cpu_vendor, &other.cpu_vendor),
        ]
        .into_iter()
        .find(|(_, a, b)| a != b)
        .map(|(field, a, b)| (field, a.clone(), b.clone()))
    }
}

impl fmt::Display for Platform {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}/{}", self.arch, self.hypervisor, self.cpu_vendor)
    }
}

/// Lampyr builds Hyperlight with KVM only: `kvm` when this process can open `/dev/kvm` for
/// reading and writing, as Hyperlight does (it also checks KVM's API version when a sandbox
/// is made, and refuses there), else `none`.
fn host_hypervisor() -> &'static str {
    let kvm = std::fs::OpenOptions::new().read(true).write(true).open("/dev/kvm");
    if kvm.is_ok() { "kvm" } else { "none" }
}

/// `vendor_id` from `/proc/cpuinfo` (the CPUID leaf-0 string Hyperlight records).
fn host_cpu_vendor() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|info| {
            info.lines().find_map(|l| l.strip_prefix("vendor_id").map(|v| v.trim_start_matches([' ', '\t', ':']).trim().to_string()))
        })
        .unwrap_or_else(|| "unknown".to_string())
}
