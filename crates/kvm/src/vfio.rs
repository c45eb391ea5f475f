//! VFIO devices for the teardown scenario (case 1): open already-assigned PCI devices the way
//! a VMM does (container, group, device fd) so their release can be timed.
//!
//! vmscale never binds, unbinds or resets a device itself: a device must already be bound to
//! vfio-pci by its administrator, and anything else is refused before any file is opened.
//! Closing a device fd runs the kernel's own release path (which may reset the device):
//! that path is what case 1 measures.

use std::fs::{File, OpenOptions};
use std::os::fd::{AsRawFd, FromRawFd};
use std::path::{Path, PathBuf};

use vfio_bindings::bindings::vfio::{
    vfio_group_status, VFIO_TYPE1v2_IOMMU, VFIO_API_VERSION, VFIO_BASE, VFIO_GROUP_FLAGS_VIABLE,
    VFIO_TYPE,
};
use vmm_sys_util::ioctl::{ioctl, ioctl_with_mut_ref, ioctl_with_ptr, ioctl_with_val};
use vmm_sys_util::ioctl_io_nr;

use crate::Error;

// include/uapi/linux/vfio.h defines these as _IO(VFIO_TYPE, VFIO_BASE + n); vfio-bindings
// carries the two constants but not the ioctl numbers, so they are built here from them.
ioctl_io_nr!(VFIO_GET_API_VERSION, VFIO_TYPE as u32, VFIO_BASE);
ioctl_io_nr!(VFIO_CHECK_EXTENSION, VFIO_TYPE as u32, VFIO_BASE + 1);
ioctl_io_nr!(VFIO_SET_IOMMU, VFIO_TYPE as u32, VFIO_BASE + 2);
ioctl_io_nr!(VFIO_GROUP_GET_STATUS, VFIO_TYPE as u32, VFIO_BASE + 3);
ioctl_io_nr!(VFIO_GROUP_SET_CONTAINER, VFIO_TYPE as u32, VFIO_BASE + 4);
ioctl_io_nr!(VFIO_GROUP_GET_DEVICE_FD, VFIO_TYPE as u32, VFIO_BASE + 6);

/// A PCI address in sysfs form, `DDDD:BB:DD.F`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bdf(String);

impl Bdf {
    /// Accepts `DDDD:BB:DD.F` or the short `BB:DD.F` (domain 0000).
    pub fn parse(text: &str) -> Result<Bdf, Error> {
        let full = if text.matches(':').count() == 1 {
            format!("0000:{text}")
        } else {
            text.to_string()
        };
        let bad = || {
            Error::Impossible(format!(
                "'{text}' is not a PCI address (expected DDDD:BB:DD.F)"
            ))
        };
        let (domain, rest) = full.split_once(':').ok_or_else(bad)?;
        let (bus, rest) = rest.split_once(':').ok_or_else(bad)?;
        let (device, function) = rest.split_once('.').ok_or_else(bad)?;
        let hex = |s: &str, len: usize| s.len() == len && s.bytes().all(|b| b.is_ascii_hexdigit());
        if !(hex(domain, 4) && hex(bus, 2) && hex(device, 2) && hex(function, 1)) {
            return Err(bad());
        }
        Ok(Bdf(full.to_ascii_lowercase()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// Where a device's VFIO group lives, once it is known to be usable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VfioTarget {
    pub bdf: Bdf,
    pub group: u32,
}

/// Checks, reading sysfs only, that `bdf` is a PCI device bound to vfio-pci with an IOMMU
/// group whose VFIO node exists. `sysfs` is normally `/sys`, `dev` normally `/dev`.
pub fn check_device(sysfs: &Path, dev: &Path, bdf: &Bdf) -> Result<VfioTarget, Error> {
    let device = sysfs.join("bus/pci/devices").join(bdf.as_str());
    if !device.exists() {
        return Err(Error::Impossible(format!(
            "no PCI device {} on this host",
            bdf.as_str()
        )));
    }
    let driver = std::fs::read_link(device.join("driver"))
        .ok()
        .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()));
    match driver.as_deref() {
        Some("vfio-pci") => {}
        Some(other) => {
            return Err(Error::Impossible(format!(
                "{} is bound to {other}, not vfio-pci: bind it to vfio-pci yourself first (vmscale never unbinds or resets devices)",
                bdf.as_str()
            )))
        }
        None => {
            return Err(Error::Impossible(format!(
                "{} has no driver: bind it to vfio-pci yourself first (vmscale never binds devices)",
                bdf.as_str()
            )))
        }
    }
    let group = std::fs::read_link(device.join("iommu_group"))
        .ok()
        .and_then(|p| p.file_name()?.to_str()?.parse::<u32>().ok())
        .ok_or_else(|| {
            Error::Impossible(format!("{} has no IOMMU group (IOMMU off?)", bdf.as_str()))
        })?;
    if !dev.join("vfio").join(group.to_string()).exists() {
        return Err(Error::Impossible(format!(
            "{} is in IOMMU group {group} but {} does not exist (CONFIG_VFIO off?)",
            bdf.as_str(),
            dev.join("vfio").join(group.to_string()).display()
        )));
    }
    Ok(VfioTarget {
        bdf: bdf.clone(),
        group,
    })
}

/// Open VFIO devices, as a VMM holds them: one container, their groups, their device fds.
/// Field order is release order: devices, then groups, then the container.
pub struct VfioDevices {
    devices: Vec<File>,
    groups: Vec<(u32, File)>,
    _container: File,
}

fn open_rw(path: &Path) -> Result<File, Error> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .map_err(|e| Error::Setup(format!("cannot open {}: {e}", path.display())))
}

impl VfioDevices {
    pub fn open(dev: &Path, targets: &[VfioTarget]) -> Result<VfioDevices, Error> {
        let container = open_rw(&dev.join("vfio/vfio"))?;
        // SAFETY: VFIO_GET_API_VERSION takes no argument; `container` is a VFIO container.
        let version = unsafe { ioctl(&container, VFIO_GET_API_VERSION()) };
        if version != VFIO_API_VERSION as i32 {
            return Err(Error::Setup(format!(
                "VFIO API version {version}, expected {VFIO_API_VERSION}"
            )));
        }
        // SAFETY: VFIO_CHECK_EXTENSION takes the extension number by value.
        if unsafe {
            ioctl_with_val(
                &container,
                VFIO_CHECK_EXTENSION(),
                VFIO_TYPE1v2_IOMMU.into(),
            )
        } <= 0
        {
            return Err(Error::Setup(
                "the VFIO container does not support the type1v2 IOMMU".into(),
            ));
        }
        let mut groups: Vec<(u32, File)> = Vec::new();
        let mut devices = Vec::new();
        for target in targets {
            if !groups.iter().any(|(g, _)| *g == target.group) {
                let group = open_rw(&dev.join("vfio").join(target.group.to_string()))?;
                let mut status = vfio_group_status {
                    argsz: std::mem::size_of::<vfio_group_status>() as u32,
                    flags: 0,
                };
                // SAFETY: the kernel writes one vfio_group_status, which we own and sized.
                unsafe { ioctl_with_mut_ref(&group, VFIO_GROUP_GET_STATUS(), &mut status) };
                if status.flags & VFIO_GROUP_FLAGS_VIABLE == 0 {
                    return Err(Error::Setup(format!(
                        "IOMMU group {} is not viable: every device in it must be bound to vfio-pci",
                        target.group
                    )));
                }
                let fd = container.as_raw_fd();
                // SAFETY: SET_CONTAINER reads one int (the container fd) from the pointer.
                if unsafe { ioctl_with_ptr(&group, VFIO_GROUP_SET_CONTAINER(), &fd) } < 0 {
                    return Err(Error::Setup(format!(
                        "VFIO_GROUP_SET_CONTAINER (group {}): {}",
                        target.group,
                        std::io::Error::last_os_error()
                    )));
                }
                if groups.is_empty() {
                    // SAFETY: SET_IOMMU takes the IOMMU type by value, once a group is set.
                    if unsafe {
                        ioctl_with_val(&container, VFIO_SET_IOMMU(), VFIO_TYPE1v2_IOMMU.into())
                    } < 0
                    {
                        return Err(Error::Setup(format!(
                            "VFIO_SET_IOMMU: {}",
                            std::io::Error::last_os_error()
                        )));
                    }
                }
                groups.push((target.group, group));
            }
            let group = &groups
                .iter()
                .find(|(g, _)| *g == target.group)
                .expect("opened above")
                .1;
            let name = std::ffi::CString::new(target.bdf.as_str()).expect("a BDF has no NUL");
            // SAFETY: GET_DEVICE_FD reads a NUL-terminated device name and returns a new fd.
            let fd = unsafe { ioctl_with_ptr(group, VFIO_GROUP_GET_DEVICE_FD(), name.as_ptr()) };
            if fd < 0 {
                return Err(Error::Setup(format!(
                    "VFIO_GROUP_GET_DEVICE_FD {}: {}",
                    target.bdf.as_str(),
                    std::io::Error::last_os_error()
                )));
            }
            // SAFETY: the kernel just returned this fd to us; nothing else owns it.
            devices.push(unsafe { File::from_raw_fd(fd) });
        }
        Ok(VfioDevices {
            devices,
            groups,
            _container: container,
        })
    }

    pub fn len(&self) -> usize {
        self.devices.len()
    }

    pub fn is_empty(&self) -> bool {
        self.devices.is_empty()
    }

    /// Takes the device fds out, so they can be closed one by one or from threads, timed.
    pub fn take_devices(&mut self) -> Vec<File> {
        std::mem::take(&mut self.devices)
    }

    /// IOMMU groups in use.
    pub fn groups(&self) -> Vec<u32> {
        self.groups.iter().map(|(g, _)| *g).collect()
    }
}

/// `/sys` and `/dev` of the host.
pub fn host_roots() -> (PathBuf, PathBuf) {
    (PathBuf::from("/sys"), PathBuf::from("/dev"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_parse_in_both_forms_and_junk_is_refused() {
        assert_eq!(Bdf::parse("0000:3B:00.1").unwrap().as_str(), "0000:3b:00.1");
        assert_eq!(Bdf::parse("3b:00.1").unwrap().as_str(), "0000:3b:00.1");
        for junk in [
            "",
            "3b:00",
            "0000:3b:00.10",
            "zz:00.0",
            "0000:3b:0.1",
            "a:b:c:d",
        ] {
            assert!(Bdf::parse(junk).is_err(), "{junk}");
        }
    }

    #[test]
    fn devices_on_this_host_are_checked_without_touching_them() {
        let (sys, dev) = host_roots();
        let missing = check_device(&sys, &dev, &Bdf::parse("00ff:ff:1f.7").unwrap()).unwrap_err();
        assert!(missing.to_string().contains("no PCI device"), "{missing}");
        // Any real device here is bound to something other than vfio-pci (or to nothing):
        // it must be refused, named, and left as it was.
        let devices = std::fs::read_dir(sys.join("bus/pci/devices")).unwrap();
        let mut checked = 0;
        for entry in devices.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let before = std::fs::read_link(entry.path().join("driver")).ok();
            let error = check_device(&sys, &dev, &Bdf::parse(&name).unwrap()).unwrap_err();
            assert!(
                error.to_string().contains(&name) && error.to_string().contains("vfio-pci"),
                "{error}"
            );
            assert_eq!(
                std::fs::read_link(entry.path().join("driver")).ok(),
                before,
                "{name} changed"
            );
            checked += 1;
        }
        assert!(checked > 0, "this host has no PCI devices to check against");
    }
}
