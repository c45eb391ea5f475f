// A plain-C VMM that times what vmscale's memslot scenario times, written against
// <linux/kvm.h> alone, so vmscale's numbers can be checked against an independent program
// on the same host (bench/fidelity).
//
//   memslot-repro --vcpus N --guest halt|spin --modes direct|pause|all
//                 [--repeat R] [--warmup W] [--pin CPU]
//
// Modes, each timed with CLOCK_MONOTONIC on the measuring thread:
//   direct      KVM_SET_USER_MEMORY_REGION delete + add of a 2 MiB slot at GPA 4 GiB while
//               the vCPUs run.
//   pause-vmm   kick every vCPU (immediate_exit + a signal), wait until all are out,
//               the same update, broadcast the resume and stop the clock without waiting,
//               as QEMU's resume_all_vcpus does.
//   pause-wait  the same, but the clock stops once every vCPU thread has left the pause.
// The two pause modes alternate sample by sample in one VM, so drift on a busy host hits
// both alike. Prints one JSON line per mode: p50 and p99 in microseconds.
//
// Guests: `halt` is CPL0 HLT with interrupts off over an in-kernel irqchip, so a halted
// vCPU sleeps in the kernel until kicked. `spin` is a 64-bit CPL3 loop counting iterations:
// on a PVM host, real-mode and ring-0 code are emulated an instruction at a time, so only
// user-mode long-mode code really runs.
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/kvm.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#define MAIN_BYTES (2ul << 20)
#define SLOT_BYTES (2ul << 20)
#define SLOT_GPA (4ul << 30)
#define PML4 0x1000
#define PDPT 0x2000
#define PD 0x3000
#define GDT 0x4000
#define CODE 0x5000
// One 64-byte line per vCPU for its loop counter, so vCPUs never share a line.
#define COUNTERS 0x10000
#define MAX_VCPUS 64

static void die(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "memslot-repro: ");
    vfprintf(stderr, fmt, ap);
    if (errno)
        fprintf(stderr, ": %s", strerror(errno));
    fputc('\n', stderr);
    va_end(ap);
    exit(1);
}

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

struct vcpu {
    int fd;
    struct kvm_run *run;
    pthread_t thread;
    int index;
};

static int kvm_fd, vm_fd, nvcpus, spin;
static uint8_t *guest;
static void *slot_mem;
static struct vcpu vcpus[MAX_VCPUS];

// The pause protocol: the controller and vCPU threads meet under one mutex. vCPU threads
// wait on resume_cond; the controller waits on ctl_cond for the count it needs.
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t resume_cond = PTHREAD_COND_INITIALIZER;
static pthread_cond_t ctl_cond = PTHREAD_COND_INITIALIZER;
static int pause_requested, stopping, paused, started;

static void on_kick(int sig) {
    (void)sig; // delivery alone makes KVM_RUN return EINTR
}

static void set_slot(int present) {
    struct kvm_userspace_memory_region r = {
        .slot = 1,
        .guest_phys_addr = SLOT_GPA,
        .memory_size = present ? SLOT_BYTES : 0,
        .userspace_addr = (uint64_t)slot_mem,
    };
    if (ioctl(vm_fd, KVM_SET_USER_MEMORY_REGION, &r) < 0)
        die("KVM_SET_USER_MEMORY_REGION (%s)", present ? "add" : "delete");
}

static void *vcpu_main(void *arg) {
    struct vcpu *v = arg;
    int first = 1;
    for (;;) {
        pthread_mutex_lock(&lock);
        if (pause_requested && !stopping) {
            paused++;
            pthread_cond_broadcast(&ctl_cond);
            while (pause_requested && !stopping)
                pthread_cond_wait(&resume_cond, &lock);
            paused--;
            if (paused == 0)
                pthread_cond_broadcast(&ctl_cond);
        }
        if (stopping) {
            pthread_mutex_unlock(&lock);
            return NULL;
        }
        // Cleared under the lock: the controller sets it under the same lock, so a kick
        // that lands between here and KVM_RUN is not lost.
        v->run->immediate_exit = 0;
        if (first) {
            first = 0;
            started++;
            pthread_cond_broadcast(&ctl_cond);
        }
        pthread_mutex_unlock(&lock);
        if (ioctl(v->fd, KVM_RUN, 0) < 0) {
            if (errno == EINTR || errno == EAGAIN)
                continue;
            die("vCPU %d: KVM_RUN", v->index);
        }
        if (v->run->exit_reason != KVM_EXIT_INTR) {
            errno = 0;
            die("vCPU %d: unexpected exit %u", v->index, v->run->exit_reason);
        }
    }
}

static void wait_ctl(int (*done)(void)) {
    while (!done())
        pthread_cond_wait(&ctl_cond, &lock);
}
static int all_paused(void) { return paused == nvcpus; }
static int none_paused(void) { return paused == 0; }
static int all_started(void) { return started == nvcpus; }

// Called with the lock held, as QEMU's pause_all_vcpus holds its global lock while it
// kicks and waits.
static void pause_all(void) {
    pause_requested = 1;
    for (int i = 0; i < nvcpus; i++) {
        vcpus[i].run->immediate_exit = 1;
        pthread_kill(vcpus[i].thread, SIGUSR1);
    }
    wait_ctl(all_paused);
}

static uint64_t counter(int i) {
    return __atomic_load_n((uint64_t *)(guest + COUNTERS + 64 * i), __ATOMIC_ACQUIRE);
}

// Untimed, before each sample: every spinning vCPU has run guest code since the previous
// sample, or a kick would find it still on its way in and cost less than a real one.
static void wait_every_vcpu_ran(void) {
    if (!spin)
        return;
    uint64_t before[MAX_VCPUS];
    for (int i = 0; i < nvcpus; i++)
        before[i] = counter(i);
    uint64_t deadline = now_ns() + 5000000000u;
    for (int i = 0; i < nvcpus; i++)
        while (counter(i) == before[i] && now_ns() < deadline) {
            // Sleep rather than spin: the vCPUs need the CPUs this thread would hold.
            struct timespec ts = {0, 20000};
            nanosleep(&ts, NULL);
        }
}

enum mode { DIRECT, PAUSE_VMM, PAUSE_WAIT };

// Where one pause-all sample's time went, for comparison with vmscale's phases of the same
// names: kick+wait (until every vCPU is out), update, resume.
struct phases {
    uint64_t kick_wait, update, resume;
};

static uint64_t sample(enum mode m, struct phases *ph) {
    wait_every_vcpu_ran();
    uint64_t t0 = now_ns(), t1;
    if (m == DIRECT) {
        set_slot(0);
        set_slot(1);
        return now_ns() - t0;
    }
    pthread_mutex_lock(&lock);
    pause_all();
    pthread_mutex_unlock(&lock);
    uint64_t paused_at = now_ns();
    set_slot(0);
    set_slot(1);
    uint64_t updated_at = now_ns();
    pthread_mutex_lock(&lock);
    pause_requested = 0;
    pthread_cond_broadcast(&resume_cond);
    if (m == PAUSE_WAIT)
        wait_ctl(none_paused);
    pthread_mutex_unlock(&lock);
    t1 = now_ns();
    *ph = (struct phases){paused_at - t0, updated_at - paused_at, t1 - updated_at};
    if (m == PAUSE_VMM) {
        // Untimed: the next kick must find every vCPU back out of the pause.
        pthread_mutex_lock(&lock);
        wait_ctl(none_paused);
        pthread_mutex_unlock(&lock);
    }
    return t1 - t0;
}

static void setup_guest_memory(void) {
    guest = mmap(NULL, MAIN_BYTES, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    slot_mem = mmap(NULL, SLOT_BYTES, PROT_READ | PROT_WRITE,
                    MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (guest == MAP_FAILED || slot_mem == MAP_FAILED)
        die("mmap");
    // Identity map of the first 2 MiB, user-accessible so the CPL3 loop can write.
    *(uint64_t *)(guest + PML4) = PDPT | 7;
    *(uint64_t *)(guest + PDPT) = PD | 7;
    *(uint64_t *)(guest + PD) = 0 | 7 | 0x80;
    uint64_t gdt[6] = {
        0,
        0x00af9b000000ffffull, // 64-bit code, DPL0
        0x00cf93000000ffffull, // data, DPL0
        0x00affb000000ffffull, // 64-bit code, DPL3
        0x00cff3000000ffffull, // data, DPL3
        0x00008b0000000067ull, // busy 64-bit TSS at 0 (lower half; upper half zero)
    };
    memcpy(guest + GDT, gdt, sizeof gdt);
    static const uint8_t spin_code[] = {0x48, 0xff, 0x07, 0xeb, 0xfb}; // inc qword [rdi]; jmp
    static const uint8_t halt_code[] = {0xf4, 0xeb, 0xfd};             // hlt; jmp
    if (spin)
        memcpy(guest + CODE, spin_code, sizeof spin_code);
    else
        memcpy(guest + CODE, halt_code, sizeof halt_code);
}

static struct kvm_segment seg(uint16_t sel, int code, int dpl) {
    struct kvm_segment s = {
        .base = 0, .limit = 0xffffffff, .selector = sel, .type = code ? 0xb : 0x3,
        .present = 1, .dpl = dpl, .db = !code, .s = 1, .l = code, .g = 1,
    };
    return s;
}

static void setup_vcpu(int i, struct kvm_cpuid2 *cpuid, int run_size) {
    struct vcpu *v = &vcpus[i];
    v->index = i;
    v->fd = ioctl(vm_fd, KVM_CREATE_VCPU, i);
    if (v->fd < 0)
        die("KVM_CREATE_VCPU %d", i);
    v->run = mmap(NULL, run_size, PROT_READ | PROT_WRITE, MAP_SHARED, v->fd, 0);
    if (v->run == MAP_FAILED)
        die("mmap kvm_run");
    // Long mode needs the LM bit, so the guest sees what the host supports.
    if (ioctl(v->fd, KVM_SET_CPUID2, cpuid) < 0)
        die("KVM_SET_CPUID2");
    struct kvm_sregs sr;
    if (ioctl(v->fd, KVM_GET_SREGS, &sr) < 0)
        die("KVM_GET_SREGS");
    int dpl = spin ? 3 : 0;
    struct kvm_segment code = seg(spin ? (3 << 3) | 3 : 1 << 3, 1, dpl);
    struct kvm_segment data = seg(spin ? (4 << 3) | 3 : 2 << 3, 0, dpl);
    sr.cs = code;
    sr.ds = sr.es = sr.fs = sr.gs = sr.ss = data;
    // VMX refuses to enter without a busy TSS in TR.
    sr.tr = (struct kvm_segment){.base = 0, .limit = 0x67, .selector = 5 << 3, .type = 0xb,
                                 .present = 1};
    sr.gdt.base = GDT;
    sr.gdt.limit = 6 * 8 - 1;
    sr.cr0 = 1 | 2 | 0x10 | 0x20 | (1u << 16) | (1u << 31); // PE MP ET NE WP PG
    sr.cr3 = PML4;
    sr.cr4 = 1 << 5;                   // PAE
    sr.efer = (1 << 8) | (1 << 10);    // LME LMA
    if (ioctl(v->fd, KVM_SET_SREGS, &sr) < 0)
        die("KVM_SET_SREGS");
    struct kvm_regs regs = {.rip = CODE, .rdi = COUNTERS + 64 * i, .rflags = 2};
    if (ioctl(v->fd, KVM_SET_REGS, &regs) < 0)
        die("KVM_SET_REGS");
}

static void pin_to(int cpu) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    if (sched_setaffinity(0, sizeof set, &set) < 0)
        die("pin to CPU %d", cpu);
}

static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

// Nearest rank, as vmscale's summaries use.
static double quantile_us(uint64_t *sorted, int n, double q) {
    int rank = (int)(q * n + 0.999999999);
    if (rank < 1)
        rank = 1;
    if (rank > n)
        rank = n;
    return sorted[rank - 1] / 1000.0;
}

static double p50_us(uint64_t *s, int n) {
    qsort(s, n, sizeof *s, cmp_u64);
    return quantile_us(s, n, 0.5);
}

// One JSON line; pause modes add each phase's own p50 (phases' p50s need not sum to the
// total's).
static void report(const char *mode, uint64_t *s, int n, struct phases *ph) {
    qsort(s, n, sizeof *s, cmp_u64);
    printf("{\"mode\":\"%s\",\"guest\":\"%s\",\"vcpus\":%d,\"samples\":%d,"
           "\"p50_us\":%.3f,\"p99_us\":%.3f",
           mode, spin ? "spin" : "halt", nvcpus, n, quantile_us(s, n, 0.5),
           quantile_us(s, n, 0.99));
    if (ph) {
        uint64_t *col = calloc(n, 8);
        for (int i = 0; i < n; i++)
            col[i] = ph[i].kick_wait;
        printf(",\"kick_wait_p50_us\":%.3f", p50_us(col, n));
        for (int i = 0; i < n; i++)
            col[i] = ph[i].update;
        printf(",\"update_p50_us\":%.3f", p50_us(col, n));
        for (int i = 0; i < n; i++)
            col[i] = ph[i].resume;
        printf(",\"resume_p50_us\":%.3f", p50_us(col, n));
        free(col);
    }
    printf("}\n");
}

int main(int argc, char **argv) {
    int repeat = 200, warmup = 10, pin = -1;
    const char *modes = "all";
    nvcpus = 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
        if (!val) {
            errno = 0;
            die("%s needs a value", a);
        }
        if (!strcmp(a, "--vcpus"))
            nvcpus = atoi(val);
        else if (!strcmp(a, "--repeat"))
            repeat = atoi(val);
        else if (!strcmp(a, "--warmup"))
            warmup = atoi(val);
        else if (!strcmp(a, "--pin"))
            pin = atoi(val);
        else if (!strcmp(a, "--modes"))
            modes = val;
        else if (!strcmp(a, "--guest")) {
            if (strcmp(val, "halt") && strcmp(val, "spin")) {
                errno = 0;
                die("--guest is halt or spin");
            }
            spin = !strcmp(val, "spin");
        } else {
            errno = 0;
            die("unknown option %s", a);
        }
        i++;
    }
    int do_direct = !strcmp(modes, "all") || !strcmp(modes, "direct");
    int do_pause = !strcmp(modes, "all") || !strcmp(modes, "pause");
    if (nvcpus < 1 || nvcpus > MAX_VCPUS || repeat < 1 || warmup < 0 ||
        (!do_direct && !do_pause)) {
        errno = 0;
        die("bad arguments (vcpus 1..%d, repeat >= 1, modes direct|pause|all)", MAX_VCPUS);
    }

    struct sigaction sa = {.sa_handler = on_kick};
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGUSR1, &sa, NULL) < 0)
        die("sigaction");

    kvm_fd = open("/dev/kvm", O_RDWR | O_CLOEXEC);
    if (kvm_fd < 0)
        die("/dev/kvm");
    vm_fd = ioctl(kvm_fd, KVM_CREATE_VM, 0);
    if (vm_fd < 0)
        die("KVM_CREATE_VM");
    // Without it HLT exits to userspace on every kick instead of sleeping in the kernel.
    if (!spin && ioctl(vm_fd, KVM_CREATE_IRQCHIP, 0) < 0)
        die("KVM_CREATE_IRQCHIP");
    setup_guest_memory();
    struct kvm_userspace_memory_region main_region = {
        .slot = 0, .guest_phys_addr = 0, .memory_size = MAIN_BYTES,
        .userspace_addr = (uint64_t)guest,
    };
    if (ioctl(vm_fd, KVM_SET_USER_MEMORY_REGION, &main_region) < 0)
        die("KVM_SET_USER_MEMORY_REGION (guest memory)");
    set_slot(1);

    int nent = 256;
    struct kvm_cpuid2 *cpuid = calloc(1, sizeof *cpuid + nent * sizeof(struct kvm_cpuid_entry2));
    cpuid->nent = nent;
    if (ioctl(kvm_fd, KVM_GET_SUPPORTED_CPUID, cpuid) < 0)
        die("KVM_GET_SUPPORTED_CPUID");
    int run_size = ioctl(kvm_fd, KVM_GET_VCPU_MMAP_SIZE, 0);
    if (run_size < 0)
        die("KVM_GET_VCPU_MMAP_SIZE");
    for (int i = 0; i < nvcpus; i++)
        setup_vcpu(i, cpuid, run_size);
    // The vCPU threads start before the measuring thread is pinned, so they inherit the
    // whole CPU set and the scheduler places them, as vmscale's --pin MAIN leaves them.
    for (int i = 0; i < nvcpus; i++)
        if ((errno = pthread_create(&vcpus[i].thread, NULL, vcpu_main, &vcpus[i])))
            die("pthread_create");
    pthread_mutex_lock(&lock);
    wait_ctl(all_started);
    pthread_mutex_unlock(&lock);
    if (pin >= 0)
        pin_to(pin);

    uint64_t *direct = calloc(repeat, 8), *vmm = calloc(repeat, 8), *waited = calloc(repeat, 8);
    struct phases scratch, *vmm_ph = calloc(repeat, sizeof *vmm_ph),
                           *waited_ph = calloc(repeat, sizeof *waited_ph);
    if (do_direct) {
        for (int i = 0; i < warmup; i++)
            sample(DIRECT, &scratch);
        for (int i = 0; i < repeat; i++)
            direct[i] = sample(DIRECT, &scratch);
        report("direct", direct, repeat, NULL);
    }
    if (do_pause) {
        for (int i = 0; i < warmup; i++) {
            sample(PAUSE_VMM, &scratch);
            sample(PAUSE_WAIT, &scratch);
        }
        for (int i = 0; i < repeat; i++) {
            vmm[i] = sample(PAUSE_VMM, &vmm_ph[i]);
            waited[i] = sample(PAUSE_WAIT, &waited_ph[i]);
        }
        report("pause-vmm", vmm, repeat, vmm_ph);
        report("pause-wait", waited, repeat, waited_ph);
    }
    fflush(stdout);

    pthread_mutex_lock(&lock);
    stopping = 1;
    for (int i = 0; i < nvcpus; i++)
        vcpus[i].run->immediate_exit = 1;
    pthread_cond_broadcast(&resume_cond);
    for (int i = 0; i < nvcpus; i++)
        pthread_kill(vcpus[i].thread, SIGUSR1);
    pthread_mutex_unlock(&lock);
    for (int i = 0; i < nvcpus; i++)
        pthread_join(vcpus[i].thread, NULL);
    return 0;
}
