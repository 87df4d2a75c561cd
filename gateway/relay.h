/* Messages on their way from a kernel to clients, and the per-client
 * queues that hold them.
 *
 * A relay_msg is one kernel message, copied once out of its ZMQ frames and
 * shared (reference-counted) by every queue it sits in. The WebSocket frame
 * for each wire format is built the first time a client needs it and then
 * reused for every other client of that format. */
#ifndef GLOVEBOX_RELAY_H
#define GLOVEBOX_RELAY_H

#include "protocol/buf.h"
#include "protocol/message.h"

#include <jansson.h>

#include <stdbool.h>
#include <stdint.h>

enum relay_format { RELAY_JSON = 0, RELAY_V1 = 1, RELAY_FORMATS };

struct relay_msg {
        unsigned refs;
        struct jp_msg msg; /* views into data */
        char msg_id[JP_MSG_ID_SIZE];
        char msg_type[JP_MSG_TYPE_SIZE];
        size_t size;       /* bytes of the parts */
        uint8_t *data;
        struct buf frames[RELAY_FORMATS]; /* LWS_PRE bytes of headroom, then the frame */
        bool binary[RELAY_FORMATS];
};

/* Copies msg's parts (not its identities). NULL when out of memory or when
 * the header lacks msg_id/msg_type. The caller holds the one reference. */
struct relay_msg *relay_msg_new(const struct jp_msg *msg);
/* Builds a message the gateway itself publishes (statuses, errors,
 * notices): a fresh header of msg_type, the given parent_header JSON
 * ("{}" when NULL) and content (borrowed). NULL when out of memory. */
struct relay_msg *relay_msg_make(enum jp_channel channel, const char *msg_type,
                                 const char *parent_header, json_t *content);
struct relay_msg *relay_msg_ref(struct relay_msg *m);
void relay_msg_unref(struct relay_msg **m);
/* The WebSocket frame of m in format: *payload has LWS_PRE writable bytes
 * before it. 0 or -ENOMEM. */
int relay_msg_frame(struct relay_msg *m, enum relay_format format, uint8_t **payload, size_t *len,
                    bool *binary);

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
/* Removes the head and hands its reference to the caller; NULL if empty. */
struct relay_msg *outbox_pop(struct outbox *o);
/* Returns how many messages were dropped since the last call and the
 * parent_header of the first of them (caller frees; NULL if none). */
uint64_t outbox_take_dropped(struct outbox *o, char **parent_header);
void outbox_clear(struct outbox *o);

#endif
