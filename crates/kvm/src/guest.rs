//! The guests: a few bytes of x86-64 code each, and the long-mode environment they run in.
//!
//! Why long mode at CPL3: on hosts whose KVM backend cannot run guest supervisor code
//! natively (PVM, a pagetable-based backend without hardware virtualization), real-mode
//! and ring-0 instructions are emulated one at a time (~0.5 M instructions/s), so a
//! "running" vCPU would mostly measure the emulator. 64-bit user-mode code runs natively on
//! every backend (VMX, SVM and PVM alike), so the spinning guest is a CPL3 program.
//!
//! Guest physical memory (identity-mapped, so guest virtual == guest physical):
//!
//! ```text
//! 0x0000_1000  PML4        one entry -> PDPT
//! 0x0000_2000  PDPT        one entry -> PD
//! 0x0000_3000  PD          512 x 2 MiB pages: the first GiB, user-accessible, writable
//! 0x0000_4000  GDT         null, code64 DPL0, data DPL0, code64 DPL3, data DPL3, TSS
//! 0x0000_5000  spin program
//! 0x0000_6000  halt program
//! 0x0010_0000  per-vCPU data areas, VCPU_AREA_STRIDE bytes each (see [`VcpuArea`])
//! ```

use kvm_bindings::{kvm_regs, kvm_segment, kvm_sregs};

pub const PML4_GPA: u64 = 0x1000;
const PDPT_GPA: u64 = 0x2000;
const PD_GPA: u64 = 0x3000;
const GDT_GPA: u64 = 0x4000;
const SPIN_CODE_GPA: u64 = 0x5000;
const HALT_CODE_GPA: u64 = 0x6000;
/// First per-vCPU data area.
pub const VCPU_AREAS_GPA: u64 = 0x10_0000;
/// Bytes reserved per vCPU: header plus the gap ring, rounded up to a page multiple.
pub const VCPU_AREA_STRIDE: u64 = 128 * 1024;
/// Gap-ring capacity in entries (a power of two: the guest indexes it with a mask).
pub const GAP_RING_ENTRIES: u64 = 4096;
/// The identity map covers one GiB; the builder refuses layouts that do not fit.
pub const IDENTITY_MAPPED_BYTES: u64 = 1 << 30;

/// Offsets inside one vCPU's data area, shared by the guest program and the host reader.
///
/// ```text
/// +0   u64 progress     loop iterations, incremented by the guest
/// +8   u64 threshold    TSC ticks; consecutive reads further apart are logged as a gap
/// +16  u64 gap_count    gaps logged so far (monotonic; the ring slot is count & mask)
/// +24  u64 ring_mask    GAP_RING_ENTRIES - 1
/// +64  ring             GAP_RING_ENTRIES x { u64 tsc_before, u64 tsc_after }
/// ```
pub struct VcpuArea;

impl VcpuArea {
    pub const PROGRESS: u64 = 0;
    pub const THRESHOLD: u64 = 8;
    pub const GAP_COUNT: u64 = 16;
    pub const RING_MASK: u64 = 24;
    pub const RING: u64 = 64;
    pub const RING_ENTRY_BYTES: u64 = 16;

    /// Guest physical address of vCPU `index`'s area.
    pub fn gpa(index: usize) -> u64 {
        VCPU_AREAS_GPA + index as u64 * VCPU_AREA_STRIDE
    }
}

const _: () =
    assert!(VcpuArea::RING + GAP_RING_ENTRIES * VcpuArea::RING_ENTRY_BYTES <= VCPU_AREA_STRIDE);

/// What a vCPU runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum GuestProgram {
    /// CPL3 loop: counts iterations and logs gaps between consecutive TSC reads.
    Spin,
    /// CPL0 `hlt` with interrupts off: the vCPU sleeps in the in-kernel irqchip until kicked.
    Halt,
}

impl GuestProgram {
    pub fn name(self) -> &'static str {
        match self {
            GuestProgram::Spin => "spin",
            GuestProgram::Halt => "halt",
        }
    }
}

/// The spinning guest. On entry RDI holds the vCPU's data area.
///
/// ```text
/// start:  rdtsc                          0f 31
///         shl  rdx, 32                   48 c1 e2 20
///         or   rax, rdx                  48 09 d0
///         mov  rsi, rax                  48 89 c6        ; rsi = previous TSC
/// loop:   rdtsc                          0f 31
///         shl  rdx, 32                   48 c1 e2 20
///         or   rax, rdx                  48 09 d0        ; rax = now
///         mov  rcx, rax                  48 89 c1
///         sub  rcx, rsi                  48 29 f1        ; rcx = now - previous
///         cmp  rcx, [rdi+8]              48 3b 4f 08     ; below threshold?
///         jb   no_gap                    72 20
///         mov  rcx, [rdi+16]             48 8b 4f 10     ; gap_count
///         mov  rdx, rcx                  48 89 ca
///         and  rdx, [rdi+24]             48 23 57 18     ; slot = count & mask
///         shl  rdx, 4                    48 c1 e2 04
///         mov  [rdi+rdx+64], rsi         48 89 74 17 40  ; tsc_before
///         mov  [rdi+rdx+72], rax         48 89 44 17 48  ; tsc_after
///         inc  rcx                       48 ff c1
///         mov  [rdi+16], rcx             48 89 4f 10     ; publish after the entry (x86 TSO)
/// no_gap: mov  rsi, rax                  48 89 c6
///         inc  qword [rdi]               48 ff 07        ; progress
///         jmp  loop                      eb c3
/// ```
pub const SPIN_CODE: [u8; 73] = [
    0x0f, 0x31, 0x48, 0xc1, 0xe2, 0x20, 0x48, 0x09, 0xd0, 0x48, 0x89, 0xc6, 0x0f, 0x31, 0x48, 0xc1,
    0xe2, 0x20, 0x48, 0x09, 0xd0, 0x48, 0x89, 0xc1, 0x48, 0x29, 0xf1, 0x48, 0x3b, 0x4f, 0x08, 0x72,
    0x20, 0x48, 0x8b, 0x4f, 0x10, 0x48, 0x89, 0xca, 0x48, 0x23, 0x57, 0x18, 0x48, 0xc1, 0xe2, 0x04,
    0x48, 0x89, 0x74, 0x17, 0x40, 0x48, 0x89, 0x44, 0x17, 0x48, 0x48, 0xff, 0xc1, 0x48, 0x89, 0x4f,
    0x10, 0x48, 0x89, 0xc6, 0x48, 0xff, 0x07, 0xeb, 0xc3,
];

/// The halting guest (CPL0, interrupts disabled, so only a kick ends the halt).
///
/// ```text
/// halt:   hlt                            f4
///         jmp  halt                      eb fd
/// ```
pub const HALT_CODE: [u8; 3] = [0xf4, 0xeb, 0xfd];

// Page-table entry bits.
const PTE_PRESENT: u64 = 1 << 0;
const PTE_WRITABLE: u64 = 1 << 1;
const PTE_USER: u64 = 1 << 2;
const PDE_LARGE_PAGE: u64 = 1 << 7;

// Control-register bits.
const CR0_PE: u64 = 1 << 0;
const CR0_MP: u64 = 1 << 1;
const CR0_ET: u64 = 1 << 4;
const CR0_NE: u64 = 1 << 5;
const CR0_WP: u64 = 1 << 16;
const CR0_PG: u64 = 1 << 31;
const CR4_PAE: u64 = 1 << 5;
const EFER_LME: u64 = 1 << 8;
const EFER_LMA: u64 = 1 << 10;

// GDT selectors (index << 3 | RPL).
const KERNEL_CS: u16 = 1 << 3;
const KERNEL_DS: u16 = 2 << 3;
const USER_CS: u16 = (3 << 3) | 3;
const USER_DS: u16 = (4 << 3) | 3;
const TSS_SEL: u16 = 5 << 3;

/// Writes page tables, GDT and both programs into guest memory at offset 0.
///
/// `write` copies bytes to a guest physical address; the caller owns the mapping.
pub fn write_boot_image(mut write: impl FnMut(u64, &[u8])) {
    write(
        PML4_GPA,
        &(PDPT_GPA | PTE_PRESENT | PTE_WRITABLE | PTE_USER).to_le_bytes(),
    );
    write(
        PDPT_GPA,
        &(PD_GPA | PTE_PRESENT | PTE_WRITABLE | PTE_USER).to_le_bytes(),
    );
    let mut pd = Vec::with_capacity(512 * 8);
    for i in 0..512u64 {
        let entry = (i << 21) | PTE_PRESENT | PTE_WRITABLE | PTE_USER | PDE_LARGE_PAGE;
        pd.extend_from_slice(&entry.to_le_bytes());
    }
    write(PD_GPA, &pd);

    let mut gdt = Vec::new();
    for segment in gdt_segments() {
        gdt.extend_from_slice(&descriptor(&segment).to_le_bytes());
    }
    write(GDT_GPA, &gdt);
    write(SPIN_CODE_GPA, &SPIN_CODE);
    write(HALT_CODE_GPA, &HALT_CODE);
}

fn segment(selector: u16, code: bool, dpl: u8) -> kvm_segment {
    kvm_segment {
        base: 0,
        limit: 0xffff_ffff,
        selector,
        // Code: execute/read, accessed. Data: read/write, accessed.
        type_: if code { 0xb } else { 0x3 },
        present: 1,
        dpl,
        db: if code { 0 } else { 1 },
        s: 1,
        l: if code { 1 } else { 0 },
        g: 1,
        avl: 0,
        unusable: 0,
        padding: 0,
    }
}

fn tss_segment() -> kvm_segment {
    kvm_segment {
        base: 0,
        limit: 0x67,
        selector: TSS_SEL,
        type_: 0xb, // 64-bit TSS, busy: VMX refuses to enter with anything else in TR.
        present: 1,
        dpl: 0,
        db: 0,
        s: 0,
        l: 0,
        g: 0,
        avl: 0,
        unusable: 0,
        padding: 0,
    }
}

fn gdt_segments() -> [kvm_segment; 5] {
    [
        segment(KERNEL_CS, true, 0),
        segment(KERNEL_DS, false, 0),
        segment(USER_CS, true, 3),
        segment(USER_DS, false, 3),
        tss_segment(),
    ]
}

/// Encodes a segment as the 8-byte GDT descriptor the CPU would load it from. The null
/// descriptor comes first because the GDT's index 0 is reserved.
fn descriptor(s: &kvm_segment) -> u64 {
    if s.present == 0 {
        return 0;
    }
    let limit = if s.g == 1 { s.limit >> 12 } else { s.limit } as u64;
    let access =
        (s.type_ as u64) | ((s.s as u64) << 4) | ((s.dpl as u64) << 5) | ((s.present as u64) << 7);
    let flags = (s.avl as u64) | ((s.l as u64) << 1) | ((s.db as u64) << 2) | ((s.g as u64) << 3);
    (limit & 0xffff)
        | ((s.base & 0xff_ffff) << 16)
        | (access << 40)
        | (((limit >> 16) & 0xf) << 48)
        | (flags << 52)
        | (((s.base >> 24) & 0xff) << 56)
}

/// Puts a vCPU's special registers into 64-bit long mode with the program's privilege.
pub fn long_mode_sregs(mut sregs: kvm_sregs, program: GuestProgram) -> kvm_sregs {
    let [kcode, kdata, ucode, udata, tss] = gdt_segments();
    let (code, data) = match program {
        GuestProgram::Spin => (ucode, udata),
        GuestProgram::Halt => (kcode, kdata),
    };
    sregs.cs = code;
    sregs.ds = data;
    sregs.es = data;
    sregs.fs = data;
    sregs.gs = data;
    sregs.ss = data;
    sregs.tr = tss;
    sregs.gdt.base = GDT_GPA;
    sregs.gdt.limit = (6 * 8 - 1) as u16;
    sregs.cr0 = CR0_PE | CR0_MP | CR0_ET | CR0_NE | CR0_WP | CR0_PG;
    sregs.cr3 = PML4_GPA;
    sregs.cr4 = CR4_PAE;
    sregs.efer = EFER_LME | EFER_LMA;
    sregs
}

/// General registers at entry: the program's first byte, interrupts off, RDI = data area.
pub fn entry_regs(program: GuestProgram, vcpu_index: usize) -> kvm_regs {
    kvm_regs {
        rip: match program {
            GuestProgram::Spin => SPIN_CODE_GPA,
            GuestProgram::Halt => HALT_CODE_GPA,
        },
        rdi: VcpuArea::gpa(vcpu_index),
        rflags: 0x2, // bit 1 is reserved-as-one; IF stays clear.
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn user_code_descriptor_matches_the_canonical_encoding() {
        // The well-known flat 64-bit DPL3 code descriptor is 0x00af_fb00_0000_ffff.
        assert_eq!(
            descriptor(&segment(USER_CS, true, 3)),
            0x00af_fb00_0000_ffff
        );
        // And the flat DPL3 data descriptor 0x00cf_f300_0000_ffff.
        assert_eq!(
            descriptor(&segment(USER_DS, false, 3)),
            0x00cf_f300_0000_ffff
        );
        assert_eq!(
            descriptor(&segment(KERNEL_CS, true, 0)),
            0x00af_9b00_0000_ffff
        );
    }

    #[test]
    fn boot_image_maps_the_first_gigabyte_for_user_mode() {
        let mut memory = vec![0u8; 0x7000];
        write_boot_image(|gpa, bytes| {
            memory[gpa as usize..gpa as usize + bytes.len()].copy_from_slice(bytes)
        });
        let read = |gpa: u64| {
            u64::from_le_bytes(memory[gpa as usize..gpa as usize + 8].try_into().unwrap())
        };
        assert_eq!(read(PML4_GPA) & !0xfff, PDPT_GPA);
        assert_eq!(read(PML4_GPA) & 0x7, 0x7);
        let last_pde = read(PD_GPA + 511 * 8);
        assert_eq!(last_pde & !0xfff, 511 << 21);
        assert_ne!(last_pde & PDE_LARGE_PAGE, 0);
        assert_eq!(
            &memory[SPIN_CODE_GPA as usize..][..SPIN_CODE.len()],
            &SPIN_CODE
        );
    }

    #[test]
    fn spin_program_jumps_back_to_its_loop_head() {
        // The final `jmp loop` is relative to the end of the program: 73 - 0x3d = 0x0c.
        let displacement = SPIN_CODE[SPIN_CODE.len() - 1] as i8 as i64;
        assert_eq!(SPIN_CODE.len() as i64 + displacement, 0x0c);
    }
}
