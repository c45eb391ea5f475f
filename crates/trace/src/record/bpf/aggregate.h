/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * The layout of every map aggregate.bpf.c leaves for user space: keys and values as the
 * kernel stores them. crates/trace/src/record/bpf/maps.rs reads them back field by field
 * at these offsets; change one side, change the other (its tests check the sizes).
 */
#ifndef AGGREGATE_H
#define AGGREGATE_H

/* log2 buckets of a wait: bucket b holds waits of [2^b, 2^(b+1)) ns (b = 0 also holds 0). */
#define AGG_HIST 40
/* Frames kept per kernel stack, the program's own tracing frames included. */
#define AGG_STACK_DEPTH 32

/* Why something was not counted (the `drops` per-CPU array). */
enum agg_drop {
	DROP_STACK = 0,         /* bpf_get_stackid failed: map full or a collision */
	DROP_WAITS_FULL = 1,    /* the waits map is full */
	DROP_WAITERS_FULL = 2,  /* the waiters map is full */
	DROP_LOCKS_FULL = 3,    /* the lock state map is full */
	DROP_HOLDERS_FULL = 4,  /* the holds, acts or sleeps map is full */
	DROP_PARTS_FULL = 5,    /* the subject's parts, wakers or joined map is full */
	DROP_COMMS_FULL = 6,    /* the task names map is full */
	DROP_TASK_STORAGE = 7,  /* no task storage (busy or out of memory) */
	DROP_NESTED = 8,        /* an event inside another of these programs on that CPU */
	DROP_UNMATCHED_END = 9, /* a contention_end without its begin */
	DROP_LOST_END = 10,     /* an open wait replaced: its end never came */
	DROP_IPIS_FULL = 11,    /* the IPI map is full */
	DROP_SUBJECT_FULL = 12, /* the subject set is full: a created task not followed */
	DROP_COUNT = 16,
};

/* Events each program saw (the `seen` per-CPU array). */
enum agg_seen {
	SEEN_BEGIN = 0,
	SEEN_END = 1,
	SEEN_SWITCH = 2,
	SEEN_WAKING = 3,
	SEEN_FORK = 4,
	SEEN_IPI_CPU = 5,
	SEEN_IPI_MASK = 6,
	SEEN_STACK_NS = 7,    /* time spent taking kernel stacks, and how many */
	SEEN_STACKS = 8,
	SEEN_STACKS_REUSED = 9,  /* waits over the stack budget that reused their task's stack */
	SEEN_SLEEP_STACKS_REUSED = 10, /* sleeps over the stack budget that reused their task's last sleep stack */
	SEEN_COUNT = 16,
};

/* One contended wait's key: the lock, the ioctl its waiter was in (IOCTL_KNOWN | cmd, or
 * 0), its kernel stack (a stack id, or -1) and the flags of its last contention_begin. */
#define IOCTL_KNOWN (1ULL << 63)
struct wait_key {
	__u64 lock;
	__u64 ioctl;
	__s32 stack;
	__u32 flags;
};

struct wait_val {
	__u64 count;
	__u64 total_ns;
	__u64 min_ns;
	__u64 max_ns;
	__u64 hist[AGG_HIST];
};

struct waiter_key {
	__u64 lock;
	__s32 pid;
	__u32 pad;
};

struct waiter_val {
	__u64 count;
	__u64 total_ns;
};

/* What a holder did while waiters queued (act_key.activity). */
enum agg_activity {
	ACT_RUNNING = 1,
	ACT_RUNNABLE = 2,
	ACT_ASLEEP = 3,  /* detail: the sleep's stack id, or -1 */
	ACT_NESTED = 4,  /* detail: the other lock it waited on */
	ACT_HANDOFF = 5, /* holder 0: released, the next holder not yet running */
	ACT_UNKNOWN = 6, /* holder 0 (or the holder, for the gaps of its history): detail says why */
	ACT_SPUN = 7,    /* holder 0: the lock's waiters spun on a mutex (its owner ran), in all */
};

/* Why waiting has no known holder activity (ACT_UNKNOWN's detail). */
enum agg_unknown {
	UNKNOWN_NO_RELEASER = 1,
	UNKNOWN_NOT_PROVEN = 2,
	UNKNOWN_BEFORE_FIRST_EVENT = 3,
	UNKNOWN_TRIMMED = 4,
};

/* Waiters' time (ns, summed over the waiters queued) behind a holder doing something. */
struct act_key {
	__u64 lock;
	__u64 detail;
	__s32 holder;
	__u32 activity;
};

struct hold_key {
	__u64 lock;
	__s32 holder;
	__u32 pad;
};

struct hold_val {
	__u64 holds;
	__u64 shared;  /* holds taken for reading */
	__u64 ipis;    /* function-call IPIs sent during the holds */
};

/* A holder's sleeps while it held a lock others queued on. */
struct sleep_key {
	__u64 lock;
	__s32 holder;
	__s32 stack;
};

struct sleep_val {
	__u64 holds;
	__u64 slept_ns;
	__u64 held_ns;
	__u64 waiter_wait_ns;
	__u64 releases;      /* waiters released from such holds */
	__u64 held_at_least; /* some hold's start was not traced (1) */
};

/* The subject's time (part_key.kind). */
enum agg_part {
	PART_ON_CPU = 1,
	PART_RUNNABLE = 2,
	PART_LOCK = 3,   /* detail: the lock */
	PART_ASLEEP = 4, /* detail: the sleep's stack id, or -1 */
};

struct part_key {
	__u64 detail;
	__s32 pid;
	__u32 kind;
};

/* A subject task's sleeps that another task ended (waker 0: an interrupt). */
struct waker_key {
	__u64 stack;
	__s32 waker;
	__u32 pad;
};

struct comm_val {
	char comm[16];
	__s32 tgid;
	__u32 pad;
};

struct ipi_key {
	__u64 callsite;
	__u64 callback;
	__s32 sender;
	__u32 pad;
};

#endif
