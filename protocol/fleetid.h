/* Ids that name the host that made them, so that a stateless front proxy
 * can send every request for an id to its owner (docs/several-hosts.md).
 *
 * A host id is 1 to FLEETID_HOST_MAX characters of [a-z0-9]. Its tag is
 * the hex of its ASCII bytes padded with zeros to 12 hex digits ("h1" ->
 * "683100000000"). A kernel, session or terminal id stays a canonical
 * version 4 UUID whose first two groups are the tag
 * ("68310000-0000-4xxx-yxxx-xxxxxxxxxxxx", 74 random bits); an E2B
 * sandbox id is "gb", the tag and 16 random hex digits. Without a host id
 * (single host) ids are as before: fully random UUIDs and "gb" + 16 hex. */
#ifndef GLOVEBOX_FLEETID_H
#define GLOVEBOX_FLEETID_H

#include "protocol/ids.h"

#include <stdbool.h>
#include <stddef.h>

#define FLEETID_HOST_MAX     6
#define FLEETID_TAG_LEN      12                             /* hex digits */
#define FLEETID_SANDBOX_SIZE (2 + FLEETID_TAG_LEN + 16 + 1) /* "gb", tag, random, NUL */
#define FLEETID_SHORT_LEN    8

/* An id's short form, returned by value so that it can be an argument of
 * a call: log_info("[%s] ...", fleetid_short(id).s). */
struct fleetid_short {
        char s[FLEETID_SHORT_LEN + 1];
};

/* True when s is a usable host id. */
bool fleetid_host_valid(const char *s);
/* Writes the host's tag and a NUL; -EINVAL for an invalid host id. */
int fleetid_tag(const char *host, char tag[FLEETID_TAG_LEN + 1]);
/* A random UUID carrying the host's tag, or a plain random one when host
 * is NULL or "". 0 or -errno. */
int fleetid_uuid(const char *host, char out[JP_UUID_SIZE]);
/* An E2B sandbox id: "gb" + tag + 16 hex, or "gb" + 16 hex without a
 * host. 0 or -errno. */
int fleetid_sandbox(const char *host, char out[FLEETID_SANDBOX_SIZE]);
/* The host named by an id of either form, written to host (at least
 * FLEETID_HOST_MAX + 1 bytes); -ENOENT for an id that names none (a
 * single host's id, or not an id at all). */
int fleetid_host_of(const char *id, char *host, size_t size);
/* The short form of an id, as log lines, a kernel's file names in its
 * sandbox and the page's kernel picker show it (static/app.js has the same
 * rule): its first FLEETID_SHORT_LEN characters; for an id that names its
 * host, whose first characters are the host's tag and so the same for all
 * of that host's ids, its last ones, which are random. */
struct fleetid_short fleetid_short(const char *id);

#endif
