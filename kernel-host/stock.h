/* Sandboxes made ahead (docs/performance.md#sandboxes-made-ahead).
 *
 * Most requests for a sandbox are alike: the host's form, no template,
 * volume or network, the same read-only paths and disk. Once one such
 * request has been served, the kernel-host keeps up to N sandboxes of its
 * shape made ahead (namespaces, mounts, cgroup, init), while its link is
 * quiet, at the least CPU weight; the next request of that shape claims
 * one: its id and limits applied to the cgroup, which is all that is left
 * of making it. A request of another shape is made as before. */
#ifndef GLOVEBOX_STOCK_H
#define GLOVEBOX_STOCK_H

#include "protocol/hostmsg.h"

#include <stdbool.h>
#include <sys/types.h>

#define STOCK_MAX 64

struct box;

/* Keeps up to n sandboxes made ahead (at most STOCK_MAX; 0: none). */
void stock_init(unsigned n);
/* A sandbox made ahead for req, given its id, limits and CPU weight: the
 * caller's from now on, to list (spawn_box_add) or unmake. NULL when none
 * of req's shape is ready (req's shape is the one made ahead from now on)
 * or the one taken could not be given req's limits (it is removed): the
 * caller makes one. */
struct box *stock_claim(const struct hostmsg_sandbox *req);
/* How long the main loop may sleep before stock_fill has something to do
 * (-1: nothing). */
int stock_due_ms(void);
/* A message from the gateway arrived, or a start is still under way:
 * nothing is made ahead until the kernel-host has been quiet a while. */
void stock_busy(void);
/* Makes one sandbox ahead, or removes one of an old shape, if due. */
void stock_fill(void);
/* True when pid was the init of a sandbox made ahead (it is dropped). */
bool stock_reaped(pid_t pid);
/* Kills and removes every sandbox made ahead. */
void stock_stop_all(void);

#endif
