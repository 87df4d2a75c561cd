/* ZMQ sockets driven by the gateway's event loop.
 *
 * Each socket's ZMQ_FD is watched by the loop; when it wakes, every waiting
 * message is received (ZMQ_FD is edge-triggered, so the socket is always
 * drained) and handed to the socket's function as an array of frames that
 * are valid only during the call. */
#ifndef GLOVEBOX_ZIO_H
#define GLOVEBOX_ZIO_H

#include "protocol/message.h"

#include <stddef.h>
#include <zmq.h>

struct zio;
/* Room for a routing id (zio_open's identity) and its NUL. */
#define ZIO_IDENTITY_SIZE 64
typedef void (*zio_fn)(void *arg, struct zio *z, const struct jp_bytes *frames, size_t nframes);

/* Opens a socket of type (ZMQ_DEALER, ZMQ_SUB, ...) connected to endpoint;
 * identity (may be NULL) becomes its routing id; SUB sockets subscribe to
 * everything. Frames larger than max_frame_bytes make ZMQ drop the peer.
 * Returns 0 or -errno. */
int zio_open(int type, const char *endpoint, const char *identity, long long max_frame_bytes,
             zio_fn fn, void *arg, struct zio **out);
/* From now on fn(arg, ...) hears what arrives on z. */
void zio_rebind(struct zio *z, zio_fn fn, void *arg);
/* A message dropped from a socket's queue, its frames valid during the call. */
typedef void (*zio_drop_fn)(void *arg, const struct jp_bytes *frames, size_t nframes);
/* Gives z a queue of its own: every turn of the loop takes in all that ZMQ
 * holds for it, and hands fn a turn's worth. Past max_bytes waiting, the
 * oldest messages are dropped (never the newest), each told to on_drop. A
 * producer faster than the gateway then costs max_bytes, not whatever
 * ZMQ's own queue (bounded in messages only) would hold. */
void zio_set_queue(struct zio *z, size_t max_bytes, zio_drop_fn on_drop);
/* Sends frames as one message without blocking; -EAGAIN when the queue is
 * full. */
int zio_send(struct zio *z, const struct jp_bytes *frames, size_t nframes);
/* During the socket's function: moves the received frame whose bytes start
 * at data into out (initialised here; the caller closes it), so that it
 * outlives the call without a copy. 0 or -ENOENT. */
int zio_take(struct zio *z, const void *data, zmq_msg_t *out);
/* Closes the socket (dropping anything unsent) and nulls *z. */
void zio_close(struct zio **z);
/* Ends the ZMQ context once every socket is closed. */
void zio_shutdown(void);

#endif
