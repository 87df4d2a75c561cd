/* What the gateway checks in a client's message before a kernel sees it.
 *
 * A kernel drops, without any answer, a message it cannot read (a header
 * without msg_type, JSON that does not parse) or a request it cannot serve
 * (an unknown msg_type, an execute_request without code); the client that
 * sent it would wait for ever. The gateway therefore tells the two apart
 * first: a message that cannot be read at all is malformed (the connection
 * closes with 1007 and the reason), a readable request that the kernel
 * cannot serve is refused (the gateway answers it with an error reply in
 * its parent). */
#ifndef GLOVEBOX_REQUEST_H
#define GLOVEBOX_REQUEST_H

#include "protocol/message.h"

#include <stdbool.h>
#include <stddef.h>

#define JP_REQUEST_REASON_SIZE 160

struct jp_request {
        char msg_id[JP_MSG_ID_SIZE];
        char msg_type[JP_MSG_TYPE_SIZE];
        /* The reply's msg_type: foo_request answers as foo_reply. */
        char reply_type[JP_MSG_TYPE_SIZE + 8];
        /* An ename for a refusal ("UnknownMessageType", "BadRequest"). */
        const char *ename;
        char reason[JP_REQUEST_REASON_SIZE];
        /* The content with what the kernel requires and the spec gives a
         * default for filled in (execute_request's silent), when it lacked
         * it: the caller sends this instead and frees it. NULL otherwise. */
        char *content;
};

/* Checks msg (a client's message, decoded from either WebSocket format).
 * parse_all also checks that parent_header, metadata and content are JSON
 * objects (the v1 format relays them unparsed; the JSON format has parsed
 * them already). Returns 0 (send it, with out->content if set), -EBADMSG
 * (malformed: close with out->reason), -EPROTO (refused: answer with
 * out->ename and out->reason) or -ENOMEM. */
int jp_request_check(const struct jp_msg *msg, bool parse_all, struct jp_request *out);

/* Frees what out holds (its content). */
void jp_request_release(struct jp_request *out);

#endif
