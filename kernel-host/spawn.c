/* The sandboxes and processes the kernel-host keeps (spawn_internal.h):
 * found by id, signalled, stopped, and reported as each ends. */
#include "autoconf.h"

#include "kernel-host/spawn.h"
#include "kernel-host/spawn_internal.h"
#include "protocol/fleetid.h"
#include "protocol/log.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>

static struct box *boxes;
static struct proc *procs;

void spawn_fail_set(struct hostmsg_failed *fail, const char *id, const char *step, int error,
                    const char *detail)
{
        snprintf(fail->id, sizeof(fail->id), "%s", id);
        snprintf(fail->step, sizeof(fail->step), "%s", step);
        fail->error = error;
        snprintf(fail->message, sizeof(fail->message), "%s failed: %s%s%s", step, strerror(error),
                 detail ? ": " : "", detail ? detail : "");
}

struct box *spawn_box_find(const char *id)
{
        for (struct box *b = boxes; b; b = b->next) {
                if (strcmp(b->id, id) == 0)
                        return b;
        }
        return NULL;
}

bool spawn_sandbox_made(const char *id)
{
        return spawn_box_find(id) != NULL;
}

struct proc *spawn_proc_find(const char *id)
{
        for (struct proc *p = procs; p; p = p->next) {
                if (strcmp(p->id, id) == 0)
                        return p;
        }
        return NULL;
}

void spawn_box_add(struct box *b)
{
        b->next = boxes;
        boxes = b;
}

void spawn_box_unlink(struct box *b)
{
        for (struct box **link = &boxes; *link; link = &(*link)->next) {
                if (*link == b) {
                        *link = b->next;
                        break;
                }
        }
}

struct proc *spawn_proc_next(struct proc *p)
{
        return p ? p->next : procs;
}

void spawn_proc_add(struct proc *p)
{
        p->next = procs;
        procs = p;
}

/* Tells the gateway that nothing can start in b any more. */
void spawn_report_gone(struct box *b, void (*report)(enum hostmsg_type, json_t *))
{
        struct hostmsg_exit ex = {.exit_code = 0};

        b->gone_reported = true;
        snprintf(ex.id, sizeof(ex.id), "%s", b->id);
        snprintf(ex.reason, sizeof(ex.reason), "exited");
        if (report)
                report(HOSTMSG_SANDBOX_GONE, hostmsg_exit_encode(&ex));
}

int spawn_sandbox_destroy(const char *id)
{
        struct box *b = spawn_box_find(id);

        if (!b)
                return -ESRCH;
        if (b->sandboxed) {
                sandbox_kill(&b->sandbox);
        } else {
                for (struct proc *p = procs; p; p = p->next) {
                        if (p->box == b)
                                kill(-p->pid, SIGKILL);
                }
        }
        b->init_alive = b->init_alive && b->sandboxed;
        return 0;
}

int spawn_sandbox_priority(const char *id, bool background)
{
        struct box *b = spawn_box_find(id);

        if (!b || !b->sandboxed || !b->init_alive)
                return -ESRCH;
        return cgroup_set_background(&b->sandbox.cgroup, background);
}

int spawn_sandbox_relimit(const char *id, const struct hostmsg_limits *limits, char *err,
                          size_t errlen)
{
        struct box *b = spawn_box_find(id);
        int rc;

        if (!b || !b->sandboxed || !b->init_alive) {
                snprintf(err, errlen, "no such sandbox");
                return -ESRCH;
        }
        /* Its disk is made at its start: that size stays. */
        if (limits->disk_mb != b->sandbox.limits.disk_mb) {
                snprintf(err, errlen, "its disk is %llu MiB, not %llu",
                         (unsigned long long)b->sandbox.limits.disk_mb,
                         (unsigned long long)limits->disk_mb);
                return -EINVAL;
        }
        rc = cgroup_relimit(&b->sandbox.cgroup, limits, err, errlen);
        if (rc == 0)
                b->sandbox.limits = *limits;
        return rc;
}

int spawn_signal(const char *id, int sig)
{
        struct proc *p = spawn_proc_find(id);

        if (!p)
                return -ESRCH;
        return kill(-p->pid, sig) < 0 ? -errno : 0;
}

int spawn_stop(const char *id)
{
        struct proc *p = spawn_proc_find(id);

        if (!p)
                return -ESRCH;
        kill(-p->pid, SIGKILL);
        /* And what left the process group with setsid: all in its cgroup. */
        if (p->box->sandboxed)
                cgroup_kill(&p->cgroup, 0);
        return 0;
}

static void proc_exited(struct proc *p, int status, void (*report)(enum hostmsg_type, json_t *))
{
        struct box *b = p->box;
        struct hostmsg_exit ex = {.pid = p->pid};
        uint64_t ooms;
        bool oom = false;

        if (b->sandboxed) {
                /* A SIGKILL while a kill counter moved: the memory limit did
                 * it. cgroup v1 counts a kill in the victim's own group, v2
                 * in the sandbox's (and in the process's, after
                 * cgroup_hand_down). */
                ooms = sandbox_oom_kills(&b->sandbox);
                oom = WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL &&
                      (ooms > b->oom_seen || cgroup_oom_kills(&p->cgroup) > 0);
                b->oom_seen = ooms;
                /* A kernel leaves nothing behind, not even what it started in
                 * a session of its own; a command's background processes live
                 * on (as E2B's do), and its group with them until the sandbox
                 * goes. */
                if (p->kernel)
                        cgroup_destroy(&p->cgroup);
                else
                        cgroup_remove_if_empty(&p->cgroup);
        } else {
                kill(-p->pid, SIGKILL); /* stragglers of its group */
        }
        snprintf(ex.id, sizeof(ex.id), "%s", p->id);
        if (WIFSIGNALED(status)) {
                ex.exit_code = -1;
                ex.signal = WTERMSIG(status);
        } else {
                ex.exit_code = WEXITSTATUS(status);
        }
        snprintf(ex.reason, sizeof(ex.reason), "%s",
                 oom                   ? "out-of-memory"
                 : b->gone_reported    ? "sandbox-died"
                 : WIFSIGNALED(status) ? "signaled"
                                       : "exited");
        log_debug("process %s ended: %s (code %d, signal %d)", fleetid_short(p->id).s, ex.reason,
                  ex.exit_code, ex.signal);
        if (p->kernel)
                spawn_remove_kernel_files(b, p->id);
        for (struct proc **link = &procs; *link; link = &(*link)->next) {
                if (*link == p) {
                        *link = p->next;
                        break;
                }
        }
        free(p);
        b->procs--;
        if (report)
                report(HOSTMSG_EXITED, hostmsg_exit_encode(&ex));
}

int spawn_sandbox_netns(const char *id, int *userns_fd, int *netns_fd)
{
        struct box *b = spawn_box_find(id);

        if (!b || !b->init_alive || b->gone_reported)
                return -ESRCH;
        if (!b->sandboxed)
                return -EPERM;
        *userns_fd = b->sandbox.ns_fds[0];
        *netns_fd = b->sandbox.ns_fds[SANDBOX_NS_NET];
        return 0;
}

/* p has ended with status: told, and its box freed when it was the last
 * of a box whose init is gone. */
static void proc_ended(struct proc *p, int status, void (*report)(enum hostmsg_type, json_t *))
{
        struct box *b = p->box;

        /* It may have died because its sandbox's init did: then the
         * gateway hears first that the sandbox is gone, and starts the
         * next one in a new sandbox. */
        if (b->sandboxed && !b->gone_reported && (!b->init_alive || sandbox_dying(&b->sandbox)))
                spawn_report_gone(b, report);
        proc_exited(p, status, report);
        if (!b->init_alive && b->procs == 0)
                spawn_box_free(b, report);
}

/* The process nspid of the sandbox whose init is init_pid. */
static struct proc *proc_in(pid_t init_pid, pid_t nspid)
{
        for (struct proc *p = procs; p; p = p->next) {
                if (p->box->sandboxed && p->box->sandbox.init_pid == init_pid &&
                    p->sp.nspid == nspid)
                        return p;
        }
        return NULL;
}

void spawn_init_reports(void (*report)(enum hostmsg_type, json_t *))
{
        pid_t init_pid, pid;
        int status;

        while (sandbox_exit_next(&init_pid, &pid, &status) == 0) {
                /* The sender is known by its credentials; a pid it reaps
                 * that we did not start (an orphan) is none of ours. A
                 * process whose start is under way is answered first. */
                struct proc *found = proc_in(init_pid, pid);

                if (!found) {
                        spawn_starting_ended(init_pid, pid);
                        found = proc_in(init_pid, pid);
                }
                if (found)
                        proc_ended(found, status, report);
        }
}

void spawn_reap(pid_t pid, int status, void (*report)(enum hostmsg_type, json_t *))
{
        if (spawn_starting_reaped(pid))
                return;
        for (struct proc *p = procs; p; p = p->next) {
                if (p->reap > 0 && p->reap == pid) {
                        proc_ended(p, status, report);
                        return;
                }
        }
        for (struct box *b = boxes; b; b = b->next) {
                if (b->sandboxed && b->sandbox.init_pid == pid) {
                        /* Its starts under way end (its pid namespace
                         * did): answered first, their processes ended
                         * below with the rest. */
                        spawn_starting_settle(b->id);
                        /* What it reported before it died counts first;
                         * the rest died with it, and its pid namespace
                         * reaped them unreported. */
                        spawn_init_reports(report);
                        b->init_alive = false;
                        if (b->procs == 0) {
                                spawn_box_free(b, report);
                                return;
                        }
                        if (!b->gone_reported)
                                spawn_report_gone(b, report);
                        for (;;) {
                                struct proc *left = NULL;
                                bool last;

                                for (struct proc *p = procs; p && !left; p = p->next) {
                                        if (p->box == b)
                                                left = p;
                                }
                                if (!left)
                                        break;
                                last = b->procs == 1;
                                proc_ended(left, W_EXITCODE(0, SIGKILL), report);
                                if (last)
                                        break; /* b is freed */
                        }
                        return;
                }
        }
        net_reaped(pid);
}

void spawn_stop_all(void (*report)(enum hostmsg_type, json_t *))
{
        for (struct box *b = boxes; b; b = b->next)
                spawn_sandbox_destroy(b->id);
        /* Their processes die with their sandboxes (the zygotes are gone
         * already): answered, so that they are reaped and told below. */
        spawn_starting_settle(NULL);
        while (boxes) {
                int status;
                pid_t pid = waitpid(-1, &status, 0);

                if (pid < 0 && errno == EINTR)
                        continue;
                if (pid < 0)
                        break;
                spawn_reap(pid, status, report);
        }
        /* Boxes without a sandbox and without processes have nothing to reap. */
        while (boxes)
                spawn_box_free(boxes, report);
}
