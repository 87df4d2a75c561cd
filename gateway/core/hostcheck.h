/* The defence against DNS rebinding: which names a request's Host header
 * (or HTTP/2 :authority) may carry. A page on evil.example whose name is
 * later made to resolve to the gateway's address is, for the browser, still
 * evil.example: its requests are "same-origin" (Origin equals Host) and
 * would pass the Origin check. Only the Host header tells them apart.
 * Pure string logic, no libwebsockets, so that unit tests reach it. */
#ifndef GLOVEBOX_HOSTCHECK_H
#define GLOVEBOX_HOSTCHECK_H

#include <stdbool.h>
#include <stddef.h>

/* Longest Host header considered (a DNS name is at most 253 bytes). */
#define HOSTCHECK_MAX 320

/* Copies the name of "name[:port]" or "[v6][:port]" to out, lower-cased,
 * without brackets, port or one trailing dot. Returns 0; -EINVAL when the
 * authority is malformed (bad characters, a port that is not a number);
 * -E2BIG when the name does not fit in size. */
int hostcheck_name(const char *authority, char *out, size_t size);

/* Is listen_host (the --listen address or name) reachable only from this
 * machine? */
bool hostcheck_is_loopback(const char *listen_host);

/* May a gateway listening on listen_host serve a request whose Host is
 * authority? allow_list is --allow-host: comma-separated names (a port on
 * an entry is ignored), or '*' for any. Accepted: 'localhost', a loopback
 * address, the listen host itself, the allowed names, and, when the
 * gateway listens beyond loopback, any IP address. */
bool hostcheck_allowed(const char *authority, const char *listen_host, const char *allow_list);

#endif
