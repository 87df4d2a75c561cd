#include "autoconf.h"

#include "gateway/kernels/host.h"
#include "gateway/core/loop.h"
#include "gateway/kernels/process.h"
#include "protocol/ids.h"
#include "protocol/log.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#define READ_PIECE       (64 * 1024)
#define DRAIN_TURN_READS 16 /* pieces read per output and turn of the loop */
/* After the process died, how long a child of it may keep its outputs
 * open before they stop being waited for. */
#define LINGER_MS 200.0

struct process {
        char id[JP_UUID_SIZE];
        const struct process_ops *ops; /* NULL once abandoned */
        void *ctx;
        bool keep_stdin;
        bool pty;
        /* stdin (write end), stdout, stderr (read ends); -1 when closed. A
         * terminal's are its master (written) and a copy of it (read). */
        int fds[3];
        struct loop_watch *watch[3];
        bool exited;
        bool held;     /* outputs not read (process_hold_output) */
        bool adopted;  /* restored: its pipes come later (process_adopt) */
        bool attached; /* its pipes came */
        struct hostmsg_exit ex;
        lws_sorted_usec_list_t linger;
};

static void close_fd(struct process *p, int i)
{
        loop_unwatch(&p->watch[i]);
        if (p->fds[i] >= 0)
                close(p->fds[i]);
        p->fds[i] = -1;
}

static void process_free(struct process *p)
{
        for (int i = 0; i < 3; i++)
                close_fd(p, i);
        loop_timer_stop(&p->linger);
        free(p);
}

/* Reads one piece of output i; false at its end. */
static bool pump(struct process *p, int i)
{
        static uint8_t data[READ_PIECE];
        ssize_t n;

        if (p->fds[i] < 0)
                return false;
        n = read(p->fds[i], data, sizeof(data));
        if (n <= 0) {
                if (n < 0 && (errno == EAGAIN || errno == EINTR))
                        return true;
                close_fd(p, i);
                return false;
        }
        if (p->ops)
                p->ops->output(p->ctx, i, data, (size_t)n);
        return true;
}

void process_drain(struct process *p)
{
        for (int i = 1; i < 3 && !p->held; i++) {
                /* Each pipe as far as it goes now, but for at most
                 * DRAIN_TURN_READS pieces: a command that writes without
                 * end (yes, cat /dev/zero) would otherwise keep the one
                 * event loop, and every other tenant, waiting for as long
                 * as it runs. What is left wakes the loop again. */
                for (int n = 0; n < DRAIN_TURN_READS && !p->held && p->fds[i] >= 0 &&
                                pump(p, i) && p->fds[i] >= 0;
                     n++) {
                        int pending = 0;

                        if (ioctl(p->fds[i], FIONREAD, &pending) < 0 || pending == 0)
                                break;
                }
        }
}

/* The end, once the process exited and both outputs are at their end. */
static void maybe_end(struct process *p)
{
        if (!p->exited || p->fds[1] >= 0 || p->fds[2] >= 0)
                return;
        if (p->ops)
                p->ops->ended(p->ctx, &p->ex);
        process_free(p);
}

static void on_output(void *arg)
{
        struct process *p = arg;

        process_drain(p);
        maybe_end(p); /* may free p */
}

static void on_linger(lws_sorted_usec_list_t *sul)
{
        struct process *p = lws_container_of(sul, struct process, linger);

        /* Held, what is left is still to be read, not cut off. */
        if (p->held) {
                loop_timer_start(&p->linger, on_linger, LINGER_MS);
                return;
        }
        process_drain(p);
        close_fd(p, 1);
        close_fd(p, 2);
        maybe_end(p);
}

static void on_started(void *ctx, const struct hostmsg_started *m, int *fds, size_t nfds);
static void on_failed(void *ctx, const struct hostmsg_failed *m);
static void on_exited(void *ctx, const struct hostmsg_exit *m);
static const struct host_process_ops host_ops = {on_started, on_failed, on_exited};

static void on_started(void *ctx, const struct hostmsg_started *m, int *fds, size_t nfds)
{
        struct process *p = ctx;

        p->attached = true;
        for (size_t i = 0; i < nfds; i++) {
                if (i > 2) {
                        close(fds[i]);
                        continue;
                }
                p->fds[i] = fds[i];
                fcntl(fds[i], F_SETFL, fcntl(fds[i], F_GETFL) | O_NONBLOCK);
                if (i > 0)
                        loop_watch_fd(fds[i], on_output, p, &p->watch[i]);
        }
        /* A terminal's one descriptor is both ends: a copy is watched for
         * its output, the master itself takes the input. */
        if (p->pty && nfds == 1) {
                p->fds[1] = fcntl(fds[0], F_DUPFD_CLOEXEC, 0);
                if (p->fds[1] >= 0)
                        loop_watch_fd(p->fds[1], on_output, p, &p->watch[1]);
        }
        /* Without stdin, the process reads end of file at once; a
         * terminal's input is always open. */
        if (!p->keep_stdin && !p->pty)
                close_fd(p, 0);
        if (p->ops && p->ops->started)
                p->ops->started(p->ctx);
}

static void on_failed(void *ctx, const struct hostmsg_failed *m)
{
        struct process *p = ctx;

        if (p->ops)
                p->ops->failed(p->ctx, m->message);
        process_free(p);
}

static void on_exited(void *ctx, const struct hostmsg_exit *m)
{
        struct process *p = ctx;

        /* The end of the incarnation the checkpoint was taken from, killed
         * after it: the restored one, not attached yet, still listens. */
        if (p->adopted && !p->attached) {
                host_listen(p->id, NULL, &host_ops, p);
                return;
        }

        p->exited = true;
        p->ex = *m;
        process_drain(p);
        if (p->fds[1] >= 0 || p->fds[2] >= 0)
                loop_timer_start(&p->linger, on_linger, LINGER_MS);
        else
                maybe_end(p);
}


int process_start(struct hostmsg_start *start, bool keep_stdin, const struct process_ops *ops,
                  void *ctx, struct process **out)
{
        struct process *p = calloc(1, sizeof(*p));
        int rc = -ENOMEM;

        *out = NULL;
        if (!p || jp_uuid4(p->id) < 0)
                goto fail;
        p->fds[0] = p->fds[1] = p->fds[2] = -1;
        p->ops = ops;
        p->ctx = ctx;
        p->keep_stdin = keep_stdin;
        p->pty = start->pty;
        start->kernel = false;
        snprintf(start->id, sizeof(start->id), "%s", p->id);
        rc = host_start(start, &host_ops, p);
        if (rc < 0)
                goto fail;
        *out = p;
        return 0;
fail:
        free(p);
        return rc;
}

int process_adopt(const char *id, bool keep_stdin, bool pty, const struct process_ops *ops,
                  void *ctx, struct process **out)
{
        struct process *p = calloc(1, sizeof(*p));
        int rc;

        *out = NULL;
        if (!p)
                return -ENOMEM;
        snprintf(p->id, sizeof(p->id), "%s", id);
        p->fds[0] = p->fds[1] = p->fds[2] = -1;
        p->ops = ops;
        p->ctx = ctx;
        p->keep_stdin = keep_stdin;
        p->pty = pty;
        p->adopted = true;
        rc = host_listen(p->id, NULL, &host_ops, p);
        if (rc < 0) {
                free(p);
                return rc;
        }
        *out = p;
        return 0;
}

bool process_attached(const struct process *p)
{
        return !p->adopted || p->attached;
}

void process_forget(struct process **pp)
{
        struct process *p = *pp;

        *pp = NULL;
        if (!p)
                return;
        host_unlisten(p->id, p);
        process_free(p);
}

const char *process_id(const struct process *p)
{
        return p->id;
}

bool process_exited(const struct process *p)
{
        return p->exited;
}

bool process_stdin_open(const struct process *p)
{
        return p->fds[0] >= 0;
}

int process_write_stdin(struct process *p, const void *data, size_t len)
{
        const char *at = data;

        if (p->fds[0] < 0)
                return -EPIPE;
        while (len) {
                ssize_t n = write(p->fds[0], at, len);

                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0)
                        return -errno;
                at += n;
                len -= (size_t)n;
        }
        return 0;
}

int process_resize(struct process *p, uint16_t rows, uint16_t cols)
{
        struct winsize size = {.ws_row = rows, .ws_col = cols};

        if (!p->pty || p->fds[0] < 0)
                return -ENOTTY;
        /* On the master: the kernel tells the terminal's foreground group
         * (SIGWINCH). */
        if (ioctl(p->fds[0], TIOCSWINSZ, &size) < 0)
                return -errno;
        return 0;
}

int process_stdin_fd(const struct process *p)
{
        return p->fds[0];
}

void process_close_stdin(struct process *p)
{
        close_fd(p, 0);
}

void process_hold_output(struct process *p, bool hold)
{
        if (p->held == hold)
                return;
        p->held = hold;
        for (int i = 1; i < 3; i++)
                loop_pause_read(p->watch[i], hold);
}

void process_signal(struct process *p, int sig)
{
        if (sig == SIGKILL)
                host_stop(p->id);
        else
                host_signal(p->id, sig);
}

void process_abandon(struct process **pp)
{
        struct process *p = *pp;

        *pp = NULL;
        if (!p)
                return;
        p->ops = NULL;
        close_fd(p, 0);
        host_stop(p->id);
}
