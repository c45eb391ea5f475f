// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * vmscale's aggregate mode: lock contention, holders and a subject's time, aggregated in
 * the kernel instead of streamed through tracefs. Tracepoints only (tp_btf): lock
 * contention_begin/end, sched_switch, sched_waking, sched_process_fork, ipi_send_cpu and
 * ipi_send_cpumask, and the entries and exits of interrupt handlers, softirqs and hrtimers
 * (to tell an interrupt's wakeups from a task's). Every map is bounded; what does not fit
 * is counted in `drops`.
 *
 * The rules are the tracefs path's (crates/analysis/src/contention.rs, holders.rs,
 * subject.rs, open_waits.rs), made incremental:
 * - waits nest (a spinlock inside a sleeping lock's slow path), at most MAX_NEST deep; a
 *   begin that cannot nest replaces what is open (its end was lost);
 * - a sleeping lock's holder is the task that woke a queued waiter (outside interrupts):
 *   its hold ends there and starts at its own traced acquisition, or, for a mutex, when
 *   the queue formed (every acquisition is traced while waiters queue), else is unproven;
 * - the waiting behind a hold is the integral of the lock's open sleeping waits over the
 *   hold, split by what the holder did meanwhile (its last RING spans);
 * - a subject task's time goes to exactly one part at a time: the innermost lock it waits
 *   on, else on a CPU, runnable or asleep (in the stack it went to sleep with).
 */
#include "vmlinux_min.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include "aggregate.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

#define MAX_NEST 4
#define RING 8
#define IPI_RING 16
#define WAKEES 4

/* include/trace/events/lock.h */
#define LCB_F_SPIN (1U << 0)
#define LCB_F_READ (1U << 1)
#define LCB_F_WRITE (1U << 2)
#define LCB_F_RT (1U << 3)
#define LCB_F_PERCPU (1U << 4)
#define LCB_F_MUTEX (1U << 5)

/* include/linux/sched.h */
#define TASK_DEAD 0x80
#define EXIT_DEAD 0x10
#define EXIT_ZOMBIE 0x20
#define PF_KTHREAD 0x00200000

/* x86-64's ioctl system call number. */
#define SYS_IOCTL 16
/* A sleep ended by a subject task that exits within this long is a join. */
#define JOIN_WINDOW_NS 10000000ULL

enum sched_state {
	SCHED_UNKNOWN = 0,
	SCHED_RUNNING = 1,
	SCHED_RUNNABLE = 2,
	SCHED_ASLEEP = 3,
};

/* Set before loading. */
const volatile bool every_task = false;
const volatile bool ioctl_every_task = false;
const volatile bool sleep_stacks = true;
const volatile bool wait_stacks = true;
/* Kernel stacks each CPU may take per STACK_WINDOW_NS (0: no limit). A stack costs
 * microseconds; past the budget a wait reuses the stack its task last took on the same
 * lock with the same flags at the same nesting depth, and a sleep its task's last sleep stack (with nothing to
 * reuse, one is still taken), so a storm costs a bounded number of stacks per second. */
const volatile __u32 stack_budget = 0;
#define STACK_WINDOW_NS 10000000ULL
const volatile __s32 exclude_tgid = 0;
const volatile __u64 wakeup_site_start = 0;
const volatile __u64 wakeup_site_end = 0;

/* Written by user space while the programs run. */
volatile bool enabled = false;
volatile __u32 epoch = 0;
/* The next task this thread creates is the subject (a recorded command). */
volatile __s32 adopt_children_of = 0;


struct open_wait {
	__u64 lock;
	__u64 start;
	__u64 ioctl;
	__u64 waker_ts;
	__s32 stack;
	__u32 flags;
	__s32 waker; /* -1: none; 0: an interrupt; else the waking task */
	__u32 queued;
	/* A mutex waiter's spin on its owner: since when it spins (0: not now), and the
	 * time its earlier spin phases took. */
	__u64 spin_since;
	__u64 spun;
};

struct stack_cache {
	__u64 lock;
	__u32 flags;
	__s32 stack;
};

struct span {
	__u64 start;
	__u64 aux; /* ACT_ASLEEP: stack id; ACT_NESTED: the lock */
	__u32 act;
	__u32 pad;
};

/* The task's latest sleeping wait: proves it did not hold that lock meanwhile, and its
 * successful end proves an acquisition. q_*: the lock's integral at those moments. */
struct own_wait {
	__u64 lock;
	__u64 began;
	__u64 acquired;
	__u64 q_began;
	__u64 q_acquired;
	__u32 read;
	__u32 pad;
};

struct wakee {
	__u64 at;
	__u64 ns;
	__u64 stack;
	__s32 pid;
	__u32 pad;
};

struct task_state {
	__u32 epoch;
	__s32 pid;
	__u8 subject;
	__u8 sched;
	__u8 nwaits;
	__u8 exited;
	__s32 sleep_stack;
	__u32 ring_head;
	__u32 ring_len;
	__u32 trimmed;
	__u32 ipi_head;
	__u32 wakee_head;
	__u32 part_kind;
	__u64 part_since;
	__u64 part_detail;
	__u64 comm[2];
	/* Per nesting depth, the stack of the task's last wait there that took one, and that
	 * wait's lock and flags (lock 0: none): a slow path's inner spinlock (an rwsem's
	 * wait_lock) would otherwise evict the outer lock's stack at every wait. */
	struct stack_cache cached[MAX_NEST];
	/* The stack of the task's last sleep that took one. */
	__s32 last_sleep_stack;
	struct open_wait waits[MAX_NEST];
	struct span ring[RING];
	struct own_wait own;
	__u64 ipi_ts[IPI_RING];
	struct wakee wakees[WAKEES];
};

struct lock_state {
	struct bpf_spin_lock guard;
	__u32 epoch;
	__u32 flags;
	__u32 sleeping;
	__u32 queued;
	__s32 last_holder;
	__u32 hold_known;
	__s32 acq_pid;
	__s32 acq_other_pid;
	__u64 queued_since;
	__u64 q_queued_since;
	__u64 q;
	__u64 q_at;
	__u64 attr_at;
	__u64 attr_q;
	__u64 last_release;
	__u64 q_last_release;
	__u64 hold_start;
	__u64 acq_ts;
	__u64 acq_other_ts;
};

struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct task_state);
} tasks SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_STACK_TRACE);
	__uint(max_entries, 16384);
	__uint(key_size, sizeof(__u32));
	__uint(value_size, AGG_STACK_DEPTH * sizeof(__u64));
} stacks SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 8192);
	__type(key, struct wait_key);
	__type(value, struct wait_val);
} waits SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 32768);
	__type(key, struct waiter_key);
	__type(value, struct waiter_val);
} waiters SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 8192);
	__type(key, __u64);
	__type(value, struct lock_state);
} locks SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 32768);
	__type(key, struct act_key);
	__type(value, __u64);
} acts SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, struct hold_key);
	__type(value, struct hold_val);
} holds SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 8192);
	__type(key, struct sleep_key);
	__type(value, struct sleep_val);
} sleeps SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, struct part_key);
	__type(value, __u64);
} parts SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, struct waker_key);
	__type(value, __u64);
} wakers SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, __s32);
	__type(value, __u64);
} joined SEC(".maps");

/* Tasks that are the subject: the roots user space names, and every task they create. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, __s32);
	__type(value, __u8);
} subject SEC(".maps");

/* Tasks whose ioctl names the locks they wait on, besides every task's with
 * ioctl_every_task. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __s32);
	__type(value, __u8);
} ioctl_tids SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, __s32);
	__type(value, struct comm_val);
} comms SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, struct ipi_key);
	__type(value, __u64);
} ipis SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, DROP_COUNT);
	__type(key, __u32);
	__type(value, __u64);
} drops SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, SEEN_COUNT);
	__type(key, __u32);
	__type(value, __u64);
} seen SEC(".maps");

/* One of these programs is running on this CPU: an event it causes (a contended bucket
 * lock of a map, a bpf_spin_lock) is not traced, and never changes state half-updated. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} busy SEC(".maps");

/* Zeroes for new entries: map values are larger than the programs' stack allows. */
struct zero_buf {
	char bytes[512];
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct zero_buf);
} zeros SEC(".maps");

static __always_inline void *zero_value(void)
{
	__u32 zero = 0;
	return bpf_map_lookup_elem(&zeros, &zero);
}

static __always_inline void count(void *map, __u32 index, __u64 n)
{
	__u64 *slot = bpf_map_lookup_elem(map, &index);
	if (slot)
		*slot += n;
}

static __always_inline void drop(__u32 reason)
{
	count(&drops, reason, 1);
}

static __always_inline bool enter(__u32 what)
{
	__u32 zero = 0;
	__u32 *b;
	if (!enabled)
		return false;
	b = bpf_map_lookup_elem(&busy, &zero);
	if (!b)
		return false;
	if (*b) {
		drop(DROP_NESTED);
		return false;
	}
	*b = 1;
	count(&seen, what, 1);
	return true;
}

static __always_inline void leave(void)
{
	__u32 zero = 0;
	__u32 *b = bpf_map_lookup_elem(&busy, &zero);
	if (b)
		*b = 0;
}

/* Interrupt handlers, softirqs and expiring hrtimers running on each CPU: an event
 * inside one is the interrupt's, not the interrupted task's (a timer ending a sleep). The
 * preempt count would say so directly, but reading it needs its per-CPU symbol's address,
 * which kernels without CONFIG_KALLSYMS_ALL do not give BPF. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} irq_depth SEC(".maps");

static __always_inline bool in_interrupt(void)
{
	__u32 zero = 0;
	__u32 *depth = bpf_map_lookup_elem(&irq_depth, &zero);
	return depth && *depth;
}

static __always_inline void irq_enters(void)
{
	__u32 zero = 0;
	__u32 *depth = bpf_map_lookup_elem(&irq_depth, &zero);
	if (depth)
		*depth += 1;
}

static __always_inline void irq_leaves(void)
{
	__u32 zero = 0;
	__u32 *depth = bpf_map_lookup_elem(&irq_depth, &zero);
	if (depth && *depth)
		*depth -= 1;
}

SEC("tp_btf/irq_handler_entry")
int BPF_PROG(on_irq_handler_entry)
{
	irq_enters();
	return 0;
}

SEC("tp_btf/irq_handler_exit")
int BPF_PROG(on_irq_handler_exit)
{
	irq_leaves();
	return 0;
}

SEC("tp_btf/softirq_entry")
int BPF_PROG(on_softirq_entry)
{
	irq_enters();
	return 0;
}

SEC("tp_btf/softirq_exit")
int BPF_PROG(on_softirq_exit)
{
	irq_leaves();
	return 0;
}

SEC("tp_btf/hrtimer_expire_entry")
int BPF_PROG(on_hrtimer_expire_entry)
{
	irq_enters();
	return 0;
}

SEC("tp_btf/hrtimer_expire_exit")
int BPF_PROG(on_hrtimer_expire_exit)
{
	irq_leaves();
	return 0;
}

/* Adds `n` to the u64 at `key`, creating it; counts `reason` when the map is full. */
static __always_inline void add_u64(void *map, void *key, __u64 n, __u32 reason)
{
	__u64 zero = 0, *slot;
	if (!n)
		return;
	slot = bpf_map_lookup_elem(map, key);
	if (!slot) {
		bpf_map_update_elem(map, key, &zero, BPF_NOEXIST);
		slot = bpf_map_lookup_elem(map, key);
		if (!slot) {
			drop(reason);
			return;
		}
	}
	__sync_fetch_and_add(slot, n);
}

static __always_inline void *lookup_or_zero(void *map, void *key, __u32 reason)
{
	void *zero, *slot = bpf_map_lookup_elem(map, key);
	if (slot)
		return slot;
	zero = zero_value();
	if (!zero)
		return NULL;
	bpf_map_update_elem(map, key, zero, BPF_NOEXIST);
	slot = bpf_map_lookup_elem(map, key);
	if (!slot)
		drop(reason);
	return slot;
}

static __always_inline bool is_sleeping(__u32 flags)
{
	return (flags & (LCB_F_MUTEX | LCB_F_RT | LCB_F_PERCPU)) ||
	       ((flags & (LCB_F_READ | LCB_F_WRITE)) && !(flags & LCB_F_SPIN));
}

static __always_inline bool is_spinning(__u32 flags)
{
	return (flags & LCB_F_SPIN) && !(flags & (LCB_F_MUTEX | LCB_F_RT | LCB_F_PERCPU));
}

/* A mutex waiter spinning on its owner (before queueing, or as the first waiter), which
 * mutex_optimistic_spin does only while the owner is on a CPU. */
static __always_inline bool is_mutex_spin(__u32 flags)
{
	return (flags & LCB_F_MUTEX) && (flags & LCB_F_SPIN);
}

static __always_inline bool enters_queue(__u32 flags)
{
	return is_sleeping(flags) && (!(flags & LCB_F_MUTEX) || !(flags & LCB_F_SPIN));
}

/* A wait with flags `inner` can begin while one with `outer` is open. */
static __always_inline bool nests(__u32 outer, __u32 inner)
{
	return !is_spinning(outer) && is_spinning(inner);
}

static __always_inline bool is_subject_pid(__s32 pid, __s32 tgid)
{
	if (every_task)
		return pid != 0 && tgid != exclude_tgid;
	return bpf_map_lookup_elem(&subject, &pid) != NULL;
}

/* The task's state, reset when it was last touched in an earlier tracing window. */
static __always_inline struct task_state *state_of(struct task_struct *t, __u64 now,
						   bool create)
{
	struct task_state *ts;
	__u32 e = epoch;
	ts = bpf_task_storage_get(&tasks, t, 0, create ? BPF_LOCAL_STORAGE_GET_F_CREATE : 0);
	if (!ts) {
		if (create)
			drop(DROP_TASK_STORAGE);
		return NULL;
	}
	if (ts->epoch != e) {
		__s32 pid = t->pid;
		__builtin_memset(ts, 0, sizeof(*ts));
		ts->epoch = e;
		ts->pid = pid;
		ts->sleep_stack = -1;
		ts->last_sleep_stack = -1;
		ts->subject = is_subject_pid(pid, t->tgid);
		ts->part_since = now;
	}
	return ts;
}

static __always_inline __u64 mul_div(__u64 a, __u64 b, __u64 c)
{
	if (!c)
		return 0;
	while (c >> 32) {
		c >>= 8;
		b >>= 8;
	}
	if (!c)
		return 0;
	return (a / c) * b + ((a % c) * b) / c;
}

static __always_inline void note_comm(struct task_state *ts, struct task_struct *t)
{
	struct comm_val v = {};
	__u64 *c = (__u64 *)v.comm;
	bpf_probe_read_kernel(v.comm, sizeof(v.comm), t->comm);
	if (ts->comm[0] == c[0] && ts->comm[1] == c[1])
		return;
	ts->comm[0] = c[0];
	ts->comm[1] = c[1];
	v.tgid = t->tgid;
	if (bpf_map_update_elem(&comms, &ts->pid, &v, BPF_ANY))
		drop(DROP_COMMS_FULL);
}

/* The task's activity changes at `now` (its timeline, for splitting a holder's hold). */
static __always_inline void ring_set(struct task_state *ts, __u64 now, __u32 act, __u64 aux)
{
	__u32 last = (ts->ring_head + RING - 1) % RING;
	struct span *s;
	if (ts->ring_len && ts->ring[last].act == act && ts->ring[last].aux == aux)
		return;
	s = &ts->ring[ts->ring_head % RING];
	s->start = now;
	s->act = act;
	s->aux = aux;
	ts->ring_head = (ts->ring_head + 1) % RING;
	if (ts->ring_len < RING)
		ts->ring_len++;
	else
		ts->trimmed = 1;
}

static __always_inline __u32 ring_last_act(struct task_state *ts)
{
	if (!ts->ring_len)
		return 0;
	return ts->ring[(ts->ring_head + RING - 1) % RING].act;
}

/* The subject part the task's state says it is in now. */
static __always_inline void current_part(struct task_state *ts, __u32 *kind, __u64 *detail)
{
	__u32 n = ts->nwaits;
	if (n > 0 && n <= MAX_NEST) {
		*kind = PART_LOCK;
		*detail = ts->waits[(n - 1) & (MAX_NEST - 1)].lock;
		return;
	}
	*detail = 0;
	switch (ts->sched) {
	case SCHED_RUNNABLE:
		*kind = PART_RUNNABLE;
		break;
	case SCHED_ASLEEP:
		*kind = PART_ASLEEP;
		*detail = (__u64)(__s64)ts->sleep_stack;
		break;
	default:
		*kind = PART_ON_CPU;
	}
}

/* A subject task's state changed at `now`: the part it leaves gets its time. Returns the
 * time counted, and the part left through `left_kind`/`left_detail`. */
static __always_inline __u64 part_changed(struct task_state *ts, __u64 now, __u32 *left_kind,
					  __u64 *left_detail)
{
	__u32 kind;
	__u64 detail, ns;
	struct part_key key = {};
	*left_kind = 0;
	if (!ts->subject)
		return 0;
	current_part(ts, &kind, &detail);
	if (ts->part_kind == kind && ts->part_detail == detail)
		return 0;
	ns = now > ts->part_since ? now - ts->part_since : 0;
	key.pid = ts->pid;
	key.kind = ts->part_kind ? ts->part_kind : PART_ON_CPU;
	key.detail = ts->part_detail;
	*left_kind = key.kind;
	*left_detail = key.detail;
	add_u64(&parts, &key, ns, DROP_PARTS_FULL);
	ts->part_kind = kind;
	ts->part_detail = detail;
	ts->part_since = now;
	return ns;
}

static __always_inline void part_update(struct task_state *ts, __u64 now)
{
	__u32 k;
	__u64 d;
	part_changed(ts, now, &k, &d);
}

static __always_inline __u64 ioctl_of(struct task_struct *t, __s32 pid)
{
	struct pt_regs *regs;
	if (t->flags & PF_KTHREAD)
		return 0;
	if (!ioctl_every_task && !bpf_map_lookup_elem(&ioctl_tids, &pid))
		return 0;
	regs = (struct pt_regs *)bpf_task_pt_regs(t);
	if (!regs)
		return 0;
	if (BPF_CORE_READ(regs, orig_ax) != SYS_IOCTL)
		return 0;
	return IOCTL_KNOWN | (BPF_CORE_READ(regs, si) & 0xffffffffULL);
}

/* Integrates the lock's open sleeping waits up to `now`. Under the guard. */
static __always_inline void integrate(struct lock_state *ls, __u64 now)
{
	if (now > ls->q_at) {
		ls->q += (__u64)ls->sleeping * (now - ls->q_at);
		ls->q_at = now;
	}
}

static __always_inline struct lock_state *lock_state_of(__u64 lock, bool create)
{
	struct lock_state *ls = bpf_map_lookup_elem(&locks, &lock);
	if (ls || !create)
		return ls;
	return lookup_or_zero(&locks, &lock, DROP_LOCKS_FULL);
}

/* A wait of a sleeping lock leaves it (ended, or lost). `released_at`: the waiter was
 * woken by a release at that time and ended with the lock now. Returns the waiting that
 * was a handoff (released, the waiter not yet running with it), and through `q_now` the
 * integral now. */
#define LEAVE_QUEUED 1
#define LEAVE_RELEASED 2
#define LEAVE_ACQUIRED 4
__noinline __u64 leave_lock(__u64 lock, __u64 now, __u32 how, __s32 pid, __u64 *q_now)
{
	if (!q_now)
		return 0;
	bool queued = how & LEAVE_QUEUED, released = how & LEAVE_RELEASED;
	bool acquired = how & LEAVE_ACQUIRED;
	struct lock_state *ls = lock_state_of(lock, false);
	__u64 handoff = 0;
	__u32 e = epoch;
	*q_now = 0;
	if (!ls)
		return 0;
	bpf_spin_lock(&ls->guard);
	if (ls->epoch != e) {
		bpf_spin_unlock(&ls->guard);
		return 0;
	}
	integrate(ls, now);
	*q_now = ls->q;
	if (ls->sleeping)
		ls->sleeping--;
	if (queued && ls->queued) {
		ls->queued--;
		if (!ls->queued)
			ls->queued_since = 0;
	}
	if (released && ls->attr_at && now > ls->attr_at) {
		handoff = ls->q - ls->attr_q;
		ls->attr_at = now;
		ls->attr_q = ls->q;
	}
	if (acquired) {
		if (ls->acq_pid != pid) {
			ls->acq_other_pid = ls->acq_pid;
			ls->acq_other_ts = ls->acq_ts;
		}
		ls->acq_pid = pid;
		ls->acq_ts = now;
	}
	if (!ls->sleeping) {
		/* Nobody left to ask about earlier holds. */
		ls->queued = 0;
		ls->queued_since = 0;
		ls->last_release = 0;
		ls->last_holder = 0;
		ls->attr_at = 0;
		ls->acq_pid = 0;
		ls->acq_ts = 0;
		ls->acq_other_pid = 0;
		ls->acq_other_ts = 0;
	}
	bpf_spin_unlock(&ls->guard);
	return handoff;
}

/* A sleeping wait on `lock` opens (or, for a mutex's second begin, enters the queue).
 * Returns the integral now. */
__noinline __u64 join_lock(__u64 lock, __u32 flags, __u64 now, bool opens,
				       bool queues)
{
	struct lock_state *ls = lock_state_of(lock, true);
	__u32 e = epoch;
	__u64 q;
	if (!ls)
		return 0;
	bpf_spin_lock(&ls->guard);
	if (ls->epoch != e) {
		__builtin_memset((char *)ls + sizeof(struct bpf_spin_lock), 0,
				 sizeof(*ls) - sizeof(struct bpf_spin_lock));
		ls->epoch = e;
		ls->q_at = now;
	}
	if (!ls->flags)
		ls->flags = flags;
	integrate(ls, now);
	if (opens) {
		if (!ls->sleeping) {
			ls->attr_at = now;
			ls->attr_q = ls->q;
		}
		ls->sleeping++;
	}
	if (queues) {
		if (!ls->queued) {
			ls->queued_since = now;
			ls->q_queued_since = ls->q;
		}
		ls->queued++;
	}
	q = ls->q;
	bpf_spin_unlock(&ls->guard);
	return q;
}

/* A wait replaced or lost (its end never came). */
static __always_inline void forget_wait(struct open_wait *w, __u64 now)
{
	__u64 q;
	drop(DROP_LOST_END);
	if (is_sleeping(w->flags))
		leave_lock(w->lock, now, w->queued ? LEAVE_QUEUED : 0, 0, &q);
}

struct stack_window {
	__u64 window;
	__u32 taken;
	__u32 pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct stack_window);
} stack_windows SEC(".maps");

/* Whether this CPU may take another stack in the current window. */
static __always_inline bool stack_allowed(__u64 now)
{
	__u32 zero = 0;
	struct stack_window *w;
	if (!stack_budget)
		return true;
	w = bpf_map_lookup_elem(&stack_windows, &zero);
	if (!w)
		return true;
	if (w->window != now / STACK_WINDOW_NS) {
		w->window = now / STACK_WINDOW_NS;
		w->taken = 0;
	}
	if (w->taken >= stack_budget)
		return false;
	w->taken++;
	return true;
}

static __always_inline __s64 take_stack(void *ctx)
{
	__u64 t0 = bpf_ktime_get_ns();
	__s64 id = bpf_get_stackid(ctx, &stacks, 0);
	count(&seen, SEEN_STACK_NS, bpf_ktime_get_ns() - t0);
	count(&seen, SEEN_STACKS, 1);
	if (id < 0) {
		drop(DROP_STACK);
		return -1;
	}
	return id;
}

SEC("tp_btf/contention_begin")
int BPF_PROG(on_contention_begin, void *lock_ptr, unsigned int flags)
{
	struct task_struct *t;
	struct task_state *ts;
	__u64 now, lock = (__u64)lock_ptr;
	__u32 n, keep = 0, i;
	struct open_wait *w;
	__s64 stack = -1;

	if (!enter(SEEN_BEGIN))
		return 0;
	now = bpf_ktime_get_ns();
	t = bpf_get_current_task_btf();
	ts = state_of(t, now, true);
	if (!ts)
		goto out;
	if (ts->sched == SCHED_UNKNOWN)
		ts->sched = SCHED_RUNNING;
	n = ts->nwaits;
	if (n > MAX_NEST)
		n = MAX_NEST;
	/* A mutex traces a second begin when it stops spinning and sleeps: the same wait. */
	for (i = 0; i < MAX_NEST; i++) {
		__u32 j = MAX_NEST - 1 - i;
		if (j >= n)
			continue;
		w = &ts->waits[j];
		if (w->lock != lock)
			continue;
		bool was_sleeping = is_sleeping(w->flags);
		bool opens = !was_sleeping && is_sleeping(flags);
		bool queues = !w->queued && enters_queue(flags);
		w->flags = flags;
		/* Every spin phase counts: a first waiter spins again after each wakeup. */
		if (is_mutex_spin(flags)) {
			if (!w->spin_since)
				w->spin_since = now;
		} else if (w->spin_since) {
			w->spun += now - w->spin_since;
			w->spin_since = 0;
		}
		if (opens || queues) {
			__u64 q = join_lock(lock, flags, now, opens, queues);
			if (queues)
				w->queued = 1;
			if (opens) {
				ts->own.lock = lock;
				ts->own.began = now;
				ts->own.q_began = q;
				ts->own.acquired = 0;
				ts->own.read = !!(flags & LCB_F_READ);
			}
		}
		goto out;
	}
	/* Where it nests: after the innermost open wait it can nest in. */
	for (i = 0; i < MAX_NEST; i++) {
		if (i < n && nests(ts->waits[i].flags, flags))
			keep = i + 1;
	}
	for (i = 0; i < MAX_NEST; i++) {
		if (i >= keep && i < n)
			forget_wait(&ts->waits[i], now);
	}
	if (keep >= MAX_NEST) {
		/* Deeper than kept: the innermost is dropped, the wait goes in its place. */
		forget_wait(&ts->waits[MAX_NEST - 1], now);
		keep = MAX_NEST - 1;
	}
	if (wait_stacks) {
		/* Every stack taken counts against the budget; past it, a wait with nothing to
		 * reuse still takes one, since a wait without a stack has no lock name. */
		bool allowed = stack_allowed(now);
		struct stack_cache *c = &ts->cached[keep & (MAX_NEST - 1)];
		if (!allowed && c->lock == lock && c->flags == flags) {
			stack = c->stack;
			count(&seen, SEEN_STACKS_REUSED, 1);
		} else {
			stack = take_stack(ctx);
			if (stack >= 0) {
				c->lock = lock;
				c->flags = flags;
				c->stack = stack;
			}
		}
	}
	w = &ts->waits[keep & (MAX_NEST - 1)];
	w->lock = lock;
	w->start = now;
	w->flags = flags;
	w->stack = stack;
	w->ioctl = ioctl_of(t, ts->pid);
	w->waker = -1;
	w->waker_ts = 0;
	w->queued = enters_queue(flags);
	w->spin_since = is_mutex_spin(flags) ? now : 0;
	w->spun = 0;
	ts->nwaits = keep + 1;
	if (is_sleeping(flags)) {
		__u64 q = join_lock(lock, flags, now, true, w->queued);
		ts->own.lock = lock;
		ts->own.began = now;
		ts->own.q_began = q;
		ts->own.acquired = 0;
		ts->own.read = !!(flags & LCB_F_READ);
	}
	ring_set(ts, now, ACT_NESTED, lock);
	part_update(ts, now);
out:
	leave();
	return 0;
}

static __always_inline __u32 log2_bucket(__u64 v)
{
	__u32 b = 0;
	if (v >> 32) { v >>= 32; b += 32; }
	if (v >> 16) { v >>= 16; b += 16; }
	if (v >> 8) { v >>= 8; b += 8; }
	if (v >> 4) { v >>= 4; b += 4; }
	if (v >> 2) { v >>= 2; b += 2; }
	if (v >> 1) { b += 1; }
	return b < AGG_HIST ? b : AGG_HIST - 1;
}

SEC("tp_btf/contention_end")
int BPF_PROG(on_contention_end, void *lock_ptr, int ret)
{
	struct task_struct *t;
	struct task_state *ts;
	__u64 now, lock = (__u64)lock_ptr, waited;
	__u32 n, i, at = MAX_NEST;
	struct open_wait w;
	struct wait_key key = {};
	struct wait_val *v;
	struct waiter_key wk = {};
	struct waiter_val *wv;

	if (!enter(SEEN_END))
		return 0;
	now = bpf_ktime_get_ns();
	t = bpf_get_current_task_btf();
	ts = state_of(t, now, false);
	if (!ts) {
		drop(DROP_UNMATCHED_END);
		goto out;
	}
	n = ts->nwaits;
	if (n > MAX_NEST)
		n = MAX_NEST;
	for (i = 0; i < MAX_NEST; i++) {
		__u32 j = MAX_NEST - 1 - i;
		if (at == MAX_NEST && j < n && ts->waits[j].lock == lock)
			at = j;
	}
	if (at >= MAX_NEST) {
		drop(DROP_UNMATCHED_END);
		goto out;
	}
	/* Waits opened inside it whose ends were lost. */
	for (i = 0; i < MAX_NEST; i++) {
		if (i > at && i < n)
			forget_wait(&ts->waits[i], now);
	}
	w = ts->waits[at];
	ts->nwaits = at;
	waited = now > w.start ? now - w.start : 0;

	key.lock = lock;
	key.ioctl = w.ioctl;
	key.stack = w.stack;
	key.flags = w.flags;
	v = lookup_or_zero(&waits, &key, DROP_WAITS_FULL);
	if (v) {
		__u32 b = log2_bucket(waited);
		__sync_fetch_and_add(&v->count, 1);
		__sync_fetch_and_add(&v->total_ns, waited);
		if (b < AGG_HIST)
			__sync_fetch_and_add(&v->hist[b], 1);
		if (!v->min_ns || waited < v->min_ns)
			v->min_ns = waited ? waited : 1;
		if (waited > v->max_ns)
			v->max_ns = waited;
	}
	wk.lock = lock;
	wk.pid = ts->pid;
	wv = lookup_or_zero(&waiters, &wk, DROP_WAITERS_FULL);
	if (wv) {
		__sync_fetch_and_add(&wv->count, 1);
		__sync_fetch_and_add(&wv->total_ns, waited);
	}
	note_comm(ts, t);

	if (is_sleeping(w.flags)) {
		/* Only a queued waiter is woken by a release; a spinning one is not woken. */
		bool released = ret == 0 && w.waker > 0 && w.waker_ts >= w.start && w.queued;
		__u64 q = 0, handoff;
		handoff = leave_lock(lock, now,
				     (w.queued ? LEAVE_QUEUED : 0) | (released ? LEAVE_RELEASED : 0) |
					     (ret == 0 ? LEAVE_ACQUIRED : 0),
				     ts->pid, &q);
		if (handoff) {
			struct act_key ak = {.lock = lock, .activity = ACT_HANDOFF};
			add_u64(&acts, &ak, handoff, DROP_HOLDERS_FULL);
		}
		if (w.spin_since)
			w.spun += now > w.spin_since ? now - w.spin_since : 0;
		if (w.spun) {
			struct act_key sk = {.lock = lock, .activity = ACT_SPUN};
			add_u64(&acts, &sk, w.spun, DROP_HOLDERS_FULL);
		}
		if (ret == 0 && ts->own.lock == lock) {
			ts->own.acquired = now;
			ts->own.q_acquired = q;
		}
	}
	if (ts->nwaits > 0)
		ring_set(ts, now, ACT_NESTED, ts->waits[(ts->nwaits - 1) & (MAX_NEST - 1)].lock);
	else
		ring_set(ts, now, ACT_RUNNING, 0);
	part_update(ts, now);
out:
	leave();
	return 0;
}

/* Splits `q` (waiters' time behind holder `holder` over [from, to)) by the holder's spans;
 * `asleep_ns` gets the time it slept in its latest sleep's stack. */
struct hold_span {
	__u64 from;
	__u64 to;
	__u64 q;
	__u32 new_hold;
	__u32 start_known;
};

__noinline int split_hold(__u64 lock, struct task_state *hs, struct hold_span *span)
{
	if (!hs || !span)
		return 0;
	__u64 from = span->from, to = span->to, q = span->q;
	bool new_hold = span->new_hold, start_known = span->start_known;
	__u32 len = hs->ring_len, i;
	__u64 dur = to > from ? to - from : 0;
	struct act_key ak = {.lock = lock, .holder = hs->pid};
	if (!dur || len == 0)
		goto unknown_all;
	for (i = 0; i < RING; i++) {
		__u32 idx, next;
		__u64 a, b, start, end, piece, share;
		if (i >= len)
			break;
		idx = (hs->ring_head + RING - len + i) % RING;
		start = hs->ring[idx].start;
		if (i + 1 < len) {
			next = (idx + 1) % RING;
			end = hs->ring[next].start;
		} else {
			end = to;
		}
		if (i == 0 && start > from) {
			__u64 gap_end = start < to ? start : to;
			struct act_key gk = {.lock = lock, .holder = hs->pid,
					     .activity = ACT_UNKNOWN,
					     .detail = hs->trimmed ? UNKNOWN_TRIMMED
								   : UNKNOWN_BEFORE_FIRST_EVENT};
			add_u64(&acts, &gk, mul_div(q, gap_end - from, dur), DROP_HOLDERS_FULL);
		}
		a = start > from ? start : from;
		b = end < to ? end : to;
		if (b <= a)
			continue;
		piece = b - a;
		share = mul_div(q, piece, dur);
		ak.activity = hs->ring[idx].act;
		ak.detail = hs->ring[idx].aux;
		add_u64(&acts, &ak, share, DROP_HOLDERS_FULL);
		if (ak.activity == ACT_ASLEEP) {
			struct sleep_key sk = {.lock = lock, .holder = hs->pid,
					       .stack = (__s32)hs->ring[idx].aux};
			struct sleep_val *sv;
			sv = lookup_or_zero(&sleeps, &sk, DROP_HOLDERS_FULL);
			if (sv) {
				__sync_fetch_and_add(&sv->slept_ns, piece);
				__sync_fetch_and_add(&sv->waiter_wait_ns, share);
				__sync_fetch_and_add(&sv->held_ns, dur);
				__sync_fetch_and_add(&sv->releases, 1);
				if (new_hold)
					__sync_fetch_and_add(&sv->holds, 1);
				if (!start_known)
					sv->held_at_least = 1;
			}
		}
	}
	return 0;
unknown_all:
	if (q) {
		struct act_key gk = {.lock = lock, .holder = hs->pid, .activity = ACT_UNKNOWN,
				     .detail = UNKNOWN_BEFORE_FIRST_EVENT};
		add_u64(&acts, &gk, q, DROP_HOLDERS_FULL);
	}
	return 0;
}

/* The current task (`hs`) released `lock` at `now` by waking a queued waiter whose wait
 * has `flags`: its hold ends, and the waiting since the last attribution is split. */
__noinline int released(__u64 lock, struct task_state *hs, __u64 now, __u32 flags)
{
	struct lock_state *ls = lock_state_of(lock, false);
	__u32 e = epoch;
	__s32 pid;
	__u64 a, qa, qr, s, qs, gap = 0, gap_reason = 0, ipis_from;
	bool extend, known = false, proven = false, shared = false;
	struct hold_key hk = {.lock = lock};
	struct hold_val *hv;
	struct hold_span span = {};
	__u32 i, nipi = 0;

	if (!ls || !hs)
		return 0;
	pid = hs->pid;
	hk.holder = pid;
	bpf_spin_lock(&ls->guard);
	if (ls->epoch != e || !ls->attr_at) {
		bpf_spin_unlock(&ls->guard);
		return 0;
	}
	integrate(ls, now);
	qr = ls->q;
	a = ls->attr_at;
	qa = ls->attr_q;
	extend = ls->last_release && ls->last_holder == pid &&
		 !(hs->own.lock == lock && hs->own.began > ls->last_release);
	if (extend) {
		s = a;
		qs = qa;
		known = ls->hold_known;
	} else {
		bool own_acq = hs->own.lock == lock && hs->own.acquired &&
			       hs->own.acquired <= now &&
			       (!ls->last_release || hs->own.acquired >= ls->last_release);
		s = now;
		qs = qr;
		if (own_acq) {
			s = hs->own.acquired;
			qs = hs->own.q_acquired;
			known = true;
			proven = true;
			shared = hs->own.read;
		} else if ((flags & LCB_F_MUTEX) && ls->queued_since) {
			/* Every acquisition is traced while waiters queue on a mutex: the
			 * holder held it since the queue formed, unless another task took it
			 * since. */
			__u64 from = ls->queued_since, qfrom = ls->q_queued_since, other;
			if (ls->last_release > from) {
				from = ls->last_release;
				qfrom = ls->q_last_release;
			}
			if (hs->own.lock == lock && hs->own.began > from) {
				from = hs->own.began;
				qfrom = hs->own.q_began;
			}
			other = ls->acq_pid != pid ? ls->acq_ts : ls->acq_other_ts;
			if (other <= from && from <= now) {
				s = from;
				qs = qfrom;
				proven = true;
			}
		}
		if (s < a) {
			s = a;
			qs = qa;
		}
		if (s > a && qs > qa) {
			gap = qs - qa;
			gap_reason = known ? (ls->last_release ? 0 : UNKNOWN_NO_RELEASER)
					   : UNKNOWN_NOT_PROVEN;
		}
		ls->hold_start = s;
		ls->hold_known = known;
	}
	ls->attr_at = now;
	ls->attr_q = qr;
	ls->last_release = now;
	ls->q_last_release = qr;
	ls->last_holder = pid;
	bpf_spin_unlock(&ls->guard);

	if (gap) {
		struct act_key gk = {.lock = lock};
		gk.activity = gap_reason ? ACT_UNKNOWN : ACT_HANDOFF;
		gk.detail = gap_reason;
		add_u64(&acts, &gk, gap, DROP_HOLDERS_FULL);
	}
	if (!extend && !proven) {
		/* Only the release is proven: the waiting up to it has no holder. */
		return 0;
	}
	span.from = s;
	span.to = now;
	span.q = qr > qs ? qr - qs : 0;
	span.new_hold = !extend;
	span.start_known = known;
	split_hold(lock, hs, &span);
	/* IPIs sent since the hold began (branch-free: timestamps are below 2^63 and the
	 * ring's are all the holder's own, so none is later than now). */
	ipis_from = s ? s : 1;
	for (i = 0; i < IPI_RING; i++)
		nipi += (__u64)(ipis_from - 1 - hs->ipi_ts[i]) >> 63;
	hv = lookup_or_zero(&holds, &hk, DROP_HOLDERS_FULL);
	if (hv) {
		if (!extend) {
			__sync_fetch_and_add(&hv->holds, 1);
			if (shared)
				__sync_fetch_and_add(&hv->shared, 1);
		}
		if (nipi)
			__sync_fetch_and_add(&hv->ipis, nipi);
	}
	/* Counted once: a later extension of the same hold starts after these. */
	if (nipi) {
		for (i = 0; i < IPI_RING; i++)
			hs->ipi_ts[i] = 0;
	}
	return 0;
}

SEC("tp_btf/sched_waking")
int BPF_PROG(on_sched_waking, struct task_struct *p)
{
	struct task_struct *cur;
	struct task_state *ws, *hs = NULL;
	__u64 now;
	__s32 waker = 0;
	__u32 n, i, left_kind;
	__u64 left_detail, ns, release_lock = 0;
	__u32 release_flags = 0;
	bool irq;

	if (!enter(SEEN_WAKING))
		return 0;
	now = bpf_ktime_get_ns();
	cur = bpf_get_current_task_btf();
	irq = in_interrupt();
	if (!irq && cur->pid != p->pid)
		waker = cur->pid;
	ws = state_of(p, now, false);
	if (!ws)
		goto out;
	if (ring_last_act(ws) == ACT_ASLEEP)
		ring_set(ws, now, ACT_RUNNABLE, 0);
	/* The wakeup ends the sleep of whichever of its waits sleeps: a queued waiter woken
	 * by a task is woken by the release. */
	n = ws->nwaits;
	if (n > MAX_NEST)
		n = MAX_NEST;
	for (i = 0; i < MAX_NEST; i++) {
		struct open_wait *w;
		if (i >= n || cur->pid == p->pid)
			break;
		w = &ws->waits[i];
		w->waker = waker;
		w->waker_ts = now;
		if (waker > 0 && w->queued && is_sleeping(w->flags)) {
			release_lock = w->lock;
			release_flags = w->flags;
		}
	}
	if (release_lock) {
		hs = state_of(cur, now, true);
		if (hs) {
			note_comm(hs, cur);
			released(release_lock, hs, now, release_flags);
		}
	}
	if (ws->sched == SCHED_ASLEEP) {
		ws->sched = SCHED_RUNNABLE;
		ns = part_changed(ws, now, &left_kind, &left_detail);
		if (left_kind == PART_ASLEEP && ns) {
			struct waker_key wk = {.stack = left_detail, .waker = waker};
			add_u64(&wakers, &wk, ns, DROP_PARTS_FULL);
			if (waker > 0) {
				if (!hs)
					hs = state_of(cur, now, true);
				if (hs && hs->subject) {
					struct wakee *we = &hs->wakees[hs->wakee_head % WAKEES];
					we->pid = ws->pid;
					we->stack = left_detail;
					we->ns = ns;
					we->at = now;
					hs->wakee_head = (hs->wakee_head + 1) % WAKEES;
					note_comm(hs, cur);
				}
			}
		}
	}
out:
	leave();
	return 0;
}

/* A subject task exits: sleeps of other subject tasks it ended just before were joins. */
static __always_inline void exited(struct task_state *ts, __u64 now)
{
	__u32 i;
	part_update(ts, now);
	ts->exited = 1;
	for (i = 0; i < WAKEES; i++) {
		struct wakee *we = &ts->wakees[i];
		struct part_key pk = {};
		struct waker_key wk = {};
		__u64 *slot;
		if (!we->pid || now - we->at > JOIN_WINDOW_NS)
			continue;
		pk.pid = we->pid;
		pk.kind = PART_ASLEEP;
		pk.detail = we->stack;
		slot = bpf_map_lookup_elem(&parts, &pk);
		if (slot)
			__sync_fetch_and_sub(slot, we->ns);
		wk.stack = we->stack;
		wk.waker = ts->pid;
		slot = bpf_map_lookup_elem(&wakers, &wk);
		if (slot)
			__sync_fetch_and_sub(slot, we->ns);
		add_u64(&joined, &we->pid, we->ns, DROP_PARTS_FULL);
		we->pid = 0;
	}
}

SEC("tp_btf/sched_switch")
int BPF_PROG(on_sched_switch, bool preempt, struct task_struct *prev, struct task_struct *next,
	     unsigned int prev_state)
{
	struct task_state *ps, *ns;
	__u64 now;
	bool exiting, sleeping;

	if (!enter(SEEN_SWITCH))
		return 0;
	now = bpf_ktime_get_ns();
	exiting = !preempt && ((prev_state & TASK_DEAD) ||
			       (prev->exit_state & (EXIT_ZOMBIE | EXIT_DEAD)));
	sleeping = !preempt && !exiting && (prev_state & 0xff) != 0;
	if (prev->pid) {
		ps = state_of(prev, now, true);
		if (ps) {
			if (exiting) {
				if (ps->subject)
					exited(ps, now);
			} else {
				__u32 n = ps->nwaits;
				if (sleeping) {
					ps->sleep_stack = -1;
					/* A sleep inside a lock wait is that wait's. */
					if (sleep_stacks && n == 0) {
						/* Past the budget, the task's last sleep site
						 * stands for this one: without a stack a sleep
						 * has no site at all. */
						if (!stack_allowed(now) && ps->last_sleep_stack >= 0) {
							ps->sleep_stack = ps->last_sleep_stack;
							count(&seen, SEEN_SLEEP_STACKS_REUSED, 1);
						} else {
							ps->sleep_stack = take_stack(ctx);
							if (ps->sleep_stack >= 0)
								ps->last_sleep_stack = ps->sleep_stack;
						}
					}
					ps->sched = SCHED_ASLEEP;
				} else {
					ps->sched = SCHED_RUNNABLE;
				}
				if (n > 0 && n <= MAX_NEST)
					ring_set(ps, now, ACT_NESTED,
						 ps->waits[(n - 1) & (MAX_NEST - 1)].lock);
				else if (sleeping)
					ring_set(ps, now, ACT_ASLEEP, (__u64)(__s64)ps->sleep_stack);
				else
					ring_set(ps, now, ACT_RUNNABLE, 0);
				part_update(ps, now);
			}
		}
	}
	if (next->pid) {
		ns = state_of(next, now, true);
		if (ns) {
			__u32 n = ns->nwaits;
			ns->sched = SCHED_RUNNING;
			if (n > 0 && n <= MAX_NEST)
				ring_set(ns, now, ACT_NESTED, ns->waits[(n - 1) & (MAX_NEST - 1)].lock);
			else
				ring_set(ns, now, ACT_RUNNING, 0);
			if (ns->subject) {
				note_comm(ns, next);
				part_update(ns, now);
			}
		}
	}
	leave();
	return 0;
}

SEC("tp_btf/sched_process_fork")
int BPF_PROG(on_sched_process_fork, struct task_struct *parent, struct task_struct *child)
{
	struct task_state *ps;
	__s32 pid = child->pid, ppid = parent->pid;
	__u8 one = 1;
	bool adopt;

	if (!enter(SEEN_FORK))
		return 0;
	adopt = adopt_children_of && ppid == adopt_children_of;
	if (!adopt && !every_task) {
		ps = bpf_task_storage_get(&tasks, parent, 0, 0);
		adopt = (ps && ps->epoch == epoch && ps->subject) ||
			bpf_map_lookup_elem(&subject, &ppid);
	}
	if (adopt && !every_task) {
		if (bpf_map_update_elem(&subject, &pid, &one, BPF_ANY))
			drop(DROP_SUBJECT_FULL);
	}
	leave();
	return 0;
}

static __always_inline void ipi_sent(__u64 callsite, __u64 callback, __u64 targets)
{
	struct task_struct *cur = bpf_get_current_task_btf();
	struct ipi_key k = {.callsite = callsite, .callback = callback};
	struct task_state *ts;
	__u64 now = bpf_ktime_get_ns();
	k.sender = in_interrupt() ? 0 : cur->pid;
	add_u64(&ipis, &k, targets, DROP_IPIS_FULL);
	if (!k.sender || !callback)
		return;
	/* Waking the next waiter queues a cross-CPU call: that is the release, not work the
	 * holder made other CPUs do. */
	if (callsite >= wakeup_site_start && callsite < wakeup_site_end)
		return;
	ts = state_of(cur, now, true);
	if (!ts)
		return;
	note_comm(ts, cur);
	ts->ipi_ts[ts->ipi_head % IPI_RING] = now;
	ts->ipi_head = (ts->ipi_head + 1) % IPI_RING;
}

SEC("tp_btf/ipi_send_cpu")
int BPF_PROG(on_ipi_send_cpu, unsigned int cpu, unsigned long callsite, void *callback)
{
	if (!enter(SEEN_IPI_CPU))
		return 0;
	ipi_sent(callsite, (__u64)callback, 1);
	leave();
	return 0;
}

static __always_inline __u64 popcount(__u64 x)
{
	x = x - ((x >> 1) & 0x5555555555555555ULL);
	x = (x & 0x3333333333333333ULL) + ((x >> 2) & 0x3333333333333333ULL);
	x = (x + (x >> 4)) & 0x0f0f0f0f0f0f0f0fULL;
	return (x * 0x0101010101010101ULL) >> 56;
}

SEC("tp_btf/ipi_send_cpumask")
int BPF_PROG(on_ipi_send_cpumask, struct cpumask *mask, unsigned long callsite, void *callback)
{
	__u64 bits = 0;
	if (!enter(SEEN_IPI_MASK))
		return 0;
	/* The first 64 CPUs' bits: a larger host's IPIs beyond them are not counted. */
	bpf_probe_read_kernel(&bits, sizeof(bits), &mask->bits[0]);
	ipi_sent(callsite, (__u64)callback, popcount(bits));
	leave();
	return 0;
}
