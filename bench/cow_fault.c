/* What one copy-on-write fault costs a forked process here, alone and
 * with a second thread of the process on another CPU, sleeping or
 * running. A zygote kernel's start is about 2,300 such faults; its
 * threads (libzmq's I/O thread and reaper, the loop's I/O thread) run
 * beside them. A fault in a process whose mm is live on another CPU
 * flushes that CPU's TLB entry with an interprocessor interrupt, which a
 * virtual machine pays for with exits on both sides.
 *
 * The parent writes N private anonymous pages (4 KiB, no huge pages) and
 * forks ROUNDS children; each child (on CPU 0) starts its second thread
 * (on CPU 1) or none, then writes one byte of each page and reports the
 * time per fault; or, alone, copies each page by MADV_POPULATE_WRITE as a
 * process forked ahead does. Prints the median of the rounds per kind, in
 * µs.
 * Needs two CPUs. Built and run by bench/cow_fault. */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define PAGES  4000
#define ROUNDS 9
#define PAGE   4096

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23 /* Linux 5.14 */
#endif

/* POPULATE: alone, the pages copied by MADV_POPULATE_WRITE, a call per
 * page, as a process forked ahead copies a start's pages
 * (kernel-host/zygote_pages.c; its runs average under two pages). */
enum sibling { NONE, SLEEPING, RUNNING, POPULATE };

static atomic_int ready, stop;

static void pin(int cpu)
{
        cpu_set_t set;

        CPU_ZERO(&set);
        CPU_SET(cpu, &set);
        sched_setaffinity(0, sizeof(set), &set);
}

static double now_us(void)
{
        struct timespec t;

        clock_gettime(CLOCK_MONOTONIC, &t);
        return (double)t.tv_sec * 1e6 + (double)t.tv_nsec / 1e3;
}

static void *sibling_main(void *arg)
{
        enum sibling kind = (enum sibling)(long)arg;

        pin(1);
        atomic_store(&ready, 1);
        while (!atomic_load(&stop)) {
                if (kind == SLEEPING)
                        usleep(1000);
        }
        return NULL;
}

/* In the child: the time per fault, written to fd as a double. */
static void child(char *pages, enum sibling kind, int fd)
{
        pthread_t t;
        double t0, per;

        pin(0);
        if (kind == SLEEPING || kind == RUNNING) {
                if (pthread_create(&t, NULL, sibling_main, (void *)(long)kind) != 0)
                        _exit(1);
                while (!atomic_load(&ready))
                        ;
        }
        usleep(2000);
        t0 = now_us();
        for (size_t i = 0; i < PAGES; i++) {
                if (kind == POPULATE && madvise(pages + i * PAGE, PAGE, MADV_POPULATE_WRITE) < 0)
                        _exit(1);
                if (kind != POPULATE)
                        pages[i * PAGE] = 2;
        }
        per = (now_us() - t0) / PAGES;
        atomic_store(&stop, 1);
        if (write(fd, &per, sizeof(per)) != (ssize_t)sizeof(per))
                _exit(1);
        _exit(0);
}

static int cmp(const void *a, const void *b)
{
        double x = *(const double *)a, y = *(const double *)b;

        return x < y ? -1 : x > y;
}

int main(void)
{
        static const char *const names[] = {"alone", "a sleeping thread on the other CPU",
                                            "a running thread on the other CPU",
                                            "alone, copied by MADV_POPULATE_WRITE"};
        char *pages = mmap(NULL, (size_t)PAGES * PAGE, PROT_READ | PROT_WRITE,
                           MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

        if (pages == MAP_FAILED || sysconf(_SC_NPROCESSORS_ONLN) < 2) {
                fprintf(stderr, "cow_fault: needs memory and two CPUs\n");
                return 1;
        }
        madvise(pages, (size_t)PAGES * PAGE, MADV_NOHUGEPAGE);
        memset(pages, 1, (size_t)PAGES * PAGE);
        for (int kind = NONE; kind <= POPULATE; kind++) {
                double per[ROUNDS];

                for (int r = 0; r < ROUNDS; r++) {
                        int fds[2], status;
                        pid_t pid;

                        if (pipe(fds) < 0)
                                return 1;
                        pid = fork();
                        if (pid < 0)
                                return 1;
                        if (pid == 0) {
                                close(fds[0]);
                                child(pages, (enum sibling)kind, fds[1]);
                        }
                        close(fds[1]);
                        if (read(fds[0], &per[r], sizeof(per[r])) != (ssize_t)sizeof(per[r]))
                                per[r] = -1;
                        close(fds[0]);
                        waitpid(pid, &status, 0);
                }
                qsort(per, ROUNDS, sizeof(per[0]), cmp);
                printf("%-38s %6.2f µs per page copied (median of %d)\n", names[kind],
                       per[ROUNDS / 2], ROUNDS);
        }
        return 0;
}
