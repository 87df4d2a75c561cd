/* The v1.kernel.websocket.jupyter.org WebSocket format.
 *
 * One binary frame of little-endian uint64s: offset_number = 6 + #buffers,
 * then offset_number offsets (offset_0 = 8 * (1 + offset_number), the last
 * is the frame's length), then the parts they delimit: channel, header,
 * parent_header, metadata, content, buffers. The JSON parts are exactly the
 * ZMQ frames, so both directions relay them without touching the JSON. */
#ifndef GLOVEBOX_WSV1_H
#define GLOVEBOX_WSV1_H

#include "protocol/buf.h"
#include "protocol/message.h"

#define JP_WSV1_PROTOCOL "v1.kernel.websocket.jupyter.org"

/* Splits a frame into msg (views into data, nothing allocated). Returns 0 or
 * -EBADMSG (short frame, offsets out of order or out of range, unknown
 * channel, too many buffers). */
int jp_wsv1_decode(const uint8_t *data, size_t len, struct jp_msg *msg);

/* Appends the frame for msg to out; 0 or a negative errno from the buffer. */
int jp_wsv1_encode(const struct jp_msg *msg, struct buf *out);
/* The frame without the content's bytes (see jp_wsjson_encode_envelope):
 * they belong *content_at bytes after where this call started appending. */
int jp_wsv1_encode_envelope(const struct jp_msg *msg, struct buf *out, size_t *content_at);

#endif
