#include "autoconf.h"

#include "gateway/kernels/zio.h"
#include "gateway/core/heap.h"
#include "gateway/core/loop.h"
#include "protocol/log.h"
#include "protocol/wire.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* A message taken in and not yet handed over (a socket with a queue). */
struct held_msg {
        struct held_msg *next;
        size_t nframes, bytes;
        zmq_msg_t frames[];
};

struct zio {
        void *sock;
        struct loop_watch *watch;
        lws_sorted_usec_list_t pump; /* drains after a send; see zio_send */
        zio_fn fn;
        void *arg;
        int receiving;   /* guards against re-entry from fn */
        zmq_msg_t *held; /* the frames fn is looking at (zio_take) */
        int nheld;
        /* the socket's own queue (zio_set_queue), when queue_max > 0 */
        size_t queue_max, queue_bytes;
        struct held_msg *queue_head, *queue_tail;
        zio_drop_fn on_drop;
};

static int recv_message(void *sock, zmq_msg_t *msgs, size_t max);

static void held_free(struct held_msg *h)
{
        for (size_t i = 0; i < h->nframes; i++)
                zmq_msg_close(&h->frames[i]);
        free(h);
}

static void queue_clear(struct zio *z)
{
        while (z->queue_head) {
                struct held_msg *h = z->queue_head;

                z->queue_head = h->next;
                held_free(h);
        }
        z->queue_tail = NULL;
        z->queue_bytes = 0;
}

void zio_set_queue(struct zio *z, size_t max_bytes, zio_drop_fn on_drop)
{
        z->queue_max = max_bytes;
        z->on_drop = on_drop;
}

static void views_of(zmq_msg_t *msgs, size_t n, struct jp_bytes *frames)
{
        for (size_t i = 0; i < n; i++)
                frames[i] = (struct jp_bytes){zmq_msg_data(&msgs[i]), zmq_msg_size(&msgs[i])};
}

/* Takes in every message ZMQ holds for z (their frames are moved, not
 * copied), dropping the oldest past the bound. */
static void queue_take_in(struct zio *z)
{
        zmq_msg_t msgs[JP_WIRE_MAX_FRAMES];
        struct jp_bytes frames[JP_WIRE_MAX_FRAMES];
        int n;

        for (;;) {
                struct held_msg *h;

                n = recv_message(z->sock, msgs, JP_WIRE_MAX_FRAMES);
                if (n == 0)
                        break;
                if (n < 0)
                        continue;
                h = malloc(sizeof(*h) + (size_t)n * sizeof(zmq_msg_t));
                if (!h) {
                        for (int i = 0; i < n; i++)
                                zmq_msg_close(&msgs[i]);
                        continue;
                }
                h->next = NULL;
                h->nframes = (size_t)n;
                h->bytes = 0;
                for (int i = 0; i < n; i++) {
                        zmq_msg_init(&h->frames[i]);
                        zmq_msg_move(&h->frames[i], &msgs[i]);
                        h->bytes += zmq_msg_size(&h->frames[i]);
                }
                if (z->queue_tail)
                        z->queue_tail->next = h;
                else
                        z->queue_head = h;
                z->queue_tail = h;
                z->queue_bytes += h->bytes;
                while (z->queue_bytes > z->queue_max && z->queue_head != h) {
                        struct held_msg *old = z->queue_head;

                        z->queue_head = old->next;
                        z->queue_bytes -= old->bytes;
                        views_of(old->frames, old->nframes, frames);
                        if (z->on_drop)
                                z->on_drop(z->arg, frames, old->nframes);
                        held_free(old);
                }
        }
}

#define ZIO_MAX_SOCKETS 65536

static void *zmq_context;

static void *context(void)
{
        if (!zmq_context) {
                zmq_context = zmq_ctx_new();
                if (zmq_context) {
                        zmq_ctx_set(zmq_context, ZMQ_BLOCKY, 0);
                        /* Three sockets per kernel and three per client
                         * session: ZMQ's default of 1023 stops at ~150
                         * kernels. The descriptor limit is the real bound. */
                        zmq_ctx_set(zmq_context, ZMQ_MAX_SOCKETS, ZIO_MAX_SOCKETS);
                }
        }
        return zmq_context;
}

/* Receives one whole message into msgs; returns the frame count, 0 when
 * nothing is waiting, or -1 for a message of more than max frames (which is
 * read to its end and dropped). */
static int recv_message(void *sock, zmq_msg_t *msgs, size_t max)
{
        size_t n = 0;
        int overflow = 0;
        zmq_msg_t extra;

        for (;;) {
                zmq_msg_t *m = n < max ? &msgs[n] : &extra;
                int more;

                zmq_msg_init(m);
                /* Frames of one message arrive together: EAGAIN can only
                 * come before the first. */
                if (zmq_msg_recv(m, sock, ZMQ_DONTWAIT) < 0) {
                        zmq_msg_close(m);
                        break;
                }
                more = zmq_msg_more(m);
                /* (A large frame was received into a buffer of its size:
                 * the next ones are better reused than mapped afresh.) */
                heap_message_seen(zmq_msg_size(m));
                if (m == &extra) {
                        zmq_msg_close(m);
                        overflow = 1;
                } else {
                        n++;
                }
                if (!more)
                        break;
        }
        if (overflow) {
                for (size_t i = 0; i < n; i++)
                        zmq_msg_close(&msgs[i]);
                return -1;
        }
        return (int)n;
}

static void on_pump(lws_sorted_usec_list_t *sul);

/* What one socket may take in per turn of the loop. A kernel can print
 * faster than the gateway relays: draining its socket to the end would
 * then never end, and no client (nor any other kernel) would be served
 * meanwhile. The rest waits for the next turn. */
#define DRAIN_TURN_MESSAGES 256
#define DRAIN_TURN_BYTES    (8 * 1024 * 1024)

/* A socket with a queue: everything in, a turn's worth out. */
static void drain_queue(struct zio *z)
{
        struct jp_bytes frames[JP_WIRE_MAX_FRAMES];
        size_t taken = 0, bytes = 0;

        queue_take_in(z);
        while (z->queue_head && taken < DRAIN_TURN_MESSAGES && bytes < DRAIN_TURN_BYTES) {
                struct held_msg *h = z->queue_head;

                z->queue_head = h->next;
                if (!z->queue_head)
                        z->queue_tail = NULL;
                z->queue_bytes -= h->bytes;
                taken++;
                bytes += h->bytes;
                views_of(h->frames, h->nframes, frames);
                z->held = h->frames;
                z->nheld = (int)h->nframes;
                z->fn(z->arg, z, frames, h->nframes);
                z->held = NULL;
                z->nheld = 0;
                held_free(h);
                if (!z->sock)
                        return;
        }
        if (z->queue_head)
                loop_timer_start(&z->pump, on_pump, 0);
}

static void drain(struct zio *z)
{
        zmq_msg_t msgs[JP_WIRE_MAX_FRAMES];
        struct jp_bytes frames[JP_WIRE_MAX_FRAMES];
        size_t taken = 0, bytes = 0;
        int n;

        if (z->receiving)
                return;
        z->receiving = 1;
        if (z->queue_max) {
                drain_queue(z);
                goto out;
        }
        for (;;) {
                if (taken >= DRAIN_TURN_MESSAGES || bytes >= DRAIN_TURN_BYTES) {
                        /* ZMQ_FD is edge-triggered: without this nobody
                         * would come back for what is left. */
                        loop_timer_start(&z->pump, on_pump, 0);
                        break;
                }
                n = recv_message(z->sock, msgs, JP_WIRE_MAX_FRAMES);
                if (n == 0)
                        break;
                taken++;
                if (n < 0) {
                        static struct log_limit too_many;

                        /* (A kernel can send these as fast as it likes.) */
                        log_warn_limited(&too_many, "dropped a ZMQ message with too many frames");
                        continue;
                }
                for (int i = 0; i < n; i++) {
                        frames[i] =
                            (struct jp_bytes){zmq_msg_data(&msgs[i]), zmq_msg_size(&msgs[i])};
                        bytes += frames[i].len;
                }
                z->held = msgs;
                z->nheld = n;
                z->fn(z->arg, z, frames, (size_t)n);
                z->held = NULL;
                z->nheld = 0;
                for (int i = 0; i < n; i++)
                        zmq_msg_close(&msgs[i]);
                /* fn may have closed this socket. */
                if (!z->sock)
                        break;
        }
out:
        z->receiving = 0;
        if (!z->sock) {
                queue_clear(z);
                free(z);
        }
}

int zio_take(struct zio *z, const void *data, zmq_msg_t *out)
{
        for (int i = 0; i < z->nheld; i++) {
                if (zmq_msg_size(&z->held[i]) && zmq_msg_data(&z->held[i]) == data) {
                        zmq_msg_init(out);
                        /* The moved-from frame is empty; closing it is a no-op. */
                        return zmq_msg_move(out, &z->held[i]) == 0 ? 0 : -errno;
                }
        }
        return -ENOENT;
}

static void on_readable(void *arg)
{
        struct zio *z = arg;
        int events = 0;
        size_t len = sizeof(events);

        /* Reading ZMQ_EVENTS also processes the socket's pending commands,
         * which is what re-arms the edge-triggered descriptor. */
        if ((zmq_getsockopt(z->sock, ZMQ_EVENTS, &events, &len) == 0 && (events & ZMQ_POLLIN)) ||
            z->queue_head)
                drain(z);
}

static void on_pump(lws_sorted_usec_list_t *sul)
{
        struct zio *z = lws_container_of(sul, struct zio, pump);

        on_readable(z);
}

int zio_open(int type, const char *endpoint, const char *identity, long long max_frame_bytes,
             zio_fn fn, void *arg, struct zio **out)
{
        struct zio *z;
        int zero = 0, hwm = 100000, ivl = 10;
        int64_t maxmsg = max_frame_bytes;
        int fd;
        size_t fdlen = sizeof(fd);
        int rc;

        *out = NULL;
        if (!context())
                return -ENOMEM;
        z = calloc(1, sizeof(*z));
        if (!z)
                return -ENOMEM;
        z->fn = fn;
        z->arg = arg;
        z->sock = zmq_socket(context(), type);
        if (!z->sock) {
                rc = -zmq_errno();
                free(z);
                return rc;
        }
        zmq_setsockopt(z->sock, ZMQ_LINGER, &zero, sizeof(zero));
        zmq_setsockopt(z->sock, ZMQ_RCVHWM, &hwm, sizeof(hwm));
        zmq_setsockopt(z->sock, ZMQ_SNDHWM, &hwm, sizeof(hwm));
        zmq_setsockopt(z->sock, ZMQ_MAXMSGSIZE, &maxmsg, sizeof(maxmsg));
        /* The kernel binds a moment after it starts; retry quickly. */
        zmq_setsockopt(z->sock, ZMQ_RECONNECT_IVL, &ivl, sizeof(ivl));
        if (identity)
                zmq_setsockopt(z->sock, ZMQ_ROUTING_ID, identity, strlen(identity));
        if (type == ZMQ_SUB)
                zmq_setsockopt(z->sock, ZMQ_SUBSCRIBE, "", 0);
        if (zmq_connect(z->sock, endpoint) < 0 ||
            zmq_getsockopt(z->sock, ZMQ_FD, &fd, &fdlen) < 0) {
                rc = -zmq_errno();
                goto fail;
        }
        rc = loop_watch_fd(fd, on_readable, z, &z->watch);
        if (rc < 0)
                goto fail;
        *out = z;
        return 0;
fail:
        zmq_close(z->sock);
        free(z);
        return rc;
}

void zio_rebind(struct zio *z, zio_fn fn, void *arg)
{
        z->fn = fn;
        z->arg = arg;
}

int zio_send(struct zio *z, const struct jp_bytes *frames, size_t nframes)
{
        for (size_t i = 0; i < nframes; i++) {
                int flags = ZMQ_DONTWAIT | (i + 1 < nframes ? ZMQ_SNDMORE : 0);

                if (zmq_send(z->sock, frames[i].ptr, frames[i].len, flags) < 0) {
                        /* A multipart message is all or nothing: a failure
                         * on the first frame drops it whole. */
                        return -zmq_errno();
                }
        }
        /* Sending may consume the signal that announced incoming messages;
         * look again on the next turn of the loop (not now: we may be inside
         * this socket's own handler). */
        loop_timer_start(&z->pump, on_pump, 0);
        return 0;
}

void zio_close(struct zio **zp)
{
        struct zio *z = *zp;

        if (!z)
                return;
        loop_unwatch(&z->watch);
        loop_timer_stop(&z->pump);
        zmq_close(z->sock);
        z->sock = NULL;
        /* Inside its own handler the drain loop frees it on the way out. */
        if (!z->receiving) {
                queue_clear(z);
                free(z);
        }
        *zp = NULL;
}

void zio_shutdown(void)
{
        if (zmq_context) {
                zmq_ctx_term(zmq_context);
                zmq_context = NULL;
        }
}
