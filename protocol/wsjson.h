/* The default ("JSON") WebSocket format of Jupyter's kernel channels.
 *
 * A message without buffers is one text frame:
 *   {"channel", "header", "msg_id", "msg_type", "parent_header", "metadata",
 *    "content", "buffers": []}
 * A message with buffers is one binary frame of big-endian uint32s:
 *   [nbufs][offset_0 .. offset_{nbufs-1}][JSON][buffer 1]..[buffer nbufs-1]
 * with nbufs = 1 + #buffers and offset_0 = 4 * (nbufs + 1). */
#ifndef GLOVEBOX_WSJSON_H
#define GLOVEBOX_WSJSON_H

#include "protocol/buf.h"
#include "protocol/message.h"

#include <stdbool.h>

/* Decodes a frame from a client. Leniency, as Jupyter's own clients need:
 * a missing channel means shell; buffers may be absent, [] or {}; metadata,
 * parent_header and content default to {}; bytes that are not UTF-8 in a
 * text frame become U+FFFD. The JSON parts are re-encoded compactly into
 * msg->owned; buffers point into data. On failure returns -EBADMSG and a
 * reason in err (errlen bytes). */
int jp_wsjson_decode(const uint8_t *data, size_t len, bool binary, struct jp_msg *msg, char *err,
                     size_t errlen);

/* Appends the frame for msg to out (which may already hold a prefix, such as
 * headroom). The JSON parts are embedded as they are, never re-encoded.
 * Sets *binary when the frame must be sent as binary (it has buffers).
 * Returns 0 or a negative errno from the buffer. */
int jp_wsjson_encode(const struct jp_msg *msg, const char *msg_id, const char *msg_type,
                     struct buf *out, bool *binary);

/* The same frame without the content's bytes, for a sender that writes
 * them from where they are: the frame is the appended bytes up to
 * *content_at (counted from where this call started appending), then
 * msg->content, then the rest of the appended bytes. */
int jp_wsjson_encode_envelope(const struct jp_msg *msg, const char *msg_id, const char *msg_type,
                              struct buf *out, bool *binary, size_t *content_at);

/* Length of the well-formed UTF-8 sequence at p (left bytes there), or 0
 * when it is not one. */
size_t jp_utf8_sequence(const uint8_t *p, size_t left);
/* True when data is well-formed UTF-8. */
bool jp_utf8_valid(const uint8_t *data, size_t len);

#endif
