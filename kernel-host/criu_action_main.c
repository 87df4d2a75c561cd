/* glovebox-criu-action: the action script the kernel-host gives criu for
 * a restore whose dump left the sandbox's network namespace out
 * (checkpoint_netns.c). criu runs it at each step of the restore, the step
 * in CRTOOLS_SCRIPT_ACTION; at setup-namespaces, before any socket comes
 * back, it brings lo up in the new network namespace of the restored init
 * (CRTOOLS_INIT_PID). Every other step is nothing to it. libc only. */
#include "autoconf.h"

#include "kernel-host/loopback.h"

#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int main(void)
{
        const char *action = getenv("CRTOOLS_SCRIPT_ACTION");
        const char *pid = getenv("CRTOOLS_INIT_PID");
        char path[64];
        int fd;

        if (!action || strcmp(action, "setup-namespaces") != 0)
                return 0;
        if (!pid || !*pid || strlen(pid) > 10 || strspn(pid, "0123456789") != strlen(pid)) {
                fprintf(stderr, "glovebox-criu-action: no init pid for setup-namespaces\n");
                return 1;
        }
        snprintf(path, sizeof(path), "/proc/%s/ns/net", pid);
        fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0 || setns(fd, CLONE_NEWNET) < 0) {
                perror("glovebox-criu-action: the restored network namespace");
                return 1;
        }
        close(fd);
        if (loopback_up() < 0) {
                perror("glovebox-criu-action: lo up");
                return 1;
        }
        return 0;
}
