/* The seccomp filter every kernel runs under, built once with libseccomp
 * and kept as a raw BPF program, so that loading it in the child between
 * clone and execve is one system call. */
#ifndef GLOVEBOX_SECCOMP_H
#define GLOVEBOX_SECCOMP_H

#include <linux/filter.h>

/* Builds the filter into *prog (the caller keeps it for the process's
 * lifetime): a small ceiling for system calls newer than the policy, then
 * libseccomp's program. 0 or -errno. */
int seccomp_policy_build(struct sock_fprog *prog);
/* Writes the filter in libseccomp's pseudo-filter-code form to fd (the
 * ceiling first, in the same notation), for the golden test and for people
 * reading it. */
int seccomp_policy_export_pfc(int fd);

#endif
