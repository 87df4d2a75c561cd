/* E2B's passwordless sudo in each E2B sandbox: the service of
 * glovebox-sudo (kernel-host/sudo_main.c), run as the sandbox's root, that
 * the sandbox's sudo command asks. Started when the sandbox's box is made
 * (and again at each resume). The sandbox's create (or resume) does not
 * wait for it: its first `sudo` does (E2B_SANDBOX=true, which an E2B
 * sandbox's commands and kernels have, tells sudo that a service is on its
 * way), so that a create is not held by a start in the sandbox. */
#ifndef GLOVEBOX_E2B_SUDO_H
#define GLOVEBOX_E2B_SUDO_H

#include "gateway/e2b/sandbox.h"

/* Hears that s's service listens now, or failed to start (logged): once
 * per start. */
typedef void (*e2b_sudo_fn)(struct e2b_sandbox *s);

/* Starts the service in s->box; s->sudo follows it. done (or NULL) is
 * called later, unless the start failed at once (-errno, logged, s->sudo is
 * E2B_SUDO_FAILED). */
int e2b_sudo_start(struct e2b_sandbox *s, e2b_sudo_fn done);

#endif
