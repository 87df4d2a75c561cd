/* A process started in its sandbox (spawn_start): its stdio, its own
 * cgroup, forked from a zygote or started cold, several at once, each
 * answered when its process says how its start went; without a sandbox, a
 * plain child in a session of its own. */
#include "autoconf.h"

#include "kernel-host/spawn.h"
#include "kernel-host/spawn_internal.h"
#include "kernel-host/tcp_bridge.h"
#include "kernel-host/zygote.h"
#include "protocol/log.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* Without a sandbox, "/" of the box is run_dir/root and home its
 * home/user, so paths read the same in both modes. */
static void box_home(const struct box *b, char *out, size_t size)
{
        if (b->sandboxed)
                snprintf(out, size, ROOTFS_HOME);
        else
                snprintf(out, size, "%s/" ROOT_DIR ROOTFS_HOME, b->run_dir);
}

/* What a plain child reports through its sync pipe when a step fails. */
struct child_failure {
        char step[32];
        int error;
};

/* Runs in the child: only async-signal-safe calls until execve. */
static __attribute__((noreturn)) void plain_fail(int fd, const char *step, int error)
{
        struct child_failure f = {.error = error};
        size_t len = strlen(step);

        memcpy(f.step, step, len < sizeof(f.step) - 1 ? len : sizeof(f.step) - 1);
        (void)!write(fd, &f, sizeof(f));
        _exit(127);
}

static __attribute__((noreturn)) void child_exec(char **argv, char **envp, const char *cwd,
                                                 const int stdio[3], bool tty, int null_fd,
                                                 int sync_fd, pid_t parent)
{
        sigset_t none;

        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        for (int sig = 1; sig < NSIG; sig++)
                signal(sig, SIG_DFL);
        /* It dies with us, as a sandbox does with its init; a parent gone
         * before this line shows as a new parent. */
        if (prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) < 0)
                plain_fail(sync_fd, "parent death signal", errno);
        if (getppid() != parent)
                plain_fail(sync_fd, "parent death signal", ESRCH);
        /* Its own session and process group, so an interrupt reaches the
         * process and whatever it started, and nothing else. */
        if (setsid() < 0)
                plain_fail(sync_fd, "setsid", errno);
        for (int i = 0; i < 3; i++) {
                if (dup2(stdio[i] >= 0 ? stdio[i] : null_fd, i) < 0)
                        plain_fail(sync_fd, "stdio", errno);
        }
        if (tty && ioctl(0, TIOCSCTTY, 0) < 0)
                plain_fail(sync_fd, "controlling terminal", errno);
        /* Nothing else is inherited: not the gateway link, nor any other. */
        for (int fd = 3; fd < 4096; fd++) {
                if (fd != sync_fd)
                        close(fd);
        }
        if (chdir(cwd) < 0)
                plain_fail(sync_fd, "chdir", errno);
        execve(argv[0], argv, envp);
        plain_fail(sync_fd, "exec", errno);
}

/* Without a sandbox: a plain child in its own session. */
static int start_plain(struct proc *p, char **argv, char **envp, const char *cwd,
                       const int stdio[3], bool tty, struct hostmsg_failed *fail)
{
        struct child_failure child = {0};
        int sync[2] = {-1, -1};
        int null_fd = open("/dev/null", O_RDWR | O_CLOEXEC);
        ssize_t got;
        pid_t pid, parent;
        int rc;

        if (null_fd < 0 || pipe2(sync, O_CLOEXEC) < 0) {
                rc = -errno;
                spawn_fail_set(fail, p->id, "pipe", errno, NULL);
                goto out;
        }
        parent = getpid();
        pid = fork();
        if (pid < 0) {
                rc = -errno;
                spawn_fail_set(fail, p->id, "fork", errno, NULL);
                goto out;
        }
        if (pid == 0)
                child_exec(argv, envp, cwd, stdio, tty, null_fd, sync[1], parent);
        close(sync[1]);
        sync[1] = -1;
        /* EOF means execve succeeded (the pipe closed on exec). */
        do {
                got = read(sync[0], &child, sizeof(child));
        } while (got < 0 && errno == EINTR);
        if (got == (ssize_t)sizeof(child)) {
                child.step[sizeof(child.step) - 1] = '\0';
                waitpid(pid, NULL, 0);
                rc = -child.error;
                spawn_fail_set(fail, p->id, child.step, child.error, argv[0]);
                goto out;
        }
        p->pid = pid;
        p->reap = pid;
        rc = 0;
out:
        if (null_fd >= 0)
                close(null_fd);
        if (sync[0] >= 0)
                close(sync[0]);
        if (sync[1] >= 0)
                close(sync[1]);
        return rc;
}

static char last_zygote[ZYGOTE_MAX_NAME];

const char *spawn_last_zygote(void)
{
        return last_zygote;
}

/* How a sandboxed start goes, in order, until one stage takes it: the
 * process its sandbox's stock forked ahead, a group of its own made, its
 * zygote, then started cold. */
enum stage { STAGE_AHEAD, STAGE_GROUP, STAGE_ZYGOTE, STAGE_COLD };

/* How long a start's first steps may take before the next is sent anyway
 * (starting_admit). */
#define START_STALL_MS 200

/* A start (spawn.h): all the request started with, kept until its process
 * says how its start went. */
struct starting {
        struct starting *next;
        struct proc *p; /* not in the registry until it has started */
        spawn_answer_fn *answer;
        enum stage stage;
        char zygote[ZYGOTE_MAX_NAME]; /* the zygote it fits ("": none) */
        struct zygote_ahead *ahead;   /* the process forked ahead it went to */
        bool queued;                  /* waits its turn, not yet sent */
        struct confine_wait wait;     /* fd -1 until sent */
        pid_t starter;                /* sandbox_exec_begin's, until reaped */
        struct timespec sent;
        bool pty;
        char **argv, **envp;
        char *conn_text;
        char cwd[PATH_MAX + 32];
        char conn_name[32];
        int pipes[3][2];
        int stdio[3];
        int pty_master, pty_peer;
        struct sandbox_exec ex;
        struct hostmsg_started started; /* its ipc_prefix from the request on */
        struct hostmsg_failed fail;
};

/* The starts sent, newest first, and those waiting their turn, oldest
 * first; how many of both. */
static struct starting *startings;
static struct starting *queue, **queue_tail = &queue;
static size_t nstartings;

static void starting_list(struct starting *s)
{
        clock_gettime(CLOCK_MONOTONIC, &s->sent);
        s->next = startings;
        startings = s;
}

static void starting_unlist(struct starting *s)
{
        for (struct starting **link = &startings; *link; link = &(*link)->next) {
                if (*link == s) {
                        *link = s->next;
                        return;
                }
        }
}

static void starting_unqueue(struct starting *s)
{
        for (struct starting **link = &queue; *link; link = &(*link)->next) {
                if (*link == s) {
                        *link = s->next;
                        if (!*link)
                                queue_tail = link;
                        s->queued = false;
                        return;
                }
        }
}

/* Whether s is of process or sandbox id (NULL: any). */
static bool starting_is(const struct starting *s, const char *id)
{
        return !id || strcmp(s->p->id, id) == 0 || strcmp(s->p->box->id, id) == 0;
}

/* The first start of process or sandbox id (NULL: any), sent or not. */
static struct starting *starting_of(const char *id)
{
        for (struct starting *s = startings; s; s = s->next) {
                if (starting_is(s, id))
                        return s;
        }
        for (struct starting *s = queue; s; s = s->next) {
                if (starting_is(s, id))
                        return s;
        }
        return NULL;
}

/* Milliseconds since s was sent. */
static long long ms_since(const struct starting *s)
{
        struct timespec now;

        clock_gettime(CLOCK_MONOTONIC, &now);
        return (long long)(now.tv_sec - s->sent.tv_sec) * 1000 +
               (now.tv_nsec - s->sent.tv_nsec) / 1000000;
}

/* Milliseconds until s has been sent for ms, 0 if it has. */
static int ms_until(const struct starting *s, int ms)
{
        long long left = ms - ms_since(s);

        return left < 0 ? 0 : left > INT_MAX ? INT_MAX : (int)left;
}

static void close_pair(int pair[2])
{
        for (int i = 0; i < 2; i++) {
                if (pair[i] >= 0)
                        close(pair[i]);
                pair[i] = -1;
        }
}

/* s has started (rc 0: p->sp is its process) or failed (s->fail says
 * why): answered, registered or undone, and freed. */
static void starting_finish(struct starting *s, int rc)
{
        struct proc *p = s->p;
        struct box *b = p->box;
        int fds[3];
        size_t nfds = 0;

        nstartings--;
        if (rc < 0) {
                snprintf(s->fail.id, sizeof(s->fail.id), "%s", p->id);
                if (p->kernel)
                        spawn_remove_kernel_files(b, p->id);
                cgroup_destroy(&p->cgroup);
                s->answer(b->id, NULL, NULL, 0, &s->fail);
                free(p);
                goto out;
        }
        if (b->sandboxed) {
                /* Its end comes from its sandbox's init (spawn_init_reports). */
                p->pid = p->sp.pid;
                p->reap = 0;
        }
        if (p->kernel) {
                fds[nfds++] = s->pipes[2][0];
        } else if (s->pty) {
                struct stat st;

                if (fstat(s->pty_peer, &st) == 0) {
                        p->tty_rdev = st.st_rdev;
                        p->tty_dev = st.st_dev;
                }
                fds[nfds++] = s->pty_master;
        } else {
                for (int i = 0; i < 3; i++) {
                        struct stat st;

                        p->pipes[i] = fstat(s->stdio[i], &st) == 0 ? st.st_ino : 0;
                }
                fds[nfds++] = s->pipes[0][1];
                fds[nfds++] = s->pipes[1][0];
                fds[nfds++] = s->pipes[2][0];
        }
        snprintf(s->started.id, sizeof(s->started.id), "%s", p->id);
        s->started.pid = p->pid;
        b->procs++;
        spawn_proc_add(p);
        /* The gateway has its own copies of fds once answered: all of
         * them are closed below. */
        s->answer(b->id, &s->started, fds, nfds, NULL);
out:
        for (int i = 0; i < 3; i++)
                close_pair(s->pipes[i]);
        if (s->pty_master >= 0)
                close(s->pty_master);
        if (s->pty_peer >= 0)
                close(s->pty_peer);
        spawn_strv_free(s->argv);
        spawn_strv_free(s->envp);
        free(s->conn_text);
        free(s);
}

/* Sends s to the process b's stock forked ahead (zygote.h), taken out of
 * b: in its group renamed name (where groups can be renamed: cgroup v1;
 * on v2 it keeps ZYGOTE_AHEAD_GROUP), when s is a zygote's kernel. Else,
 * or when it cannot take s, the process is ended and its group removed:
 * -ENOENT, and s goes on to its next stage. */
static int send_ahead(struct starting *s, const char *name, int *fd)
{
        struct box *b = s->p->box;
        struct zygote_ahead *a = b->ahead;
        int rc = -ENOENT;

        if (!s->zygote[0]) {
                spawn_drop_ahead(b, false);
                return -ENOENT;
        }
        b->ahead = NULL;
        if (cgroup_child_of(&b->sandbox.cgroup, ZYGOTE_AHEAD_GROUP, &s->p->cgroup) < 0) {
                zygote_ahead_free(a);
                return -ENOENT;
        }
        if (!cgroup_renamable() || cgroup_rename(&s->p->cgroup, name) == 0)
                rc = zygote_exec_ahead(a, s->zygote, &b->sandbox, &s->ex, fd, &s->fail);
        if (rc == 0) {
                s->ahead = a;
                return 0;
        }
        zygote_ahead_free(a);
        if (rc == -ENOENT)
                cgroup_destroy(&s->p->cgroup); /* and whatever waits there */
        return rc;
}

/* Sends s at its stage, or the first after it that takes it: 0 once its
 * process is to report (s listed), or the failure (s->fail). */
static int starting_send(struct starting *s)
{
        struct proc *p = s->p;
        struct box *b = p->box;
        char name[JP_UUID_SIZE + 8], err[HOSTMSG_ERROR_SIZE];
        int fd = -1, rc = -ENOENT;

        if (b->gone_reported || !b->init_alive || sandbox_dying(&b->sandbox)) {
                spawn_fail_set(&s->fail, p->id, "find sandbox", ESRCH, NULL);
                return -ESRCH;
        }
        /* A group of its own: what it starts, even in a new session, can
         * be killed with it. */
        snprintf(name, sizeof(name), "p-%s", p->id);
        while (rc == -ENOENT) {
                switch (s->stage) {
                case STAGE_AHEAD:
                        rc = send_ahead(s, name, &fd);
                        if (rc == -ENOENT)
                                s->stage = STAGE_GROUP;
                        break;
                case STAGE_GROUP:
                        rc = cgroup_create_child(&b->sandbox.cgroup, name, &p->cgroup, err,
                                                 sizeof(err));
                        if (rc < 0) {
                                spawn_fail_set(&s->fail, p->id, "cgroup", -rc, err);
                                return rc;
                        }
                        s->stage = s->zygote[0] ? STAGE_ZYGOTE : STAGE_COLD;
                        rc = -ENOENT;
                        break;
                case STAGE_ZYGOTE:
                        rc = zygote_exec(s->zygote, &b->sandbox, &s->ex, &fd, &s->fail);
                        if (rc == -ENOENT)
                                s->stage = STAGE_COLD;
                        break;
                case STAGE_COLD:
                        rc = sandbox_exec_begin(&b->sandbox, &s->ex, &fd, &s->starter, &s->fail);
                        if (rc < 0)
                                return rc;
                        break;
                }
        }
        if (rc < 0)
                return rc;
        s->wait = (struct confine_wait){.fd = fd};
        starting_list(s);
        return 0;
}

/* s's process said how its start went (rc and r as confine_wait_read's,
 * or -ETIMEDOUT): s is answered, or sent on to its next stage. */
static void starting_outcome(struct starting *s, int rc, const struct confine_report *r)
{
        struct proc *p = s->p;

        starting_unlist(s);
        close(s->wait.fd);
        s->wait.fd = -1;
        /* The starter of a process that never said a word; the process
         * itself goes with its group when s fails. */
        if (rc == -ETIMEDOUT && s->starter > 0)
                kill(s->starter, SIGKILL);
        if (s->stage == STAGE_COLD) {
                const char *step;

                rc = confine_wait_outcome(rc, r, &step);
                if (rc < 0) {
                        sandbox_fail_set(&s->fail, step, -rc);
                } else {
                        p->sp.pid = r->pid;
                        p->sp.nspid = r->nspid;
                }
        } else {
                rc = zygote_exec_end(s->zygote, s->stage == STAGE_AHEAD, rc, r, &s->ex, &p->sp,
                                     &s->fail);
                zygote_ahead_free(s->ahead);
                s->ahead = NULL;
                if (rc == -ENOENT) {
                        if (s->stage == STAGE_AHEAD)
                                cgroup_destroy(&p->cgroup); /* it died waiting */
                        s->stage = s->stage == STAGE_AHEAD ? STAGE_GROUP : STAGE_COLD;
                        rc = starting_send(s);
                        if (rc == 0)
                                return;
                } else if (rc == 0) {
                        klog_debug(p->id, "forked from zygote %s", s->zygote);
                        snprintf(last_zygote, sizeof(last_zygote), "%s", s->zygote);
                }
        }
        starting_finish(s, rc);
}

/* Reads s without blocking: its outcome if known, or its time is up. */
static bool starting_step(struct starting *s)
{
        struct confine_report r;
        int rc = confine_wait_read(&s->wait, &r);

        if (rc == -EAGAIN && ms_until(s, SANDBOX_SETUP_TIMEOUT_MS) > 0)
                return false;
        starting_outcome(s, rc == -EAGAIN ? -ETIMEDOUT : rc, &r);
        return true;
}

/* How many starts sent are to report in their first START_STALL_MS: as
 * many at once as the kernel-host has cores (starting_admit). */
static size_t fresh(void)
{
        size_t n = 0;

        for (struct starting *s = startings; s; s = s->next)
                n += ms_since(s) < START_STALL_MS;
        return n;
}

static size_t cores(void)
{
        static size_t n;
        cpu_set_t set;

        if (!n)
                n = sched_getaffinity(0, sizeof(set), &set) == 0 && CPU_COUNT(&set) > 0
                        ? (size_t)CPU_COUNT(&set)
                        : 1;
        return n;
}

/* Sends s, taken from the queue: it is under way, or answered. */
static void starting_begin(struct starting *s)
{
        int rc;

        starting_unqueue(s);
        s->stage = s->p->box->ahead ? STAGE_AHEAD : STAGE_GROUP;
        rc = starting_send(s);
        if (rc < 0)
                starting_finish(s, rc);
}

/* Sends the starts that wait their turn, oldest first, while fewer than
 * the cores are fresh. Each start's first steps (a fork, the joins, the
 * confinement) take a core while the kernels before it start: sent all at
 * once, a burst's kernels would share the cores to the end and all be
 * ready late, where in turn the first are ready early. A start not done
 * after START_STALL_MS holds up no other. */
static void starting_admit(void)
{
        while (queue && fresh() < cores())
                starting_begin(queue);
}

void spawn_starting_read(void)
{
        /* An outcome changes the list: from its start again. At most
         * three outcomes per start (its stages), so this ends. */
        for (struct starting *s = startings; s;)
                s = starting_step(s) ? startings : s->next;
        starting_admit();
}

void spawn_starting_settle(const char *id)
{
        struct starting *s;

        while ((s = starting_of(id))) {
                struct pollfd pfd = {s->wait.fd, POLLIN, 0};

                if (s->queued)
                        starting_begin(s);
                else if (!starting_step(s))
                        (void)poll(&pfd, 1, ms_until(s, SANDBOX_SETUP_TIMEOUT_MS));
        }
        starting_admit();
}

void spawn_starting_ended(pid_t init_pid, pid_t nspid)
{
        spawn_starting_read();
        for (struct starting *s = startings; s; s = s->next) {
                const struct box *b = s->p->box;

                /* Its hello came and no failure after it (a failure is
                 * reported before the process ends, and was read): it
                 * executed, and whoever forked it still holds the socket. */
                if (b->sandboxed && b->sandbox.init_pid == init_pid && s->wait.hello &&
                    s->wait.said.nspid == nspid) {
                        starting_outcome(s, 0, &s->wait.said);
                        return;
                }
        }
}

bool spawn_starting_reaped(pid_t pid)
{
        for (struct starting *s = startings; s; s = s->next) {
                if (s->starter == pid) {
                        s->starter = 0;
                        return true;
                }
        }
        return false;
}

size_t spawn_starting_fds(struct pollfd *fds, size_t max)
{
        size_t n = 0;

        for (struct starting *s = startings; s && n < max; s = s->next)
                fds[n++] = (struct pollfd){s->wait.fd, POLLIN, 0};
        return n;
}

int spawn_starting_due_ms(void)
{
        int due = -1;

        /* Each one's end, and while others wait, when it is no longer fresh. */
        for (struct starting *s = startings; s; s = s->next) {
                int left = ms_until(s, SANDBOX_SETUP_TIMEOUT_MS);

                if (queue && ms_since(s) < START_STALL_MS)
                        left = ms_until(s, START_STALL_MS);
                if (due < 0 || left < due)
                        due = left;
        }
        return due;
}

void spawn_drop_ahead(struct box *b, bool wait)
{
        struct kernel_cgroup group;

        if (!b->ahead && !(wait && b->ahead_left))
                return;
        zygote_ahead_free(b->ahead);
        b->ahead = NULL;
        if (cgroup_child_of(&b->sandbox.cgroup, ZYGOTE_AHEAD_GROUP, &group) < 0)
                return;
        /* Its process killed; its group removed once it has left it
         * (wait), or left empty for the sandbox's end to remove: a start
         * does not wait for a process to die. */
        b->ahead_left = !wait;
        if (wait)
                cgroup_destroy(&group);
        else
                cgroup_kill(&group, 0);
}

/* The failure of a request refused before anything was made for it. */
static void refuse(const struct hostmsg_start *req, spawn_answer_fn *answer, const char *step,
                   int error, const char *detail)
{
        struct hostmsg_failed fail = {0};

        spawn_fail_set(&fail, req->id, step, error, detail);
        answer(req->sandbox_id, NULL, NULL, 0, &fail);
}

void spawn_start(const struct hostmsg_start *req, spawn_answer_fn *answer)
{
        struct box *b = spawn_box_find(req->sandbox_id);
        char inside[PATH_MAX + 32], home[PATH_MAX + 32];
        char bridge_prefix[sizeof(((struct jp_connection *)0)->ip)] = "";
        struct jp_connection bridge_conn;
        struct starting *s;
        struct proc *p;
        int rc;

        if (!b || b->gone_reported ||
            (b->sandboxed && (!b->init_alive || sandbox_dying(&b->sandbox)))) {
                refuse(req, answer, "find sandbox", ESRCH, NULL);
                return;
        }
        if (spawn_proc_find(req->id) || spawn_box_find(req->id) || starting_of(req->id)) {
                refuse(req, answer, "register", EEXIST, NULL);
                return;
        }
        /* A sandbox's root exists only where its user namespace maps one
         * (sandbox.c, write_id_maps); never run "root" as anyone else. */
        if (req->as_root && (!b->sandboxed || !b->sandbox.ids.privileged)) {
                refuse(req, answer, "user root", EPERM,
                       "user 'root' needs a sandbox made by a kernel-host running as root");
                return;
        }
        /* Bounded: past it, the oldest is waited for first. */
        while (nstartings >= SPAWN_STARTING_MAX) {
                struct starting *oldest = startings;

                while (oldest && oldest->next)
                        oldest = oldest->next;
                spawn_starting_settle(oldest ? oldest->p->id : queue->p->id);
        }
        s = calloc(1, sizeof(*s));
        p = calloc(1, sizeof(*p));
        if (!s || !p) {
                free(s);
                free(p);
                refuse(req, answer, "register", ENOMEM, NULL);
                return;
        }
        nstartings++; /* until starting_finish */
        for (int i = 0; i < 3; i++)
                s->pipes[i][0] = s->pipes[i][1] = s->stdio[i] = -1;
        s->pty_master = s->pty_peer = s->wait.fd = -1;
        s->p = p;
        s->answer = answer;
        s->pty = req->pty;
        snprintf(p->id, sizeof(p->id), "%s", req->id);
        p->box = b;
        p->kernel = req->kernel;
        box_home(b, home, sizeof(home));
        snprintf(s->cwd, sizeof(s->cwd), "%s", req->cwd[0] ? req->cwd : home);
        if (!b->sandboxed && req->cwd[0])
                snprintf(s->cwd, sizeof(s->cwd), "%s", home); /* paths inside mean nothing */
        if (req->kernel) {
                struct jp_connection conn;

                spawn_prepare_connection(b, req, &conn, s->conn_name, sizeof(s->conn_name), inside,
                                         sizeof(inside), s->started.ipc_prefix,
                                         sizeof(s->started.ipc_prefix));
                if (req->tcp_bridge) {
                        snprintf(bridge_prefix, sizeof(bridge_prefix), "%s", conn.ip);
                        tcp_bridge_connection(&conn, req->id);
                        bridge_conn = conn;
                }
                /* In a sandbox its root writes the file (sandbox_exec_begin);
                 * without one the directory and the kernel are ours. */
                if (b->sandboxed) {
                        s->conn_text = jp_connection_dump(&conn);
                        rc = s->conn_text ? 0 : -ENOMEM;
                } else {
                        rc = jp_connection_write_at(&conn, b->plain_ipc_fd, s->conn_name, (uid_t)-1,
                                                    (gid_t)-1);
                }
                if (rc < 0) {
                        spawn_fail_set(&s->fail, req->id, "connection-file", -rc, NULL);
                        goto out;
                }
                /* Its output goes to the gateway, which keeps the last
                 * lines: a kernel that fails to start says why there. */
                if (pipe2(s->pipes[2], O_CLOEXEC) < 0) {
                        rc = -errno;
                        spawn_fail_set(&s->fail, req->id, "pipe", errno, NULL);
                        goto out;
                }
                s->stdio[1] = s->stdio[2] = s->pipes[2][1];
        } else if (req->pty) {
                /* A terminal: the master goes to the gateway, the peer is
                 * all three of the process's stdio. */
                rc = sandbox_open_pty(b->sandboxed ? &b->sandbox : NULL, req->rows, req->cols,
                                      &s->pty_master, &s->pty_peer);
                if (rc < 0) {
                        spawn_fail_set(&s->fail, req->id, "pseudo-terminal", -rc, NULL);
                        goto out;
                }
                s->stdio[0] = s->stdio[1] = s->stdio[2] = s->pty_peer;
                inside[0] = '\0';
        } else {
                /* A command talks through pipes the gateway reads. */
                for (int i = 0; i < 3; i++) {
                        if (pipe2(s->pipes[i], O_CLOEXEC) < 0) {
                                rc = -errno;
                                spawn_fail_set(&s->fail, req->id, "pipe", errno, NULL);
                                goto out;
                        }
                }
                s->stdio[0] = s->pipes[0][0];
                s->stdio[1] = s->pipes[1][1];
                s->stdio[2] = s->pipes[2][1];
                inside[0] = '\0';
        }
        s->argv = spawn_build_argv(req, inside);
        if (s->argv && req->kernel && req->tcp_bridge) {
                s->argv = tcp_bridge_argv(s->argv, bridge_prefix, &bridge_conn);
                if (!s->argv) {
                        rc = -ENOENT;
                        spawn_fail_set(
                            &s->fail, req->id, "tcp-bridge", ENOENT,
                            "glovebox-kernel-bridge is not installed beside the kernel-host");
                        goto out;
                }
        }
        s->envp = spawn_build_env(req, home);
        if (!s->argv || !s->envp) {
                rc = -ENOMEM;
                spawn_fail_set(&s->fail, req->id, "prepare", ENOMEM, NULL);
                goto out;
        }
        if (!b->sandboxed) {
                rc = start_plain(p, s->argv, s->envp, s->cwd, s->stdio, req->pty, &s->fail);
                goto out;
        }
        s->ex = (struct sandbox_exec){.argv = s->argv,
                                      .envp = s->envp,
                                      .cwd = s->cwd,
                                      .stdio = {s->stdio[0], s->stdio[1], s->stdio[2]},
                                      .cgroup = &p->cgroup,
                                      .conn_name = req->kernel ? s->conn_name : NULL,
                                      .conn_text = s->conn_text,
                                      .tty = req->pty,
                                      .as_root = req->as_root};
        /* A zygote's modules are the host's: only a sandbox on the host's
         * /usr sees the same files. */
        if (req->kernel && !req->tcp_bridge && !b->templated &&
            zygote_fits(req->zygote, s->argv, s->envp))
                snprintf(s->zygote, sizeof(s->zygote), "%s", req->zygote);
        /* Answered once its process reports. */
        s->queued = true;
        *queue_tail = s;
        queue_tail = &s->next;
        starting_admit();
        return;
out:
        starting_finish(s, rc);
}
