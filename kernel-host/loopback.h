#ifndef GLOVEBOX_KERNEL_HOST_LOOPBACK_H
#define GLOVEBOX_KERNEL_HOST_LOOPBACK_H

/* Brings up lo, the only interface of a new network namespace, in the
 * caller's: a sandbox's at its creation (sandbox.c), a restored one's
 * (criu_action_main.c). Async-signal-safe. 0 or -1. */
int loopback_up(void);

#endif
