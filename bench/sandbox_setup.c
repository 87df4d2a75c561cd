/* Times sandbox_create (the request to a ready init), N times, and
 * kills and destroys each sandbox between: the kernel-host's own cost of a
 * sandbox, without a kernel. Root only (each sandbox maps its own ids).
 * Built and run by bench/sandbox_setup. */
#include "autoconf.h"
#include "kernel-host/sandbox.h"
#include "kernel-host/cgroup.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

/* CPU seconds of this process and the children it reaped (each sandbox's
 * init and helpers). */
static double cpu_seconds(void)
{
        struct rusage self, kids;

        getrusage(RUSAGE_SELF, &self);
        getrusage(RUSAGE_CHILDREN, &kids);
        return (double)(self.ru_utime.tv_sec + self.ru_stime.tv_sec + kids.ru_utime.tv_sec +
                        kids.ru_stime.tv_sec) +
               (double)(self.ru_utime.tv_usec + self.ru_stime.tv_usec + kids.ru_utime.tv_usec +
                        kids.ru_stime.tv_usec) /
                   1e6;
}

static int cmp(const void *a, const void *b)
{
        double x = *(const double *)a, y = *(const double *)b;
        return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
        int n = argc > 1 ? (int)strtol(argv[1], NULL, 10) : 50;
        const char *tpl = argc > 2 ? argv[2] : NULL;
        double *t = calloc((size_t)n, sizeof(double));
        char dir[] = "/tmp/sbbench.XXXXXX";
        struct hostmsg_limits lim = {0};
        char *ro[] = {NULL};
        double cpu;

        lim.memory_mb = 1024;
        lim.pids = 256;
        lim.cpu_millis = 1000;
        lim.disk_mb = 1024;
        cgroup_init();
        if (n < 1 || sandbox_init() < 0 || !mkdtemp(dir))
                return 1;
        chmod(dir, 0755);
        cpu = cpu_seconds();
        for (int i = 0; i < n; i++) {
                struct sandbox_ids ids = {100000 + 2 * 500, 100001 + 2 * 500, 100000 + 2 * 500,
                                          100001 + 2 * 500, true};
                struct sandbox sb;
                struct hostmsg_failed fail;
                struct timespec a, b;
                struct overlay_fds given;
                char name[32];
                int st;

                overlay_fds_init(&given);
                snprintf(name, sizeof(name), "bench%d-%d", getpid(), i);
                clock_gettime(CLOCK_MONOTONIC, &a);
                if (sandbox_create(dir, name, &lim, ro, tpl, NULL, &given, &ids, &sb, &fail) < 0) {
                        fprintf(stderr, "failed: %s\n", fail.message);
                        return 1;
                }
                clock_gettime(CLOCK_MONOTONIC, &b);
                t[i] = (b.tv_sec - a.tv_sec) * 1e3 + (b.tv_nsec - a.tv_nsec) / 1e6;
                sandbox_kill(&sb);
                waitpid(sb.init_pid, &st, 0);
                sandbox_destroy(&sb);
        }
        cpu = cpu_seconds() - cpu;
        qsort(t, (size_t)n, sizeof(double), cmp);
        printf("sandbox_create: median %.2f ms, p10 %.2f, p90 %.2f (n=%d)\n", t[n / 2], t[n / 10],
               t[n * 9 / 10], n);
        printf(
            "CPU per sandbox, made and removed (this process and its reaped children): %.2f ms\n",
            cpu / n * 1e3);
        rmdir(dir);
        cgroup_shutdown();
        return 0;
}
