/* Messages on their way from a kernel to clients, and the per-client
 * queues that hold them.
 *
 * A relay_msg is one kernel message, shared (reference-counted) by every
 * queue it sits in. Its small parts are copied out of the ZMQ frames once; a
 * large content (64 KiB or more: streamed output, images) stays in the ZMQ
 * frame it arrived in. For each wire format the envelope (the frame without
 * the content) is built the first time a client needs it and shared by all
 * clients of that format; a sender copies the frame out, the content
 * straight from where it lies, into its write buffer. */
#ifndef GLOVEBOX_RELAY_H
#define GLOVEBOX_RELAY_H

#include "protocol/buf.h"
#include "protocol/message.h"

#include <jansson.h>
#include <zmq.h>

#include <stdbool.h>
#include <stdint.h>

enum relay_format { RELAY_JSON = 0, RELAY_V1 = 1, RELAY_FORMATS };

#define RELAY_KEEP_MIN (64 * 1024) /* a content this large is not copied */

struct zio;

struct relay_msg {
        unsigned refs;
        struct jp_msg msg; /* views into data (and content_frame) */
        char msg_id[JP_MSG_ID_SIZE];
        char msg_type[JP_MSG_TYPE_SIZE];
        size_t size;       /* bytes of the parts */
        uint8_t *data;     /* the parts, copied (a kept content excepted), after the struct */
        bool kept;
        bool from_gateway; /* made by relay_msg_make, not sent by the kernel */
        zmq_msg_t content_frame; /* the content as ZMQ received it, when kept */
        /* per format: the frame without the content, and where it goes */
        struct buf envelope[RELAY_FORMATS];
        size_t content_at[RELAY_FORMATS];
        bool binary[RELAY_FORMATS];
        bool built[RELAY_FORMATS];
};

/* Copies msg's parts (not its identities), except that a large content is
 * taken over from from (the zio whose function is running; NULL to copy
 * everything). NULL when out of memory or when the header lacks
 * msg_id/msg_type. The caller holds the one reference. */
struct relay_msg *relay_msg_new(const struct jp_msg *msg, struct zio *from);
/* Builds a message the gateway itself publishes (statuses, errors,
 * notices): a fresh header of msg_type, the given parent_header JSON
 * ("{}" when NULL) and content (borrowed). NULL when out of memory. */
struct relay_msg *relay_msg_make(enum jp_channel channel, const char *msg_type,
                                 const char *parent_header, json_t *content);
/* A notice of the gateway's own for clients: a stderr stream message with
 * text, in the cell of parent_header (NULL or "": none). NULL when out of
 * memory. */
struct relay_msg *relay_msg_notice(const char *parent_header, const char *text);
struct relay_msg *relay_msg_ref(struct relay_msg *m);
void relay_msg_unref(struct relay_msg **m);
/* The length of m's WebSocket frame in format, and whether it is binary.
 * 0 or -ENOMEM. */
int relay_msg_frame(struct relay_msg *m, enum relay_format format, size_t *len, bool *binary);
/* Copies len bytes of that frame, from byte from on (within the length
 * relay_msg_frame gave), to out: a frame is written in pieces, so that no
 * copy of a whole large frame is ever made. */
void relay_msg_frame_copy(const struct relay_msg *m, enum relay_format format, size_t from,
                          size_t len, uint8_t *out);

/* Where byte from of that frame lies, and how many bytes follow it there
 * contiguously (at least one, within the frame's length). The bytes stay
 * valid while m is referenced. */
const uint8_t *relay_msg_frame_span(const struct relay_msg *m, enum relay_format format,
                                    size_t from, size_t *len);

/* A bounded FIFO of messages. Past either maximum the oldest are dropped
 * (and counted), but never the newest, so one large message still passes. */
struct outbox {
        struct relay_msg **ring;
        size_t head, count, cap;
        size_t bytes;
        size_t max_bytes, max_count;
        uint64_t dropped;       /* since the last outbox_take_dropped */
        char *dropped_parent;   /* parent_header of the first dropped message */
};

void outbox_init(struct outbox *o, size_t max_bytes, size_t max_count);
/* Adds a reference to m at the tail; 0 or -ENOMEM. */
int outbox_push(struct outbox *o, struct relay_msg *m);
/* Puts m (the caller's reference, taken over) back at the head: a message
 * whose writing was cut off goes out again, whole, to the next sink. 0 or
 * -ENOMEM (then m is released). */
int outbox_unpop(struct outbox *o, struct relay_msg *m);
/* Removes the head and hands its reference to the caller; NULL if empty. */
struct relay_msg *outbox_pop(struct outbox *o);
/* Returns how many messages were dropped since the last call and the
 * parent_header of the first of them (caller frees; NULL if none). */
uint64_t outbox_take_dropped(struct outbox *o, char **parent_header);
void outbox_clear(struct outbox *o);

#endif
