/* One who waits for something to be ready or to end (a kernel:
 * kernels/kernels.h), and is told once. What it waits on queues it and
 * calls done; cancel, which what queued it sets, takes it off the queue
 * when the waiter goes first (an HTTP request whose client left: core only
 * ever cancels). Neither frees the waiter: it is its owner's. */
#ifndef GLOVEBOX_WAITER_H
#define GLOVEBOX_WAITER_H

#include <stddef.h>

struct waiter;

/* subject is what was waited on, valid during the call; status 0 is
 * success, else an HTTP-style status with message. */
typedef void (*waiter_fn)(struct waiter *w, void *subject, int status, const char *message);

struct waiter {
        struct waiter *next;
        void *on; /* what it is queued on, or NULL */
        void (*cancel)(struct waiter *w);
        waiter_fn done;
};

/* Takes w off whatever queue holds it; nothing when none does. */
static inline void waiter_cancel(struct waiter *w)
{
        if (w->on && w->cancel)
                w->cancel(w);
}

#endif
