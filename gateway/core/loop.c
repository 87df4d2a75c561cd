#include "autoconf.h"

#include "gateway/core/loop.h"
#include "protocol/log.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

struct loop_watch {
        struct lws *wsi;
        loop_watch_fn fn;
        loop_watch_fn on_write; /* NULL: never asked for */
        void *arg;
};

static struct lws_context *loop_ctx;

void loop_set_context(struct lws_context *ctx)
{
        loop_ctx = ctx;
}

struct lws_context *loop_context(void)
{
        return loop_ctx;
}

int loop_protocol_callback(struct lws *wsi, enum lws_callback_reasons reason, void *user,
                           void *in, size_t len)
{
        struct loop_watch *w = lws_get_opaque_user_data(wsi);

        switch (reason) {
        case LWS_CALLBACK_RAW_RX_FILE:
                if (w && w->fn)
                        w->fn(w->arg);
                return 0;
        case LWS_CALLBACK_RAW_WRITEABLE_FILE:
                if (w && w->on_write)
                        w->on_write(w->arg);
                return 0;
        case LWS_CALLBACK_RAW_CLOSE_FILE:
                /* lws closes our duplicate fd: after loop_unwatch, or on its
                 * own when the descriptor hangs up (a pipe's writer went
                 * away). Then the owner hears once more, to read its end,
                 * and frees the watch with loop_unwatch. */
                lws_set_opaque_user_data(wsi, NULL);
                if (!w)
                        return 0;
                w->wsi = NULL;
                if (w->fn)
                        w->fn(w->arg);
                else
                        free(w);
                return 0;
        default:
                return 0;
        }
}

int loop_watch_fd(int fd, loop_watch_fn fn, void *arg, struct loop_watch **out)
{
        lws_sock_file_fd_type desc;
        struct loop_watch *w;
        int dupfd;

        *out = NULL;
        w = calloc(1, sizeof(*w));
        if (!w)
                return -ENOMEM;
        /* lws closes the descriptor it watches when the watch ends; a
         * duplicate keeps the owner's (a ZMQ socket's) descriptor intact. */
        dupfd = fcntl(fd, F_DUPFD_CLOEXEC, 3);
        if (dupfd < 0) {
                free(w);
                return -errno;
        }
        w->fn = fn;
        w->arg = arg;
        desc.filefd = dupfd;
        w->wsi = lws_adopt_descriptor_vhost(lws_get_vhost_by_name(loop_ctx, "default"),
                                            LWS_ADOPT_RAW_FILE_DESC, desc, LOOP_PROTOCOL_NAME,
                                            NULL);
        if (!w->wsi) {
                close(dupfd);
                free(w);
                return -ENOMEM;
        }
        lws_set_opaque_user_data(w->wsi, w);
        *out = w;
        return 0;
}

int loop_watch_fd_rw(int fd, loop_watch_fn on_read, loop_watch_fn on_write, void *arg,
                     struct loop_watch **out)
{
        int rc = loop_watch_fd(fd, on_read, arg, out);

        if (rc == 0)
                (*out)->on_write = on_write;
        return rc;
}

void loop_want_write(struct loop_watch *w)
{
        if (w && w->wsi)
                lws_callback_on_writable(w->wsi);
}

void loop_pause_read(struct loop_watch *w, bool paused)
{
        if (w && w->wsi)
                lws_rx_flow_control(w->wsi, paused ? 0 : 1);
}

void loop_unwatch(struct loop_watch **wp)
{
        struct loop_watch *w = *wp;

        if (!w)
                return;
        *wp = NULL;
        if (!w->wsi) {
                /* lws already closed it. */
                free(w);
                return;
        }
        /* The wsi closes on the next turn of the loop and frees w then. */
        w->fn = NULL;
        w->on_write = NULL;
        w->arg = NULL;
        lws_set_timeout(w->wsi, PENDING_TIMEOUT_KILLED_BY_PARENT, LWS_TO_KILL_ASYNC);
}

void loop_timer_start(lws_sorted_usec_list_t *timer, sul_cb_t fn, double delay_ms)
{
        lws_usec_t us = (lws_usec_t)(delay_ms * 1000.0);

        /* lws reads a timer due in 0 us as no timer at all when it picks
         * how long to wait: the loop then sleeps until some descriptor
         * wakes it (measured: 70-160 ms between turns of a busy kernel's
         * queue). 1 us is the next turn indeed. */
        lws_sul_schedule(loop_ctx, 0, timer, fn, us > 0 ? us : 1);
}

void loop_timer_stop(lws_sorted_usec_list_t *timer)
{
        lws_sul_cancel(timer);
}

double loop_now(void)
{
        struct timespec ts;

        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}
