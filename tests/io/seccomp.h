/* Seccomp filters that make the kernel refuse what the io tests need
 * refused: io_uring_setup (as container runtimes and
 * kernel.io_uring_disabled do) and O_DIRECT opens (as some filesystems do). */
#ifndef WSP_TESTS_IO_SECCOMP_H
#define WSP_TESTS_IO_SECCOMP_H

#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

static inline int t_seccomp_install(struct sock_filter *f, unsigned short n)
{
	struct sock_fprog prog = { .len = n, .filter = f };

	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
		return -errno;
	if (syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &prog) < 0)
		return -errno;
	return 0;
}

/* io_uring_setup fails with errno `e` (EPERM: seccomp, io_uring_disabled;
 * ENOSYS: a kernel without io_uring); everything else is allowed. */
static inline int t_seccomp_refuse_uring_with(int e)
{
	struct sock_filter f[] = {
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_io_uring_setup, 0, 1),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | ((unsigned)e & SECCOMP_RET_DATA)),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
	};
	return t_seccomp_install(f, sizeof(f) / sizeof(f[0]));
}

/* io_uring_setup fails with EPERM; everything else is allowed. */
static inline int t_seccomp_refuse_uring(void)
{
	return t_seccomp_refuse_uring_with(EPERM);
}

/* openat(..., flags with O_DIRECT) fails with EINVAL. */
static inline int t_seccomp_refuse_direct(void)
{
	struct sock_filter f[] = {
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_openat, 0, 3),
		/* low 32 bits of the flags (little-endian hosts only, as the project) */
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, args[2])),
		BPF_JUMP(BPF_JMP | BPF_JSET | BPF_K, O_DIRECT, 0, 1),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (EINVAL & SECCOMP_RET_DATA)),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
	};
	return t_seccomp_install(f, sizeof(f) / sizeof(f[0]));
}

#endif
