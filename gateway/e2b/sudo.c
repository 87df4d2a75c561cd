#include "autoconf.h"

#include "gateway/e2b/sudo.h"
#include "gateway/e2b/e2b.h"
#include "gateway/core/loop.h"
#include "gateway/kernels/process.h"
#include "protocol/log.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define OUTPUT_MAX 512 /* what the service says before it listens: "ready", or why not */

/* One start of one sandbox's service, found again by ids: the sandbox may
 * be gone, or on another box, by the time the kernel-host reports. */
struct start {
        char sandbox_id[FLEETID_SANDBOX_SIZE];
        char box_id[JP_UUID_SIZE];
        e2b_sudo_fn done;
        struct sandbox_waiter ready; /* for the box, before the service starts */
        bool told;                   /* done was called */
        char said[OUTPUT_MAX];
        size_t nsaid;
};

/* The sandbox this start is for, while it is still on the same box. */
static struct e2b_sandbox *owner(const struct start *st)
{
        for (struct e2b_sandbox *s = e2b_sandboxes(); s; s = s->next) {
                if (strcmp(s->id, st->sandbox_id) == 0)
                        return s->box && strcmp(s->box->id, st->box_id) == 0 ? s : NULL;
        }
        return NULL;
}

static void tell(struct start *st, enum e2b_sudo_state state, const char *why)
{
        struct e2b_sandbox *s = owner(st);

        if (st->told)
                return;
        st->told = true;
        if (!s)
                return;
        if (state == E2B_SUDO_FAILED)
                log_warn("e2b sandbox %s: its sudo service did not start: %s", s->id, why);
        s->sudo = state;
        if (st->done)
                st->done(s);
}

static void on_output(void *ctx, int stream, const uint8_t *data, size_t len)
{
        struct start *st = ctx;
        size_t room = sizeof(st->said) - 1 - st->nsaid;

        (void)stream;
        memcpy(st->said + st->nsaid, data, len < room ? len : room);
        st->nsaid += len < room ? len : room;
        st->said[st->nsaid] = '\0';
        if (strstr(st->said, "ready\n"))
                tell(st, E2B_SUDO_READY, NULL);
}

static void on_failed(void *ctx, const char *message)
{
        struct start *st = ctx;

        tell(st, E2B_SUDO_FAILED, message);
        free(st);
}

static void on_ended(void *ctx, const struct hostmsg_exit *ex)
{
        struct start *st = ctx;
        struct e2b_sandbox *s = owner(st);

        (void)ex;
        tell(st, E2B_SUDO_FAILED, st->nsaid ? st->said : "it ended at once");
        /* Gone with its box, or on its own: either way sudo is no more. */
        if (s)
                s->sudo = E2B_SUDO_FAILED;
        free(st);
}

static const struct process_ops ops = {.output = on_output, .failed = on_failed,
                                       .ended = on_ended};

/* The box is made: the service starts in it, as its root. */
static void on_box(struct sandbox_waiter *w, struct sandbox *box, const char *error)
{
        static char *argv[] = {HOSTMSG_SUDO_COMMAND, "--serve", NULL};
        static char *env[] = {"PATH=/usr/sbin:/usr/bin:/sbin:/bin", NULL};
        struct start *st = lws_container_of(w, struct start, ready);
        struct hostmsg_start start = {.as_root = true, .argv = argv, .env = env};
        struct process *p;
        int rc;

        if (error) {
                tell(st, E2B_SUDO_FAILED, error);
                free(st);
                return;
        }
        snprintf(start.sandbox_id, sizeof(start.sandbox_id), "%s", box->id);
        snprintf(start.cwd, sizeof(start.cwd), "/");
        rc = process_start(&start, false, &ops, st, &p);
        if (rc < 0) {
                tell(st, E2B_SUDO_FAILED, strerror(-rc));
                free(st);
        }
}

int e2b_sudo_start(struct e2b_sandbox *s, e2b_sudo_fn done)
{
        struct start *st = calloc(1, sizeof(*st));

        if (!st) {
                log_warn("e2b sandbox %s: cannot start its sudo service: out of memory", s->id);
                s->sudo = E2B_SUDO_FAILED;
                return -ENOMEM;
        }
        s->sudo = E2B_SUDO_STARTING;
        snprintf(st->sandbox_id, sizeof(st->sandbox_id), "%s", s->id);
        snprintf(st->box_id, sizeof(st->box_id), "%s", s->box->id);
        st->done = done;
        st->ready.ready = on_box;
        sandbox_when_ready(s->box, &st->ready);
        return 0;
}
