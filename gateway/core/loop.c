#include "autoconf.h"

#include "gateway/core/loop.h"
#include "protocol/log.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <time.h>
#include <unistd.h>

/* The descriptors watched (ZMQ sockets, pipes, the kernel-host link...),
 * about six per kernel, are in one epoll set of ours; libwebsockets' poll
 * loop watches only that set's descriptor. poll() looks at every
 * descriptor it is given on every turn: with them all in its set, a
 * gateway holding 150 kernels spent 4 times the CPU per relayed cell of
 * one holding a single kernel. */
struct loop_watch {
        int fd; /* our duplicate, in the set; -1 once closed */
        bool paused, want_write;
        uint32_t events; /* what the set asks for it now */
        loop_watch_fn fn;
        loop_watch_fn on_write; /* NULL: never asked for */
        void *arg;
        struct loop_watch *next_free; /* unwatched during a dispatch */
};

#define EVENTS_PER_TURN 64

static struct lws_context *loop_ctx;
static int epoll_fd = -1;
static char epoll_marker; /* the set's wsi's user data */
static unsigned dispatching;
/* Unwatched while a dispatch may still hold them: freed when it ends. */
static struct loop_watch *to_free;

void loop_set_context(struct lws_context *ctx)
{
        loop_ctx = ctx;
}

struct lws_context *loop_context(void)
{
        return loop_ctx;
}

static void release(struct loop_watch *w)
{
        if (dispatching) {
                w->next_free = to_free;
                to_free = w;
        } else {
                free(w);
        }
}

/* Asks the set for what w wants now. */
static void update_events(struct loop_watch *w)
{
        uint32_t events = (w->paused ? 0 : EPOLLIN) | (w->want_write ? EPOLLOUT : 0);
        struct epoll_event ev = {.events = events, .data.ptr = w};

        if (w->fd < 0 || events == w->events)
                return;
        if (epoll_ctl(epoll_fd, EPOLL_CTL_MOD, w->fd, &ev) == 0)
                w->events = events;
}

/* Takes w's duplicate out of the set and closes it: w is called no more. */
static void stop_watching(struct loop_watch *w)
{
        if (w->fd < 0)
                return;
        if (epoll_fd >= 0)
                epoll_ctl(epoll_fd, EPOLL_CTL_DEL, w->fd, NULL);
        close(w->fd);
        w->fd = -1;
}

/* Closes our duplicate, as poll's loop closed it on a hang-up: the owner
 * hears once more, to read its end, and releases the watch. */
static void hang_up(struct loop_watch *w)
{
        stop_watching(w);
        if (w->fn)
                w->fn(w->arg);
}

static void dispatch(void)
{
        struct epoll_event ev[EVENTS_PER_TURN];
        int n = epoll_wait(epoll_fd, ev, EVENTS_PER_TURN, 0);

        dispatching++;
        for (int i = 0; i < n; i++) {
                struct loop_watch *w = ev[i].data.ptr;
                uint32_t e = ev[i].events;

                /* Each check again: a callback may unwatch it, or any. */
                if ((e & EPOLLOUT) && w->want_write) {
                        w->want_write = false;
                        update_events(w);
                        if (w->on_write)
                                w->on_write(w->arg);
                }
                if ((e & EPOLLIN) && !w->paused && w->fn)
                        w->fn(w->arg);
                /* (An unwatched one's descriptor is closed: -1.) */
                if ((e & (EPOLLHUP | EPOLLERR)) && w->fd >= 0)
                        hang_up(w);
        }
        if (--dispatching == 0) {
                while (to_free) {
                        struct loop_watch *w = to_free;

                        to_free = w->next_free;
                        free(w);
                }
        }
}

int loop_protocol_callback(struct lws *wsi, enum lws_callback_reasons reason, void *user,
                           void *in, size_t len)
{
        if (lws_get_opaque_user_data(wsi) != &epoll_marker)
                return 0;
        switch (reason) {
        case LWS_CALLBACK_RAW_RX_FILE:
                dispatch();
                return 0;
        case LWS_CALLBACK_RAW_CLOSE_FILE:
                /* Only as the context goes: lws closed the set. */
                epoll_fd = -1;
                return 0;
        default:
                return 0;
        }
}

/* The set, made and handed to lws on the first watch. */
static int epoll_start(void)
{
        lws_sock_file_fd_type desc;
        struct lws *wsi;

        if (epoll_fd >= 0)
                return 0;
        desc.filefd = epoll_create1(EPOLL_CLOEXEC);
        if (desc.filefd < 0)
                return -errno;
        wsi = lws_adopt_descriptor_vhost(lws_get_vhost_by_name(loop_ctx, "default"),
                                         LWS_ADOPT_RAW_FILE_DESC, desc, LOOP_PROTOCOL_NAME, NULL);
        if (!wsi) {
                close(desc.filefd);
                return -ENOMEM;
        }
        lws_set_opaque_user_data(wsi, &epoll_marker);
        epoll_fd = desc.filefd;
        return 0;
}

int loop_watch_fd(int fd, loop_watch_fn fn, void *arg, struct loop_watch **out)
{
        struct epoll_event ev = {.events = EPOLLIN};
        struct loop_watch *w;
        int rc;

        *out = NULL;
        rc = epoll_start();
        if (rc < 0)
                return rc;
        w = calloc(1, sizeof(*w));
        if (!w)
                return -ENOMEM;
        /* Our own duplicate: the owner's (a ZMQ socket's) descriptor stays
         * as it is, and the set holds exactly what we close. */
        w->fd = fcntl(fd, F_DUPFD_CLOEXEC, 3);
        if (w->fd < 0) {
                rc = -errno;
                free(w);
                return rc;
        }
        w->fn = fn;
        w->arg = arg;
        w->events = EPOLLIN;
        ev.data.ptr = w;
        if (epoll_ctl(epoll_fd, EPOLL_CTL_ADD, w->fd, &ev) < 0) {
                rc = -errno;
                close(w->fd);
                free(w);
                return rc;
        }
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
        if (w && w->fd >= 0 && w->on_write) {
                w->want_write = true;
                update_events(w);
        }
}

void loop_pause_read(struct loop_watch *w, bool paused)
{
        if (w) {
                w->paused = paused;
                update_events(w);
        }
}

void loop_unwatch(struct loop_watch **wp)
{
        struct loop_watch *w = *wp;

        if (!w)
                return;
        *wp = NULL;
        stop_watching(w);
        w->fn = NULL;
        w->on_write = NULL;
        w->arg = NULL;
        release(w);
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
