/* What the kernel-host answers by a sandbox's id: checkpoints and new
 * limits (host.h). */
#include "autoconf.h"

#include "gateway/kernels/host.h"
#include "gateway/kernels/host_private.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* An answer awaited from the kernel-host: a checkpoint's or new limits',
 * by the sandbox's id (one of each at a time per sandbox). */
struct answer_wait {
        struct answer_wait *next;
        enum hostmsg_type answer;
        char id[JP_UUID_SIZE];
        host_checkpointed_fn done;
        void *ctx;
};

static struct answer_wait *answer_waits;

/* Where the wait for answer about id is linked, or NULL: none. */
static struct answer_wait **answer_wait_link(enum hostmsg_type answer, const char *id)
{
        for (struct answer_wait **link = &answer_waits; *link; link = &(*link)->next) {
                if ((*link)->answer == answer && strcmp((*link)->id, id) == 0)
                        return link;
        }
        return NULL;
}

static struct answer_wait *answer_wait_take(enum hostmsg_type answer, const char *id)
{
        struct answer_wait **link = answer_wait_link(answer, id), *w = link ? *link : NULL;

        if (w)
                *link = w->next;
        return w;
}

/* Sends type with body (taken) and waits for answer about sandbox_id. */
static int ask(enum hostmsg_type type, json_t *body, enum hostmsg_type answer,
               const char *sandbox_id, host_checkpointed_fn done, void *ctx)
{
        struct answer_wait *w = NULL;
        int rc = answer_wait_link(answer, sandbox_id) ? -EBUSY : 0;

        if (rc == 0 && !(w = calloc(1, sizeof(*w))))
                rc = -ENOMEM;
        if (rc < 0) {
                json_decref(body);
                return rc;
        }
        w->answer = answer;
        snprintf(w->id, sizeof(w->id), "%s", sandbox_id);
        w->done = done;
        w->ctx = ctx;
        rc = host_send_json(type, body);
        if (rc < 0) {
                free(w);
                return rc;
        }
        w->next = answer_waits;
        answer_waits = w;
        return 0;
}

void host_answer(enum hostmsg_type type, const struct hostmsg_failed *m)
{
        struct answer_wait *w = answer_wait_take(type, m->id);

        if (w) {
                w->done(w->ctx, m->error, m->message, m->bytes);
                free(w);
        }
}

void host_answers_lose(void)
{
        struct answer_wait *waits = answer_waits;

        answer_waits = NULL;
        while (waits) {
                struct answer_wait *w = waits;

                waits = w->next;
                w->done(w->ctx, EPIPE, "the kernel-host died", 0);
                free(w);
        }
}

int host_checkpoint(const char *sandbox_id, const char *name, bool stop, uint64_t room_mb,
                    host_checkpointed_fn done, void *ctx)
{
        struct hostmsg_volume m = {.size_mb = stop ? 1 : 0, .room_mb = room_mb};

        snprintf(m.id, sizeof(m.id), "%s", sandbox_id);
        snprintf(m.volume_id, sizeof(m.volume_id), "%s", name);
        return ask(HOSTMSG_CHECKPOINT, hostmsg_volume_encode(&m), HOSTMSG_CHECKPOINTED, sandbox_id,
                   done, ctx);
}

void host_checkpoint_cancel(const char *sandbox_id)
{
        free(answer_wait_take(HOSTMSG_CHECKPOINTED, sandbox_id));
}

int host_sandbox_relimit(const char *sandbox_id, const struct hostmsg_limits *limits,
                         host_checkpointed_fn done, void *ctx)
{
        struct hostmsg_relimit m = {.limits = *limits};

        snprintf(m.id, sizeof(m.id), "%s", sandbox_id);
        return ask(HOSTMSG_SANDBOX_RELIMIT, hostmsg_relimit_encode(&m), HOSTMSG_SANDBOX_RELIMITED,
                   sandbox_id, done, ctx);
}
