/* Compaction of checkpoints in the background (checkpoint_pages.c says
 * what is done to a checkpoint's files, and why a restore can rely on
 * them at any moment). A checkpoint is queued once its dump is in place,
 * again when the last restore of it ends (a snapshot's, a fork's source)
 * while pages of it are still plain, and at a kernel-host's start for
 * every one left so; --compress-after seconds later (-1: never) its
 * pages are compressed.
 *
 * One checkpoint at a time, in a child that sleeps until it is due, then
 * runs zstd at the lowest priorities there are (nice 19, SCHED_IDLE, the
 * idle I/O class): it takes only time nothing else wants, and a pause, a
 * resume or a cell never waits for it. The queue is in the order the
 * checkpoints were made, which is the order they are due: each waits the
 * same delay.
 *
 * Nothing changes under CRIU: a restore or a deletion of a checkpoint
 * cancels its compaction first (the child and its zstd killed, waited
 * for, their .tmp removed), and one being restored is not compacted until
 * its last restore has ended. The child dies with the kernel-host
 * (PR_SET_PDEATHSIG); what it was writing is a .tmp, removed at the next
 * start. */
#include "autoconf.h"

#include "kernel-host/checkpoint_internal.h"
#include "protocol/ids.h"
#include "protocol/log.h"
#include "protocol/tree.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/ioprio.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

struct pending {
        struct pending *next;
        char name[JP_UUID_SIZE];
        uint64_t due_ms; /* CLOCK_MONOTONIC */
};

static int compress_after = 60; /* seconds; -1: never */
static struct pending *queue;
/* The one compaction under way: its child (-1: none). */
static struct {
        pid_t pid;
        char name[JP_UUID_SIZE];
        uint64_t due_ms;
} active = {.pid = -1};

static uint64_t now_ms(void)
{
        struct timespec ts;

        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* Only time nobody else wants: CPU and disk. Best effort: a host that
 * refuses one still gets the compaction, at nice 19. */
static void lowest_priority(void)
{
        struct sched_param idle = {.sched_priority = 0};

        (void)setpriority(PRIO_PROCESS, 0, 19);
        (void)sched_setscheduler(0, SCHED_IDLE, &idle);
        (void)syscall(SYS_ioprio_set, IOPRIO_WHO_PROCESS, 0,
                      IOPRIO_PRIO_VALUE(IOPRIO_CLASS_IDLE, 0));
}

/* The child: name's directory is opened first, then every other
 * descriptor of the kernel-host's is closed (a sandbox's pipe, the
 * gateway's link: none may look open because we sleep). In a process
 * group of its own, so that its zstd is killed with it. */
static __attribute__((noreturn)) void compact_child(const char *name, uint64_t wait_ms,
                                                    pid_t parent)
{
        struct timespec left = {.tv_sec = (time_t)(wait_ms / 1000),
                                .tv_nsec = (long)(wait_ms % 1000) * 1000000};
        int fd = openat(checkpoint_dir_fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW);
        sigset_t none;

        if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0 || getppid() != parent || fd < 0 ||
            dup2(fd, 3) < 0)
                _exit(1);
        syscall(SYS_close_range, 4, ~0u, 0);
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        setpgid(0, 0);
        lowest_priority();
        while (nanosleep(&left, &left) < 0 && errno == EINTR)
                ;
        _exit(checkpoint_pages_compress_all(3) == 0 ? 0 : 1);
}

static void launch(const struct pending *p)
{
        uint64_t now = now_ms();
        pid_t parent = getpid(), pid = fork();

        if (pid == 0)
                compact_child(p->name, p->due_ms > now ? p->due_ms - now : 0, parent);
        if (pid < 0) {
                log_warn("checkpoint %.8s: cannot start its compaction: %s", p->name,
                         strerror(errno));
                return;
        }
        /* The child does the same; whichever is first, a kill of the
         * group reaches its zstd. */
        (void)setpgid(pid, pid);
        active.pid = pid;
        active.due_ms = p->due_ms;
        snprintf(active.name, sizeof(active.name), "%s", p->name);
}

/* The next due checkpoint's compaction, when none runs. One being
 * restored is skipped: the end of its restore queues it again. */
static void start_next(void)
{
        while (active.pid < 0 && queue) {
                struct pending *p = queue;

                queue = p->next;
                if (!checkpoint_restoring(p->name))
                        launch(p);
                free(p);
        }
}

/* Removes what the compaction left half written in name's directory. */
static void remove_partial(const char *name)
{
        int fd = openat(checkpoint_dir_fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);

        if (fd < 0)
                return;
        checkpoint_pages_remove_partial(fd);
        close(fd);
}

/* The compaction under way killed with its zstd and waited for: nothing
 * writes in its checkpoint any more (a zstd still exiting writes only to
 * its .tmp, unlinked here). */
static void kill_active(void)
{
        int status;

        if (active.pid < 0)
                return;
        kill(-active.pid, SIGKILL);
        kill(active.pid, SIGKILL);
        while (waitpid(active.pid, &status, 0) < 0 && errno == EINTR)
                ;
        remove_partial(active.name);
        active.pid = -1;
}

/* Whether name's directory has pages the dump recorded and nobody has
 * compressed yet. */
static bool has_plain_pages(const char *name)
{
        int fd = openat(checkpoint_dir_fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        bool pending = fd >= 0 && checkpoint_pages_pending(fd);

        if (fd >= 0)
                close(fd);
        return pending;
}

void checkpoint_compact_queue(const char *name)
{
        struct pending *p, **tail = &queue;

        if (compress_after < 0 || checkpoint_dir_fd < 0)
                return;
        if (active.pid > 0 && strcmp(active.name, name) == 0)
                return;
        for (; *tail; tail = &(*tail)->next) {
                if (strcmp((*tail)->name, name) == 0)
                        return;
        }
        if (!has_plain_pages(name))
                return;
        p = calloc(1, sizeof(*p));
        if (!p) {
                log_warn("checkpoint %.8s: out of memory: it stays uncompressed", name);
                return;
        }
        snprintf(p->name, sizeof(p->name), "%s", name);
        p->due_ms = now_ms() + (uint64_t)compress_after * 1000;
        *tail = p;
        start_next();
}

void checkpoint_compact_cancel(const char *name)
{
        for (struct pending **link = &queue; *link; link = &(*link)->next) {
                struct pending *p = *link;

                if (strcmp(p->name, name) == 0) {
                        *link = p->next;
                        free(p);
                        break;
                }
        }
        if (active.pid > 0 && strcmp(active.name, name) == 0) {
                kill_active();
                log_info("checkpoint %.8s: its compaction stopped (it is restored or deleted)",
                         name);
                start_next();
        }
}

bool checkpoint_compact_reaped(pid_t pid, int status)
{
        uint64_t bytes = UINT64_MAX;
        int fd;

        if (active.pid < 0 || pid != active.pid)
                return false;
        active.pid = -1;
        fd =
            openat(checkpoint_dir_fd, active.name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (fd >= 0) {
                bytes = tree_file_bytes_at(fd);
                close(fd);
        }
        if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
                log_info("checkpoint %.8s: pages compressed in %.1f s, %.1f MiB on disk now",
                         active.name, (double)(now_ms() - active.due_ms) / 1000,
                         bytes == UINT64_MAX ? 0.0 : (double)bytes / 1048576);
        else
                log_warn("checkpoint %.8s: its pages could not all be compressed; those left "
                         "stay as they are",
                         active.name);
        remove_partial(active.name);
        start_next();
        return true;
}

void checkpoint_compact_stop(void)
{
        kill_active();
        while (queue) {
                struct pending *p = queue;

                queue = p->next;
                free(p);
        }
}

/* What a dead kernel-host's restores and compactions left in checkpoint
 * directory fd: image directories (copy-*) and .tmp files. */
static void remove_leftovers(int fd)
{
        DIR *d;
        struct dirent *e;
        int dup_fd = dup(fd);

        checkpoint_pages_remove_partial(fd);
        d = dup_fd >= 0 ? fdopendir(dup_fd) : NULL;
        if (!d) {
                if (dup_fd >= 0)
                        close(dup_fd);
                return;
        }
        /* A dup shares the offset, where the listing above left it. */
        rewinddir(d);
        while ((e = readdir(d))) {
                int sub;

                if (strncmp(e->d_name, "copy-", 5) != 0)
                        continue;
                sub = openat(fd, e->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                if (sub >= 0) {
                        tree_remove_at(sub);
                        close(sub);
                }
                unlinkat(fd, e->d_name, AT_REMOVEDIR);
        }
        closedir(d);
}

void checkpoint_compact_init(int seconds)
{
        int fd = dup(checkpoint_dir_fd);
        DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
        struct dirent *e;

        compress_after = seconds;
        if (!d) {
                if (fd >= 0)
                        close(fd);
                return;
        }
        /* A dup shares the offset, where remove_unfinished left it. */
        rewinddir(d);
        while ((e = readdir(d))) {
                int sub;

                if (!jp_uuid_valid(e->d_name, strlen(e->d_name)))
                        continue;
                sub = openat(checkpoint_dir_fd, e->d_name,
                             O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                if (sub < 0)
                        continue;
                remove_leftovers(sub);
                close(sub);
                checkpoint_compact_queue(e->d_name);
        }
        closedir(d);
}
