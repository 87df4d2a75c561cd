/* The ZMQ wire codec (messaging spec 5.3):
 *   [identities...] "<IDS|MSG>" signature header parent_header metadata content [buffers...]
 * Frames are views; nothing is copied. */
#ifndef GLOVEBOX_WIRE_H
#define GLOVEBOX_WIRE_H

#include "protocol/message.h"
#include "protocol/sign.h"

#define JP_WIRE_DELIMITER     "<IDS|MSG>"
#define JP_WIRE_DELIMITER_LEN 9
/* identities + delimiter + signature + four JSON parts + buffers */
#define JP_WIRE_MAX_FRAMES (JP_MAX_IDENTITIES + 6 + JP_MAX_BUFFERS)

/* Splits frames into msg (views into the frames; msg->channel is left as
 * is) and checks the signature with signer.
 * Returns 0, -EBADMSG (no delimiter, too few frames, too many identities or
 * buffers) or -EACCES (bad or missing signature): such a message must be
 * dropped, never relayed. */
int jp_wire_decode(const struct jp_bytes *frames, size_t nframes, struct jp_signer *signer,
                   struct jp_msg *msg);

/* Lays out msg as frames, signing it into signature (which the frames point
 * to, so it must outlive them). frames must hold JP_WIRE_MAX_FRAMES.
 * Returns the number of frames or a negative errno. */
int jp_wire_encode(const struct jp_msg *msg, struct jp_signer *signer,
                   char signature[JP_SIGNATURE_HEX_LEN + 1], struct jp_bytes *frames);

#endif
