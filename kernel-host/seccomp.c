#include "autoconf.h"

#include "kernel-host/seccomp.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/audit.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <seccomp.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

/* The highest system call number this policy was reviewed against:
 * futex_requeue (456, Linux 6.7), also the newest that libseccomp 2.5.4
 * knows. The policy allows by default, so a call added to Linux later would
 * pass unreviewed (statmount, listmount, open_tree_attr and the like, which
 * libseccomp cannot even name): every number above this one fails with
 * ENOSYS, as on a kernel without the call, which programs handle. Raise it
 * only after reviewing the calls in between. */
#define SECCOMP_HIGHEST_NR 456
/* x32 system calls have this bit set; libseccomp's filter kills them. */
#define X32_SYSCALL_BIT 0x40000000u

/* Runs before libseccomp's filter (it ends by falling through to it): x86-64
 * calls above SECCOMP_HIGHEST_NR fail with ENOSYS. Anything else goes on to
 * the filter, which also rejects other architectures. */
static const struct sock_filter ceiling[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_X86_64, 0, 4),
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JGE | BPF_K, X32_SYSCALL_BIT, 2, 0),
        BPF_JUMP(BPF_JMP | BPF_JGT | BPF_K, SECCOMP_HIGHEST_NR, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | ENOSYS),
};

/* Calls that are denied with EPERM, whatever their arguments. The policy
 * starts from Docker's default profile idea: allow by default, deny what
 * reaches past the sandbox or into the kernel's attack surface. */
static const char *const denied[] = {
        /* Filesystem views: the sandbox's mounts are final. */
        "mount", "umount2", "pivot_root", "chroot", "mount_setattr", "move_mount", "open_tree",
        "fsopen", "fsconfig", "fsmount", "fspick",
        /* New namespaces or joining others would undo the sandbox. */
        "unshare", "setns",
        /* Inspecting or writing other processes' memory. */
        "ptrace", "process_vm_readv", "process_vm_writev", "kcmp", "pidfd_getfd",
        /* The kernel keyring is not namespaced. */
        "keyctl", "add_key", "request_key",
        /* Large kernel attack surfaces with no use in a notebook. */
        "bpf", "perf_event_open", "userfaultfd", "io_uring_setup", "io_uring_enter",
        "io_uring_register",
        /* Modules, kexec, reboot, swap, clocks, accounting: host-wide. */
        "init_module", "finit_module", "delete_module", "kexec_load", "kexec_file_load", "reboot",
        "swapon", "swapoff", "settimeofday", "clock_settime", "clock_adjtime", "adjtimex",
        "acct", "syslog", "quotactl", "lookup_dcookie", "iopl", "ioperm",
        /* File handles bypass path-based confinement (the "shocker" escape). */
        "open_by_handle_at", "name_to_handle_at",
        /* Only useful to change how signals or binaries are handled host-wide. */
        "personality", "vhangup", "nfsservctl", "uselib",
        /* Page cache residency of any file it can open, /usr included, which
         * every sandbox and the host share: a side channel on neighbours. */
        "cachestat",
};

static int build(scmp_filter_ctx *out)
{
        static const unsigned long ns_flags[] = {CLONE_NEWNS,  CLONE_NEWUTS, CLONE_NEWIPC,
                                                 CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET,
                                                 CLONE_NEWCGROUP};
        scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ALLOW);
        int rc = 0;

        *out = NULL;
        if (!ctx)
                return -ENOMEM;
        /* x86-64 only: a 32-bit or x32 entry point would be a second,
         * unfiltered view of the same calls, so such calls kill. */
        rc = seccomp_attr_set(ctx, SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_KILL_PROCESS);
        for (size_t i = 0; rc == 0 && i < sizeof(denied) / sizeof(denied[0]); i++) {
                int nr = seccomp_syscall_resolve_name(denied[i]);

                if (nr == __NR_SCMP_ERROR)
                        continue;
                rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), nr, 0);
        }
        /* clone with any namespace flag would make new namespaces. */
        for (size_t i = 0; rc == 0 && i < sizeof(ns_flags) / sizeof(ns_flags[0]); i++)
                rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(clone), 1,
                                      SCMP_A0(SCMP_CMP_MASKED_EQ, ns_flags[i], ns_flags[i]));
        /* clone3 passes its flags in memory, where seccomp cannot look: say
         * it does not exist, and glibc falls back to clone. */
        if (rc == 0)
                rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(ENOSYS), SCMP_SYS(clone3), 0);
        /* TIOCSTI pushes characters into a terminal's input: denied. */
        if (rc == 0)
                rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(ioctl), 1,
                                      SCMP_A1(SCMP_CMP_MASKED_EQ, 0xffffffffu, TIOCSTI));
        /* Packet sockets and raw IP sockets see or forge traffic below
         * TCP/UDP. (Netlink sockets are SOCK_RAW too, and getifaddrs needs
         * them, so raw is denied per family.) */
        if (rc == 0)
                rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(socket), 1,
                                      SCMP_A0(SCMP_CMP_EQ, AF_PACKET));
        /* vsock is not network-namespaced: on a virtual machine it reaches
         * the hypervisor and its other guests, past the empty network. */
        if (rc == 0)
                rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(socket), 1,
                                      SCMP_A0(SCMP_CMP_EQ, AF_VSOCK));
        for (int family = 0; rc == 0 && family < 2; family++)
                rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(socket), 2,
                                      SCMP_A0(SCMP_CMP_EQ, family ? AF_INET6 : AF_INET),
                                      SCMP_A1(SCMP_CMP_MASKED_EQ, 0xf, SOCK_RAW));
        if (rc < 0) {
                seccomp_release(ctx);
                return rc;
        }
        *out = ctx;
        return 0;
}

#define NCEILING (sizeof(ceiling) / sizeof(ceiling[0]))

int seccomp_policy_build(struct sock_fprog *prog)
{
        scmp_filter_ctx ctx;
        struct stat st;
        void *copy = NULL;
        int fd = -1;
        int rc = build(&ctx);

        if (rc < 0)
                return rc;
        /* libseccomp writes BPF to a descriptor; read it back into memory. */
        fd = memfd_create("seccomp-bpf", MFD_CLOEXEC);
        if (fd < 0) {
                rc = -errno;
                goto out;
        }
        rc = seccomp_export_bpf(ctx, fd);
        if (rc < 0)
                goto out;
        if (fstat(fd, &st) < 0 || st.st_size <= 0 || st.st_size % sizeof(struct sock_filter)) {
                rc = -EINVAL;
                goto out;
        }
        if ((size_t)st.st_size / sizeof(struct sock_filter) + NCEILING > BPF_MAXINSNS) {
                rc = -E2BIG;
                goto out;
        }
        /* The ceiling, then libseccomp's program: its jumps are relative,
         * so it runs unchanged after ours. */
        copy = malloc(sizeof(ceiling) + (size_t)st.st_size);
        if (!copy ||
            pread(fd, (char *)copy + sizeof(ceiling), (size_t)st.st_size, 0) != st.st_size) {
                rc = copy ? -EIO : -ENOMEM;
                free(copy);
                goto out;
        }
        memcpy(copy, ceiling, sizeof(ceiling));
        prog->filter = copy;
        prog->len = (unsigned short)(NCEILING + (size_t)st.st_size / sizeof(struct sock_filter));
        rc = 0;
out:
        if (fd >= 0)
                close(fd);
        seccomp_release(ctx);
        return rc;
}

int seccomp_policy_export_pfc(int fd)
{
        char text[512];
        scmp_filter_ctx ctx;
        int n;
        int rc = build(&ctx);

        if (rc < 0)
                return rc;
        /* The ceiling in the same notation, from the same constants. */
        n = snprintf(text, sizeof(text),
                     "#\n# glovebox: before the filter below\n#\n"
                     "if ($arch == %u)\n"
                     "  if ($syscall < %u)\n"
                     "    if ($syscall > %d)\n"
                     "      action ERRNO(%d);\n",
                     (unsigned)AUDIT_ARCH_X86_64, X32_SYSCALL_BIT, SECCOMP_HIGHEST_NR, ENOSYS);
        if (n < 0 || write(fd, text, (size_t)n) != n) {
                seccomp_release(ctx);
                return -EIO;
        }
        rc = seccomp_export_pfc(ctx, fd);
        seccomp_release(ctx);
        return rc;
}
