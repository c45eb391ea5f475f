/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * The few kernel types aggregate.bpf.c reads, declared for CO-RE: libbpf relocates each
 * field access against the running kernel's BTF (/sys/kernel/btf/vmlinux) when the program
 * loads, so these need only name the fields, not match the kernel's layout. Written by
 * hand instead of a generated vmlinux.h so that the object depends on no kernel's headers
 * and rebuilds byte for byte anywhere.
 */
#ifndef __VMLINUX_H__
#define __VMLINUX_H__

typedef unsigned char __u8;
typedef signed char __s8;
typedef unsigned short __u16;
typedef short __s16;
typedef unsigned int __u32;
typedef int __s32;
typedef unsigned long long __u64;
typedef long long __s64;
typedef __u16 __be16;
typedef __u32 __be32;
typedef __u32 __wsum;

typedef __u8 u8;
typedef __s8 s8;
typedef __u16 u16;
typedef __s16 s16;
typedef __u32 u32;
typedef __s32 s32;
typedef __u64 u64;
typedef __s64 s64;
typedef _Bool bool;
#define true 1
#define false 0

enum bpf_map_type {
	BPF_MAP_TYPE_HASH = 1,
	BPF_MAP_TYPE_ARRAY = 2,
	BPF_MAP_TYPE_PERCPU_ARRAY = 6,
	BPF_MAP_TYPE_STACK_TRACE = 7,
	BPF_MAP_TYPE_TASK_STORAGE = 29,
};

enum {
	BPF_ANY = 0,
	BPF_NOEXIST = 1,
	BPF_EXIST = 2,
};

enum {
	BPF_F_NO_PREALLOC = 1,
};

enum {
	BPF_LOCAL_STORAGE_GET_F_CREATE = 1,
};

enum {
	BPF_F_SKIP_FIELD_MASK = 0xff,
	BPF_F_FAST_STACK_CMP = 1 << 9,
};

struct bpf_spin_lock {
	__u32 val;
};

struct task_struct {
	unsigned int __state;
	unsigned int flags;
	int exit_state;
	int pid;
	int tgid;
	char comm[16];
} __attribute__((preserve_access_index));

/* x86-64's saved user registers: a system call's number and its second argument. */
struct pt_regs {
	unsigned long si;
	unsigned long orig_ax;
} __attribute__((preserve_access_index));

struct cpumask {
	unsigned long bits[1];
} __attribute__((preserve_access_index));

#endif
