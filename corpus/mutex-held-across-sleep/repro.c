/* A sleeping lock held across a sleep: pipe->mutex held by a writer that sleeps in a page
 * fault with the mutex taken.
 *
 * The holder write()s to a pipe from a page registered with userfaultfd and never
 * populated: anon_pipe_write takes pipe->mutex, faults in copy_page_from_iter and sleeps
 * in handle_userfault, mutex held. Two other writers of the same pipe queue on the mutex
 * (they are seen in state D before the clock starts). The main thread resolves the fault
 * HOLD_MS later, everyone completes, and the round repeats. No thread sleeps to order
 * anything: the fault is read from the userfaultfd, the waiters' state from /proc.
 *
 * Threads: main (fault handler), one holder, two waiters. Needs root (userfaultfd of a
 * kernel-mode fault). */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define REPRO "mutex-held-across-sleep"
#include "../common.h"

#define WAITERS 2
#define ROUNDS 6
#define HOLD_MS 100
#define MSG 64

static int pipe_w;
static void *page;
static pthread_barrier_t round_start, waiters_go, round_end;
static pid_t waiter_tids[WAITERS];

static void write_all(const void *buf)
{
	if (write(pipe_w, buf, MSG) != MSG)
		die("write to the pipe");
}

static void *holder(void *arg)
{
	(void)arg;
	pthread_setname_np(pthread_self(), "repro-holder");
	for (int round = 0; round < ROUNDS; round++) {
		pthread_barrier_wait(&round_start);
		/* Faults on the unpopulated page with pipe->mutex held. */
		write_all(page);
		pthread_barrier_wait(&round_end);
	}
	return NULL;
}

static void *waiter(void *arg)
{
	int index = (int)(uintptr_t)arg;
	char name[16], buf[MSG];
	snprintf(name, sizeof name, "repro-waiter%d", index);
	pthread_setname_np(pthread_self(), name);
	memset(buf, 'w', sizeof buf);
	waiter_tids[index] = (pid_t)syscall(SYS_gettid);
	for (int round = 0; round < ROUNDS; round++) {
		pthread_barrier_wait(&round_start);
		pthread_barrier_wait(&waiters_go);
		write_all(buf);
		pthread_barrier_wait(&round_end);
	}
	return NULL;
}

/* The state letter of one of our threads in /proc (D: uninterruptible, as on a mutex). */
static char task_state(pid_t tid)
{
	char path[64], stat[512];
	snprintf(path, sizeof path, "/proc/self/task/%d/stat", tid);
	int fd = open(path, O_RDONLY);
	if (fd < 0)
		die("open /proc/self/task/N/stat");
	ssize_t n = read(fd, stat, sizeof stat - 1);
	close(fd);
	if (n <= 0)
		die("read /proc/self/task/N/stat");
	stat[n] = 0;
	char *paren = strrchr(stat, ')');
	return paren && paren[1] == ' ' ? paren[2] : '?';
}

static void sleep_ms(long ms)
{
	struct timespec ts = {ms / 1000, (ms % 1000) * 1000000};
	while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
		;
}

int main(void)
{
	long page_size = sysconf(_SC_PAGESIZE);
	int fds[2];
	if (pipe2(fds, O_CLOEXEC) != 0)
		die("pipe2");
	pipe_w = fds[1];
	int uffd = (int)syscall(SYS_userfaultfd, O_CLOEXEC);
	if (uffd < 0)
		die("userfaultfd");
	struct uffdio_api api = {.api = UFFD_API};
	if (ioctl(uffd, UFFDIO_API, &api) != 0)
		die("UFFDIO_API");
	char *source = malloc(page_size);
	memset(source, 'x', page_size);

	pthread_barrier_init(&round_start, NULL, WAITERS + 2);
	pthread_barrier_init(&waiters_go, NULL, WAITERS + 1);
	pthread_barrier_init(&round_end, NULL, WAITERS + 2);
	pthread_t threads[WAITERS + 1];
	if (pthread_create(&threads[0], NULL, holder, NULL) != 0)
		die("pthread_create");
	for (int i = 0; i < WAITERS; i++)
		if (pthread_create(&threads[i + 1], NULL, waiter, (void *)(uintptr_t)i) != 0)
			die("pthread_create");

	for (int round = 0; round < ROUNDS; round++) {
		page = mmap(NULL, page_size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (page == MAP_FAILED)
			die("mmap");
		struct uffdio_register reg = {
			.range = {.start = (uintptr_t)page, .len = page_size},
			.mode = UFFDIO_REGISTER_MODE_MISSING,
		};
		if (ioctl(uffd, UFFDIO_REGISTER, &reg) != 0)
			die("UFFDIO_REGISTER");
		pthread_barrier_wait(&round_start);

		/* The holder has faulted: it sleeps in handle_userfault with pipe->mutex held. */
		struct uffd_msg msg;
		if (read(uffd, &msg, sizeof msg) != sizeof msg || msg.event != UFFD_EVENT_PAGEFAULT)
			die("read the userfaultfd");
		pthread_barrier_wait(&waiters_go);
		/* Every waiter asleep on the mutex before the hold is timed (2 s at most). */
		for (int tries = 0;; tries++) {
			int queued = 0;
			for (int i = 0; i < WAITERS; i++)
				queued += task_state(waiter_tids[i]) == 'D';
			if (queued == WAITERS)
				break;
			if (tries == 2000) {
				fprintf(stderr, "mutex-held-across-sleep: waiters never blocked on the pipe mutex\n");
				return 1;
			}
			sleep_ms(1);
		}
		sleep_ms(HOLD_MS);
		struct uffdio_copy copy = {
			.dst = (uintptr_t)page, .src = (uintptr_t)source, .len = page_size,
		};
		if (ioctl(uffd, UFFDIO_COPY, &copy) != 0)
			die("UFFDIO_COPY");
		pthread_barrier_wait(&round_end);

		char drain[MSG * (WAITERS + 1)];
		if (read(fds[0], drain, sizeof drain) != sizeof drain)
			die("drain the pipe");
		munmap(page, page_size);
	}
	for (int i = 0; i < WAITERS + 1; i++)
		pthread_join(threads[i], NULL);
	return 0;
}
