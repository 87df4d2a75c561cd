/* What host.c (the link to the kernel-host) and host_ask.c (the requests
 * it answers by a sandbox's id) share. Nothing else includes this. */
#ifndef GLOVEBOX_HOST_PRIVATE_H
#define GLOVEBOX_HOST_PRIVATE_H

#include "protocol/hostmsg.h"

#include <jansson.h>

/* Sends type with body (taken, NULL: -ENOMEM) on the link: 0 or -errno
 * (-EPIPE without a kernel-host). */
int host_send_json(enum hostmsg_type type, json_t *body);
/* An answer (CHECKPOINTED, SANDBOX_RELIMITED) to whoever waits for it. */
void host_answer(enum hostmsg_type type, const struct hostmsg_failed *m);
/* The kernel-host died: everyone waiting for an answer hears EPIPE. */
void host_answers_lose(void);

#endif
