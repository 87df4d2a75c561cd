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
typedef void (*zio_fn)(void *arg, struct zio *z, const struct jp_bytes *frames, size_t nframes);

/* Opens a socket of type (ZMQ_DEALER, ZMQ_SUB, ...) connected to endpoint;
 * identity (may be NULL) becomes its routing id; SUB sockets subscribe to
 * everything. Frames larger than max_frame_bytes make ZMQ drop the peer.
 * Returns 0 or -errno. */
int zio_open(int type, const char *endpoint, const char *identity, long long max_frame_bytes,
             zio_fn fn, void *arg, struct zio **out);
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
