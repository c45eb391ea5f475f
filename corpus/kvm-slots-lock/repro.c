/* kvm->slots_lock, held across a sleep: two threads add and delete memslots of one VM in
 * a loop, each its own slot over its own memory, for about a second. Every
 * KVM_SET_USER_MEMORY_REGION takes the VM's slots_lock (a mutex) in
 * kvm_vm_ioctl_set_memory_region and, with it held, publishes the new memslots and waits
 * for the VM's SRCU readers to leave the old ones (synchronize_srcu_expedited in
 * kvm_swap_active_memslots): the holder sleeps until an SRCU grace period ends, and the
 * other thread sleeps on the mutex behind it. The VM has no vCPUs: nothing else runs.
 * The main thread only starts and joins them. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/kvm.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#define REPRO "kvm-slots-lock"
#include "../common.h"

#define THREADS 2
#define REGION (64 * 1024)
#define SECONDS 1

static int vm;
static pthread_barrier_t start;

static void set_slot(uint32_t slot, uint64_t guest_address, uint64_t size, void *memory)
{
	struct kvm_userspace_memory_region region = {
		.slot = slot,
		.guest_phys_addr = guest_address,
		.memory_size = size,
		.userspace_addr = (uintptr_t)memory,
	};
	if (ioctl(vm, KVM_SET_USER_MEMORY_REGION, &region) != 0)
		die("KVM_SET_USER_MEMORY_REGION");
}

static void *updater(void *arg)
{
	int index = (int)(uintptr_t)arg;
	char name[16];
	snprintf(name, sizeof name, "repro-memslot%d", index);
	pthread_setname_np(pthread_self(), name);
	void *memory = mmap(NULL, REGION, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (memory == MAP_FAILED)
		die("mmap");
	/* Each thread its own slot and guest range: they share nothing but the VM. */
	uint64_t guest_address = (uint64_t)(index + 1) << 30;
	pthread_barrier_wait(&start);
	uint64_t end = deadline(SECONDS);
	while (now_ns() < end) {
		set_slot(index, guest_address, REGION, memory);
		set_slot(index, guest_address, 0, memory);
	}
	return NULL;
}

int main(void)
{
	run_ahead_of_other_work();
	int kvm = open("/dev/kvm", O_RDWR | O_CLOEXEC);
	if (kvm < 0)
		die("open /dev/kvm");
	vm = ioctl(kvm, KVM_CREATE_VM, 0);
	if (vm < 0)
		die("KVM_CREATE_VM");
	pthread_barrier_init(&start, NULL, THREADS);
	pthread_t threads[THREADS];
	for (int i = 0; i < THREADS; i++)
		if (pthread_create(&threads[i], NULL, updater, (void *)(uintptr_t)i) != 0)
			die("pthread_create");
	for (int i = 0; i < THREADS; i++)
		pthread_join(threads[i], NULL);
	return 0;
}
