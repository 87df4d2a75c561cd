/* Which of a kernel's limits this host can enforce. The memory_mb, cpus and
 * pids limits each need a cgroup controller that the kernel-host may lack
 * (a systemd service without Delegate=yes has no cpu controller; the
 * kernel-host says which it has in its hello, protocol/hostmsg.h); disk_mb
 * is the size of the sandbox's tmpfs and needs none. A request for a limit
 * the host cannot enforce is refused, never accepted and ignored. */
#ifndef GLOVEBOX_LIMITS_H
#define GLOVEBOX_LIMITS_H

#include "protocol/hostmsg.h"

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

/* 0 when every limit named in requested (a request's "limits" object, or
 * NULL) can be enforced with controllers (enum hostmsg_controller bits);
 * else -EPERM, and err names the first limit that cannot and the
 * controller it needs. */
int limits_refusal(json_t *requested, unsigned controllers, char *err, size_t errlen);

/* A new array of the names of the limits not enforced: those whose
 * controller is not in controllers, or all of them without a sandbox. */
json_t *limits_not_enforced(unsigned controllers, bool sandboxed);

/* limits as a state record keeps them (a paused sandbox's or kernel's, a
 * snapshot's): {"memory_mb", "cpu_millis", "pids", "disk_mb"}; NULL when
 * out of memory. And back: what the record holds into out (0 for any
 * missing). */
json_t *limits_record(const struct hostmsg_limits *l);
void limits_from_record(json_t *record, struct hostmsg_limits *out);

#endif
