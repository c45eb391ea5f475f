//! The driver against the real QEMU and /dev/kvm of this host. A host without QEMU fails
//! these tests: they exist to prove the driver works with one.

use std::path::PathBuf;
use std::time::Duration;

use serde_json::json;
use vmscale_vmm::{find_qemu, Error, Qemu, QemuConfig};

fn qemu_binary() -> PathBuf {
    find_qemu(None).unwrap_or_else(|e| panic!("these tests need QEMU: {e}"))
}

fn alive(pid: u32) -> bool {
    // A zombie has exited; only a live process counts.
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(
        |s| !matches!(s.rsplit(')').next().map(str::trim_start), Some(r) if r.starts_with('Z')),
    )
}

#[test]
fn a_dimm_hotplugs_while_vcpus_run_and_quit_reaps_qemu() {
    let mut config = QemuConfig::new(qemu_binary(), 2, 128);
    config.dimm_slots = 2;
    config.maxmem_mib = 128 + 2 * 128;
    let mut qemu = Qemu::start(&config).unwrap();
    let pid = qemu.pid();
    let status = qemu.execute("query-status", None).unwrap();
    assert_eq!(status.value["status"], "running");
    assert!(status.round_trip_ns > 0);
    // QEMU's vCPU threads exist once QMP answers.
    assert!(qemu.threads().len() >= 3, "{:?}", qemu.threads());
    qemu.execute(
        "object-add",
        Some(json!({"qom-type": "memory-backend-ram", "id": "m0", "size": 128u64 << 20})),
    )
    .unwrap();
    qemu.execute(
        "device_add",
        Some(json!({"driver": "pc-dimm", "id": "d0", "memdev": "m0"})),
    )
    .unwrap();
    let dimms = qemu.execute("query-memory-devices", None).unwrap();
    assert_eq!(
        dimms.value.as_array().map(Vec::len),
        Some(1),
        "{}",
        dimms.value
    );
    let reaped = qemu.quit().unwrap();
    assert!(reaped > 0);
    assert!(!alive(pid));
}

#[test]
fn a_qmp_error_is_one_line_with_the_command_line() {
    let mut qemu = Qemu::start(&QemuConfig::new(qemu_binary(), 1, 64)).unwrap();
    let e = qemu
        .execute(
            "device_add",
            Some(json!({"driver": "pc-dimm", "id": "d0", "memdev": "nothing"})),
        )
        .unwrap_err();
    let text = e.to_string();
    assert!(!e.is_usage());
    assert!(text.starts_with("QMP device_add failed: "), "{text}");
    assert!(
        text.contains("-enable-kvm") && !text.contains('\n'),
        "{text}"
    );
    let pid = qemu.pid();
    drop(qemu);
    assert!(!alive(pid), "dropping the driver must kill QEMU");
}

#[test]
fn a_qemu_that_exits_early_names_its_last_stderr_line() {
    // A shell given QEMU's options refuses the first one on stderr and exits.
    let mut config = QemuConfig::new(PathBuf::from("/bin/sh"), 1, 64);
    config.timeout = Duration::from_secs(10);
    let e = match Qemu::start(&config) {
        Ok(_) => panic!("sh is not a QEMU"),
        Err(e) => e,
    };
    let Error::Qemu {
        what,
        stderr,
        command_line,
    } = &e
    else {
        panic!("{e}")
    };
    assert!(
        what.contains("exited") && what.contains("before connecting"),
        "{what}"
    );
    assert!(stderr.starts_with("its last stderr line: "), "{stderr}");
    assert!(
        command_line.starts_with("/bin/sh -enable-kvm"),
        "{command_line}"
    );
}

#[test]
fn a_qemu_that_stops_answering_is_a_qmp_timeout_in_one_line() {
    let mut config = QemuConfig::new(qemu_binary(), 1, 64);
    config.timeout = Duration::from_secs(2);
    let mut qemu = Qemu::start(&config).unwrap();
    let pid = qemu.pid();
    // SAFETY: kill only sends a signal, to the QEMU this test started and has not reaped.
    unsafe { libc::kill(pid as libc::pid_t, libc::SIGSTOP) };
    let e = qemu.execute("query-status", None).unwrap_err();
    let text = e.to_string();
    assert!(!e.is_usage());
    assert!(
        text.starts_with("QMP query-status: no answer within 2s (QEMU: "),
        "{text}"
    );
    assert!(!text.contains('\n'), "{text}");
    // A stopped QEMU is still killed and reaped with its driver.
    drop(qemu);
    assert!(!alive(pid));
}
