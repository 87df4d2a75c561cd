#include "autoconf.h"

#include "protocol/wire.h"

#include <errno.h>
#include <string.h>

static int is_delimiter(const struct jp_bytes *f)
{
        return f->len == JP_WIRE_DELIMITER_LEN && memcmp(f->ptr, JP_WIRE_DELIMITER, f->len) == 0;
}

int jp_wire_decode(const struct jp_bytes *frames, size_t nframes, struct jp_signer *signer,
                   struct jp_msg *msg)
{
        enum jp_channel channel = msg->channel;
        size_t delim = 0;
        size_t rest;

        while (delim < nframes && !is_delimiter(&frames[delim]))
                delim++;
        if (delim == nframes || delim > JP_MAX_IDENTITIES)
                return -EBADMSG;
        /* signature + header + parent_header + metadata + content */
        rest = nframes - delim - 1;
        if (rest < 5 || rest - 5 > JP_MAX_BUFFERS)
                return -EBADMSG;

        jp_msg_init(msg);
        msg->channel = channel;
        msg->nidentities = delim;
        for (size_t i = 0; i < delim; i++)
                msg->identities[i] = frames[i];
        msg->header = frames[delim + 2];
        msg->parent_header = frames[delim + 3];
        msg->metadata = frames[delim + 4];
        msg->content = frames[delim + 5];
        msg->nbuffers = rest - 5;
        for (size_t i = 0; i < msg->nbuffers; i++)
                msg->buffers[i] = frames[delim + 6 + i];
        return jp_signer_verify(signer, msg, frames[delim + 1].ptr, frames[delim + 1].len);
}

int jp_wire_encode(const struct jp_msg *msg, struct jp_signer *signer,
                   char signature[JP_SIGNATURE_HEX_LEN + 1], struct jp_bytes *frames)
{
        size_t n = 0;
        int rc;

        if (msg->nidentities > JP_MAX_IDENTITIES || msg->nbuffers > JP_MAX_BUFFERS)
                return -E2BIG;
        rc = jp_signer_sign(signer, msg, signature);
        if (rc < 0)
                return rc;
        for (size_t i = 0; i < msg->nidentities; i++)
                frames[n++] = msg->identities[i];
        frames[n++] = (struct jp_bytes){(const uint8_t *)JP_WIRE_DELIMITER, JP_WIRE_DELIMITER_LEN};
        frames[n++] = (struct jp_bytes){(const uint8_t *)signature, strlen(signature)};
        frames[n++] = msg->header;
        frames[n++] = msg->parent_header;
        frames[n++] = msg->metadata;
        frames[n++] = msg->content;
        for (size_t i = 0; i < msg->nbuffers; i++)
                frames[n++] = msg->buffers[i];
        return (int)n;
}
