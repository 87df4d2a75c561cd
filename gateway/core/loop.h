/* The gateway's one event loop: libwebsockets' poll loop, which also watches
 * the other file descriptors we care about (ZMQ sockets, the kernel-host
 * link, the signalfd) through one epoll set of ours, adopted as a raw file,
 * and runs timers. */
#ifndef GLOVEBOX_LOOP_H
#define GLOVEBOX_LOOP_H

#include <libwebsockets.h>
#include <stdbool.h>

struct loop_watch;
typedef void (*loop_watch_fn)(void *arg);

/* The context every watch and timer belongs to; set once at start. */
void loop_set_context(struct lws_context *ctx);
struct lws_context *loop_context(void);
/* The raw-file protocol the loop needs in the vhost's protocol list. */
int loop_protocol_callback(struct lws *wsi, enum lws_callback_reasons reason, void *user,
                           void *in, size_t len);
#define LOOP_PROTOCOL_NAME "glovebox-fd"

/* Calls fn(arg) whenever fd is readable. fd stays the caller's: the loop
 * watches a duplicate. Returns 0 or -errno. */
int loop_watch_fd(int fd, loop_watch_fn fn, void *arg, struct loop_watch **out);
/* The same, and on_write(arg) runs once the descriptor can take more
 * after each loop_want_write. */
int loop_watch_fd_rw(int fd, loop_watch_fn on_read, loop_watch_fn on_write, void *arg,
                     struct loop_watch **out);
void loop_want_write(struct loop_watch *w);
/* Stops (or resumes) calling the read function: the loop no longer polls
 * for input, so unread input waits in the kernel, not in our memory. */
void loop_pause_read(struct loop_watch *w, bool paused);
/* Stops calling the function at once and releases the watch; nulls *w. */
void loop_unwatch(struct loop_watch **w);

/* Runs fn once, delay_ms from now (0: on the next turn of the loop).
 * Scheduling an already-scheduled timer moves it. */
void loop_timer_start(lws_sorted_usec_list_t *timer, sul_cb_t fn, double delay_ms);
void loop_timer_stop(lws_sorted_usec_list_t *timer);
/* Monotonic seconds, for ordering and ages. */
double loop_now(void);

#endif
