/* E2B's lifecycle autoResume: a sandbox that its timeout paused resumes
 * on the next request to it (code, envd, its ports) instead of answering
 * that it is paused. Each request waits as one sandbox_wake
 * (kernels/sandboxes.h) on the sandbox's list, whoever asks (this
 * family's plane here, ports/ through the lower layer's names), so that
 * any number of them are served by one resume: the one connect starts
 * (lifecycle.c), begun on the loop's next turn. A pause still under way
 * finishes first. Nobody waits longer than WAKE_SECONDS: the SDKs' own
 * request timeout is 60 s, and a caller is told why rather than left
 * hanging. */
#include "autoconf.h"

#include "gateway/e2b/e2b.h"
#include "gateway/e2b/e2b_internal.h"
#include "gateway/e2b/sandbox.h"
#include "gateway/core/http.h"
#include "gateway/core/loop.h"
#include "gateway/core/tenants.h"
#include "gateway/kernels/sandboxes.h"
#include "protocol/log.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define WAKE_SECONDS 55

bool e2b_wakeable(const struct e2b_sandbox *s)
{
        /* One made from a snapshot is not paused: it is being made. */
        return s && s->ready && s->auto_resume && s->phase != E2B_RUNNING &&
               !s->from_snapshot[0] && !s->fork_copy && tenants_exists(s->owner);
}

/* Every waiter of s is told error (NULL: s runs). The list is taken
 * first: a waiter's going on may reach s again. */
static void finish_all(struct e2b_sandbox *s, const char *error)
{
        struct sandbox_wake *w = s->wakes, *next;

        s->wakes = NULL;
        loop_timer_stop(&s->wake_deadline);
        for (; w; w = next) {
                next = w->next;
                sandbox_wake_finish(w, error);
        }
}

static void on_wake_deadline(lws_sorted_usec_list_t *sul)
{
        struct e2b_sandbox *s = lws_container_of(sul, struct e2b_sandbox, wake_deadline);

        log_warn("e2b sandbox %s: not resumed within %d s; its waiting requests are answered",
                 s->id, WAKE_SECONDS);
        finish_all(s, "its resume did not finish in time");
}

/* The resume, on a turn of the loop of its own: nobody is told anything
 * from within the call that asked. */
static void on_wake_start(lws_sorted_usec_list_t *sul)
{
        struct e2b_sandbox *s = lws_container_of(sul, struct e2b_sandbox, wake_start);

        if (!s->wakes || s->phase != E2B_PAUSED)
                return;
        log_info("e2b sandbox %s: a request resumes it (autoResume)", s->id);
        /* Its lifetime again from the resume, as a connect's without a
         * timeout; a refusal reaches e2b_wake_settle with its reason. */
        e2b_resume_begin(s, NULL, 0);
}

static int wake(struct e2b_sandbox *s, struct sandbox_wake *w)
{
        if (!e2b_wakeable(s))
                return s && s->phase == E2B_RUNNING ? -EALREADY : -ENOENT;
        if (!s->wakes)
                loop_timer_start(&s->wake_deadline, on_wake_deadline, WAKE_SECONDS * 1000.0);
        w->next = s->wakes;
        s->wakes = w;
        /* Paused, it resumes; pausing or resuming, the phase's end
         * settles it. */
        if (s->phase == E2B_PAUSED)
                loop_timer_start(&s->wake_start, on_wake_start, 0);
        return 0;
}

void e2b_wake_settle(struct e2b_sandbox *s, const char *error)
{
        if (!s->wakes)
                return;
        if (s->phase == E2B_RUNNING)
                finish_all(s, NULL);
        else if (s->phase == E2B_PAUSED && error)
                finish_all(s, error);
        else if (s->phase == E2B_PAUSED)
                loop_timer_start(&s->wake_start, on_wake_start, 0);
}

void e2b_wake_end(struct e2b_sandbox *s, const char *error)
{
        loop_timer_stop(&s->wake_start);
        finish_all(s, error);
}

/* ---- kernels/sandboxes.h's names ---------------------------------------------- */

bool e2b_name_asleep(const char *name, struct sandbox *shape, const char **owner)
{
        struct e2b_sandbox *s = e2b_find_any(name);

        if (!e2b_wakeable(s))
                return false;
        e2b_traffic_of(s, shape);
        *owner = s->owner;
        return true;
}

int e2b_name_wake(const char *name, struct sandbox_wake *w)
{
        return wake(e2b_find_any(name), w);
}

void e2b_name_wake_cancel(struct sandbox_wake *w)
{
        struct e2b_sandbox *s = e2b_find_any(w->name);

        for (struct sandbox_wake **link = s ? &s->wakes : NULL; link && *link;
             link = &(*link)->next) {
                if (*link == w) {
                        *link = w->next;
                        break;
                }
        }
        if (s && !s->wakes)
                loop_timer_stop(&s->wake_deadline);
}

/* ---- requests on the sandbox's own plane ---------------------------------------- */

struct plane_wait {
        struct sandbox_wake wake;
        struct http_request *r;
        void (*go)(struct http_request *r);
};

/* The client left while it waited. */
static void plane_wait_forget(struct http_request *r)
{
        struct plane_wait *pw = r->ctx;

        r->ctx = NULL;
        if (!pw)
                return;
        sandbox_name_wake_cancel(&pw->wake);
        free(pw);
}

static void plane_woken(struct sandbox_wake *w, const char *error)
{
        struct plane_wait *pw = lws_container_of(w, struct plane_wait, wake);
        struct http_request *r = pw->r;
        void (*go)(struct http_request *r) = pw->go;
        struct tenant_scope saved;

        r->ctx = NULL;
        r->cleanup = NULL;
        free(pw);
        /* A loop callback, not lws's: the request's caller is set here. */
        tenants_scope_enter(&saved);
        if (r->has_caller)
                tenants_set_caller(&r->caller);
        if (error)
                /* What a paused sandbox answers (e2b.c), with why. */
                e2b_reply_error(r, 502, "The sandbox is paused and could not be resumed: %s",
                                error);
        else
                go(r);
        tenants_scope_restore(&saved);
}

void e2b_wake_request(struct e2b_sandbox *s, struct http_request *r,
                      void (*go)(struct http_request *r))
{
        struct plane_wait *pw = calloc(1, sizeof(*pw));
        int rc;

        if (!pw) {
                e2b_reply_error(r, 500, "out of memory");
                return;
        }
        pw->r = r;
        pw->go = go;
        pw->wake.done = plane_woken;
        rc = sandbox_name_wake(s->id, &pw->wake);
        if (rc < 0) {
                free(pw);
                if (rc == -EALREADY)
                        go(r);
                else
                        e2b_reply_error(r, 502,
                                        "The sandbox is paused: connect to it to resume it");
                return;
        }
        r->ctx = pw;
        r->cleanup = plane_wait_forget;
}
